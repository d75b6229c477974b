"""Caption sets: what hardness needs of a data source (captions grouped by image, optional images and
labels), read from a caption file or a loaded dataset."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hnbench.data.base import ImageSource, ImageTextDataset, is_blank_caption
from hnbench.data.local import CAPTION_COLUMNS
from hnbench.errors import DataError
from hnbench.io import read_rows, read_text_utf8

AUTO_LABEL_FIELDS = ("family",)


@dataclass
class CaptionSet:
    """What hardness needs of a data source: captions grouped by image, optional images and labels."""

    name: str
    captions: list[str]
    caption_ids: list[str]
    caption_image: np.ndarray
    image_ids: list[str]
    images: ImageSource | None = None
    labels: list[str] | None = None  # one per image
    label_field: str | None = None
    protocol: str | None = None
    source: str | None = None
    fingerprint: str = ""
    kind: str = "dataset"


def text_fingerprint(captions: Sequence[str]) -> str:
    """A short SHA-256 of the captions in order (the identity of a caption list without a dataset)."""
    h = hashlib.sha256()
    for c in captions:
        h.update(c.encode() + b"\0")
    return h.hexdigest()[:16]


def load_captions(path: str | Path, *, column: str | None = None, label_field: str | None = None) -> CaptionSet:
    """A caption list: a text file (one caption a line; ids ``line<N>``) or a CSV/TSV/JSONL with a caption
    column (``caption``, ``text``, ...; a JSONL list value is several captions of one item) and optional
    ``id`` and ``label_field`` columns."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"caption file not found: {path}")
    if path.suffix not in (".csv", ".tsv", ".jsonl"):
        # split on "\n" only (U+2028 may be inside a caption, as in JSONL); blank = the tokenizer sees no word
        lines = [(n, ln.strip()) for n, ln in enumerate(read_text_utf8(path).split("\n"), 1)]
        kept = [(n, c) for n, c in lines if c and not is_blank_caption(c)]
        if not kept:
            raise DataError(f"{path}: no captions")
        ids = [f"line{n}" for n, _ in kept]
        return CaptionSet(path.stem, [c for _, c in kept], ids, np.arange(len(kept)), ids, source=str(path),
                          fingerprint=text_fingerprint([c for _, c in kept]), kind="captions")
    rows, _ = read_rows(path)
    if not rows:
        raise DataError(f"{path}: no rows")
    columns = list(rows[0])
    col = column or next((c for c in CAPTION_COLUMNS if c in columns), None)
    if col is None or col not in columns:
        raise DataError(f"{path}: no caption column (looked for {column or list(CAPTION_COLUMNS)}); columns are {columns}")
    if label_field and label_field not in columns:
        raise DataError(f"{path}: no label column {label_field!r}; columns are {columns}")
    captions, caption_ids, caption_image, image_ids, labels = [], [], [], [], []
    for n, row in enumerate(rows):
        value = row.get(col)  # a JSONL row may lack the column: nothing to keep from it
        texts = value if isinstance(value, list) else [value]
        texts = [t for t in texts if isinstance(t, str) and t.strip() and not is_blank_caption(t)]
        if not texts:
            continue
        item = str(row["id"]) if row.get("id") not in (None, "") else f"row{n + 1}"
        image_ids.append(item)
        labels.append(str(row.get(label_field)) if label_field else "")
        for j, t in enumerate(texts):
            captions.append(t.strip())
            caption_ids.append(item if len(texts) == 1 else f"{item}#{j}")
            caption_image.append(len(image_ids) - 1)
    return CaptionSet(path.stem, captions, caption_ids, np.asarray(caption_image, np.int64), image_ids,
                      labels=labels if label_field else None, label_field=label_field, source=str(path),
                      fingerprint=text_fingerprint(captions), kind="captions")


def image_labels(ds: ImageTextDataset, field: str, *, required: bool = True) -> list[str] | None:
    """Per-image values of ``field`` read from the dataset's manifest (``metadata.jsonl``/CSV), e.g.
    synthdense's ``family``; None (or an error when ``required``) if the manifest lacks it."""
    src = Path(ds.source) if ds.source else None
    rows = read_rows(src)[0] if src is not None and src.is_file() and src.suffix in (".jsonl", ".csv", ".tsv") else []
    image_col = (ds.meta.get("columns") or [None])[0]  # the image column the loader picked (hnbench.data.local)
    by_id: dict[str, str] = {}
    for row in rows:
        if field not in row:
            continue
        key = row.get("id") if row.get("id") not in (None, "") else row.get(image_col)  # as the loader's image ids
        by_id[str(key)] = str(row[field])
    missing = [i for i in ds.image_ids if i not in by_id]
    if missing:
        if required:
            raise DataError(f"{ds.name}: label field {field!r} not found for {len(missing)} of {ds.n_images} "
                            f"images (e.g. {missing[0]!r}) in {src or 'the dataset (no manifest)'}")
        return None
    return [by_id[i] for i in ds.image_ids]


def from_dataset(ds: ImageTextDataset, label_field: str | None = "auto") -> CaptionSet:
    """The caption set of a loaded dataset; ``label_field="auto"`` picks ``family`` when the manifest has it."""
    labels, used = None, None
    if label_field == "auto":
        for f in AUTO_LABEL_FIELDS:
            labels = image_labels(ds, f, required=False)
            if labels is not None:
                used = f
                break
    elif label_field:
        labels, used = image_labels(ds, label_field), label_field
    return CaptionSet(ds.name, list(ds.captions), list(ds.caption_ids), ds.caption_image, list(ds.image_ids),
                      images=ds.images, labels=labels, label_field=used, protocol=ds.protocol, source=ds.source,
                      fingerprint=ds.fingerprint())
