"""Suites: a named set of (benchmark, protocol, task) entries run for every model, one aggregated table.

Each suite is declared once in :data:`hnbench.registry.SUITES` (``hnbench suite NAME``; the Python API is
:func:`run_suite`): a fixed list of entries (:func:`fixed`) or a protocol family of the benchmark specs
(:func:`family`: every protocol whose ``families`` name it, in registration order), or fixed entries followed by
every official protocol of the named option-choice benchmarks (:func:`official_choice`: ``compositional``, and
the long-caption + compositional table of Long Story Short). An entry's data comes
from the data-root map (a JSON or TOML file, benchmark → folder): a registered benchmark reads its folder as
``--data-root``; a class-folder set (``imagenet``, zero-shot) is its folder. Generated data (synthdense)
needs no folder. A suite file may also list the user's own data (``dataset``: a manifest, an image or class
folder, an HF dataset; :func:`read_suite_file`).

Every entry is checked before anything loads (the suite's benchmarks and protocols, the map naming every
benchmark the suite needs, each folder existing, each entry's data as ``eval`` checks its ``--dataset``:
:func:`hnbench.specs.check_data`; a (model, weights) pair given twice); then each (model, entry) is
scored by :func:`hnbench.evaluation.evaluate.evaluate` into ``--output`` (its result file named by model, data and
settings, so cached embeddings and the same names make a rerun cheap), a failure is reported and the rest go
on, and one table is printed and written (``suite-NAME.md``: a row per model, a column per entry and metric,
each cell linked to its result file). ``--limit N`` scores a seeded N-image subset of each entry: recorded in
its result (``settings.limit``), said in one line under the table's title, and kept apart from full runs.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hnbench.errors import ConfigError, HnbenchError, unknown_name
from hnbench.io import (
    atomic_write_bytes,
    check_output,
    loads_json,
    markdown_text,
    read_untrusted,
    record_output,
)
from hnbench.registry import BENCHMARK_SPECS, DATASETS, SUITES, TASKS
from hnbench.settings import (
    EvalSettings,
    check_declared,
    from_options,
    option,
    same_as,
    take_task_options,
    task_option_keys,
)
from hnbench.specs import DataSpec, check_data, data_keywords

__all__ = ["Entry", "Suite", "SuiteRun", "SuiteSettings", "family", "fixed", "official_choice", "run_suite"]

logger = logging.getLogger(__name__)

# Data sets a suite names that are folders, not registered benchmarks: the map's folder is the data itself.
FOLDER_SETS = {"imagenet": "ImageNet-1k val in class folders (or ImageNet-V2, any class-folder set)"}


@dataclass(frozen=True)
class Entry:
    """One scored set of a suite: a benchmark (or :data:`FOLDER_SETS` name) and its protocol, or the user's own
    ``dataset`` (a manifest, an image or class folder, an HF dataset folder or parquet: a path; or
    ``hf:ORG/NAME``) with its data ``options`` (:func:`user_data_keys`); and the task."""

    benchmark: str | None = None
    protocol: str | None = None
    task: str = field(default_factory=lambda: str(TASKS.default))
    dataset: str | None = None
    options: tuple[tuple[str, Any], ...] = ()

    @property
    def label(self) -> str:
        """How the table names it: ``benchmark/protocol``; a data set: its ``name`` option, else its file or
        folder name (an ``hf:`` id as given)."""
        if self.dataset is not None:
            name = dict(self.options).get("name")
            return name if isinstance(name, str) else (self.dataset if self.dataset.startswith("hf:")
                                                       else Path(self.dataset).name)
        return f"{self.benchmark}" + (f"/{self.protocol}" if self.protocol else "")

    def needs_folder(self) -> bool:
        """Whether the data-root map must name this entry's benchmark (all but generated and the user's data)."""
        return self.benchmark in FOLDER_SETS or self.benchmark in BENCHMARK_SPECS

    def problems(self) -> list[str]:
        """What is wrong with this entry: an unknown benchmark, protocol or task ("did you mean"), a data set that
        is not there; none: []."""
        out = []
        if self.dataset is not None:
            if not self.dataset.startswith("hf:") and not Path(self.dataset).exists():
                out.append(f"suite entry {self.label}: dataset not found: {self.dataset}")
        elif self.benchmark not in DATASETS and self.benchmark not in FOLDER_SETS:
            known = [*DATASETS.names(), *FOLDER_SETS]
            out.append(f"suite entry {self.label}: {unknown_name('benchmark', str(self.benchmark), known)}")
        elif self.benchmark in BENCHMARK_SPECS:
            try:
                BENCHMARK_SPECS.get(str(self.benchmark)).protocol(self.protocol)
            except ConfigError as e:
                out.append(f"suite entry {self.label}: {e}")
        if self.task not in TASKS:
            out.append(f"suite entry {self.label}: {TASKS.error(self.task)}")
        return out


@dataclass(frozen=True)
class Suite:
    name: str
    entries: tuple[Entry, ...]


def fixed(entries: Sequence[tuple[str, str | None, str]], *, name: str) -> Suite:
    """A suite of the given ``(benchmark, protocol, task)`` entries."""
    return Suite(name, tuple(Entry(*e) for e in entries))


def family(family: str, *, name: str) -> Suite:
    """The retrieval entries of every benchmark protocol whose ``families`` include ``family``."""
    entries = tuple(Entry(b, p.name) for b in BENCHMARK_SPECS.declared()
                    for p in BENCHMARK_SPECS.get(b).protocols if family in p.families)
    return Suite(name, entries)


def official_choice(benchmarks: Sequence[str], *, name: str,
                    entries: Sequence[tuple[str, str | None, str]] = ()) -> Suite:
    """The given ``(benchmark, protocol, task)`` entries, then every official protocol of each option-choice
    benchmark in ``benchmarks`` (its spec's task, in the spec's order; a protocol declared ``official=False``, a
    variant kept to compare with MTEB's numbers, is left out). Read from the specs each time, so a protocol
    added to a benchmark joins its suites."""
    out = [Entry(*e) for e in entries]
    for bench in benchmarks:
        spec = BENCHMARK_SPECS.get(bench)
        out += [Entry(bench, p.name, str(spec.task)) for p in spec.protocols if getattr(p, "official", True)]
    return Suite(name, tuple(out))


SUITE_FILE_SUFFIXES = (".toml", ".json")
ENTRY_KEYS = ("benchmark", "protocol", "task")  # a benchmark entry's keys in a suite file
USER_KINDS = ("manifest", "imagefolder", "hf")  # what a suite file's ``dataset`` entry names (specs.DATA_KINDS)


def user_data_keys() -> list[str]:
    """The data options a suite file's ``dataset`` entry may give, from the fields that declare them: the
    :class:`~hnbench.specs.DataSpec` fields the user's kinds of data read (``name``, ``split``, the columns,
    ``allow_outside_paths``) and every task's own (``class_names``, ``label_column``); not the suite's settings
    (``skip_invalid`` is ``--skip-invalid``, for every entry)."""
    settings, spec = {f.name for f in dataclasses.fields(EvalSettings)}, {f.name for f in dataclasses.fields(DataSpec)}
    return [k for k in data_keywords() if k not in settings and (k not in spec or set(DataSpec.reads(k)) & set(USER_KINDS))]


def _path_keys() -> set[str]:
    """The data options that name a file (declared with metavar FILE or PATH): relative to the suite file."""
    classes: list[type] = [DataSpec, *(o for o in (TASKS.get(t).options for t in TASKS.names()) if o is not None)]
    return {f.name for c in classes for f in dataclasses.fields(c)
            if f.metadata.get("argparse", {}).get("metavar") in ("FILE", "PATH")}


def _dataset_entry(raw: dict[str, Any], n: int, base: Path) -> Entry | str:
    """A suite file's ``dataset`` entry (a path relative to the file, or ``hf:ORG/NAME``), or what is wrong with it."""
    keys, settings = user_data_keys(), {f.name for f in dataclasses.fields(EvalSettings)}
    unknown = sorted(set(raw) - {"dataset", "task", *keys})
    value = raw["dataset"]
    if not isinstance(value, str) or not value or not isinstance(raw.get("task", ""), str) or unknown:
        said = [f"{k!r}" + (" is a setting of the whole suite, given as its flag" if k in settings else "")
                for k in unknown]
        return (f"entry {n}: expected a 'dataset' path (a manifest, an image or class folder, an HF dataset folder or "
                f"parquet, relative to the suite file) or hf:ORG/NAME, an optional 'task' string and the data options "
                f"{', '.join(keys)}" + (f" (unknown key {', '.join(said)})" if unknown else ""))
    if (value.lower() in DATASETS or value.lower() in FOLDER_SETS) and not (base / value).exists():
        return f"entry {n}: {value!r} is a registered benchmark: write benchmark = {value.lower()!r}"
    paths = _path_keys()
    options = tuple((k, str(base / v) if k in paths and isinstance(v, str) else v)
                    for k, v in raw.items() if k not in ("dataset", "task"))
    return Entry(task=raw.get("task", str(TASKS.default)), dataset=value if value.startswith("hf:") else str(base / value),
                 options=options)


