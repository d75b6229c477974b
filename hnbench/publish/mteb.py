"""``--format mteb``: the MTEB results-repository layout, ``results/<ORG>__<NAME>/<REVISION>/<TASK>.json`` with
``model_meta.json`` and ``run_settings.jsonl`` beside them.

The task is named as hnbench names it (``hnbench-<benchmark>-<protocol>-<direction>``, zero-shot
``hnbench-<benchmark>-<protocol>-zeroshot``), never as one of MTEB's own tasks: those declare ``ndcg_at_10`` as
their main score, which hnbench does not compute, and their sets are not hnbench's protocols. One file per
direction, as MTEB writes one per task. The revision folder is the model's fingerprint (MTEB uses the model's
Hugging Face commit, which a result does not record); the model name is ``--model-name`` (``ORG/NAME``, as MTEB's
``ModelMeta`` requires; ``/`` is ``__`` in the folder), else ``ARCH/TAG`` (a Hub model ``hf:ORG/NAME``: its id).

A ``TaskResult`` (what ``mteb.TaskResult.from_disk`` loads): ``dataset_revision`` (the Hub revision the data was
downloaded at, else ``hnbench:<content fingerprint>``), ``task_name``, ``mteb_version`` (null: mteb did not run),
``scores`` (``{"test": [one entry]}``), ``evaluation_time`` (the result's total seconds), ``date`` (its
``created`` as a Unix time). The entry: ``main_score`` (``hit_rate_at_1``; zero-shot ``accuracy``), ``hf_subset``
``default``, ``languages`` ``["eng-Latn"]``, then hnbench's R@K as ``hit_rate_at_K`` (a fraction: the share of
queries with a positive in the top K), and ``recall_at_K`` (MTEB's: the share of a query's positives found) only
where every query has exactly one positive (text→image always; image→text when each image has one caption), where
the two are equal. hnbench's interval, method, counts, ranks, tie rule, version and fingerprints follow as
``hnbench_*`` keys in the entry: MTEB keeps unknown keys there and drops them at the top level. Floats are rounded
to 6 decimals, as MTEB writes them.

:func:`check_task_result` is hnbench's own check of that schema (MTEB's loading rules and hnbench's), run on every
file before it is written; the tests also load the files with ``mteb`` when it is installed.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
from pathlib import PurePosixPath
from typing import Any

from hnbench.publish.options import ExportSettings
from hnbench.publish.sources import (
    Built,
    Skip,
    Source,
    Value,
    fraction,
    hub_revision,
    interval,
    number,
    recall_ks,
    slug,
    top_ks,
)

__all__ = ["SPLIT", "build", "check_task_result", "folder_name", "task_name"]

SPLIT = "test"
_DIGITS = 6  # MTEB's TaskResult.to_disk rounds scores to 6 decimals


def task_name(source: Source, group: str) -> str:
    """The task of one result's direction (or zero-shot), as hnbench names it."""
    part = "zeroshot" if group == "classification" else group
    return f"hnbench-{slug(source.data.name)}-{slug(source.data.protocol)}-{part}"


def folder_name(name: str) -> str:
    """MTEB's model folder: the name with ``" "`` → ``_`` and ``/`` → ``__`` (and nothing a path could misread)."""
    return re.sub(r"[^A-Za-z0-9._()+@-]", "-", name.replace(" ", "_").replace("/", "__")).strip(".") or "x"


def _r(value: float) -> float:
    return round(value, _DIGITS)


def _single_positive(source: Source, group: str) -> bool:
    """Whether every query of a direction has exactly one positive: t2i (a caption has one image), or i2t on a set
    of one caption per image."""
    ds = source.result.dataset
    return group == "t2i" or (group == "i2t" and isinstance(ds.get("n_images"), int)
                              and ds.get("n_images") == ds.get("n_captions"))


