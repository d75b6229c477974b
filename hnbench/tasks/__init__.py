"""The task contract: what an evaluation task reads, which metrics it writes and which one is its main score.

A task is one module in this package holding a :class:`Task` (its ``TASK``), registered by name in
:data:`hnbench.registry.TASKS`. Everything that handles results asks the task, never a task name:

- ``inputs``: the data it reads (a sentence for help and docs), and ``load``/``run``: lazy ``"module:attr"``
  targets of its data loader (``load(spec, **options)``, called after ``check(spec, **options)``, before
  any model loads; ``options``: a dataclass of the data options only this task reads, its flags generated
  like every other option) and of its pipeline (``run(encoder, data, settings, output_dir, *, ctx, timings, t0, data_spec)``
  → :class:`hnbench.results.EvalResult`); ``check_settings(settings)``: the evaluation settings only it reads
  (zero-shot's ``--templates``), refused before any model or data loads;
- ``groups``: the keys of ``result.metrics`` it writes (retrieval: ``t2i``, ``i2t``), each an object of
  metrics; ``bounds``: the valid range of each metric (by name prefix), which readers check;
- ``main_score``: the name of its main score, the mean of the ``main_of`` metrics (``"group metric"``):
  retrieval's ``mean R@1`` = (t2i R@1 + i2t R@1) / 2, as the leaderboard always ranked;
- ``columns``: the leaderboard columns of its section (``"group metric"``; shown as the metric alone where
  the task has one group); a classification accuracy is never a column beside a recall.
- ``texts``: what its text side encodes (``"captions"``, zero-shot's ``"class prompts"``): only captions' share cut
  by the context (the result's ``tokens`` block) is shown beside the scores as the model's text budget.
- ``per_item``: ``"module:attr"`` of ``check(result, frame) -> [mismatch]`` for a task whose result has a per-item
  file beside it (the choice task's stored scores, read by :func:`hnbench.results.read_per_item`): where the
  JSON's numbers differ from those the file gives; ``ci_rule``: what its intervals are, said under its tables;
  ``sparse_columns``: its columns are the union of its protocols' metrics, a table shows those its rows hold.

This module stays light (no numpy, no torch): reading a result file asks it.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hnbench.errors import ConfigError

__all__ = ["Task"]


@dataclass(frozen=True)
class Task:
    """One evaluation task: its inputs, metrics and main score (see the module docstring)."""

    name: str
    title: str  # the leaderboard section heading
    inputs: str
    groups: tuple[str, ...]
    bounds: Mapping[str, tuple[float, float]]  # metric name prefix → (lowest, highest) valid value
    main_score: str
    main_of: tuple[str, ...]
    columns: tuple[str, ...]
    load: str  # "module:attr" of load(spec: DataSpec, **options)
    run: str  # "module:attr" of the pipeline
    check: str | None = None  # "module:attr" of check(spec, **options): bad input refused before anything loads
    options: str | None = None  # "module:attr" of the dataclass of the data options only this task reads
    # "module:attr" of check_settings(settings): the evaluation settings only this task reads (zero-shot's
    # --templates) refused before any model or data loads
    check_settings: str | None = None
    note: str = ""  # said under the section heading
    # what its texts are: "captions" (its tokens block is the captions' text budget, shown beside its scores on the
    # leaderboard) or another word ("class prompts") for texts that are not captions (the budget is not shown)
    texts: str = "captions"
    per_item: str | None = None  # "module:attr" of check(result, frame): its per-item file against its JSON
    ci_rule: str = ""  # what its 95% intervals are, said under its tables ("": retrieval's rule)
    # its columns are the union of its protocols' metrics (the choice task's): a table shows only those its rows hold
    sparse_columns: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)

    def target(self, which: str) -> Any:
        """The ``load``, ``run``, ``check``, ``check_settings`` or ``per_item`` function (imported now)."""
        ref = getattr(self, which)
        if not ref:
            return None
        module, _, attr = ref.partition(":")
        return getattr(importlib.import_module(module), attr)

    def option_names(self) -> list[str]:
        """The fields of :attr:`options` (the data options only this task reads; flags generated from them)."""
        return [f.name for f in dataclasses.fields(self.target("options"))] if self.options else []

    def check_options(self, options: Mapping[str, Any], tasks: Iterable[Task]) -> dict[str, Any]:
        """This task's own data options among ``options``; an option only another of ``tasks`` reads is refused
        (one line naming its flag and task)."""
        for other in tasks:
            for name in other.option_names() if other.name != self.name else ():
                if options.get(name) is not None:
                    raise ConfigError(f"--{name.replace('_', '-')} is read by --task {other.name} only")
        return {k: v for k, v in options.items() if k in self.option_names()}

    def bound(self, metric: str) -> tuple[float, float] | None:
        """The valid range of ``metric`` (by its longest declared prefix); None: not a checked metric."""
        hits = [p for p in self.bounds if metric.startswith(p)]
        return self.bounds[max(hits, key=len)] if hits else None

    def value(self, metrics: Mapping[str, Any], column: str) -> float:
        """The value of ``"group metric"`` in a result's metrics (NaN where absent or not a number)."""
        group, _, metric = column.partition(" ")
        v = (metrics.get(group) or {}).get(metric) if isinstance(metrics.get(group), Mapping) else None
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan

    def main_value(self, metrics: Mapping[str, Any]) -> float:
        """The main score: the mean of the ``main_of`` metrics (NaN if one is missing)."""
        values = [self.value(metrics, c) for c in self.main_of]
        return sum(values) / len(values)

    def main_record(self, metrics: Mapping[str, Any]) -> dict[str, Any]:
        """``result.main_score``: ``{"name": …, "value": …}`` (value None where it is NaN)."""
        v = self.main_value(metrics)
        return {"name": self.main_score, "value": v if v == v else None}

    def label(self, column: str) -> str:
        """A column's heading: the metric alone where the task writes one group."""
        return column.partition(" ")[2] if len(self.groups) == 1 else column
