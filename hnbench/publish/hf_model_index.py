"""``--format hf-model-index``: the ``model-index`` of a Hugging Face model card (its README.md's YAML front matter).

One card per model, whose ``model-index`` is one entry (``name``, ``results``): ``huggingface_hub`` keeps only the
last entry's name and pools the results of all of them. A result per (benchmark, protocol, direction) for
retrieval, per (benchmark, protocol) for zero-shot classification, laid out so that ``huggingface_hub``'s parser
keeps every one apart: it regroups results by ``(task.type, dataset.type, dataset.config, dataset.split,
dataset.revision)`` and merges those sharing all five, so the direction is in ``task.type``
(``text-to-image-retrieval`` / ``image-to-text-retrieval``; zero-shot: ``zero-shot-image-classification``) and
the protocol in ``dataset.config``. ``dataset.type`` is the benchmark's Hub dataset id where its spec declares one
(:class:`hnbench.data.benchmarks.spec.HubIds`), else hnbench's benchmark name (a note says which, once).

Metrics: ``recall_at_K`` (hnbench's R@K, a hit rate, in % as stored, 2 decimals), ``mean_rank``,
``median_rank``, ``mrr`` (a fraction, 4 decimals); zero-shot ``accuracy`` (top-1) and ``top_K_accuracy`` (%).
Each metric's ``args`` hold its 95% interval and how it was made, the query and tie counts and the scale; the
result's ``dataset.args`` the protocol, the data's content fingerprint, counts, the model's fingerprint, the tie
rule and the hnbench version. Nothing is ever null (``huggingface_hub`` drops a null and then refuses the
metric); only keys its ``EvalResult`` keeps are written, so a card written back by ``huggingface_hub`` holds the
same ``model-index``.

``--card README.md`` updates an existing card in place: its front matter's ``model-index`` becomes one entry
holding its earlier results that hnbench's do not replace (same five fields) and hnbench's; every other
front-matter key keeps its value and the text after the front matter stays byte-identical.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from hnbench._version import __version__
from hnbench.errors import ConfigError, DataError
from hnbench.io import markdown_text, read_untrusted
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
    top_ks,
)

__all__ = ["TASKS", "build", "card_bytes", "front_matter"]

#: metric group → (task.type, task.name)
TASKS = {"t2i": ("text-to-image-retrieval", "Text-to-Image Retrieval"),
         "i2t": ("image-to-text-retrieval", "Image-to-Text Retrieval"),
         "classification": ("zero-shot-image-classification", "Zero-Shot Image Classification")}
HIT_RATE = "hit rate: the share of queries with a positive in the top K"
# huggingface_hub's front-matter pattern (repocard.py REGEX_YAML_BLOCK): the block it reads is the one replaced
_FRONT_MATTER = re.compile(r"^(\s*---[\r\n]+)([\S\s]*?)([\r\n]+---(\r\n|\n|$))")
_MAX_CARD = 16 << 20


def _args(source: Source, group: str, metric: str, scale: str, definition: str | None) -> dict[str, Any]:
    """A metric's ``args``: scale, definition, interval and its method, counts (no nulls)."""
    r = source.result
    m = r.metrics.get(group) or {}
    out: dict[str, Any] = {"scale": scale}
    if definition:
        out["definition"] = definition
    ci = interval(r, group, metric)
    if ci is not None:
        out["ci95"] = [round(ci[0][0], 2), round(ci[0][1], 2)]
        out["ci_method"] = ci[1]
    for key in ("n_queries", "n_tied"):
        if isinstance(m.get(key), int):
            out[key] = m[key]
    return out