def _entry(source: Source, group: str, built: Built) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """The per-subset scores of one direction (or zero-shot) and, per score, its result field."""
    r = source.result
    m = r.metrics.get(group) or {}
    scores: dict[str, Any] = {}
    fields: list[tuple[str, str]] = []
    extra: dict[str, Any] = {}

    def put(key: str, metric: str, ci_key: str | None = None) -> float | None:
        value = number(m.get(metric))
        if value is None:
            built.skipped.append(Skip(source.path, f"{group} {metric}", "not a number in the result (NaN: missing)"))
            return None
        scores[key] = _r(fraction(value))
        fields.append((key, f"metrics.{group}.{metric}"))
        ci = interval(r, group, metric)
        if ci is not None and ci_key:
            extra[f"hnbench_ci95_{ci_key}"] = [_r(fraction(ci[0][0])), _r(fraction(ci[0][1]))]
            extra[f"hnbench_ci_method_{ci_key}"] = ci[1]
        return value

    if group == "classification":
        for k in top_ks(m):
            key = "accuracy" if k == 1 else f"top_{k}_accuracy"
            put(key, f"top-{k}", key)
        main = "accuracy" if "accuracy" in scores else next(iter(scores), None)
    else:
        single = _single_positive(source, group)
        for k in recall_ks(m):
            if put(f"hit_rate_at_{k}", f"R@{k}", f"hit_rate_at_{k}") is not None and single:
                scores[f"recall_at_{k}"] = scores[f"hit_rate_at_{k}"]
                fields.append((f"recall_at_{k}", f"metrics.{group}.R@{k}"))
        if not single:
            built.note("recall_at_K (MTEB's true recall: the share of a query's positives found) is written only where "
                       "every query has one positive; image→text on a set of several captions per image has "
                       "hit_rate_at_K alone")
        main = "hit_rate_at_1" if "hit_rate_at_1" in scores else next(iter(scores), None)
        for metric, key in (("MRR", "hnbench_mrr"), ("mean_rank", "hnbench_mean_rank"),
                            ("median_rank", "hnbench_median_rank")):
            value = number(m.get(metric))
            if value is not None:
                extra[key] = _r(value)
                fields.append((key, f"metrics.{group}.{metric}"))
        extra["hnbench_single_positive"] = single
    entry: dict[str, Any] = {"main_score": scores[main] if main else None, "hf_subset": "default",
                             "languages": ["eng-Latn"], **scores}
    if main:
        fields.append(("main_score", dict(fields)[main]))
    s = r.settings or {}
    for key, info in (("hnbench_main_score", main), ("hnbench_n_queries", m.get("n_queries")),
                       ("hnbench_n_tied", m.get("n_tied")), ("hnbench_tie_rule", s.get("tie_rule")),
                       ("hnbench_benchmark", source.data.name), ("hnbench_protocol", source.data.protocol),
                       ("hnbench_data_fingerprint", source.data.fingerprint or None),
                       ("hnbench_model_fingerprint", source.model.fingerprint or None),
                       ("hnbench_version", r.hnbench_version)):
        if info is not None:
            entry[key] = info
    entry.update(extra)
    return entry, fields


def _timestamp(created: str) -> float | None:
    try:
        when = _dt.datetime.fromisoformat(created)
    except (TypeError, ValueError):
        return None
    return when.timestamp() if when.tzinfo is not None else None


def _task_result(source: Source, group: str, built: Built) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    r = source.result
    entry, fields = _entry(source, group, built)
    revision = hub_revision(source, source.data.spec.hub.dataset if source.data.spec else None)
    total = number((r.timings or {}).get("total"))
    out: dict[str, Any] = {"dataset_revision": revision or f"hnbench:{source.data.fingerprint or 'unknown'}",
                           "task_name": task_name(source, group), "mteb_version": None,
                           "scores": {SPLIT: [entry]}, "evaluation_time": total,
                           "kg_co2_emissions": None}
    when = _timestamp(str(r.created))
    if when is not None:
        out["date"] = when
    return out, fields


def _model_meta(source: Source, name: str, revision: str) -> dict[str, Any]:
    """``model_meta.json``: what hnbench knows of the model (what it does not know is null)."""
    m = source.result.model
    return {"name": name, "revision": revision, "release_date": None, "languages": None,
            "n_parameters": m.get("n_params") if isinstance(m.get("n_params"), int) else None,
            "memory_usage_mb": None, "max_tokens": m.get("context_length"), "embed_dim": m.get("embed_dim"),
            "license": None, "open_weights": None, "public_training_code": None, "public_training_data": None,
            "framework": ["PyTorch"], "reference": None, "similarity_fn_name": "cosine", "use_instructions": None,
            "training_datasets": None, "adapted_from": None, "superseded_by": None, "modalities": ["image", "text"],
            "loader": None}


