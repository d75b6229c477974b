"""Derived outputs (compare, browse, hardness) are never replaced by ones made from other inputs unless
--overwrite; a rerun from the same inputs replaces its own (README "What hnbench guarantees")."""

from __future__ import annotations

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
    base = ["-q", "hardness", "--model", "hnb-micro", "--model-config", str(micro_config), "--batch-size", "4",
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
