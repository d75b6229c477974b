"""The result record: one JSON file per (model, dataset, protocol), versioned and written atomically.

Schema (version 2)::

    schema_version, hnbench_version, created (ISO-8601 UTC)
    task      the task that wrote it (:data:`hnbench.registry.TASKS`: retrieval, ...); its metrics groups
    main_score {name, value}: the task's main score (retrieval: mean R@1 = (t2i R@1 + i2t R@1) / 2)
    model     {arch, pretrained, fingerprint, context_length, n_params, embed_dim, framework}
    dataset   {name, protocol, fingerprint, n_images, n_captions, source,
               skipped {reason: count}, meta {protocol family, caption rule, count check, split-list hashes, ...}}
              fingerprint: the content alone (the name is a label)
    metrics   retrieval: {t2i: {R@1, R@5, R@10, mean_rank, median_rank, MRR, n_queries, n_tied}, i2t: {...}}
              (R@K in %); another task: the groups its :class:`~hnbench.tasks.Task` declares
    ci95      {t2i: {R@K: [lo, hi]}, i2t: {...}}   95% interval over queries, in % (:func:`hnbench.metrics.recall_ci`)
    ci95_method  {t2i: {R@K: "bootstrap" | "clopper-pearson"}, i2t: {...}}  how each interval was made
              (zero-shot: {classification: {top-K: ...}}, the same rule; absent in files written before it
              was recorded: those are percentile bootstrap)
    tokens    {context_length, mean, median, p95, max, n_texts, n_truncated, share_truncated}  (the texts' lengths
              in the model's own tokens; n_texts: absent in files written before it was recorded)
    settings  {device, batch_size, precision, amp, backend, search (exact|approximate), ks, tie_rule,
               cache, encoding {world_size, cache key, encoded/cached counts}, identity (the names of the
               settings that change the numbers), ...}
    timings   {load_model, load_data, encode_images, encode_texts, search, metrics, total}  (seconds)
    throughput {device, compute, warm, cached, images_per_s, captions_per_s, images_encoded, captions_encoded,
              image_encode_s, text_encode_s, params {image, text, total}, gflops {image, text, image_size,
              context_length, unit, counted} (null: not counted), peak_share {image, text} (null: a CPU or a GPU
              the peak table lacks), peak_note, note}: how fast each tower encoded, and the model's size and FLOPs
              per item (:mod:`hnbench.evaluation.throughput`); absent in files written before it was recorded
    per_query file name of the per-query parquet written beside the JSON
    per_query_sha256  sha256 of that parquet's bytes (absent in files written before it was added)
    scorer    {name, description, rerank_top (null: every pair scored)}: how a pair was scored (``--scorer``,
              :mod:`hnbench.models.scorers`); files written before it was recorded read as the dual encoder's cosine

File name (:meth:`EvalResult.stem`): model, data and a short hash of the settings that change the
numbers (the ``identity`` options of :class:`~hnbench.settings.EvalSettings`, as the record names them), so two runs that differ in any of them never share a file; a name that would pass the
255-byte file-name limit has its long parts cut and told apart by a digest (names that fit are as they
always were). The JSON and its parquet are written as a pair (:func:`write_result_pair`): a reader sees the old pair or the new one, never a mix.

Readers accept every schema version up to :data:`SCHEMA_VERSION`; newer files are refused by name. An
older file is read through :func:`upgrade_record` (versions 0 and 1 predate tasks: they are retrieval
results, their main score is computed from their metrics), so it loads, ranks and compares as it did.
A result folder may come from someone else: only regular files of bounded size are read
(:func:`hnbench.io.read_untrusted`), ``per_query`` only inside the JSON's folder, each field must have
its schema type, and the R@K of a JSON must be those of its per-query ranks (:func:`metrics_against`).

The per-query parquet has its own version (:data:`PER_QUERY_SCHEMA_VERSION`, in the file's pandas
attrs ``hnbench_per_query_schema``), one row per query and direction::

    1  direction, query_index, query_id, rank, tied, gt_index, gt_id, gt_score,
       best_wrong_index, best_wrong_id, best_wrong_score
    2  + topk_index, topk_id, topk_score: the top :data:`PER_QUERY_TOP` gallery items (lists,
       descending score, ties by lower index; positives included)

:func:`read_per_query` reads both and records the version in ``frame.attrs["schema_version"]``.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import io
import json
import logging
import math
import os
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hnbench._version import __version__
from hnbench.errors import ConfigError, HnbenchError
from hnbench.io import (
    MAX_TABLE_BYTES,
    atomic_write_bytes,
    file_beside,
    read_json_untrusted,
    read_untrusted,
    write_temp,
)
from hnbench.registry import SCORERS, TASKS
from hnbench.settings import eval_identity_names
from hnbench.tasks import Task

logger = logging.getLogger(__name__)

__all__ = ["EvalResult", "ResultFormatError", "atomic_write_bytes", "check_target", "metric_values", "metrics_against",
           "per_query_path", "per_query_version", "read_beside", "read_per_item", "read_per_query", "read_result",
           "upgrade_record", "write_result",
           "write_result_pair", "share_text"]  # atomic_write_bytes: re-exported from hnbench.io, where it lives now

SCHEMA_VERSION = 2
# 0: before settings.search and ci95 were recorded; 1: before task and main_score (all retrieval)
KNOWN_SCHEMA_VERSIONS = tuple(range(SCHEMA_VERSION + 1))
PER_QUERY_SCHEMA_VERSION = 2
PER_QUERY_TOP = 10  # gallery items stored per query (what `hnbench browse` shows)
PER_QUERY_KEY = "hnbench_per_query_schema"  # pandas attrs key holding the version


def share_text(share: float) -> str:
    """A share of texts as shown beside the scores: ``0%``, ``8.2%`` (under 10%), ``38%``."""
    percent = 100 * share
    if 0 < percent < 0.05:
        return "<0.1%"
    return f"{percent:.0f}%" if percent == 0 or percent >= 9.95 else f"{percent:.1f}%"


class ResultFormatError(HnbenchError):
    """A result file is corrupt, incomplete, or of a schema this version cannot read."""


@dataclass
class EvalResult:
    """Scores of one model on one dataset/protocol, with everything needed to reproduce them."""

    model: dict[str, Any]
    dataset: dict[str, Any]
    metrics: dict[str, dict[str, Any]]
    ci95: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    ci95_method: dict[str, dict[str, str]] = field(default_factory=dict)
    tokens: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    throughput: dict[str, Any] = field(default_factory=dict)  # rates, params, FLOPs (hnbench.evaluation.throughput)
    per_query: str | None = None
    per_query_sha256: str | None = None
    task: str = field(default_factory=lambda: str(TASKS.default))  # the first task: files older than tasks
    main_score: dict[str, Any] = field(default_factory=dict)  # filled from the metrics when left empty
    scorer: dict[str, Any] = field(default_factory=lambda: dual_encoder_scorer())  # how pairs were scored
    schema_version: int = SCHEMA_VERSION
    hnbench_version: str = __version__
    created: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    path: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not self.main_score and self.task in TASKS:
            self.main_score = self.task_spec().main_record(self.metrics)

    def task_spec(self) -> Task:
        """The :class:`~hnbench.tasks.Task` that wrote this result."""
        return TASKS.get(self.task)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("path")
        order = ["schema_version", "hnbench_version", "created", "task", "main_score", "model", "dataset", "metrics",
                 "ci95", "ci95_method", "tokens", "settings", "timings", "throughput", "per_query", "per_query_sha256",
                 "scorer"]
        optional: dict[str, Any] = {"per_query_sha256": None, "ci95_method": {}, "throughput": {}}  # left out when empty: older files keep their bytes
        return {k: d[k] for k in order if k not in optional or d[k] != optional[k]}

    def table(self, fmt: str = "github") -> str:
        """The terminal table of this result, as its task lays it out (:meth:`hnbench.tasks.Task.table`)."""
        return self.task_spec().table(self, fmt)

    def text_budget(self) -> str | None:
        """One line on how many of the texts the model's context cut ("captions over the model's 77-token context:
        412 of 5,000 (8.2%) truncated"); None when the record has no ``tokens`` block."""
        t = self.tokens or {}
        if not all(k in t for k in ("context_length", "n_truncated", "share_truncated")):
            return None
        n = t.get("n_texts")
        of = f" of {int(n):,}" if n is not None else ""
        return (f"{self.task_spec().texts} over the model's {int(t['context_length'])}-token context: "
                f"{int(t['n_truncated']):,}{of} ({share_text(float(t['share_truncated']))}) truncated")

    def result_settings(self) -> dict[str, Any]:
        """The settings that change the numbers: the recorded settings the record names under
        ``settings.identity`` (:meth:`hnbench.settings.EvalSettings.recorded`; files written before it was
        recorded: the ``identity`` fields of :class:`~hnbench.settings.EvalSettings`), a list setting as a
        sorted list, plus what the model and data contribute (the context length, the caption rule).

        A field the record lacks is left out, except those older files were written without: they are read
        with the defaults of their time (:data:`_OLD_FILE_DEFAULTS`), so every stored file keeps its name."""
        s, meta = self.settings or {}, self.dataset.get("meta") or {}
        recorded = s.get("identity")
        names: list[str] = recorded if isinstance(recorded, list) else eval_identity_names()
        out: dict[str, Any] = {"context_length": self.model.get("context_length")
                               or (self.tokens or {}).get("context_length"), "caption_rule": meta.get("caption_rule")}
        for name in names:
            if name in s:
                value = s[name]
                out[name] = sorted(value) if isinstance(value, list) else value
            elif name in _OLD_FILE_DEFAULTS:
                out[name] = _OLD_FILE_DEFAULTS[name](self)
        return out

    def settings_hash(self) -> str:
        """8 hex digits of sha256 over :meth:`result_settings`."""
        return hashlib.sha256(json.dumps(self.result_settings(), sort_keys=True).encode()).hexdigest()[:8]

    def identity(self) -> dict[str, Any]:
        """What makes two results "the same run": model weights, data content, protocol and result-changing
        settings (not the dataset's name: a label; the same data under two names is one data set)."""
        return {"arch": self.model.get("arch"), "model": self.model.get("fingerprint"),
                "protocol": self.dataset.get("protocol"), "data": self.dataset.get("fingerprint"),
                "settings": self.result_settings()}

    def stem(self) -> str:
        """File stem: ``<arch>-<weights>-<model fp8>__<dataset>-<protocol>[-<search>]__<data fp8>-<settings hash>``."""
        weights = self.model.get("pretrained") or "random"
        weights = Path(str(weights)).stem if os.sep in str(weights) or "." in str(weights) else str(weights)
        parts = [_slug(self.model.get("arch", "model")), _slug(weights), str(self.model.get("fingerprint", ""))[:8]]
        ds = [_slug(self.dataset.get("name", "data")), _slug(self.dataset.get("protocol") or "default")]
        if self.settings.get("search", "exact") != "exact":  # readable in the name; also part of the hash
            ds.append(_slug(str(self.settings["search"])))
        if self.task_spec().named_files:  # likewise (the first task keeps the names its files always had)
            ds.append(_slug(self.task))
        data = _slug(str(self.dataset.get("fingerprint") or "")[:8])
        stem = "-".join(p for p in parts if p) + "__" + "-".join(ds) + f"__{data}-{self.settings_hash()}"
        if len(stem) + _NAME_EXTRA <= NAME_MAX:  # every name that fits is kept as it always was
            return stem
        parts, ds = [_short(p) for p in parts], [_short(p) for p in ds]
        return "-".join(p for p in parts if p) + "__" + "-".join(ds) + f"__{data}-{self.settings_hash()}"


