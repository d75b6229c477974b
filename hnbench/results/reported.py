"""Published numbers as reference rows: the papers' figures, mapped onto hnbench's protocol names.

The packaged ``published-results.csv`` (``hnbench/assets/``) has one row per (source, method, backbone,
benchmark, direction). Its ``protocol`` column is either an hnbench protocol of the row's benchmark (a name
or alias: the protocol whose selection rule the code that produced the number uses) or, in the older rows,
a paper's protocol *family*; :data:`PROTOCOL_FAMILIES`, read from the benchmark specs (each protocol
declares its families), says which hnbench protocol each family means on each benchmark, so a reported row
only ever lands in a table of the matching protocol.

``direction`` names the task's metric group (:data:`hnbench.registry.TASKS`): ``t2i``/``i2t`` rows are
retrieval (columns ``R@1``, ``R@5``, ``R@10``), ``classification`` rows are zero-shot classification (columns
``top-1``, ``top-5``; :data:`ZERO_SHOT_SETS`: the benchmark is the labelled set's layout, the protocol the
prompt templates), ``choice`` rows option choice on a compositional benchmark (columns ``accuracy`` (the protocol's
headline: Winoground's group score), ``text``, ``image``, ``TOT``, ``micro``; the protocol is the one whose rule
produced the number: MTEB's published numbers sit under the ``mteb`` variants). A file without the classification
or choice columns (an older schema) still reads.

A file is checked before it is used (:func:`load_published`): its columns, each row's direction, and every
metric cell empty (not reported) or a number from 0 to 100; ``nan``, ``inf`` or text in a metric cell, or a
protocol no benchmark maps (:func:`reported_rows`), is one :class:`~hnbench.errors.DataError` line naming
each bad cell by ``file:line``, never a traceback later in a board.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from hnbench.data.benchmarks import BENCHMARKS
from hnbench.errors import DataError
from hnbench.io import Problems, read_rows
from hnbench.registry import BENCHMARK_SPECS, TASKS
from hnbench.validate import DEFAULT_KS

PUBLISHED_CSV = Path(__file__).resolve().parents[1] / "assets" / "published-results.csv"

#: the metric columns of the file: retrieval's, zero-shot's, option choice's (those beyond the retrieval ones may be
#: absent from older files: read as empty)
METRIC_COLUMNS = ("R@1", "R@5", "R@10", "top-1", "top-5", "accuracy", "text", "image", "TOT", "micro")
#: the columns every file has (the first schema's, but its metrics, which may be absent)
REQUIRED_COLUMNS = ("source", "protocol", "method", "backbone", "training", "benchmark", "direction")

#: zero-shot sets a reported classification row may name: the labelled set's layout
#: (:func:`hnbench.data.classes.class_layout`) → its protocols, the prompt templates (``--templates``)
ZERO_SHOT_SETS: dict[str, tuple[str, ...]] = {"imagenet-1k": ("openai", "simple"), "imagenet-v2": ("openai", "simple")}


def _protocol_families() -> dict[str, dict[str, str]]:
    """Protocol family → {benchmark: hnbench protocol}, read from the benchmark specs (each
    :class:`~hnbench.data.benchmarks.Protocol` declares its families): a family's protocol on a benchmark
    is the first the spec declares with it, the one that family's published numbers were measured on
    (DCI's ``full-sentences`` and Urban-1K's ``longclip`` are zero-shot-splits variants after it)."""
    out: dict[str, dict[str, str]] = {}
    for bench in BENCHMARK_SPECS.declared():
        for proto in BENCHMARKS[bench].protocols:
            for fam in proto.families:
                out.setdefault(fam, {}).setdefault(bench, proto.name)
    return dict(sorted(out.items()))


#: protocol family (of the published CSV, and ``train``) → {benchmark: hnbench protocol name}


class _Families(Mapping[str, dict[str, str]]):
    """:func:`_protocol_families`, read from the registered specs each time (a plugin's benchmark counts)."""

    def __getitem__(self, family: str) -> dict[str, str]:
        return _protocol_families()[family]

    def __iter__(self) -> Iterator[str]:
        return iter(_protocol_families())

    def __len__(self) -> int:
        return len(_protocol_families())


PROTOCOL_FAMILIES: Mapping[str, dict[str, str]] = _Families()

#: context length of a published backbone: "ViT-L/14 248tok" → 248; no "…tok" suffix → CLIP's 77
DEFAULT_CONTEXT_LENGTH = 77

KS = DEFAULT_KS


def mapped_families(benchmark: str, protocol: str | None) -> list[str]:
    """The published protocol families a (benchmark, protocol) pair belongs to (none if unmapped)."""
    return [fam for fam, table in PROTOCOL_FAMILIES.items() if table.get(benchmark) == protocol]


def families_of(benchmark: str, protocol: str | None) -> list[str]:
    """Protocol families a (benchmark, protocol) pair belongs to; an unmapped pair is its own family."""
    return mapped_families(benchmark, protocol) or [str(protocol)]


def context_length_of(backbone: str) -> int:
    """Text context length a published backbone name states ("… 248tok"), else 77."""
    m = re.search(r"(\d+)\s*tok", backbone)
    return int(m.group(1)) if m else DEFAULT_CONTEXT_LENGTH


def _metric_problem(cell: str) -> str | None:
    """What is wrong with a metric cell's text (None: empty, or a number from 0 to 100)."""
    if not cell.strip():
        return None
    try:
        value = float(cell)
    except ValueError:
        value = math.nan
    if math.isfinite(value) and 0 <= value <= 100:
        return None
    return f"{cell!r} is not a percentage from 0 to 100 (leave the cell empty where the source reports none)"


def check_published(path: str | Path) -> None:
    """Refuse a published-results file hnbench cannot rank from, in one :class:`~hnbench.errors.DataError`
    line naming every bad cell by ``file:line`` (:class:`hnbench.io.Problems`): a missing column, an unknown
    direction, a protocol its benchmark does not have (:func:`protocol_of`), a metric cell that is not empty or
    a number from 0 to 100 (``nan``, ``inf``, text)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such published-results file")
    if path.suffix != ".csv":
        raise DataError(f"{path}: a published-results file is a CSV file named *.csv")
    problems = Problems(str(path))
    rows, lines = read_rows(path, problems)
    problems.check()  # a malformed line: its own message, before the columns are looked at
    columns = set(rows[0]) if rows else set()
    missing = [c for c in REQUIRED_COLUMNS if c not in columns]
    if missing or not rows:
        raise DataError(f"{path}: not a published-results file (no rows)" if not missing else
                        f"{path}: not a published-results file: no {', '.join(missing)} column"
                        + "s" * (len(missing) > 1) + f" (a file has {', '.join(REQUIRED_COLUMNS)} and metric "
                        f"columns among {', '.join(METRIC_COLUMNS)})")
    groups = {g for name in TASKS.declared() for g in TASKS.get(name).groups}
    for row, line in zip(rows, lines):
        where = f"{path}:{line}"
        if row["direction"] not in groups:
            problems.add(where, f"direction {row['direction']!r} is not one of {', '.join(sorted(groups))}")
        try:
            protocol_of(row["benchmark"], row["protocol"])
        except KeyError:
            problems.add(where, f"protocol {row['protocol']!r} is not a protocol (nor a mapped protocol family) "
                                f"of benchmark {row['benchmark']!r}")
        for column in METRIC_COLUMNS:
            problem = _metric_problem(str(row.get(column) or ""))
            if problem:
                problems.add(where, f"{column} {problem}")
    problems.check()


def load_published(path: str | Path = PUBLISHED_CSV) -> pd.DataFrame:
    """The published CSV as read (one row per source, method, benchmark and direction), checked first
    (:func:`check_published`); the metric columns an older file lacks (:data:`METRIC_COLUMNS`) are empty, and
    so is its ``scorer`` column (a dual encoder's)."""
    check_published(path)
    raw = pd.read_csv(path, keep_default_na=False, na_values=[""], dtype={"scorer": str})
    for column in METRIC_COLUMNS:  # checked: numbers or blanks (a blank of spaces is not reported either)
        if column in raw:
            raw[column] = pd.to_numeric(raw[column], errors="coerce")
    missing: dict[str, Any] = {c: float("nan") for c in METRIC_COLUMNS if c not in raw}
    if "scorer" not in raw:  # a file before the scorer column: every row a dual encoder's
        missing["scorer"] = ""
    frame: pd.DataFrame = raw.assign(**missing) if missing else raw
    frame["scorer"] = frame["scorer"].fillna("").astype(str)
    return frame


def _scorer(cell: Any) -> str:
    """A row's ``scorer`` cell: empty for a dual encoder (``cosine``), else the query-conditioned scorer that
    produced the numbers (a name of :data:`hnbench.registry.SCORERS`): its rows are marked as pairwise."""
    return cell if isinstance(cell, str) and cell.strip() else "cosine"


def task_of(direction: str) -> str:
    """The task whose metric groups include ``direction`` (t2i/i2t: retrieval; classification: zeroshot)."""
    for name in TASKS.declared():
        if direction in TASKS.get(name).groups:
            return name
    raise KeyError(f"direction {direction!r} is no task's metric group")


def protocol_of(benchmark: str, protocol: str) -> str:
    """The hnbench protocol a row's ``protocol`` cell means: a protocol (or alias) of ``benchmark``, a zero-shot
    set's templates (:data:`ZERO_SHOT_SETS`), else a family mapped by :data:`PROTOCOL_FAMILIES` (``KeyError``
    if neither)."""
    if benchmark in ZERO_SHOT_SETS:
        if protocol not in ZERO_SHOT_SETS[benchmark]:
            raise KeyError(f"{benchmark}: protocol {protocol!r} is not one of {ZERO_SHOT_SETS[benchmark]}")
        return protocol
    if benchmark in BENCHMARK_SPECS:
        spec = BENCHMARKS[benchmark]
        for proto in spec.protocols:
            if protocol == proto.name or protocol in proto.aliases:
                return proto.name
    return PROTOCOL_FAMILIES[protocol][benchmark]


def reported_rows(path: str | Path = PUBLISHED_CSV) -> pd.DataFrame:
    """Reference rows in the leaderboard's row format: one per (source, method, backbone, benchmark).

    Each row's task is its direction's (:func:`task_of`); the direction's metrics become the task's
    columns (retrieval: ``t2i R@K`` / ``i2t R@K``; zero-shot: ``top-1``, ``top-5``); the protocol cell
    becomes the hnbench protocol name (:func:`protocol_of`; a file with a (benchmark, protocol) no spec maps
    is refused by :func:`check_published`).
    """
    raw = load_published(path)
    rows: dict[tuple[str, ...], dict[str, Any]] = {}
    for rec in raw.to_dict("records"):
        protocol, task = protocol_of(rec["benchmark"], rec["protocol"]), TASKS.get(task_of(rec["direction"]))
        key = (rec["source"], rec["method"], rec["backbone"], rec["benchmark"], protocol)
        row = rows.setdefault(key, {
            "kind": "reported", "model": rec["method"], "identity": f"reported:{rec['source']}:{rec['method']}:"
            f"{rec['backbone']}", "arch": rec["backbone"], "weights": rec["training"], "fingerprint": "",
            "benchmark": rec["benchmark"], "protocol": protocol, "family": rec["protocol"],
            "context_length": context_length_of(rec["backbone"]), "search": "exact", "data_fingerprint": "",
            "n_images": None, "hnbench_version": "", "created": "", "path": "", "source": rec["source"],
            "note": "", "task": task.name, "scorer": _scorer(rec.get("scorer"))})
        for column in task.columns:  # "t2i R@1" → the R@1 cell of a t2i row; "classification top-1" → top-1
            group, _, metric = column.partition(" ")
            if group == rec["direction"]:
                row[task.label(column)] = rec[metric]
        if isinstance(rec["note"], str) and rec["note"] and rec["note"] not in row["note"]:
            row["note"] = "; ".join(filter(None, [row["note"], rec["note"]]))
    table: pd.DataFrame = pd.DataFrame(list(rows.values()))  # (the stubs' overloads give Any for dict rows)
    return table


def place(reported: pd.DataFrame, measured: pd.DataFrame) -> pd.DataFrame:
    """The reported rows that join a table of ``measured`` rows, taking that table's keys: a measured row's task
    names the (benchmark, protocol) a published row carries to join its table (:meth:`hnbench.tasks.Task.reported_key`):
    a retrieval row's own (benchmark, protocol); a zero-shot row's set layout (``layout``: ImageNet-1k, ImageNet-V2)
    and prompt templates, whatever the set's folder is called. Rows that name no task are the first task's."""
    default = str(TASKS.default)
    tasks = measured["task"].fillna(default) if "task" in measured else pd.Series(default, index=measured.index)
    joins = []
    for task, (_, row) in zip(tasks, measured.iterrows()):
        key = TASKS.get(task).reported_key({str(k): v for k, v in row.items()})
        if key is not None:
            joins.append({"task": task, "_key_benchmark": key[0], "_key_protocol": key[1],
                          "_benchmark": row["benchmark"], "_protocol": row["protocol"], "data": row["data"]})
    ref: pd.DataFrame = reported.drop(columns="data", errors="ignore")
    ref = ref.assign(task=ref["task"].fillna(default) if "task" in ref else default)
    if not joins:
        empty: pd.DataFrame = ref.iloc[:0].assign(data=pd.Series(dtype=object))
        return empty
    placed: pd.DataFrame = ref.merge(pd.DataFrame(joins).drop_duplicates(), left_on=["task", "benchmark", "protocol"],
                       right_on=["task", "_key_benchmark", "_key_protocol"])
    placed = placed.assign(benchmark=placed["_benchmark"], protocol=placed["_protocol"])
    order = {name: n for n, name in enumerate(TASKS.declared())}  # the tasks' order: each task's rows together
    placed = placed.sort_values("task", key=lambda s: s.map(order), kind="stable")
    out: pd.DataFrame = placed.drop(columns=["_key_benchmark", "_key_protocol", "_benchmark", "_protocol"])
    out = out.reset_index(drop=True)
    return out
