"""The dense-caption benchmarks DOCCI, DCI, Long-DCI and Urban-1K: one small spec each, loaded by shared code.

Each is declared once in :mod:`hnbench.registry` (its spec module and its dataset name);
:data:`BENCHMARKS` maps names to :class:`BenchmarkSpec` and is read at call time (tests swap specs in it).
"""

from __future__ import annotations

from typing import Any

from hnbench.data.base import ImageTextDataset
from hnbench.data.benchmarks.protocol import Protocol, SplitList
from hnbench.data.benchmarks.spec import BenchmarkSpec, Resource, load_benchmark
from hnbench.errors import unknown_name
from hnbench.registry import BENCHMARK_SPECS

__all__ = ["BENCHMARKS", "BenchmarkSpec", "Protocol", "Resource", "SplitList", "get_benchmark", "load"]

BENCHMARKS: dict[str, BenchmarkSpec] = {name: BENCHMARK_SPECS.get(name) for name in BENCHMARK_SPECS.names()}


def get_benchmark(name: str) -> BenchmarkSpec:
    """The spec registered as ``name``; unknown names answer with "did you mean"."""
    spec = BENCHMARKS.get(name.lower())
    if spec is None:
        raise unknown_name("benchmark", name, BENCHMARKS)
    return spec


def load(name: str, **kwargs: Any) -> ImageTextDataset:
    """Load benchmark ``name``; keyword arguments as :func:`~hnbench.data.benchmarks.spec.load_benchmark`."""
    return load_benchmark(get_benchmark(name), **kwargs)
