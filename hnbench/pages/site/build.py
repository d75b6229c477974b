"""Build a results site: read the result folders, plan every file with the fingerprint of its inputs, write those
whose inputs changed (see :mod:`hnbench.pages.site`).

Layout (every href relative): ``index.html``; ``boards/BENCH.html`` (a board per benchmark, with its R@1 charts
``boards/BENCH-r1-N.png``) and ``suites/SUITE.html``; ``models/MODEL.html``; ``browse/RESULT/index.html`` (a
result's failure browser, its thumbnails in ``thumbs/DATA/IMAGE.jpg``, written once for every page);
``hardness/REPORT/index.html`` (and its plots); ``data/RESULT.json`` (a copy of each result file, the boards'
"result" links). File names are slugs and hashes, never a name read from a file.

Inputs: every ``*.json`` below the folders given (a link to a file outside them is not followed). A hardness
summary (``hardness.json``) is a hardness report; any other file is read as a result, and one that cannot be used
(unreadable, corrupt, newer schema, impossible values, a per-query file that disagrees) is listed under "Skipped
files" with its reason, one line each. A folder holding ``suite-NAME.md`` (``hnbench suite``'s table) is suite
NAME: its page is the board of the results in that folder.

Incremental: ``site.json`` records, for each file written, the fingerprint of its inputs (the sha256 of the result
files it shows, the options it depends on and hnbench's version) and the sha256 of its bytes; a rebuild writes only
the files whose fingerprint changed (or that were changed or removed since), leaves the others untouched (bytes and
mtime), and removes the files of the earlier build that this one no longer makes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from hnbench._version import __version__
from hnbench.errors import ConfigError, HnbenchError
from hnbench.io import atomic_write_bytes, is_record, loads_json, read_untrusted
from hnbench.pages.board import page as board_page
from hnbench.pages.site import render as R
from hnbench.pages.site.options import MANIFEST, SiteSettings
from hnbench.results.compare import model_label
from hnbench.results.leaderboard import TABLE_KEY, benchmark_order, disambiguate, measured_rows, render
from hnbench.results.record import EvalResult, ResultFormatError, per_query_path, read_result
from hnbench.settings import from_options

if TYPE_CHECKING:
    from hnbench.data import ImageTextDataset
    from hnbench.hardness.schema import HardnessReport

__all__ = ["SiteBuild", "build_site"]

KIND = "hnbench site"
E = R.E


@dataclass
class Found:
    """One result file read: where, its id (a hash of its bytes: file names in the site), its record and the JSON
    as written (fields this hnbench does not know yet, such as a throughput block, are shown from it)."""

    path: str
    id: str
    sha256: str
    data: bytes
    result: EvalResult
    raw: dict[str, Any]


@dataclass
class Hard:
    """One hardness report read."""

    path: str
    id: str
    sha256: str
    report: HardnessReport


@dataclass
class Inputs:
    """Everything read from the result folders: results, hardness reports, suites (by the ``suite-NAME.md`` found
    beside their results), the files skipped and why, and the board's rows (:func:`measured_rows`) with its notes."""

    results: list[Found] = field(default_factory=list)
    hardness: list[Hard] = field(default_factory=list)
    suites: dict[str, list[str]] = field(default_factory=dict)  # suite name → its result files' paths
    skipped: list[tuple[str, str]] = field(default_factory=list)
    frame: pd.DataFrame = field(default_factory=pd.DataFrame)
    notes: dict[Any, list[str]] = field(default_factory=dict)


@dataclass
class Planned:
    """A file of the site: the fingerprint of its inputs and how to make its bytes (called only when needed)."""

    key: str
    make: Callable[[], bytes]
    needs: list[str] = field(default_factory=list)  # shared files it links to that only its making names


@dataclass
class SiteBuild:
    """What :func:`build_site` did: the site's folder, the files written and kept, the files skipped (and why)."""

    output: Path
    written: list[str]
    kept: list[str]
    removed: list[str]
    skipped: list[tuple[str, str]]
    browsers: int
    manifest: Path


