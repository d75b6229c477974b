"""Leaderboards: stored result files in, one ranked table per benchmark, protocol and data set out.

Rules (also in ``leaderboards/README.md``):

- One table per (benchmark, protocol, data fingerprint, search mode): rows of different protocols, data
  or search modes are never ranked together nor supersede each other (:func:`_data_keys`: the content
  fingerprint; an older, name-bound one joins a newer result's ``legacy_fingerprint``). Two data sets of
  one name get two tables, titled with their image count and short fingerprint. A set that is not registered
  is known by its content alone: its results under several names are one table (titled ``a / b``, a note
  listing the names) and one Borda column; a registered benchmark's tables stay keyed by its name. Results
  without ``settings.search`` predate approximate search and count as exact.
- Each task (:data:`hnbench.registry.TASKS`: retrieval, zero-shot classification, …) has its own section
  with its own columns, ranked by its main score (:class:`hnbench.tasks.Task`): a classification accuracy
  is never ranked beside a recall. A board of retrieval results alone has no task headings (as before
  tasks existed); results written before tasks are retrieval results (:func:`hnbench.results.record.upgrade_record`).
- Context length is a column (and a ``context_lengths`` filter), not a table key. Beside the scores, "truncated" is
  the model's text budget: the share of the captions its own tokenizer and context cut (the result's ``tokens``
  block); blank for a row without one (reported numbers, files without the block) and absent from sections whose
  texts are not captions (zero-shot's class prompts).
- Rank: competition ranking ("1, 1, 3") on the sort metric rounded to the two decimals shown,
  descending; the default metric is mean R@1 = (t2i R@1 + i2t R@1) / 2. A row without it ranks last.
- Per metric column, the best value is bold and the second-best distinct value underlined (ties
  share the mark), when at least two rows have a value.
- Borda rank: within a protocol family (``hnbench.results.reported.PROTOCOL_FAMILIES``; an unmapped protocol
  is its own family) and search mode, a row earns one point per row ranked below it
  in each benchmark's table; models are ranked by the number of benchmarks they cover, then by their
  total points.
- Duplicates: the same model (arch, pretrained, fingerprint) scored twice at one context length on the
  same benchmark, protocol, data and search mode keeps the result with the newest ``created``; the
  others are named in a note under the table.
- A baseline that matches no row is refused (one line). Significance (with a baseline): a delta gets
  a * when the paired 95% bootstrap interval of the difference (:func:`hnbench.results.compare.paired_tests`: both results' per-query hits, queries
  resampled jointly, 1000 draws, seed 0) excludes zero. Rows without a per-query file, reported rows
  and mean R@1 are not tested and carry no mark; a note under the table names the untested rows.
- A pairwise-scored result (``hnbench eval --scorer NAME``: not a dual encoder) is its own row, marked
  ``‡ pairwise (NAME)`` in its model cell (a legend line says what it means) and in a CSV ``scorer`` column
  (``cosine`` for a dual encoder): it is never ranked in a dual-encoder column without saying so.
- Reported rows (the packaged published numbers) carry a † and a ``reported: SOURCE`` cell; beside
  measured results they join only tables of a (benchmark, protocol) that was measured.
- Unreadable, corrupt, newer- or unknown-schema files, files with malformed fields (``model.arch`` a
  number, ``dataset.name`` null), files with impossible values (an R@K that is not finite or outside
  0–100), and files whose R@K differ from those of the per-query file beside them are listed by name
  under "Skipped files" and left out; a NaN R@K is shown as "—" with a warning naming the file. Only
  regular files of bounded size are read (:func:`hnbench.io.read_untrusted`).
- Every text cell is escaped for its format (:func:`hnbench.io.markdown_text`, ``html.escape``, and
  :func:`hnbench.io.csv_cell` against spreadsheet formulas).
"""

from __future__ import annotations

import html
import logging
import os
import re
import shlex
import urllib.parse
from collections.abc import Callable, Sequence
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, TypeAlias, cast

import numpy as np
import pandas as pd
from tabulate import tabulate

from hnbench._version import __version__
from hnbench.errors import ConfigError, did_you_mean
from hnbench.io import (
    atomic_write_bytes,
    check_output,
    csv_frame,
    is_record,
    markdown_code,
    markdown_text,
    record_output,
)
from hnbench.metrics import CI_RULE
from hnbench.pages.board import page as board_page
from hnbench.registry import BENCHMARK_SPECS, DATASETS, TASKS
from hnbench.results.compare import model_label, tests_against
from hnbench.results.record import (
    EvalResult,
    ResultFormatError,
    metric_values,
    per_query_path,
    read_beside,
    read_result,
    share_text,
)
from hnbench.results.reported import KS, families_of, mapped_families, place, reported_rows
from hnbench.results.significance import PairedTest
from hnbench.tasks import Task

logger = logging.getLogger(__name__)



def _tasks() -> list[Task]:
    """Every registered task, in the registry's order (read when a board is made: a plugin's task counts)."""
    return [TASKS.get(n) for n in TASKS.declared()]


def _default_task() -> Task:
    """The task of files and published rows that name none (results written before tasks)."""
    return TASKS.get(str(TASKS.default))


def sort_keys() -> list[str]:
    """What ``--sort`` takes: every task's board columns (:meth:`hnbench.tasks.Task.board_columns`), then ``model``."""
    return [*dict.fromkeys(c for task in _tasks() for c in task.board_columns()), "model"]
