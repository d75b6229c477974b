"""Which negatives matter, on option-choice sets: how close each negative caption is to its positive in a text
encoder, joined to whether a model chose right (``hnbench hardness`` on SugarCrepe, SugarCrepe++, Winoground, ARO or
synthdense's compositional protocols).

- An item's pairs are its rule's (positive, negative) texts (:func:`hnbench.metrics.choice.negative_pairs`: the
  correct option against each other option; Winoground's two captions; SugarCrepe++'s P1 and P2 against N); the
  text encoder (the bundled model's, MiniLM, or the scored model's: any ``--model`` retrieval hardness takes)
  embeds each distinct text once, L2-normalised.
- Item hardness ``h_n = max over its pairs of cos(t_positive, t_negative)``: how near-twin its closest negative is
  (1.0 for a negative that is the positive's exact text or tokenises like it).
- Subsets: the item's ``subset`` field (SugarCrepe's subsets pooled by the mteb protocol) or ``kind`` field
  (synthdense's kinds), else the protocol is one subset (:data:`SUBSET_FIELDS`).
- Accuracy by hardness, per subset and over all items, as recall-by-hardness does for retrieval
  (:mod:`hnbench.hardness.recall`): bucket ``k`` of the edges holds ``e_k <= h < e_{k+1}`` (the first open below,
  the last open above); ``accuracy(bucket) = 100 · #{items in it the model chose right} / #{items in it}``, where
  *right* is the result's stored per-item outcome of its headline metric (the protocol's rule and tie rule: the
  result's per-item file, :func:`hnbench.results.record.read_per_item`, joined on item ids).

Files: ``hardness.json`` (this record), ``items.parquet`` (per item: subset, hardness, each pair's similarity, the
texts, and each result's outcome), ``report.md`` (tables) and ``plots/`` (the hardness histogram per subset, and per
result the accuracy by bucket and subset).
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hnbench.errors import ConfigError
from hnbench.hardness.run import choice_task
from hnbench.hardness.stats import Distribution, bucket_index, bucket_labels, check_edges, unit_rows
from hnbench.io import atomic_write_bytes, check_output, markdown_text, record_output
from hnbench.settings import HardnessSettings, from_options
from hnbench.specs import DataSpec

__all__ = ["SUBSET_FIELDS", "AccuracyBucket", "ChoiceAccuracy", "ChoiceHardnessReport", "SubsetHardness",
           "choice_hardness", "choice_task", "item_hardness"]

SUBSET_FIELDS = ("subset", "kind")  # the item fields that name a set's subsets, in this order of preference
KIND = "hnbench.hardness.choice"
SCHEMA_VERSION = 1


@dataclass
class AccuracyBucket:
    label: str
    n: int
    accuracy: float  # % of the bucket's items the model chose right (NaN: empty)


@dataclass
class SubsetHardness:
    """How close one subset's negatives are to their positives: the distribution of item hardness."""

    subset: str
    n_items: int
    hardness: Distribution
    share_near_twins: float  # share of items whose hardness is ≥ the near-duplicate threshold


@dataclass
class ChoiceAccuracy:
    """One result's per-item outcomes by hardness bucket: per subset, and over all the items matched."""

    result: str
    model: dict[str, Any]
    metric: str  # the headline whose per-item outcome is read (accuracy; Winoground's group; SugarCrepe++'s ITT)
    n_matched: int
    accuracy: float  # % over the matched items (micro, whatever the protocol aggregates)
    overall: list[AccuracyBucket]
    subsets: dict[str, list[AccuracyBucket]]
    mean_hardness_right: float
    mean_hardness_wrong: float


@dataclass
class ChoiceHardnessReport:
    """Everything ``hnbench hardness`` measured on one option-choice set and text encoder."""

    dataset: dict[str, Any]
    encoder: dict[str, Any]
    settings: dict[str, Any]
    subsets: list[SubsetHardness]
    accuracy: list[ChoiceAccuracy] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    path: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.pop("path")
        return {"kind": KIND, "schema_version": SCHEMA_VERSION, **d}