def _fingerprint(*parts: Any) -> str:
    return hashlib.sha256(json.dumps([KIND, __version__, *parts], sort_keys=True, default=str).encode()).hexdigest()


# --- reading ----------------------------------------------------------------------------------------------
def _json_files(paths: Sequence[str | Path], skipped: list[tuple[str, str]]) -> tuple[list[Path], dict[str, Path]]:
    """The ``*.json`` files below ``paths`` (each once; links out of a folder are skipped) and the suite tables
    (``suite-NAME.md``) found, by folder."""
    files: dict[str, Path] = {}
    suites: dict[str, Path] = {}
    for p in map(Path, paths):
        if not p.exists():
            raise ConfigError(f"{p}: no such results file or folder")
        if not p.is_dir():
            files.setdefault(os.path.realpath(p), p)
            continue
        root = p.resolve()
        for f in sorted(p.rglob("*")):
            if f.name.startswith("suite-") and f.suffix == ".md" and f.is_file():
                suites.setdefault(f.name[len("suite-"):-len(".md")], f)
            if f.suffix != ".json" or is_record(f) or (f.is_dir() and not f.is_symlink()):
                continue  # anything else named *.json (a FIFO, a device) is read, and refused, with its reason
            if not f.resolve().is_relative_to(root):
                skipped.append((str(f), "a link to a file outside the results folder; not followed"))
                continue
            files.setdefault(os.path.realpath(f), f)
    return sorted(files.values(), key=str), suites


def read_inputs(paths: Sequence[str | Path]) -> Inputs:
    """Every result and hardness report below ``paths``; what cannot be used is skipped with its reason."""
    from hnbench.hardness.schema import KIND as HARDNESS
    from hnbench.hardness.schema import HardnessFormatError, read_report

    if not paths:
        raise ConfigError("give at least one results folder (or result file) to build a site from")
    inputs = Inputs()
    files, suites = _json_files(paths, inputs.skipped)
    candidates: dict[str, bytes] = {}
    for f in files:
        try:
            data = read_untrusted(f, "result file", error=ResultFormatError)
            doc = loads_json(data.decode("utf-8-sig"))
        except ResultFormatError as e:
            inputs.skipped.append((str(f), str(e).removeprefix(f"{f}: ")))
            continue
        except (UnicodeDecodeError, ValueError) as e:
            inputs.skipped.append((str(f), f"not a readable JSON file ({type(e).__name__}: {e})"))
            continue
        kind = doc.get("kind") if isinstance(doc, dict) else None
        if kind == HARDNESS:
            try:
                report = read_report(f)
            except HardnessFormatError as e:
                inputs.skipped.append((str(f), str(e).removeprefix(f"{f}: ")))
                continue
            digest = hashlib.sha256(data).hexdigest()
            inputs.hardness.append(Hard(str(f), digest[:12], digest, report))
        elif isinstance(kind, str) and kind.startswith("hnbench"):
            inputs.skipped.append((str(f), f"an {kind!r} file, not a result: not shown"))
        else:
            candidates[str(f)] = data
    frame, skipped, notes = measured_rows(list(candidates), Path.cwd())
    inputs.skipped += skipped
    bad = {p for p, _ in skipped}
    for path, data in candidates.items():
        if path in bad:
            continue
        try:
            result = read_result(path)
        except (HnbenchError, KeyError, TypeError, ValueError) as e:  # read by collect already: not expected
            inputs.skipped.append((path, str(e)))
            continue
        digest = hashlib.sha256(data).hexdigest()
        inputs.results.append(Found(path, digest[:12], digest, data, result, loads_json(data.decode("utf-8-sig"))))
    inputs.frame = disambiguate(frame.reset_index(drop=True)) if len(frame) else frame
    inputs.notes = notes
    for name, table in suites.items():
        folder = table.parent.resolve()
        inputs.suites[name] = [f.path for f in inputs.results if Path(f.path).resolve().parent == folder]
    return inputs


# --- the output folder -------------------------------------------------------------------------------------
def _inside(rel: str) -> bool:
    parts = rel.split("/")
    return bool(rel) and "\\" not in rel and "\0" not in rel and all(p not in ("", ".", "..") for p in parts)