def is_suite_file(name: str | os.PathLike[str]) -> bool:
    """Whether ``hnbench suite NAME`` names a suite file (``.toml``/``.json``) rather than a registered suite."""
    return str(name).lower().endswith(SUITE_FILE_SUFFIXES)


def read_suite_file(path: str | os.PathLike[str]) -> Suite:
    """A user-defined suite: a TOML or JSON file of ``entries`` and an optional ``name`` (default: the file's
    stem; it names ``suite-NAME.md``). An entry is a ``benchmark`` with optional ``protocol`` and ``task``, as a
    registered suite's, or the user's own ``dataset`` (a path relative to the file, or ``hf:ORG/NAME``) with an
    optional ``task`` and its data options (:func:`user_data_keys`: ``name``, ``split``, ``image_column``, ...).
    Every problem (a malformed entry, an unknown benchmark, protocol or task, a data set not found, two entries
    of one label) is named in one line, before anything loads."""
    data = _read_object(Path(path), "suite file")
    stem = Path(path).stem
    name = data.get("name", stem) if isinstance(data, dict) else stem
    entries = data.get("entries") if isinstance(data, dict) else data
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise ConfigError(f"suite file {path}: 'name' must be a plain name (letters, digits, . _ -), got {name!r}")
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"suite file {path}: expected a non-empty 'entries' list of {{benchmark, protocol, task}} "
                          "objects ([[entries]] tables in TOML)")
    out, problems, first = [], [], dict[str, int]()
    for n, raw in enumerate(entries, start=1):
        if isinstance(raw, dict) and "dataset" in raw and "benchmark" not in raw:  # the user's own data
            entry_or_problem = _dataset_entry(raw, n, Path(path).parent)
            if isinstance(entry_or_problem, str):
                problems.append(entry_or_problem)
                continue
            out.append(entry_or_problem)
            problems += entry_or_problem.problems()
            continue
        unknown = sorted(set(raw) - set(ENTRY_KEYS)) if isinstance(raw, dict) else []
        if (not isinstance(raw, dict) or not isinstance(raw.get("benchmark"), str) or unknown
                or not all(isinstance(raw.get(k), str) for k in ("protocol", "task") if k in raw)):
            problems.append(f"entry {n}: expected an object with a 'benchmark' string and optional 'protocol' and "
                            f"'task' strings, or a 'dataset' (your own data) and its options"
                            + (f" (unknown key {', '.join(map(repr, unknown))})" if unknown else ""))
            continue
        entry = Entry(raw["benchmark"].lower(), raw.get("protocol"), raw.get("task", str(TASKS.default)))
        problems += entry.problems()
        out.append(entry)
    for n, entry in enumerate(out, start=1):  # a label is a column of the table: two entries would share it
        if entry.label in first:
            problems.append(f"entries {first[entry.label]} and {n} are both {entry.label}: list each once"
                            + (" (a 'name' tells two data sets apart)" if entry.dataset is not None else ""))
        first.setdefault(entry.label, n)
    _raise_all(f"suite file {path}", problems)
    return Suite(name.lower(), tuple(out))