FORMATS = ("markdown", "csv", "html")
def _search_mode(settings: dict[str, Any]) -> str:
    """A result's search mode (a table key): a ``--limit`` subset is its own, never ranked with full runs."""
    search = str(settings.get("search", "exact"))
    return search + (f", {settings['limit']}-image subset" if settings.get("limit") else "")


# one table per benchmark, protocol, data (content fingerprint, :func:`_data_keys`) and search mode
TABLE_KEY = ["benchmark", "protocol", "data", "search"]
# the registry's order: the benchmarks, then hnbench's own sets
def benchmark_order() -> list[str]:
    """The registry's order: the benchmarks, then hnbench's own sets (read when a board is made)."""
    return [*BENCHMARK_SPECS.declared(), *(n for n in DATASETS.declared() if n not in BENCHMARK_SPECS)]

TableKey: TypeAlias = "tuple[str, str, str, str]"  # the TABLE_KEY values of one table
Tests: TypeAlias = "dict[str, dict[tuple[str, int], PairedTest]]"  # paired tests by row identity, (direction, K)
Block: TypeAlias = "tuple[str, str | list[str] | pd.DataFrame]"  # (h1/h2/h3/p, text), (ul, items), (table, cells)
Link: TypeAlias = "Callable[[str], str]"  # a measured row's result path → the href of its "result" link
PageOf: TypeAlias = "Callable[[str, str], str]"  # (rendered body, escaped title) → the whole HTML document


def _scorer(r: EvalResult) -> str:
    """How a result scored its pairs: ``cosine`` (a dual encoder), or a pairwise scorer's name (with its re-rank
    depth)."""
    scorer = r.scorer if isinstance(r.scorer, dict) else {}
    name, top = str(scorer.get("name") or "cosine"), scorer.get("rerank_top")
    return name + (f", re-ranking the top {top}" if top and name != "cosine" else "")


def _mark(scorer: Any) -> str:
    """The model cell's mark of a pairwise-scored row (:data:`PAIRWISE_LEGEND`); none for the cosine."""
    return f" ‡ pairwise ({scorer})" if isinstance(scorer, str) and scorer != "cosine" else ""


PAIRWISE_LEGEND = ("‡ pairwise (SCORER): scored by a query-conditioned scorer (hnbench eval --scorer), not as a dual "
                   "encoder: the score of a pair is not a cosine of two independent embeddings")


def _row(r: EvalResult) -> dict[str, Any]:
    """One leaderboard row from a result record (tolerates fields older schema versions lack)."""
    m, d = r.model, r.dataset
    pretrained = m.get("pretrained")
    weights = str(pretrained) if pretrained else "random init"
    ctx = m.get("context_length") or (r.tokens or {}).get("context_length") or 0
    row = {"kind": "measured", "model": model_label(m),
           "identity": f"measured:{m['arch']}:{pretrained}:{m.get('fingerprint', '')}:{int(ctx)}", "arch": m["arch"],
           "weights": weights, "fingerprint": str(m.get("fingerprint") or "")[:8], "benchmark": d["name"],
           "protocol": d.get("protocol") or "default", "context_length": int(ctx),
           "search": _search_mode(r.settings or {}), "data_fingerprint": d.get("fingerprint") or "",
           "n_images": d.get("n_images"), "hnbench_version": r.hnbench_version, "created": r.created,
           "path": r.path, "source": "measured", "note": "", "task": r.task, "scorer": _scorer(r),
           "share_truncated": _share_truncated(r)}
    if row["scorer"] != "cosine":  # a pairwise-scored result is its own row beside the same weights' cosine one
        row["identity"] += f":{row['scorer']}"
    task = r.task_spec()
    row.update(task.row_fields(r))  # what places a published row beside it (hnbench.results.reported.place)
    for column in task.columns:  # the task's own columns, each with its interval
        group, _, metric = column.partition(" ")
        label = task.label(column)
        row[label] = task.value(r.metrics, column)
        lo, hi = ((r.ci95 or {}).get(group) or {}).get(metric) or (np.nan, np.nan)
        row[f"{label} lo"], row[f"{label} hi"] = float(lo), float(hi)
    return row


def _share_truncated(r: EvalResult) -> float:
    """The share of the result's captions its model's context cut (its text budget); NaN where the record has no
    ``tokens`` block (older files) or its task's texts are not captions (zero-shot's class prompts)."""
    share = (r.tokens or {}).get("share_truncated")
    return float(share) if isinstance(share, (int, float)) and r.task_spec().texts == "captions" else np.nan


def _budget(t: pd.DataFrame) -> pd.Series:
    """The rows' truncated share (NaN for rows without one: reported numbers, older files)."""
    shares: pd.Series = t["share_truncated"] if "share_truncated" in t else pd.Series(np.nan, index=t.index)
    return shares


