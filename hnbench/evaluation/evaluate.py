"""The one orchestration: data → encode → exact search → metrics → result file.

:func:`evaluate` checks and loads the data, loads the model, and runs the pipeline of the task
(``--task``, :data:`hnbench.registry.TASKS`); this module's :func:`run_evaluation` is the pipeline of the
first task, retrieval:

t2i: each caption queries the images (its own image is the positive).
i2t: each image queries the captions (any of its captions is a positive; R@K is the "hit" rate).
"""

from __future__ import annotations

import io
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hnbench import distributed as dist
from hnbench.data import ImageTextDataset
from hnbench.data.benchmarks.spec import recheck_counts
from hnbench.errors import ConfigError
from hnbench.evaluation.cache import EmbeddingCache, default_root
from hnbench.evaluation.encode import encode_images, encode_states, encode_texts
from hnbench.evaluation.remembered import load_remembered
from hnbench.metrics import ci_methods, csr_from_assignment, summarize
from hnbench.models import Encoder, load_model
from hnbench.models.family import check_trusted, family_of
from hnbench.models.scorers import COSINE, PairScorer, check_scorer, pick
from hnbench.registry import TASKS
from hnbench.results.record import (
    PER_QUERY_KEY,
    PER_QUERY_SCHEMA_VERSION,
    PER_QUERY_TOP,
    EvalResult,
    check_target,
    scorer_record,
    write_result_pair,
)
from hnbench.search.approximate import retrieve_approximate
from hnbench.search.exact import RetrievalOutput, retrieve
from hnbench.search.pairwise import States, rerank, retrieve_pairwise
from hnbench.settings import EvalSettings, from_options
from hnbench.specs import DataSpec, ModelSpec, check_data, split_keywords
from hnbench.validate import DEFAULT_KS, warn_trivial_ks

logger = logging.getLogger(__name__)


def token_stats(lengths: np.ndarray, context_length: int) -> dict[str, Any]:
    """Caption lengths in tokens (incl. start/end) and how many the context length truncates."""
    n_trunc = int((lengths > context_length).sum())
    return {
        "context_length": int(context_length), "mean": float(lengths.mean()), "median": float(np.median(lengths)),
        "p95": float(np.percentile(lengths, 95)), "max": int(lengths.max()), "n_truncated": n_trunc,
        "n_texts": len(lengths),
        "share_truncated": n_trunc / len(lengths), "over_77": int((lengths > 77).sum()),
        "over_248": int((lengths > 248).sum()),
    }


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