def get_suite(name: str) -> Suite:
    """The suite ``name`` names: a suite file (:func:`read_suite_file`) or a registered suite."""
    if is_suite_file(name):
        return read_suite_file(name)
    if name.lower() not in SUITES:
        raise SUITES.error(name)
    suite: Suite = SUITES.get(name)(name=name.lower())
    return suite


def describe_suites() -> str:
    """``hnbench suite --list``: every registered suite, what it is (a family suite: the paper whose table it
    reproduces), and its entries (``benchmark/protocol``, a task other than the first in parentheses)."""
    lines = []
    for name in SUITES.declared():
        entries = get_suite(name).entries
        lines += [f"{name}: {SUITES.help(name)}",
                  "    " + ", ".join(e.label + ("" if TASKS.get(e.task).pre_task_layout else f" ({e.task})") for e in entries)]
    return "\n".join(lines) + "\n"


def _raise_all(what: str, problems: Sequence[str]) -> None:
    """Every problem of one input in one line."""
    if len(problems) == 1:
        raise ConfigError(f"{what}: {problems[0]}")
    if problems:
        raise ConfigError(f"{what}: {len(problems)} problems: {'; '.join(problems)}")


@dataclass
class SuiteSettings:
    """What a suite run reads besides the models and the evaluation settings (its flags generated from these)."""

    data_root_map: str | None = option(None, group="suite", metavar="FILE",
                                       help="JSON or TOML file: benchmark → folder (a registered benchmark's "
                                            "--data-root; imagenet: its class-folder set); every benchmark the "
                                            "suite needs but generated ones")
    output: str | None = option(None, group="suite", help="directory for the result files and suite-NAME.md")
    allow_count_mismatch: bool = same_as(DataSpec, "allow_count_mismatch", group="suite")  # each benchmark entry's


