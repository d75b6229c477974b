"""Approximate retrieval (faiss HNSW / IVF-Flat) for exploring galleries too large to search exactly.

Its ranks are lower bounds; it reports its own recall against exact search on a sample, and its
output is marked ``approximate`` so results built on it never reach a leaderboard.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from hnbench.metrics import validate_csr
from hnbench.search.exact import (
    _FAISS_CHUNK,
    _MARGIN,
    RetrievalOutput,
    _as_tensor,
    _csr_rows,
    _faiss,
    _sorted_pairs,
    retrieve,
)

__all__ = ["retrieve_approximate"]

log = logging.getLogger(__name__)


def _approx_index(g: np.ndarray, kind: str, kp: int, nprobe: int | None, seed: int) -> Any:
    faiss = _faiss()
    if faiss is None:
        raise ValueError("approximate search needs faiss, which is not installed")
    m, d = g.shape
    if kind == "hnsw":
        index = faiss.IndexHNSWFlat(d, 32, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = 80
        index.add(g)
        index.hnsw.efSearch = max(128, kp)
    elif kind == "ivf":
        nlist = max(1, min(m // 39, int(4 * np.sqrt(m))))  # faiss wants >= 39 training points per list
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(d), d, nlist, faiss.METRIC_INNER_PRODUCT)
        rng = np.random.default_rng(seed)
        index.train(g[np.sort(rng.choice(m, min(m, 256 * nlist), replace=False))])
        index.add(g)
        index.nprobe = nprobe or max(1, nlist // 16)
    else:
        raise ValueError(f"unknown approximate index {kind!r}; valid: hnsw, ivf")
    return index


def retrieve_approximate(queries: np.ndarray | torch.Tensor, gallery: np.ndarray | torch.Tensor, pos_ptr: np.ndarray, pos_idx: np.ndarray, *, k: int = 10,
                         index: str = "hnsw", nprobe: int | None = None, sample: int = 1000, seed: int = 0,
                         progress: bool = False, desc: str = "search") -> RetrievalOutput:
    """Approximate retrieval (faiss HNSW or IVF-Flat) for exploring large galleries; not a benchmark number.

    Each query gets the index's list of depth k' = k + max #positives + margin. ``gt_score`` and
    ``gt_index`` are exact (positives are scored directly); ``rank`` = 1 + #non-positives in the
    list scoring >= the best positive, a lower bound of the exact rank (the index may miss items).
    On ``sample`` seeded queries the exact search runs too and ``recall_vs_exact`` reports
    ``recall@k`` (mean |approx top-k ∩ exact top-k| / k) and ``rank_agreement`` (share of equal
    ranks). The output is marked ``approximate=True``; evaluate records ``settings.search =
    "approximate"`` so leaderboards keep it apart from exact results.
    """
    q, g = _as_tensor(queries, "queries"), _as_tensor(gallery, "gallery")
    n, m = q.shape[0], g.shape[0]
    if q.shape[1] != g.shape[1]:
        raise ValueError(f"queries have dim {q.shape[1]} but gallery has dim {g.shape[1]}")
    ptr, idx = _sorted_pairs(*validate_csr(pos_ptr, pos_idx, n, m))
    k = min(k, m)
    kp = min(m, k + int(np.diff(ptr).max()) + _MARGIN)
    q_np, g_np = np.ascontiguousarray(q.cpu().numpy()), np.ascontiguousarray(g.cpu().numpy())
    ann = _approx_index(g_np, index, kp, nprobe, seed)
    out = RetrievalOutput(
        rank=np.zeros(n, np.int64), tied=np.zeros(n, bool), gt_index=np.zeros(n, np.int64),
        gt_score=np.zeros(n, np.float32), best_wrong_index=np.full(n, -1, np.int64),
        best_wrong_score=np.full(n, np.nan, np.float32), topk_index=np.zeros((n, k), np.int64),
        topk_score=np.zeros((n, k), np.float32), backend=f"faiss-{index}", approximate=True,
    )
    keys = np.repeat(np.arange(n, dtype=np.int64), np.diff(ptr)) * m + idx
    for start in tqdm(range(0, n, _FAISS_CHUNK), desc=desc, unit="chunk", disable=not progress):
        stop = min(n, start + _FAISS_CHUNK)
        d_, i_ = ann.search(q_np[start:stop], kp)
        d_ = np.where(i_ < 0, -np.inf, d_).astype(np.float32)  # -1: the index found fewer than k'
        o = np.lexsort((i_, -d_), axis=1)
        d_, i_ = np.take_along_axis(d_, o, 1), np.take_along_axis(i_, o, 1).astype(np.int64)
        rows = np.arange(start, stop, dtype=np.int64)
        local, cols = _csr_rows(ptr, idx, rows)
        pv = np.einsum("ij,ij->i", q_np[rows[local]], g_np[cols])  # exact positive scores
        gt = np.full(rows.size, -np.inf, np.float32)
        np.maximum.at(gt, local, pv)
        gi = np.full(rows.size, m, np.int64)
        at_max = pv == gt[local]
        np.minimum.at(gi, local[at_max], cols[at_max])
        cand = rows[:, None] * m + np.maximum(i_, 0)
        nonpos = (i_ >= 0) & (keys[np.searchsorted(keys, cand).clip(max=keys.size - 1)] != cand)
        ge = nonpos & (d_ >= gt[:, None])
        has = nonpos.any(1)
        first = nonpos.argmax(1)
        ar = np.arange(rows.size)
        sl = slice(start, stop)
        out.rank[sl], out.tied[sl] = 1 + ge.sum(1), (ge & (d_ == gt[:, None])).any(1)
        out.gt_index[sl], out.gt_score[sl] = gi, gt
        out.best_wrong_index[sl] = np.where(has, i_[ar, first], -1)
        out.best_wrong_score[sl] = np.where(has, d_[ar, first], np.nan)
        out.topk_index[sl], out.topk_score[sl] = i_[:, :k], d_[:, :k]
    rows = np.sort(np.random.default_rng(seed).choice(n, min(n, sample), replace=False))
    local, cols = _csr_rows(ptr, idx, rows)
    sub_ptr = np.zeros(rows.size + 1, np.int64)
    np.cumsum(np.bincount(local, minlength=rows.size), out=sub_ptr[1:])
    exact = retrieve(q_np[rows], g_np, sub_ptr, cols, k=k, backend="torch", device="cpu")
    overlap = [np.intersect1d(a, b).size for a, b in zip(out.topk_index[rows], exact.topk_index)]
    out.recall_vs_exact = {"recall@k": float(np.mean(overlap) / k), "k": k,
                           "rank_agreement": float(np.mean(out.rank[rows] == exact.rank)), "sample": int(rows.size)}
    log.info("%s: approximate (%s) recall@%d vs exact on %d queries: %.4f", desc, index, k, rows.size,
             out.recall_vs_exact["recall@k"])
    return out
