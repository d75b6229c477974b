"""Geometry statistics of one embedding set: pure arrays in, small records out; memory never quadratic.

Notation: ``x_i`` are L2-normalised embeddings (captions or images), ``g_i`` the *group* of item ``i``
(for captions: the image they describe). Two items of one group are never each other's negatives.

- **Pairwise similarity**: ``cos(x_i, x_j)`` over unordered pairs ``i < j`` with ``g_i != g_j``.
  Exact (``method="exact"``) by a blocked pass over row blocks of ``X Xᵀ`` when ``N <= exact_max``;
  beyond that, ``n_sample`` pairs drawn uniformly with replacement from those pairs by a seeded RNG
  (``method="sampled"``; ``stderr`` = sample std / sqrt(n_sample) is the standard error of the mean).
  Exact quantiles are read off a fixed :data:`HIST_BINS`-bin histogram over [-1, 1] (linear within a
  bin, so to within 1/1000), sampled ones are exact quantiles of the sample.
- **Hardest negative** of ``i``: ``h_i = max_{j : g_j != g_i} cos(x_i, x_j)``, its index the lowest
  among equal scores; ``-1`` / NaN when every other item shares ``i``'s group. Always exact.
- **In-batch buckets**: ``n_batches`` seeded random batches of ``B`` distinct items; within each batch
  every ordered pair ``(i, j)``, ``i != j``, ``g_i != g_j`` is a negative; bucket ``k`` holds
  similarities in ``[e_k, e_{k+1})`` (the first bucket also everything below ``e_1``, the last
  everything from ``e_{K-1}`` up); ``shares`` = mean over batches of each batch's bucket shares
  (they sum to 1), ``stderr`` their standard error across batches — undefined (NaN) with one batch,
  as when ``B`` ≥ N makes the one batch the whole set. The example batch (Ḡ) is the first seeded batch
  in its drawn order, never the set in dataset order.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import torch
from tqdm.auto import tqdm

from hnbench.search.exact import ieee_fp32_matmul  # the same full-fp32 matmul guard as the search backends
from hnbench.settings import DEFAULT_EDGES  # declared with the other hardness settings
from hnbench.validate import check_edges as check_edges  # HardnessSettings.validate checks them too

Embeddings = npt.ArrayLike | torch.Tensor  # (n, d) rows, any float dtype; made unit length here

HIST_BINS = 2000  # over [-1, 1]; bin width 0.001
QUANTILES = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)
_SENTINEL = -3.0  # below any cosine: marks same-group entries inside a score block
_CPU_BLOCK_BYTES = 64 * 2**20
_GPU_BLOCK_BYTES = 1024 * 2**20


@dataclass
class Histogram:
    """Counts in bins of ``width`` starting at ``start`` (the fixed [-1, 1] grid, trimmed to non-zero)."""

    start: float
    width: float
    counts: list[int]

    @classmethod
    def from_full(cls, counts: np.ndarray) -> Histogram:
        counts = np.asarray(counts, dtype=np.int64)
        nz = np.flatnonzero(counts)
        lo, hi = (int(nz[0]), int(nz[-1]) + 1) if nz.size else (0, 0)
        width = 2.0 / HIST_BINS
        return cls(start=round(-1.0 + lo * width, 6), width=width, counts=counts[lo:hi].tolist())

    def edges(self) -> np.ndarray:
        return self.start + self.width * np.arange(len(self.counts) + 1)

    def quantile(self, q: float) -> float:
        """Quantile ``q`` interpolated linearly inside its bin."""
        c = np.asarray(self.counts, dtype=np.float64)
        if not c.sum():
            return math.nan
        cum = np.cumsum(c)
        target = q * cum[-1]
        k = int(np.searchsorted(cum, target, side="left"))
        k = min(k, len(c) - 1)
        before = cum[k] - c[k]
        frac = (target - before) / c[k] if c[k] else 0.0
        return float(self.start + self.width * (k + frac))


def bin_counts(values: np.ndarray | torch.Tensor) -> np.ndarray:
    """Counts of ``values`` in the fixed grid (bin = floor((v + 1) / width), clamped to the grid)."""
    t = torch.as_tensor(values, dtype=torch.float32).reshape(-1)
    if not t.numel():
        return np.zeros(HIST_BINS, np.int64)
    return torch.histc(t.clamp(-1.0, 1.0), bins=HIST_BINS, min=-1.0, max=1.0).cpu().numpy().astype(np.int64)


@dataclass
class Distribution:
    """Summary of a set of similarities: exact, or estimated from a sample (then ``stderr`` > 0)."""

    n: int  # values summarised (pairs, items, or sampled pairs)
    mean: float
    std: float
    stderr: float  # standard error of ``mean``; 0 when exact
    min: float
    max: float
    quantiles: dict[str, float]  # "p1" ... "p99"
    method: str  # "exact" | "sampled"
    histogram: Histogram
    population: int | None = None  # number of pairs the sample represents (sampled only)

    @classmethod
    def from_values(cls, values: np.ndarray, method: str = "exact", population: int | None = None) -> Distribution:
        v = np.asarray(values, dtype=np.float64).reshape(-1)
        v = v[np.isfinite(v)]
        n = int(v.size)
        if not n:
            return cls(0, math.nan, math.nan, math.nan, math.nan, math.nan, {}, method, Histogram(0.0, 2 / HIST_BINS, []))
        std = float(v.std(ddof=1)) if n > 1 else 0.0
        qs = np.quantile(v, QUANTILES)
        return cls(n=n, mean=float(v.mean()), std=std,
                   stderr=std / math.sqrt(n) if method == "sampled" else 0.0,
                   min=float(v.min()), max=float(v.max()), quantiles=_qdict(qs), method=method,
                   histogram=Histogram.from_full(bin_counts(v)), population=population)

    @classmethod
    def from_sums(cls, acc: PairSums) -> Distribution:
        """Exact moments from running sums; quantiles from the histogram."""
        n = acc.n
        if not n:
            return cls.from_values(np.zeros(0))
        mean = acc.total / n
        var = max(acc.total_sq / n - mean * mean, 0.0) * n / max(n - 1, 1)
        h = Histogram.from_full(acc.counts)
        return cls(n=n, mean=mean, std=math.sqrt(var), stderr=0.0, min=acc.lo, max=acc.hi,
                   quantiles=_qdict([h.quantile(q) for q in QUANTILES]), method="exact", histogram=h)


def _qdict(qs: Sequence[float] | np.ndarray) -> dict[str, float]:
    return {f"p{round(q * 100):d}": float(v) for q, v in zip(QUANTILES, qs)}


@dataclass
class PairSums:
    """Running exact sums over pairs: count, sum, sum of squares, min, max and the histogram."""

    n: int = 0
    total: float = 0.0
    total_sq: float = 0.0
    lo: float = math.inf
    hi: float = -math.inf
    counts: np.ndarray = field(default_factory=lambda: np.zeros(HIST_BINS, np.int64))

    def add(self, v: torch.Tensor) -> None:
        if not v.numel():
            return
        self.n += int(v.numel())
        for k in range(0, v.numel(), 1 << 22):  # float64 sums in chunks: exact enough, small temporaries
            c = v[k:k + (1 << 22)].double()
            self.total += float(c.sum())
            self.total_sq += float((c * c).sum())
        self.lo = min(self.lo, float(v.min()))
        self.hi = max(self.hi, float(v.max()))
        self.counts += torch.histc(v.clamp(-1.0, 1.0), bins=HIST_BINS, min=-1.0, max=1.0).long().cpu().numpy()

    def minus(self, other: PairSums) -> PairSums:
        """Sums over the pairs of ``self`` not in ``other`` (min/max become the occupied bins' edges)."""
        counts = self.counts - other.counts
        nz = np.flatnonzero(counts)
        w = 2.0 / HIST_BINS
        lo, hi = (-1.0 + nz[0] * w, -1.0 + (nz[-1] + 1) * w) if nz.size else (math.nan, math.nan)
        return PairSums(self.n - other.n, self.total - other.total, self.total_sq - other.total_sq,
                        float(lo), float(hi), counts)


def same_group_csr(groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR whose row ``i`` lists every ``j`` with ``g_j == g_i`` (``i`` included), ascending."""
    g = np.asarray(groups)
    n = g.size
    order = np.argsort(g, kind="stable")
    _, start, inverse, count = np.unique(g[order], return_index=True, return_inverse=True, return_counts=True)
    inv = np.empty(n, np.int64)
    inv[order] = inverse
    per = count[inv]
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(per, out=ptr[1:])
    offs = np.arange(ptr[-1], dtype=np.int64) - np.repeat(ptr[:-1], per)
    return ptr, order[np.repeat(start[inv], per) + offs].astype(np.int64)


def _as_unit(x: Embeddings, device: torch.device) -> torch.Tensor:
    t = torch.as_tensor(np.ascontiguousarray(x) if not isinstance(x, torch.Tensor) else x).float().to(device)
    if t.ndim != 2:
        raise ValueError(f"embeddings must be 2-D (n, d), got shape {tuple(t.shape)}")
    norms = torch.linalg.vector_norm(t, dim=1)
    if not bool(torch.isfinite(norms).all()):
        raise ValueError("embeddings contain NaN or inf")
    if bool(((norms - 1).abs() < 1e-4).all()):
        return t  # already unit length (encoder output): no copy
    unit: torch.Tensor = t / norms.clamp(min=1e-12)[:, None]
    return unit


def unit_rows(x: Embeddings) -> np.ndarray:
    """``x`` as float32 rows of unit length; no copy when it already is (embeddings from an encoder)."""
    a = np.ascontiguousarray(x, dtype=np.float32)
    if a.ndim != 2:
        raise ValueError(f"embeddings must be 2-D (n, d), got shape {a.shape}")
    norms = np.sqrt(np.einsum("ij,ij->i", a, a))
    if not np.isfinite(norms).all():
        raise ValueError("embeddings contain NaN or inf")
    unit: np.ndarray = a if np.all(np.abs(norms - 1) < 1e-4) else a / norms.clip(min=1e-12)[:, None]
    return unit


def _groups(groups: npt.ArrayLike | None, n: int) -> np.ndarray:
    g = np.arange(n, dtype=np.int64) if groups is None else np.asarray(groups)
    if g.shape != (n,):
        raise ValueError(f"groups must have shape ({n},), got {g.shape}")
    return g


@dataclass
class Nearest:
    """Each item's hardest negative (nearest item of another group), and optionally exact pair sums."""

    index: np.ndarray  # (N,) int64, -1 when none
    score: np.ndarray  # (N,) float32, NaN when none
    pairs: PairSums | None = None


def nearest_other(x: Embeddings, groups: npt.ArrayLike | None = None, *, pairwise: bool = False,
                  device: str = "cpu", block_bytes: int | None = None, progress: bool = False) -> Nearest:
    """Exact hardest negative of every item by a blocked pass over ``X Xᵀ`` (O(block · N) memory);
    with ``pairwise`` also the exact sums/histogram over all unordered negative pairs, in the same pass."""
    dev = torch.device(device)
    t = _as_unit(x, dev)
    n = t.shape[0]
    g = _groups(groups, n)
    ptr, idx = same_group_csr(g)
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(ptr))
    budget = block_bytes or (_GPU_BLOCK_BYTES if dev.type == "cuda" else _CPU_BLOCK_BYTES)
    block = max(1, min(n, budget // (4 * max(n, 1))))
    index, score = np.full(n, -1, np.int64), np.full(n, np.nan, np.float32)
    acc = PairSums() if pairwise else None
    with ieee_fp32_matmul(), torch.inference_mode(), tqdm(total=n, desc="nearest", unit="row",
                                                             disable=not progress) as bar:
        for a in range(0, n, block):
            b = min(n, a + block)
            s = t[a:b] @ t.T
            lo, hi = ptr[a], ptr[b]
            s[torch.from_numpy(rows[lo:hi] - a).to(dev), torch.from_numpy(idx[lo:hi]).to(dev)] = _SENTINEL
            j = s.argmax(1)  # first maximal index: ties go to the lowest index
            v = s.gather(1, j[:, None])[:, 0]
            ok = (v > _SENTINEL / 2).cpu().numpy()
            index[a:b] = np.where(ok, j.cpu().numpy(), -1)
            score[a:b] = np.where(ok, v.cpu().numpy(), np.nan)
            if acc is not None:
                c = b - a
                diag = s[:, a:b][torch.ones(c, c, dtype=torch.bool, device=dev).triu_(1)]
                rest = s[:, b:].reshape(-1)
                for part in (diag, rest):
                    acc.add(part[part > _SENTINEL / 2])
            bar.update(b - a)
    return Nearest(index, score, acc)


@dataclass
class PairSample:
    """Uniformly sampled unordered negative pairs ``(i, j)`` and their similarities."""

    i: np.ndarray
    j: np.ndarray
    values: np.ndarray
    population: int  # number of unordered negative pairs sampled from


def n_negative_pairs(groups: np.ndarray) -> int:
    """Number of unordered pairs of items in different groups: (N² − Σ n_g²) / 2."""
    _, counts = np.unique(groups, return_counts=True)
    n = int(counts.sum())
    return (n * n - int((counts.astype(np.int64) ** 2).sum())) // 2


def sample_pairs(x: Embeddings, groups: npt.ArrayLike | None = None, *, n_sample: int = 1_000_000, seed: int = 0,
                 device: str = "cpu", chunk: int = 8192) -> PairSample:
    """``n_sample`` pairs uniform over unordered negative pairs (rejection of same-group draws), seeded."""
    dev = torch.device(device)
    t = _as_unit(x, dev)
    n = t.shape[0]
    g = _groups(groups, n)
    population = n_negative_pairs(g)
    rng = np.random.default_rng(seed)
    if population == 0:
        e = np.zeros(0, np.int64)
        return PairSample(e, e, np.zeros(0, np.float32), 0)
    ii, jj, have = [], [], 0
    for _ in range(1000):  # each round keeps a share population / (N²/2) of its draws
        m = min(1 << 24, max(1024, int(1.2 * (n_sample - have) * n * n / (2 * population))))
        i, j = rng.integers(0, n, m), rng.integers(0, n, m)
        keep = g[i] != g[j]
        ii.append(i[keep])
        jj.append(j[keep])
        have += int(keep.sum())
        if have >= n_sample:
            break
    i, j = np.concatenate(ii)[:n_sample], np.concatenate(jj)[:n_sample]
    out = np.empty(i.size, np.float32)
    with torch.inference_mode():
        for s in range(0, i.size, chunk):
            a = torch.from_numpy(i[s:s + chunk]).to(dev)
            b = torch.from_numpy(j[s:s + chunk]).to(dev)
            out[s:s + chunk] = (t[a] * t[b]).sum(1).cpu().numpy()
    return PairSample(np.minimum(i, j), np.maximum(i, j), out, population)


@dataclass
class Buckets:
    """Shares of in-batch negatives per similarity bucket, averaged over seeded random batches."""

    edges: list[float]
    labels: list[str]
    shares: list[float]  # mean over batches; sums to 1
    stderr: list[float]  # standard error of each share across batches; NaN (undefined) with one batch
    share_at_least: dict[str, float]  # inner edge -> share of negatives >= it
    batch_size: int
    n_batches: int
    n_negatives: int  # ordered negative pairs counted, all batches
    n_same_group: int  # ordered same-group pairs left out, all batches

    def standard_errors(self) -> list[float]:
        """``stderr``, NaN where undefined: with one batch (files written before NaN was recorded hold 0)."""
        return [math.nan] * len(self.stderr) if self.n_batches < 2 else list(self.stderr)


def bucket_labels(edges: Sequence[float]) -> list[str]:
    e = [f"{v:g}" for v in edges]
    k = len(edges) - 1
    if k == 1:
        return ["all"]
    return [f"< {e[1]}"] + [f"{e[i]}–{e[i + 1]}" for i in range(1, k - 1)] + [f"≥ {e[k - 1]}"]


def bucket_index(values: np.ndarray, edges: Sequence[float]) -> np.ndarray:
    """Bucket of each value: k with e_k <= v < e_{k+1}, open below the first and above the last bucket."""
    return np.searchsorted(np.asarray(edges[1:-1], dtype=np.float64), np.asarray(values, np.float64), side="right")


def batch_buckets(x: Embeddings, groups: npt.ArrayLike | None = None, *, batch_size: int = 128,
                  n_batches: int = 200, edges: Sequence[float] = DEFAULT_EDGES,
                  seed: int = 0, device: str = "cpu") -> tuple[Buckets, np.ndarray, np.ndarray]:
    """Bucket shares of in-batch negatives; also one example batch's Ḡ (diagonal 0) and its item indices."""
    e = check_edges(edges)
    dev = torch.device(device)
    t = _as_unit(x, dev)
    n = t.shape[0]
    g = torch.from_numpy(_groups(groups, n).astype(np.int64)).to(dev)
    b = min(batch_size, n)
    if b < 2:
        raise ValueError(f"in-batch buckets need at least 2 items, got {n}")
    if b == n:
        n_batches = 1  # every batch would be the whole set
    rng = np.random.default_rng(seed)
    draws = [rng.choice(n, b, replace=False) for _ in range(n_batches)]
    batches = np.stack([np.sort(d) for d in draws])  # sorted: the counts do not depend on the order
    inner = torch.tensor(e[1:-1], dtype=torch.float32, device=dev)
    k = len(e) - 1
    counts = np.zeros((n_batches, k), np.int64)
    n_same = 0
    eye = torch.eye(b, dtype=torch.bool, device=dev)
    with torch.inference_mode():
        for s in range(0, n_batches, 16):
            bi = torch.from_numpy(batches[s:s + 16]).to(dev)
            xb, gb = t[bi], g[bi]
            gram = torch.bmm(xb, xb.transpose(1, 2))
            valid = (gb[:, :, None] != gb[:, None, :]) & ~eye
            bk = torch.where(valid, torch.bucketize(gram, inner, right=True), k)  # k: not a negative
            nb = bi.shape[0]
            key = bk + (k + 1) * torch.arange(nb, device=dev)[:, None, None]
            per = torch.bincount(key.reshape(-1), minlength=nb * (k + 1)).view(nb, k + 1)
            counts[s:s + nb] = per[:, :k].cpu().numpy()
            n_same += int(per[:, k].sum()) - nb * b  # non-negatives less the diagonal
        ex = draws[0]  # in its drawn order: a seeded random batch (with B = N, a seeded shuffle of the set)
        gbar = (t[torch.from_numpy(ex).to(dev)] @ t[torch.from_numpy(ex).to(dev)].T).cpu().numpy()
    np.fill_diagonal(gbar, 0.0)
    tot = counts.sum(1)
    used = tot > 0
    per = counts[used] / tot[used, None]
    shares = per.mean(0) if used.any() else np.full(k, np.nan)
    se = per.std(0, ddof=1) / math.sqrt(per.shape[0]) if per.shape[0] > 1 else np.full(k, np.nan)
    at_least = {f"{e[i]:g}": float(shares[i:].sum()) for i in range(1, k)}
    return (Buckets(edges=e, labels=bucket_labels(e), shares=shares.tolist(), stderr=se.tolist(),
                    share_at_least=at_least, batch_size=b, n_batches=int(used.sum()),
                    n_negatives=int(tot.sum()), n_same_group=n_same), gbar, ex)


def unique_pairs(index: np.ndarray, score: np.ndarray, threshold: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Unordered pairs ``(a < b)`` from each item and its nearest other with score >= threshold, by score desc."""
    i = np.flatnonzero((index >= 0) & (np.nan_to_num(score, nan=-np.inf) >= threshold))
    a, b = np.minimum(i, index[i]), np.maximum(i, index[i])
    key = a * (index.size + 1) + b
    _, first = np.unique(key, return_index=True)
    a, b, s = a[first], b[first], score[i][first]
    order = np.lexsort((b, a, -s))
    return a[order], b[order], s[order]
