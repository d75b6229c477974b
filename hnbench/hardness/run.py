"""The hardness orchestration: caption set → encode (text tower, and images where they exist) →
statistics → recall by hardness → JSON summary, per-item parquet, pair CSVs, PNG plots, Markdown."""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hnbench.data import load_spec
from hnbench.data.base import ImageTextDataset
from hnbench.errors import ConfigError
from hnbench.evaluation import encode
from hnbench.hardness.analyze import analyze
from hnbench.hardness.captions import CaptionSet, from_dataset, load_captions, text_fingerprint
from hnbench.hardness.outputs import compare, write_outputs
from hnbench.hardness.recall import load_per_query, recall_by_hardness
from hnbench.hardness.schema import HardnessReport, write_report
from hnbench.io import check_output, record_output
from hnbench.models import load_model, model_pairs
from hnbench.models.family import check_trusted
from hnbench.registry import TASKS, TEXT_ENCODERS
from hnbench.settings import HardnessSettings, from_options, identity_fields
from hnbench.specs import DataSpec, split_keywords
from hnbench.tasks import Task

logger = logging.getLogger(__name__)


def _load_encoder(model: Any, pretrained: str | None, model_config: str | None, context_length: int | None,
                  device: str, trust_remote_code: bool = False) -> Any:
    if not isinstance(model, str):
        return model
    if model in TEXT_ENCODERS:
        return TEXT_ENCODERS.get(model)(device=device)
    return load_model(model, pretrained, model_config=model_config, context_length=context_length, device=device,
                      trust_remote_code=trust_remote_code)


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9._]+", "-", str(s)).strip("-") or "x"


