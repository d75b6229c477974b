"""Paired tests on per-query hit indicators (pure numpy): is model B's R@K really different from A's?

With ``a, b ∈ {0, 1}^N`` the hits of two models on the same N queries (hit = rank ≤ K):

* ``n_a_only = #{a=1, b=0}``, ``n_b_only = #{a=0, b=1}`` (the discordant pairs).
* difference ``Δ = 100 · (mean(b) − mean(a))`` percentage points.
* paired percentile bootstrap: draw N query indices with replacement (the *same* draw for both
  models), take Δ* on the draw; the 95% interval is the (2.5, 97.5) percentiles of ``n_boot`` Δ*.
* exact McNemar (sign) test: under H0 each discordant query favours either model with probability ½,
  so with ``n = n_a_only + n_b_only`` and ``m = min(n_a_only, n_b_only)``,
  ``p = min(1, 2 · P[Binomial(n, ½) ≤ m])``; ``p = 1`` when ``n = 0``.
* Holm step-down over m p-values: sort ascending, ``p_(i) ← max_{j≤i} min(1, (m − j + 1) · p_(j))``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hnbench.metrics import bootstrap_mean_ci


@dataclass(frozen=True)
class PairedTest:
    """One paired comparison of two hit vectors (R@K in %, Δ and its interval in points)."""

    r_a: float
    r_b: float
    delta: float
    ci95: tuple[float, float]
    p_mcnemar: float
    n_a_only: int
    n_b_only: int
    n: int

    @property
    def excludes_zero(self) -> bool:
        return self.ci95[0] > 0 or self.ci95[1] < 0


def _hits(x: np.ndarray, name: str) -> np.ndarray:
    h = np.asarray(x)
    if h.ndim != 1 or h.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array of hits, got shape {h.shape}")
    if h.dtype != bool and not np.isin(h, (0, 1)).all():
        raise ValueError(f"{name} must hold 0/1 hits")
    return h.astype(bool)


def mcnemar_exact(n_a_only: int, n_b_only: int) -> float:
    """Two-sided exact McNemar p-value from the discordant counts (see the module docstring)."""
    n, m = n_a_only + n_b_only, min(n_a_only, n_b_only)
    if n == 0:
        return 1.0
    # sum_{i<=m} C(n, i) / 2^n in log space: exact for any n without overflow
    logs = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) - n * math.log(2) for i in range(m + 1)]
    top = max(logs)
    cdf = math.exp(top) * sum(math.exp(v - top) for v in logs)
    return min(1.0, 2.0 * cdf)


def paired_bootstrap(a: np.ndarray, b: np.ndarray, *, n_boot: int = 1000, seed: int = 0,
                     alpha: float = 0.05) -> tuple[float, float]:
    """Percentile interval of ``100 · (mean(b) − mean(a))`` over joint resamples of the queries."""
    a, b = _hits(a, "a"), _hits(b, "b")
    if a.shape != b.shape:
        raise ValueError(f"hit vectors differ in length: {a.size} vs {b.size}")
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    d = b.astype(np.int8) - a.astype(np.int8)  # per-query difference: resampling it resamples both jointly
    lo, hi = bootstrap_mean_ci(d[:, None], n_boot=n_boot, alpha=alpha, seed=seed)
    return float(lo[0]), float(hi[0])


def paired_test(a: np.ndarray, b: np.ndarray, *, n_boot: int = 1000, seed: int = 0) -> PairedTest:
    """R@K of both, Δ = B − A with its paired bootstrap 95% interval, exact McNemar p, discordant counts."""
    a, b = _hits(a, "a"), _hits(b, "b")
    lo, hi = paired_bootstrap(a, b, n_boot=n_boot, seed=seed)
    n_a, n_b = int((a & ~b).sum()), int((~a & b).sum())
    r_a, r_b = 100.0 * a.mean(), 100.0 * b.mean()
    return PairedTest(r_a=float(r_a), r_b=float(r_b), delta=float(r_b - r_a), ci95=(lo, hi),
                      p_mcnemar=mcnemar_exact(n_a, n_b), n_a_only=n_a, n_b_only=n_b, n=int(a.size))


def holm(p: Sequence[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values (same order as given)."""
    p = [float(x) for x in p]
    m = len(p)
    out = [0.0] * m
    running = 0.0
    for rank, i in enumerate(sorted(range(m), key=lambda i: p[i])):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out
