"""Exact chunked retrieval: ranks, ties, best wrong match and top-k without an N x M matrix.

Scores are fp32 inner products of already L2-normalised vectors (never re-normalised here).
Rank convention (see :mod:`hnbench.metrics`): ``rank = 1 + #{j not in P : s_j >= max_P s}``.
Every ordering is deterministic: higher score first, equal scores by lower gallery index; this
fixes ``topk_index``, ``gt_index`` (best positive) and ``best_wrong_index`` (best non-positive).

Backends
--------
``torch``  Queries in chunks of ``chunk_size`` rows (auto: chunk * M * 4 bytes <= 256 MiB on CPU,
           1 GiB on a GPU), written into one reused score block: one fp32 matmul and one
           ``torch.topk`` to depth k' = k + max #positives + margin per chunk.
           Top-k and best wrong come from that list; rank/tied too when the best positive scores
           strictly above the list's last score (then every item >= it is in the list); only the
           remaining ("deep") rows get the two full-row comparison passes (>= and > the best
           positive; row by row in numpy on CPU). ``torch.topk`` picks arbitrarily among equal scores
           at the cut, so rows whose (k'+1)-th score equals the k'-th are re-selected explicitly
           (lowest indices first). Memory: inputs + outputs + the score block, O((N + M) d) + const.
``faiss``  ``IndexFlatIP`` (on GPU as ``faiss-gpu``) searched to the same depth k'. Top-k and best
           wrong come from that list whenever the k-th and the best wrong score lie strictly above
           its k'-th score (or k' = M); so do rank and tied when the best positive does too. A query
           whose best positive ranks below the list gets its rank from one matmul of its row and
           two counts (:func:`_rank_rows`, no top-k selection: before, such queries went through the
           whole torch path again, which made this backend ~2.5x slower than raw faiss on hard data).
           Only queries with ties straddling the list's cut are recomputed by the exact torch path.
           So rank/tied/best-wrong are exact for every query and equal the torch backend's, up to
           the fp32 summation order of the two BLAS kernels (a score can move by an ulp, which
           matters only for near-ties).
``auto``   CPU: torch below N*M = ``AUTO_MIN_WORK`` (both well under a second). Above, by
           measurement: :mod:`hnbench.search.calibration` times both backends once per machine
           (stored in the cache) and faiss runs only where its list search is faster per query
           than the torch path; then the first ``N/16`` (>= 4,096) queries are a probe, and if so
           many of them rank below the faiss list that counting them makes faiss the slower, the
           remaining queries go to torch. Output is identical either way (``backend`` names the
           one that ran for the rest). CUDA -> faiss-gpu when the faiss build has GPUs, else torch
           on the GPU (not calibrated: no GPU has run it yet).

The rank/tie/top-k rule over one block of score rows is :func:`score_rows`, whatever computes the scores: the
torch backend's inner products, or a pairwise scorer's (:mod:`hnbench.search.pairwise`).

Devices: ``cuda:i`` searches on GPU i; plain ``cuda`` on every visible GPU — faiss splits the
gallery over them (``index_cpu_to_gpus_list`` with ``shard=True``), torch splits the query rows
(the gallery copied to each GPU, one thread per GPU).

:func:`hnbench.search.approximate.retrieve_approximate` (faiss HNSW / IVF) is for exploring galleries too large to search
exactly: its ranks are lower bounds, it reports its own recall against exact search on a sample,
and its output is marked ``approximate`` so results built on it never reach a leaderboard.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from hnbench.metrics import validate_csr
from hnbench.search import calibration as search_calibration
from hnbench.validate import BACKENDS

__all__ = ["RetrievalOutput", "ScoreBlock", "available_backends", "canonical_positives", "empty_output",
           "ieee_fp32_matmul", "resolve_backend", "retrieve", "score_rows"]

log = logging.getLogger(__name__)

_CHUNK_BYTES = 256 * 2**20  # budget for one chunk's fp32 score block on CPU
_CHUNK_BYTES_CUDA = 2**30  # on a GPU: fewer, larger chunks keep it busy (1M gallery -> 268 queries/chunk)
_FAISS_CHUNK = 16384  # queries per faiss search call
_MARGIN = 16  # extra list depth so ties just below the k-th/best-positive score rarely force a fallback
_FAISS_GPU_MAX_K = 2048  # GPU faiss k-selection limit
_PROBE_MIN = 4096  # auto: queries searched with faiss before deciding (faiss is slow per query on fewer)
AUTO_MIN_WORK = 10**7  # auto: below N*M of this, torch (under ~0.1 s here; no faiss import, no calibration)


@dataclass
class RetrievalOutput:
    """Per-query retrieval results; all arrays have N rows."""

    rank: np.ndarray  # (N,) int64, 1-based, ties counted against the model
    tied: np.ndarray  # (N,) bool, some non-positive scores exactly the best positive's score
    gt_index: np.ndarray  # (N,) int64, best-scoring positive (lowest index among equals)
    gt_score: np.ndarray  # (N,) float32
    best_wrong_index: np.ndarray  # (N,) int64, best-scoring non-positive, -1 if none
    best_wrong_score: np.ndarray  # (N,) float32, nan if none
    topk_index: np.ndarray  # (N, k) int64, descending score, ties by lower gallery index
    topk_score: np.ndarray  # (N, k) float32
    backend: str  # backend that actually ran: "torch", "faiss", "faiss-gpu" (approximate: "faiss-hnsw"/"faiss-ivf")
    approximate: bool = False  # True: from an approximate index, never to be ranked with exact results
    recall_vs_exact: dict[str, Any] | None = None  # approximate only: agreement with exact search on a query sample


def _faiss() -> ModuleType | None:
    """Import faiss lazily (it is heavy and optional at runtime); None when missing."""
    try:
        import faiss
    except ImportError:
        return None
    return faiss


def _faiss_gpu_ok() -> bool:
    """True when the installed faiss has GPU support and sees at least one GPU."""
    faiss = _faiss()
    return faiss is not None and hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


def _gpu_ids(dev: torch.device) -> list[int]:
    """GPUs a search on ``dev`` uses: plain "cuda" means every visible GPU, "cuda:i" only GPU i."""
    if dev.type != "cuda":
        return []
    return [dev.index] if dev.index is not None else list(range(max(1, torch.cuda.device_count())))


def available_backends() -> list[str]:
    """Concrete backends usable in this environment."""
    out = ["torch"]
    if _faiss() is not None:
        out.append("faiss")
        if _faiss_gpu_ok():
            out.append("faiss-gpu")
    return out


def resolve_backend(backend: str, device: str, n_gallery: int) -> str:
    """Map a requested backend ("auto", "torch", "faiss", "faiss-gpu") to the one that will run.

    On the CPU, "auto" maps to "torch" here; :func:`retrieve` then refines it by the machine's stored
    calibration (:mod:`hnbench.search.calibration`) and a probe on the data, once the sizes are known."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown search backend {backend!r}; valid: {', '.join(BACKENDS)}")
    if n_gallery < 1:
        raise ValueError("the gallery is empty")
    on_cuda = torch.device(device).type == "cuda"
    if backend == "auto":
        # faiss-gpu on a GPU; on the CPU the size-dependent choice is retrieve's (see the docstring)
        return "faiss-gpu" if on_cuda and _faiss_gpu_ok() else "torch"
    if backend in ("faiss", "faiss-gpu") and _faiss() is None:
        raise ValueError(f"backend {backend!r} needs faiss, which is not installed; available: {available_backends()}")
    if backend == "faiss-gpu" and not (on_cuda and _faiss_gpu_ok()):
        raise ValueError(f"backend 'faiss-gpu' needs a CUDA device and GPU faiss; available: {available_backends()}")
    if backend == "faiss" and on_cuda and _faiss_gpu_ok():
        return "faiss-gpu"
    return backend