def _earlier(out: Path, overwrite: bool) -> dict[str, dict[str, Any]]:
    """The files an earlier build lists (relative path → its entry); a folder holding files hnbench site did not
    write is refused (one line) unless ``overwrite``."""
    if not out.is_dir():
        return {}
    present = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file() or p.is_symlink())
    if not present:
        return {}
    record: Any = None
    manifest = out / MANIFEST
    if manifest.is_file() and not manifest.is_symlink():
        try:
            record = loads_json(read_untrusted(manifest, "site manifest", error=ConfigError).decode())
        except (ValueError, UnicodeDecodeError):
            record = None
    if not isinstance(record, dict) or record.get("kind") != KIND or not isinstance(record.get("files"), dict):
        if not overwrite:
            raise ConfigError(f"--output {out} holds files hnbench site did not write (e.g. {present[0]}): build the "
                              "site into a new or empty folder or one hnbench site wrote, or pass --overwrite")
        return {}
    return {rel: e for rel, e in record["files"].items() if _inside(rel) and isinstance(e, dict)}


def _target(out: Path, rel: str) -> Path:
    """Where file ``rel`` of the site goes: inside ``out`` whatever links its folders hold (a folder of the site
    replaced by a link to elsewhere is refused, one line, rather than written or removed through)."""
    path = out / rel
    if not path.parent.resolve().is_relative_to(out.resolve()):
        raise ConfigError(f"--output {out}: {Path(rel).parent} is a link to a folder outside the site; remove it "
                          "and build again")
    return path


def _sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() and not path.is_symlink() else None
    except OSError:
        return None


