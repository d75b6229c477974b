"""The dense-caption benchmarks DOCCI, DCI, Long-DCI and Urban-1K: one small spec each, loaded by shared code.

``load_docci(data_root=..., protocol=...)`` and friends are the registry targets; :data:`BENCHMARKS`
maps names to :class:`BenchmarkSpec` and is read at call time (tests swap specs in it).
"""

from __future__ import annotations

import difflib
from typing import Any

from hnbench.data.base import ImageTextDataset
from hnbench.data.benchmarks.dci import SPEC as DCI
from hnbench.data.benchmarks.docci import SPEC as DOCCI
from hnbench.data.benchmarks.long_dci import SPEC as LONG_DCI
from hnbench.data.benchmarks.spec import BenchmarkSpec, Protocol, Resource, SplitList, load_benchmark
from hnbench.data.benchmarks.urban1k import SPEC as URBAN1K
from hnbench.errors import ConfigError

__all__ = ["BENCHMARKS", "BenchmarkSpec", "Protocol", "Resource", "SplitList", "get_benchmark", "load",
           "load_dci", "load_docci", "load_long_dci", "load_urban1k"]

BENCHMARKS: dict[str, BenchmarkSpec] = {s.name: s for s in (DOCCI, DCI, LONG_DCI, URBAN1K)}


def get_benchmark(name: str) -> BenchmarkSpec:
    """The spec registered as ``name``; unknown names answer with "did you mean"."""
    spec = BENCHMARKS.get(name.lower())
    if spec is None:
        close = difflib.get_close_matches(name.lower(), BENCHMARKS, n=3)
        hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
        raise ConfigError(f"unknown benchmark {name!r}{hint} (known: {', '.join(BENCHMARKS)})")
    return spec


def load(name: str, **kwargs: Any) -> ImageTextDataset:
    """Load benchmark ``name``; keyword arguments as :func:`~hnbench.data.benchmarks.spec.load_benchmark`."""
    return load_benchmark(get_benchmark(name), **kwargs)


def load_docci(**kwargs: Any) -> ImageTextDataset:
    """DOCCI: protocols ``test`` (5,000, default), ``test+qual`` (5,100), ``train``."""
    return load("docci", **kwargs)


def load_dci(**kwargs: Any) -> ImageTextDataset:
    """DCI: protocols ``full`` (7,805, default), ``full-sentences``, ``goal`` (1,999), ``goal-train``."""
    return load("dci", **kwargs)


def load_long_dci(**kwargs: Any) -> ImageTextDataset:
    """Long-DCI: protocols ``tulip`` (7,602, default) and ``goal`` (7,444)."""
    return load("long-dci", **kwargs)


def load_urban1k(**kwargs: Any) -> ImageTextDataset:
    """Urban-1K: protocols ``test`` (1,000, first non-blank line; default) and ``longclip`` (Long-CLIP's reading)."""
    return load("urban1k", **kwargs)