@contextlib.contextmanager
def ieee_fp32_matmul() -> Iterator[None]:
    """Force full-fp32 matmuls (no TF32/bf16) for the duration, restoring the caller's setting."""
    new_api = [m for m in (torch.backends.cuda.matmul, getattr(torch.backends.mkldnn, "matmul", None))
               if m is not None and hasattr(m, "fp32_precision")]
    if new_api:  # torch >= 2.9; mixing with the legacy getter raises there
        saved = [m.fp32_precision for m in new_api]
        for m in new_api:
            m.fp32_precision = "ieee"
        try:
            yield
        finally:
            for m, s in zip(new_api, saved):
                m.fp32_precision = s
    else:
        saved_legacy = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision("highest")
        try:
            yield
        finally:
            torch.set_float32_matmul_precision(saved_legacy)


def _as_tensor(x: np.ndarray | torch.Tensor, name: str) -> torch.Tensor:
    """(n, d) float32 tensor view/copy of a numpy array or tensor; rejects NaN/inf."""
    if isinstance(x, torch.Tensor):
        t = x.detach()
    else:
        a = np.ascontiguousarray(x)
        t = torch.from_numpy(a if a.flags.writeable else a.copy())  # torch warns on read-only buffers
    if t.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n, d), got shape {tuple(t.shape)}")
    t = t.float()
    # In row blocks: torch.isfinite over a whole 1M x 768 gallery allocates 1.6x its size at once.
    block = max(1, 2**24 // max(1, t.shape[1]))
    # numpy on CPU: torch.isfinite(...).all() measured 80x slower there (3.4 ms vs 0.04 ms for 1k x 512).
    finite: Callable[[torch.Tensor], bool] = (lambda b: bool(np.isfinite(b.numpy()).all())) if t.device.type == "cpu" else \
        (lambda b: bool(torch.isfinite(b).all()))
    if not all(finite(t[s:s + block]) for s in range(0, t.shape[0], block)):
        raise ValueError(f"{name} contains NaN or inf")
    return t


def _csr_rows(ptr: np.ndarray, idx: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(local row, gallery index) pairs of the positives of `rows`, in row order."""
    counts = ptr[rows + 1] - ptr[rows]
    local = np.repeat(np.arange(rows.size, dtype=np.int64), counts)
    offs = np.arange(local.size, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    return local, idx[np.repeat(ptr[rows], counts) + offs]


def _sorted_pairs(ptr: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Canonical CSR: each row's positives sorted ascending and de-duplicated."""
    rows = np.repeat(np.arange(ptr.size - 1, dtype=np.int64), np.diff(ptr))
    order = np.lexsort((idx, rows))
    rows, idx = rows[order], idx[order]
    keep = np.ones(idx.size, dtype=bool)
    keep[1:] = (rows[1:] != rows[:-1]) | (idx[1:] != idx[:-1])
    rows, idx = rows[keep], idx[keep]
    new_ptr = np.zeros_like(ptr)
    np.cumsum(np.bincount(rows, minlength=ptr.size - 1), out=new_ptr[1:])
    return new_ptr, idx


def canonical_positives(pos_ptr: np.ndarray, pos_idx: np.ndarray, n: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    """The positives of ``n`` queries among ``m`` candidates, checked and in the canonical CSR the rank rule reads."""
    return _sorted_pairs(*validate_csr(pos_ptr, pos_idx, n, m))


def empty_output(n: int, k: int, backend: str) -> RetrievalOutput:
    """A :class:`RetrievalOutput` of ``n`` queries and top-``k`` lists, to be filled (no positive, no wrong yet)."""
    return RetrievalOutput(
        rank=np.zeros(n, np.int64), tied=np.zeros(n, bool), gt_index=np.zeros(n, np.int64),
        gt_score=np.zeros(n, np.float32), best_wrong_index=np.full(n, -1, np.int64),
        best_wrong_score=np.full(n, np.nan, np.float32), topk_index=np.zeros((n, k), np.int64),
        topk_score=np.zeros((n, k), np.float32), backend=backend,
    )


def _order_desc(vals: torch.Tensor, inds: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sort each row by (score desc, index asc): stable sort on index, then stable on score."""
    o = torch.argsort(inds, dim=1, stable=True)
    vals, inds = vals.gather(1, o), inds.gather(1, o)
    o = torch.sort(vals, dim=1, descending=True, stable=True).indices
    return vals.gather(1, o), inds.gather(1, o)


def _topk_exact(s: torch.Tensor, kk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-kk of each row of s, ordered (score desc, index asc), equal scores at the cut included
    by lower index. torch.topk picks arbitrarily among equal scores, so rows where the
    (kk+1)-th score equals the kk-th are re-selected from the tied items explicitly."""
    m = s.shape[1]
    if kk >= m:
        return _order_desc(*torch.topk(s, m, dim=1))
    vals, inds = torch.topk(s, kk + 1, dim=1)
    amb = (vals[:, kk] == vals[:, kk - 1]).nonzero().flatten()
    vals, inds = _order_desc(vals[:, :kk], inds[:, :kk])
    if amb.numel():
        sa, t = s[amb], vals[amb, kk - 1 : kk]
        # Keep candidates strictly above the cut score; add the kk lowest-index items at the cut.
        above = torch.where(vals[amb] > t, vals[amb], -torch.inf)
        pos = torch.arange(m, device=s.device, dtype=torch.int32).expand_as(sa)
        low = torch.topk(torch.where(sa == t, pos, m), kk, dim=1, largest=False).values.long()
        low_vals = torch.where(low < m, t.expand(-1, kk), -torch.inf)
        cv, ci = _order_desc(torch.cat([above, low_vals], 1), torch.cat([inds[amb], low.clamp(max=m - 1)], 1))
        vals[amb], inds[amb] = cv[:, :kk], ci[:, :kk]
    return vals, inds


def _count_ge_gt(s: torch.Tensor, t: torch.Tensor, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """#{j : s[r, j] >= t[r]} and #{j : s[r, j] > t[r]} for each r in rows.

    On CPU row by row in numpy: no chunk-sized temporaries, and ~30x faster than torch's
    bool reductions there (measured 25 ms vs 1.6 s for 335 x 200k). On CUDA in one torch pass.
    """
    if s.device.type != "cpu":
        sd, td = s[rows], t[rows, None]
        return (sd >= td).sum(1), (sd > td).sum(1)
    s_np, t_np, r_np = s.numpy(), t.numpy(), rows.numpy()
    ge, gt = np.empty(r_np.size, np.int64), np.empty(r_np.size, np.int64)
    for i, r in enumerate(r_np):
        ge[i], gt[i] = np.count_nonzero(s_np[r] >= t_np[r]), np.count_nonzero(s_np[r] > t_np[r])
    return torch.from_numpy(ge), torch.from_numpy(gt)


def _best_positive(s: torch.Tensor, local: torch.Tensor, cols: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Per row of the score block ``s`` (c, M), given its positives as (row, column) pairs: the best positive's
    score, how many positives share it, and the lowest column among them (M where a row has none)."""
    c, m = s.shape
    pv = s[local, cols]
    gt = torch.full((c,), -torch.inf, device=s.device).scatter_reduce_(0, local, pv, "amax")
    at_max = pv == gt[local]
    n_pos_at_max = torch.zeros(c, dtype=torch.int64, device=s.device).scatter_add_(0, local, at_max.long())
    gt_idx = torch.full((c,), m, dtype=torch.int64, device=s.device)
    gt_idx.scatter_reduce_(0, local[at_max], cols[at_max], "amin")
    return gt, n_pos_at_max, gt_idx


def _torch_rows(q: torch.Tensor, g: torch.Tensor, ptr: np.ndarray, idx: np.ndarray, rows: np.ndarray,
                k: int, chunk: int, out: RetrievalOutput, pbar: tqdm[Any]) -> None:
    """Exact results for the (ascending) query indices `rows`, written into `out` in place."""
    dev = g.device

    def block(r: np.ndarray, buf: torch.Tensor) -> torch.Tensor:
        contiguous = int(r[-1]) - int(r[0]) + 1 == r.size  # slicing avoids an index copy in the common case
        qc = q[int(r[0]) : int(r[-1]) + 1] if contiguous else q[torch.from_numpy(r)]
        return torch.mm(qc.to(dev, non_blocking=True), g.T, out=buf)  # (c, M) fp32

    score_rows(block, g.shape[0], dev, ptr, idx, rows, k, chunk, out, pbar)


ScoreBlock = Callable[[np.ndarray, torch.Tensor], torch.Tensor]  # (query indices, (c, M) buffer) -> scores


def score_rows(block: ScoreBlock, m: int, dev: torch.device, ptr: np.ndarray, idx: np.ndarray, rows: np.ndarray,
               k: int, chunk: int, out: RetrievalOutput, pbar: tqdm[Any]) -> None:
    """Exact results for the (ascending) query indices ``rows`` against ``m`` candidates, written into ``out`` in
    place; ``block(r, buf)`` returns the (len(r), m) score block of queries ``r`` (written into ``buf``, fp32 on
    ``dev``; the inner product for :func:`retrieve`, a pairwise scorer's for :mod:`hnbench.search.pairwise`). One rank,
    tie and top-k rule for every score (``ptr``/``idx``: canonical CSR positives, :func:`canonical_positives`)."""
    # One score block reused by every chunk: a fresh (chunk, M) allocation per chunk costs as much
    # as the matmul itself on CPU (page faults on ~256 MB each time).
    buf = torch.empty((min(chunk, rows.size), m), device=dev)
    for start in range(0, rows.size, chunk):
        r = rows[start : start + chunk]
        c = r.size
        local_np, cols_np = _csr_rows(ptr, idx, r)
        local, cols = torch.from_numpy(local_np).to(dev), torch.from_numpy(cols_np).to(dev)
        s = block(r, buf[:c])  # (c, M) fp32
        gt, n_pos_at_max, gt_idx = _best_positive(s, local, cols)
        # Depth k + #positives + margin: holds the top-k and the best wrong for sure, and the best
        # positive for most queries, so the full-row comparison passes run only for the rest.
        kk = min(m, k + int(np.diff(ptr)[r].max()) + _MARGIN)
        vals, inds = _topk_exact(s, kk)
        keys = local * m + cols  # sorted (canonical CSR), so membership is a binary search
        cand = torch.arange(c, device=dev)[:, None] * m + inds
        if keys.numel():
            hit = torch.searchsorted(keys, cand).clamp(max=keys.numel() - 1)
            nonpos = keys[hit] != cand
        else:  # no positive in the block (re-ranking: no query's positive among its K): all are non-positives
            nonpos = torch.ones_like(cand, dtype=torch.bool)
        # The list holds every item scoring > its last score, hence every item >= gt when gt > last.
        ge = nonpos & (vals >= gt[:, None])
        rank = 1 + ge.sum(1)
        tied = (ge & (vals == gt[:, None])).any(1)
        deep = (gt <= vals[:, -1]).nonzero().flatten() if kk < m else gt.new_zeros(0, dtype=torch.int64)
        if deep.numel():
            # Positives are never above gt, so non-positives >= gt = n_ge - (positives == gt).
            n_ge, n_gt = _count_ge_gt(s, gt, deep)
            rank[deep] = 1 + n_ge - n_pos_at_max[deep]
            tied[deep] = rank[deep] - 1 > n_gt
        first = nonpos.int().argmax(1, keepdim=True)
        has = nonpos.any(1)
        bw_idx = torch.where(has, inds.gather(1, first)[:, 0], -1)
        bw_score = torch.where(has, vals.gather(1, first)[:, 0], torch.nan)
        for name, val in (("rank", rank), ("tied", tied), ("gt_index", gt_idx), ("gt_score", gt),
                          ("best_wrong_index", bw_idx), ("best_wrong_score", bw_score),
                          ("topk_index", inds[:, :k]), ("topk_score", vals[:, :k])):
            getattr(out, name)[r] = val.cpu().numpy()
        pbar.update(c)


def _rank_rows(q: torch.Tensor, g: torch.Tensor, ptr: np.ndarray, idx: np.ndarray, rows: np.ndarray, chunk: int,
               out: RetrievalOutput, pbar: tqdm[Any]) -> None:
    """rank, tied, gt_index and gt_score of `rows` by counting over their full score rows.

    For queries whose top-k and best wrong are already known (from the faiss list) but whose best
    positive lies below it: one matmul per block and two counts, no top-k selection.
    """
    m = g.shape[0]
    buf = torch.empty((min(chunk, rows.size), m))
    for start in range(0, rows.size, chunk):
        r = rows[start : start + chunk]
        c = r.size
        local_np, cols_np = _csr_rows(ptr, idx, r)
        local, cols = torch.from_numpy(local_np), torch.from_numpy(cols_np)
        s = torch.mm(q[torch.from_numpy(r)], g.T, out=buf[:c])
        gt, n_pos_at_max, gt_idx = _best_positive(s, local, cols)  # the counts' own matmul: it ties with itself
        n_ge, n_gt = _count_ge_gt(s, gt, torch.arange(c))
        rank = 1 + n_ge - n_pos_at_max
        out.rank[r], out.tied[r] = rank.numpy(), (rank - 1 > n_gt).numpy()
        out.gt_index[r], out.gt_score[r] = gt_idx.numpy(), gt.numpy()
        pbar.update(c)


def _faiss_index(g: torch.Tensor, gpu_ids: list[int] | None) -> tuple[object, object]:
    """(IndexFlatIP over the gallery, GPU resources that must outlive it or None)."""
    faiss = _faiss()
    assert faiss is not None  # only called once a faiss backend was resolved
    index, res = faiss.IndexFlatIP(g.shape[1]), None
    index.add(np.ascontiguousarray(g.cpu().numpy()))
    if gpu_ids:
        if len(gpu_ids) == 1:
            res = faiss.StandardGpuResources()
            index = faiss.index_cpu_to_gpu(res, gpu_ids[0], index)
        else:  # the gallery split over the GPUs (memory M*d/G each), results merged by faiss
            co = faiss.GpuMultipleClonerOptions()
            co.shard = True
            index = faiss.index_cpu_to_gpus_list(index, co=co, gpus=gpu_ids)
    return index, res


def _faiss_phase(q: torch.Tensor, g: torch.Tensor, ptr: np.ndarray, idx: np.ndarray, k: int, faiss_chunk: int,
                 chunk: int, gpu_ids: list[int] | None, out: RetrievalOutput, pbar: tqdm[Any], desc: str,
                 costs: dict[str, float] | None = None) -> tuple[np.ndarray, str]:
    """Search every query with faiss; return the queries left for the exact torch path and the backend name.

    With ``costs`` (``auto``: calibrated seconds per query of the faiss list, the full-row count and
    the torch path), the first ``n/16`` queries are a probe: if the share of queries that need the
    count or the torch path makes faiss slower than torch on this data, the rest goes to torch.
    """
    n, m = q.shape[0], g.shape[0]
    index, _res = _faiss_index(g, gpu_ids)
    kp = min(m, k + int(np.diff(ptr).max()) + _MARGIN)
    if gpu_ids:
        kp = min(kp, _FAISS_GPU_MAX_K)
    keys = np.repeat(np.arange(n, dtype=np.int64), np.diff(ptr)) * m + idx  # sorted: canonical CSR
    q_np = q.cpu().numpy()
    count, redo, rest = [], [], np.zeros(0, dtype=np.int64)
    name = "faiss-gpu" if gpu_ids else "faiss"
    start, step = 0, faiss_chunk if costs is None else min(faiss_chunk, max(_PROBE_MIN, n // 16))
    while start < n:
        stop = min(n, start + step)
        c, r = _faiss_rows(index, q_np, start, stop, kp, k, keys, m, out, pbar)
        count.append(c)
        redo.append(r)
        start, step = stop, faiss_chunk
        if costs is not None and start < n:
            f_count, f_redo = sum(x.size for x in count) / start, sum(x.size for x in redo) / start
            if costs["faiss"] + f_count * costs["count"] + f_redo * costs["torch"] > costs["torch"]:
                log.info("%s: auto: %.0f%% of the probe's queries rank below the faiss list; torch for the rest",
                         desc, 100 * (f_count + f_redo))
                rest, name = np.arange(start, n, dtype=np.int64), "torch"
                break
    count_rows, redo_rows = np.concatenate(count), np.concatenate(redo)
    if gpu_ids:  # on a GPU the torch path does the counting
        redo_rows, count_rows = np.union1d(redo_rows, count_rows), count_rows[:0]
    if count_rows.size:
        _rank_rows(q.cpu(), g.cpu(), ptr, idx, count_rows, chunk, out, pbar)
    if count_rows.size or redo_rows.size:
        log.info("%s: %d/%d queries ranked below the faiss list (counted over their full rows), %d not "
                 "decidable from it (recomputed exactly)", desc, count_rows.size, n, redo_rows.size)
    return np.concatenate([redo_rows, rest]), name


def _faiss_rows(index: Any, q_np: np.ndarray, start: int, stop: int, kp: int, k: int, keys: np.ndarray, m: int,
                out: RetrievalOutput, pbar: tqdm[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Fill queries [start, stop) of `out` from an IndexFlatIP list of depth kp.

    Returns (count, redo): queries whose top-k and best wrong the list decides but whose best
    positive is below it (their rank comes from :func:`_rank_rows`), and queries the list cannot
    decide at all (ties straddling its cut; recomputed by the exact torch path).
    """
    d_, i_ = index.search(np.ascontiguousarray(q_np[start:stop]), kp)
    o = np.lexsort((i_, -d_), axis=1)  # canonical (score desc, index asc) order
    d_, i_ = np.take_along_axis(d_, o, 1), np.take_along_axis(i_, o, 1).astype(np.int64)
    cand = np.arange(start, stop, dtype=np.int64)[:, None] * m + i_
    is_pos = keys[np.searchsorted(keys, cand).clip(max=keys.size - 1)] == cand
    found, has = is_pos.any(1), (~is_pos).any(1)
    ar = np.arange(stop - start)
    fp, fn = is_pos.argmax(1), (~is_pos).argmax(1)
    g_s = d_[ar, fp]
    ge = ~is_pos & (d_ >= g_s[:, None])
    bw = np.where(has, d_[ar, fn], np.nan)
    last = d_[:, -1]
    complete = kp == m
    # The list holds every item scoring > its last score: what lies strictly above it is decided.
    listed = complete | (has & (d_[:, k - 1] > last) & (bw > last))
    ok = complete | (listed & found & (g_s > last))
    sl = slice(start, stop)
    out.rank[sl], out.tied[sl] = 1 + ge.sum(1), (ge & (d_ == g_s[:, None])).any(1)
    out.gt_index[sl], out.gt_score[sl] = i_[ar, fp], g_s
    out.best_wrong_index[sl], out.best_wrong_score[sl] = np.where(has, i_[ar, fn], -1), bw
    out.topk_index[sl], out.topk_score[sl] = i_[:, :k], d_[:, :k]
    pbar.update(int(ok.sum()))
    return np.flatnonzero(listed & ~ok) + start, np.flatnonzero(~listed) + start


def _measure_costs(m: int, n_queries: int, dim: int, seed: int = 0) -> dict[str, float]:
    """Seconds per query at gallery size ``m`` of: the faiss list search, the full-row count of
    :func:`_rank_rows`, the torch path (synthetic unit vectors; each query near its positive)."""
    rng = np.random.default_rng(seed)
    g = rng.standard_normal((m, dim), dtype=np.float32)
    g /= np.linalg.norm(g, axis=1, keepdims=True)
    q = g[:n_queries] + rng.standard_normal((n_queries, dim), dtype=np.float32) / np.sqrt(dim, dtype=np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    qt, gt = torch.from_numpy(q), torch.from_numpy(g)
    ptr, idx = np.arange(n_queries + 1, dtype=np.int64), np.arange(n_queries, dtype=np.int64)
    k, chunk, rows = 10, max(1, _CHUNK_BYTES // (4 * m)), np.arange(n_queries, dtype=np.int64)
    out = RetrievalOutput(np.zeros(n_queries, np.int64), np.zeros(n_queries, bool), np.zeros(n_queries, np.int64),
                          np.zeros(n_queries, np.float32), np.zeros(n_queries, np.int64),
                          np.zeros(n_queries, np.float32), np.zeros((n_queries, k), np.int64),
                          np.zeros((n_queries, k), np.float32), "calibration")
    index, _ = _faiss_index(gt, None)
    kp = min(m, k + 1 + _MARGIN)
    pbar: tqdm[Any]  # opened below, around the runs
    runs: dict[str, Callable[[], object]] = {"faiss": lambda: _faiss_rows(index, q, 0, n_queries, kp, k, idx * m + idx, m, out, pbar),
            "count": lambda: _rank_rows(qt, gt, ptr, idx, rows, chunk, out, pbar),
            "torch": lambda: _torch_rows(qt, gt, ptr, idx, rows, k, chunk, out, pbar)}
    best = dict.fromkeys(runs, float("inf"))
    with ieee_fp32_matmul(), torch.inference_mode(), tqdm(disable=True) as pbar:
        for _ in range(2 if m * n_queries <= 5 * 10**7 else 1):  # interleaved: other load hits all alike
            for name, run in runs.items():
                t = time.perf_counter()
                run()
                best[name] = min(best[name], (time.perf_counter() - t) / n_queries)
    return best


def retrieve(queries: np.ndarray | torch.Tensor, gallery: np.ndarray | torch.Tensor, pos_ptr: np.ndarray, pos_idx: np.ndarray, *, k: int = 10,
             backend: str = "auto", device: str | None = None, chunk_size: int | None = None,
             progress: bool = False, desc: str = "search") -> RetrievalOutput:
    """Exact retrieval of (N, d) queries against an (M, d) gallery; positives in CSR form."""
    q, g = _as_tensor(queries, "queries"), _as_tensor(gallery, "gallery")
    n, m = q.shape[0], g.shape[0]
    if q.shape[1] != g.shape[1]:
        raise ValueError(f"queries have dim {q.shape[1]} but gallery has dim {g.shape[1]}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if device is None:
        device = str(q.device) if q.is_cuda else ("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    ptr, idx = canonical_positives(pos_ptr, pos_idx, n, m)
    name = resolve_backend(backend, dev.type, m)
    k = min(k, m)
    if name == "faiss-gpu" and k + 1 > _FAISS_GPU_MAX_K:
        log.info("k=%d exceeds the GPU faiss limit %d; using the torch backend", k, _FAISS_GPU_MAX_K)
        name = "torch"
    budget = _CHUNK_BYTES_CUDA if dev.type == "cuda" else _CHUNK_BYTES
    chunk = chunk_size if chunk_size is not None else max(1, budget // (4 * m))
    if chunk < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    # faiss tiles its own score blocks, so its query chunk only bounds the (chunk, k') result lists.
    faiss_chunk = chunk_size if chunk_size is not None else _FAISS_CHUNK
    costs = None
    if backend == "auto" and dev.type == "cpu" and _faiss() is not None and n * m >= AUTO_MIN_WORK:
        # Measured once per machine (stored in the cache): faiss only where its list search is
        # faster than the torch path; the probe in _faiss_phase checks that this data agrees.
        costs = search_calibration.costs(m, _measure_costs)
        name = "faiss" if costs["faiss"] < costs["torch"] else "torch"
    out = empty_output(n, k, name)
    log.debug("retrieve: N=%d M=%d d=%d k=%d backend=%s device=%s chunk=%d", n, m, q.shape[1], k, name, dev, chunk)
    with ieee_fp32_matmul(), torch.inference_mode(), tqdm(total=n, desc=desc, unit="q", disable=not progress) as pbar:
        rows = np.arange(n, dtype=np.int64)
        gpus = _gpu_ids(dev)
        if name != "torch":
            rows, out.backend = _faiss_phase(q, g, ptr, idx, k, faiss_chunk, chunk,
                                             gpus if name == "faiss-gpu" else None, out, pbar, desc, costs)
            rows = np.sort(rows)
        if rows.size and len(gpus) > 1:
            # Query rows split over the GPUs, each holding the whole gallery; one thread per GPU
            # (CUDA kernels release the GIL) and disjoint output rows.
            parts = [p for p in np.array_split(rows, len(gpus)) if p.size]
            with ThreadPoolExecutor(len(parts)) as pool:
                jobs = [pool.submit(_torch_rows, q, g.to(f"cuda:{i}"), ptr, idx, p, k, chunk, out, pbar)
                        for i, p in zip(gpus, parts)]
                for job in jobs:
                    job.result()
        elif rows.size:
            _torch_rows(q, g.to(dev), ptr, idx, rows, k, chunk, out, pbar)
    return out