# The identity settings files written before they were recorded lack, read with the defaults of their time.
_OLD_FILE_DEFAULTS: dict[str, Callable[[EvalResult], Any]] = {
    "precision": lambda r: "fp32", "amp": lambda r: False, "search": lambda r: "exact",
    "ks": lambda r: sorted(int(k[2:]) for k in r.metrics.get("t2i", {}) if k.startswith("R@")),
    "ci": lambda r: any((r.ci95 or {}).values()),
}

NAME_MAX = 255  # bytes in a file name (ext4, XFS, APFS, NTFS)
# what the longest file named after a stem adds: the parquet's ".<sha12>.queries.parquet" and the
# temporary file's ".<name>.<8 random>.tmp" around it
_NAME_EXTRA = len(".0123456789ab.queries.parquet") + len("..01234567.tmp")
_PART_MAX = 32  # a shortened part: its first characters and 8 hex digits of its sha256


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9._]+", "-", s).strip("-") or "x"


def _short(part: str) -> str:
    """A name part cut to :data:`_PART_MAX` characters, told apart from other long parts by a digest."""
    if len(part) <= _PART_MAX:
        return part
    return part[:_PART_MAX - 9].rstrip("-.") + "-" + hashlib.sha256(part.encode()).hexdigest()[:8]