# --- planning --------------------------------------------------------------------------------------------
class _Site:
    """The plan of one build: every file's fingerprint and maker (see the module docstring)."""

    def __init__(self, inputs: Inputs, settings: SiteSettings, paths: Sequence[str | Path]):
        self.inputs, self.s = inputs, settings
        self.paths = [str(p) for p in paths]
        self.plan: dict[str, Planned] = {}
        self.by_path = {f.path: f for f in inputs.results}
        self.datasets: dict[str, ImageTextDataset | str] = {}  # data key → loaded set, or why it is not here
        self.thumbs: dict[str, tuple[str, Callable[[], bytes]]] = {}  # made while making the browser pages
        frame = inputs.frame
        order = benchmark_order()
        self.benches = sorted(set(frame["benchmark"]) if len(frame) else set(),
                              key=lambda b: (order.index(b) if b in order else len(order), str(b)))
        self.board_of = {b: f"boards/{R.slug(str(b), ('board', b))}.html" for b in self.benches}
        self.suite_of = {n: f"suites/{R.slug(n, ('suite', n))}.html" for n in inputs.suites}
        self.models: dict[tuple[str, ...], list[Found]] = {}
        for f in inputs.results:
            self.models.setdefault(self._model_key(f.result), []).append(f)
        labels = [self._label(k, fs) for k, fs in self.models.items()]
        self.model_label = {k: lab + (f" [{k[2][:8]}]" if labels.count(lab) > 1 else "")
                            for k, lab in zip(self.models, labels)}
        self.model_of = {k: f"models/{R.slug(self.model_label[k], k)}.html" for k in self.models}
        self.browser: dict[str, str] = {}  # result id → its page, or why there is none (said on the model page)

    @staticmethod
    def _model_key(r: EvalResult) -> tuple[str, ...]:
        m, scorer = r.model, r.scorer if isinstance(r.scorer, dict) else {}
        return (str(m.get("arch")), str(m.get("pretrained")), str(m.get("fingerprint") or ""),
                str(scorer.get("name") or "cosine"))

    @staticmethod
    def _label(key: tuple[str, ...], found: list[Found]) -> str:
        return model_label(found[-1].result.model) + ("" if key[3] == "cosine" else f" ‡ pairwise ({key[3]})")

    def add(self, rel: str, key: str, make: Callable[[], bytes]) -> None:
        self.plan[rel] = Planned(key, make)

    # -- the failure browsers ----------------------------------------------------------------------------
    def _dataset(self, f: Found) -> ImageTextDataset | str:
        """The data ``f`` was scored on, reloaded as ``hnbench browse`` does (once per data set), or why not."""
        from hnbench.pages.build import reload_dataset

        d = f.result.dataset
        key = json.dumps([d.get("name"), d.get("protocol"), d.get("fingerprint"), d.get("source")], default=str)
        if key not in self.datasets:
            try:
                self.datasets[key] = reload_dataset(f.result)
            except (HnbenchError, OSError) as e:  # said of every result on this data: no one file's path in it
                why = str(e).replace(f"{f.result.path}: ", "").replace(str(f.result.path), "the result")
                self.datasets[key] = f"no failure browser: its data is not here ({why})"
        return self.datasets[key]

    def plan_browsers(self) -> None:
        for f in self.inputs.results:
            r = f.result
            if not self.s.limit:
                self.browser[f.id] = "no failure browser (--limit 0)"
            elif not r.task_spec().per_query or not r.per_query:
                self.browser[f.id] = "no failure browser: its task writes no per-query file"
            elif not os.path.lexists(per_query_path(r)):
                self.browser[f.id] = "no failure browser: its per-query file is not beside it"
            else:
                ds = self._dataset(f)
                if isinstance(ds, str):
                    self.browser[f.id] = ds
                    continue
                rel = f"browse/{f.id}/index.html"
                self.browser[f.id] = rel
                self.add(rel, _fingerprint("browse", f.sha256, self.s.limit, self.s.top, ds.fingerprint()),
                         partial(self._browser_page, f, ds, rel))

    def _browser_page(self, f: Found, ds: ImageTextDataset, rel: str) -> bytes:
        from hnbench.pages.build import THUMB_PX, build_page, thumbnail_jpeg
        from hnbench.pages.html import render as render_page

        folder = f"thumbs/{ds.fingerprint()[:16]}"
        needs: list[str] = []

        def thumb(data: ImageTextDataset, i: int) -> str:
            image_id = data.image_ids[i]
            name = f"{folder}/{hashlib.sha256(image_id.encode()).hexdigest()[:20]}.jpg"
            needs.append(name)
            self.thumbs.setdefault(name, (_fingerprint("thumb", data.fingerprint(), image_id, THUMB_PX),
                                          lambda: thumbnail_jpeg(data, i)))
            return "../../" + name

        page = build_page(f.result, ds, limit=self.s.limit, top=self.s.top, progress=False, thumb=thumb)
        page.notes.append(f"The {self.s.limit} worst queries per direction (hnbench site --limit); hnbench browse "
                          "shows every query and compares two results.")
        self.plan[rel].needs = sorted(set(needs))
        return render_page(page, nav=R.nav(2), css=R.SITE_CSS + R.BROWSE_CSS).encode()

    # -- boards, suites ----------------------------------------------------------------------------------
    def _board(self, rows: pd.DataFrame, title: str, stem: str) -> None:
        """A board page (``stem``.html) of ``rows`` and its charts, keyed by the files its rows come from."""
        found = [self.by_path[p] for p in rows["path"]]
        links = {f.id: [self.browser.get(f.id), self.model_of[self._model_key(f.result)],
                        self.model_label[self._model_key(f.result)]] for f in found}
        key = _fingerprint("board", title, sorted((f.path, f.sha256) for f in found), self.s.baseline, links)
        charts = []
        for n, (tkey, t) in enumerate(rows.groupby(TABLE_KEY, sort=False)):
            series = [d for d in ("t2i", "i2t") if f"{d} R@1" in t and t[f"{d} R@1"].notna().any()]
            if not series:
                continue
            png = f"{stem}-r1-{n}.png"
            caption = " · ".join(str(x) for x in tkey[:2]) + (f" · data {str(tkey[2])[:8]}" if
                                                              rows.groupby(["benchmark", "protocol"]).ngroups
                                                              < rows.groupby(TABLE_KEY).ngroups else "") \
                + ("" if tkey[3] == "exact" else f" · {tkey[3]} search")
            charts.append((png, caption))
            self.add(png, key, partial(_chart, t, series, caption))
        self.add(f"{stem}.html", key, partial(self._board_html, rows, title, charts))

    def _board_html(self, rows: pd.DataFrame, title: str, charts: list[tuple[str, str]]) -> bytes:
        base = self.s.baseline
        if base and not any(m == base or _glob(m, base) for m in rows["model"]):
            base = None  # not on this board: no deltas here
        figures = "".join(f'<figure><img src="{E(png.rpartition("/")[2])}" alt="R@1 by model, {E(c)}" '
                          f'loading="lazy"><figcaption>R@1 (t2i, i2t) per model, {E(c)}; whiskers: each result\'s '
                          "95% interval.</figcaption></figure>" for png, c in charts)
        models = []
        for p in dict.fromkeys(rows["path"]):
            f = self.by_path[p]
            mk = self._model_key(f.result)
            b = self.browser.get(f.id, "")
            models.append([R.link(self.model_label[mk], "../" + self.model_of[mk]),
                           R.link("failure browser", "../" + b) if b.startswith("browse/")
                           else f'<span class="muted">{E(b)}</span>', R.link("result", f"../data/{f.id}.json")])
        intro = (("<h2>R@1 at a glance</h2>" + figures if figures else "")
                 + "<h2>Models on this board</h2>" + R.table(["model", "failures", "file"], models))
        text = render(rows, (), baseline=base, fmt="html", ci=True, link_base=Path.cwd(), notes=self.inputs.notes,
                      title=title, link=lambda p: f"../data/{self.by_path[p].id}.json",
                      page=lambda body, t: board_page(R.nav(1) + "\n" + body, t, css=R.SITE_CSS), intro=intro)
        return text.encode()

    def plan_boards(self) -> None:
        frame = self.inputs.frame
        for b in self.benches:
            self._board(frame[frame["benchmark"] == b], f"{b}", self.board_of[b][:-len(".html")])
        for name, files in self.inputs.suites.items():
            rows = frame[frame["path"].isin(files)] if len(frame) else frame
            if len(rows):
                self._board(rows, f"suite {name}", self.suite_of[name][:-len(".html")])

    # -- models, hardness, data, index --------------------------------------------------------------------
    def plan_models(self) -> None:
        for mk, found in self.models.items():
            key = _fingerprint("model", sorted(f.sha256 for f in found),
                               {f.id: self.browser.get(f.id) for f in found}, self.model_label[mk],
                               {f.id: self._board_rel(f) for f in found})
            self.add(self.model_of[mk], key, partial(self._model_html, mk, found))

    def _board_rel(self, f: Found) -> str | None:
        frame = self.inputs.frame
        hit = list(frame.loc[frame["path"] == f.path, "benchmark"]) if len(frame) else []
        return self.board_of.get(hit[0]) if hit else None

    def _model_html(self, mk: tuple[str, ...], found: list[Found]) -> bytes:
        found = sorted(found, key=lambda f: (str(f.result.created), f.path))
        newest = found[-1]
        rows = []
        for f in found:
            r = f.result
            board = self._board_rel(f)
            b = self.browser.get(f.id, "")
            bench = f"{r.dataset.get('name')} · {r.dataset.get('protocol') or 'default'}"
            ms = r.main_score if isinstance(r.main_score, dict) else {}
            rows.append([R.link(bench, "../" + board) if board else E(bench) + ' <span class="muted">(superseded or '
                         "not on a board)</span>", E(str(r.task)),
                         f"{E(str(ms.get('name', '')))} {R.number(ms.get('value'))}",
                         *(R.number((r.metrics.get(d) or {}).get("R@1"), ((r.ci95 or {}).get(d) or {}).get("R@1"))
                           for d in ("t2i", "i2t")),
                         E(str(r.model.get("context_length") or (r.tokens or {}).get("context_length") or "?")),
                         E(str(r.created)),
                         R.link("failure browser", "../" + b) if b.startswith("browse/")
                         else f'<span class="muted">{E(b)}</span>',
                         R.link("result", f"../data/{f.id}.json")])
        throughput = next((f.raw["throughput"] for f in reversed(found) if isinstance(f.raw.get("throughput"), dict)),
                          None)
        body = (f"<h1>{E(self.model_label[mk])}</h1>"
                f"<p>{len(found)} result file{'s' * (len(found) != 1)}; R@K in %, brackets: the 95% interval each "
                "result recorded.</p><h2>Results</h2>"
                + R.table(["benchmark", "task", "main score", "t2i R@1", "i2t R@1", "context", "created", "failures",
                           "file"], rows)
                + f"<h2>Model</h2><p>As the newest result ({E(str(newest.result.created))}) records it.</p>"
                + R.key_values(newest.result.model)
                + _card(newest.result.model)
                + "<h2>Throughput</h2>"
                + (R.key_values(throughput) if throughput else '<p class="muted">not recorded</p>'))
        return R.document(body, f"{self.model_label[mk]} · hnbench results", 1).encode()

    def plan_hardness(self) -> None:
        from hnbench.hardness.schema import HardnessFormatError, read_file

        for h in self.inputs.hardness:
            plots: dict[str, str] = {}
            for name, rel in sorted(h.report.files.items()):
                if not (isinstance(rel, str) and rel.endswith(".png") and _inside(rel)):
                    continue
                try:
                    data = read_file(h.report, name)
                except HardnessFormatError as e:
                    self.inputs.skipped.append((h.path, f"its {name} plot: {e}"))
                    continue
                target = f"hardness/{h.id}/{R.slug(rel, rel)}.png"
                plots[name] = target
                self.add(target, _fingerprint("plot", h.sha256, name), partial(bytes, data))
            self.add(f"hardness/{h.id}/index.html", _fingerprint("hardness", h.sha256, plots),
                     partial(_hardness_html, h, plots))

    def plan_data(self) -> None:
        for f in self.inputs.results:
            self.add(f"data/{f.id}.json", _fingerprint("data", f.sha256), partial(bytes, f.data))

    def plan_index(self) -> None:
        key = _fingerprint("index", self.paths, sorted(f.sha256 for f in self.inputs.results),
                           sorted(h.sha256 for h in self.inputs.hardness), self.inputs.skipped,
                           sorted(self.inputs.suites.items()), sorted(self.browser.items()))
        self.add("index.html", key, self._index_html)

    def _index_html(self) -> bytes:
        frame, n = self.inputs.frame, len(self.inputs.results)
        benches = []
        for b in self.benches:
            t = frame[frame["benchmark"] == b]
            benches.append([R.link(str(b), self.board_of[b]), E(", ".join(sorted(set(map(str, t["protocol"]))))),
                            E(", ".join(sorted(set(map(str, t["task"]))))), str(len(t)), str(t["model"].nunique())])
        suites = [[R.link(name, self.suite_of[name]), str(len(files))] for name, files in self.inputs.suites.items()]
        models = []
        for mk, found in sorted(self.models.items(), key=lambda kv: self.model_label[kv[0]].lower()):
            names = sorted({str(f.result.dataset.get("name")) for f in found})
            models.append([R.link(self.model_label[mk], self.model_of[mk]), E(mk[0]), E(mk[1]), E(mk[2][:8]),
                           str(len(found)), E(", ".join(names)),
                           str(sum(self.browser.get(f.id, "").startswith("browse/") for f in found))])
        hard = [[R.link(h.report.label, f"hardness/{h.id}/index.html"), E(h.path)] for h in self.inputs.hardness]
        skipped = "".join(f"<li><code>{E(p)}</code>: {E(why)}</li>" for p, why in self.inputs.skipped)
        body = (f"<h1>hnbench results</h1><p>Built by hnbench {E(__version__)} from stored files only: {n} result "
                f"file{'s' * (n != 1)} and {len(self.inputs.hardness)} hardness report"
                f"{'s' * (len(self.inputs.hardness) != 1)} under "
                + ", ".join(f"<code>{E(p)}</code>" for p in self.paths)
                + ". Each board ranks its results as <code>hnbench leaderboard</code> does; click a column head to "
                "sort.</p>"
                + '<h2 id="benchmarks">Benchmarks</h2>'
                + (R.table(["benchmark", "protocols", "tasks", "results", "models"], benches) if benches
                   else "<p>No results to show.</p>")
                + ('<h2 id="suites">Suites</h2>' + R.table(["suite", "results"], suites) if suites else "")
                + '<h2 id="models">Models</h2>'
                + (R.table(["model", "arch", "weights", "fingerprint", "results", "benchmarks", "failure browsers"],
                           models) if models else "<p>No models.</p>")
                + '<h2 id="hardness">Hardness reports</h2>'
                + (R.table(["report", "file"], hard) if hard else '<p class="muted">none found</p>')
                + '<h2 id="skipped">Skipped files</h2>'
                + (f"<ul>{skipped}</ul>" if skipped else '<p class="muted">none</p>'))
        return R.document(body, "hnbench results", 0).encode()