def evaluate(
    model: str | os.PathLike[str] | Encoder,
    dataset: str | os.PathLike[str] | ImageTextDataset,
    *,
    pretrained: str | os.PathLike[str] | None = None,
    model_config: str | os.PathLike[str] | None = None,
    trust_remote_code: bool = False,
    data_root: str | os.PathLike[str] | None = None,
    protocol: str | None = None,
    split: str | None = None,
    image_column: str | None = None,
    caption_column: str | None = None,
    output_dir: str | Path | None = None,
    dataset_options: dict[str, Any] | None = None,
    settings: EvalSettings | None = None,
    **options: Any,
) -> EvalResult:
    """Score a model on an image–caption set: R@K both ways, ranks, MRR, bootstrap CIs, per-query file.

    ``model`` is a name understood by :func:`hnbench.models.load_model` or a loaded encoder;
    ``dataset`` a registered name, a path (``str`` or ``os.PathLike``), or a loaded :class:`ImageTextDataset`;
    ``pretrained``, ``model_config`` and ``data_root`` may be ``os.PathLike`` too. With
    ``output_dir`` the result JSON and a per-query parquet are written there (atomically; the JSON
    last, so its presence means the run is complete). ``settings`` and the keyword ``options`` are the
    fields of :class:`~hnbench.settings.EvalSettings` (device, batch_size, precision, ks, ci, seed, ...; the
    keywords replace those of ``settings``). ``skip_invalid`` drops (and counts) images
    that are missing or cannot be decoded and captions that are empty, instead of failing.
    ``use_cache`` reads and writes the embedding cache (:mod:`hnbench.evaluation.cache`) under ``cache_dir``
    (default: ``<hnbench cache>/embeddings``). ``search="approximate"`` uses a faiss HNSW index
    and marks the result so leaderboards keep it apart. Under ``torchrun`` (``WORLD_SIZE > 1``, no
    process group yet, or ``distributed=True``) the ranks share the encoding and rank 0 scores, see
    :mod:`hnbench.distributed`; every rank returns rank 0's result.
    ``dataset_options`` go to the dataset's loader (e.g. ``split_file``, ``allow_count_mismatch``, ``name``); the
    data options (:func:`hnbench.specs.data_keywords`: every :class:`~hnbench.specs.DataSpec` field, a task's
    ``class_names``, ...) are keywords too (``name="x"``), sorted from the settings by
    :func:`hnbench.specs.split_keywords`; they apply to a dataset given by name or path, not to loaded data.
    The model and data keywords are the fields of :class:`~hnbench.specs.ModelSpec` and
    :class:`~hnbench.specs.DataSpec` (a data option the kind of data does not read is refused before
    loading); the data spec is recorded in ``result.dataset["spec"]`` so ``browse`` reloads the same data.
    The result file is named by model, data and result-changing settings: a rerun of the same replaces
    its own file; replacing any other file (unreadable, or another result of that name) needs ``overwrite``.
    """
    options, dataset_options = split_keywords(options, EvalSettings, dataset_options)  # name=, split_file=, ...
    s = from_options(EvalSettings, settings, options)
    s.validate(output_dir)
    task = TASKS.get(s.task)
    if s.limit is not None and task.name != "retrieval":
        raise ConfigError(f"--limit subsets a retrieval set; --task {task.name} reads every item (leave it out)")
    check_settings = task.target("check_settings")
    if check_settings is not None:  # the settings only the task reads (zero-shot's --templates): before loading
        check_settings(s)
    model = os.fspath(model) if isinstance(model, os.PathLike) else model
    if isinstance(dataset, os.PathLike):
        dataset = os.fspath(dataset)
    if not isinstance(dataset, str) and (task.name == "retrieval") != isinstance(dataset, ImageTextDataset):
        raise ConfigError(f"dataset must be a name, a path or the loaded data of the {task.name} task, got "
                          f"{type(dataset).__name__}")
    data_fields = {"data_root": data_root, "protocol": protocol, "split": split, "image_column": image_column,
                   "caption_column": caption_column}
    ignored = [k for k, v in {**data_fields, **(dataset_options or {})}.items() if v is not None]
    if not isinstance(dataset, str) and ignored:  # they would be dropped without a word
        raise ConfigError(f"{', '.join(ignored)}: data options apply to a dataset given by name or path; this "
                          f"{type(dataset).__name__} is loaded already (give them to hnbench.load_dataset)")
    spec = ModelSpec(model=model if isinstance(model, str) else None, context_length=s.context_length,
                     trust_remote_code=trust_remote_code,
                     **{k: os.fspath(v) for k, v in (("pretrained", pretrained), ("model_config", model_config))
                        if v is not None})
    weights, config = spec.pretrained, spec.model_config
    spec.validate()  # the model config's architecture name (a loaded encoder: nothing to check)
    if isinstance(model, str):
        check_trusted(model, weights, spec.trust_remote_code)  # remote code: refused before anything loads
        if s.scorer != COSINE:  # a scorer the family does not offer: refused before the data loads where it can tell
            check_scorer(s.scorer, model, family_of(model).pair_scorer_names(model, weights))
    data: DataSpec | None = None
    loader_options: dict[str, Any] = {}
    if isinstance(dataset, str):
        data, loader_options = check_data(dataset, task.name, dataset_options, **data_fields,  # before anything loads
                                          skip_invalid=s.skip_invalid or None)
    t0 = time.perf_counter()
    timings: dict[str, float] = {}
    ctx = dist.from_env(s.device) if dist.wanted(s.distributed) else dist.DistContext()
    device = dist.rank_device(s.device, ctx)
    try:
        if ctx.enabled and not ctx.is_main:
            ctx.all_gather(None)  # rank 0 first: a generated dataset or downloaded weights are written once
        if data is not None:
            dataset = task.target("load")(data, **loader_options)
        if s.limit is not None and isinstance(dataset, ImageTextDataset):  # --limit: a seeded subset
            dataset = dataset.sample_images(s.limit, s.seed)
        timings["load_data"] = time.perf_counter() - t0
        t = time.perf_counter()
        if isinstance(model, str) and s.use_cache and not ctx.enabled and s.scorer == COSINE:
            # Remembered fingerprint: the model is built only if some embedding is not cached yet.
            encoder = load_remembered(model, weights,
                                      root=s.cache_dir if s.cache_dir is not None else default_root(),
                                      model_config=config, context_length=s.context_length, device=device,
                                      precision=s.precision, trust_remote_code=spec.trust_remote_code)
        else:
            encoder = model if not isinstance(model, str) else load_model(
                model, weights, model_config=config, context_length=s.context_length, device=device,
                precision=s.precision, trust_remote_code=spec.trust_remote_code)
        timings["load_model"] = time.perf_counter() - t
        if ctx.enabled and ctx.is_main:
            ctx.all_gather(None)
        run: Callable[..., EvalResult] = task.target("run")
        return run(encoder, dataset, s, output_dir, ctx=ctx, timings=timings, t0=t0, data_spec=data)
    finally:
        ctx.close()


