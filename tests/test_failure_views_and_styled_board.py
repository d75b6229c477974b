"""Failure views that do not drown, and the styled HTML board: the near-duplicate-only word diff (browse and
the hardness report), browse thumbnails, names and row height, and the leaderboard page — in a real headless
Chromium from file://, measured by a probe script appended to a copy of each page."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from conftest import make_pairs, write_jsonl
from PIL import Image
from test_browse import RED, _chromium, needs_browser

from hnbench.cli import main
from hnbench.hardness.markdown import highlight, pair_block, word_diff
from hnbench.hardness.schema import Pair
from hnbench.pages import textdiff
from hnbench.pages.build import browse
from hnbench.results.compare import model_label
from hnbench.results.record import read_result

UNRELATED = "a wooden bench in a sunny park beside an old oak tree, with two pigeons on the gravel path"


class _Probe(HTMLParser):
    """The body's ``data-ready`` and ``data-probe`` (JSON) attributes of a dumped DOM."""

    def __init__(self) -> None:
        super().__init__()
        self.ready = False
        self.probe: dict = {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body":
            self.ready = a.get("data-ready") == "1"
            self.probe = json.loads(a.get("data-probe") or "{}")


def _probe(page: Path, tmp: Path, js: str, *extra: str) -> tuple[_Probe, list[str]]:
    """Load a copy of ``page`` with ``js`` appended (it runs after the page's own script and returns a
    JSON-able value, stored as ``body[data-probe]``); the dumped DOM and the console lines."""
    copy = tmp / f"probed-{page.parent.name}-{page.name}"
    text = page.read_text()
    cut = text.rindex("</body>")
    copy.write_text(text[:cut] + f"<script>document.body.dataset.probe = JSON.stringify((function () {{{js}}})());"
                    "</script>" + text[cut:])
    run = _chromium(copy, tmp / f"profile-{copy.stem}", "--dump-dom", "--window-size=1400,900", *extra)
    assert run.returncode == 0, run.stderr[-2000:]
    dom = _Probe()
    dom.feed(run.stdout)
    console = [line for line in run.stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]
    return dom, console


def _screenshot_is_not_blank(page: Path, tmp: Path) -> None:
    shot = tmp / f"{page.stem}-shot.png"
    run = _chromium(page, tmp / f"profile-shot-{page.stem}", f"--screenshot={shot}", "--window-size=1400,900")
    assert run.returncode == 0 and shot.exists()
    pixels = np.asarray(Image.open(shot).convert("L"), dtype=float)
    assert pixels.std() > 10 and len(np.unique(pixels)) > 20  # not a blank page


# --- the word diff: near-duplicates only ----------------------------------------------------------
def test_word_diff_marks_near_duplicates_only():
    assert textdiff.changed_words(RED, UNRELATED) == ([], [])  # unrelated: shown plain
    assert textdiff.changed_words(RED, RED.replace("red", "green")) == (["red"], ["green"])
    assert textdiff.similarity(RED, UNRELATED) < textdiff.NEAR_DUPLICATE <= textdiff.similarity(RED, RED[:40])
    # the threshold is defined once and said in words on the pages
    assert f"≥ {textdiff.NEAR_DUPLICATE:g}" in textdiff.RULE and "shown plain" in textdiff.RULE
    # the hardness report: no bold, no difference snippets, and it says why
    a, b = highlight(RED, UNRELATED)
    assert "**" not in a + b and word_diff(RED, UNRELATED) == []
    block = pair_block(1, Pair(0, 1, "x", "y", 0.9, RED, UNRELATED))
    sim = textdiff.similarity(RED, UNRELATED)
    assert f"differences: not marked (unrelated captions: word similarity {sim:.2f} < 0.5)" in block
    assert "**" not in block.split("\n", 1)[1]  # below the head line (whose similarity is bold)


@pytest.fixture(scope="module")
def results(tmp_path_factory, micro_config) -> dict[str, Path]:
    """Two micro-model results (context lengths 8 and 24) on a 10-image manifest with one unrelated caption."""
    root = tmp_path_factory.mktemp("pages")
    pairs = make_pairs(root, n=10)
    rows = [{"image": p, "caption": c} for p, c in pairs[:-1]] + [{"image": pairs[-1][0], "caption": UNRELATED}]
    data = write_jsonl(root / "m.jsonl", rows)
    out = {"data": data}
    for name, ctx in (("a", 8), ("b", 24)):
        assert main(["-q", "eval", "--model", "hnb-micro", "--model-config", str(micro_config), "--dataset", str(data),
                     "--output", str(root / "res" / name), "--num-workers", "0", "--context-length", str(ctx),
                     "--no-cache"]) == 0
        (out[name],) = (root / "res" / name).glob("*.json")
    return out


_BROWSE_PROBE = """
var q = function (s) { return Array.prototype.slice.call(document.querySelectorAll(s)); };
var imgs = q('#queries img'), rows = q('#queries tbody tr'), items = q('#queries .item');
rows.forEach(function (tr) { tr.style.contentVisibility = 'visible'; });  // lay out every row, not just those in view
var r = {thumb: imgs.reduce(function (m, i) { return Math.min(m, i.getBoundingClientRect().width); }, 1e9),
         rows: rows.length, rowMax: rows.reduce(function (m, tr) { return Math.max(m, tr.offsetHeight); }, 0),
         names: items.map(function (it) { var n = it.querySelector('.name'); return [it.querySelector('img').alt,
                                                                                  n ? n.textContent : '']; }),
         i2tNames: q('#queries tr[data-direction="i2t"] .caps .cap').map(function (c) {
           return c.querySelector('small') ? c.querySelector('small').textContent : ''; }),
         marks: q('#queries mark').length};
var z = document.getElementById('zoom');
imgs[0].click();
r.zoomShown = getComputedStyle(z).display !== 'none';
r.zoomSame = z.querySelector('img').src === imgs[0].src;
r.zoomWidth = z.querySelector('img').getBoundingClientRect().width;
r.zoomName = z.textContent;
z.click();
r.zoomClosed = getComputedStyle(z).display === 'none';
var cap = document.querySelector('#queries .cap'), h = cap.offsetHeight;
cap.click();
r.capGrows = cap.offsetHeight >= h && cap.classList.contains('open');
return r;
"""


@needs_browser
def test_browse_thumbnails_enlarge_items_are_named_and_rows_are_compact(results, tmp_path):
    """Thumbnails of 128 px that enlarge on a click, every retrieved item named, rows of at most 240 px,
    and the unrelated caption shown without marks (with the rule said on the page)."""
    page = browse(results["a"], tmp_path / "page", limit=0, top=3, progress=False)
    html = page.read_text()
    assert textdiff.RULE in html
    dom, console = _probe(page, tmp_path, _BROWSE_PROBE)
    assert console == [] and dom.ready, console
    p = dom.probe
    assert p["rows"] == 20 and p["thumb"] >= 128
    assert len(p["names"]) == 10 * 3 and all(alt and alt in name for alt, name in p["names"])
    assert len(p["i2tNames"]) == 10 * 3 and all(re.fullmatch(r"-?\d\.\d{3} \S+:", n) for n in p["i2tNames"])
    assert p["zoomShown"] and p["zoomSame"] and p["zoomWidth"] >= 4 * p["thumb"] and p["zoomClosed"]
    assert p["capGrows"] and p["rowMax"] <= 240
    # a caption diffed against the unrelated one is shown plain; near-duplicates still carry marks
    caps = re.findall(r'<div class="cap[^"]*">(.*?)</div>', html, flags=re.S)
    assert any("wooden bench" in c for c in caps) and p["marks"] > 0
    assert all("<mark>" not in c for c in caps if "wooden bench" in c)


def _many_pairs(root: Path, n: int) -> list[dict[str, str]]:
    """``n`` 48-px images of a square in a seeded colour and place, each with its caption."""
    rng = np.random.default_rng(0)
    (root / "images").mkdir()
    rows = []
    for i in range(n):
        rgb, (x, y) = rng.integers(40, 255, size=3), rng.integers(0, 32, size=2)
        im = Image.new("RGB", (48, 48), (20, 20, 20))
        im.paste(tuple(int(v) for v in rgb), (int(x), int(y), int(x) + 16, int(y) + 16))
        im.save(root / "images" / f"{i:04d}.png")
        rows.append({"image": f"images/{i:04d}.png", "caption": f"a square of colour {rgb[0]} {rgb[1]} {rgb[2]} at "
                                                                f"{x} {y} on a dark background"})
    return rows


@pytest.mark.slow
@needs_browser
def test_browse_page_of_2000_queries_shows_every_row_compactly_in_chromium(micro_config, tmp_path):
    """A 1,000-image manifest: 2,000 query rows, every one there, no console message, rows compact."""
    data = write_jsonl(tmp_path / "big.jsonl", _many_pairs(tmp_path, 1000))
    assert main(["-q", "eval", "--model", "hnb-micro", "--model-config", str(micro_config), "--dataset", str(data),
                 "--output", str(tmp_path / "res"), "--num-workers", "0", "--no-cache", "--no-ci"]) == 0
    (result,) = (tmp_path / "res").glob("*.json")
    page = browse(result, tmp_path / "page", limit=0, progress=False)
    dom, console = _probe(page, tmp_path, _BROWSE_PROBE)
    assert console == [] and dom.ready, console
    p = dom.probe
    assert p["rows"] == 2000 and p["thumb"] >= 128 and p["rowMax"] <= 240
    assert len(p["names"]) == 1000 * 5 and all(alt and alt in name for alt, name in p["names"])
    _screenshot_is_not_blank(page, tmp_path)


_BOARD_PROBE = """
var q = function (s, e) { return Array.prototype.slice.call((e || document).querySelectorAll(s)); };
var tds = q('td');
var lines = function (td) { var s = getComputedStyle(td);
  return (td.clientHeight - parseFloat(s.paddingTop) - parseFloat(s.paddingBottom)) / parseFloat(s.lineHeight); };
var table = document.querySelector('table'), heads = q('th', table.tHead);
var col = heads.map(function (h) { return h.textContent.trim(); }).indexOf('t2i R@1');
var column = function () { return q('tbody tr', table).map(function (tr) { return tr.cells[0].textContent + '|' +
  tr.cells[col].textContent; }); };
var before = column();
heads[col].click(); var asc = column();
heads[col].click(); var desc = column();
var td = getComputedStyle(tds[0]);
return {tables: q('table').length, sortable: q('th.sortable').length, ths: q('th').length, before: before, asc: asc,
        desc: desc, maxLines: tds.reduce(function (m, t) { return Math.max(m, lines(t)); }, 0),
        font: getComputedStyle(document.body).fontFamily, border: td.borderTopWidth + ' ' + td.borderTopStyle,
        styles: document.styleSheets.length};
"""


@needs_browser
def test_styled_board_sorts_every_column_and_keeps_cells_on_one_line_in_chromium(results, tmp_path):
    """``--format html --ci --baseline``: styled like the browse page, every column sortable, no score cell over
    two lines, self-contained, no console message, a non-blank screenshot."""
    board = tmp_path / "board" / "index.html"
    base = read_result(results["a"]).model  # two micro models, told apart by their fingerprints
    assert main(["-q", "leaderboard", str(results["a"].parents[1]), "--format", "html", "--ci", "--baseline",
                 f"{model_label(base)} [{base['fingerprint'][:8]}]", "--output", str(board)]) == 0
    html = board.read_text()
    assert not re.search(r"https?://|<link|@import|url\(|<img|src=", html)  # self-contained: nothing fetched
    assert html.count("<table") >= 1 and "±" not in html and "[" in html  # --ci intervals are there
    dom, console = _probe(board, tmp_path, _BOARD_PROBE)
    assert console == [] and dom.ready, console
    p = dom.probe
    assert p["tables"] == html.count("<table") and p["sortable"] == p["ths"] > 0 and p["styles"] == 1
    assert "Times" not in p["font"] and "system-ui" in p["font"] and p["border"] == "1px solid"
    assert p["maxLines"] < 2.5  # a --ci --baseline cell: on one line, never wrapped over three
    key = [float(x.split("|")[1].split()[0]) for x in p["asc"]]
    assert key == sorted(key) and [float(x.split("|")[1].split()[0]) for x in p["desc"]] == sorted(key, reverse=True)
    assert sorted(p["asc"]) == sorted(p["before"])  # the same rows, reordered
    _screenshot_is_not_blank(board, tmp_path)
