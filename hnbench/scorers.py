"""Query-conditioned (pairwise) scorers: models whose score of an (image, caption) pair is not a cosine of two
independent embeddings (FineLIP's fine-grained mode, FLAIR's text-conditioned pooling).

The contract (:class:`PairScorer`), offered by a model family (:meth:`hnbench.models.family.ModelFamily.pair_scorers`,
``{}`` for a dual encoder): per-image and per-caption **states** (batch-first tensors, e.g. token sets), computed
once per item, and a ``score`` of a block of captions against a block of images.

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

States are never cached (the embedding cache holds dual-encoder embeddings only; ``--rerank-top`` reads those from
it): a pairwise run encodes its states every time.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from tqdm.auto import tqdm

from hnbench.errors import ConfigError
from hnbench.models.base import Encoder, ModelInfo, TokenizedTexts
from hnbench.results.record import dual_encoder_scorer
from hnbench.search.exact import (
    RetrievalOutput,
    canonical_positives,
    empty_output,
    ieee_fp32_matmul,
    retrieve,
    score_rows,
)

__all__ = ["COSINE", "FINELIP", "RERANK_RULE", "CosineScorer", "FineLIPScorer", "PairScorer", "States", "check_scorer",
           "encode_states", "finelip_cross_net", "finelip_scorers", "offered", "pick", "rerank", "retrieve_pairwise",
           "scorer_record"]

COSINE = "cosine"  # the dual encoder: today's path (embeddings, cosine, the search backends)
States = dict[str, Tensor]
QUERY_BLOCK = 32  # queries per score row block
CANDIDATE_BLOCK = 128  # candidates per score call
RERANK_RULE = ("the dual encoder's top K of each query re-scored and re-ordered by the pairwise scorer; a positive "
               "outside them keeps its dual-encoder rank (> K, below the K re-ranked)")


@runtime_checkable
class PairScorer(Protocol):
    """A query-conditioned scorer: states per item, then a score per (caption, image) pair."""

    name: str  # recorded in results, e.g. "finelip-finegrained"
    description: str  # one line for help / the results

    def image_state(self, pixels: Tensor) -> dict[str, Tensor]:
        """Per-image tensors, batch-first (e.g. token sets)."""
        ...

    def text_state(self, tokens: Tensor) -> dict[str, Tensor]:
        """Per-caption tensors, batch-first."""
        ...

    def score(self, text_state: dict[str, Tensor], image_state: dict[str, Tensor]) -> Tensor:
        """The (n_texts, n_images) block of scores, higher = better; the dicts are slices of the states."""
        ...


# -- the scorers a model offers ----------------------------------------------------------------------------
def offered(encoder: Encoder) -> dict[str, PairScorer]:
    """The pairwise scorers ``encoder``'s family offers for it (none: a dual encoder)."""
    from hnbench.models.family import family_of

    return family_of(encoder.info.arch).pair_scorers(encoder)


def _refusal(scorer: str, model: str, names: Sequence[str]) -> ConfigError:
    what = (f"it offers {', '.join([COSINE, *names])}" if names else
            f"it is a dual encoder: it offers {COSINE} only")
    return ConfigError(f"--scorer {scorer}: {model} has no such scorer; {what}")


def check_scorer(scorer: str, model: str, names: Sequence[str] | None) -> None:
    """Refuse (one line naming what the model offers) ``scorer`` where ``names`` (the pairwise scorers a model
    offers; None: not known before it loads) lacks it."""
    if scorer != COSINE and names is not None and scorer not in names:
        raise _refusal(scorer, model, names)


def pick(scorer: str, encoder: Encoder) -> PairScorer:
    """The pairwise scorer ``scorer`` of a loaded encoder, or the one-line refusal (before any encoding)."""
    found = offered(encoder)
    if scorer not in found:
        raise _refusal(scorer, encoder.info.arch + (f" ({encoder.info.pretrained})" if encoder.info.pretrained else ""),
                       sorted(found))
    return found[scorer]


def scorer_record(scorer: PairScorer | None, rerank_top: int | None) -> dict[str, Any]:
    """What a result records of its scorer: name, description, ``rerank_top`` (None: every pair scored)."""
    if scorer is None:
        return dual_encoder_scorer()
    return {"name": scorer.name, "description": scorer.description, "rerank_top": rerank_top,
            **({"rule": RERANK_RULE} if rerank_top is not None else {})}