def collect(paths: Sequence[str | Path]) -> tuple[pd.DataFrame, list[tuple[str, str]]]:
    """Rows of every result JSON under ``paths`` (files or directories, searched recursively).

    Returns the frame and ``(path, reason)`` for each file that could not be used.
    """
    files: list[Path] = []
    for p in map(Path, paths):
        if not p.exists():
            raise ConfigError(f"{p}: no such results file or directory")
        files += sorted(f for f in p.rglob("*.json") if not is_record(f)) if p.is_dir() else [p]
    rows: list[dict[str, Any]] = []
    skipped: list[tuple[str, str]] = []
    for f in files:
        try:
            result = read_result(f)
            if result.per_query and os.path.lexists(per_query_path(result)):
                # its R@K must be those of its per-query ranks (metrics_against); a choice result's numbers those of
                # its per-item scores
                read_beside(result)
            rows.append(_row(result))
            for name, _, ok in metric_values(result):
                if ok is None and name.split()[-1] in {f"R@{k}" for k in KS}:
                    logger.warning("%s: %s is NaN (missing; shown as —)", f, name)
        except ResultFormatError as e:
            skipped.append((str(f), str(e).removeprefix(f"{f}: ")))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            skipped.append((str(f), f"malformed result record ({type(e).__name__}: {e})"))
    for path, reason in skipped:
        logger.warning("skipping %s: %s", path, reason)
    frame: pd.DataFrame = pd.DataFrame(rows)
    return frame, skipped


def _with_task(frame: pd.DataFrame) -> pd.DataFrame:
    """Every row's ``task`` (rows that name none: the first task's, as files written before tasks are)."""
    default = str(TASKS.default)
    out: pd.DataFrame = frame.assign(task=frame["task"].fillna(default) if "task" in frame else default)
    return out


def _with_columns(frame: pd.DataFrame, tasks: Sequence[Task]) -> pd.DataFrame:
    """Rows straight from :func:`collect` / ``reported_rows``: each task's board columns and their intervals (NaN
    where a row lacks them) and its main score where it is a mean of several (retrieval's mean R@1)."""
    for task in tasks:
        labels = [task.label(c) for c in task.columns]
        intervals = [f"{c} {end}" for c in labels for end in ("lo", "hi")]
        frame = frame.reindex(columns=list(dict.fromkeys([*frame.columns, *labels, *intervals])))
        if len(task.main_of) > 1:
            parts = [frame[task.label(c)] for c in task.main_of]
            frame = frame.assign(**{task.main_score: sum(parts[1:], parts[0]) / len(parts)})
    return frame


def _data_keys(frame: pd.DataFrame) -> pd.DataFrame:
    """Add the ``data`` column the tables are keyed by (a measured row's content fingerprint, so results of two
    data sets never share a table) and ``names`` (the name each row's result gave its data).

    A set that is not registered (a manifest, an image folder, an HF dataset: :func:`benchmark_order` lacks its
    name) is known by its content, not its name: its results under several names (``captions``, the file
    stem, and ``--name realset``) are one table, under the label of all those names (:func:`_data_label`), and
    count once in the Borda rank. A registered benchmark keeps its name (its tables: benchmark, protocol, data)."""
    keyed: pd.DataFrame = frame.assign(data=frame["data_fingerprint"].fillna(""), names=frame["benchmark"])
    local = ~keyed["benchmark"].isin(benchmark_order()) & (keyed["data"] != "")
    if local.any():
        labels = keyed[local].groupby("data")["benchmark"].agg(_data_label)
        keyed.loc[local, "benchmark"] = keyed.loc[local, "data"].map(labels)
    return keyed


def _data_label(names: pd.Series) -> str:
    """The label of one unregistered data set's tables: the names its results gave it, sorted, ``a / b``."""
    return " / ".join(sorted(set(map(str, names))))


def _names_note(t: pd.DataFrame) -> list[str]:
    """The note under a table of one data set its results named differently (none for one name)."""
    names = sorted(set(map(str, t["names"].dropna()))) if "names" in t else []
    if len(names) < 2:
        return []
    fingerprint = next(iter(t.loc[t["kind"] == "measured", "data"]), "")
    return [f"one data set (content fingerprint {fingerprint}) that results name {', '.join(names)}: one table, "
            "ranked once; name it with --name when evaluating"]


def measured_rows(paths: Sequence[str | Path], link_base: Path) -> tuple[pd.DataFrame, list[tuple[str, str]],
                                                                       dict[TableKey, list[str]]]:
    """The rows of the result files under ``paths`` as a board ranks them: read (:func:`collect`), keyed by their
    data (:func:`_data_keys`) and de-duplicated (the newest ``created`` per model and table); the files left out
    (``(path, reason)``) and the notes naming superseded files (their paths relative to ``link_base``), per table."""
    frame, skipped = collect(paths)
    frame, notes = _dedupe(_data_keys(frame), link_base) if len(frame) else (frame, {})
    return frame, skipped, notes


def _dedupe(frame: pd.DataFrame, link_base: Path) -> tuple[pd.DataFrame, dict[TableKey, list[str]]]:
    """Keep the newest ``created`` per (model, table); notes naming the superseded files, per table."""
    frame = frame.assign(_t=pd.to_datetime(frame["created"], utc=True, errors="coerce", format="ISO8601"))
    frame = frame.sort_values(["_t", "path"], kind="stable", na_position="first")
    frame = _with_task(frame)
    dup = frame.duplicated(["identity", "task", *TABLE_KEY], keep="last")
    notes: dict[TableKey, list[str]] = {}
    for _, old in frame[dup].iterrows():
        key = cast(TableKey, tuple(old[TABLE_KEY]))
        new = frame[~dup & (frame["identity"] == old["identity"]) & (frame["task"] == old["task"])]
        new = new[(new[TABLE_KEY] == old[TABLE_KEY]).all(axis=1)].iloc[0]
        notes.setdefault(key, []).append(f"{old['model']}: {_rel(old['path'], link_base)} ({old['created']}) is "
                                         f"superseded by the newer {_rel(new['path'], link_base)} ({new['created']})")
    return frame[~dup].drop(columns="_t"), notes


