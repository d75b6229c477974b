"""Retrieval, the first task: image–caption search both ways, exact, through the embedding cache.

t2i: each caption queries the images (its own image is the positive). i2t: each image queries the captions (any of
its captions is a positive; R@K is the "hit" rate). Metrics per direction: R@K (%), mean and median rank, MRR, query
and tie counts, 95% intervals (:func:`hnbench.metrics.summarize`). Main score: mean R@1 = (t2i R@1 + i2t R@1) / 2.
A per-query file (ranks, ground truth, best wrong match, top-k) beside every result.

The pipeline (:meth:`Retrieval.run`): under ``torchrun`` the ranks share the encoding into the cache
(:func:`_share_encoding`); then rank 0 encodes what is not cached (:func:`_encode`), searches both ways
(:func:`_search`: the exact cosine search, approximate HNSW, or a pairwise scorer's exact or re-ranked search),
and writes the result and its per-query file (:func:`_record`).
"""

from __future__ import annotations

import io
import logging
import math
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hnbench.errors import ConfigError
from hnbench.metrics import ci_methods, csr_from_assignment, summarize
from hnbench.results.record import (
    PER_QUERY_KEY,
    PER_QUERY_SCHEMA_VERSION,
    PER_QUERY_TOP,
    EvalResult,
    check_target,
    scorer_record,
    write_result_pair,
)
from hnbench.results.tables import interval_note, recorded_interval, with_interval
from hnbench.tasks import Recorded, Task
from hnbench.tasks.common import token_stats
from hnbench.validate import DEFAULT_KS, warn_trivial_ks

if TYPE_CHECKING:  # the pipeline's modules import torch, pandas, pyarrow: imported when it runs
    import pandas as pd

    from hnbench.data import ImageTextDataset
    from hnbench.distributed import DistContext
    from hnbench.evaluation.cache import EmbeddingCache
    from hnbench.models.base import Encoder
    from hnbench.models.scorers import PairScorer
    from hnbench.search.exact import RetrievalOutput
    from hnbench.search.pairwise import States
    from hnbench.settings import EvalSettings
    from hnbench.specs import DataSpec

__all__ = ["TASK", "Retrieval", "per_query_frame", "positives", "score_embeddings", "summaries"]

logger = logging.getLogger(__name__)

TIE_RULE = "pessimistic: rank = 1 + #non-positives scoring >= the best positive"


class Retrieval(Task):
    """Image–caption search both ways (the module docstring)."""

    def load(self, spec: Any, **options: Any) -> ImageTextDataset:
        from hnbench.data import load_spec

        return load_spec(spec, **options)

    def accepts(self, data: Any) -> bool:
        from hnbench.data import ImageTextDataset

        return isinstance(data, ImageTextDataset)

    def run(self, encoder: Any, data: Any, settings: Any, output_dir: str | Path | None = None, *, ctx: Any = None,
            timings: dict[str, float] | None = None, t0: float | None = None,
            data_spec: Any = None) -> EvalResult:
        """Encode (through the cache) → search both ways → score → the result file and its per-query file.

        ``ctx``: the distributed context of the caller (:func:`hnbench.evaluation.evaluate.evaluate`), which set it
        up and closes it; ``data_spec``: the spec ``data`` was loaded with, recorded in ``result.dataset["spec"]``."""
        from hnbench import distributed as dist

        ctx = dist.DistContext() if ctx is None else ctx
        return _Run(encoder, data, settings, output_dir, ctx, timings, t0, data_spec).run()

    def training_log(self, result: Recorded) -> tuple[dict[str, Any], str]:
        """R@1, R@5, R@10 and MRR each way (``t2i_R@1``, as training logs always recorded them)."""
        fields = {f"{d}_{k}": result.metrics[d][k] for d in ("t2i", "i2t") for k in ("R@1", "R@5", "R@10", "MRR")
                  if k in result.metrics[d]}
        return fields, (f"t2i R@1 {fields.get('t2i_R@1', float('nan')):.2f}, "
                        f"i2t R@1 {fields.get('i2t_R@1', float('nan')):.2f}")

    def table(self, result: Any, fmt: str = "github") -> str:
        """A t2i/i2t × R@K table, each R@K with its 95% interval when the record has one (``†``: exact
        Clopper–Pearson), MRR, median rank, query and tie counts, the text budget, and what the intervals are."""
        from tabulate import tabulate

        ks = [k for k in result.metrics.get("t2i", {}) if k.startswith("R@")]
        rows, exact = [], False
        for direction in self.groups:
            m = result.metrics.get(direction, {})
            how = (result.ci95_method or {}).get(direction) or {}
            row: list[Any] = [direction]
            for k in ks:
                ci = recorded_interval((result.ci95 or {}).get(direction), k)
                exact = exact or (ci is not None and how.get(k) == "clopper-pearson")
                row.append(f"{m[k]:.2f}" if ci is None else with_interval(m[k], ci, how.get(k), True))
            row += [f"{m.get('MRR', float('nan')):.4f}", f"{m.get('median_rank', float('nan')):g}",
                    m.get("n_queries"), m.get("n_tied")]
            rows.append(row)
        table = tabulate(rows, headers=["direction", *ks, "MRR", "median rank", "queries", "tied"], tablefmt=fmt)
        budget = result.text_budget()
        table += f"\n{budget}" if budget else ""
        if not any((result.ci95 or {}).values()):
            return table
        return table + f"\n{interval_note('R@K', exact)}. Whether two models differ: `hnbench compare` (paired test)."

    def board_note(self, sort: str) -> str:
        return (f" Rank by {sort if sort in self.board_columns() else self.main_score} (mean R@1 = (t2i R@1 + i2t "
                "R@1) / 2; ties share a rank). R@K in %.")


