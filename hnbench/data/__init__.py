"""Image–caption sets: the dataset abstraction, generic local readers, built-in benchmarks."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hnbench.data import local
from hnbench.data.base import FileImages, HFImages, ImageSource, ImageTextDataset
from hnbench.errors import DataError
from hnbench.registry import DATASETS
from hnbench.specs import DataSpec, data_kind

__all__ = ["FileImages", "HFImages", "ImageSource", "ImageTextDataset", "load_dataset", "load_spec"]


def load_spec(spec: DataSpec, **extra: Any) -> ImageTextDataset:
    """Check ``spec`` (an option its kind of data does not read is refused), then load it; ``extra``: other
    loader options (e.g. ``expected_counts``)."""
    spec.validate()
    assert spec.dataset is not None  # check() refuses a spec without one
    return load_dataset(spec.dataset, **spec.loader_options(), **extra)


def load_dataset(
    name_or_path: str | os.PathLike[str],
    *,
    data_root: str | None = None,
    protocol: str | None = None,
    split: str | None = None,
    image_column: str | None = None,
    caption_column: str | None = None,
    name: str | None = None,
    skip_invalid: bool = False,
    allow_outside_paths: bool = False,
    **kwargs: Any,
) -> ImageTextDataset:
    """Load a registered benchmark by name, or a local manifest / image folder / HF dataset by path.

    Resolution order (:func:`hnbench.specs.data_kind`): a registered name (``synthdense``, …); an existing
    ``.jsonl``/``.csv`` manifest; a directory with ``metadata.jsonl``/``.csv`` (image folder); a directory
    or file that ``datasets`` can read (``save_to_disk`` output, parquet); otherwise a Hugging Face hub id
    written ``hf:ORG/NAME`` (or ``ORG/NAME``). A manifest's or a benchmark release's image paths must
    stay inside its folder (the data root) unless ``allow_outside_paths``. ``name`` labels a manifest,
    image folder or HF set (default: its file or folder name). The options each kind reads are declared
    on :class:`hnbench.specs.DataSpec`'s fields (``DataSpec.load`` refuses the others before loading).
    """
    columns = {"image_column": image_column, "caption_column": caption_column, "name": name}
    name_or_path = os.fspath(name_or_path)
    kind = data_kind(name_or_path)
    if kind in ("benchmark", "generated"):
        return DATASETS.get(name_or_path)(data_root=data_root, protocol=protocol, split=split,
                                          skip_invalid=skip_invalid, allow_outside_paths=allow_outside_paths,
                                          **kwargs)
    p = Path(name_or_path)
    if kind == "manifest":
        return local.load_manifest(p, skip_invalid=skip_invalid, allow_outside_paths=allow_outside_paths, **columns)
    if kind == "imagefolder":
        return local.load_imagefolder(p, skip_invalid=skip_invalid, allow_outside_paths=allow_outside_paths,
                                      **columns)
    if kind == "hf":
        path = str(p) if p.exists() else name_or_path.removeprefix("hf:")
        return local.load_hf(path, split=split, skip_invalid=skip_invalid, **columns)
    if "/" in name_or_path or name_or_path.endswith((".jsonl", ".csv")):
        raise DataError(f"dataset path not found: {name_or_path}")
    raise DATASETS.error(name_or_path)