def _rel(path: str, base: Path) -> str:
    return Path(os.path.relpath(Path(path).resolve(), base)).as_posix()


def disambiguate(frame: pd.DataFrame) -> pd.DataFrame:
    """Make labels unique per identity: append the fingerprint (measured) or backbone, then a measured
    row's context length (one model scored at two), then the source."""
    measured = (frame["kind"] == "measured").to_numpy()
    extras = (np.where(measured, frame["fingerprint"], frame["arch"]),
              np.where(measured, [f"{c} tokens" for c in frame["context_length"]], ""), frame["source"])
    for extra in map(np.asarray, extras):
        # an extra is added only where it tells rows of one label apart (not a fingerprint they share)
        clash = ((frame.groupby("model")["identity"].transform("nunique") > 1)
                 & (pd.Series(extra, index=frame.index).groupby(frame["model"]).transform("nunique") > 1)).to_numpy()
        if clash.any():
            frame.loc[clash, "model"] = [f"{m} [{e}]" for m, e in zip(frame.loc[clash, "model"], extra[clash])]
    return frame


def _normalise_sort(sort: str) -> str:
    want = re.sub(r"[^a-z0-9]", "", sort.lower())
    keys = sort_keys()
    for key in keys:
        if re.sub(r"[^a-z0-9]", "", key.lower()) == want:
            return key
    hint = did_you_mean(sort, keys, n=1)
    raise ConfigError(f"unknown sort key {sort!r}" + (f"; {hint}" if hint else "")
                      + f" (one of: {', '.join(keys)})")


def _rank(table: pd.DataFrame, sort: str, task: Task) -> pd.DataFrame:
    """Rank rows by the sort metric (the task's main score when sorting by model or by another task's
    metric; retrieval's: mean R@1) and order them."""
    metric = _sort_metric(sort, task)
    table = table.assign(rank=table[metric].round(2).rank(method="min", ascending=False))
    by = ["model"] if sort == "model" else ["rank", "model"]
    ranked: pd.DataFrame = table.sort_values(by, na_position="last", kind="stable").reset_index(drop=True)
    return ranked


def _sort_metric(sort: str, task: Task) -> str:
    """The column a task's tables rank by: ``sort`` if it is one of them, else the task's main score."""
    return sort if sort in task.board_columns() else task.main_column()


def _table_order(key: TableKey) -> tuple[int, str, str, bool, str, str]:
    bench, protocol, data, search = key
    order = benchmark_order()
    pos = order.index(bench) if bench in order else len(order)
    return (pos, bench, protocol, search != "exact", search, data)


def _shared_names(tables: dict[TableKey, pd.DataFrame]) -> set[TableKey]:
    """The tables that share a name (one their results gave the data), protocol and search mode with a table on
    other data (two data sets with one name): their titles and Borda columns add the data's short fingerprint."""
    seen: dict[tuple[str, str, str], set[str]] = {}
    names = {key: set(map(str, t["names"].dropna())) | {key[0]} if "names" in t else {key[0]}
             for key, t in tables.items()}
    for (_, protocol, data, search), given in names.items():
        for name in given:
            seen.setdefault((name, protocol, search), set()).add(data)
    return {k for k, given in names.items() if any(len(seen[(n, k[1], k[3])]) > 1 for n in given)}


class _Markup:
    """The few inline constructs the boards use, for GitHub Markdown or HTML."""

    def __init__(self, fmt: str):
        self.md = fmt == "markdown"

    def text(self, s: str) -> str:
        return markdown_text(s) if self.md else html.escape(s)

    def bold(self, s: str) -> str:
        return f"**{s}**" if self.md else f"<b>{s}</b>"

    def code(self, s: str) -> str:
        return markdown_code(s) if self.md else f"<code>{html.escape(s)}</code>"

    def link(self, text: str, href: str) -> str:
        href = urllib.parse.quote(href)
        return f"[{text}]({href})" if self.md else f'<a href="{href}">{html.escape(text)}</a>'


def _scorers(t: pd.DataFrame) -> list[Any]:
    """Each row's scorer (rows without the column, reported ones: None)."""
    return list(t["scorer"]) if "scorer" in t else [None] * len(t)


def _signed(x: float) -> str:
    return f"{x:+.2f}".replace("-", "\u2212")


