"""Every generated format escapes what it takes from files and data — Markdown (leaderboard, compare, hardness
report and comparison), the browse page's embedded JSON, and CSV cells (near_duplicates.csv, errors_*.csv, the
leaderboard CSV) against spreadsheet formulas."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
from conftest import make_pairs, write_jsonl
from markdown_it import MarkdownIt
from test_browse import _load, needs_browser
from test_reliability_results import _stored_pair

from hnbench.cli import main

HOSTILE = "<img src=x onerror=alert(1)>|<script>alert(2)</script>"
FORMULAS = ["=HYPERLINK(\"http://x\",\"y\")", "+SUM(1,2)", "-2+3", "@cmd", "\tx", "\rdanger"]


def _html(md: str) -> str:
    """``md`` as a CommonMark renderer with raw HTML on and GitHub's tables shows it."""
    return MarkdownIt("commonmark", {"html": True}).enable("table").render(md)


def _check_markdown(md: str) -> None:
    """No tag of the hostile text is live, its text is shown, and every table row has its header's cells."""
    html = _html(md)
    assert re.search(r"<img[^>]*onerror", html) is None and "<script" not in html, html  # plots are images
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    for table in re.findall(r"<table>.*?</table>", html, flags=re.S):
        heads = len(re.findall(r"<th[ >]", table))
        rows = re.findall(r"<tr>(.*?)</tr>", table, flags=re.S)[1:]
        assert rows and all(len(re.findall(r"<td[ >]", r)) == heads for r in rows), table


def test_every_markdown_output_escapes_names_and_captions(micro_config, tmp_path):
    res = tmp_path / "res"
    a = _stored_pair(res, "base", [1, 1, 2, 2])
    b = _stored_pair(res, "hnb-micro", [1, 2, 3, 1], pretrained=HOSTILE)
    assert main(["-q", "leaderboard", str(res), "--baseline", "base (random init)", "--ci", "--output",
                 str(tmp_path / "lb.md")]) == 0
    _check_markdown((tmp_path / "lb.md").read_text())
    assert main(["-q", "compare", str(a), str(b), "--output", str(tmp_path / "cmp")]) == 0
    _check_markdown((tmp_path / "cmp" / "compare.md").read_text())
    # the hardness report (caption set named after its file; near-duplicate captions quoted) and comparison
    caps = []
    for name in (HOSTILE.replace("/", "-"), "plain"):
        caps.append(tmp_path / f"{name}.txt")
        caps[-1].write_text("\n".join(f"{HOSTILE} a red square | number {i}" for i in range(6)) + "\n")
    argv = ["-q", "hardness", "--model", "hnb-micro", "--model-config", str(micro_config), "--batch-size", "4",
            "--n-batches", "2", "--threshold", "-1", "--no-cache", "--output", str(tmp_path / "hard")]
    assert main([*argv, "--captions", str(caps[0]), "--captions", str(caps[1])]) == 0
    reports = sorted((tmp_path / "hard").glob("*/report.md"))
    assert len(reports) == 2
    for md in [*reports, tmp_path / "hard" / "comparison.md"]:
        _check_markdown(md.read_text())


@pytest.mark.slow
@needs_browser
def test_browse_script_runs_with_comment_and_script_openers_in_ids(micro_config, tmp_path):
    pairs = make_pairs(tmp_path, n=4)
    ids = ["<!--<script>", "</script><script>", "<!--", "plain"]
    data = write_jsonl(tmp_path / "m.jsonl", [{"id": i, "image": p, "caption": c} for i, (p, c) in zip(ids, pairs)])
    assert main(["-q", "eval", "--model", "hnb-micro", "--model-config", str(micro_config), "--dataset", str(data),
                 "--output", str(tmp_path / "res"), "--num-workers", "0", "--no-cache", "--no-ci"]) == 0
    (result,) = (tmp_path / "res").glob("*.json")
    assert main(["-q", "browse", str(result), "--output", str(tmp_path / "page"), "--top", "2"]) == 0
    dom, stderr = _load(tmp_path / "page" / "index.html", tmp_path)
    assert dom.ready, stderr[-2000:]  # the script ran to its end: thumbnails, sort and filter are wired
    assert len(dom.images) == 4 * (1 + 2) + 4 and all(s.startswith("data:image/jpeg;base64,") for s in dom.images)
    script = (tmp_path / "page" / "index.html").read_text().rsplit("<script>", 1)[1]
    assert "<!--" not in script and "<script" not in script.split("</script>")[0]


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:  # a carriage return inside a cell stays one
        return list(csv.DictReader(f))


def _neutral(cell: str) -> bool:
    """A cell a spreadsheet does not run: no formula start, or a plain number."""
    return not cell.startswith(("=", "+", "-", "@", "\t", "\r")) or re.fullmatch(r"-?\d+(\.\d+)?", cell) is not None


def test_csv_outputs_neutralise_formulas_and_keep_numbers(micro_config, tmp_path):
    pairs = make_pairs(tmp_path, n=len(FORMULAS))
    data = write_jsonl(tmp_path / "m.jsonl", [{"id": f, "image": p, "caption": f"{f} {c}"}
                                              for f, (p, c) in zip(FORMULAS, pairs)])
    assert main(["-q", "eval", "--model", "hnb-micro", "--model-config", str(micro_config), "--dataset", str(data),
                 "--output", str(tmp_path / "res"), "--num-workers", "0", "--no-cache", "--no-ci"]) == 0
    (result,) = (tmp_path / "res").glob("*.json")
    out = tmp_path / "hard"
    assert main(["-q", "hardness", "--dataset", str(data), "--model", "hnb-micro", "--model-config",
                 str(micro_config), "--batch-size", "3", "--n-batches", "2", "--threshold", "-1", "--no-cache",
                 "--results", str(result), "--output", str(out)]) == 0
    near, errors = _rows(out / "near_duplicates.csv"), _rows(out / "errors_0.csv")
    assert near and errors
    for rows in (near, errors):
        assert all(_neutral(v) for r in rows for v in r.values()), rows
    quoted = {r["a_caption"] for r in near} | {r["b_caption"] for r in near}
    assert any(q.startswith("'=HYPERLINK") for q in quoted)  # the caption itself, one quote in front
    assert all(float(r["similarity"]) == float(r["similarity"]) for r in near)  # numbers stay numbers
    # the leaderboard CSV: a formula for a name is quoted, a negative delta stays a number
    res = tmp_path / "lb"
    _stored_pair(res, "base", [1, 1, 1, 1])
    _stored_pair(res, "=1+1", [1, 2, 2, 2])
    assert main(["-q", "leaderboard", str(res), "--format", "csv", "--baseline", "base (random init)", "--output",
                 str(tmp_path / "lb.csv")]) == 0
    board = {r["arch"]: r for r in _rows(tmp_path / "lb.csv")}
    assert set(board) == {"base", "'=1+1"} and board["'=1+1"]["model"] == "'=1+1 (random init)"
    assert board["'=1+1"]["delta t2i R@1"] == "-75.0" and all(_neutral(v) for r in board.values() for v in r.values())
    assert json.loads((tmp_path / ".lb.csv.inputs.json").read_text())["format"] == "csv"
