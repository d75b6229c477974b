"""``--format hf-eval-results``: the Hub's newer per-result files, ``.eval_results/<benchmark>-<protocol>.yaml`` in
a model repository (one folder per model when several are exported).

Each file is a YAML list of entries, one value each: ``dataset.id`` (a registered Hub *Benchmark* dataset),
``dataset.task_id`` (a task of that dataset's ``eval.yaml``; hnbench proposes ``<benchmark>_<protocol>_<direction>_r<K>``,
zero-shot ``<benchmark>_<protocol>_top<K>``), ``dataset.revision`` where the data was downloaded from that
repository, ``value`` (R@K or top-K accuracy in %, a float, 2 decimals), ``date`` (the result's ``created``),
``source`` (``--source-url``, named ``hnbench <version>``) and ``notes``, the only place for the interval, the
query count, the tie rule, the protocol and the model's fingerprint. Only a benchmark whose spec declares its
Hub Benchmark id (``hub.benchmark``) can be written; none is known to be registered yet, so today every entry
is listed as not exported, with that reason.
"""

from __future__ import annotations

from typing import Any

import yaml

from hnbench.publish.options import ExportSettings
from hnbench.publish.sources import (
    Built,
    Skip,
    Source,
    Value,
    hub_revision,
    interval,
    model_folders,
    number,
    recall_ks,
    slug,
    top_ks,
)

__all__ = ["build"]


def _notes(source: Source, group: str, metric: str) -> str:
    """The entry's free text: interval, count, ties, protocol, model fingerprint, hnbench version."""
    r = source.result
    m = r.metrics.get(group) or {}
    parts = []
    ci = interval(r, group, metric)
    if ci is not None:
        parts.append(f"95% CI [{ci[0][0]:.2f}, {ci[0][1]:.2f}] ({ci[1]})")
    if isinstance(m.get("n_queries"), int):
        parts.append(f"n={m['n_queries']}")
    tie = (r.settings or {}).get("tie_rule")
    if tie:
        parts.append(f"ties {str(tie).partition(':')[0]}")
    parts.append(f"hit rate in %; protocol {source.data.protocol}")
    if source.model.fingerprint:
        parts.append(f"model fingerprint {source.model.fingerprint}")
    return "; ".join(parts + [f"hnbench {r.hnbench_version}"])


def _entries(source: Source, benchmark: str, settings: ExportSettings) -> list[tuple[dict[str, Any], str]]:
    """The entries of one result, each with the result field its value comes from."""
    r, d = source.result, source.data
    revision = hub_revision(source, benchmark)
    out = []
    for group in r.task_spec().groups:
        m = r.metrics.get(group) or {}
        keys = ([(f"top-{k}", f"top{k}") for k in top_ks(m)] if group == "classification"
                else [(f"R@{k}", f"{group}_r{k}") for k in recall_ks(m)])
        for key, task in keys:
            value = number(m.get(key))
            if value is None:
                continue
            dataset: dict[str, Any] = {"id": benchmark, "task_id": f"{d.name}_{d.protocol}_{task}"}
            if revision:
                dataset["revision"] = revision
            entry: dict[str, Any] = {"dataset": dataset, "value": round(value, 2), "date": str(r.created)}
            if settings.source_url:
                entry["source"] = {"url": settings.source_url, "name": f"hnbench {r.hnbench_version}"}
            entry["notes"] = _notes(source, group, key)
            out.append((entry, f"metrics.{group}.{key}"))
    return out


def build(sources: list[Source], settings: ExportSettings) -> Built:
    """``.eval_results/<benchmark>-<protocol>.yaml`` per model, for the benchmarks registered as Hub Benchmarks."""
    built = Built()
    folders = model_folders(sources)
    files: dict[str, list[tuple[dict[str, Any], str, int]]] = {}
    for s in sources:
        spec = s.data.spec
        benchmark = spec.hub.benchmark if spec else None
        if benchmark is None:
            why = (f"{s.data.name} is not registered as a Hugging Face Hub Benchmark (its spec declares no "
                   "hub.benchmark): an .eval_results entry names a Benchmark dataset and a task id of its eval.yaml, "
                   "and none of hnbench's benchmarks is known to be registered yet") if spec else \
                  (f"{s.data.name} is not a registered benchmark: an .eval_results entry names a Hub Benchmark "
                   "dataset")
            built.skipped.append(Skip(s.path, "the whole result", why))
            continue
        rel = f"{folders[s.model.key]}.eval_results/{slug(s.data.name)}-{slug(s.data.protocol)}.yaml"
        entries = _entries(s, benchmark, settings)
        if rel in files:
            built.skipped.append(Skip(s.path, "the whole result", f"another result fills {rel}"))
            continue
        files[rel] = [(entry, field, s.index) for entry, field in entries]
    for rel, listed in sorted(files.items()):
        built.files[rel] = yaml.safe_dump([e for e, _, _ in listed], sort_keys=False, allow_unicode=True,
                                          width=100).encode()
        built.values += [Value(rel, f"[{i}].value", index, field, entry["value"])
                         for i, (entry, field, index) in enumerate(listed)]
    return built