def _cells(t: pd.DataFrame, mk: _Markup, base: pd.Series | None, ci: bool, link_base: Path,
           sig: Tests | None = None, task: Task | None = None, link: Link | None = None) -> pd.DataFrame:
    """Display cells of one ranked table of ``task`` (default: the first task, retrieval): marks, deltas,
    intervals, metadata, links."""
    task = task or _default_task()
    out = pd.DataFrame({"#": [str(int(r)) if r == r else "—" for r in t["rank"]],
                        "model": [mk.text(m + _mark(p)) + (" †" if k == "reported" else "")
                                  for m, k, p in zip(t["model"], t["kind"], _scorers(t))]})
    for col in task.board_columns():
        if task.sparse_columns and not t[col].notna().any():
            continue  # a metric none of the table's rows holds (the choice task writes its rule's metrics only)
        shown = t[col].round(2)
        distinct = sorted(shown.dropna().unique(), reverse=True) if shown.notna().sum() >= 2 else []
        cells = []
        for i, v in enumerate(t[col]):
            if v != v:
                cells.append("—")
                continue
            s = f"{v:.2f}"
            s = mk.bold(s) if distinct and shown[i] == distinct[0] else \
                f"<u>{s}</u>" if len(distinct) > 1 and shown[i] == distinct[1] else s
            if base is not None and base[col] == base[col] and t["identity"][i] != base["identity"]:
                s += f" ({_delta(v - base[col], _test_of(sig or {}, t['identity'][i], col), ci)})"
            if ci and f"{col} lo" in t and t[f"{col} lo"][i] == t[f"{col} lo"][i]:
                s += f" [{t[f'{col} lo'][i]:.2f}, {t[f'{col} hi'][i]:.2f}]"
            cells.append(s)
        out[col] = cells
    if task.texts == "captions":  # the text budget beside the scores: blank where not recorded
        out["truncated"] = [share_text(s) if s == s else "" for s in _budget(t)]
    out["context"] = [str(int(c)) if c == c and c else "?" for c in t["context_length"]]
    out["arch"] = [mk.text(a) for a in t["arch"]]
    out["weights"] = [mk.text(w) for w in t["weights"]]
    out["fingerprint"] = [mk.text(f) for f in t["fingerprint"]]
    out["hnbench"] = [mk.text(v) for v in t["hnbench_version"]]
    href = link or (lambda p: _rel(p, link_base))
    out["source"] = [mk.link("result", href(p))
                     if k == "measured" else mk.text(f"reported: {s}" + (f" ({n})" if n else ""))
                     for k, p, s, n in zip(t["kind"], t["path"], t["source"], t["note"])]
    cells_shown: pd.DataFrame = out.drop(columns=[c for c in ("fingerprint", "hnbench", "truncated")
                                                  if c in out and not any(out[c])])
    return cells_shown


def _test_key(col: str) -> tuple[str, int] | None:
    """``"t2i R@5"`` → ``("t2i", 5)``; None for mean R@1 (not a per-query hit rate)."""
    direction, _, k = col.partition(" R@")
    return (direction, int(k)) if direction in ("t2i", "i2t") else None


def _test_of(sig: Tests, identity: str, col: str) -> PairedTest | None:
    """The paired test of row ``identity`` in column ``col``; None when untested (or mean R@1)."""
    key = _test_key(col)
    return None if key is None else sig.get(identity, {}).get(key)


def _delta(d: float, test: PairedTest | None, ci: bool) -> str:
    """``+1.20``, ``+1.20*`` when the paired interval excludes zero, and with ``ci`` the interval itself."""
    if test is None:
        return _signed(d)
    return _signed(d) + "*" * test.excludes_zero + (f" [{_signed(test.ci95[0])}, {_signed(test.ci95[1])}]" if ci else "")


def _significance(t: pd.DataFrame, base: pd.Series) -> tuple[Tests, list[str]]:
    """Paired tests of every measured row against a measured baseline, by identity, and notes on untested rows."""
    others = t[t["identity"] != base["identity"]]
    if base["kind"] != "measured":
        return {}, ["the baseline is a reported row: no paired tests, no * marks"] if len(others) else []
    measured = others[others["kind"] == "measured"]
    tests, why = tests_against(base["path"], list(measured["path"]), KS)
    untested = [f"{m} ({why[p]})" for m, p in zip(measured["model"], measured["path"]) if p in why]
    untested += [f"{m} (reported numbers)" for m in others.loc[others["kind"] != "measured", "model"]]
    notes = [f"no paired test, so no * mark, for: {'; '.join(untested)}"] if untested else []
    return {i: tests[p] for i, p in zip(measured["identity"], measured["path"]) if p in tests}, notes


def _borda(tables: dict[TableKey, pd.DataFrame]) -> list[tuple[str, pd.DataFrame, list[str]]]:
    """Borda tables per (protocol family, search) spanning two benchmarks or more: ``(title, table,
    benchmark columns)``; a benchmark whose name two data sets share is one column per data set."""
    groups: dict[tuple[str, str], list[TableKey]] = {}
    for key in sorted(tables, key=_table_order):
        for fam in families_of(key[0], key[1]):
            groups.setdefault((fam, key[3]), []).append(key)
    shared = _shared_names(tables)
    out: list[tuple[str, pd.DataFrame, list[str]]] = []
    for (fam, search), keys in groups.items():
        if len({k[0] for k in keys}) < 2:
            continue
        columns = [f"{k[0]} ({k[2][:8]})" if k in shared else k[0] for k in keys]
        score: dict[str, dict[str, Any]] = {}
        for key, column in zip(keys, columns):
            t = tables[key]
            for _, r in t.iterrows():
                s = score.setdefault(r["identity"], {"model": r["model"], "kind": r["kind"], "points": 0,
                                                     "scorer": r.get("scorer")})
                s[column] = r["rank"]
                s["points"] += int(((t["rank"] > r["rank"]) | t["rank"].isna()).sum()) if r["rank"] == r["rank"] else 0
        b = pd.DataFrame(list(score.values()))
        covered = b[columns].notna().T.groupby([k[0] for k in keys]).any()  # benchmarks, not data revisions
        b["benchmarks"] = covered.sum(axis=0).astype(int)
        # coverage first: a model scored on fewer benchmarks never outranks one scored on more
        b["rank"] = (b["benchmarks"] * 10**6 + b["points"]).rank(method="min", ascending=False)
        title = fam + ("" if search == "exact" else f" · {search} search")
        out.append((title, b.sort_values(["rank", "model"]).reset_index(drop=True), columns))
    return out