# -- the dual encoder as a pairwise scorer (the degenerate case) --------------------------------------------
class CosineScorer:
    """The dual encoder behind the pairwise contract: states are the L2-normalised embeddings, the score their inner
    product (what the cosine path computes; the tests check the two agree)."""

    name = COSINE
    description = "dual encoder: cosine of the L2-normalised image and caption embeddings"

    def __init__(self, encoder: Encoder):
        self.encoder = encoder

    def image_state(self, pixels: Tensor) -> dict[str, Tensor]:
        return {"embedding": self.encoder.encode_images(pixels).float()}

    def text_state(self, tokens: Tensor) -> dict[str, Tensor]:
        return {"embedding": self.encoder.encode_texts(tokens).float()}

    def score(self, text_state: dict[str, Tensor], image_state: dict[str, Tensor]) -> Tensor:
        return text_state["embedding"] @ image_state["embedding"].T


# -- FineLIP's fine-grained scorer ------------------------------------------------------------------------
FINELIP = "finelip-finegrained"
FINELIP_COS_WEIGHT = 0.8  # the authors' fusion (frameworks.md §1.3): 0.8·cos + 0.2·S̃
OBJECTIVE_MODULES = "objective_modules.safetensors"  # a training run's extra modules (hnbench.train.export)
_RUN_PREFIX, _RELEASE_PREFIX = "finelip.", "cross_net."


class FineLIPScorer:
    """FineLIP's ``--finegrain`` inference: 0.8·cos(v, t) + 0.2·S̃, with v, t the CLS / EOT features and S̃ the
    cross-modal late interaction (:func:`hnbench.train.objectives.finelip.clim_scores`, the score its objective
    trains) of the cross-net's aggregated token sets (:class:`~hnbench.train.objectives.finelip.ATRM`), every pair.

    States: ``global`` (B, D) normalised features, ``tokens`` (B, K+1, D) normalised aggregated sets."""

    name = FINELIP
    description = ("FineLIP fine-grained: 0.8·cos + 0.2·S̃ (the cross-net's token aggregation and late "
                   "interaction), every pair")

    def __init__(self, encoder: Any, atrm: Any):
        from hnbench.train.towers import CLIPTowers

        self.encoder = encoder
        self.towers = CLIPTowers(encoder.model, "open_clip", encoder=encoder)
        self.atrm = atrm.to(encoder.device).eval()

    @torch.no_grad()
    def image_state(self, pixels: Tensor) -> dict[str, Tensor]:
        e = self.encoder
        pixels = pixels.to(device=e.device, dtype=getattr(e, "input_dtype", None) or pixels.dtype)
        v, tokens = self.towers._image_with_tokens(pixels, cls=True)
        return {"global": v.float(), "tokens": self.atrm.image(tokens.float())}

    @torch.no_grad()
    def text_state(self, tokens: Tensor) -> dict[str, Tensor]:
        ctx = int(self.encoder.info.context_length)
        tokens = F.pad(tokens, (0, ctx - tokens.shape[1])) if tokens.shape[1] < ctx else tokens  # trimmed batches
        tokens = tokens.to(self.encoder.device)
        t, x = self.towers._text_with_tokens(tokens)
        return {"global": t.float(), "tokens": self.atrm.text(x.float(), (tokens != 0).sum(dim=1))}

    def score(self, text_state: dict[str, Tensor], image_state: dict[str, Tensor]) -> Tensor:
        from hnbench.train.objectives.finelip import clim_scores

        # in float64, rounded to float32 once: a pair's score does not depend on where it sits in a block (fp32
        # kernels sum in a position-dependent order), so equal items tie exactly whatever the block sizes
        t, i = {k: v.double() for k, v in text_state.items()}, {k: v.double() for k, v in image_state.items()}
        cos = t["global"] @ i["global"].T
        fine = clim_scores(i["tokens"], t["tokens"]).T  # (images, texts) → (texts, images)
        return (FINELIP_COS_WEIGHT * cos + (1 - FINELIP_COS_WEIGHT) * fine).float()


