"""``--format clip-benchmark``: CLIP_benchmark's per-run JSON (``clip_benchmark eval``) and its build CSV.

One JSON per (benchmark, protocol, model), named as CLIP_benchmark names its runs
(``{dataset}_{pretrained}_{model}_{language}_{task}.json``), with its keys in its order: ``dataset``, ``model``,
``pretrained``, ``task`` (``zeroshot_retrieval`` / ``zeroshot_classification``), ``metrics``, ``language`` (``en``).
Retrieval metrics: ``image_retrieval_recall@K`` (text→image: hnbench's t2i) and ``text_retrieval_recall@K``
(image→text: i2t), each a hit rate as CLIP_benchmark computes it, as a fraction (hnbench's % ÷ 100, full float
precision); zero-shot ``acc1``, ``acc5`` (``mean_per_class_recall`` is not recorded: listed as not exported).
``dataset`` is CLIP_benchmark's name where hnbench's protocol is its set (``flickr30k``, ``mscoco_captions``: the
Karpathy test splits), else ``hnbench/<benchmark>/<protocol>`` (CLIP_benchmark has no such set). hnbench's
provenance follows as ``hnbench_*`` keys (``build`` turns them into columns): version, benchmark, protocol,
data and model fingerprints, 95% intervals (fractions), query counts, tie rule.

``benchmark.csv``: what ``clip_benchmark build`` makes of these files, one row per JSON, in a fixed column order
(``build`` collects its columns in a set, so its order varies): CLIP_benchmark's checked-in header first, then
``language``, the other recall cut-offs and hnbench's scalar keys.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from hnbench.io import csv_cell
from hnbench.publish.options import ExportSettings
from hnbench.publish.sources import (
    Built,
    Skip,
    Source,
    Value,
    fraction,
    interval,
    number,
    recall_ks,
    slug,
    top_ks,
)

__all__ = ["CB_DATASETS", "CSV_HEAD", "build"]

#: (hnbench benchmark, protocol) → CLIP_benchmark's dataset name for the same set
CB_DATASETS = {("flickr30k", "karpathy-test"): "flickr30k", ("coco", "karpathy-test"): "mscoco_captions"}
#: CLIP_benchmark's checked-in benchmark/benchmark.csv header
CSV_HEAD = ["acc1", "acc5", "mean_per_class_recall", "dataset", "model", "pretrained", "task",
            "mean_average_precision", "image_retrieval_recall@5", "text_retrieval_recall@5", "model_fullname"]
_EXTRAS = ["hnbench_version", "hnbench_benchmark", "hnbench_protocol", "hnbench_dataset_fingerprint",
           "hnbench_model_fingerprint", "hnbench_tie_rule"]
_DIRECTIONS = {"t2i": "image_retrieval_recall", "i2t": "text_retrieval_recall"}


def _run(source: Source, built: Built) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """The JSON object of one result and, per metric written, (its key, its result field)."""
    r, d = source.result, source.data
    metrics: dict[str, float] = {}
    fields: list[tuple[str, str]] = []
    ci95: dict[str, list[float]] = {}
    n_queries: dict[str, int] = {}

    def put(key: str, group: str, metric: str) -> None:
        value = number((r.metrics.get(group) or {}).get(metric))
        if value is None:
            built.skipped.append(Skip(source.path, f"{group} {metric}", "not a number in the result (NaN: missing)"))
            return
        metrics[key] = fraction(value)
        fields.append((key, f"metrics.{group}.{metric}"))
        ci = interval(r, group, metric)
        if ci is not None:
            ci95[key] = [fraction(ci[0][0]), fraction(ci[0][1])]

    if "classification" in r.task_spec().groups:  # zero-shot classification's metrics
        task = "zeroshot_classification"
        m = r.metrics.get("classification") or {}
        for k in top_ks(m):
            put(f"acc{k}", "classification", f"top-{k}")
        built.note("zero-shot: mean_per_class_recall is not recorded in hnbench's results: left out (acc1, acc5 are)")
        if isinstance(m.get("n_queries"), int):
            n_queries["classification"] = m["n_queries"]
    else:
        task = "zeroshot_retrieval"
        for group, prefix in _DIRECTIONS.items():
            m = r.metrics.get(group) or {}
            for k in recall_ks(m):
                put(f"{prefix}@{k}", group, f"R@{k}")
            if isinstance(m.get("n_queries"), int):
                n_queries[group] = m["n_queries"]
    dataset = CB_DATASETS.get((d.name, d.protocol), f"hnbench/{d.name}/{d.protocol}")
    run: dict[str, Any] = {"dataset": dataset, "model": source.model.arch, "pretrained": source.model.tag,
                           "task": task, "metrics": metrics, "language": "en"}
    extras: dict[str, Any] = {"hnbench_version": r.hnbench_version, "hnbench_benchmark": d.name,
                              "hnbench_protocol": d.protocol, "hnbench_dataset_fingerprint": d.fingerprint,
                              "hnbench_model_fingerprint": source.model.fingerprint,
                              "hnbench_tie_rule": (r.settings or {}).get("tie_rule"), "hnbench_ci95": ci95,
                              "hnbench_n_queries": n_queries}
    run.update({k: v for k, v in extras.items() if v not in (None, "", {})})
    return run, fields


def _cell(value: Any) -> Any:
    """A CSV cell as ``build`` (pandas) writes one: a float in its shortest round-trip form, text made safe."""
    if isinstance(value, float):
        return repr(value)
    return csv_cell(value) if value is not None else ""


def build(sources: list[Source], settings: ExportSettings) -> Built:
    """A JSON per result and ``benchmark.csv`` of them all."""
    built = Built()
    runs: dict[str, tuple[dict[str, Any], list[tuple[str, str]], Source]] = {}
    for s in sources:
        run, fields = _run(s, built)
        if not fields:
            built.skipped.append(Skip(s.path, "the whole result", "no metric of it is a number"))
            continue
        name = "_".join(slug(str(run[k]).replace("/", "_")) for k in ("dataset", "pretrained", "model", "language",
                                                                       "task")) + ".json"
        if name in runs:
            built.skipped.append(Skip(s.path, "the whole result", f"{runs[name][2].path} fills {name} already "
                                      "(CLIP_benchmark names a run by dataset, weights, model, language and task)"))
            continue
        runs[name] = (run, fields, s)
    ks = sorted({int(key.rpartition("@")[2]) for run, _, _ in runs.values() for key in run["metrics"] if "@" in key})
    columns = [*CSV_HEAD, "language", *[f"{_DIRECTIONS[g]}@{k}" for k in ks if k != 5 for g in _DIRECTIONS],
               *_EXTRAS]
    rows = []
    for name, (run, fields, s) in sorted(runs.items()):
        built.files[name] = (json.dumps(run) + "\n").encode()
        built.values += [Value(name, f"metrics.{key}", s.index, field, run["metrics"][key]) for key, field in fields]
        flat = {**run["metrics"], **{k: v for k, v in run.items() if k != "metrics"},
                "model_fullname": f"{run['model']} {run['pretrained']}"}
        rows.append((flat, fields, s))
    rows.sort(key=lambda row: tuple(str(row[0].get(k)) for k in ("dataset", "model", "pretrained", "task")))
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for i, (flat, fields, s) in enumerate(rows, start=1):
        writer.writerow([_cell(flat.get(c)) for c in columns])
        built.values += [Value("benchmark.csv", f"row {i} {key}", s.index, field, flat[key]) for key, field in fields]
    if rows:
        built.files["benchmark.csv"] = buf.getvalue().encode()
    return built
