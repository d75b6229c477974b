"""A result file's counts (images, captions, queries, skipped items, truncated texts) are read as counts: a whole
number from 0 to results.MAX_COUNT, or the file is refused by name, so no table shows 10**30 images as measured.

A real result (the micro model on a real 12-image manifest); its counts are then edited in copies.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import assert_one_line_error, make_pairs, write_jsonl

from hnbench.cli import main
from hnbench.evaluation.evaluate import evaluate
from hnbench.results.leaderboard import collect
from hnbench.results.record import MAX_COUNT, ResultFormatError, read_result

# (group, key inside it, value) edits of a real result; every one is a count no real run records
EDITS = {
    "images-1e30": (("dataset",), "n_images", 10**30),
    "captions-negative": (("dataset",), "n_captions", -3),
    "queries-fraction": (("metrics", "t2i"), "n_queries", 2.5),
    "tied-boolean": (("metrics", "i2t"), "n_tied", True),
    "truncated-text": (("tokens",), "n_truncated", "12"),
    "skipped-huge": (("dataset", "skipped"), "missing image", MAX_COUNT + 1),
}


@pytest.fixture(scope="module")
def real_result(tmp_path_factory, micro_config) -> Path:
    root = tmp_path_factory.mktemp("counts")
    pairs = make_pairs(root)
    manifest = write_jsonl(root / "pairs.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    result = evaluate("hnb-micro", str(manifest), model_config=str(micro_config), output_dir=root / "real",
                      num_workers=0, ci=False, progress=False)
    assert result.path is not None
    return Path(result.path)


def _edited(real: Path, folder: Path, stem: str) -> Path:
    groups, key, value = EDITS[stem]
    d = json.loads(real.read_text())
    d["model"]["arch"] = stem  # its own leaderboard row, were it read
    d.pop("per_query", None), d.pop("per_query_sha256", None)
    block = d
    for g in groups:
        block = block.setdefault(g, {})
    block[key] = value
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{stem}.json").write_text(json.dumps(d))
    return folder / f"{stem}.json"


def test_a_real_result_keeps_its_counts_and_the_board_shows_them(real_result, tmp_path):
    r = read_result(real_result)
    assert (r.dataset["n_images"], r.dataset["n_captions"], r.metrics["i2t"]["n_queries"]) == (12, 12, 12)
    out = tmp_path / "lb.md"
    assert main(["-q", "leaderboard", str(real_result.parent), "--output", str(out)]) == 0
    assert "· 12 images" in out.read_text()


@pytest.mark.parametrize("stem", sorted(EDITS))
def test_an_impossible_count_is_refused_by_every_reader_naming_the_field(real_result, tmp_path, stem):
    path = _edited(real_result, tmp_path, stem)
    groups, key, _ = EDITS[stem]
    field = ".".join((*groups, key))
    with pytest.raises(ResultFormatError) as e:
        read_result(path)
    assert "impossible counts" in str(e.value) and field in str(e.value) and "\n" not in str(e.value)


def test_the_leaderboard_lists_files_with_impossible_counts_as_skipped_never_as_rows(real_result, tmp_path, capsys):
    folder = tmp_path / "results"
    for stem in EDITS:
        _edited(real_result, folder, stem)
    frame, skipped = collect([folder])
    assert frame.empty and {Path(p).stem for p, _ in skipped} == set(EDITS)
    out = tmp_path / "lb.md"
    assert main(["-q", "leaderboard", str(folder), "--output", str(out)]) == 0
    tables, skipped_md = out.read_text().split("## Skipped files")
    assert str(10**30) not in tables.replace(",", "") and "1e+30" not in tables and "images-1e30 (" not in tables
    assert all(f"{stem}.json" in skipped_md for stem in EDITS) and "impossible counts" in skipped_md
    capsys.readouterr()
    assert main(["-q", "compare", str(real_result), str(folder / "images-1e30.json")]) == 2
    assert_one_line_error(capsys.readouterr().err, "images-1e30.json", "impossible counts", "dataset.n_images")