def run_evaluation(encoder: Encoder, dataset: ImageTextDataset, settings: EvalSettings,
                   output_dir: str | Path | None = None, *, ctx: dist.DistContext | None = None,
                   timings: dict[str, float] | None = None, t0: float | None = None,
                   data_spec: DataSpec | None = None) -> EvalResult:
    """The pipeline on loaded objects: encode (through the cache) → search both ways → score → result file.

    ``data_spec``: the spec ``dataset`` was loaded with, recorded in ``result.dataset["spec"]``. ``ctx`` is
    the distributed context of a caller that set it up (and closes it); without it the settings are
    validated here and a context is made (and closed) from ``settings.distributed``.
    """
    if settings.task != "retrieval":  # the entry on loaded objects serves every task
        run: Callable[..., EvalResult] = TASKS.get(settings.task).target("run")
        return run(encoder, dataset, settings, output_dir, ctx=ctx, timings=timings, t0=t0, data_spec=data_spec)
    if ctx is None:
        settings.validate(output_dir)
        own = dist.from_env(settings.device) if dist.wanted(settings.distributed) else dist.DistContext()
        try:
            return run_evaluation(encoder, dataset, settings, output_dir, ctx=own, data_spec=data_spec)
        finally:
            own.close()
    s = settings
    if ctx.is_main:
        warn_trivial_ks(s.ks, dataset.n_images, dataset.n_captions)
    t0 = time.perf_counter() if t0 is None else t0
    timings = {} if timings is None else timings
    device = dist.rank_device(s.device, ctx)
    private_root = None
    try:
        if output_dir is not None and not ctx.enabled:  # refuse before encoding (checked again when writing)
            check_target(EvalResult(
                model=encoder.info.to_dict(), metrics={},
                dataset={"name": dataset.name, "protocol": dataset.protocol, "fingerprint": dataset.fingerprint(),
                         "meta": dataset.meta},
                settings=s.recorded()),  # the same settings the result will record, so the same file name
                output_dir, s.overwrite)

        scorer = None if s.scorer == COSINE else pick(s.scorer, encoder)  # refused before any encoding
        if scorer is not None and ctx.enabled:
            raise ConfigError(f"--scorer {s.scorer} runs in one process; run it without torchrun")
        # a pairwise scorer's states are never cached; with --rerank-top the dual-encoder embeddings are
        embeds = s.use_cache and (scorer is None or s.rerank_top is not None)
        cache = EmbeddingCache.for_encoder(encoder, s.cache_dir, amp=s.amp) if embeds else None
        text_bs = s.text_batch_size or max(s.batch_size, 64)
        shared = {"images": 0, "texts": 0}
        if ctx.enabled:
            if cache is None:  # the cache is how ranks hand embeddings to rank 0: use a private one
                root = Path(s.cache_dir) if s.cache_dir is not None else default_root()
                root.mkdir(parents=True, exist_ok=True)
                private_root = ctx.broadcast(tempfile.mkdtemp(prefix=".run-", dir=root) if ctx.is_main else None)
                cache = EmbeddingCache.for_encoder(encoder, private_root, amp=s.amp)
            dist.check_same(ctx, "model and data (cache key, dataset fingerprint)",
                            (cache.key, dataset.fingerprint()))
            t = time.perf_counter()

            def share() -> dict[str, int]:
                mine = dist.batch_share(dataset.n_images, s.batch_size, ctx.rank, ctx.world_size)
                img = encode_images(encoder, dataset.images, positions=mine.tolist(), batch_size=s.batch_size,
                                    num_workers=s.num_workers, skip_bad=s.skip_invalid, amp=s.amp,
                                    progress=s.progress and ctx.is_main, cache=cache)
                mine = dist.batch_share(dataset.n_captions, text_bs, ctx.rank, ctx.world_size)
                txt = encode_texts(encoder, [dataset.captions[j] for j in mine], batch_size=text_bs, amp=s.amp,
                                   progress=s.progress and ctx.is_main, cache=cache, num_workers=s.num_workers)
                return {"images": img.n_encoded, "texts": txt.n_encoded}

            shared = dist.encode_share(ctx, share)
            timings["encode_share"] = time.perf_counter() - t

        def score() -> EvalResult:
            return _encode_and_score(
                encoder, dataset, cache, shared, timings, t0, s, output_dir=output_dir, device=device,
                text_batch_size=text_bs, world_size=ctx.world_size, data_spec=data_spec, scorer=scorer,
                # rank 0 searches on every GPU of its node ("cuda"), not only its own "cuda:0"
                search_device="cuda" if ctx.enabled and device.startswith("cuda") else device)

        return dist.on_main(ctx, score)
    finally:
        if private_root is not None and ctx.is_main:
            shutil.rmtree(private_root, ignore_errors=True)