def _card(model: dict[str, Any]) -> str:
    """The model's card where it was loaded as a registered release (its record names the zoo entry): what it is,
    where its weights come from, its licence and the published numbers hnbench packages for it; "" otherwise."""
    from hnbench.models.zoo import entry_of, reference_numbers

    extra = model.get("extra")
    zoo = extra.get("zoo") if isinstance(extra, dict) else None
    name = zoo.get("name") if isinstance(zoo, dict) else None
    entry = entry_of(name) if isinstance(name, str) else None
    if entry is None:
        return ""
    card = {**entry.to_dict(), "description": entry.description, "license": entry.license or "not stated",
            **({"not verified": entry.unverified} if entry.unverified else {}),
            "published R@1": reference_numbers(entry) or "none packaged"}
    return f"<h2>Card</h2><p>The registered release {E(entry.name)} (<code>hnbench models</code>).</p>" + \
        R.key_values(card)


def _glob(label: str, pattern: str) -> bool:
    from fnmatch import fnmatchcase

    return fnmatchcase(label, pattern)


def _chart(t: pd.DataFrame, series: list[str], caption: str) -> bytes:
    """The R@1 bars of one table: its models, best mean first."""
    from hnbench.plots import recall_bars_png

    score = t[[f"{d} R@1" for d in series]].mean(axis=1, skipna=True)
    t = t.assign(_score=score.fillna(-1)).sort_values(["_score", "model"], ascending=[False, True], kind="stable")
    data = [(d, list(t[f"{d} R@1"]), [(lo, hi) for lo, hi in zip(t[f"{d} R@1 lo"], t[f"{d} R@1 hi"])])
            for d in series]
    return recall_bars_png(list(map(str, t["model"])), data, title=caption)