@dataclass
class SuiteRun:
    """What :func:`run_suite` did: the table (Markdown), its path, each cell's result path or failure."""

    suite: str
    table: str
    path: Path
    results: dict[tuple[str, str], str] = field(default_factory=dict)  # (model label, entry label) → result path
    failures: dict[tuple[str, str], str] = field(default_factory=dict)  # (model label, entry label) → message

    @property
    def ok(self) -> bool:
        return not self.failures


def _read_object(path: Path, what: str, label: str | None = None) -> Any:
    """A TOML (``.toml``) or JSON file's content, as untrusted input: not there, too big or invalid is one line
    naming ``what`` (``label``: how a parse error names it; default ``what``)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib
    text = read_untrusted(path, what, error=ConfigError).decode("utf-8", errors="replace")
    try:
        return tomllib.loads(text) if str(path).endswith(".toml") else loads_json(text)
    except (ValueError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"{label or what} {path}: not valid {'TOML' if str(path).endswith('.toml') else 'JSON'}: "
                          f"{str(e).splitlines()[0]}") from None


def read_root_map(path: str | os.PathLike[str]) -> dict[str, str]:
    """The data-root map: a JSON or TOML object benchmark → folder (names lower-cased, folders as given)."""
    data = _read_object(Path(path), "data-root map", "--data-root-map")
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise ConfigError(f"--data-root-map {path}: expected an object of benchmark name → folder")
    base = Path(path).parent
    return {k.lower(): str(base / v) if not Path(v).is_absolute() else v for k, v in data.items()}


def check_suite(suite: Suite, root_map: dict[str, str]) -> None:
    """Every entry known, the map naming every benchmark the suite needs (all missing listed at once), each
    folder the suite uses existing."""
    _raise_all(f"suite {suite.name}", [p for entry in suite.entries for p in entry.problems()])
    needed = list(dict.fromkeys(str(e.benchmark) for e in suite.entries if e.needs_folder()))
    missing = [b for b in needed if b not in root_map]
    if missing:
        raise ConfigError(f"the data-root map lacks {', '.join(missing)}, which suite {suite.name} needs "
                          "(give each benchmark's folder)" if root_map else
                          f"suite {suite.name} needs --data-root-map naming the folders of {', '.join(missing)}")
    absent = [f"{b} → {root_map[b]}" for b in needed if not Path(root_map[b]).is_dir()]
    if absent:
        raise ConfigError(f"data-root map: no such folder: {'; '.join(absent)}")


def _data(entry: Entry, root_map: dict[str, str], suite: SuiteSettings) -> tuple[str, dict[str, Any]]:
    """The ``dataset`` argument of :func:`evaluate` and its data keywords for ``entry`` (``suite``: the data
    options a registered benchmark's entry takes from the suite's settings); the user's own data set: its path
    and options as the suite file gives them."""
    if entry.dataset is not None:
        return entry.dataset, dict(entry.options)
    assert entry.benchmark is not None  # an entry is a benchmark or a data set
    if entry.benchmark in FOLDER_SETS:
        return root_map[entry.benchmark], {}
    kw: dict[str, Any] = {"protocol": entry.protocol}
    if entry.benchmark in root_map:
        kw["data_root"] = root_map[entry.benchmark]
    if entry.benchmark in BENCHMARK_SPECS and suite.allow_count_mismatch:
        kw["allow_count_mismatch"] = True
    return entry.benchmark, kw


def run_suite(name: str, models: Sequence[str], *, pretrained: Sequence[str | None] | None = None,
              model_config: str | None = None, trust_remote_code: bool = False,
              data_root_map: str | os.PathLike[str] | None = None,
              output_dir: str | os.PathLike[str], allow_count_mismatch: bool = False,
              settings: EvalSettings | None = None, **options: Any) -> SuiteRun:
    """Run suite ``name`` for every model (``pretrained``: one per model, in order, as ``hnbench hardness``),
    write each result into ``output_dir`` and the aggregated table to ``output_dir/suite-NAME.md``.

    ``settings`` / ``options``: :class:`~hnbench.settings.EvalSettings` (the task is each entry's own;
    ``limit`` scores a seeded subset of each set); a task's own option by its flat key (``templates="simple"``)
    applies to the entries of that task (one no entry's task declares is refused). ``allow_count_mismatch``: each registered benchmark's entry
    runs even if its loaded counts differ from the published ones (recorded in its result).
    ``trust_remote_code``: the models whose family runs release code may run it (each is refused before anything
    loads without it, as ``hnbench eval`` refuses it); passed to every evaluation and recorded with the table.
    Bad input raises :class:`~hnbench.errors.ConfigError` before anything loads; a failing (model, entry) is
    logged, recorded in :attr:`SuiteRun.failures` and the rest go on.
    """
    from hnbench.models import model_pairs

    keys = task_option_keys()  # each task's own options (templates=...): for the entries of that task
    task_options = {k: options.pop(k) for k in list(options) if k in keys}
    s: EvalSettings = from_options(EvalSettings, settings, options)
    suite_settings = SuiteSettings(data_root_map=None if data_root_map is None else os.fspath(data_root_map),
                                   output=os.fspath(output_dir), allow_count_mismatch=allow_count_mismatch)
    check_declared(suite_settings)
    s.validate(Path(output_dir))
    if "task" in s.recorded():  # given (recorded only when not the default)
        raise ConfigError("--task is each suite entry's own; leave it out")
    suite = get_suite(name)  # a registered suite or a suite file (its entries checked as it is read)
    per_task = take_task_options(dict(task_options), [TASKS.entry(e.task).name for e in suite.entries
                                                      if e.task in TASKS])
    root_map = read_root_map(data_root_map) if data_root_map is not None else {}
    check_suite(suite, root_map)
    problems = []
    for entry in suite.entries:  # each entry's data, checked as eval checks its --dataset, before anything loads
        dataset, kw = _data(entry, root_map, suite_settings)
        try:
            check_data(dataset, entry.task, kw)
        except HnbenchError as e:
            problems.append(f"suite entry {entry.label}: {e}")
    _raise_all(f"suite {suite.name}", problems)
    pairs = model_pairs(models, pretrained, model_config=model_config, trust_remote_code=trust_remote_code)
    refuse_repeated_models(pairs)
    out = Path(output_dir)
    table_path = out / f"suite-{suite.name}.md"
    inputs = {"suite": suite.name, "models": [list(p) for p in pairs], "model_config": model_config,
              "root_map": root_map, "settings": {**s.recorded(), **task_options},
              # a suite file's entries (another file of the same name is another table); a registered suite's are code
              **({"entries": [dataclasses.asdict(e) for e in suite.entries]} if is_suite_file(name) else {}),
              **({"allow_count_mismatch": True} if allow_count_mismatch else {}),
              **({"trust_remote_code": True} if trust_remote_code else {})}
    check_output(table_path, "a suite table", inputs, overwrite=s.overwrite)
    run = SuiteRun(suite.name, "", table_path)
    cells: dict[tuple[str, int], Any] = {}  # by the entry's place: two tasks may score one benchmark/protocol
    failed: dict[tuple[str, int], str] = {}
    for model, weights in pairs:
        label = f"{model} ({weights or 'random init'})"
        for n, entry in enumerate(suite.entries):
            dataset, kw = _data(entry, root_map, suite_settings)
            try:
                from hnbench.evaluation.evaluate import evaluate

                options = {k: v for k, v in kw.items() if k not in ("data_root", "protocol")}  # the loader's
                result = evaluate(model, dataset, pretrained=weights, model_config=model_config,
                                  trust_remote_code=trust_remote_code, output_dir=out,
                                  dataset_options=options or None,
                                  settings=dataclasses.replace(
                                      s, task=entry.task, task_options=per_task.get(TASKS.entry(entry.task).name, {}),
                                      limit=s.limit if TASKS.get(entry.task).limit else None),
                                  **{k: v for k, v in kw.items() if k not in options})
            except Exception as e:  # reported, and the other entries go on
                message = str(e) if isinstance(e, HnbenchError) else f"{type(e).__name__}: {e}"
                logger.warning("%s on %s failed: %s", label, entry.label, message)
                run.failures[label, entry.label] = failed[label, n] = message
                continue
            cells[label, n] = result
            run.results[label, entry.label] = str(result.path)
    run.table = render_table(suite, [f"{m} ({w or 'random init'})" for m, w in pairs], cells, failed, out,
                             limit=s.limit, seed=s.seed)
    record_output(table_path, inputs)
    atomic_write_bytes(table_path, run.table.encode())
    return run


def refuse_repeated_models(pairs: Sequence[tuple[Any, str | None]]) -> None:
    """Refuse a (model, weights) pair given twice (one line, before anything loads): both would score into one
    result file, shown as two rows. A path is compared by where it leads (``w.pt`` and ``./w.pt`` are one)."""
    def where(value: Any) -> Any:
        if not isinstance(value, str):
            return value if value is None else id(value)  # a loaded encoder: itself
        return os.path.realpath(value) if os.path.exists(value) else value

    first: dict[tuple[Any, Any], int] = {}
    for n, (model, weights) in enumerate(pairs, start=1):
        key = (where(model), where(weights))
        if key in first:
            raise ConfigError(f"--model {model} --pretrained {weights or 'none'} is given twice (models {first[key]} "
                              f"and {n}): both would score into one result file; give each model once")
        first[key] = n


def _columns(entry: Entry) -> list[str]:
    """An entry's metric columns: what its task's main score is the mean of (retrieval's t2i and i2t R@1)."""
    return list(TASKS.get(entry.task).main_of)


def render_table(suite: Suite, labels: Sequence[str], cells: dict[tuple[str, int], Any],
                 failures: dict[tuple[str, int], str], out: Path, *, limit: int | None, seed: int) -> str:
    """The aggregated Markdown table: a row per model, a column per entry × metric, each cell linked to its
    result file (relative to ``out``); ``cells`` and ``failures`` are keyed by (model label, the entry's index): entries of
    one benchmark and protocol scored by two tasks are two cells. Failed cells say so; ``limit``: one line under
    the title names the subsets."""
    import pandas as pd

    rows = []
    for label in labels:
        row = {"model": markdown_text(label)}
        for n, entry in enumerate(suite.entries):
            task = TASKS.get(entry.task)
            for col in _columns(entry):
                head = markdown_text(f"{entry.label} {task.label(col)}")
                result = cells.get((label, n))
                if result is None:
                    row[head] = "failed" if (label, n) in failures else ""
                    continue
                value = task.value(result.metrics, col)
                link = os.path.relpath(result.path, out) if result.path else ""
                row[head] = f"[{value:.1f}]({link})" if link else f"{value:.1f}"
        rows.append(row)
    lines = [f"# Suite {markdown_text(suite.name)}", ""]
    subsets = [e.label for e in suite.entries if TASKS.get(e.task).limit] if limit else []
    if subsets:  # said once, under the title, rather than in every column heading
        lines += [f"Seeded {limit}-image subsets (seed {seed}) of {', '.join(subsets)}, for a quick look: not "
                  "comparable with full runs.", ""]
    lines += [pd.DataFrame(rows).to_markdown(index=False), ""]
    if failures:
        lines += ["Failed:", ""] + [f"- {markdown_text(m)} on {markdown_text(suite.entries[e].label)}: {markdown_text(msg)}"
                                    for (m, e), msg in failures.items()] + [""]
    return "\n".join(lines)
