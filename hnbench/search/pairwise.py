"""Exact search with a query-conditioned (pairwise) scorer: a score of an (image, caption) pair that is not a cosine of
two independent embeddings (FineLIP's fine-grained mode, FLAIR's text-conditioned pooling; the scorers themselves are
:mod:`hnbench.models.scorers`).

Exact search over the whole gallery (:func:`retrieve_pairwise`): the states of all N images and M captions are kept
(on the CPU: memory O((N + M) · tokens · d)); the scores are computed block by block — a block of queries against a
block of candidates, each block's scores written into the query block's score row (``query_block`` × gallery, the
only score matrix held), never an N × M token tensor nor an N × M score matrix — and ranked by
:func:`hnbench.search.exact.score_rows`, the rank, tie and top-k rule of the cosine search: ``rank = 1 + #non-positives
scoring >= the best positive``, equal scores by lower gallery index. The outputs are
:class:`~hnbench.search.exact.RetrievalOutput` s, so metrics, intervals, per-query files, ``compare`` and ``browse`` read
them as they read the cosine path's.

Re-ranking (:func:`rerank`, ``--rerank-top K``): the dual encoder's top K of each query are re-scored with the
pairwise scorer and re-ordered by it; a query whose positive is not among its K keeps its dual-encoder rank
(> K, below the K re-ranked); the top-k list shows the re-ranked K, then the dual encoder's order, every score the
pairwise scorer's. With K >= the gallery it is the full scorer.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Protocol

import numpy as np
import torch
from torch import Tensor
from tqdm.auto import tqdm

from hnbench.search.exact import (
    RetrievalOutput,
    canonical_positives,
    empty_output,
    ieee_fp32_matmul,
    retrieve,
    score_rows,
)

__all__ = ["CANDIDATE_BLOCK", "QUERY_BLOCK", "BlockScorer", "States", "rerank", "retrieve_pairwise"]

States = dict[str, Tensor]
QUERY_BLOCK = 32  # queries per score row block
CANDIDATE_BLOCK = 128  # candidates per score call


class BlockScorer(Protocol):
    """What the search asks of a pairwise scorer (:class:`hnbench.models.scorers.PairScorer`): a block's scores."""

    def score(self, text_state: States, image_state: States) -> Tensor:
        """The (n_texts, n_images) block of scores, higher = better; the dicts are slices of the states."""
        ...


# -- exact pairwise search ---------------------------------------------------------------------------------
def _rows(state: States, rows: slice | Tensor, device: torch.device) -> States:
    return {k: v[rows].to(device, non_blocking=True) for k, v in state.items()}


def _n(state: States) -> int:
    return int(next(iter(state.values())).shape[0]) if state else 0


def _pair_scores(scorer: BlockScorer, queries: States, candidates: States, t2i: bool) -> Tensor:
    """The (n_queries, n_candidates) scores of a query block against a candidate block."""
    s = scorer.score(queries, candidates) if t2i else scorer.score(candidates, queries).T
    return s.float()


@contextlib.contextmanager
def _scoring() -> Iterator[None]:
    with ieee_fp32_matmul(), torch.inference_mode():
        yield


def retrieve_pairwise(scorer: BlockScorer, queries: States, gallery: States, pos_ptr: np.ndarray,
                      pos_idx: np.ndarray, *, t2i: bool, k: int = 10, device: str | torch.device = "cpu",
                      query_block: int = QUERY_BLOCK, candidate_block: int = CANDIDATE_BLOCK,
                      progress: bool = False, desc: str = "pairwise search") -> RetrievalOutput:
    """Exact retrieval of every query (``t2i``: caption states querying image states; else images querying
    captions) against the whole gallery with ``scorer``, in ``query_block`` × ``candidate_block`` score calls;
    ranked by :func:`hnbench.search.exact.score_rows` (the cosine search's rule). Positives in CSR form."""
    n, m = _n(queries), _n(gallery)
    if m < 1:
        raise ValueError("the gallery is empty")
    ptr, idx = canonical_positives(pos_ptr, pos_idx, n, m)
    dev = torch.device(device)
    out = empty_output(n, min(k, m), "pairwise")

    def block(r: np.ndarray, buf: Tensor) -> Tensor:
        q = _rows(queries, slice(int(r[0]), int(r[-1]) + 1), dev)  # score_rows hands out contiguous rows
        for j in range(0, m, candidate_block):
            buf[:, j:j + candidate_block] = _pair_scores(scorer, q, _rows(gallery, slice(j, j + candidate_block), dev),
                                                         t2i)
        return buf

    with _scoring(), tqdm(total=n, desc=desc, unit="q", disable=not progress) as pbar:
        score_rows(block, m, dev, ptr, idx, np.arange(n, dtype=np.int64), min(k, m), query_block, out, pbar)
    return out