def check_target(result: EvalResult, output_dir: str | Path, overwrite: bool = False) -> bool:
    """Whether writing ``result`` replaces a file of the same run; raise if it would replace anything else.

    The same run is the same :meth:`EvalResult.identity` (model, data, result-changing settings);
    ``overwrite`` allows replacing an unreadable file or a different result that has the same name.
    """
    path = Path(output_dir) / f"{result.stem()}.json"
    if not path.exists():
        return False
    try:
        same = read_result(path).identity() == result.identity()
        reason = "a different model, data or settings"
    except (ResultFormatError, KeyError, TypeError, ValueError, AttributeError) as e:
        same, reason = False, f"unreadable: {str(e).removeprefix(f'{path}: ')}"
    if not same and not overwrite:
        raise ConfigError(f"{path} exists and holds another result ({reason}); pass --overwrite (overwrite=True) "
                          "to replace it, or choose another --output")
    return True


def write_result_pair(result: EvalResult, output_dir: str | Path, per_query: bytes | None = None, *,
                      overwrite: bool = False) -> Path:
    """Write the result JSON and its per-query parquet so that a reader sees the old pair or the new one.

    Both go to temporary files first; the parquet is named by its content (``<stem>.<sha12>.queries.parquet``)
    and renamed into place first, so it never replaces the parquet of the JSON still on disk; the JSON,
    which records the parquet's name and sha256, is renamed last. Then the parquets no JSON names any more
    are removed. A rerun of the same run replaces its own pair (logged); see :func:`check_target`.
    """
    out = Path(output_dir)
    json_path = out / f"{result.stem()}.json"
    replacing = check_target(result, out, overwrite)
    pq_path: Path | None = None
    pq_tmp: str | None = None
    js_tmp: str | None = None
    placed = False
    try:
        if per_query is not None:
            digest = hashlib.sha256(per_query).hexdigest()
            pq_path = out / f"{result.stem()}.{digest[:12]}.queries.parquet"
            result.per_query, result.per_query_sha256 = pq_path.name, digest
            pq_tmp = write_temp(pq_path, per_query)
        js_tmp = write_temp(json_path, (json.dumps(result.to_dict(), indent=2, allow_nan=True) + "\n").encode())
        if pq_path is not None and pq_tmp is not None:
            existed = pq_path.exists()  # the same bytes from an earlier run: the old JSON may name it
            os.replace(pq_tmp, pq_path)
            pq_tmp, placed = None, not existed
        os.replace(js_tmp, json_path)
        js_tmp, placed = None, False
    except BaseException:
        for tmp in (pq_tmp, js_tmp, pq_path if placed else None):  # the JSON on disk never names these
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
        raise
    for stale in out.glob(f"{result.stem()}.*.queries.parquet"):
        if stale.name != result.per_query:
            with contextlib.suppress(OSError):
                stale.unlink()
    if replacing:
        logger.info("replaced %s (a rerun of the same model, data and settings)", json_path)
    result.path = str(json_path)
    return json_path