def item_hardness(data: Any, text_vectors: Any) -> tuple[Any, Any, list[tuple[int, int]]]:
    """``(hardness, pair_similarity, pairs)`` of every item of a :class:`~hnbench.data.choices.ChoiceSet`:
    ``pair_similarity[n, p]`` = cos of pair ``p``'s two texts (L2-normalised ``text_vectors`` in ``data.texts``
    order), ``hardness[n]`` its maximum (see the module)."""
    from hnbench.metrics.choice import negative_pairs

    pairs = negative_pairs(data.scoring, data.text_roles)
    v = unit_rows(np.asarray(text_vectors, dtype=np.float32)).astype(np.float64)
    texts = np.asarray(data.item_texts)
    sims = np.stack([np.einsum("nd,nd->n", v[texts[:, a]], v[texts[:, b]]) for a, b in pairs], axis=1)
    return np.clip(sims.max(axis=1), -1.0, 1.0), sims, pairs


def subsets_of(data: Any) -> tuple[str | None, list[str]]:
    """``(field, each item's subset)``: the first of :data:`SUBSET_FIELDS` the items carry, else the protocol."""
    for name in SUBSET_FIELDS:
        if name in data.fields:
            return name, [str(v) for v in data.fields[name]]
    return None, [str(data.protocol or data.name)] * data.n_items


def _buckets(hard: Any, right: Any, edges: Sequence[float]) -> list[AccuracyBucket]:
    b = bucket_index(hard, edges)
    out = []
    for k, label in enumerate(bucket_labels(edges)):
        m = b == k
        out.append(AccuracyBucket(label, int(m.sum()), float(100 * right[m].mean()) if m.any() else math.nan))
    return out


def _choice_result(path: str) -> tuple[Any, Any, str]:
    """``(result, its per-item frame, its headline metric)``; a result of another task (a retrieval result) or
    without its per-item file is one line (read before the data and the model load)."""
    from hnbench.results.record import read_per_item, read_result

    res = read_result(path)
    if not res.task_spec().per_item:
        raise ConfigError(f"--results {path} is a {res.task} result: the hardness of an option-choice set joins an "
                          "option-choice result (--task choice) of the same items, whose per-item file holds what the "
                          "model chose")
    frame = read_per_item(res)  # not there, or not matching its JSON: one line
    return res, frame, str(((res.settings or {}).get("scoring") or {}).get("headline") or "accuracy")


def _outcomes(path: str, res: Any, frame: Any, metric: str, data: Any) -> Any:
    """Each item's outcome of the result's headline, by item index in ``data`` (-1: an item it did not score); a
    result of other items is one line."""
    column = f"right_{metric}"
    position = {item: n for n, item in enumerate(data.item_ids)}
    ids = frame["item_id"].astype(str)
    unknown = int((~ids.isin(set(position))).sum())
    if unknown or column not in frame:
        raise ConfigError(f"--results {path} was scored on {res.dataset.get('name')!r} protocol "
                          f"{res.dataset.get('protocol')!r} (fingerprint {res.dataset.get('fingerprint')}), not on "
                          f"these items ({data.name} {data.protocol}, fingerprint {data.fingerprint()}): "
                          + (f"{unknown} of its {len(ids)} item ids are not here" if unknown
                             else f"its per-item file has no {column} column"))
    right = np.full(data.n_items, -1, dtype=np.int8)  # -1: not in the result (an item it skipped)
    right[ids.map(position).to_numpy(dtype=np.int64)] = frame[column].to_numpy(dtype=bool)
    return right


