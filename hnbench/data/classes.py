"""Labelled image sets for zero-shot classification (``--task zeroshot``).

Layouts read (:func:`class_layout`):

- **class folders**: ``DIR/<class>/<image>`` (torchvision's ImageFolder; the class index is the folder's
  position in sorted order, numeric order where every folder is a number);
- **ImageNet-1k val**: 1000 WordNet-id folders ``n01440764`` …: class i is the i-th id in sorted order,
  named by open_clip's ``IMAGENET_CLASSNAMES`` (the order open_clip's list follows);
- **ImageNet-V2** (``imagenetv2-*-format-val``): folders ``0`` … ``999``, the folder's number is the
  ImageNet class index, named by ``IMAGENET_CLASSNAMES``;
- **an HF dataset** (``save_to_disk`` folder, parquet, ``hf:ORG/NAME``) with an image column and a label
  column (``--label-column``, default ``label``) of class indices; names from its ``ClassLabel`` feature.

A label (:func:`label_indices`) is a class index, a whole number (``3``, or ``3.0`` from a float column), or a
class name (text, one of the class names); anything else — ``0.9``, ``None``, a word that names no class, a
boolean — is one line naming its row, never cast (``int(0.9)`` would score the image as class 0).

``--class-names FILE`` (one name per line, in class-index order) names the classes of any layout. The
layout, the class count and every class's image count are checked before any model loads
(:func:`check_classes`): an empty class, a class-names file of the wrong length, or WordNet-id folders
that are not ImageNet-1k's 1000 are one line naming them.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hnbench.data.base import FileImages, HFImages, ImageSource
from hnbench.data.benchmarks.readers import IMAGE_SUFFIXES
from hnbench.data.local import IMAGE_COLUMNS, _pick, open_hf
from hnbench.errors import ConfigError, DataError, did_you_mean
from hnbench.io import read_text_utf8
from hnbench.specs import DataSpec

__all__ = ["LabelledImages", "check_classes", "class_layout", "label_indices", "load_classes"]

WNID = re.compile(r"n\d{8}")
N_IMAGENET = 1000


@dataclass
class LabelledImages:
    """Images with a class index each, and the names of the classes."""

    name: str
    images: ImageSource
    labels: np.ndarray  # (n_images,) int64 class indices into class_names
    class_names: list[str]
    protocol: str | None = None
    source: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    skipped: dict[str, list[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.labels = label_indices(self.labels, self.class_names, self.name)
        if len(self.labels) != len(self.images):
            raise DataError(f"{self.name}: {len(self.images)} images but {len(self.labels)} labels")

    @property
    def n_images(self) -> int:
        return len(self.images)

    @property
    def image_ids(self) -> list[str]:
        return self.images.ids

    def fingerprint(self) -> str:
        """16 hex digits of sha256 over image ids, image content digests, labels and class names."""
        h = hashlib.sha256()
        for image_id, digest, label in zip(self.images.ids, self.images.content_digests(range(self.n_images)),
                                           self.labels.tolist()):
            h.update(f"\0{image_id}\0{digest.hex() if digest is not None else 'unreadable'}\0{label}".encode())
        for name in self.class_names:
            h.update(f"\1{name}".encode())
        return h.hexdigest()[:16]

    def drop_images(self, bad: list[int], reason: str = "unreadable image") -> LabelledImages:
        """A copy without the given image positions; the dropped ids are recorded."""
        keep = [i for i in range(self.n_images) if i not in set(bad)]
        skipped = {k: list(v) for k, v in self.skipped.items()}
        skipped.setdefault(reason, []).extend(self.images.ids[i] for i in sorted(bad))
        return LabelledImages(self.name, self.images.subset(keep), self.labels[keep], self.class_names,
                              self.protocol, self.source, dict(self.meta), skipped)


def _shown(value: Any) -> str:
    """A label value as an error shows it: its repr, cut to 40 characters."""
    text = repr(value.item() if isinstance(value, np.generic) else value)
    return text if len(text) <= 40 else text[:39] + "…"


def _label(value: Any) -> int | str | None:
    """A class index (a whole number, ``3.0`` included) or a class name (text); None: neither."""
    if isinstance(value, (bool, np.bool_)):  # an int subclass, but a yes/no, not a class index
        return None
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return int(value) if math.isfinite(value) and float(value).is_integer() else None
    return value if isinstance(value, str) else None


def label_indices(values: Sequence[Any] | np.ndarray, class_names: Sequence[str], where: str) -> np.ndarray:
    """The class index (int64) of every label in ``values``: class indices (whole numbers; ``1.0`` is 1) in
    ``0..len(class_names) - 1``, or class names (text), mapped to their position in ``class_names``.

    Anything else is refused in one line naming its row (``where``: the data and its column): a fraction
    (``0.9`` must not be scored as class 0), None, a boolean, a name that is not a class name, a name two
    classes share, a column mixing indices and names, an index out of range."""
    n = len(class_names)
    arr = values if isinstance(values, np.ndarray) else None
    if arr is not None and arr.dtype.kind in "iu":  # already indices (class folders, a re-made copy): range only
        labels = arr.astype(np.int64, copy=False)
    else:
        parsed = [_label(v) for v in values]
        bad = next((i for i, v in enumerate(parsed) if v is None), None)
        if bad is not None:
            value = values[bad]
            missing = value is None or (isinstance(value, (float, np.floating)) and math.isnan(value))
            what = f"no label ({_shown(value)})" if missing else \
                f"{_shown(value)} is neither a class index (a whole number) nor a class name"
            raise DataError(f"{where}, row {bad}: {what}; every image needs a class index in 0..{n - 1} or one of "
                            f"the {n} class names")
        texts = [i for i, v in enumerate(parsed) if isinstance(v, str)]
        if texts and len(texts) < len(parsed):
            number = next(i for i, v in enumerate(parsed) if not isinstance(v, str))
            raise DataError(f"{where}: labels mix class indices (row {number}: {_shown(values[number])}) and class "
                            f"names (row {texts[0]}: {_shown(values[texts[0]])}); use one or the other")
        if texts:
            position = {name: i for i, name in reversed(list(enumerate(class_names)))}
            shared = {name for name, count in Counter(class_names).items() if count > 1}
            for i, v in enumerate(parsed):
                if v not in position:
                    hint = did_you_mean(str(v), class_names)
                    raise DataError(f"{where}, row {i}: {_shown(v)} is not one of the {n} class names"
                                    + (f"; {hint}" if hint else ""))
                if v in shared:
                    raise DataError(f"{where}, row {i}: {_shown(v)} names more than one class; a label naming it "
                                    "cannot say which (give class indices, or distinct class names)")
            return np.asarray([position[str(v)] for v in parsed], dtype=np.int64)
        indices = [v for v in parsed if isinstance(v, int)]  # all of them: no None, no text
        outside = [i for i, v in enumerate(indices) if not 0 <= v < n]  # before int64 (1e30 is whole too)
        if outside:
            _out_of_range(where, outside[0], indices[outside[0]], n, len(outside))
        return np.asarray(indices, dtype=np.int64)
    rows = np.flatnonzero((labels < 0) | (labels >= n))
    if rows.size:
        _out_of_range(where, int(rows[0]), int(labels[rows[0]]), n, rows.size)
    return labels


def _out_of_range(where: str, row: int, label: int, n: int, count: int) -> None:
    """Refuse a class index outside ``0..n - 1`` (the first of ``count`` such rows)."""
    missing = " (-1: how an HF ClassLabel marks a missing label)" if label == -1 else ""
    raise DataError(f"{where}, row {row}: label {label} lies outside 0..{n - 1} ({n} class names){missing}"
                    + (f"; {count} such rows" if count > 1 else ""))


def _is_hf(path: Path) -> bool:
    return not path.is_dir() or any((path / f).is_file() for f in ("dataset_info.json", "dataset_dict.json")) \
        or any(path.glob("*.parquet"))


def _names_file(path: str | None) -> list[str] | None:
    if path is None:
        return None
    if not Path(path).is_file():
        raise ConfigError(f"--class-names {path}: no such file (one class name per line, in class-index order)")
    names = [line.strip() for line in read_text_utf8(Path(path)).splitlines() if line.strip()]
    if not names:
        raise ConfigError(f"--class-names {path}: no class name in it (one per line, in class-index order)")
    return names


def class_layout(root: str | os.PathLike[str], class_names: str | None = None
                 ) -> tuple[str, list[tuple[str, list[str]]], list[str]]:
    """``(layout, [(class folder, image files)] in class-index order, class names)`` of a class-folder tree."""
    base = Path(root)
    folders = sorted(p.name for p in base.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not folders:
        raise ConfigError(f"{base}: no class folders (DIR/<class>/<image>) in it")
    given = _names_file(class_names)
    if all(WNID.fullmatch(f) for f in folders):
        if len(folders) != N_IMAGENET and given is None:
            raise ConfigError(f"{base}: {len(folders)} WordNet-id folders, but ImageNet-1k has {N_IMAGENET}; "
                              "give --class-names FILE (one name per line, in sorted folder order)")
        layout = "imagenet-1k"
    elif all(f.isdigit() for f in folders):
        folders.sort(key=int)
        layout = "imagenet-v2" if [int(f) for f in folders] == list(range(N_IMAGENET)) else "class-folders"
    else:
        layout = "class-folders"
    if given is not None and len(given) != len(folders):
        raise ConfigError(f"--class-names {class_names}: {len(given)} names for {len(folders)} class folders in {base}")
    if given is not None:
        names = given
    elif layout in ("imagenet-1k", "imagenet-v2"):
        from open_clip import IMAGENET_CLASSNAMES  # heavy (open_clip imports torch): only for these layouts

        names = list(IMAGENET_CLASSNAMES)
    else:
        names = [f.replace("_", " ") for f in folders]
    classes = [(f, sorted(str(p) for p in (base / f).iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file()))
               for f in folders]
    return layout, classes, names


def check_classes(spec: DataSpec, class_names: str | None = None, label_column: str | None = None) -> None:
    """Refuse, before any model loads, a labelled set that cannot be scored (one line naming what is wrong);
    ``class_names``, ``label_column``: :class:`hnbench.tasks.zeroshot.ClassOptions`."""
    assert spec.dataset is not None  # DataSpec.validate refuses a spec without one
    path = Path(spec.dataset)
    if not path.exists() and not spec.dataset.startswith("hf:"):
        raise ConfigError(f"{spec.dataset}: no such class folder or dataset (a DIR/<class>/<image> tree, an HF "
                          "dataset folder or parquet, or hf:ORG/NAME)")
    if _is_hf(path):
        if spec.caption_column is not None:
            raise ConfigError("--caption-column is not read by --task zeroshot (give --label-column)")
        _names_file(class_names)
        return
    _, classes, _ = class_layout(path, class_names)
    empty = [f for f, files in classes if not files]
    if empty:
        raise ConfigError(f"{path}: {len(empty)} empty class folder{'s' * (len(empty) > 1)} (no "
                          f"{'/'.join(IMAGE_SUFFIXES)} image): {', '.join(empty[:10])}{' …' if len(empty) > 10 else ''}")


def load_classes(spec: DataSpec, class_names: str | None = None, label_column: str | None = None) -> LabelledImages:
    """The labelled set of ``spec`` (checked by :func:`check_classes` first) with the zero-shot data options
    (:class:`hnbench.tasks.zeroshot.ClassOptions`)."""
    check_classes(spec, class_names, label_column)
    assert spec.dataset is not None
    path = Path(spec.dataset)
    if _is_hf(path):
        return _load_hf(spec, class_names, label_column)
    layout, classes, names = class_layout(path, class_names)
    files = [(f, p) for f, paths in classes for p in paths]
    labels = [i for i, (_, paths) in enumerate(classes) for _ in paths]
    images = FileImages([p for _, p in files], [f"{f}/{Path(p).name}" for f, p in files])
    return LabelledImages(spec.name or path.resolve().name, images, np.asarray(labels), names, source=str(path),
                          meta={"format": layout, "n_classes": len(names),
                                "class_names": "file" if class_names else "imagenet" if layout != "class-folders"
                                else "folders"})


def _load_hf(spec: DataSpec, class_names: str | None, label_column: str | None) -> LabelledImages:
    assert spec.dataset is not None
    ds, split = open_hf(spec.dataset.removeprefix("hf:") if not Path(spec.dataset).exists() else spec.dataset,
                        split=spec.split)
    columns = list(ds.column_names)
    img_col = _pick(columns, spec.image_column, IMAGE_COLUMNS, "image", spec.dataset)
    label_col = _pick(columns, label_column, ("label", "labels", "class", "target"), "label", spec.dataset)
    names = _names_file(class_names)
    if names is None:
        feature = ds.features[label_col]
        names = list(getattr(feature, "names", None) or [])
        if not names:
            raise ConfigError(f"{spec.dataset}: column {label_col!r} carries no class names; give --class-names FILE "
                              "(one name per line, in class-index order)")
    labels = label_indices(list(ds[label_col]), names, f"{spec.dataset}: label column {label_col!r}")
    ids = [str(i) for i in range(len(ds))]
    return LabelledImages(spec.name or Path(spec.dataset).name, HFImages(ds, img_col, ids), labels, names,
                          source=spec.dataset, meta={"format": "hf", "split": split, "columns": [img_col, label_col],
                                                     "n_classes": len(names)})