def _listed_scores(scorer: BlockScorer, queries: States, gallery: States, cand: np.ndarray, t2i: bool,
                   dev: torch.device, query_block: int, candidate_block: int) -> Tensor:
    """(N, L) scores of each query against its own candidates ``cand`` (N, L): per block of queries, the union of
    their candidates is scored (in candidate blocks) and each query's picked out; the block holds about
    ``candidate_block`` // L queries, so the union scored stays near the candidates asked for."""
    n, width = cand.shape
    out = torch.empty((n, width))
    step = max(1, min(query_block, candidate_block // width))
    for start in range(0, n, step):
        stop = min(n, start + step)
        union, local = np.unique(cand[start:stop], return_inverse=True)
        q = _rows(queries, slice(start, stop), dev)
        s = torch.empty((stop - start, union.size), device=dev)
        for j in range(0, union.size, candidate_block):
            pick = torch.from_numpy(union[j:j + candidate_block])
            s[:, j:j + candidate_block] = _pair_scores(scorer, q, _rows(gallery, pick, dev), t2i)
        out[start:stop] = s.gather(1, torch.from_numpy(local.reshape(stop - start, width)).to(dev)).cpu()
    return out


def rerank(scorer: BlockScorer, queries: States, gallery: States, query_vectors: np.ndarray,
           gallery_vectors: np.ndarray, pos_ptr: np.ndarray, pos_idx: np.ndarray, *, top: int, t2i: bool,
           k: int = 10, backend: str = "auto", device: str | torch.device = "cpu", query_block: int = QUERY_BLOCK,
           candidate_block: int = CANDIDATE_BLOCK, progress: bool = False,
           desc: str = "re-rank") -> RetrievalOutput:
    """The dual encoder's top ``top`` of each query (exact cosine search of the vectors) re-scored with ``scorer`` and
    re-ordered by it (:data:`hnbench.results.record.RERANK_RULE`); ``top`` >= the gallery: every pair, as :func:`retrieve_pairwise`."""
    n, m = _n(queries), _n(gallery)
    dev = torch.device(device)
    depth, kk = min(m, max(top, k)), min(top, m)
    cos = retrieve(query_vectors, gallery_vectors, pos_ptr, pos_idx, k=depth, backend=backend, device=str(dev),
                   progress=progress, desc=f"{desc}: cosine top {depth}")
    ptr, idx = canonical_positives(pos_ptr, pos_idx, n, m)
    listed = np.concatenate([cos.topk_index, cos.gt_index[:, None]], axis=1)  # + the cosine-best positive
    with _scoring():
        scores = _listed_scores(scorer, queries, gallery, listed, t2i, dev, query_block, candidate_block)
    head = np.sort(cos.topk_index[:, :kk], axis=1)  # the K re-ranked, by gallery index (the tie rule's order)
    order = np.argsort(cos.topk_index[:, :kk], axis=1, kind="stable")
    head_scores = scores[:, :kk].gather(1, torch.from_numpy(order))
    keys = np.repeat(np.arange(n, dtype=np.int64), np.diff(ptr)) * m + idx  # sorted: canonical CSR
    flat = np.arange(n, dtype=np.int64)[:, None] * m + head
    is_pos = keys[np.searchsorted(keys, flat).clip(max=max(0, keys.size - 1))] == flat if keys.size else \
        np.zeros_like(flat, dtype=bool)
    local_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(is_pos.sum(1), out=local_ptr[1:])
    local_idx = np.nonzero(is_pos)[1].astype(np.int64)
    local = empty_output(n, kk, "pairwise")

    def block(r: np.ndarray, buf: Tensor) -> Tensor:
        buf.copy_(head_scores[int(r[0]):int(r[-1]) + 1].to(buf.device))
        return buf

    with _scoring(), tqdm(total=n, desc=desc, unit="q", disable=not progress) as pbar:
        score_rows(block, kk, torch.device("cpu"), local_ptr, local_idx, np.arange(n, dtype=np.int64), kk,
                   query_block, local, pbar)
    rows = np.arange(n)
    inside = np.diff(local_ptr) > 0
    out = empty_output(n, min(k, m), "pairwise-rerank")
    out.rank = np.where(inside, local.rank, cos.rank)
    out.tied = np.where(inside, local.tied, cos.tied)
    out.gt_index = np.where(inside, head[rows, np.minimum(local.gt_index, kk - 1)], cos.gt_index)
    out.gt_score = np.where(inside, local.gt_score, scores[:, -1].numpy()).astype(np.float32)
    tail_index, tail_scores = cos.topk_index[:, kk:], scores[:, kk:depth].numpy()
    listed_index = np.concatenate([head[rows[:, None], local.topk_index], tail_index], axis=1)
    listed_scores = np.concatenate([local.topk_score, tail_scores], axis=1)
    out.topk_index, out.topk_score = listed_index[:, :out.topk_index.shape[1]], listed_scores[:, :out.topk_score.shape[1]]
    wrong = local.best_wrong_index >= 0
    out.best_wrong_index = np.where(wrong, head[rows, np.maximum(local.best_wrong_index, 0)], -1)
    out.best_wrong_score = np.where(wrong, local.best_wrong_score, np.nan).astype(np.float32)
    if tail_index.size and not wrong.all():  # every re-ranked item a positive: the first wrong one below them
        flat = rows[:, None] * m + tail_index
        tail_pos = keys[np.searchsorted(keys, flat).clip(max=keys.size - 1)] == flat
        has = (~tail_pos).any(1) & ~wrong
        first = (~tail_pos).argmax(1)
        out.best_wrong_index = np.where(has, tail_index[rows, first], out.best_wrong_index)
        out.best_wrong_score = np.where(has, tail_scores[rows, first], out.best_wrong_score).astype(np.float32)
    return out