def write_result(result: EvalResult, output_dir: str | Path, *, overwrite: bool = False) -> Path:
    """Write ``<stem>.json`` (no per-query file) into ``output_dir`` atomically and return its path."""
    return write_result_pair(result, output_dir, None, overwrite=overwrite)


def read_result(path: str | Path) -> EvalResult:
    """Read a result file of any schema version up to the current one (a regular file of bounded size,
    its fields of the types the schema gives; else one line naming the file and the field)."""
    path = Path(path)
    d = read_json_untrusted(path, "result file", error=ResultFormatError)
    if not isinstance(d, dict) or "schema_version" not in d:
        raise ResultFormatError(f"{path}: no schema_version; not an hnbench result file")
    version = d["schema_version"]
    if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
        raise ResultFormatError(f"{path}: schema version {version!r} is newer than this hnbench reads "
                                f"({SCHEMA_VERSION}); upgrade hnbench")
    if version not in KNOWN_SCHEMA_VERSIONS or isinstance(version, bool):
        raise ResultFormatError(f"{path}: unknown schema version {version!r} (known: "
                                f"{', '.join(map(str, KNOWN_SCHEMA_VERSIONS))})")
    for key in ("model", "dataset", "metrics"):
        if not isinstance(d.get(key), dict):
            raise ResultFormatError(f"{path}: missing or malformed {key!r}")
    d = upgrade_record(d)
    if not isinstance(d.get("task"), str) or d["task"] not in TASKS:
        raise ResultFormatError(f"{path}: unknown task {d.get('task')!r} (known: {', '.join(TASKS.names())})")
    if not isinstance(d.get("main_score"), dict):
        raise ResultFormatError(f"{path}: main_score is {_json_type(d.get('main_score'))}, not an object")
    task = TASKS.get(d["task"])
    bad_fields = [f"{name} is {_json_type(value)}, not {want}" for name, value, want in _field_types(d)]
    bad_fields += [f"metrics.{g} is {_json_type(d['metrics'].get(g))}, not an object" for g in task.groups
                   if not isinstance(d["metrics"].get(g), dict)]
    if bad_fields:
        raise ResultFormatError(f"{path}: malformed fields: {'; '.join(bad_fields[:4])}")
    bad_counts = [f"{name} = {json.dumps(value)[:40]}" for name, value in _counts(d) if not _is_count(value)]
    if bad_counts:
        raise ResultFormatError(f"{path}: impossible counts: {', '.join(bad_counts[:4])} (a count is a whole number "
                                f"from 0 to {MAX_COUNT:,}; the file was edited or is corrupt)")
    known = {k: d[k] for k in EvalResult.__dataclass_fields__ if k in d and k != "path"}
    result = EvalResult(**known, path=str(path))
    bad = [f"{name} = {value!r}" for name, value, ok in metric_values(result) if ok is False]
    if bad:
        rule = f" ({task.value_rule})" if task.value_rule else ""
        raise ResultFormatError(f"{path}: impossible values: {', '.join(bad[:4])}{rule}")
    return result


