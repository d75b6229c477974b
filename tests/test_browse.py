"""The browse page: the word diff, refusals, and the page itself in a real headless Chromium from file://."""

from __future__ import annotations

import json
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from conftest import make_pairs, write_jsonl, write_v1_copy
from PIL import Image

from hnbench.cli import main
from hnbench.pages.build import browse
from hnbench.pages.textdiff import changed_words, diff_words
from hnbench.results.record import read_per_query, read_result

RED = "a small red circle above a large blue square, drawn with a thin line"
GREEN = "a small green circle above a large blue triangle, drawn with a thin line"


def test_diff_marks_exactly_the_differing_words():
    assert changed_words(RED, GREEN) == (["red", "square"], ["green", "triangle"])
    assert changed_words(RED, RED) == ([], [])
    a, b = diff_words("The cat sat.", "the cat sat on the mat")  # case and punctuation never count
    assert [t for t, c in a if c] == [] and [t for t, c in b if c] == ["on", "the", "mat"]
    assert "".join(t for t, _ in a) == "The cat sat." and "".join(t for t, _ in b) == "the cat sat on the mat"


# --- a headless browser ---------------------------------------------------------------------------
def _browser() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


needs_browser = pytest.mark.skipif(_browser() is None, reason="no headless Chromium on PATH (CI installs Debian's "
                                                              "`chromium` in .ci/run; apt-get install chromium)")


