"""Readers for generic local formats: JSONL/CSV manifests, image folders, Hugging Face datasets.

- **Manifest** (``.jsonl`` or ``.csv``): one row per image (or per image–caption pair) with
  columns ``image`` (a path relative to the manifest file) and ``caption`` (a string; in JSONL also
  a list of strings). An optional ``id`` column names the image; otherwise its path is the id.
  Rows naming the same image are merged into one multi-caption image.
- **Image folder**: a directory with ``metadata.jsonl`` (or ``metadata.csv``) whose ``file_name``
  column holds the image path relative to the directory — the Hugging Face ``imagefolder``
  convention.
- **Hugging Face dataset**: a hub id, a directory written by ``Dataset.save_to_disk``, or a
  directory / file of parquet shards, read with ``datasets``; ``image_column`` holds an ``Image``
  feature (or bytes / paths), ``caption_column`` a string or a list of strings.

A set's name (in results and tables; ``--name`` sets it) defaults to the manifest's file stem or the image
folder's name, unless that name says what the file is rather than which data it holds
(:data:`GENERIC_NAMES`: ``captions.jsonl``, ``metadata.csv``, a folder ``test/``): then the folder(s) above
name it (``realset/captions.jsonl`` is ``realset``, ``realset/test/`` is ``realset-test``). How the name
was chosen is recorded (``meta["name_from"]``: ``--name``, ``file`` or ``folder``) and ``hnbench eval`` says it.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from hnbench.data.base import FileImages, HFImages, ImageTextDataset, build_dataset, check_inside
from hnbench.errors import DataError
from hnbench.io import Problems, read_rows

logger = logging.getLogger(__name__)

IMAGE_COLUMNS = ("image", "file_name", "filepath", "image_path", "path")
#: file stems and folder names that say what a file is, not which data it holds: a set named by one would
#: share its name with everyone else's (``captions.jsonl``, ``metadata.csv``, ``data/``, ``test/``)
GENERIC_NAMES = frozenset({"annotations", "caption", "captions", "data", "dataset", "images", "manifest", "metadata",
                           "test", "train", "val", "valid", "validation"})
_MAX_FOLDERS = 2  # folders joined into a default name (realset/test/captions.jsonl: realset-test)
CAPTION_COLUMNS = ("caption", "text", "description", "title", "captions")


def _pick(columns: list[str], wanted: str | None, candidates: tuple[str, ...], what: str, where: str) -> str:
    if wanted is not None:
        if wanted not in columns:
            raise DataError(f"{where}: no {what} column {wanted!r}; columns are {columns}")
        return wanted
    for c in candidates:
        if c in columns:
            return c
    flag = {"image": "--image-column", "label": "--label-column"}.get(what, "--caption-column")
    raise DataError(f"{where}: no {what} column (looked for {list(candidates)}); columns are {columns}. "
                    f"Name it with {flag}.")


def default_name(path: Path, *, folder: bool = False) -> tuple[str, str]:
    """``(name, where it comes from)`` of a set read from ``path`` without ``--name``: a manifest's file stem
    (``"file"``) or an image folder's name (``folder``), unless generic (:data:`GENERIC_NAMES`); then the
    nearest folder above that is not (``"folder"``), with the generic folders between (at most
    :data:`_MAX_FOLDERS` folders): ``realset/captions.jsonl`` is ``realset``, ``realset/test/captions.jsonl`` and
    the image folder ``realset/test/`` are ``realset-test``. With no folder above, the path's own name."""
    own = path.name if folder else path.stem
    if own.lower() not in GENERIC_NAMES:
        return own, "folder" if folder else "file"
    names: list[str] = []
    for above in Path(os.path.abspath(path)).parents[:_MAX_FOLDERS]:
        if not above.name:  # the root
            break
        names.insert(0, above.name)
        if above.name.lower() not in GENERIC_NAMES:
            break
    names += [own] if folder and names else []
    return ("-".join(names), "folder") if names else (own, "folder" if folder else "file")


def _warn_duplicates(path: Path, rows: list[dict[str, Any]], lines: list[int]) -> None:
    """Rows that repeat an earlier row exactly become extra captions of their image: say so, with the count."""
    seen: dict[str, int] = {}
    repeats = []
    for row, n in zip(rows, lines):
        key = json.dumps(row, sort_keys=True, default=str)
        if key in seen:
            repeats.append((n, seen[key]))
        else:
            seen[key] = n
    if repeats:
        n, first = repeats[0]
        logger.warning("%s: %d rows repeat an earlier row exactly (e.g. line %d = line %d); each is kept as one "
                       "more caption of its image; remove them if they are accidental", path, len(repeats), n,
                       first)