#: how ``--rerank-top K`` ranks (:func:`hnbench.search.pairwise.rerank`), recorded in a re-ranked result's scorer
RERANK_RULE = ("the dual encoder's top K of each query re-scored and re-ordered by the pairwise scorer; a positive "
               "outside them keeps its dual-encoder rank (> K, below the K re-ranked)")


def dual_encoder_scorer() -> dict[str, Any]:
    """The ``scorer`` record of a dual-encoder result (and of every file written before scorers were recorded)."""
    return {"name": "cosine", "description": SCORERS.help("cosine"), "rerank_top": None}


def scorer_record(scorer: Any, rerank_top: int | None) -> dict[str, Any]:
    """What a result records of its scorer (a :class:`hnbench.models.scorers.PairScorer`; None: the dual encoder): name,
    description, ``rerank_top`` (None: every pair scored)."""
    if scorer is None:
        return dual_encoder_scorer()
    return {"name": scorer.name, "description": scorer.description, "rerank_top": rerank_top,
            **({"rule": RERANK_RULE} if rerank_top is not None else {})}


def upgrade_record(d: dict[str, Any]) -> dict[str, Any]:
    """A result record of any known schema version as the current schema reads it (a copy; ``d`` is kept).

    Versions 0 and 1 predate tasks: every one is a result of the first task (:data:`hnbench.registry.TASKS`'s default,
    retrieval), and ``main_score`` is that task's main score of its metrics (mean R@1). Nothing else changes, so an old
    file keeps its name, its rank and its comparisons."""
    out = dict(d)
    out.setdefault("scorer", dual_encoder_scorer())  # written before pairwise scorers: the dual encoder's cosine
    if isinstance(out.get("schema_version"), int) and out["schema_version"] < 2:
        out["task"] = str(TASKS.default)
        out["main_score"] = TASKS.get(out["task"]).main_record(out.get("metrics") or {})
    return out