def render(frame: pd.DataFrame, skipped: Sequence[tuple[str, str]] = (), *, baseline: str | None = None,
           sort: str = "mean R@1", fmt: str = "markdown", ci: bool = False, link_base: str | Path = ".",
           notes: dict[TableKey, list[str]] | None = None, command: str = "", title: str = "Leaderboard",
           link: Link | None = None, page: PageOf = board_page, intro: str = "") -> str:
    """Render leaderboard rows (from :func:`collect` / ``reported_rows``) as Markdown, CSV or HTML.

    ``link`` maps a measured row's result path to the href of its "result" link (default: the path relative to
    ``link_base``); ``page`` wraps an HTML board's body into its document (default: the standalone board of
    :mod:`hnbench.pages.board`; ``hnbench site`` adds its navigation); ``intro``: rendered HTML shown under an HTML
    board's header paragraph (a site's charts)."""
    if fmt not in FORMATS:
        raise ConfigError(f"unknown format {fmt!r} (one of: {', '.join(FORMATS)})")
    sort, notes, link_base = _normalise_sort(sort), notes or {}, Path(link_base).resolve()
    mk = _Markup(fmt)
    if len(frame):  # rows straight from collect() / reported_rows(): add what they may lack
        frame = _with_task(frame)
        frame = _with_columns(frame, [t for t in _tasks() if (frame["task"] == t.name).any()])
        frame = frame if "data" in frame else _data_keys(frame)
    tasks = [t for t in _tasks() if len(frame) and (frame["task"] == t.name).any()]
    # the first task's results alone: no task headings, as boards were before there were tasks
    sections = not (len(tasks) == 1 and tasks[0].pre_task_layout)
    blocks: list[Block] = [("h1", mk.text(title)), ("p", _header(frame, mk, command, sort, baseline, ci))]
    if intro and fmt == "html":
        blocks.append(("div", intro))
    flat: list[pd.DataFrame] = []
    for task in tasks:
        if sections:
            blocks += [("h2", mk.text(task.title))] + [("p", mk.text(task.note))] * bool(task.note)
        blocks += _task_blocks(frame[frame["task"] == task.name], task, mk, flat, level=2 + sections, baseline=baseline, sort=sort, fmt=fmt, ci=ci,
                               link_base=link_base, notes=notes, link=link)
    if fmt == "csv":
        return csv_frame(pd.concat(flat)).decode() if flat else ""
    if not tasks:
        blocks.append(("p", "No results to show."))
    if skipped:
        blocks += [("h2", "Skipped files"), ("ul", [f"{mk.code(p)}: {mk.text(r)}" for p, r in skipped])]
    return _emit(blocks, fmt, page)


def _task_blocks(frame: pd.DataFrame, task: Task, mk: _Markup, flat: list[pd.DataFrame], *, level: int,
                 baseline: str | None, sort: str, fmt: str, ci: bool, link_base: Path,
                 notes: dict[TableKey, list[str]], link: Link | None = None) -> list[Block]:
    """The tables of one task (and their Borda ranks), headings at ``level``; CSV rows go to ``flat``."""
    h = f"h{level}"
    blocks: list[Block] = []
    tables: dict[TableKey, pd.DataFrame] = {cast(TableKey, key): _rank(t, sort, task)
                                             for key, t in frame.groupby(TABLE_KEY, sort=False)}
    shared = _shared_names(tables)
    for key in sorted(tables, key=_table_order):
        t, (bench, protocol, data, search) = tables[key], key
        n_img: np.ndarray | list[Any] = t.loc[t["kind"] == "measured", "n_images"].dropna().unique() if "n_images" in t else []
        fams = ", ".join(mapped_families(bench, protocol))
        blocks.append((h, mk.text(f"{bench} · {protocol}" + (f" ({fams})" if fams else "")
                                  + (f" · {int(n_img[0])} images" if len(n_img) == 1 else "")
                                  + (f" · data {data[:8]}" if key in shared else "")
                                  + ("" if search == "exact" else f" · {search} search (not comparable "
                                                                  "with exact search)"))))
        base, table_notes = None, _names_note(t) + list(notes.get(key, []))
        sig: Tests = {}
        if baseline:
            hit = t[[m == baseline or fnmatchcase(m, baseline) for m in t["model"]]]
            if len(hit) == 1:
                base = hit.iloc[0]
                if task.per_query:  # paired tests resample per-query hits: the task's per-query files
                    sig, untested = _significance(t, base)
                    table_notes += untested
            elif len(hit) > 1:
                table_notes.append(f"baseline {baseline!r} matches {len(hit)} rows here; no deltas")
        blocks += [("table", _cells(t, mk, base, ci, link_base, sig, task, link))] + [("p", "Note: " + mk.text(n)) for n in table_notes]
        if fmt == "csv":
            flat.append(_flat(t, base, ci, link_base, sig, task))
    borda = _borda(tables)
    if borda:
        blocks.append((h, "Borda rank across benchmarks"))
    for heading, b, benches in borda:
        cells = pd.DataFrame({"#": b["rank"].astype(int).astype(str),
                              "model": [mk.text(m + _mark(p)) + (" †" if k == "reported" else "")
                                        for m, k, p in zip(b["model"], b["kind"], _scorers(b))],
                              **{f"{mk.text(x)} rank": [str(int(r)) if r == r else "—" for r in b[x]] for x in benches},
                              "points": b["points"].astype(str), "benchmarks": b["benchmarks"].astype(str)})
        blocks += [(f"h{level + 1}", mk.text(heading)), ("table", cells)]
    return blocks