TASK = Retrieval(
    name="retrieval",
    title="Retrieval",
    inputs="an image–caption set (a registered benchmark, a manifest, an image folder, an HF dataset)",
    groups=("t2i", "i2t"),
    bounds={"R@": (0.0, 100.0), "MRR": (0.0, 1.0), "mean_rank": (1.0, math.inf), "median_rank": (1.0, math.inf)},
    main_score="mean R@1",
    main_of=("t2i R@1", "i2t R@1"),
    columns=tuple(f"{d} R@{k}" for d in ("t2i", "i2t") for k in (1, 5, 10)),
    value_rule="R@K must be finite, in 0–100",
    per_query=True, limit=True, distributed=True, scorers=True, named_files=False, pre_task_layout=True,
)


def score_embeddings(
    image_vectors: np.ndarray,
    text_vectors: np.ndarray,
    caption_image: np.ndarray,
    *,
    ks: Sequence[int] = DEFAULT_KS,
    backend: str = "auto",
    device: str = "cpu",
    ci: bool = True,
    progress: bool = False,
    search: str = "exact",
    seed: int = 0,
    query_text_vectors: np.ndarray | None = None,
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]], dict[str, RetrievalOutput]]:
    """Score given embeddings in both directions: returns (metrics, ci95, raw outputs) keyed t2i / i2t.

    ``query_text_vectors``: the captions embedded as text→image queries where a model embeds queries otherwise
    than candidates (a per-direction prompt); ``text_vectors`` are then the image→text candidates.

    ``search="approximate"`` uses :func:`hnbench.search.approximate.retrieve_approximate` (faiss HNSW): ranks
    are then lower bounds and each output carries its recall against exact search on a sample.
    """
    from hnbench.search.approximate import retrieve_approximate
    from hnbench.search.exact import retrieve

    k = max(*ks, PER_QUERY_TOP)  # the per-query file keeps the top PER_QUERY_TOP items whatever the Ks
    (t2i_ptr, t2i_idx), (i2t_ptr, i2t_idx) = positives(caption_image, image_vectors.shape[0]).values()

    def run(q: np.ndarray, g: np.ndarray, ptr: np.ndarray, idx: np.ndarray, desc: str) -> RetrievalOutput:
        if search == "approximate":
            return retrieve_approximate(q, g, ptr, idx, k=k, progress=progress, desc=desc)
        return retrieve(q, g, ptr, idx, k=k, backend=backend, device=device, progress=progress, desc=desc)

    queries = text_vectors if query_text_vectors is None else query_text_vectors
    outs = {"t2i": run(queries, image_vectors, t2i_ptr, t2i_idx, "search t2i"),
            "i2t": run(image_vectors, text_vectors, i2t_ptr, i2t_idx, "search i2t")}
    metrics, ci95 = summaries(outs, ks=ks, ci=ci, seed=seed)
    return metrics, ci95, outs