def hardness(
    data: str | os.PathLike[str] | DataSpec | ImageTextDataset | CaptionSet | Sequence[str],
    model: Any,
    *,
    pretrained: str | None = None,
    model_config: str | None = None,
    trust_remote_code: bool = False,
    data_root: str | None = None,
    protocol: str | None = None,
    dataset_options: dict[str, Any] | None = None,
    label_field: str | None = "auto",
    output_dir: str | Path | None = None,
    settings: HardnessSettings | None = None,
    **options: Any,
) -> HardnessReport:
    """Measure how hard a caption set's negatives are for an encoder; write the report to ``output_dir``.

    ``data``: a registered dataset name or a path (``str`` or ``os.PathLike``) :func:`hnbench.data.load_dataset` reads (its other loader
    options in ``dataset_options``: the fields of :class:`~hnbench.specs.DataSpec`), a DataSpec, a plain
    caption file (``.txt``, one caption a line), a loaded dataset, a :class:`CaptionSet` or a list of
    captions. ``model``: anything :func:`hnbench.models.load_model` loads (its text tower embeds the
    captions, its image tower the images unless ``images=False``), ``minilm`` for a text-only
    sentence encoder, or a loaded encoder. The data options (``name``, ``split``, ...: :func:`hnbench.specs.data_keywords`)
    are keywords too, sorted from the settings by :func:`hnbench.specs.split_keywords`. ``results``: evaluation result JSONs of this dataset to
    break down R@1 by hardness. ``settings`` and the keyword ``options`` are the fields of
    :class:`~hnbench.settings.HardnessSettings` (device, batch_size, n_batches, edges, threshold, seed, ...;
    the keywords replace those of ``settings``). Statistics and their exact definitions:
    :mod:`hnbench.hardness.stats`.
    """
    data = os.fspath(data) if isinstance(data, os.PathLike) else data
    options, dataset_options = split_keywords(options, HardnessSettings, dataset_options)  # name=, split=, ...
    s = from_options(HardnessSettings, settings, options)
    s.validate(output_dir)
    caption_file = isinstance(data, str) and Path(data).suffix == ".txt"
    if dataset_options and (caption_file or not isinstance(data, (str, DataSpec))):  # else dropped without a word
        what = "a caption file" if caption_file else f"this {type(data).__name__} (loaded already)"
        raise ConfigError(f"{', '.join(dataset_options)}: data options apply to a data set given by name or path, "
                          f"not to {what}")
    if isinstance(model, str) and model not in TEXT_ENCODERS:
        check_trusted(model, pretrained, trust_remote_code)  # remote code: refused before anything loads
    t0 = time.perf_counter()
    timings: dict[str, float] = {}
    spec: DataSpec | None = None  # recorded in the report's dataset, as eval records it
    if caption_file:
        assert isinstance(data, str)
        data = load_captions(data, label_field=None if label_field == "auto" else label_field)
    elif isinstance(data, DataSpec):
        spec = data.override(data_root=data_root, protocol=protocol)
        _refuse_choice(spec)
        data = load_spec(spec)
    elif isinstance(data, str):
        spec, rest = DataSpec.of(data, dataset_options, data_root=data_root, protocol=protocol)
        _refuse_choice(spec)
        data = load_spec(spec, **rest)  # checked first: an option this kind of data does not read is refused
    elif not isinstance(data, (ImageTextDataset, CaptionSet)):
        captions = [str(c) for c in data]
        ids = [str(i) for i in range(len(captions))]
        data = CaptionSet("captions", captions, ids, np.arange(len(captions)), ids,
                          fingerprint=text_fingerprint(captions), kind="captions")
    cs = from_dataset(data, label_field) if isinstance(data, ImageTextDataset) else data
    timings["load_data"] = time.perf_counter() - t0
    inputs = {"data": cs.fingerprint, "label_field": cs.label_field, "statistics": _statistics(s),
              "model": model if isinstance(model, str) else model.info.fingerprint, "pretrained": pretrained,
              "model_config": model_config}
    if output_dir is not None:  # before the model loads
        check_output(Path(output_dir) / "hardness.json", "a hardness report", inputs, overwrite=s.overwrite)
    scored = [(path, *load_per_query(path)) for path in s.results]  # checked before the model loads
    for path, res, frame in scored:
        _check_result_matches(path, res, frame, cs)
    t = time.perf_counter()
    encoder = _load_encoder(model, pretrained, model_config, s.context_length, s.device, trust_remote_code)
    timings["load_model"] = time.perf_counter() - t

    txt = encode.encode_texts(encoder, cs.captions, batch_size=max(s.encode_batch_size, 64), progress=s.progress,
                              cache=bool(s.use_cache))
    timings["encode_texts"] = txt.seconds
    image_vectors, img = None, None
    if s.images and cs.images is not None and encoder.has_images:
        img = encode.encode_images(encoder, cs.images, batch_size=s.encode_batch_size, num_workers=s.num_workers,
                                   progress=s.progress, cache=bool(s.use_cache))
        image_vectors = img.vectors
        timings["encode_images"] = img.seconds

    report = analyze(txt.vectors, captions=cs.captions, caption_ids=cs.caption_ids, caption_image=cs.caption_image,
                     image_vectors=image_vectors, image_ids=cs.image_ids, labels=cs.labels,
                     label_field=cs.label_field or "label", batch_size=s.batch_size, n_batches=s.n_batches,
                     edges=s.edges, threshold=s.threshold, image_threshold=s.image_threshold, exact_max=s.exact_max,
                     n_sample_pairs=s.n_sample_pairs, seed=s.seed, device=s.device, progress=s.progress)
    report.dataset = {"name": cs.name, "protocol": cs.protocol, "fingerprint": cs.fingerprint,
                      "n_images": len(cs.image_ids) if cs.kind == "dataset" else None,
                      "n_captions": len(cs.captions), "source": cs.source, "kind": cs.kind,
                      **({"spec": spec.recorded()} if spec is not None else {})}
    report.encoder = encoder.info.to_dict()
    report.settings["n_truncated_captions"] = txt.n_truncated
    report.settings["embedding_cache"] = {"used": bool(s.use_cache), "texts_cached": getattr(txt, "n_cached", 0),
                                          "images_cached": getattr(img, "n_cached", 0) if img is not None else 0}
    report.timings = {**{k: round(v, 4) for k, v in timings.items()}, **report.timings}

    arrays = report.require_arrays()
    for path, res, frame in scored:
        if res.dataset.get("fingerprint") not in (None, cs.fingerprint):
            logger.warning("%s was scored on dataset fingerprint %s, this caption set is %s; joining on ids",
                           path, res.dataset.get("fingerprint"), cs.fingerprint)
        rec, errors = recall_by_hardness(
            frame, caption_ids=cs.caption_ids, image_ids=cs.image_ids, caption_image=cs.caption_image,
            hn_index=arrays.text_nearest_index, hn_score=arrays.text_nearest_score,
            edges=report.settings["edges"], captions=cs.captions, text_vectors=txt.vectors, n_wrong=s.n_show * 2,
            result=str(path), model=res.model)
        report.recall.append(rec)
        arrays.errors.append(errors)
    if output_dir is not None:
        record_output(Path(output_dir) / "hardness.json", inputs)
        write_outputs(report, output_dir, cs, n_show=s.n_show)
    report.timings["total"] = round(time.perf_counter() - t0, 4)
    if output_dir is not None:
        write_report(report, output_dir)
    return report


