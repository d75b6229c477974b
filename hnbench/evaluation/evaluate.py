"""The one orchestration: :func:`evaluate` checks the settings, the model and the data (before anything loads),
loads the data and the model, and runs the task's pipeline (``--task``, :data:`hnbench.registry.TASKS`; retrieval's is
:mod:`hnbench.tasks.retrieval`). It is the only place a task is dispatched; :func:`run_evaluation` is it on loaded
objects."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from hnbench import distributed as dist
from hnbench.data import ImageTextDataset
from hnbench.errors import ConfigError
from hnbench.evaluation.cache import default_root
from hnbench.evaluation.remembered import load_remembered
from hnbench.models import Encoder, load_model
from hnbench.models.family import check_trusted, family_of
from hnbench.models.scorers import COSINE, check_scorer
from hnbench.registry import TASKS
from hnbench.results.record import EvalResult
from hnbench.settings import EvalSettings, fold_task_options, from_options
from hnbench.specs import DataSpec, ModelSpec, check_data, split_keywords

__all__ = ["evaluate", "run_evaluation"]


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
    keywords replace those of ``settings``), and the task's own options (its options class,
    :data:`hnbench.registry.TASKS`): as ``task_options`` or each by its flat key (``templates="simple"`` for
    ``task="zeroshot"``; another task's option is refused). ``skip_invalid`` drops (and counts) images
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
    fold_task_options(options, settings)  # the task's own options by name (templates="simple")
    options, dataset_options = split_keywords(options, EvalSettings, dataset_options)  # name=, split_file=, ...
    s = from_options(EvalSettings, settings, options)
    s.validate(output_dir)
    task = TASKS.get(s.task)
    if s.limit is not None and not task.limit:
        raise ConfigError(f"--limit takes a seeded subset of the images; --task {task.name} reads every item "
                          "(leave it out)")
    task.check_settings(s)  # the settings only the task reads (zero-shot's --templates): before loading
    model = os.fspath(model) if isinstance(model, os.PathLike) else model
    if isinstance(dataset, os.PathLike):
        dataset = os.fspath(dataset)
    if not isinstance(dataset, str) and not task.accepts(dataset):
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
    if ctx.enabled and not task.distributed:
        ctx.close()
        raise ConfigError(f"--task {task.name} runs in one process (not under torchrun)")
    device = dist.rank_device(s.device, ctx)
    try:
        if ctx.enabled and not ctx.is_main:
            ctx.all_gather(None)  # rank 0 first: a generated dataset or downloaded weights are written once
        if data is not None:
            dataset = task.load(data, **loader_options)
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
        result: EvalResult = task.run(encoder, dataset, s, output_dir, ctx=ctx, timings=timings, t0=t0, data_spec=data)
        return result
    finally:
        ctx.close()


def run_evaluation(encoder: Encoder, dataset: Any, settings: EvalSettings,
                   output_dir: str | Path | None = None) -> EvalResult:
    """:func:`evaluate` on loaded objects: ``encoder`` scored on ``dataset`` (the data its ``settings.task`` reads)
    with ``settings``, the result written under ``output_dir``."""
    return evaluate(encoder, dataset, output_dir=output_dir, settings=settings)