# The type of each field a reader relies on (``None``: may be null or absent); a file with another is refused.
_FIELD_TYPES: dict[str, tuple[tuple[type, ...], bool, str]] = {
    "model.arch": ((str,), False, "a text"), "model.pretrained": ((str,), True, "a text or null"),
    "model.fingerprint": ((str,), True, "a text or null"),
    "model.context_length": ((int,), True, "an integer or null"),
    "dataset.name": ((str,), False, "a text"), "dataset.protocol": ((str,), True, "a text or null"),
    "dataset.fingerprint": ((str,), True, "a text or null"),
"dataset.source": ((str,), True, "a text or null"),
    "dataset.n_images": ((int,), True, "an integer or null"), "dataset.skipped": ((dict,), True, "an object or null"),
    "dataset.meta": ((dict,), True, "an object or null"),
    "ci95": ((dict,), True, "an object"), "ci95_method": ((dict,), True, "an object"), "tokens": ((dict,), True, "an object"),
    "settings": ((dict,), True, "an object"), "timings": ((dict,), True, "an object"),
    "throughput": ((dict,), True, "an object"),
    "settings.search": ((str,), True, "a text"), "settings.ks": ((list,), True, "a list"),
    "settings.identity": ((list,), True, "a list"),
    "per_query": ((str,), True, "a file name or null"), "per_query_sha256": ((str,), True, "a text or null"),
    "hnbench_version": ((str,), True, "a text"), "created": ((str,), True, "a text"),
    "scorer": ((dict,), True, "an object"), "scorer.name": ((str,), True, "a text"),
}


# The most items a count in a result may hold: a trillion images or captions would be petabytes of embeddings,
# far beyond any set scored on one machine. Larger (10**30) is a corrupt or edited file, and a table would show it.
MAX_COUNT = 10**12


def _counts(d: dict[str, Any]) -> list[tuple[str, Any]]:
    """``(field, value)`` of every count a result records: the ``n_…`` fields of its dataset (``n_images``,
    ``n_captions``, ``n_classes``), token block and metric groups (``n_queries``, ``n_tied``), and the number of
    items skipped for each reason (``dataset.skipped``)."""
    out = [(f"{block}.{k}", v) for block in ("dataset", "tokens") if isinstance(d.get(block), dict)
           for k, v in d[block].items() if k.startswith("n_")]
    out += [(f"metrics.{g}.{k}", v) for g, m in d["metrics"].items() if isinstance(m, dict)
            for k, v in m.items() if k.startswith("n_")]
    skipped = d["dataset"].get("skipped")
    return out + [(f"dataset.skipped.{k}", v) for k, v in (skipped.items() if isinstance(skipped, dict) else ())]


