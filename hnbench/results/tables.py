"""How a result's numbers are written in a table: a metric with its recorded 95% interval, and the line saying what
the intervals are. Light (no torch): the tasks' tables (:meth:`hnbench.tasks.Task.table`) use it."""

from __future__ import annotations

from typing import Any

from hnbench.metrics import EXACT_BELOW

__all__ = ["interval_note", "recorded_interval", "with_interval"]


def recorded_interval(group: Any, metric: str) -> tuple[float, float] | None:
    """A metric's recorded 95% interval ``[lo, hi]`` in a result's ``ci95`` group; None where there is none
    (or what is there is not two numbers: a file from elsewhere)."""
    ci = group.get(metric) if isinstance(group, dict) else None
    if not isinstance(ci, (list, tuple)) or len(ci) != 2 or not all(
            isinstance(x, (int, float)) and not isinstance(x, bool) for x in ci):
        return None
    return float(ci[0]), float(ci[1])


def with_interval(value: float, ci: tuple[float, float], how: str | None, percent: bool) -> str:
    """A metric with its interval, as every table shows one: ``12.50 [2.7, 32.4]†`` for a percentage (``†``:
    exact Clopper–Pearson), ``0.1234 [0.101, 0.145]`` for another scale."""
    mark = "†" if how == "clopper-pearson" else ""
    if percent:
        return f"{value:.2f} [{ci[0]:.1f}, {ci[1]:.1f}]{mark}"
    return f"{value:.4g} [{ci[0]:.3g}, {ci[1]:.3g}]{mark}"


def interval_note(names: str, exact: bool) -> str:
    """The line under a table saying what its intervals are (``†`` explained where one is shown)."""
    return (f"{names} [95% interval over the queries]: percentile bootstrap"
            + (f"; † exact binomial (Clopper–Pearson), used where hits or misses are fewer than {EXACT_BELOW}"
               if exact else ""))