def choice_task(spec: DataSpec) -> Task | None:
    """The task that scores ``spec``'s data when it is an option-choice set (a per-item task whose check accepts
    it: the choice task on a compositional benchmark or synthdense's compositional protocols), else None."""
    for name in TASKS.declared():
        task = TASKS.get(name)
        if not task.per_item:
            continue
        try:
            task.check(spec)
        except ConfigError:
            continue
        return task
    return None


def _refuse_choice(spec: DataSpec) -> None:
    """An option-choice set has no caption set to measure this way: one line naming what measures it."""
    if choice_task(spec) is not None:
        raise ConfigError(f"{spec.dataset} (protocol {spec.protocol or 'default'}) is an option-choice set: "
                          "hnbench.hardness.choice_hardness measures its negatives against their positives "
                          "(hnbench hardness picks it by itself)")


def _statistics(s: HardnessSettings) -> dict[str, Any]:
    """The settings a report's numbers depend on (what makes two reports of one model and data differ): the
    fields declared ``identity`` (:func:`hnbench.settings.identity_fields`), in declaration order."""
    names = set(identity_fields(s))
    return {f.name: getattr(s, f.name) for f in dataclasses.fields(s) if f.name in names}


def _check_result_matches(path: str | Path, res: Any, frame: Any, cs: CaptionSet) -> None:
    """A result of another caption set cannot be joined: refuse it (one that skipped items may be)."""
    if res.dataset.get("fingerprint") in (None, cs.fingerprint):
        return
    ids = frame.loc[frame["direction"] == "t2i", "query_id"].astype(str)
    unknown = int((~ids.isin(set(cs.caption_ids))).sum())
    if unknown:
        raise ConfigError(f"--results {path} was scored on {res.dataset.get('name')!r} (fingerprint "
                          f"{res.dataset.get('fingerprint')}), not on this caption set {cs.name!r} (fingerprint "
                          f"{cs.fingerprint}): {unknown} of its {len(ids)} caption ids are not in it")


def hardness_many(datasets: Sequence[Any], models: Sequence[Any], *, output_dir: str | Path,
                  pretrained: Sequence[str | None] | None = None, settings: HardnessSettings | None = None,
                  **kwargs: Any) -> list[HardnessReport]:
    """:func:`hardness` for every (dataset, model) into ``output_dir/<dataset>__<model>/``, then :func:`compare`.

    ``kwargs``: :func:`hardness`'s data and model keywords and :class:`HardnessSettings` fields."""
    fields = {f.name for f in dataclasses.fields(HardnessSettings)}
    s = from_options(HardnessSettings, settings, {k: v for k, v in kwargs.items() if k in fields})
    kwargs = {k: v for k, v in kwargs.items() if k not in fields}
    s.validate(output_dir)
    model_config = kwargs.pop("model_config", None)
    trusted = bool(kwargs.get("trust_remote_code", False))
    models, pretrained = map(list, zip(*model_pairs(models, pretrained, model_config=model_config,
                                                    trust_remote_code=trusted)))
    for d in datasets:  # every data set's options, before the first is loaded
        if isinstance(d, str) and Path(d).suffix != ".txt":
            DataSpec.of(d, kwargs.get("dataset_options"), data_root=kwargs.get("data_root"),
                        protocol=kwargs.get("protocol"))[0].validate()
    inputs = {"data": [d if isinstance(d, str) else getattr(d, "fingerprint", None) for d in datasets],
              "models": [m if isinstance(m, str) else m.info.fingerprint for m in models], "pretrained": pretrained,
              "model_config": model_config, "statistics": _statistics(s),
              **{k: kwargs.get(k) for k in ("data_root", "protocol", "dataset_options", "label_field")}}
    check_output(Path(output_dir) / "comparison.json", "a hardness comparison", inputs, overwrite=s.overwrite)
    reports: list[HardnessReport] = []
    made = [p for p in (Path(output_dir), *Path(output_dir).parents) if not p.exists()]  # removed on failure
    try:
        for m, pt in zip(models, pretrained):
            enc = _load_encoder(m, pt, model_config, s.context_length, s.device, trusted)
            for d in datasets:
                name = Path(d).stem if isinstance(d, str) else getattr(d, "name", "data")
                weights = f"-{_slug(Path(pt).stem)}" if pt else ""
                sub = Path(output_dir) / f"{_slug(name)}__{_slug(m if isinstance(m, str) else enc.info.arch)}{weights}"
                made += [] if sub.exists() else [sub]
                reports.append(hardness(d, enc, output_dir=sub, settings=s, **kwargs))
        record_output(Path(output_dir) / "comparison.json", inputs)
        compare(reports, output_dir)
    except BaseException:  # a failure (or ^C) part-way leaves no partial comparison behind
        for p in reversed(made):
            shutil.rmtree(p, ignore_errors=True)
        raise
    return reports