def _accuracy(path: str, res: Any, right: Any, metric: str, hard: Any, subsets: Sequence[str],
              edges: Sequence[float]) -> ChoiceAccuracy:
    have = right >= 0
    ok = right[have].astype(bool)
    h, sub = hard[have], np.asarray(subsets, dtype=object)[have]
    per = {s: _buckets(h[sub == s], ok[sub == s], edges) for s in dict.fromkeys(subsets)}
    return ChoiceAccuracy(result=str(path), model=dict(res.model or {}), metric=metric, n_matched=int(have.sum()),
                          accuracy=float(100 * ok.mean()) if ok.size else math.nan, overall=_buckets(h, ok, edges),
                          subsets=per, mean_hardness_right=float(h[ok].mean()) if ok.any() else math.nan,
                          mean_hardness_wrong=float(h[~ok].mean()) if (~ok).any() else math.nan)


def choice_hardness(data: str | DataSpec, model: Any, *, pretrained: str | None = None, model_config: str | None = None,
                    trust_remote_code: bool = False, data_root: str | None = None, protocol: str | None = None,
                    dataset_options: dict[str, Any] | None = None, output_dir: str | Path | None = None,
                    settings: HardnessSettings | None = None, **options: Any) -> ChoiceHardnessReport:
    """Measure how close an option-choice set's negatives are to their positives for a text encoder, and join each
    of ``settings.results`` (choice results of the same items) to it: accuracy by hardness bucket per subset.

    ``data``: a registered option-choice benchmark (with ``data_root`` and ``protocol``) or synthdense with a
    compositional protocol, or a :class:`~hnbench.specs.DataSpec` of one. ``model``: as :func:`hnbench.hardness.hardness`
    (a model's text tower, ``minilm``, or a loaded encoder). ``settings`` / ``options``:
    :class:`~hnbench.settings.HardnessSettings` (``edges``, ``threshold``, ``results``, ``device``, ...; the in-batch
    statistics are not computed here). Bad input (not an option-choice set, a result of another task or of other
    items, a result without its per-item file) raises one line before the model loads."""
    from hnbench.evaluation import encode
    from hnbench.hardness.run import _load_encoder
    from hnbench.models.family import check_trusted

    s = from_options(HardnessSettings, settings, options)
    s.validate(output_dir)
    edges = check_edges(s.edges)
    if isinstance(data, DataSpec):
        spec, rest = data.override(data_root=data_root, protocol=protocol), dict(dataset_options or {})
    else:
        spec, rest = DataSpec.of(data, dataset_options, data_root=data_root, protocol=protocol)
    task = choice_task(spec)
    if task is None:
        raise ConfigError(f"{spec.dataset} (protocol {spec.protocol or 'default'}) is not an option-choice set: "
                          "the compositional hardness report reads a compositional benchmark or synthdense's "
                          "compositional protocols")
    if isinstance(model, str) and model not in _text_encoders():
        check_trusted(model, pretrained, trust_remote_code)
    scored = [(str(p), *_choice_result(str(p))) for p in s.results]  # before the data and the model load
    t0 = time.perf_counter()
    timings: dict[str, float] = {}
    choices = task.load(spec, **rest)
    timings["load_data"] = time.perf_counter() - t0
    joined = [(p, res, _outcomes(p, res, frame, metric, choices), metric) for p, res, frame, metric in scored]
    statistics = {"edges": list(edges), "threshold": s.threshold, "context_length": s.context_length,
                  "results": list(s.results)}
    inputs = {"data": choices.fingerprint(), "kind": KIND, "statistics": statistics,
              "model": model if isinstance(model, str) else model.info.fingerprint, "pretrained": pretrained,
              "model_config": model_config}
    if output_dir is not None:
        check_output(Path(output_dir) / "hardness.json", "a hardness report", inputs, overwrite=s.overwrite)
    t = time.perf_counter()
    encoder = _load_encoder(model, pretrained, model_config, s.context_length, s.device, trust_remote_code)
    timings["load_model"] = time.perf_counter() - t
    txt = encode.encode_texts(encoder, choices.texts, batch_size=max(s.encode_batch_size, 64), progress=s.progress,
                              cache=bool(s.use_cache))
    timings["encode_texts"] = txt.seconds
    hard, sims, pairs = item_hardness(choices, txt.vectors)
    subset_field, subsets = subsets_of(choices)
    arr = np.asarray(subsets, dtype=object)
    report = ChoiceHardnessReport(
        dataset={"name": choices.name, "protocol": choices.protocol, "fingerprint": choices.fingerprint(),
                 "n_items": choices.n_items, "n_texts": choices.n_texts, "subset_field": subset_field,
                 "spec": spec.recorded()},
        encoder=encoder.info.to_dict(),
        settings={**statistics, "pairs": [[choices.text_roles[a], choices.text_roles[b]] for a, b in pairs],
                  "rule": choices.scoring.rule, "n_truncated_texts": txt.n_truncated},
        subsets=[SubsetHardness(sub, int((arr == sub).sum()), Distribution.from_values(hard[arr == sub]),
                                float((hard[arr == sub] >= s.threshold).mean()))
                 for sub in dict.fromkeys(subsets)])
    outcomes = {}
    for path, res, right, metric in joined:
        report.accuracy.append(_accuracy(path, res, right, metric, hard, subsets, edges))
        outcomes[path] = right
    report.timings = {k: round(v, 4) for k, v in timings.items()}
    if output_dir is not None:
        record_output(Path(output_dir) / "hardness.json", inputs)
        _write(report, Path(output_dir), choices, hard, sims, pairs, subsets, outcomes, n_show=s.n_show)
    report.timings["total"] = round(time.perf_counter() - t0, 4)
    if output_dir is not None:
        summary = Path(output_dir) / "hardness.json"
        atomic_write_bytes(summary, (json.dumps(report.to_dict(), indent=2, allow_nan=True) + "\n").encode())
        report.path = str(summary)
    return report


