"""Retrieval metrics computed from per-query ranks (pure numpy).

Conventions used throughout hnbench:

* Positives are given in CSR form: the positives of query ``i`` are
  ``pos_idx[pos_ptr[i]:pos_ptr[i + 1]]`` (gallery indices); every query has at least one.
* Rank (1-based, ties counted against the model): with scores ``s`` over the gallery and
  positive set ``P``, let ``g = max_{p in P} s_p``; then ``rank = 1 + #{j not in P : s_j >= g}``.
  A query is *tied* when some ``j not in P`` has ``s_j == g``.
* For i2t (several captions per image) ``rank <= K`` is exactly the CLIP-paper "hit" definition
  of R@K: at least one of the image's captions is in the top K.
* The 95% interval of an R@K with ``x`` hits in ``n`` queries (:func:`recall_ci`) is the percentile
  bootstrap over queries, except where the bootstrap degenerates — ``min(x, n − x) <`` :data:`EXACT_BELOW`
  (no hit, every query a hit, or a handful either way; small ``n`` always) — where it is the exact
  Clopper–Pearson interval: ``lo`` solves ``P[Binomial(n, lo) ≥ x] = α/2`` (0 when ``x = 0``), ``hi``
  solves ``P[Binomial(n, hi) ≤ x] = α/2`` (1 when ``x = n``); e.g. 0 of 23 gives [0, 14.8]%.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "CI_METHODS",
    "EXACT_BELOW",
    "bootstrap_ci",
    "ci_methods",
    "clopper_pearson",
    "csr_from_assignment",
    "csr_from_lists",
    "rank_summary",
    "bootstrap_mean_ci",
    "recall_ci",
    "ranks_from_scores",
    "recall_at_k",
    "summarize",
    "validate_csr",
]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

# Bootstrap resamples are drawn in chunks of at most this many int64 indices (~32 MB).
_BOOT_CHUNK_ELEMS = 4_000_000

# Fewer hits or misses than this: the percentile bootstrap has too few distinct values to cover (0 or n
# hits give a zero-width interval), so the interval is exact (Clopper–Pearson). 5 is the usual rule for
# when a binomial proportion's sampling distribution may be treated as continuous (n·p̂ and n·(1 − p̂) ≥ 5).
EXACT_BELOW = 5
# what a recorded R@K interval is, in the words every page that shows one uses
CI_RULE = ("95% interval over the queries (percentile bootstrap; exact binomial, Clopper–Pearson, where hits or "
           f"misses are fewer than {EXACT_BELOW})")
CI_METHODS = {"bootstrap": "percentile bootstrap over queries", "clopper-pearson": "exact binomial (Clopper–Pearson)"}


def _as_ranks(ranks: npt.ArrayLike) -> IntArray:
    """Validate a 1-D array of 1-based integer ranks and return it as int64."""
    r = np.asarray(ranks)
    if r.ndim != 1 or r.size == 0:
        raise ValueError(f"ranks must be a non-empty 1-D array, got shape {r.shape}")
    if not np.issubdtype(r.dtype, np.integer):
        if not np.all(np.isfinite(r)) or np.any(r != np.round(r)):
            raise ValueError("ranks must be integers")
    r = r.astype(np.int64, copy=False)
    if r.min() < 1:
        raise ValueError(f"ranks are 1-based; got minimum {int(r.min())}")
    return r


def _check_ks(ks: Sequence[int]) -> list[int]:
    """Validate the K list for R@K (positive integers)."""
    out = [int(k) for k in ks]
    if not out or min(out) < 1:
        raise ValueError(f"ks must be positive integers, got {list(ks)}")
    return out


def recall_at_k(ranks: npt.ArrayLike, ks: Sequence[int] = (1, 5, 10)) -> dict[str, float]:
    """R@K = 100 * #{q : rank_q <= K} / N, in percent (one division of integers, so 97 of 250 is 38.8, not
    the 38.800000000000004 of 100 · 0.388)."""
    r = _as_ranks(ranks)
    return {f"R@{k}": 100 * int(np.count_nonzero(r <= k)) / r.size for k in _check_ks(ks)}


def rank_summary(ranks: npt.ArrayLike) -> dict[str, float]:
    """mean_rank = mean(rank); median_rank = median(rank); MRR = mean(1 / rank) (a fraction 0-1)."""
    r = _as_ranks(ranks)
    return {
        "mean_rank": float(r.mean()),
        "median_rank": float(np.median(r)),
        "MRR": float(np.mean(1.0 / r)),
    }


def bootstrap_ci(
    ranks: npt.ArrayLike,
    ks: Sequence[int] = (1, 5, 10),
    n_boot: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
) -> dict[str, tuple[float, float]]:
    """Percentile bootstrap CI of R@K: resample the N queries with replacement n_boot times,
    return the (alpha/2, 1 - alpha/2) percentiles of the resampled R@K, in percent."""
    r = _as_ranks(ranks)
    ks = _check_ks(ks)
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    # Hits matrix (N, len(ks)) as float so one fancy-index + mean gives every K at once.
    hits = (r[:, None] <= np.asarray(ks)[None, :]).astype(np.float32)
    lo, hi = bootstrap_mean_ci(hits, n_boot=n_boot, alpha=alpha, seed=seed)
    return {f"R@{k}": (float(lo[j]), float(hi[j])) for j, k in enumerate(ks)}


def _binom_log_pmf(i: int, n: int, p: float) -> float:
    return (math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
            + i * math.log(p) + (n - i) * math.log1p(-p))


def _binom_tail(lo: int, hi: int, n: int, p: float) -> float:
    """``P[lo ≤ Binomial(n, p) ≤ hi]`` summed in log space (exact for any n, no overflow)."""
    logs = [_binom_log_pmf(i, n, p) for i in range(lo, hi + 1)]
    top = max(logs)
    return math.exp(top) * sum(math.exp(v - top) for v in logs)


def _solve(f: Any, target: float) -> float:
    """The p in (0, 1) with ``f(p) = target`` for a ``f`` increasing in p (bisection to 1e-12)."""
    lo, hi = 0.0, 1.0
    while hi - lo > 1e-12:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) < target else (lo, mid)
    return (lo + hi) / 2


def clopper_pearson(x: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """Exact binomial interval of a proportion with ``x`` successes in ``n`` trials, in percent:
    ``lo`` solves ``P[Bin(n, lo) ≥ x] = α/2`` (0 when x = 0), ``hi`` solves ``P[Bin(n, hi) ≤ x] = α/2``
    (1 when x = n)."""
    if n < 1 or not 0 <= x <= n:
        raise ValueError(f"need 0 <= x <= n and n >= 1, got x={x}, n={n}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    a = alpha / 2
    if x == 0:
        lo = 0.0
    elif x == n:
        lo = a ** (1.0 / n)
    else:  # P[Bin ≥ x] grows with p; sum the shorter side of the distribution
        lo = _solve(lambda p: _binom_tail(x, n, n, p) if n - x < x else 1.0 - _binom_tail(0, x - 1, n, p), a)
    if x == n:
        hi = 1.0
    elif x == 0:
        hi = 1.0 - a ** (1.0 / n)
    else:  # P[Bin ≤ x] falls with p: solve 1 − P[Bin ≤ x] = 1 − α/2
        hi = _solve(lambda p: (_binom_tail(x + 1, n, n, p) if n - x <= x else 1.0 - _binom_tail(0, x, n, p)), 1.0 - a)
    return 100.0 * lo, 100.0 * hi


def ci_methods(ranks: npt.ArrayLike, ks: Sequence[int] = (1, 5, 10)) -> dict[str, str]:
    """Each R@K's interval method (a key of :data:`CI_METHODS`): ``"clopper-pearson"`` where
    ``min(hits, misses) <`` :data:`EXACT_BELOW`, else ``"bootstrap"``."""
    r = _as_ranks(ranks)
    hits = {k: int(np.sum(r <= k)) for k in _check_ks(ks)}
    return {f"R@{k}": "clopper-pearson" if min(x, r.size - x) < EXACT_BELOW else "bootstrap" for k, x in hits.items()}


def recall_ci(
    ranks: npt.ArrayLike,
    ks: Sequence[int] = (1, 5, 10),
    *,
    n_boot: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
) -> dict[str, tuple[float, float]]:
    """The (1 − alpha) interval of each R@K, in percent, by the method :func:`ci_methods` names:
    :func:`bootstrap_ci`, or :func:`clopper_pearson` where the bootstrap degenerates."""
    r = _as_ranks(ranks)
    boot = bootstrap_ci(r, ks, n_boot, alpha, seed)
    return {key: clopper_pearson(int(np.sum(r <= int(key[2:]))), int(r.size), alpha) if how == "clopper-pearson"
            else boot[key] for key, how in ci_methods(r, ks).items()}


def bootstrap_mean_ci(values: npt.NDArray[np.number[Any] | np.bool_], *, n_boot: int, alpha: float,
                      seed: int) -> tuple[FloatArray, FloatArray]:
    """Percentile bootstrap of the column means of ``values`` (N, C), in percent: resample the N rows with
    replacement ``n_boot`` times (the same draw for every column), return the (alpha/2, 1 - alpha/2)
    percentiles of 100 · mean, each of shape (C,). Draws in chunks so memory stays bounded."""
    n = values.shape[0]
    rng = np.random.default_rng(seed)
    stats = np.empty((n_boot, values.shape[1]), dtype=np.float64)
    rows = max(1, _BOOT_CHUNK_ELEMS // n)  # bounds memory at ~rows*N*(8 + itemsize*C) bytes
    for start in range(0, n_boot, rows):
        stop = min(n_boot, start + rows)
        idx = rng.integers(0, n, size=(stop - start, n))
        stats[start:stop] = values[idx].mean(axis=1, dtype=np.float64)
    lo, hi = np.percentile(100.0 * stats, [100.0 * alpha / 2, 100.0 * (1 - alpha / 2)], axis=0)
    return lo, hi


def validate_csr(
    pos_ptr: npt.ArrayLike, pos_idx: npt.ArrayLike, n_queries: int, n_gallery: int
) -> tuple[IntArray, IntArray]:
    """Check a positives CSR (shape, monotone ptr, >=1 positive per query, indices in range)."""
    ptr = np.asarray(pos_ptr)
    idx = np.asarray(pos_idx)
    if ptr.ndim != 1 or ptr.shape[0] != n_queries + 1:
        raise ValueError(f"pos_ptr must have shape ({n_queries + 1},), got {ptr.shape}")
    if idx.ndim != 1:
        raise ValueError(f"pos_idx must be 1-D, got shape {idx.shape}")
    for name, a in (("pos_ptr", ptr), ("pos_idx", idx)):
        if a.size and not np.issubdtype(a.dtype, np.integer):
            raise ValueError(f"{name} must be an integer array, got dtype {a.dtype}")
    ptr = ptr.astype(np.int64, copy=False)
    idx = idx.astype(np.int64, copy=False)
    if ptr[0] != 0 or ptr[-1] != idx.shape[0]:
        raise ValueError(f"pos_ptr must start at 0 and end at len(pos_idx)={idx.shape[0]}")
    counts = np.diff(ptr)
    if np.any(counts < 0):
        raise ValueError("pos_ptr must be non-decreasing")
    if np.any(counts == 0):
        bad = np.flatnonzero(counts == 0)
        raise ValueError(f"{bad.size} queries have no positive (first: query {int(bad[0])})")
    if idx.size and (idx.min() < 0 or idx.max() >= n_gallery):
        raise ValueError(f"pos_idx out of range [0, {n_gallery}): min {idx.min()}, max {idx.max()}")
    return ptr, idx


def csr_from_lists(lists: Sequence[Sequence[int]], allow_empty: bool = False) -> tuple[IntArray, IntArray]:
    """CSR (ptr, idx) from per-query positive lists: ptr[i+1] - ptr[i] = len(lists[i])."""
    counts = np.fromiter((len(x) for x in lists), dtype=np.int64, count=len(lists))
    if not allow_empty and np.any(counts == 0):
        raise ValueError(f"query {int(np.flatnonzero(counts == 0)[0])} has no positive")
    ptr = np.zeros(len(lists) + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    parts = [np.asarray(x, dtype=np.int64).reshape(-1) for x in lists]
    idx = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    return ptr, idx


def csr_from_assignment(
    owner: npt.ArrayLike, n_queries: int, allow_empty: bool = False
) -> tuple[IntArray, IntArray]:
    """CSR whose row q lists {j : owner[j] == q} in ascending j (e.g. caption -> image gives i2t)."""
    own = np.asarray(owner)
    if own.ndim != 1 or (own.size and not np.issubdtype(own.dtype, np.integer)):
        raise ValueError(f"owner must be a 1-D integer array, got shape {own.shape}, dtype {own.dtype}")
    own = own.astype(np.int64, copy=False)
    if own.size and (own.min() < 0 or own.max() >= n_queries):
        raise ValueError(f"owner values must lie in [0, {n_queries}): min {own.min()}, max {own.max()}")
    counts = np.bincount(own, minlength=n_queries).astype(np.int64)
    if not allow_empty and np.any(counts == 0):
        raise ValueError(f"query {int(np.flatnonzero(counts == 0)[0])} has no positive")
    ptr = np.zeros(n_queries + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    idx = np.argsort(own, kind="stable").astype(np.int64)  # stable -> ascending j within a row
    return ptr, idx


def ranks_from_scores(
    scores: npt.ArrayLike, pos_ptr: npt.ArrayLike, pos_idx: npt.ArrayLike
) -> tuple[IntArray, npt.NDArray[np.bool_]]:
    """Reference ranks on a full (N, M) score matrix: rank = 1 + #{j not in P : s_j >= max_P s}.

    Deliberately a plain per-query loop: every faster implementation is tested against it.
    Returns (ranks int64, tied bool)."""
    s = np.asarray(scores)
    if s.ndim != 2:
        raise ValueError(f"scores must be 2-D (N, M), got shape {s.shape}")
    if not np.all(np.isfinite(s)):
        raise ValueError("scores contain NaN or inf")
    n, m = s.shape
    ptr, idx = validate_csr(pos_ptr, pos_idx, n, m)
    ranks = np.empty(n, dtype=np.int64)
    tied = np.empty(n, dtype=bool)
    for i in range(n):
        is_pos = np.zeros(m, dtype=bool)
        is_pos[idx[ptr[i] : ptr[i + 1]]] = True
        best_pos = s[i, is_pos].max()
        negatives = s[i, ~is_pos]
        ranks[i] = 1 + int(np.sum(negatives >= best_pos))
        tied[i] = bool(np.any(negatives == best_pos))
    return ranks, tied


def summarize(
    ranks: npt.ArrayLike,
    tied: npt.ArrayLike,
    ks: Sequence[int] = (1, 5, 10),
    ci: bool = True,
    n_boot: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """One JSON-ready dict: R@K (%), mean/median rank, MRR, n_queries, n_tied, ci95 (:func:`recall_ci`, or None)."""
    r = _as_ranks(ranks)
    t = np.asarray(tied, dtype=bool)
    if t.shape != r.shape:
        raise ValueError(f"tied has shape {t.shape}, ranks has shape {r.shape}")
    out: dict[str, Any] = {**recall_at_k(r, ks), **rank_summary(r)}
    out["n_queries"] = int(r.size)
    out["n_tied"] = int(t.sum())
    if ci:
        out["ci95"] = {key: [lo, hi] for key, (lo, hi) in recall_ci(r, ks, n_boot=n_boot, seed=seed).items()}
    else:
        out["ci95"] = None
    return out