def positives(caption_image: np.ndarray, n_images: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each direction's positives in CSR form: t2i, a caption's image; i2t, an image's captions."""
    return {"t2i": (np.arange(len(caption_image) + 1, dtype=np.int64), caption_image.astype(np.int64)),
            "i2t": csr_from_assignment(caption_image, n_images)}


def summaries(outs: dict[str, RetrievalOutput], *, ks: Sequence[int], ci: bool, seed: int,
              ) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """(metrics, ci95) of each direction's ranks."""
    metrics: dict[str, dict[str, Any]] = {}
    ci95: dict[str, dict[str, Any]] = {}
    for direction, out in outs.items():
        summary = summarize(out.rank, out.tied, ks=ks, ci=ci, seed=seed)
        ci95[direction] = summary.pop("ci95", None) or {}
        metrics[direction] = summary
    return metrics, ci95


def per_query_frame(ds: ImageTextDataset, outs: dict[str, RetrievalOutput]) -> pd.DataFrame:
    """One row per query and direction: rank, ground-truth and best-wrong item with their scores, and the
    top :data:`PER_QUERY_TOP` gallery ids and scores (per-query schema :data:`PER_QUERY_SCHEMA_VERSION`)."""
    import pandas as pd

    frames: list[pd.DataFrame] = []
    for direction, out in outs.items():
        q_ids = ds.caption_ids if direction == "t2i" else ds.image_ids
        g_ids = np.asarray(ds.image_ids if direction == "t2i" else ds.caption_ids, dtype=object)
        wrong = out.best_wrong_index
        frames.append(pd.DataFrame({
            "direction": direction, "query_index": np.arange(len(q_ids)), "query_id": q_ids,
            "rank": out.rank, "tied": out.tied, "gt_index": out.gt_index, "gt_id": g_ids[out.gt_index],
            "gt_score": out.gt_score, "best_wrong_index": wrong,
            "best_wrong_id": np.where(wrong >= 0, g_ids[np.maximum(wrong, 0)], None),
            "best_wrong_score": out.best_wrong_score,
            "topk_index": list(out.topk_index[:, :PER_QUERY_TOP]), "topk_id": list(g_ids[out.topk_index[:, :PER_QUERY_TOP]]),
            "topk_score": list(out.topk_score[:, :PER_QUERY_TOP]),
        }))
    frame = pd.concat(frames, ignore_index=True)
    frame.attrs[PER_QUERY_KEY] = PER_QUERY_SCHEMA_VERSION  # stored by pandas in the parquet
    return frame



@dataclass
class _Encoded:
    """What the encoding step hands the search: the data (less any unreadable image), the image and caption
    embeddings (``query``: the captions as queries, where a family prompts them otherwise), a pairwise scorer's
    states, and the counts the result records."""

    data: ImageTextDataset
    image_vectors: Any
    img: Any  # hnbench.evaluation.encode.ImageEmbeddings
    txt: Any  # TextEmbeddings of the captions as candidates
    query: Any  # TextEmbeddings of the captions as queries (txt itself where they are embedded alike)
    states: dict[str, States] = field(default_factory=dict)


class _Run:
    """One retrieval run on loaded objects (see :meth:`Retrieval.run`)."""

    def __init__(self, encoder: Encoder, data: ImageTextDataset, settings: EvalSettings,
                 output_dir: str | Path | None, ctx: DistContext, timings: dict[str, float] | None,
                 t0: float | None, data_spec: DataSpec | None):
        from hnbench import distributed as dist

        self.encoder, self.data, self.s, self.output_dir, self.ctx = encoder, data, settings, output_dir, ctx
        self.timings = {} if timings is None else timings
        self.t0 = time.perf_counter() if t0 is None else t0
        self.data_spec = data_spec
        self.device = dist.rank_device(settings.device, ctx)
        # rank 0 searches on every GPU of its node ("cuda"), not only its own "cuda:0"
        self.search_device = "cuda" if ctx.enabled and self.device.startswith("cuda") else self.device
        self.text_batch_size = settings.text_batch_size or max(settings.batch_size, 64)
        self.cache: EmbeddingCache | None = None
        self.shared = {"images": 0, "texts": 0}  # what the ranks encoded into the cache (torchrun)
        self.scorer: PairScorer | None = None
        from hnbench.evaluation.throughput import ran_before

        self.warm = ran_before(encoder)  # asked before encoding: whether the timed pass is warm

    def run(self) -> EvalResult:
        from hnbench import distributed as dist

        s, ctx = self.s, self.ctx
        if ctx.is_main:
            warn_trivial_ks(s.ks, self.data.n_images, self.data.n_captions)
        private_root = None
        try:
            self._refuse_output_taken()
            self._pick_scorer()
            private_root = self._open_cache()
            if ctx.enabled:
                self._share_encoding()
            return dist.on_main(ctx, lambda: self._record(self._search(self._encode())))
        finally:
            if private_root is not None and ctx.is_main:
                shutil.rmtree(private_root, ignore_errors=True)

    # --- before encoding ------------------------------------------------------------------------------------
    def _refuse_output_taken(self) -> None:
        """Refuse an output that would replace another result, before encoding (checked again when writing)."""
        if self.output_dir is None or self.ctx.enabled:
            return
        data = self.data
        check_target(EvalResult(
            model=self.encoder.info.to_dict(), metrics={},
            dataset={"name": data.name, "protocol": data.protocol, "fingerprint": data.fingerprint(), "meta": data.meta},
            settings=self.s.recorded()),  # the same settings the result will record, so the same file name
            self.output_dir, self.s.overwrite)

    def _pick_scorer(self) -> None:
        """The pairwise scorer of ``--scorer`` (refused before any encoding), or None: the dual encoder's cosine."""
        from hnbench.models.scorers import COSINE, pick

        s = self.s
        self.scorer = None if s.scorer == COSINE else pick(s.scorer, self.encoder)
        if self.scorer is not None and self.ctx.enabled:
            raise ConfigError(f"--scorer {s.scorer} runs in one process; run it without torchrun")

    def _open_cache(self) -> str | None:
        """The embedding cache (a pairwise scorer's states are never cached; with ``--rerank-top`` the dual encoder's
        embeddings are); under torchrun without one, a private cache the ranks hand their embeddings through, whose
        folder is returned to be removed at the end."""
        from hnbench.evaluation.cache import EmbeddingCache, default_root

        s, ctx = self.s, self.ctx
        embeds = s.use_cache and (self.scorer is None or s.rerank_top is not None)
        self.cache = EmbeddingCache.for_encoder(self.encoder, s.cache_dir, amp=s.amp) if embeds else None
        if not ctx.enabled or self.cache is not None:
            return None
        root = Path(s.cache_dir) if s.cache_dir is not None else default_root()
        root.mkdir(parents=True, exist_ok=True)
        private_root: str = ctx.broadcast(tempfile.mkdtemp(prefix=".run-", dir=root) if ctx.is_main else None)
        self.cache = EmbeddingCache.for_encoder(self.encoder, private_root, amp=s.amp)
        return private_root

    def _share_encoding(self) -> None:
        """Under torchrun: each rank encodes its share of the images and captions into the cache."""
        from hnbench import distributed as dist
        from hnbench.evaluation.encode import encode_images, encode_texts

        s, ctx, data, cache = self.s, self.ctx, self.data, self.cache
        assert cache is not None  # _open_cache gives every rank one
        dist.check_same(ctx, "model and data (cache key, dataset fingerprint)", (cache.key, data.fingerprint()))
        t = time.perf_counter()

        def share() -> dict[str, int]:
            mine = dist.batch_share(data.n_images, s.batch_size, ctx.rank, ctx.world_size)
            img = encode_images(self.encoder, data.images, positions=mine.tolist(), batch_size=s.batch_size,
                                num_workers=s.num_workers, skip_bad=s.skip_invalid, amp=s.amp,
                                progress=s.progress and ctx.is_main, cache=cache)
            mine = dist.batch_share(data.n_captions, self.text_batch_size, ctx.rank, ctx.world_size)
            txt = encode_texts(self.encoder, [data.captions[j] for j in mine], batch_size=self.text_batch_size,
                               amp=s.amp, progress=s.progress and ctx.is_main, cache=cache, num_workers=s.num_workers)
            return {"images": img.n_encoded, "texts": txt.n_encoded}

        self.shared = dist.encode_share(ctx, share)
        self.timings["encode_share"] = time.perf_counter() - t

    # --- rank 0: encode, search, record ---------------------------------------------------------------------
    def _encode(self) -> _Encoded:
        """Encode (through the cache) what is not there yet: the images (an unreadable one dropped with
        ``--skip-invalid``), the captions as candidates and as queries, and a pairwise scorer's states.

        ``scorer``: its states are encoded (never cached) and every pair scored; with ``--rerank-top`` the dual
        encoder's embeddings (cached) pick each query's candidates first."""
        from hnbench.data.benchmarks.spec import recheck_counts
        from hnbench.evaluation.encode import encode_images, encode_states, encode_texts
        from hnbench.models.family import family_of

        s, encoder, data, scorer, cache = self.s, self.encoder, self.data, self.scorer, self.cache
        cosine = scorer is None or s.rerank_top is not None  # the dual encoder's embeddings are needed
        states: dict[str, States] = {}
        state_options: dict[str, Any] = {"batch_size": s.batch_size, "text_batch_size": self.text_batch_size,
                                         "num_workers": s.num_workers, "amp": s.amp, "progress": s.progress}
        if cosine:
            img = encode_images(encoder, data.images, batch_size=s.batch_size, num_workers=s.num_workers,
                                skip_bad=s.skip_invalid, amp=s.amp, progress=s.progress, cache=cache)
        else:
            assert scorer is not None
            states["image"], img = encode_states(encoder, scorer, images=data.images, skip_bad=s.skip_invalid,
                                                 **state_options)
        image_vectors = img.vectors
        if img.bad:
            keep = [i for i in range(data.n_images) if i not in img.bad]
            data = recheck_counts(data.drop_images(sorted(img.bad), reason="unreadable image"))
            image_vectors = image_vectors[keep]
        self.timings["encode_images"] = img.seconds
        # a family's per-direction prompts (jina-clip's task prompt on queries): candidates and queries embedded apart
        prompts = family_of(encoder.info.arch).prompts(encoder)
        texts = {side: [prompts.get(side, "") + c for c in data.captions] for side in ("candidate", "query")}
        same_texts = prompts.get("query", "") == prompts.get("candidate", "")
        if cosine:
            txt = encode_texts(encoder, texts["candidate"], batch_size=self.text_batch_size,
                               amp=s.amp, progress=s.progress, cache=cache, num_workers=s.num_workers)
            query = txt if same_texts else encode_texts(
                encoder, texts["query"], batch_size=self.text_batch_size, amp=s.amp,
                progress=s.progress, cache=cache, num_workers=s.num_workers)
        if scorer is not None:  # the pairwise states (never cached), of the images and captions that are scored
            t = time.perf_counter()
            if "image" not in states:
                states["image"], _ = encode_states(encoder, scorer, images=data.images, **state_options)
            states["candidate"], pair_txt = encode_states(encoder, scorer, texts=texts["candidate"], **state_options)
            states["query"] = states["candidate"] if same_texts else encode_states(
                encoder, scorer, texts=texts["query"], **state_options)[0]
            if cosine:  # beside the embeddings; else the state passes are the image and text encoding
                self.timings["encode_states"] = time.perf_counter() - t
            else:
                txt = query = pair_txt
        self.timings["encode_texts"] = txt.seconds + (query.seconds if query is not txt else 0.0)
        return _Encoded(data, image_vectors, img, txt, query, states)

    def _search(self, e: _Encoded) -> tuple[_Encoded, dict[str, Any], dict[str, Any], dict[str, RetrievalOutput]]:
        """Both directions searched and scored: (encoded, metrics, ci95, outputs)."""
        s = self.s
        t = time.perf_counter()
        if self.scorer is None:
            # "auto" is resolved per search (by a stored calibration and a probe on this data), in retrieve
            metrics, ci95, outs = score_embeddings(e.image_vectors, e.txt.vectors, e.data.caption_image, ks=s.ks,
                                                   backend=s.backend, device=self.search_device, ci=s.ci,
                                                   progress=s.progress, search=s.search, seed=s.seed,
                                                   query_text_vectors=e.query.vectors)
        else:
            vectors = None if s.rerank_top is None else (e.image_vectors, e.txt.vectors, e.query.vectors)
            outs = _pairwise_outputs(self.scorer, e.states, e.data.caption_image, s, self.search_device, vectors)
            metrics, ci95 = summaries(outs, ks=s.ks, ci=s.ci, seed=s.seed)
        self.timings["search_and_metrics"] = time.perf_counter() - t
        return e, metrics, ci95, outs

    def _record(self, searched: tuple[_Encoded, dict[str, Any], dict[str, Any], dict[str, RetrievalOutput]],
                ) -> EvalResult:
        """The result record (model, data, metrics, intervals, tokens, settings with the cache use, timings,
        throughput), written with its per-query file where there is an output."""
        from hnbench.evaluation.throughput import throughput_record

        e, metrics, ci95, outs = searched
        s, encoder, data, cache, scorer = self.s, self.encoder, e.data, self.cache, self.scorer
        self.timings["total"] = time.perf_counter() - self.t0
        img, txt, query, shared = e.img, e.txt, e.query, self.shared
        # Items encoded by any rank in this run, and those that came from an earlier run's cache.
        encoded = {"images": img.n_encoded + shared["images"],
                   "texts": txt.n_encoded + shared["texts"] + (query.n_encoded if query is not txt else 0)}
        cached = {"images": max(0, img.n_cached - shared["images"]), "texts": max(0, txt.n_cached - shared["texts"])}
        encoding = {"world_size": self.ctx.world_size, "cache_key": cache.key if s.use_cache and cache else None,
                    "encoded": encoded, "cached": cached, "corrupt_shards": cache.stats.corrupt_shards if cache else 0}
        result = EvalResult(
            model=encoder.info.to_dict(),
            dataset={"name": data.name, "protocol": data.protocol, "fingerprint": data.fingerprint(),
                     "n_images": data.n_images, "n_captions": data.n_captions, "source": data.source,
                     "skipped": {k: len(v) for k, v in data.skipped.items()}, "meta": data.meta,
                     **({"spec": self.data_spec.recorded()} if self.data_spec is not None else {})},
            metrics=metrics, ci95=ci95, tokens=token_stats(txt.lengths, encoder.info.context_length),
            ci95_method={d: ci_methods(o.rank, s.ks) for d, o in outs.items()} if s.ci else {},
            # the declared settings (EvalSettings fields marked ``record``), with the device and backend as used
            settings={**s.recorded(), "device": str(self.device), "backend": outs["t2i"].backend,
                      "tie_rule": TIE_RULE,
                      "similarity": f"{'cosine' if scorer is None else scorer.name}, fp32",
                      "cache": bool(s.use_cache and cache is not None),
                      "encoding": encoding,
                      **({"init_seed": encoder.info.extra["init_seed"]} if "init_seed" in encoder.info.extra else {}),
                      **({"approximate": {d: o.recall_vs_exact for d, o in outs.items()}} if s.search == "approximate"
                         else {})},
            timings={k: round(v, 4) for k, v in self.timings.items()},
            # rates of rank 0's encoding (under torchrun the ranks encode into the cache and rank 0 reads it: no rate)
            throughput=throughput_record(
                encoder, (img.n_encoded, img.seconds),
                (txt.n_encoded + (query.n_encoded if query is not txt else 0),
                 txt.seconds + (query.seconds if query is not txt else 0.0)), s, self.device, warm=self.warm,
                shared=shared["images"] + shared["texts"]),
            scorer=scorer_record(scorer, s.rerank_top),
        )
        if data.n_skipped():
            logger.warning("%d items skipped: %s", data.n_skipped(), result.dataset["skipped"])
        if self.output_dir is not None:
            buf = io.BytesIO()
            per_query_frame(data, outs).to_parquet(buf, index=False)
            write_result_pair(result, self.output_dir, buf.getvalue(), overwrite=s.overwrite)
        return result


def _pairwise_outputs(scorer: PairScorer, states: dict[str, States], caption_image: np.ndarray, s: EvalSettings,
                      device: str, vectors: tuple[np.ndarray, np.ndarray, np.ndarray] | None,
                      ) -> dict[str, RetrievalOutput]:
    """Both directions scored by ``scorer`` over the states: every pair (exact, in blocks), or with ``vectors``
    (image, caption-candidate, caption-query embeddings) the dual encoder's top ``s.rerank_top`` re-ranked."""
    from hnbench.search.pairwise import rerank, retrieve_pairwise

    k = max(*s.ks, PER_QUERY_TOP)
    n_images = next(iter(states["image"].values())).shape[0] if states["image"] else 0
    pos = positives(caption_image, n_images)
    sides = {"t2i": (states["query"], states["image"]), "i2t": (states["image"], states["candidate"])}
    outs = {}
    for direction, (queries, gallery) in sides.items():
        ptr, idx = pos[direction]
        if vectors is None:
            outs[direction] = retrieve_pairwise(scorer, queries, gallery, ptr, idx, t2i=direction == "t2i", k=k,
                                                device=device, progress=s.progress, desc=f"{scorer.name} {direction}")
        else:
            image, candidate, query = vectors
            q, g = (query, image) if direction == "t2i" else (image, candidate)
            outs[direction] = rerank(scorer, queries, gallery, q, g, ptr, idx, top=s.rerank_top or 1,
                                     t2i=direction == "t2i", k=k, backend=s.backend, device=device,
                                     progress=s.progress, desc=f"{scorer.name} {direction}")
    return outs
