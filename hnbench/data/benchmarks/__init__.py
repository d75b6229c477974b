"""The registered benchmarks (DOCCI, DCI, Long-DCI, Urban-1K, COCO, Flickr30k, ShareGPT4V, IIW, the compositional
sets): one small spec each, loaded by shared code.

Each is declared once, as its spec, in :data:`hnbench.registry.BENCHMARK_SPECS` (a plugin registers its own there);
:data:`BENCHMARKS` is a live view of it by name (setting an entry registers that spec: tests swap specs in it).
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any

from hnbench.data.base import ImageTextDataset
from hnbench.data.benchmarks.protocol import Protocol, SplitList
from hnbench.data.benchmarks.spec import BenchmarkSpec, Resource, load_benchmark
from hnbench.errors import ConfigError, unknown_name
from hnbench.registry import BENCHMARK_SPECS, TASKS

__all__ = ["BENCHMARKS", "BenchmarkSpec", "Protocol", "Resource", "SplitList", "get_benchmark", "load"]


class _Benchmarks(MutableMapping[str, BenchmarkSpec]):
    """:data:`hnbench.registry.BENCHMARK_SPECS` as a mapping, read live (a benchmark registered later is in it)."""

    def __getitem__(self, name: str) -> BenchmarkSpec:
        if name not in BENCHMARK_SPECS:
            raise KeyError(name)
        spec: BenchmarkSpec = BENCHMARK_SPECS.get(name)
        return spec

    def __setitem__(self, name: str, spec: BenchmarkSpec) -> None:
        BENCHMARK_SPECS.register(name, spec, help=BENCHMARK_SPECS.help(name) if name in BENCHMARK_SPECS else "")

    def __delitem__(self, name: str) -> None:
        if name not in BENCHMARK_SPECS:
            raise KeyError(name)
        BENCHMARK_SPECS.unregister(name)

    def __iter__(self) -> Iterator[str]:
        return iter(BENCHMARK_SPECS.declared())

    def __len__(self) -> int:
        return len(BENCHMARK_SPECS.declared())


BENCHMARKS: MutableMapping[str, BenchmarkSpec] = _Benchmarks()


def get_benchmark(name: str) -> BenchmarkSpec:
    """The spec registered as ``name``; unknown names answer with "did you mean"."""
    spec = BENCHMARKS.get(name.lower())
    if spec is None:
        raise unknown_name("benchmark", name, list(BENCHMARKS))
    return spec


def load(name: str, **kwargs: Any) -> ImageTextDataset:
    """Load benchmark ``name`` as an image–caption set; keyword arguments as
    :func:`~hnbench.data.benchmarks.spec.load_benchmark`. A benchmark one task scores (its spec's ``task``: the
    option-choice sets) is refused in one line saying which."""
    spec = get_benchmark(name)
    if spec.task is not None:
        noun = TASKS.get(spec.task).data_noun
        raise ConfigError(f"{spec.name} is an {noun}, not an image–caption set: it is scored by --task {spec.task} "
                          f"(hnbench eval --task {spec.task} --dataset {spec.name} ...)")
    return load_benchmark(spec, **kwargs)