def build(sources: list[Source], settings: ExportSettings) -> Built:
    """A TaskResult per result and direction, and per model ``model_meta.json`` and ``run_settings.jsonl``."""
    built = Built()
    metas: dict[str, bytes] = {}
    settings_lines: dict[str, list[str]] = {}
    for s in sources:
        name, revision = s.model.mteb_name, s.model.fingerprint or "no_revision_available"
        folder = f"results/{folder_name(name)}/{slug(revision)}"
        metas.setdefault(f"{folder}/model_meta.json",
                         (json.dumps(_model_meta(s, name, revision), indent=2) + "\n").encode())
        for group in s.result.task_spec().groups:
            obj, fields = _task_result(s, group, built)
            rel = f"{folder}/{obj['task_name']}.json"
            if obj["scores"][SPLIT][0]["main_score"] is None:
                built.skipped.append(Skip(s.path, group, "no hit rate or accuracy of it is a number"))
                continue
            if rel in built.files:
                built.skipped.append(Skip(s.path, group, f"another result fills {rel} (a model's task is one file)"))
                continue
            problems = check_task_result(obj, rel)
            assert not problems, problems  # what hnbench writes passes its own check of the schema
            built.files[rel] = (json.dumps(obj, indent=2) + "\n").encode()
            entry = obj["scores"][SPLIT][0]
            built.values += [Value(rel, f"scores.{SPLIT}[0].{key}", s.index, field, entry[key]) for key, field in fields]
            st = s.result.settings or {}
            line = {"task": obj["task_name"], "splits": [SPLIT], "subsets": ["default"],
                    "version": {"hnbench": s.result.hnbench_version},
                    "encode_kwargs": {k: st[k] for k in ("batch_size", "precision") if k in st}}
            settings_lines.setdefault(f"{folder}/run_settings.jsonl", []).append(json.dumps(line))
    for rel, data in metas.items():
        if any(f.startswith(rel.rpartition("/")[0] + "/") for f in built.files):
            built.files[rel] = data
    for rel, lines in settings_lines.items():
        built.files[rel] = ("\n".join(sorted(lines)) + "\n").encode()
    built.note("the MTEB tasks are hnbench's (hnbench-BENCHMARK-PROTOCOL-DIRECTION), not MTEB's own: MTEB's image-text "
               "tasks rank by ndcg_at_10, which hnbench does not compute; mteb loads these files "
               "(TaskResult.from_disk), its results repository accepts only results of its own tasks")
    return built


_REQUIRED = {"dataset_revision": (str,), "task_name": (str,), "mteb_version": (str, type(None)),
             "scores": (dict,), "evaluation_time": (int, float, type(None))}


def _finite(value: Any, where: str, problems: list[str]) -> None:
    """Every number in ``value`` finite with at most 6 decimals; everything JSON (no other types)."""
    if isinstance(value, bool) or value is None or isinstance(value, (str, int)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            problems.append(f"{where}: {value} is not finite")
        elif round(value, _DIGITS) != value:
            problems.append(f"{where}: {value} has more than {_DIGITS} decimals")
        return
    if isinstance(value, list):
        for i, v in enumerate(value):
            _finite(v, f"{where}[{i}]", problems)
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                problems.append(f"{where}: key {k!r} is not a string")
            _finite(v, f"{where}.{k}", problems)
        return
    problems.append(f"{where}: {type(value).__name__} is not JSON")


def check_task_result(obj: Any, path: str | None = None) -> list[str]:
    """What is wrong with an MTEB ``TaskResult`` object (empty: nothing), by MTEB's loading rules
    (``TaskResult.model_validate``: the top-level keys and their types; per subset a numeric ``main_score``, a
    string ``hf_subset``, a list of ``languages``; everything JSON) and hnbench's (scores are fractions in
    [0, 1], with at most 6 decimals; in hnbench's entries ``recall_at_K`` only beside ``hnbench_single_positive:
    true``; the file named after its task)."""
    if not isinstance(obj, dict):
        return [f"not a JSON object but {type(obj).__name__}"]
    problems = [f"{key}: missing" for key in _REQUIRED if key not in obj]
    problems += [f"{key}: {type(obj[key]).__name__}, not {' or '.join(t.__name__ for t in kinds)}"
                 for key, kinds in _REQUIRED.items() if key in obj
                 and (not isinstance(obj[key], kinds) or isinstance(obj[key], bool))]
    if path is not None and isinstance(obj.get("task_name"), str) and PurePosixPath(path).stem != obj["task_name"]:
        problems.append(f"file {PurePosixPath(path).name} is not named after its task {obj['task_name']!r}")
    _finite(obj, "", problems)
    for split, entries in (obj.get("scores") or {}).items() if isinstance(obj.get("scores"), dict) else ():
        if not isinstance(entries, list) or not entries:
            problems.append(f"scores.{split}: not a non-empty list of subsets")
            continue
        for i, e in enumerate(entries):
            where = f"scores.{split}[{i}]"
            if not isinstance(e, dict):
                problems.append(f"{where}: not an object")
                continue
            main = e.get("main_score")
            if isinstance(main, bool) or not isinstance(main, (int, float)):
                problems.append(f"{where}.main_score: missing or not a number")
            if not isinstance(e.get("hf_subset"), str):
                problems.append(f"{where}.hf_subset: missing or not a string")
            if not isinstance(e.get("languages"), list) or not all(isinstance(x, str) for x in e["languages"]):
                problems.append(f"{where}.languages: missing or not a list of strings")
            for key, value in e.items():
                scored = key == "main_score" or key == "accuracy" or re.fullmatch(
                    r"(hit_rate|recall)_at_\d+|top_\d+_accuracy", key)
                if scored and isinstance(value, (int, float)) and not 0 <= value <= 1:
                    problems.append(f"{where}.{key}: {value} is not a fraction in [0, 1]")
                if key.startswith("recall_at_") and "hnbench_version" in e and e.get("hnbench_single_positive") is not True:
                    problems.append(f"{where}.{key}: recall is not the hit rate where a query has several positives")
    return problems
