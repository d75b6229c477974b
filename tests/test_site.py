"""``hnbench site``: a static results site built from stored files — every internal link and image resolves, a
rebuild rewrites only the pages a new result touches, hostile names are escaped, broken results are listed, bad
input is one line — and its pages in a real headless Chromium (no script error, usable at 1280 px)."""

from __future__ import annotations

import json
import os
import re
import shutil
import urllib.parse
from html.parser import HTMLParser
from pathlib import Path

import pytest
from conftest import assert_one_line_error, make_pairs, write_jsonl
from test_browse import _chromium, needs_browser

from hnbench.cli import main
from hnbench.pages.site.build import build_site
from hnbench.pages.site.options import MANIFEST

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "leaderboards" / "results"
PLUG = COMMITTED / "synthdense-plug-and-play"
BASELINE = "hnbench-tiny (synthdense)"


def _copy_result(src: Path, dest: Path) -> Path:
    """A committed result file and its per-query parquet, copied into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    record = json.loads(src.read_text())
    shutil.copy2(src, dest / src.name)
    if record.get("per_query"):
        shutil.copy2(src.parent / record["per_query"], dest / record["per_query"])
    return dest / src.name


def _plug(n: int) -> list[Path]:
    """The bundled model's result and the first ``n - 1`` fine-tunes of the plug-and-play study (one data set)."""
    files = sorted(PLUG.glob("*.json"))
    bundled = [f for f in files if "synthdense-4e3c0724" in f.name]
    return bundled + [f for f in files if f not in bundled][: n - 1]


class _Links(HTMLParser):
    """Every href/src of a page, its element ids, and whether it fetches anything (a script or stylesheet file)."""

    def __init__(self) -> None:
        super().__init__()
        self.targets: list[str] = []
        self.ids: set[str] = set()
        self.fetches: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        if tag == "a" and a.get("href") is not None:
            self.targets.append(a["href"])
        if tag == "img" and a.get("src") is not None:
            self.targets.append(a["src"])
        if tag in ("script", "link", "iframe") and (a.get("src") or a.get("href")):
            self.fetches.append(a.get("src") or a.get("href"))


def _parse(page: Path) -> _Links:
    links = _Links()
    text = page.read_text()
    links.feed(text)
    thumbs = re.search(r"var T = (\{.*?\});", text)  # a failure browser's thumbnails, set by its script
    if thumbs:
        links.targets += list(json.loads(thumbs.group(1)).values())
    return links


def _broken_links(site: Path) -> tuple[list[str], int]:
    """Every internal href/src (and browser thumbnail) of every page that does not resolve to a file (and
    element id) inside ``site``, and how many were checked."""
    site = site.resolve()
    parsed = {p.resolve(): _parse(p) for p in site.rglob("*.html")}
    broken, n = [], 0
    for page, links in parsed.items():
        broken += [f"{page.relative_to(site)} fetches {f}" for f in links.fetches]
        for target in links.targets:
            n += 1
            path, _, fragment = target.partition("#")
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("/"):
                broken.append(f"{page.relative_to(site)}: {target} is not a relative link")
                continue
            dest = (page.parent / urllib.parse.unquote(path)).resolve() if path else page
            if not dest.is_relative_to(site) or not dest.is_file():
                broken.append(f"{page.relative_to(site)}: {target} does not resolve")
            elif fragment and fragment not in parsed.get(dest, _Links()).ids:
                broken.append(f"{page.relative_to(site)}: {target}: no element #{fragment}")
    return broken, n


