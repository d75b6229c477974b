"""``synthdense`` as a registered dataset: generated once into the cache, then read as an image folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hnbench.data.base import ImageTextDataset
from hnbench.data.local import load_imagefolder
from hnbench.data.synthdense import SynthDenseConfig, generate_synthdense
from hnbench.errors import ConfigError
from hnbench.io import cache_dir
from hnbench.sidecars import OUTLINES, SEGMENT_GEOMETRY

PROTOCOLS = ("test", "train")
DEFAULT_PROTOCOL = "test"
# the compositional variant's protocols (option-choice items, --task choice: hnbench.data.synthdense_choice)
CHOICE_PROTOCOLS = ("compositional", "swap-att", "swap-rel", "replace-obj", "reorder")


def synthdense_dir(config: SynthDenseConfig, data_root: str | Path | None = None) -> Path:
    """Where the benchmark for ``config`` lives: ``DATA_ROOT`` or ``<cache>/synthdense/<fingerprint>``."""
    if data_root is not None:
        return Path(data_root)
    return cache_dir() / "synthdense" / config.fingerprint()


def load_synthdense(
    data_root: str | None = None,
    protocol: str | None = None,
    split: str | None = None,
    skip_invalid: bool = False,
    config: SynthDenseConfig | None = None,
    progress: bool = False,
    allow_outside_paths: bool = False,
    **overrides: Any,
) -> ImageTextDataset:
    """Load (generating on first use) a split of the synthetic dense-caption benchmark.

    The protocol is the split name (``test`` by default, or ``train``). ``overrides`` are
    :class:`~hnbench.data.synthdense.SynthDenseConfig` fields (``seed``, ``n_families``, …).
    """
    protocol = protocol or split or DEFAULT_PROTOCOL
    if protocol not in PROTOCOLS:
        also = (f"; {protocol!r} is a protocol of its compositional variant, scored by --task choice"
                if protocol in CHOICE_PROTOCOLS else
                f" (its compositional variant, --task choice: {', '.join(CHOICE_PROTOCOLS)})")
        raise ConfigError(f"synthdense has protocols {list(PROTOCOLS)}, not {protocol!r}{also}")
    config = config or SynthDenseConfig(**overrides)
    root = generate_synthdense(synthdense_dir(config, data_root), config, progress=progress)
    ds = load_imagefolder(root / protocol, name="synthdense", skip_invalid=skip_invalid,
                          allow_outside_paths=allow_outside_paths)
    ds.protocol = protocol
    ds.meta.update({"generator_fingerprint": config.fingerprint(), "root": str(root)})
    ds.side_inputs = frozenset({SEGMENT_GEOMETRY, OUTLINES})  # its metadata.jsonl holds each scene's geometry
    return ds