def _hardness_html(h: Hard, plots: dict[str, str]) -> bytes:
    """A hardness report's page: what it measured, its buckets and recall by hardness, its plots."""
    rep = h.report
    t = rep.text
    summary = {"dataset": rep.dataset, "encoder": rep.encoder, "settings": rep.settings,
               "captions": {"n": t.n_items, "pairwise similarity, mean": t.pairwise.mean,
                            "hardest-negative similarity, mean": t.nearest.mean,
                            "near-duplicate pairs": t.near_duplicates.n_pairs}}
    parts = [f"<h1>Hardness: {E(rep.label)}</h1>",
             f"<p>From <code>{E(h.path)}</code> (hnbench hardness, {E(str(rep.created))}).</p>",
             "<h2>Summary</h2>", R.key_values(summary)]
    if t.buckets is not None:
        b = t.buckets
        parts += ["<h2>In-batch negatives by caption similarity</h2>",
                  R.table(["bucket", "share"], ([E(lab), f"{100 * s:.1f}%"] for lab, s in zip(b.labels, b.shares)))]
    for rec in rep.recall:
        parts += [f"<h2>R@1 by hardness: {E(model_label(rec.model))}</h2>",
                  R.table(["bucket", "t2i n", "t2i R@1", "i2t n", "i2t R@1"],
                          ([E(a.label), str(a.n), R.number(a.r_at_1), str(b2.n), R.number(b2.r_at_1)]
                           for a, b2 in zip(rec.t2i, rec.i2t)))]
    if plots:
        parts.append("<h2>Plots</h2>")
        parts += [f'<figure><img src="{E(rel.rpartition("/")[2])}" alt="{E(name)}" loading="lazy">'
                  f"<figcaption>{E(name)}</figcaption></figure>" for name, rel in plots.items()]
    return R.document("".join(parts), f"Hardness: {rep.label} · hnbench results", 2).encode()