def _header(frame: pd.DataFrame, mk: _Markup, command: str, sort: str, baseline: str | None, ci: bool) -> str:
    """The paragraph under the title: provenance (command, version, inputs) and how to read the tables."""
    kinds = set(frame["kind"]) if len(frame) else set()
    tasks = [t for t in _tasks() if len(frame) and (frame["task"] == t.name).any()]
    others = any(not t.pre_task_layout for t in tasks)
    n_files = int((frame["kind"] == "measured").sum()) if len(frame) else 0
    origin = " and ".join([f"{n_files} stored result files"] * ("measured" in kinds) + [
        "the published numbers packaged with hnbench (hnbench/assets/published-results.csv)"] * ("reported" in kinds))
    return ((f"Generated by {mk.code(command)} " if command else "Generated ")
            + f"(hnbench {__version__}) from {origin or 'no result files'}; do not edit by hand. "
            f"{mk.bold('Bold')}: best in the column; <u>underlined</u>: second best; † reported by the cited "
            "source, not measured by hnbench."
            + "".join(t.board_note(sort) for t in (tasks or [_default_task()]))
            + (f" Deltas in parentheses are against {mk.text(baseline)}, in the tables that have it. A * after a "
               "delta: its paired 95% bootstrap interval (both results' per-query hits, queries resampled jointly, "
               "1000 draws, seed 0) excludes zero; rows without a per-query file beside their result, reported "
               "rows and mean R@1 are not tested and carry no mark (a note names them)."
               + (" With --ci that paired interval follows the delta inside the parentheses." if ci else "")
               if baseline else "")
            + (f" Brackets: {CI_RULE}." if ci else "")
            + (" Each task has its own section, its tables ranked by the task's main score ("
               + "; ".join(f"{t.title}: {t.main_score}" for t in tasks) + ")." if len(tasks) > 1 or others else "")
            + (f" {mk.text(PAIRWISE_LEGEND)}." if len(frame) and any(_mark(p) for p in _scorers(frame)) else ""))


def _flat(t: pd.DataFrame, base: pd.Series | None, ci: bool, link_base: Path, sig: Tests,
          task: Task | None = None) -> pd.DataFrame:
    task = task or _default_task()
    metrics = task.board_columns()
    with_ci = [c for c in metrics if f"{c} lo" in t]  # not mean R@1
    cols = ["benchmark", "protocol", "context_length", "search", "rank", "model", "kind", *metrics]
    out: pd.DataFrame = t[cols].copy()
    if not task.pre_task_layout:  # the first task's rows keep the columns they had before there were tasks
        out.insert(0, "task", task.name)
    out["rank"] = out["rank"].astype("Int64")  # "1", not pandas' float rank "1.0" (empty where unranked)
    out[metrics] = out[metrics].round(2)
    if base is not None:
        for col in metrics:
            out[f"delta {col}"] = (t[col] - base[col]).round(2)
        for col in with_ci:  # the paired interval of each delta (empty where untested)
            tests = [_test_of(sig, i, col) for i in t["identity"]]
            out[f"delta {col} lo"] = [round(x.ci95[0], 2) if x else np.nan for x in tests]
            out[f"delta {col} hi"] = [round(x.ci95[1], 2) if x else np.nan for x in tests]
    if ci:
        for col in with_ci:
            out[f"{col} lo"], out[f"{col} hi"] = t[f"{col} lo"].round(2), t[f"{col} hi"].round(2)
    if task.texts == "captions":
        out["truncated %"] = (100 * _budget(t)).round(1)
    out = out.assign(data_fingerprint=t["data"], arch=t["arch"], weights=t["weights"], fingerprint=t["fingerprint"],
                     hnbench=t["hnbench_version"], note=t["note"])
    out["scorer"] = [p if isinstance(p, str) else "" for p in _scorers(t)]  # "cosine": a dual encoder
    out["source"] = [_rel(p, link_base) if k == "measured" else s
                     for k, p, s in zip(t["kind"], t["path"], t["source"])]
    return out


def _emit(blocks: list[Block], fmt: str, page: PageOf = board_page) -> str:
    parts = []
    for kind, body in blocks:
        if isinstance(body, pd.DataFrame):  # a "table" block
            # tabulate documents DataFrame input; its stubs' table type does not include it
            parts.append(tabulate(body, headers="keys", tablefmt="github", showindex=False,  # type: ignore[arg-type]
                                  disable_numparse=True)
                         if fmt == "markdown" else body.to_html(index=False, escape=False, border=0))
        elif isinstance(body, list):  # a "ul" block
            parts.append("\n".join(f"- {i}" for i in body) if fmt == "markdown"
                         else "<ul>" + "".join(f"<li>{i}</li>" for i in body) + "</ul>")
        elif fmt == "markdown":
            parts.append(("#" * int(kind[1]) + " " if kind[0] == "h" else "") + str(body))
        else:
            parts.append(f"<{kind}>{body}</{kind}>")
    if fmt == "markdown":
        return "\n\n".join(parts) + "\n"
    return page("\n".join(parts), str(blocks[0][1]))  # blocks[0]: the (escaped) h1