def _text_encoders() -> list[str]:
    from hnbench.registry import TEXT_ENCODERS

    return list(TEXT_ENCODERS.names())


def _write(report: ChoiceHardnessReport, out: Path, data: Any, hard: Any, sims: Any, pairs: Sequence[tuple[int, int]],
           subsets: Sequence[str], outcomes: dict[str, Any], *, n_show: int) -> None:
    """``items.parquet``, the plots and ``report.md`` (the JSON is written last by the caller)."""
    import pandas as pd

    from hnbench import plots

    out.mkdir(parents=True, exist_ok=True)
    roles = data.text_roles
    frame = pd.DataFrame({"item_id": data.item_ids, "subset": list(subsets), "hardness": hard,
                          **{f"sim_{roles[a]}__{roles[b]}": sims[:, p] for p, (a, b) in enumerate(pairs)},
                          **{f"text_{r}": [data.texts[i] for i in data.item_texts[:, k]] for k, r in enumerate(roles)},
                          **{f"right_{k}": pd.Series(v.astype(bool)).where(v >= 0).astype("boolean")  # NA: not scored
                             for k, v in enumerate(outcomes.values())}})
    buf = io.BytesIO()
    frame.to_parquet(buf, index=False)
    atomic_write_bytes(out / "items.parquet", buf.getvalue())
    files = {"items": "items.parquet", "report": "report.md", "summary": "hardness.json"}
    title = f"{data.name} {data.protocol or ''}".strip()
    files["hardness"] = "plots/" + plots.plot_histograms(
        out / "plots" / "hardness.png", [(sub.subset, sub.hardness.histogram, sub.hardness.mean) for sub in report.subsets],
        title=f"Negative–positive caption similarity — {title}", xlabel="cosine of an item's closest negative to its "
                                                                        "positive (text encoder)").name
    for k, acc in enumerate(report.accuracy):
        series = [("all", acc.overall)] + ([(s, b) for s, b in acc.subsets.items()] if len(acc.subsets) > 1 else [])
        files[f"accuracy_{k}"] = "plots/" + plots.plot_recall(
            out / "plots" / f"accuracy_{k}.png", series, value="accuracy", ylabel=f"{acc.metric} (%)",
            xlabel="similarity of the item's closest negative caption to its positive",
            title=f"{acc.metric} by hardness — {acc.model.get('arch')} ({acc.model.get('pretrained') or 'random init'})").name
    report.files = files
    atomic_write_bytes(out / "report.md", render(report, frame, n_show=n_show).encode())