def load_manifest(
    path: str | Path,
    *,
    image_column: str | None = None,
    caption_column: str | None = None,
    name: str | None = None,
    skip_invalid: bool = False,
    base_dir: str | Path | None = None,
    allow_outside_paths: bool = False,
) -> ImageTextDataset:
    """Load a JSONL/CSV manifest; image paths are relative to ``base_dir`` (default: the manifest's folder).

    An image path that leaves that folder (``../``, or absolute elsewhere) is refused unless
    ``allow_outside_paths``: manifests are often downloaded, and one could read any file.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"manifest not found: {path}")
    problems = Problems(str(path))  # every bad row, with its line, in one error (read, then each row's values)
    rows, lines = read_rows(path, problems)
    if not rows:
        problems.check()
        raise DataError(f"{path}: manifest has no rows")
    columns = sorted(set().union(*(r.keys() for r in rows)))
    img_col = _pick(columns, image_column, IMAGE_COLUMNS, "image", str(path))
    cap_col = _pick(columns, caption_column, CAPTION_COLUMNS, "caption", str(path))
    base = Path(base_dir) if base_dir is not None else path.parent
    _warn_duplicates(path, rows, lines)
    records, where = [], []
    for n, row in zip(lines, rows):
        ref = row.get(img_col)
        if not isinstance(ref, str) or not ref:
            problems.add(f"{path}:{n}", f"row has no {img_col!r} value")
            continue
        if not allow_outside_paths:
            try:
                check_inside(base, ref, f"{path}:{n}", "this manifest")
            except DataError as e:
                problems.add(None, str(e))
                continue
        texts = row.get(cap_col)
        texts = texts if isinstance(texts, list) else [texts if texts is not None else ""]
        image_id = str(row["id"]) if row.get("id") not in (None, "") else ref
        records.append((image_id, str(base / ref), texts))
        where.append(f"{path}:{n}")
    name, name_from = (name, "--name") if name else default_name(path)
    return build_dataset(name, records, make_source=FileImages, skip_invalid=skip_invalid,
                         source=str(path), meta={"format": "manifest", "columns": [img_col, cap_col],
                                                 "name_from": name_from},
                         where=where, problems=problems)


def load_imagefolder(directory: str | Path, **kwargs: Any) -> ImageTextDataset:
    """Load an image folder described by ``metadata.jsonl`` / ``metadata.csv`` (``file_name`` column)."""
    directory = Path(directory)
    for meta in ("metadata.jsonl", "metadata.csv"):
        if (directory / meta).is_file():
            given = kwargs.get("name") is not None
            if not given:
                kwargs["name"], name_from = default_name(directory, folder=True)
            ds = load_manifest(directory / meta, **kwargs)
            ds.meta["format"] = "imagefolder"
            ds.meta["name_from"] = "--name" if given else name_from
            return ds
    raise DataError(f"{directory}: no metadata.jsonl or metadata.csv (image-folder format)")


def open_hf(path: str, *, split: str | None = None, revision: str | None = None) -> tuple[Any, str | None]:
    """``(dataset, split)`` of a Hugging Face hub id, ``save_to_disk`` directory, or parquet files/folder (a
    DatasetDict's ``split``: the one given, else ``test``, else its only split)."""
    import datasets

    p = Path(path)
    if p.is_dir() and ((p / "dataset_info.json").is_file() or (p / "dataset_dict.json").is_file()):
        obj = datasets.load_from_disk(str(p))
    elif p.is_dir() and any(p.rglob("*.parquet")):
        files = sorted(str(f) for f in p.rglob("*.parquet"))
        obj = datasets.load_dataset("parquet", data_files=files)
    elif p.is_file() and p.suffix == ".parquet":
        obj = datasets.load_dataset("parquet", data_files=[str(p)])
    else:  # a hub id (needs the internet unless already in HF_HOME)
        obj = datasets.load_dataset(path, revision=revision)
    if isinstance(obj, datasets.DatasetDict):
        splits = list(obj.keys())
        chosen = split or ("test" if "test" in splits else splits[0] if len(splits) == 1 else None)
        if chosen is None or chosen not in obj:
            raise DataError(f"{path}: choose a split with --split; available: {splits}")
        ds = obj[chosen]
    else:
        ds, chosen = obj, split
    return ds, chosen


def load_hf(
    path: str,
    *,
    split: str | None = None,
    image_column: str | None = None,
    caption_column: str | None = None,
    id_column: str | None = None,
    name: str | None = None,
    skip_invalid: bool = False,
    revision: str | None = None,
) -> ImageTextDataset:
    """Load a Hugging Face dataset: hub id, ``save_to_disk`` directory, or parquet files/folder."""
    p = Path(path)
    ds, chosen = open_hf(path, split=split, revision=revision)
    columns = list(ds.column_names)
    img_col = _pick(columns, image_column, IMAGE_COLUMNS, "image", path)
    cap_col = _pick(columns, caption_column, CAPTION_COLUMNS, "caption", path)
    if id_column is None and "id" in columns:
        id_column = "id"
    ids = [str(x) for x in ds[id_column]] if id_column else [str(i) for i in range(len(ds))]
    caption_values = ds[cap_col]
    records = [(ids[i], str(i), v if isinstance(v, list) else [v if v is not None else ""])
               for i, v in enumerate(caption_values)]

    def make_source(refs: list[str], kept_ids: list[str]) -> HFImages:
        return HFImages(ds, img_col, kept_ids, rows=[int(r) for r in refs])

    return build_dataset(name or p.name or path, records, make_source=make_source, skip_invalid=skip_invalid,
                         source=str(path),
                         meta={"format": "hf", "split": chosen, "columns": [img_col, cap_col], "revision": revision})
