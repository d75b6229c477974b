"""Derived outputs (compare, browse, hardness, leaderboard) are never replaced by ones made from other inputs
unless --overwrite; a rerun from the same inputs replaces its own; an --output of the wrong kind is one line;
hardness outputs are one set (README "What hnbench guarantees")."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from conftest import assert_one_line_error, make_pairs, snapshot, write_jsonl

from hnbench.cli import main


@pytest.fixture(scope="module")
def results(tmp_path_factory, micro_config) -> dict[str, Path]:
    """Two micro-model results (context 8 and 16) on one manifest."""
    root = tmp_path_factory.mktemp("outputs")
    data = write_jsonl(root / "m.jsonl", [{"image": p, "caption": c} for p, c in make_pairs(root, n=8)])
    out = {}
    for name, ctx in (("a", 8), ("b", 16)):
        assert main(["-q", "eval", "--model", "hnb-micro", "--model-config", str(micro_config), "--dataset", str(data),
                     "--output", str(root / name), "--num-workers", "0", "--context-length", str(ctx),
                     "--no-cache", "--no-ci"]) == 0
        (out[name],) = (root / name).glob("*.json")
    return out


def _same_then_other_then_overwrite(argv_same: list[str], argv_other: list[str], out: Path, capsys,
                                    name: str) -> None:
    assert main(argv_same) == 0
    assert name in snapshot(out)
    assert main(argv_same) == 0  # a rerun from the same inputs replaces its own output
    first = snapshot(out)
    capsys.readouterr()
    assert main(argv_other) == 2
    assert_one_line_error(capsys.readouterr().err, str(out / name), "other inputs", "--overwrite")
    assert snapshot(out) == first  # nothing written
    assert main([*argv_other, "--overwrite"]) == 0
    assert snapshot(out)[name] != first[name]
    assert main(argv_other) == 0  # now the other inputs' output is the one there


def test_compare_output_is_not_replaced_by_another_comparison(results, tmp_path, capsys):
    out = tmp_path / "cmp"
    a, b = str(results["a"]), str(results["b"])
    _same_then_other_then_overwrite(["-q", "compare", a, b, "--output", str(out)],
                                    ["-q", "compare", b, a, "--output", str(out)], out, capsys, "compare.json")


def test_browse_page_is_not_replaced_by_another_results_page(results, tmp_path, capsys):
    out = tmp_path / "page"
    _same_then_other_then_overwrite(["-q", "browse", str(results["a"]), "--output", str(out)],
                                    ["-q", "browse", str(results["b"]), "--output", str(out)], out, capsys,
                                    "index.html")


def test_hardness_report_is_not_replaced_by_another_data_or_setting(micro_config, tmp_path, capsys):
    (tmp_path / "a.txt").write_text("\n".join(f"a red square number {i} on a dark background" for i in range(12)))
    (tmp_path / "b.txt").write_text("\n".join(f"{w} bird flying over a lake" for w in "abcdefghijkl"))
    out = tmp_path / "h"
    base = ["-q", "hardness", "--model", "hnb-micro", "--model-config", str(micro_config), "--in-batch-size", "4",
            "--n-batches", "2", "--output", str(out)]
    _same_then_other_then_overwrite([*base, "--captions", str(tmp_path / "a.txt")],
                                    [*base, "--captions", str(tmp_path / "b.txt")], out, capsys, "hardness.json")
    before = snapshot(out)
    assert main([*base, "--captions", str(tmp_path / "b.txt"), "--threshold", "0.5"]) == 2  # a setting differs
    assert_one_line_error(capsys.readouterr().err, "hardness.json", "other inputs")
    assert snapshot(out) == before
    # several caption sets: the top-level comparison is protected the same way, before any model loads
    many = [*base[:-1], str(tmp_path / "many"), "--captions", str(tmp_path / "a.txt")]
    assert main([*many, "--captions", str(tmp_path / "b.txt")]) == 0
    kept = snapshot(tmp_path / "many")
    capsys.readouterr()
    for other in (["--captions", str(tmp_path / "a.txt"), "--model", "no-such-model"],  # other data and models
                  ["--captions", str(tmp_path / "b.txt"), "--label-field", "family"]):  # the same, another label
        assert main([*many, *other]) == 2
        assert_one_line_error(capsys.readouterr().err, "comparison.json", "other inputs")
    assert snapshot(tmp_path / "many") == kept


# --- a board over another's output, an --output of the wrong kind, a mixed hardness set ---------
def test_leaderboard_output_is_not_replaced_by_another_board_or_a_file_it_did_not_write(results, tmp_path,
                                                                                                capsys):
    out = tmp_path / "boards"
    a, b = str(results["a"]), str(results["b"])
    _same_then_other_then_overwrite(["-q", "leaderboard", a, "--output", str(out / "lb.md")],
                                    ["-q", "leaderboard", b, "--output", str(out / "lb.md")], out, capsys, "lb.md")
    mine = tmp_path / "notes.md"  # a file hnbench did not write
    mine.write_text("my notes\n")
    capsys.readouterr()
    assert main(["-q", "leaderboard", a, "--output", str(mine)]) == 2
    assert_one_line_error(capsys.readouterr().err, str(mine), "other inputs", "--overwrite")
    assert mine.read_text() == "my notes\n" and sorted(p.name for p in tmp_path.iterdir()) == ["boards", "notes.md"]


def test_output_that_is_a_file_or_a_folder_is_refused_in_one_line(results, tmp_path, capsys):
    a, b = str(results["a"]), str(results["b"])
    file = tmp_path / "taken.txt"
    file.write_text("mine\n")
    folder = tmp_path / "folder"
    folder.mkdir()
    cases = [(["compare", a, b, "--output", str(file)], (str(file), "is a file, not a directory")),
             (["browse", a, "--output", str(file)], (str(file), "is a file, not a directory")),
             (["leaderboard", a, "--output", str(file / "lb.md")], (str(file), "is a file")),
             (["leaderboard", a, "--output", str(folder)], (str(folder), "is a directory"))]
    before = snapshot(tmp_path)
    for argv, words in cases:
        capsys.readouterr()
        assert main(["-q", *argv]) == 2, argv
        assert_one_line_error(capsys.readouterr().err, "--output", *words)
    assert snapshot(tmp_path) == before and list(folder.iterdir()) == []


def test_hardness_outputs_are_one_set_and_browse_refuses_a_mixed_one(results, micro_config, tmp_path,
                                                                                  capsys):
    data = str(results["a"].parent.parent / "m.jsonl")
    out = tmp_path / "hard"
    base = ["-q", "hardness", "--dataset", data, "--model", "hnb-micro", "--model-config", str(micro_config),
            "--in-batch-size", "4", "--n-batches", "2", "--no-cache", "--output", str(out)]
    assert main([*base, "--context-length", "8"]) == 0
    old_json = (out / "hardness.json").read_bytes()
    summary = json.loads(old_json)
    assert set(summary["digests"]) == set(summary["files"]) - {"summary"}  # every file of the set, by sha256
    assert all(hashlib.sha256((out / summary["files"][k]).read_bytes()).hexdigest() == v
               for k, v in summary["digests"].items())
    page = ["-q", "browse", str(results["a"]), "--hardness", str(out / "hardness.json"), "--output",
            str(tmp_path / "page")]
    assert main(page) == 0  # a consistent set browses
    assert main([*base, "--context-length", "16", "--overwrite"]) == 0  # a rerun with other embeddings ...
    (out / "hardness.json").write_bytes(old_json)  # ... killed (-9) after its parquet, before its JSON
    before = snapshot(tmp_path)
    capsys.readouterr()
    assert main([*page, "--overwrite"]) == 2
    assert_one_line_error(capsys.readouterr().err, "hardness.json", "captions.parquet", "different runs")
    assert snapshot(tmp_path) == before