def _encode_and_score(encoder: Encoder, dataset: ImageTextDataset, cache: EmbeddingCache | None,
                      shared: dict[str, int], timings: dict[str, float], t0: float, s: EvalSettings, *,
                      output_dir: str | Path | None, device: str, text_batch_size: int, world_size: int,
                      search_device: str, data_spec: DataSpec | None = None,
                      scorer: PairScorer | None = None) -> EvalResult:
    """Encode (through the cache) what is not there yet, search both ways, score, and write the result.

    ``scorer``: a pairwise scorer (:mod:`hnbench.models.scorers`): its states are encoded (never cached) and every pair
    scored; with ``--rerank-top`` the dual encoder's embeddings (cached) pick each query's candidates first."""
    cosine = scorer is None or s.rerank_top is not None  # the dual encoder's embeddings are needed
    states: dict[str, States] = {}
    state_options: dict[str, Any] = {"batch_size": s.batch_size, "text_batch_size": text_batch_size,
                                     "num_workers": s.num_workers, "amp": s.amp, "progress": s.progress}
    if cosine:
        img = encode_images(encoder, dataset.images, batch_size=s.batch_size, num_workers=s.num_workers,
                            skip_bad=s.skip_invalid, amp=s.amp, progress=s.progress, cache=cache)
    else:
        assert scorer is not None
        states["image"], img = encode_states(encoder, scorer, images=dataset.images, skip_bad=s.skip_invalid,
                                             **state_options)
    image_vectors = img.vectors
    if img.bad:
        keep = [i for i in range(dataset.n_images) if i not in img.bad]
        dataset = recheck_counts(dataset.drop_images(sorted(img.bad), reason="unreadable image"))
        image_vectors = image_vectors[keep]
    timings["encode_images"] = img.seconds
    # a family's per-direction prompts (jina-clip's task prompt on queries): candidates and queries embedded apart
    prompts = family_of(encoder.info.arch).prompts(encoder)
    texts = {side: [prompts.get(side, "") + c for c in dataset.captions] for side in ("candidate", "query")}
    same_texts = prompts.get("query", "") == prompts.get("candidate", "")
    if cosine:
        txt = encode_texts(encoder, texts["candidate"], batch_size=text_batch_size,
                           amp=s.amp, progress=s.progress, cache=cache, num_workers=s.num_workers)
        query = txt if same_texts else encode_texts(
            encoder, texts["query"], batch_size=text_batch_size, amp=s.amp,
            progress=s.progress, cache=cache, num_workers=s.num_workers)
    if scorer is not None:  # the pairwise states (never cached), of the images and captions that are scored
        t = time.perf_counter()
        if "image" not in states:
            states["image"], _ = encode_states(encoder, scorer, images=dataset.images, **state_options)
        states["candidate"], pair_txt = encode_states(encoder, scorer, texts=texts["candidate"], **state_options)
        states["query"] = states["candidate"] if same_texts else encode_states(
            encoder, scorer, texts=texts["query"], **state_options)[0]
        if cosine:  # beside the embeddings; else the state passes are the image and text encoding
            timings["encode_states"] = time.perf_counter() - t
        else:
            txt = query = pair_txt
    timings["encode_texts"] = txt.seconds + (query.seconds if query is not txt else 0.0)

    t = time.perf_counter()
    if scorer is None:
        # "auto" is resolved per search (by a stored calibration and a probe on this data), in retrieve
        metrics, ci95, outs = score_embeddings(image_vectors, txt.vectors, dataset.caption_image, ks=s.ks,
                                               backend=s.backend, device=search_device, ci=s.ci, progress=s.progress,
                                               search=s.search, seed=s.seed, query_text_vectors=query.vectors)
    else:
        outs = _pairwise_outputs(scorer, states, dataset.caption_image, s, search_device,
                                 None if s.rerank_top is None else (image_vectors, txt.vectors, query.vectors))
        metrics, ci95 = summaries(outs, ks=s.ks, ci=s.ci, seed=s.seed)
    timings["search_and_metrics"] = time.perf_counter() - t
    timings["total"] = time.perf_counter() - t0
    # Items encoded by any rank in this run, and those that came from an earlier run's cache.
    encoded = {"images": img.n_encoded + shared["images"],
               "texts": txt.n_encoded + shared["texts"] + (query.n_encoded if query is not txt else 0)}
    cached = {"images": max(0, img.n_cached - shared["images"]), "texts": max(0, txt.n_cached - shared["texts"])}
    encoding = {"world_size": world_size, "cache_key": cache.key if s.use_cache and cache else None,
                "encoded": encoded, "cached": cached, "corrupt_shards": cache.stats.corrupt_shards if cache else 0}

    result = EvalResult(
        model=encoder.info.to_dict(),
        dataset={"name": dataset.name, "protocol": dataset.protocol, "fingerprint": dataset.fingerprint(),
                 "n_images": dataset.n_images, "n_captions": dataset.n_captions, "source": dataset.source,
                 "skipped": {k: len(v) for k, v in dataset.skipped.items()}, "meta": dataset.meta,
                 **({"spec": data_spec.recorded()} if data_spec is not None else {})},
        metrics=metrics, ci95=ci95, tokens=token_stats(txt.lengths, encoder.info.context_length),
        ci95_method={d: ci_methods(o.rank, s.ks) for d, o in outs.items()} if s.ci else {},
        # the declared settings (EvalSettings fields marked ``record``), with the device and backend as used
        settings={**s.recorded(), "device": str(device), "backend": outs["t2i"].backend,
                  "tie_rule": "pessimistic: rank = 1 + #non-positives scoring >= the best positive",
                  "similarity": f"{'cosine' if scorer is None else scorer.name}, fp32",
                  "cache": bool(s.use_cache and cache is not None),
                  "encoding": encoding,
                  **({"init_seed": encoder.info.extra["init_seed"]} if "init_seed" in encoder.info.extra else {}),
                  **({"approximate": {d: o.recall_vs_exact for d, o in outs.items()}} if s.search == "approximate"
                     else {})},
        timings={k: round(v, 4) for k, v in timings.items()},
        scorer=scorer_record(scorer, s.rerank_top),
    )
    if dataset.n_skipped():
        logger.warning("%d items skipped: %s", dataset.n_skipped(), result.dataset["skipped"])
    if output_dir is not None:
        buf = io.BytesIO()
        per_query_frame(dataset, outs).to_parquet(buf, index=False)
        write_result_pair(result, output_dir, buf.getvalue(), overwrite=s.overwrite)
    return result


def _pairwise_outputs(scorer: PairScorer, states: dict[str, States], caption_image: np.ndarray, s: EvalSettings,
                      device: str, vectors: tuple[np.ndarray, np.ndarray, np.ndarray] | None,
                      ) -> dict[str, RetrievalOutput]:
    """Both directions scored by ``scorer`` over the states: every pair (exact, in blocks), or with ``vectors``
    (image, caption-candidate, caption-query embeddings) the dual encoder's top ``s.rerank_top`` re-ranked."""
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
