"""The task contract: what an evaluation task reads, how it runs, which metrics it writes and how they are shown.

A task is one module in this package holding an instance of a :class:`Task` subclass (its ``TASK``), registered by
name in :data:`hnbench.registry.TASKS` (a plugin registers its own the same way). Everything that handles results
asks the task, never a task's name:

- **declared attributes** (dataclass fields): ``inputs`` (the data it reads, for help and docs); ``groups``, the keys
  of ``result.metrics`` it writes (retrieval: ``t2i``, ``i2t``), each an object of metrics; ``bounds``, the valid
  range of each metric (by name prefix), which readers check, and ``value_rule``, what a reader says of a value out
  of them; ``main_score``, the name of its main score, the mean of the ``main_of`` metrics (``"group metric"``):
  retrieval's ``mean R@1`` = (t2i R@1 + i2t R@1) / 2; ``columns``, the leaderboard columns of its section (shown as
  the metric alone where the task has one group; a classification accuracy is never a column beside a recall);
  ``texts``, what its text side encodes (``"captions"``; zero-shot's ``"class prompts"``: only captions' share cut by
  the context is shown beside the scores as the model's text budget); ``options``, the dataclass of the data
  options only this task reads (its flags generated like every other option);
- **capabilities**: ``per_query`` (it writes a per-query file: ``compare``, ``browse`` and the leaderboard's paired
  tests read it), ``limit`` (``--limit`` takes a seeded subset of its data), ``distributed`` (it runs under
  ``torchrun``), ``scorers`` (a pairwise ``--scorer`` may score it), ``named_files`` (its name is part of its result
  files' names), ``pre_task_layout`` (the first task: a board of its results alone, their CSV rows and their
  suite columns keep the layout they had before there were tasks), ``per_item`` (the file beside its results holds
  per-item scores, which :meth:`check_per_item` checks the JSON against: the choice task's), ``sparse_columns`` (its
  columns are the union of its protocols' metrics: a table shows those its rows hold) and ``ci_rule`` (what its
  intervals are, said under its tables; "": retrieval's rule);
- **steps**: :meth:`check` (bad data refused before anything loads), :meth:`check_settings` (the settings only it
  reads), :meth:`load` (after the checks, before the model loads), :meth:`accepts` (the loaded data it scores),
  :meth:`run` (the pipeline → :class:`hnbench.results.record.EvalResult`);
- **how its results read**: :meth:`table` (the terminal table of one result), :meth:`row_fields` and
  :meth:`reported_key` (what a leaderboard row carries, and which published rows join its table), :meth:`board_note`
  (a sentence of the board's header), :meth:`training_log` (what a training
  run's periodic evaluation records and logs of it).

This module stays light (no torch): reading a result file asks it. A task's steps import their pipeline
(numpy, torch) when they run.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from hnbench.errors import ConfigError
from hnbench.results.tables import interval_note, recorded_interval, with_interval

__all__ = ["Recorded", "Task"]


class Recorded(Protocol):
    """What a task reads of a stored result (:class:`hnbench.results.record.EvalResult`, which imports this module)."""

    task: str
    metrics: dict[str, Any]
    ci95: dict[str, Any]
    ci95_method: dict[str, Any]
    dataset: dict[str, Any]
    settings: dict[str, Any]

    def text_budget(self) -> str | None: ...


@dataclass(frozen=True)
class Task:
    """One evaluation task: its declarations, capabilities and steps (see the module docstring). A task module
    subclasses it to implement :meth:`load` and :meth:`run` (and any step whose default does not fit)."""

    name: str
    title: str  # the leaderboard section heading
    inputs: str
    groups: tuple[str, ...]
    bounds: Mapping[str, tuple[float, float]]  # metric name prefix → (lowest, highest) valid value
    main_score: str
    main_of: tuple[str, ...]
    columns: tuple[str, ...]
    note: str = ""  # said under the section heading
    # what its texts are: "captions" (its tokens block is the captions' text budget, shown beside its scores on the
    # leaderboard) or another word ("class prompts") for texts that are not captions (the budget is not shown)
    texts: str = "captions"
    options: type | None = None  # the dataclass of the data options only this task reads
    data_noun: str = "image–caption set"  # what its data is called in a refusal ("an option-choice benchmark")
    value_rule: str = ""  # what a reader says of an impossible value ("R@K must be finite, in 0–100")
    per_query: bool = False
    limit: bool = False
    distributed: bool = False
    scorers: bool = False
    named_files: bool = True
    pre_task_layout: bool = False
    per_item: bool = False
    sparse_columns: bool = False
    ci_rule: str = ""

    # --- steps --------------------------------------------------------------------------------------------
    def check(self, spec: Any, **options: Any) -> None:
        """Refuse, before anything loads, data this task cannot score (one line); ``options``: its own data options."""

    def check_settings(self, settings: Any) -> None:
        """Refuse, before anything loads, the settings only this task reads that cannot run."""

    def load(self, spec: Any, **options: Any) -> Any:
        """The data of ``spec`` (a :class:`hnbench.specs.DataSpec`, checked) that :meth:`run` scores."""
        raise NotImplementedError(f"task {self.name} loads no data")

    def accepts(self, data: Any) -> bool:
        """Whether ``data`` (loaded by the caller) is what :meth:`run` scores."""
        return False

    def run(self, encoder: Any, data: Any, settings: Any, output_dir: str | Path | None = None, *, ctx: Any = None,
            timings: dict[str, float] | None = None, t0: float | None = None,
            data_spec: Any = None) -> Any:
        """Score ``encoder`` on loaded ``data``; write the result (and its per-query file) under ``output_dir``."""
        raise NotImplementedError(f"task {self.name} has no pipeline")

    def check_per_item(self, result: Recorded, frame: Any) -> list[str]:
        """Where ``result``'s JSON differs from the per-item file beside it (a :attr:`per_item` task's); empty when
        they agree."""
        return []

    # --- options ------------------------------------------------------------------------------------------
    def option_names(self) -> list[str]:
        """The fields of :attr:`options` (the data options only this task reads; flags generated from them)."""
        return [f.name for f in dataclasses.fields(self.options)] if self.options else []

    def check_options(self, options: Mapping[str, Any], tasks: Iterable[Task]) -> dict[str, Any]:
        """This task's own data options among ``options``; an option only another of ``tasks`` reads is refused
        (one line naming its flag and task)."""
        for other in tasks:
            for name in other.option_names() if other.name != self.name else ():
                if options.get(name) is not None:
                    raise ConfigError(f"--{name.replace('_', '-')} is read by --task {other.name} only")
        return {k: v for k, v in options.items() if k in self.option_names()}

    # --- metrics ------------------------------------------------------------------------------------------
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

    def board_columns(self) -> list[str]:
        """The metric columns of its leaderboard tables: each declared column's label, then the main score where it
        is a mean of several (retrieval's ``mean R@1``)."""
        return [self.label(c) for c in self.columns] + [self.main_score] * (len(self.main_of) > 1)

    def main_column(self) -> str:
        """The board column of its main score (its tables rank by it unless sorted by another of its columns)."""
        return self.main_score if len(self.main_of) > 1 else self.label(self.main_of[0])

    # --- how its results read -----------------------------------------------------------------------------
    def table(self, result: Recorded, fmt: str = "github") -> str:
        """The terminal table of ``result``: a group × metric table of its columns, each value with its 95% interval
        where the record has one (``†``: exact Clopper–Pearson), the text budget, and a line saying what the
        intervals are."""
        from tabulate import tabulate

        metrics = [c.partition(" ")[2] for c in self.columns]
        if self.sparse_columns:  # a metric no group holds (the choice task writes its rule's metrics only)
            metrics = [m for m in metrics if any(not math.isnan(self.value(result.metrics, f"{g} {m}"))
                                                 for g in self.groups)] or metrics
        cells: list[list[Any]] = []
        exact, shown = False, []
        for g in self.groups:
            cells.append([g])
            for metric in metrics:
                value = self.value(result.metrics, f"{g} {metric}")
                interval = recorded_interval((result.ci95 or {}).get(g), metric)
                method = ((result.ci95_method or {}).get(g) or {}).get(metric)
                exact = exact or (interval is not None and method == "clopper-pearson")
                shown += [metric] * (interval is not None and metric not in shown)
                cells[-1].append(f"{value:.4g}" if interval is None else with_interval(
                    value, interval, method, self.bound(metric) == (0.0, 100.0)))
            cells[-1].append((result.metrics.get(g) or {}).get("n_queries"))
        table = tabulate(cells, headers=[self.name, *metrics, "queries"], tablefmt=fmt)
        budget = result.text_budget()
        table += f"\n{budget}" if budget else ""
        note = f"{', '.join(shown)} [{self.ci_rule}]" if self.ci_rule else interval_note(', '.join(shown), exact)
        return table + (f"\n{note}." if shown else "")

    def row_fields(self, result: Recorded) -> dict[str, Any]:
        """What a leaderboard row of ``result`` carries beside its columns (what :meth:`reported_key` reads)."""
        return {}

    def reported_key(self, row: Mapping[str, Any]) -> tuple[str, str] | None:
        """The (benchmark, protocol) a published row of this task names to join the table of the measured ``row``
        (None: no published row joins it); by default the table's own benchmark and protocol."""
        return str(row["benchmark"]), str(row["protocol"])

    def board_note(self, sort: str) -> str:
        """A sentence of a board's header where the board holds this task's results ("" for none)."""
        return ""

    def training_log(self, result: Recorded) -> tuple[dict[str, Any], str]:
        """What a training run's periodic evaluation records of ``result`` (its eval log's fields) and the line it
        logs: the task, its main score and each column (``classification_top-1``)."""
        main = self.main_record(result.metrics)["value"]
        fields = {"task": result.task, "main_score": main,
                  **{c.replace(" ", "_"): self.value(result.metrics, c) for c in self.columns}}
        return fields, f"{result.task} {self.main_score} {self.main_value(result.metrics):.2f}"