def _chromium(page: Path, tmp: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [_browser(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", f"--user-data-dir={tmp}",
           "--enable-logging=stderr", "--v=0", "--virtual-time-budget=3000", *extra, page.resolve().as_uri()]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


class _Dom(HTMLParser):
    """Query rows (direction, marked words per cell) and embedded images of a dumped DOM."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict] = []
        self.images: list[str] = []
        self.ready = False
        self._in_mark = False
        self._cap: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body":
            self.ready = a.get("data-ready") == "1"
        if tag == "tr" and a.get("class") == "query":
            self.rows.append({"direction": a["data-direction"], "status": a.get("data-status"), "caps": []})
        if tag == "img" and self.rows:
            self.images.append(a.get("src") or "")
        if tag == "div" and "cap" in (a.get("class") or "").split() and self.rows:
            self._cap = []
            self.rows[-1]["caps"].append(self._cap)
        self._in_mark = self._in_mark or tag == "mark"

    def handle_endtag(self, tag):
        self._in_mark = self._in_mark and tag != "mark"

    def handle_data(self, data):
        if self._in_mark and self._cap is not None:
            self._cap.append(data)


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory, micro_config) -> dict[str, Path]:
    """Two micro-model results (different context lengths) on a 9-image manifest, and a hardness run of it."""
    root = tmp_path_factory.mktemp("browse")
    data = write_jsonl(root / "m.jsonl", [{"image": p, "caption": c} for p, c in make_pairs(root, n=9)])
    out = {"data": data}
    for name, ctx in (("a", 8), ("b", 24)):
        assert main(["-q", "eval", "--model", "hnb-micro", "--model-config", str(micro_config), "--dataset", str(data),
                     "--output", str(root / name), "--num-workers", "0", "--context-length", str(ctx),
                     "--no-cache"]) == 0
        (out[name],) = (root / name).glob("*.json")
    assert main(["-q", "hardness", "--dataset", str(data), "--model", "hnb-micro", "--model-config", str(micro_config),
                 "--batch-size", "4", "--n-batches", "2", "--no-cache", "--output", str(root / "hard")]) == 0
    out["hardness"] = root / "hard" / "hardness.json"
    return out


def _load(page: Path, tmp: Path) -> tuple[_Dom, str]:
    run = _chromium(page, tmp / "profile", "--dump-dom")
    assert run.returncode == 0, run.stderr[-2000:]
    dom = _Dom()
    dom.feed(run.stdout)
    return dom, run.stderr


@needs_browser
def test_page_in_headless_chromium(evaluated, tmp_path):
    top = 3
    page = browse(evaluated["a"], tmp_path / "page", compare=evaluated["b"], hardness=evaluated["hardness"], limit=0,
                  top=top, progress=False)
    dom, stderr = _load(page, tmp_path)
    console = [line for line in stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]
    assert console == [] and dom.ready  # the script ran to its end without a console message
    res = read_result(evaluated["a"])
    n = {d: res.metrics[d]["n_queries"] for d in ("t2i", "i2t")}
    assert [r["direction"] for r in dom.rows].count("t2i") == n["t2i"] == 9
    assert [r["direction"] for r in dom.rows].count("i2t") == n["i2t"] == 9
    # t2i: the true image and the top images; i2t: the query image — every one filled from an embedded JPEG
    assert len(dom.images) == n["t2i"] * (1 + top) + n["i2t"]
    assert all(src.startswith("data:image/jpeg;base64,") for src in dom.images)
    # every disagreement at K=1 is there, labelled with the result that is right: the page's (the model) or
    # --compare's (the baseline, as compare's first result)
    frames = [read_per_query(read_result(evaluated[k])) for k in ("a", "b")]
    for d in ("t2i", "i2t"):
        a1, b1 = ((f[f.direction == d].sort_values("query_index")["rank"] == 1).to_numpy() for f in frames)
        statuses = [r["status"] for r in dom.rows if r["direction"] == d]
        assert statuses.count("model only") == int((a1 & ~b1).sum())
        assert statuses.count("baseline only") == int((~a1 & b1).sum())
    html = page.read_text()
    assert "Recall by hardness" in html and "http://" not in html and "https://" not in html
    shot = tmp_path / "shot.png"
    run = _chromium(page, tmp_path / "profile2", f"--screenshot={shot}", "--window-size=1200,900")
    assert run.returncode == 0 and shot.exists()
    pixels = np.asarray(Image.open(shot).convert("L"), dtype=float)
    assert pixels.std() > 10 and len(np.unique(pixels)) > 20  # not a blank page


@needs_browser
def test_page_marks_the_differing_words_of_a_crafted_pair(micro_config, tmp_path):
    """Two images whose captions differ in two words: each t2i row's best wrong item is the other image."""
    for i, colour in enumerate(("red", "green")):
        Image.new("RGB", (32, 32), (200 * (i == 0), 200 * (i == 1), 0)).save(tmp_path / f"{colour}.png")
    data = write_jsonl(tmp_path / "pair.jsonl", [{"image": "red.png", "caption": RED},
                                                 {"image": "green.png", "caption": GREEN}])
    assert main(["-q", "eval", "--model", "hnb-micro", "--model-config", str(micro_config), "--dataset", str(data),
                 "--output", str(tmp_path / "res"), "--num-workers", "0", "--no-cache", "--no-ci"]) == 0
    (result,) = (tmp_path / "res").glob("*.json")
    dom, _ = _load(browse(result, tmp_path / "page", progress=False), tmp_path)
    t2i = {tuple(tuple(c) for c in r["caps"]) for r in dom.rows if r["direction"] == "t2i"}
    # query caption, then the wrong image's caption: exactly the two differing words marked in each
    assert t2i == {(("red", "square"), ("green", "triangle")), (("green", "triangle"), ("red", "square"))}
    i2t = [r["caps"] for r in dom.rows if r["direction"] == "i2t"]
    for caps in i2t:  # true caption vs the other caption, then both retrieved captions against the true one
        marked = {tuple(c) for c in caps[1:]}
        assert tuple(caps[0]) in {("red", "square"), ("green", "triangle")} and () in marked


def test_old_per_query_schema_and_refusals(evaluated, tmp_path, capsys):
    """A version-1 per-query file still browses (best wrong item only, with a note); bad input exits 2."""
    copy = write_v1_copy(evaluated["a"], tmp_path / "v1")
    html = browse(copy, tmp_path / "old", limit=0, progress=False).read_text()
    assert "per-query schema 1" in html and html.count('class="query"') == 18
    assert html.count('class="item') == 9  # each t2i row: its best wrong image only

    out = tmp_path / "refused"
    assert main(["-q", "browse", str(evaluated["a"]), "--output", str(out), "--top", "11"]) == 2
    assert "--top" in capsys.readouterr().err
    d = json.loads(evaluated["a"].read_text())
    d["dataset"]["fingerprint"] = "0" * 16
    (tmp_path / "fp" / evaluated["a"].name).parent.mkdir()
    (tmp_path / "fp" / evaluated["a"].name).write_text(json.dumps(d))
    shutil.copy(evaluated["a"].parent / d["per_query"], tmp_path / "fp")
    assert main(["-q", "browse", str(tmp_path / "fp" / evaluated["a"].name), "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "0000000000000000" in err and "fingerprint" in err
    assert not out.exists()
