"""What ``--task choice`` reads: the option-choice benchmarks (:mod:`hnbench.data.choices`) and synthdense's
compositional variant (:mod:`hnbench.data.synthdense_choice`), checked before anything loads, then loaded."""

from __future__ import annotations

from typing import Any

from hnbench.data.benchmarks import BENCHMARKS, get_benchmark
from hnbench.data.choices import TASK, ChoiceSet, load_choice_benchmark
from hnbench.data.synthdense_choice import PROTOCOLS, load_synthdense_choices
from hnbench.errors import ConfigError

__all__ = ["check_choices", "choice_benchmarks", "load_choices"]


def _is_choice(spec: Any) -> bool:
    return getattr(spec, "task", None) == TASK


def choice_benchmarks() -> list[str]:
    """The registered benchmarks scored by ``--task choice``."""
    return sorted(name for name, spec in BENCHMARKS.items() if _is_choice(spec))


def check_choices(spec: Any, **options: Any) -> None:
    """Refuse, before anything loads, data ``--task choice`` cannot score: anything but an option-choice
    benchmark or synthdense's compositional protocols, and a protocol the benchmark does not have."""
    name = str(spec.dataset or "")
    known = f"{', '.join(choice_benchmarks())} or synthdense (protocols {', '.join(PROTOCOLS)})"
    if name.lower() == "synthdense":
        protocol = spec.protocol or spec.split
        if protocol is None or protocol not in PROTOCOLS:
            raise ConfigError(f"--task choice on synthdense needs --protocol {' | '.join(PROTOCOLS)} (its compositional "
                              f"variant), not {protocol or 'the default (test, an image–caption set)'}")
        return
    bench = BENCHMARKS.get(name.lower())
    if bench is None or not _is_choice(bench):
        raise ConfigError(f"--task choice scores option-choice items: {known}; {name!r} is "
                          + ("an image–caption benchmark (--task retrieval)" if bench is not None else "not one"))
    bench.protocol(spec.protocol or spec.split)  # an unknown protocol: one line naming the known ones


def load_choices(spec: Any, **options: Any) -> ChoiceSet:
    """The choice task's loader (:attr:`hnbench.tasks.Task.load`): the item set ``spec`` names."""
    spec.validate()
    check_choices(spec)
    opts = {**spec.loader_options(), **options}
    if str(spec.dataset).lower() == "synthdense":
        return load_synthdense_choices(**opts)
    return load_choice_benchmark(get_benchmark(str(spec.dataset)), **opts)