def _is_count(value: Any) -> bool:
    """None (not recorded), or a whole number from 0 to :data:`MAX_COUNT`."""
    return value is None or (isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT)


def _field_types(d: dict[str, Any]) -> list[tuple[str, Any, str]]:
    """``(field, value, what it should be)`` for every field of :data:`_FIELD_TYPES` that ``d`` gets wrong."""
    out = []
    for name, (types, optional, want) in _FIELD_TYPES.items():
        head, _, tail = name.partition(".")
        parent = d if not tail else d.get(head)
        key = tail or head
        if not isinstance(parent, dict) or (key not in parent and optional):
            continue
        value = parent.get(key)
        if value is None and optional:
            continue
        if isinstance(value, bool) or not isinstance(value, types):
            out.append((name, value, want))
    return out


def _json_type(value: Any) -> str:
    kind = {bool: "a boolean", int: "a number", float: "a number", str: "a text", list: "a list", dict: "an object",
            type(None): "null"}.get(type(value), type(value).__name__)
    return kind if value is None or isinstance(value, (list, dict)) else f"{kind} ({json.dumps(value)[:40]})"


def metric_values(result: EvalResult) -> list[tuple[str, Any, bool | None]]:
    """``(name, value, ok)`` for every recall, MRR and rank of ``result``: ok is None for NaN (missing).

    The ranges are those the result's task declares (:attr:`hnbench.tasks.Task.bounds`); retrieval: R@K is
    a percentage (0–100), MRR in [0, 1], mean and median rank at least 1; inf is never valid.
    """
    out: list[tuple[str, Any, bool | None]] = []
    task = result.task_spec()
    for direction, m in result.metrics.items():
        if not isinstance(m, dict):
            out.append((direction, m, False))
            continue
        for key, value in m.items():
            bound = task.bound(key)
            if bound is None:
                continue
            lo, hi = bound
            if value is None or (isinstance(value, float) and math.isnan(value)):
                out.append((f"{direction} {key}", value, None))
            elif isinstance(value, bool) or not isinstance(value, (int, float)):
                out.append((f"{direction} {key}", value, False))
            else:
                out.append((f"{direction} {key}", value, math.isfinite(value) and lo <= value <= hi))
    return out


def per_query_path(result: EvalResult) -> Path:
    """Where a result's per-query parquet lies (beside its JSON); refused if it has none."""
    if not result.per_query or not result.path:
        raise ResultFormatError(f"{result.path or 'result'}: has no per-query file (evaluate with an output dir)")
    return file_beside(result.path, result.per_query, "per-query file", error=ResultFormatError)


def per_query_version(frame: Any, where: str | Path) -> int:
    """The per-query schema version of a frame read from a parquet (pandas attrs, else its columns);
    a newer one than this hnbench reads is refused by name."""
    version = frame.attrs.get(PER_QUERY_KEY) or (2 if "topk_index" in frame else 1)
    if not isinstance(version, int) or version > PER_QUERY_SCHEMA_VERSION:
        raise ResultFormatError(f"{where}: per-query schema version {version!r} is newer than this hnbench reads "
                                f"({PER_QUERY_SCHEMA_VERSION}); upgrade hnbench")
    missing = {"direction", "query_index", "query_id", "rank"} - set(frame.columns)
    if missing:
        raise ResultFormatError(f"{where}: per-query file lacks columns {sorted(missing)}")
    return version