def finelip_cross_net(pretrained: str | None, *, read: bool = True) -> dict[str, Tensor] | bool | None:
    """FineLIP's cross-net for the weights ``pretrained``: a training run's ``objective_modules.safetensors`` beside
    the checkpoint (keys ``finelip.*``), or a released state dict's own ``cross_net.*`` keys (which the plain-cosine
    load drops). Returns its state dict (``aggr_net.*``, ``cap_aggr_net.*``), or with ``read=False`` whether there
    is one (None: not known without reading a pickled checkpoint whole); an empty dict / False: none."""
    if not pretrained or not Path(pretrained).exists():
        return {} if read else False
    path = Path(pretrained)
    beside = path.parent / OBJECTIVE_MODULES  # RUN/checkpoint.safetensors or RUN/adapter: the run's folder
    sources = [(beside, _RUN_PREFIX)] if beside.is_file() else []
    if path.is_file():
        sources.append((path, _RELEASE_PREFIX))
    for source, prefix in sources:
        if not read:
            if source.suffix != ".safetensors":
                return None
            from safetensors import safe_open

            with contextlib.suppress(Exception), safe_open(str(source), "pt") as f:
                if any(k.startswith(prefix) for k in f.keys()):  # noqa: SIM118 (safe_open has no __iter__)
                    return True
            continue
        from hnbench.models.checkpoint import read_state_dict

        sd = read_state_dict(source)
        found = {k[len(prefix):]: v for k, v in sd.items() if k.startswith(prefix)}
        if found:
            return found
    return {} if read else False


def finelip_scorers(encoder: Any) -> dict[str, PairScorer]:
    """``{"finelip-finegrained": …}`` for an open_clip encoder whose weights carry FineLIP's cross-net, else ``{}``."""
    sd = finelip_cross_net(encoder.info.pretrained)
    if not isinstance(sd, dict) or not sd or not hasattr(encoder.model, "visual"):
        return {}
    from hnbench.models.checkpoint import load_into
    from hnbench.train.objectives.finelip import ATRM

    head = sd.get("aggr_net.mlp.3.weight")
    norm = sd.get("aggr_net.mlp.0.weight")
    if head is None or norm is None:
        raise ConfigError(f"{encoder.info.pretrained}: its FineLIP cross-net lacks aggr_net.mlp weights "
                          f"(keys: {', '.join(sorted(sd)[:4])}, …)")
    atrm = ATRM(int(norm.shape[0]), int(head.shape[0]))
    load_into(atrm, {k: v.float() for k, v in sd.items()}, f"the FineLIP cross-net of {encoder.info.pretrained}")
    scorer: PairScorer = FineLIPScorer(encoder, atrm)
    return {FINELIP: scorer}


# -- encoding states through hnbench.evaluation.encode (its batching, workers, progress and error handling) -------------
class _StateEncoder:
    """``encoder`` whose ``encode_images`` / ``encode_texts`` compute a scorer's states (kept here, on the CPU) and
    return each row's index into them, so whatever order and batches :mod:`hnbench.evaluation.encode` uses, the vectors it
    returns say which state row is which item."""

    def __init__(self, encoder: Encoder, scorer: PairScorer):
        self.inner, self.scorer = encoder, scorer
        self.info: ModelInfo = encoder.info
        self.device: torch.device = encoder.device
        self.images: list[States] = []
        self.texts: list[States] = []
        self._n = {"images": 0, "texts": 0}

    @property
    def dynamic_padding(self) -> bool:
        return bool(self.inner.dynamic_padding)

    @property
    def transform_description(self) -> str | None:
        return self.inner.transform_description

    @property
    def has_images(self) -> bool:
        return bool(self.inner.has_images)

    @property
    def image_transform(self) -> Callable[[Any], Tensor]:
        return self.inner.image_transform

    def tokenize(self, texts: Sequence[str]) -> TokenizedTexts:
        return self.inner.tokenize(texts)

    def _keep(self, kind: str, state: States) -> Tensor:
        rows = {int(v.shape[0]) for v in state.values()}
        if len(rows) != 1:
            raise ValueError(f"{self.scorer.name}: a {kind[:-1]} state's tensors are not batch-first alike: {rows}")
        n = rows.pop()
        getattr(self, kind).append({k: v.detach().float().cpu() for k, v in state.items()})
        start, self._n[kind] = self._n[kind], self._n[kind] + n
        return torch.arange(start, start + n, dtype=torch.float32)[:, None]

    def encode_images(self, pixels: Tensor) -> Tensor:
        return self._keep("images", self.scorer.image_state(pixels))

    def encode_texts(self, tokens: Tensor) -> Tensor:
        return self._keep("texts", self.scorer.text_state(tokens))

    def to(self, device: str | torch.device) -> _StateEncoder:
        self.inner.to(device)
        self.device = torch.device(device)
        return self

    def states(self, kind: str, rows: np.ndarray) -> States:
        """The states of the items whose returned indices are ``rows`` (in that order)."""
        parts: list[States] = getattr(self, kind)
        if not parts:
            return {}
        order = torch.from_numpy(rows.astype(np.int64))
        return {k: torch.cat([p[k] for p in parts])[order] for k in parts[0]}