def _state(site: Path) -> dict[str, tuple[int, bytes]]:
    return {p.relative_to(site).as_posix(): (p.stat().st_mtime_ns, p.read_bytes())
            for p in site.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> dict[str, Path]:
    """A site of three committed results (one data set: failure browsers), one an old-data result (no browser), a
    broken file, and a suite table in their folder."""
    root = tmp_path_factory.mktemp("site")
    results = root / "results"
    for f in _plug(3):
        _copy_result(f, results / "plug")
    old = sorted((COMMITTED / "synthdense").glob("*.json"))[0]
    _copy_result(old, results / "older")
    (results / "plug" / "suite-demo.md").write_text("# suite demo\n")
    (results / "older" / "broken.json").write_text('{"schema_version": 1, "model": ')
    site = root / "site"
    built = build_site([results], site, baseline=BASELINE, limit=3, top=3, progress=False)
    return {"results": results, "site": site, "built": built}  # type: ignore[dict-item]


def test_every_internal_link_and_image_of_a_site_resolves_and_nothing_is_fetched(small):
    site = small["site"]
    broken, n = _broken_links(site)
    assert broken == [] and n > 50
    pages = {p.relative_to(site).as_posix() for p in site.rglob("*.html")}
    assert {"index.html"} | {p for p in pages if p.startswith("boards/")} <= pages
    assert sum(p.startswith("models/") for p in pages) == 4  # three plug-and-play models and the older one
    assert sum(p.startswith("browse/") for p in pages) == 3  # the older result's data is not here
    older = [t for t in (p.read_text() for p in site.glob("models/*.html")) if "no failure browser" in t]
    assert len(older) == 1 and "its data is not here" in older[0] and "fingerprint" in older[0]
    assert sum(p.startswith("suites/") for p in pages) == 1
    assert all("<h2>Throughput</h2>" in p.read_text() and "not recorded" in p.read_text()
               for p in site.glob("models/*.html"))  # no result here measured its throughput
    assert list(site.glob("boards/*.png")) and list(site.glob("thumbs/*/*.jpg"))
    for page in site.rglob("*.html"):
        text = page.read_text()
        assert "http://" not in text and "https://" not in text, page
    index = (site / "index.html").read_text()
    assert "broken.json" in index and "Skipped files" in index
    board = next(site.glob("boards/*.html")).read_text()
    # the leaderboard's table: intervals ([lo, hi]) and deltas against the baseline, sortable
    assert re.search(r"\d+\.\d\d \[\d+\.\d\d, \d+\.\d\d\]", board)
    assert re.search(r"\([+−]\d+\.\d\d\*? \[", board)  # a delta with its paired interval
    assert "hnbSortable" in board and "R@1 at a glance" in board
    record = json.loads((site / MANIFEST).read_text())
    assert record["kind"] == "hnbench site" and set(record["files"]) == {
        p.relative_to(site).as_posix() for p in site.rglob("*") if p.is_file() and p.name != MANIFEST}


def test_a_rebuild_after_one_new_result_rewrites_only_the_pages_it_touches(tmp_path):
    results, site = tmp_path / "results", tmp_path / "site"
    first, second, third = _plug(3)
    for f in (first, second):
        _copy_result(f, results)
    build_site([results], site, limit=2, top=2, progress=False)
    before = _state(site)
    again = build_site([results], site, limit=2, top=2, progress=False)
    assert again.written == [] and _state(site) == before  # nothing changed: nothing written
    _copy_result(third, results)
    built = build_site([results], site, limit=2, top=2, progress=False)
    after = _state(site)
    changed = {rel for rel in after if before.get(rel) != after[rel]}
    new_id = next(rel.split("/")[1] for rel in after if rel.startswith("browse/") and rel not in before)
    new_model = {rel for rel in after if rel.startswith("models/") and rel not in before}
    assert len(new_model) == 1
    # the index, the benchmark's board and charts, the new model's page, its failure browser and data copy (and
    # the manifest); thumbnails it shares with the other browsers are not rewritten
    allowed = {"index.html", MANIFEST, f"data/{new_id}.json", f"browse/{new_id}/index.html", *new_model}
    assert {rel for rel in changed if not rel.startswith(("boards/", "thumbs/"))} == allowed
    assert any(rel.startswith("boards/") for rel in changed)
    assert all(before[rel] == after[rel] for rel in before if rel.startswith(("models/", "browse/", "data/")))
    assert set(built.written) == changed - {MANIFEST}
    for f in results.glob(f"{third.stem}*"):  # the result taken away again: its pages go, the others stay
        f.unlink()
    gone = build_site([results], site, limit=2, top=2, progress=False)
    assert {f"browse/{new_id}/index.html", f"data/{new_id}.json", *new_model} <= set(gone.removed)
    assert not (site / "browse" / new_id).exists() and _state(site).keys() <= after.keys()
    assert _broken_links(site)[0] == []


def test_a_hostile_model_name_is_escaped_on_every_page(tmp_path):
    results = tmp_path / "results"
    path = _copy_result(_plug(1)[0], results)
    record = json.loads(path.read_text())
    record["model"]["arch"] = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    record["model"]["pretrained"] = '"><b>bold</b>'
    # a block this hnbench does not read yet (a throughput measurement): shown as it is, escaped
    record["throughput"] = {"device": "<b>gpu</b>", "images_per_s": 812.5, "params": {"image": 86, "total": 149}}
    path.write_text(json.dumps(record))
    site = tmp_path / "site"
    build_site([results], site, limit=2, progress=False)
    texts = {p: p.read_text() for p in site.rglob("*.html")}
    assert len(texts) >= 3
    for page, text in texts.items():
        assert "<script>alert" not in text and "<img src=x" not in text and "<b>bold</b>" not in text, page
    assert any("&lt;script&gt;alert" in t for t in texts.values())
    (model,) = (t for p, t in texts.items() if p.parent.name == "models")
    assert "images_per_s" in model and "812.5" in model and "params.total" in model and "&lt;b&gt;gpu" in model
    assert _broken_links(site)[0] == []  # the model page's file name is a slug, not the name


def test_a_model_page_shows_the_release_card_and_a_recorded_throughput(tmp_path):
    results = tmp_path / "results"
    path = _copy_result(_plug(1)[0], results)
    record = json.loads(path.read_text())
    record["model"]["extra"] = {"zoo": {"name": "longclip-b16"}}  # loaded as a registered release
    record["throughput"] = {"device": "cpu", "images_per_s": 40.0, "captions_per_s": 300.0,
                            "gflops": {"image": 4.4, "text": 2.9}, "peak_note": "no peak known for a CPU"}
    path.write_text(json.dumps(record))
    site = tmp_path / "site"
    build_site([results], site, limit=0, progress=False)
    (model,) = (p.read_text() for p in site.glob("models/*.html"))
    card = model[model.index("<h2>Card</h2>"):model.index("<h2>Throughput</h2>")]
    assert "longclip-b16" in card and "Long-CLIP B/16" in card and "published R@1" in card
    throughput = model[model.index("<h2>Throughput</h2>"):]
    assert "captions_per_s" in throughput and "gflops.image" in throughput and "not recorded" not in throughput


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["site", str(tmp_path / "nowhere"), "--output", str(tmp_path / "site")]) == 2
    assert_one_line_error(capsys.readouterr().err, "nowhere", "no such results")
    assert not (tmp_path / "site").exists()
    results = tmp_path / "results"
    _copy_result(_plug(1)[0], results)
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    assert main(["site", str(results), "--output", str(taken)]) == 2
    assert_one_line_error(capsys.readouterr().err, "notes.txt", "--overwrite")
    assert sorted(p.name for p in taken.iterdir()) == ["notes.txt"]
    assert main(["site", str(results), "--output", str(taken), "--top", "11"]) == 2
    assert_one_line_error(capsys.readouterr().err, "--top")
    assert main(["-q", "site", str(results), "--output", str(taken), "--overwrite", "--limit", "2"]) == 0
    assert (taken / "notes.txt").read_text() == "mine" and (taken / "index.html").is_file()
    assert "wrote" in capsys.readouterr().out
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.rmtree(taken / "data")
    (taken / "data").symlink_to(outside, target_is_directory=True)  # a folder of the site now leads elsewhere
    assert main(["-q", "site", str(results), "--output", str(taken), "--limit", "2"]) == 2
    assert_one_line_error(capsys.readouterr().err, "data", "outside the site")
    assert list(outside.iterdir()) == []