def _read_parquet_beside(result: EvalResult, what: str) -> tuple[Any, Path]:
    """The parquet a result names as ``per_query`` (beside its JSON, bounded, checked against the sha256 the JSON
    records) as a DataFrame, and its path."""
    import pandas as pd  # only for the file beside a result: reading a result JSON does not load pandas

    path = per_query_path(result)
    data = read_untrusted(path, f"the {what} of {result.path}", limit=MAX_TABLE_BYTES, error=ResultFormatError)
    if result.per_query_sha256 and hashlib.sha256(data).hexdigest() != result.per_query_sha256:
        raise ResultFormatError(f"{result.path}: its {what} {path.name} does not match it (sha256 differs: "
                                "the two come from different runs); rerun the evaluation")
    try:
        frame = pd.read_parquet(io.BytesIO(data))
    except (OSError, ValueError) as e:
        raise ResultFormatError(f"{path}: not a readable {what} ({e})") from e
    return frame, path


def read_per_item(result: EvalResult) -> Any:
    """The per-item DataFrame of a result whose task stores one (:attr:`hnbench.tasks.Task.per_item`: the choice
    task's per-item scores), checked against the sha256 its JSON records and its numbers re-computed from it
    (:meth:`hnbench.tasks.Task.check_per_item`)."""
    task = result.task_spec()
    if not task.per_item:
        raise ResultFormatError(f"{result.path}: a {result.task} result has no per-item file")
    frame, path = _read_parquet_beside(result, "per-item file")
    wrong = task.check_per_item(result, frame)
    if wrong:
        raise ResultFormatError(f"{result.path}: its metrics do not match its per-item file {path.name} "
                                f"({'; '.join(wrong[:4])}): the JSON was edited, or the two come from different runs")
    return frame


def read_beside(result: EvalResult) -> Any:
    """The file beside a result, as its task stores it: per-item scores (:func:`read_per_item`) or per-query ranks
    (:func:`read_per_query`), each checked against the JSON."""
    return read_per_item(result) if result.task_spec().per_item else read_per_query(result)


def read_per_query(result: EvalResult) -> Any:
    """The per-query DataFrame of a result, any per-query schema version (``frame.attrs["schema_version"]``;
    version-1 files have no ``topk_*`` columns), checked against the sha256 its JSON records. A task whose file
    holds per-item scores instead (:func:`read_per_item`) is refused, one line."""
    if result.task_spec().per_item:
        raise ResultFormatError(f"{result.path}: a {result.task} result: its file beside it holds per-item scores "
                                "(hnbench.results.record.read_per_item), not retrieval's per-query ranks")
    frame, path = _read_parquet_beside(result, "per-query file")
    frame.attrs = {"schema_version": per_query_version(frame, path)}
    wrong = metrics_against(result, frame)
    if wrong:
        raise ResultFormatError(f"{result.path}: its metrics do not match its per-query file {path.name} "
                                f"({'; '.join(wrong[:4])}): the JSON was edited, or the two come from different runs")
    return frame


def metrics_against(result: EvalResult, frame: Any) -> list[str]:
    """Where the R@K and query counts a result JSON records differ from those its per-query ranks give
    (``"t2i R@1 = 99 in the JSON, 25 from the per-query file"``); empty when they agree."""
    import numpy as np

    out = []
    for direction, m in result.metrics.items():
        ranks = frame.loc[frame["direction"] == direction, "rank"].to_numpy()
        if not isinstance(m, dict) or not len(ranks):
            continue
        if m.get("n_queries") is not None and m["n_queries"] != len(ranks):
            out.append(f"{direction} n_queries = {m['n_queries']} in the JSON, {len(ranks)} in the per-query file")
        for key, value in m.items():
            if key.startswith("R@") and key[2:].isdigit() and isinstance(value, (int, float)) and value == value:
                actual = 100.0 * float(np.mean(ranks <= int(key[2:])))
                if abs(actual - value) > 1e-6 * max(1.0, abs(actual)):
                    out.append(f"{direction} {key} = {value:g} in the JSON, {actual:g} from the per-query file")
    return out