def encode_states(encoder: Encoder, scorer: PairScorer, *, images: Any = None, texts: Sequence[str] | None = None,
                  skip_bad: bool = False, text_batch_size: int | None = None, **options: Any) -> tuple[States, Any]:
    """The states of ``images`` (an :class:`~hnbench.data.base.ImageSource`) or of the captions ``texts`` (one of
    the two), with what :func:`hnbench.evaluation.encode.encode_images` / ``encode_texts`` return, which encode them (their
    batches, workers and errors; never cached): (states, ``ImageEmbeddings`` | ``TextEmbeddings``). The states of
    unreadable images (``skip_bad``) are left out, as the evaluation leaves out their rows. ``options``:
    ``batch_size``, ``num_workers``, ``amp``, ``progress``."""
    from hnbench.evaluation.encode import encode_images, encode_texts

    proxy = _StateEncoder(encoder, scorer)
    if images is not None:
        img = encode_images(proxy, images, skip_bad=skip_bad, cache=None, **options)
        keep = np.array([i for i in range(len(images)) if i not in img.bad], dtype=np.int64)
        return (proxy.states("images", img.vectors[keep, 0]) if keep.size else {}), img
    batch_size = text_batch_size or max(int(options.pop("batch_size", 64)), 64)
    options.pop("batch_size", None)
    txt = encode_texts(proxy, list(texts or []), batch_size=batch_size, cache=None, **options)
    return proxy.states("texts", txt.vectors[:, 0]), txt


# -- exact pairwise search ---------------------------------------------------------------------------------
def _rows(state: States, rows: slice | Tensor, device: torch.device) -> States:
    return {k: v[rows].to(device, non_blocking=True) for k, v in state.items()}


def _n(state: States) -> int:
    return int(next(iter(state.values())).shape[0]) if state else 0


def _pair_scores(scorer: PairScorer, queries: States, candidates: States, t2i: bool) -> Tensor:
    """The (n_queries, n_candidates) scores of a query block against a candidate block."""
    s = scorer.score(queries, candidates) if t2i else scorer.score(candidates, queries).T
    return s.float()


@contextlib.contextmanager
def _scoring() -> Iterator[None]:
    with ieee_fp32_matmul(), torch.inference_mode():
        yield


def retrieve_pairwise(scorer: PairScorer, queries: States, gallery: States, pos_ptr: np.ndarray,
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


def _listed_scores(scorer: PairScorer, queries: States, gallery: States, cand: np.ndarray, t2i: bool,
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


def rerank(scorer: PairScorer, queries: States, gallery: States, query_vectors: np.ndarray,
           gallery_vectors: np.ndarray, pos_ptr: np.ndarray, pos_idx: np.ndarray, *, top: int, t2i: bool,
           k: int = 10, backend: str = "auto", device: str | torch.device = "cpu", query_block: int = QUERY_BLOCK,
           candidate_block: int = CANDIDATE_BLOCK, progress: bool = False,
           desc: str = "re-rank") -> RetrievalOutput:
    """The dual encoder's top ``top`` of each query (exact cosine search of the vectors) re-scored with ``scorer`` and
    re-ordered by it (:data:`RERANK_RULE`); ``top`` >= the gallery: every pair, as :func:`retrieve_pairwise`."""
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