# --- building --------------------------------------------------------------------------------------------
def build_site(results: Sequence[str | Path], output: str | Path | None = None, *, settings: SiteSettings | None = None,
               progress: bool = True, **options: Any) -> SiteBuild:
    """Build (or bring up to date) the site of the results under ``results`` in ``output``; ``options`` are
    :class:`~hnbench.pages.site.options.SiteSettings` fields (``baseline``, ``limit``, ``top``, ``overwrite``).

    Bad input (a missing results path, an --output holding files hnbench site did not write) is one line
    (:class:`~hnbench.errors.ConfigError`) before anything is written; a result that cannot be used is listed
    under "Skipped files", not an error."""
    given = {**options, **({"output": os.fspath(output)} if output is not None else {})}
    s: SiteSettings = from_options(SiteSettings, settings, given)
    s.validate()
    assert s.output is not None  # validate() refuses None
    out = Path(s.output)
    old = _earlier(out, s.overwrite)
    inputs = read_inputs(results)
    site = _Site(inputs, s, results)
    site.plan_browsers()
    site.plan_boards()
    site.plan_models()
    site.plan_hardness()
    site.plan_data()
    site.plan_index()
    from tqdm.auto import tqdm

    written, kept, entries = [], [], {}
    for rel in tqdm(sorted(site.plan, key=lambda r: (r == "index.html", r)), desc="site", unit="file",
                    disable=not progress):
        planned = site.plan[rel]
        before = old.get(rel) or {}
        needs = [n for n in before.get("needs") or [] if isinstance(n, str) and _inside(n)]
        if before.get("inputs") == planned.key and before.get("sha256") and _sha256(out / rel) == before["sha256"] \
                and all(_sha256(out / n) == (old.get(n) or {}).get("sha256") for n in needs):
            kept.append(rel)  # unchanged, and so are the thumbnails it shows
            planned.needs = needs
            entries[rel] = before
            continue
        data = planned.make()
        atomic_write_bytes(_target(out, rel), data)
        written.append(rel)
        entries[rel] = {"inputs": planned.key, "sha256": hashlib.sha256(data).hexdigest(),
                        **({"needs": planned.needs} if planned.needs else {})}
    needed = {n for p in site.plan.values() for n in p.needs}
    for rel in sorted(needed):  # the thumbnails the browser pages show: each written once
        before = old.get(rel) or {}
        made = site.thumbs.get(rel)
        if _sha256(out / rel) == before.get("sha256") and (made is None or made[0] == before.get("inputs")):
            kept.append(rel)
            entries[rel] = before
        elif made is not None:
            data = made[1]()
            atomic_write_bytes(_target(out, rel), data)
            written.append(rel)
            entries[rel] = {"inputs": made[0], "sha256": hashlib.sha256(data).hexdigest()}
    removed = []
    for rel in sorted(set(old) - set(entries)):
        stale = _target(out, rel)
        if stale.is_file() and not stale.is_symlink():
            stale.unlink()
            removed.append(rel)
        parent = stale.parent
        while parent != out and parent.is_dir() and not any(parent.iterdir()):
            os.rmdir(parent)
            parent = parent.parent
    record = {"kind": KIND, "hnbench_version": __version__, "results": [str(p) for p in results],
              "settings": dataclasses.asdict(s) | {"output": None, "overwrite": None},
              "skipped": [{"path": p, "reason": why} for p, why in inputs.skipped],
              "files": dict(sorted(entries.items()))}
    manifest = out / MANIFEST
    text = (json.dumps(record, indent=1, ensure_ascii=False) + "\n").encode()
    if _sha256(manifest) != hashlib.sha256(text).hexdigest():
        atomic_write_bytes(manifest, text)
    browsers = sum(v.startswith("browse/") for v in site.browser.values())
    return SiteBuild(out, written, kept, removed, inputs.skipped, browsers, manifest)