def _command(results_dirs: Sequence[str | Path], output: str | Path | None, baseline: str | None,
             benchmarks: Sequence[str] | None, protocols: Sequence[str] | None, model_glob: str | None, sort: str,
             fmt: str, ci: bool, reported: bool, title: str, context_lengths: Sequence[int] | None = None) -> str:
    """The ``hnbench leaderboard`` command line that reproduces a board (written into its header)."""
    parts = ["hnbench", "leaderboard", *map(str, results_dirs)]
    for flag, values in (("--benchmark", benchmarks), ("--protocol", protocols),
                         ("--context-length", [str(c) for c in context_lengths or ()])):
        for v in values or ():
            parts += [flag, v]
    for flag, value in (("--output", output), ("--baseline", baseline), ("--model", model_glob),
                        ("--title", None if title == "Leaderboard" else title)):
        if value:
            parts += [flag, str(value)]
    parts += [] if sort == "mean R@1" else ["--sort", sort]
    parts += [] if fmt == "markdown" else ["--format", fmt]
    return shlex.join(parts + ["--ci"] * ci + ["--reported"] * reported)


def leaderboard(results_dirs: Sequence[str | Path] = (), output: str | Path | None = None, *,
                baseline: str | None = None, benchmarks: Sequence[str] | str | None = None,
                protocols: Sequence[str] | str | None = None, model_glob: str | None = None,
                sort: str = "mean R@1", fmt: str = "markdown", ci: bool = False, reported: bool = False,
                title: str = "Leaderboard", overwrite: bool = False,
                context_lengths: Sequence[int] | int | None = None) -> str:
    """Render the leaderboard of the result files under ``results_dirs``; write it to ``output`` if given.

    ``reported`` merges the packaged published numbers (only for measured (benchmark, protocol) pairs
    when there are measured results; all of them otherwise). ``model_glob`` matches the model label,
    architecture or weights (case-insensitive); ``context_lengths`` keeps rows of these text context
    lengths; ``baseline`` names (or globs) the row deltas are taken against, per table (one that matches
    no row shown is refused). A board of other inputs already at ``output`` (or a file hnbench did not write)
    is not replaced unless ``overwrite`` (:func:`hnbench.io.check_output`).
    """
    benchmarks = [benchmarks] if isinstance(benchmarks, str) else benchmarks
    protocols = [protocols] if isinstance(protocols, str) else protocols
    context_lengths = [context_lengths] if isinstance(context_lengths, int) else context_lengths
    sort = _normalise_sort(sort)
    if not results_dirs and not reported:
        raise ConfigError("nothing to show: give result directories and/or reported=True (--reported)")
    link_base = Path(output).resolve().parent if output else Path.cwd()
    # the inputs record names the result folders as seen from the board (portable, as its links are)
    inputs = {"results": [os.path.relpath(Path(p).resolve(), link_base) for p in results_dirs], "baseline": baseline,
              "benchmarks": benchmarks, "protocols": protocols, "model": model_glob, "sort": sort, "format": fmt,
              "ci": ci, "reported": reported, "title": title,
              **({"context_lengths": list(context_lengths)} if context_lengths else {})}
    if output:
        check_output(output, "a leaderboard", inputs, overwrite=overwrite)
    frame, skipped, notes = measured_rows(results_dirs, link_base)
    if reported:
        ref = reported_rows().assign(data="")
        if len(frame):  # each measured table of a (benchmark, protocol) gets its reported rows
            ref = place(ref, frame)
        frame = pd.concat([frame, ref], ignore_index=True) if len(frame) else ref
    if len(frame):
        frame = disambiguate(frame.reset_index(drop=True))
        keep = pd.Series(True, index=frame.index)
        if benchmarks:  # a benchmark's name, or one of the names results gave an unregistered set
            keep &= frame["benchmark"].isin(benchmarks) | (frame["names"].isin(benchmarks) if "names" in frame else False)
        if protocols:
            keep &= frame["protocol"].isin(protocols)
        if model_glob:
            keep &= np.array([any(fnmatchcase(str(r[c]).lower(), model_glob.lower())
                                  for c in ("model", "arch", "weights")) for _, r in frame.iterrows()], dtype=bool)
        if context_lengths:
            keep &= frame["context_length"].isin(list(context_lengths))
        frame = frame[keep]
    if baseline and not any(m == baseline or fnmatchcase(m, baseline) for m in frame.get("model", ())):
        labels = sorted(set(frame["model"])) if len(frame) else []
        hint = did_you_mean(baseline, labels, n=1)
        raise ConfigError(f"--baseline {baseline!r} matches no model on this board" + (f"; {hint}" if hint else "")
                          + (f" (models: {', '.join(labels[:6])}{', …' if len(labels) > 6 else ''})" if labels else ""))
    text = render(frame, skipped, baseline=baseline, sort=sort, fmt=fmt, ci=ci, link_base=link_base, notes=notes,
                  command=_command(results_dirs, output, baseline, benchmarks, protocols, model_glob, sort, fmt,
                                   ci, reported, title, context_lengths), title=title)
    if output:
        record_output(output, inputs)
        atomic_write_bytes(output, text.encode())
    return text
