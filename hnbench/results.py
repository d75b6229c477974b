"""The result record: one JSON file per (model, dataset, protocol), versioned and written atomically.

Schema (version 1)::

    schema_version, hnbench_version, created (ISO-8601 UTC)
    model     {arch, pretrained, fingerprint, context_length, n_params, embed_dim, framework}
    dataset   {name, protocol, fingerprint, n_images, n_captions, source, skipped {reason: count},
               meta {protocol family, caption rule, count check, split-list hashes, ...}}
    metrics   {t2i: {R@1, R@5, R@10, mean_rank, median_rank, MRR, n_queries, n_tied}, i2t: {...}}  (R@K in %)
    ci95      {t2i: {R@K: [lo, hi]}, i2t: {...}}   percentile bootstrap over queries, in %
    tokens    {context_length, mean, median, p95, max, n_truncated, share_truncated}
    settings  {device, batch_size, precision, amp, backend, search (exact|approximate), ks, tie_rule,
               cache, encoding {world_size, cache key, encoded/cached counts}, ...}
    timings   {load_model, load_data, encode_images, encode_texts, search, metrics, total}  (seconds)
    per_query file name of the per-query parquet written beside the JSON

Readers accept every schema version up to :data:`SCHEMA_VERSION`; newer files are refused by name.

The per-query parquet has its own version (:data:`PER_QUERY_SCHEMA_VERSION`, in the file's pandas
attrs ``hnbench_per_query_schema``), one row per query and direction::

    1  direction, query_index, query_id, rank, tied, gt_index, gt_id, gt_score,
       best_wrong_index, best_wrong_id, best_wrong_score
    2  + topk_index, topk_id, topk_score: the top :data:`PER_QUERY_TOP` gallery items (lists,
       descending score, ties by lower index; positives included)

:func:`read_per_query` reads both; a version-1 file gets empty top-k lists.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import re
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hnbench._version import __version__
from hnbench.errors import HnbenchError

SCHEMA_VERSION = 1
PER_QUERY_SCHEMA_VERSION = 2
PER_QUERY_TOP = 10  # gallery items stored per query (what `hnbench browse` shows)
_PER_QUERY_KEY = "hnbench_per_query_schema"
_TOPK_COLUMNS = ("topk_index", "topk_id", "topk_score")


class ResultFormatError(HnbenchError):
    """A result file is corrupt, incomplete, or of a schema this version cannot read."""


@dataclass
class EvalResult:
    """Scores of one model on one dataset/protocol, with everything needed to reproduce them."""

    model: dict[str, Any]
    dataset: dict[str, Any]
    metrics: dict[str, dict[str, Any]]
    ci95: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    tokens: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    per_query: str | None = None
    schema_version: int = SCHEMA_VERSION
    hnbench_version: str = __version__
    created: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    path: str | None = field(default=None, compare=False)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("path")
        order = ["schema_version", "hnbench_version", "created", "model", "dataset", "metrics", "ci95",
                 "tokens", "settings", "timings", "per_query"]
        return {k: d[k] for k in order}

    def table(self, fmt: str = "github") -> str:
        """A small t2i/i2t × R@K table (tabulate)."""
        from tabulate import tabulate

        ks = [k for k in self.metrics.get("t2i", {}) if k.startswith("R@")]
        rows = []
        for direction in ("t2i", "i2t"):
            m = self.metrics.get(direction, {})
            row = [direction] + [f"{m[k]:.2f}" for k in ks]
            row += [f"{m.get('MRR', float('nan')):.4f}", f"{m.get('median_rank', float('nan')):g}",
                    m.get("n_queries"), m.get("n_tied")]
            rows.append(row)
        return tabulate(rows, headers=["direction", *ks, "MRR", "median rank", "queries", "tied"], tablefmt=fmt)

    def stem(self) -> str:
        """File stem: ``<arch>-<weights>-<fingerprint8>__<dataset>-<protocol>``."""
        weights = self.model.get("pretrained") or "random"
        weights = Path(str(weights)).stem if os.sep in str(weights) or "." in str(weights) else str(weights)
        parts = [_slug(self.model.get("arch", "model")), _slug(weights), str(self.model.get("fingerprint", ""))[:8]]
        ds = [_slug(self.dataset.get("name", "data")), _slug(self.dataset.get("protocol") or "default")]
        if self.settings.get("search", "exact") != "exact":  # never overwrite an exact result
            ds.append(_slug(str(self.settings["search"])))
        return "-".join(p for p in parts if p) + "__" + "-".join(ds)


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9._]+", "-", s).strip("-") or "x"


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file and ``os.replace``: never a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_result(result: EvalResult, output_dir: str | Path) -> Path:
    """Write ``<stem>.json`` into ``output_dir`` atomically and return its path."""
    path = Path(output_dir) / f"{result.stem()}.json"
    atomic_write_bytes(path, (json.dumps(result.to_dict(), indent=2, allow_nan=True) + "\n").encode())
    result.path = str(path)
    return path


def read_result(path: str | Path) -> EvalResult:
    """Read a result file of any schema version up to the current one."""
    path = Path(path)
    try:
        d = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ResultFormatError(f"{path}: not a readable result file ({e})") from e
    if not isinstance(d, dict) or "schema_version" not in d:
        raise ResultFormatError(f"{path}: no schema_version; not an hnbench result file")
    version = d["schema_version"]
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise ResultFormatError(f"{path}: schema version {version!r} is newer than this hnbench reads "
                                f"({SCHEMA_VERSION}); upgrade hnbench")
    for key in ("model", "dataset", "metrics"):
        if not isinstance(d.get(key), dict):
            raise ResultFormatError(f"{path}: missing or malformed {key!r}")
    known = {k: d[k] for k in EvalResult.__dataclass_fields__ if k in d and k != "path"}
    return EvalResult(**known, path=str(path))


def per_query_path(result: EvalResult) -> Path:
    """Where a result's per-query parquet lies (beside its JSON); refused if it has none."""
    if not result.per_query or not result.path:
        raise ResultFormatError(f"{result.path or 'result'}: has no per-query file (evaluate with an output dir)")
    return Path(result.path).parent / result.per_query


def read_per_query(result: EvalResult | str | Path) -> Any:
    """The per-query DataFrame of a result (or of its JSON path), any per-query schema version.

    ``frame.attrs["schema_version"]`` holds the file's version; version-1 files get the top-k columns
    as empty lists, so callers can test ``len(row.topk_index)``.
    """
    import numpy as np
    import pandas as pd

    result = result if isinstance(result, EvalResult) else read_result(result)
    path = per_query_path(result)
    try:
        frame = pd.read_parquet(path)
    except (OSError, ValueError) as e:
        raise ResultFormatError(f"{path}: not a readable per-query file ({e})") from e
    version = frame.attrs.get(_PER_QUERY_KEY) or (2 if "topk_index" in frame else 1)
    if not isinstance(version, int) or version > PER_QUERY_SCHEMA_VERSION:
        raise ResultFormatError(f"{path}: per-query schema version {version!r} is newer than this hnbench reads "
                                f"({PER_QUERY_SCHEMA_VERSION}); upgrade hnbench")
    missing = {"direction", "query_index", "query_id", "rank"} - set(frame.columns)
    if missing:
        raise ResultFormatError(f"{path}: per-query file lacks columns {sorted(missing)}")
    empty = [np.zeros(0, np.int64), np.zeros(0, object), np.zeros(0, np.float32)]
    for col, e in zip(_TOPK_COLUMNS, empty):
        if col not in frame:
            frame[col] = [e] * len(frame)
    frame.attrs = {"schema_version": version}
    return frame