def test_a_broken_result_is_listed_as_skipped_and_the_rest_is_built(tmp_path, capsys):
    results = tmp_path / "results"
    path = _copy_result(_plug(1)[0], results)
    impossible = json.loads(path.read_text())
    impossible["metrics"]["t2i"]["R@1"] = 500.0
    impossible.pop("per_query")
    (results / "impossible.json").write_text(json.dumps(impossible))
    (results / "garbage.json").write_bytes(b"\xff\xfe not json")
    outside = tmp_path / "elsewhere.json"
    outside.write_text("{}")
    (results / "link.json").symlink_to(outside)
    os.mkfifo(results / "pipe.json")  # never opened for reading in a way that blocks
    site = tmp_path / "site"
    assert main(["-q", "site", str(results), "--output", str(site), "--limit", "0"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("skipped ")]
    assert len(lines) == 4 and all(len(line) < 400 for line in lines), out
    assert any("pipe.json" in line and "FIFO" in line for line in lines)
    assert any("impossible.json" in line and "R@" in line for line in lines)
    assert any("link.json" in line and "outside" in line for line in lines)
    index = (site / "index.html").read_text()
    assert "garbage.json" in index and "impossible.json" in index
    assert len(list(site.glob("models/*.html"))) == 1 and not (site / "browse").exists()


@pytest.fixture(scope="module")
def measured(tmp_path_factory, micro_config) -> dict[str, Path]:
    """A micro model's result on a 9-image manifest and a hardness run of it (recall joined), as hnbench writes them."""
    root = tmp_path_factory.mktemp("site-measured")
    data = write_jsonl(root / "m.jsonl", [{"image": p, "caption": c} for p, c in make_pairs(root, n=9)])
    results = root / "results"
    assert main(["-q", "eval", "--model", "hnb-micro", "--model-config", str(micro_config), "--dataset", str(data),
                 "--output", str(results / "eval"), "--num-workers", "0", "--no-cache"]) == 0
    (result,) = (results / "eval").glob("*.json")
    assert main(["-q", "hardness", "--dataset", str(data), "--model", "hnb-micro", "--model-config", str(micro_config),
                 "--batch-size", "4", "--n-batches", "2", "--no-cache", "--results", str(result),
                 "--output", str(results / "hard")]) == 0
    site = root / "site"
    build_site([results], site, limit=20, progress=False)
    return {"results": results, "site": site}


def test_a_hardness_report_in_the_results_gets_a_page_with_its_plots(measured):
    site = measured["site"]
    (page,) = site.glob("hardness/*/index.html")
    text = page.read_text()
    assert "R@1 by hardness" in text and "<img" in text and list(page.parent.glob("*.png"))
    assert "hardness/" in (site / "index.html").read_text()
    assert _broken_links(site)[0] == []


def _probe(page: Path, tmp: Path) -> tuple[dict, list[str]]:
    """Load a copy of ``page`` beside it (its relative links intact) with a probe appended: whether the page's
    script ran to its end, the document's width at a 1280-px window, and whether every image loaded."""
    copy = page.with_name(f"probe-{page.name}")
    text = page.read_text()
    cut = text.rindex("</body>")
    probe = ("<script>window.addEventListener('load', function () { var imgs = Array.prototype.slice.call("
             "document.images).filter(function (i) { return i.getAttribute('src'); });"
             "document.body.dataset.probe = JSON.stringify({ready: document.body.dataset.ready === '1', "
             "width: document.documentElement.scrollWidth, images: imgs.length, "
             "loaded: imgs.filter(function (i) { return i.complete && i.naturalWidth > 0; }).length}); });</script>")
    copy.write_text(text[:cut] + probe + text[cut:])
    try:
        run = _chromium(copy, tmp / f"profile-{page.parent.name}-{page.stem}", "--dump-dom", "--window-size=1280,900")
    finally:
        copy.unlink()
    assert run.returncode == 0, run.stderr[-2000:]
    found = re.search(r'data-probe="([^"]*)"', run.stdout)
    assert found, run.stdout[-2000:]
    console = [line for line in run.stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]
    return json.loads(found.group(1).replace("&quot;", '"')), console


def _check_in_chromium(site: Path, tmp: Path) -> None:
    pages = [site / "index.html", next(site.glob("boards/*.html")), next(site.glob("models/*.html")),
             next(site.glob("browse/*/index.html")), *site.glob("hardness/*/index.html")]
    for page in pages:
        probe, console = _probe(page, tmp)
        assert console == [], (page, console)
        assert probe["ready"] and probe["width"] <= 1280, (page, probe)
        assert probe["loaded"] == probe["images"], (page, probe)


@needs_browser
@pytest.mark.slow
def test_site_pages_run_without_script_errors_and_fit_1280_px_in_chromium(small, measured, tmp_path):
    for site in (small["site"], measured["site"]):
        _check_in_chromium(site, tmp_path)


@needs_browser
@pytest.mark.slow
def test_the_committed_results_build_a_site_whose_links_resolve_in_chromium(tmp_path):
    site = tmp_path / "site"
    built = build_site([COMMITTED], site, baseline=BASELINE, limit=3, top=3, progress=False)
    assert built.skipped == [] and built.browsers > 0
    broken, n = _broken_links(site)
    assert broken == [] and n > 1000
    _check_in_chromium(site, tmp_path)