def _f(v: float, nd: int = 3) -> str:
    return "—" if not isinstance(v, (int, float)) or math.isnan(v) else f"{v:.{nd}f}"


def render(report: ChoiceHardnessReport, items: Any, *, n_show: int = 10) -> str:
    """The Markdown report: the hardness of each subset's negatives, then per result the accuracy by bucket (a row
    per subset), and the nearest-twin items with what each result chose."""
    import pandas as pd
    from tabulate import tabulate

    d, e = report.dataset, report.encoder
    lines = [f"# Which negatives matter — {markdown_text(str(d['name']))} {markdown_text(str(d['protocol'] or ''))}", "",
             f"Text encoder: {markdown_text(str(e.get('arch')))} ({markdown_text(str(e.get('pretrained') or 'random init'))}). "
             f"{d['n_items']} items; an item's hardness is the cosine of its closest negative caption to its positive "
             f"(pairs: {', '.join(' vs '.join(p) for p in report.settings['pairs'])}); subsets: "
             + (f"the items' `{d['subset_field']}` field." if d["subset_field"] else "the protocol."), "",
             "## Hardness of the negatives", ""]
    rows = [[markdown_text(s.subset), s.n_items, _f(s.hardness.mean), _f(s.hardness.quantiles.get("p50", math.nan)),
             _f(s.hardness.min), _f(s.hardness.max), _f(100 * s.share_near_twins, 1)] for s in report.subsets]
    lines += [tabulate(rows, headers=["subset", "items", "mean", "median", "min", "max",
                                      f"% ≥ {report.settings['threshold']:g}"], tablefmt="github", disable_numparse=True),
              "", f"![hardness]({report.files.get('hardness', 'plots/hardness.png')})", ""]
    for k, acc in enumerate(report.accuracy):
        model = f"{acc.model.get('arch')} ({acc.model.get('pretrained') or 'random init'})"
        lines += [f"## {markdown_text(acc.metric)} by hardness — {markdown_text(model)}", "",
                  f"Result `{markdown_text(Path(acc.result).name)}`: {acc.n_matched} items matched, {acc.metric} "
                  f"{_f(acc.accuracy, 1)}% over them (micro); mean hardness of the items it chose right "
                  f"{_f(acc.mean_hardness_right)}, wrong {_f(acc.mean_hardness_wrong)}. Cells: {acc.metric} in % (items).",
                  ""]
        labels = [b.label for b in acc.overall]
        table = [[markdown_text(name), *[f"{_f(b.accuracy, 1)} ({b.n})" for b in buckets]]
                 for name, buckets in [*acc.subsets.items(), ("all", acc.overall)]]
        lines += [tabulate(table, headers=["subset", *labels], tablefmt="github", disable_numparse=True), ""]
        if f"accuracy_{k}" in report.files:
            lines += [f"![accuracy]({report.files[f'accuracy_{k}']})", ""]
    top = items.sort_values(["hardness", "item_id"], ascending=[False, True], kind="stable").head(n_show)
    if len(top):
        roles = [c.removeprefix("text_") for c in items.columns if c.startswith("text_")]
        lines += ["## The nearest twins", ""]
        table = [[markdown_text(str(r["item_id"])), _f(float(r["hardness"])),
                  *[markdown_text(str(r[f"text_{role}"])) for role in roles],
                  *["—" if pd.isna(r[f"right_{k}"]) else "right" if r[f"right_{k}"] else "wrong"
                    for k in range(len(report.accuracy))]]
                 for _, r in top.iterrows()]
        lines += [tabulate(table, headers=["item", "hardness", *roles,
                                           *[f"result {k + 1}" for k in range(len(report.accuracy))]],
                           tablefmt="github", disable_numparse=True), ""]
    return "\n".join(lines)