def _metrics(source: Source, group: str) -> list[tuple[dict[str, Any], str]]:
    """The metrics of one direction (or zero-shot's classification), each with the key of ``metrics.<group>`` it
    comes from; a value that is not a number (NaN: missing) is left out (the caller lists it)."""
    m = source.result.metrics.get(group) or {}
    rows: list[tuple[str, str, str, dict[str, Any], int]] = []  # (key, type, name, args, digits)
    if group == "classification":
        rows += [(f"top-{k}", "accuracy" if k == 1 else f"top_{k}_accuracy", f"top-{k} accuracy",
                  _args(source, group, f"top-{k}", "percent", "the share of images whose class ranks in the top K"),
                  2) for k in top_ks(m)]
    else:
        label = group.upper()
        rows += [(f"R@{k}", f"recall_at_{k}", f"{label} R@{k}", _args(source, group, f"R@{k}", "percent", HIT_RATE),
                  2) for k in recall_ks(m)]
        rows += [(key, kind, f"{label} {name}", {"scale": scale}, digits)
                 for key, kind, name, scale, digits in (("mean_rank", "mean_rank", "mean rank", "rank", 2),
                                                        ("median_rank", "median_rank", "median rank", "rank", 2),
                                                        ("MRR", "mrr", "MRR", "fraction", 4)) if key in m]
    out = []
    for key, kind, name, args, digits in rows:
        value = number(m.get(key))
        if value is not None:
            out.append(({"type": kind, "value": round(value, digits), "name": name, "args": args}, key))
    return out


def _result(source: Source, group: str, hub: str, settings: ExportSettings) -> dict[str, Any]:
    """One model-index result (without metrics) of ``source``'s ``group``."""
    r, d = source.result, source.data
    task_type, task_name = TASKS[group]
    ds = r.dataset
    args: dict[str, Any] = {"hnbench_benchmark": d.name, "hnbench_protocol": d.protocol}
    if d.fingerprint:
        args["hnbench_fingerprint"] = d.fingerprint
    for key in ("n_images", "n_captions", "n_classes"):
        if isinstance(ds.get(key), int):
            args[key] = ds[key]
    for key, value in (("model_fingerprint", source.model.fingerprint),
                       ("tie_rule", (r.settings or {}).get("tie_rule")),
                       ("precision", (r.settings or {}).get("precision")),
                       ("context_length", r.model.get("context_length")),
                       ("hnbench_version", r.hnbench_version)):
        if value not in (None, ""):
            args[key] = value
    dataset: dict[str, Any] = {"name": f"{d.title} ({d.protocol})", "type": hub, "config": d.protocol}
    revision = hub_revision(source, d.spec.hub.dataset if d.spec else None)
    if revision:
        dataset["revision"] = revision
    dataset["args"] = args
    out: dict[str, Any] = {"task": {"type": task_type, "name": task_name}, "dataset": dataset}
    if settings.source_url:
        out["source"] = {"url": settings.source_url, "name": f"hnbench {r.hnbench_version}"}
    return out


def _identifier(result: dict[str, Any]) -> tuple[Any, ...]:
    """The five fields ``huggingface_hub`` groups a model-index's results by (``EvalResult.unique_identifier``)."""
    t, d = result.get("task") or {}, result.get("dataset") or {}
    return (t.get("type"), d.get("type"), d.get("config"), d.get("split"), d.get("revision"))


def build(sources: list[Source], settings: ExportSettings) -> Built:
    """A card per model (``README.md``; several models: ``NAME/README.md``), or the ``--card`` updated."""
    built = Built()
    folders = model_folders(sources)
    if settings.card is not None and len(folders) > 1:
        raise ConfigError(f"--card updates one model's card; the results hold {len(folders)} models: export each "
                          "model alone")
    unnamed: set[str] = set()
    cards: dict[tuple[str, str, str, str], list[dict[str, Any]]] = {key: [] for key in folders}
    where: dict[tuple[str, str, str, str], list[tuple[int, list[str]]]] = {key: [] for key in folders}
    taken: dict[tuple[Any, ...], str] = {}
    for s in sources:
        hub = s.data.spec.hub.dataset if s.data.spec else None
        if hub is None:
            unnamed.add(s.data.name)
        for group in s.result.task_spec().groups:
            entry = _result(s, group, hub or s.data.name, settings)
            ident = (s.model.key, *_identifier(entry))
            if ident in taken:
                built.skipped.append(Skip(s.path, f"{group}", f"a model card keeps one result per task, dataset "
                                          f"and config: {taken[ident]} already fills {entry['task']['type']} on "
                                          f"{entry['dataset']['type']} ({entry['dataset']['config']})"))
                continue
            taken[ident] = s.path
            metrics = _metrics(s, group)
            m = s.result.metrics.get(group) or {}
            for metric in m:
                if (metric.startswith(("R@", "top-")) or metric in ("mean_rank", "median_rank", "MRR")) \
                        and number(m[metric]) is None:
                    built.skipped.append(Skip(s.path, f"{group} {metric}", "not a number in the result (NaN: "
                                              "missing)"))
            if not metrics:
                built.skipped.append(Skip(s.path, group, "no metric of it is a number"))
                continue
            entry["metrics"] = [metric for metric, _ in metrics]
            cards[s.model.key].append(entry)
            where[s.model.key].append((s.index, [f"metrics.{group}.{key}" for _, key in metrics]))
    if unnamed:
        built.note(f"dataset.type: no Hugging Face Hub dataset id is declared for {', '.join(sorted(unnamed))}, "
                   "named by hnbench's benchmark name instead (a benchmark's Hub id is its spec's hub.dataset)")
    models = {s.model.key: s.model for s in sources}
    for key, results in cards.items():
        if settings.card is not None:
            path = Path(settings.card)
            data, name, start = _update_card(path, models[key].name if models[key].given else None,
                                             models[key].name, results)
            built.card = (path, data)
            file, offset = str(path), start
        else:
            file, offset = folders[key] + "README.md", 0
            name = models[key].name
            data = card_bytes(None, {"model-index": [{"name": name, "results": results}]}, name)
            built.files[file] = data
        for i, (result, (index, fields)) in enumerate(zip(results, where[key])):
            for j, field in enumerate(fields):
                built.values.append(Value(file, f"model-index[0].results[{offset + i}].metrics[{j}].value", index,
                                          field, result["metrics"][j]["value"]))
    return built


def front_matter(text: str) -> tuple[str, str, str] | None:
    """``text`` split as ``huggingface_hub`` reads a card: (the opening ``---`` line, the YAML, the rest from the
    closing ``---``); None when it has no front matter."""
    m = _FRONT_MATTER.match(text)
    return (m.group(1), m.group(2), text[m.end(2):]) if m else None


def _dump(meta: dict[str, Any]) -> str:
    return yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, default_flow_style=False, width=100)


def card_bytes(text: str | None, meta: dict[str, Any], name: str) -> bytes:
    """A card with front matter ``meta``: ``text`` (an existing card, its front matter replaced, every byte after
    it kept) or a new card whose body names the model (as Markdown text, escaped)."""
    if text is None:
        body = (f"\n# {markdown_text(name)}\n\nEvaluation results exported by hnbench {__version__} from stored "
                "result files: see the `model-index` in this card's metadata.\n")
        return f"---\n{_dump(meta)}---\n{body}".encode()
    bom = "\ufeff" if text.startswith("\ufeff") else ""
    text = text.removeprefix("\ufeff")
    parts = front_matter(text)
    if parts is None:
        return (bom + f"---\n{_dump(meta)}---\n" + text).encode()
    opening, _, rest = parts
    return (bom + opening + _dump(meta).rstrip("\n") + rest).encode()


def _update_card(path: Path, given: str | None, default: str, results: list[dict[str, Any]]
                 ) -> tuple[bytes, str, int]:
    """``path``'s card with ``results`` in its model-index (its own results that these do not replace kept,
    first); returns the bytes, the name used and where the new results start."""
    raw = read_untrusted(path, "model card", limit=_MAX_CARD, error=DataError)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: the model card is not UTF-8 (byte {e.start}); save it as UTF-8") from None
    parts = front_matter(text.removeprefix("\ufeff"))
    try:
        meta = yaml.safe_load(parts[1]) if parts else None
    except yaml.YAMLError as e:
        raise DataError(f"{path}: its front matter is not readable YAML ({' '.join(str(e).split())[:200]})") from None
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        raise DataError(f"{path}: its front matter is a {type(meta).__name__}, not a mapping of metadata")
    old = meta.get("model-index")
    if old is not None and (not isinstance(old, list) or not all(isinstance(e, dict) for e in old)
                            or not all(isinstance(e.get("results", []), list) for e in old)):
        raise DataError(f"{path}: its model-index is not a list of {{name, results}} entries; fix or remove it first")
    kept: list[Any] = []
    ours = {_identifier(r) for r in results}
    existing = None  # huggingface_hub keeps the last entry's name
    for entry in old or []:
        existing = entry["name"] if isinstance(entry.get("name"), str) else existing
        kept += [r for r in entry.get("results") or [] if not (isinstance(r, dict) and _identifier(r) in ours)]
    name = given or existing or default
    meta = {**meta, "model-index": [{"name": name, "results": kept + results}]}
    return card_bytes(text, meta, name), name, len(kept)
