"""``hnbench suite NAME`` — named benchmark sets for every model, one aggregated table."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import pytest
from benchmark_fixtures import build_docci, build_urban1k, use_counts
from conftest import assert_one_line_error, snapshot

from hnbench.cli import main
from hnbench.registry import SUITES

TINY = ["--model", "hnbench-tiny", "--pretrained", "synthdense", "--model", "hnbench-tiny", "--pretrained", "none"]
QUICK = ["--num-workers", "0", "--no-ci"]


def _suite(monkeypatch, name: str, entries: tuple[tuple[str, str | None, str], ...]) -> None:
    """A suite declared for this test only (the registry's own entries stay as they are)."""
    from hnbench.evaluation.suites import fixed

    monkeypatch.setitem(SUITES._targets, name, functools.partial(fixed, entries=entries))
    monkeypatch.setitem(SUITES._spelling, name, name)


def _links(table: str) -> list[str]:
    return re.findall(r"\]\(([^)]+)\)", table)


@pytest.mark.slow  # generates synthdense
def test_suite_synthdense_puts_two_models_in_one_table(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["-q", "suite", "synthdense", *TINY, "--output", str(out), *QUICK]) == 0
    printed = capsys.readouterr().out
    table = (out / "suite-synthdense.md").read_text()
    assert table in printed
    rows = [line for line in table.splitlines() if line.startswith("| hnbench-tiny")]
    assert len(rows) == 2 and "(synthdense)" in rows[0] and "(random init)" in rows[1]
    assert "synthdense/test t2i R@1" in table and "synthdense/test i2t R@1" in table
    links = _links(table)
    assert len(links) == 4  # 2 models x 2 directions, each linked to its result file
    trained = json.loads((out / links[0]).read_text())
    value = float(re.search(r"\[([0-9.]+)\]", rows[0]).group(1))
    assert value == pytest.approx(trained["metrics"]["t2i"]["R@1"], abs=0.05)
    assert trained["dataset"]["name"] == "synthdense" and trained["dataset"]["protocol"] == "test"
    # a rerun reads the cached embeddings and writes the same table over its own
    assert main(["-q", "suite", "synthdense", *TINY, "--output", str(out), *QUICK]) == 0
    assert (out / "suite-synthdense.md").read_text() == table


@pytest.mark.slow  # generates synthdense
def test_suite_python_api_mirrors_the_cli(tmp_path):
    import hnbench

    run = hnbench.run_suite("synthdense", ["hnbench-tiny"], pretrained=["synthdense"], output_dir=tmp_path,
                            num_workers=0, ci=False, progress=False)
    assert run.ok and run.path == tmp_path / "suite-synthdense.md"
    (path,) = run.results.values()
    assert Path(path).is_file() and run.path.read_text() == run.table


@pytest.mark.slow  # generates synthdense
def test_suite_limit_is_recorded_named_and_kept_apart(tmp_path, capsys):
    from hnbench.results.leaderboard import leaderboard

    full, part = tmp_path / "full", tmp_path / "part"
    args = ["--model", "hnbench-tiny", "--pretrained", "synthdense", *QUICK]
    assert main(["-q", "suite", "synthdense", *args, "--output", str(full)]) == 0
    assert main(["-q", "suite", "synthdense", *args, "--output", str(part), "--limit", "7"]) == 0
    table = (part / "suite-synthdense.md").read_text()
    assert "Seeded 7-image subsets (seed 0) of synthdense/test" in table and "subset)" not in table  # said once
    result = json.loads((part / _links(table)[0]).read_text())
    assert result["settings"]["limit"] == 7 and result["dataset"]["n_images"] == 7
    assert result["dataset"]["meta"]["limit"]["n_images"] == 7
    board = leaderboard([str(full), str(part)], None)
    assert "7-image subset search (not comparable" in board
    assert board.count("| 1 ") == 2  # each ranked first in its own table: never beside the full run


def test_suite_failure_is_reported_and_the_rest_go_on(tmp_path, monkeypatch, capsys, micro_config):
    root, docci = tmp_path / "data", tmp_path / "docci"
    build_urban1k(root)  # 11 images, not the 1,000 urban1k's spec expects: loading fails
    build_docci(docci)
    use_counts(monkeypatch, "docci", test=(5, 5))
    _suite(monkeypatch, "t-mixed", (("urban1k", "test", "retrieval"), ("docci", "test", "retrieval")))
    rmap = tmp_path / "map.json"
    rmap.write_text(json.dumps({"urban1k": str(root), "docci": str(docci)}))
    out = tmp_path / "out"
    code = main(["-q", "suite", "t-mixed", "--model", "hnb-micro", "--model-config", str(micro_config),
                 "--data-root-map", str(rmap), "--output", str(out), *QUICK])
    captured = capsys.readouterr()
    assert code == 1
    assert "urban1k/test failed" in captured.err and "--allow-count-mismatch" in captured.err
    table = (out / "suite-t-mixed.md").read_text()
    row = next(line for line in table.splitlines() if line.startswith("| hnb-micro"))
    assert "failed" in row and len(_links(row)) == 2  # docci's two cells still scored
    assert "Failed:" in table
    # the flag the message names is the suite's too: every benchmark entry runs, the mismatch recorded
    again = tmp_path / "again"
    assert main(["-q", "suite", "t-mixed", "--model", "hnb-micro", "--model-config", str(micro_config),
                 "--data-root-map", str(rmap), "--output", str(again), "--allow-count-mismatch", *QUICK]) == 0
    row = next(line for line in (again / "suite-t-mixed.md").read_text().splitlines() if line.startswith("| hnb-micro"))
    urban = json.loads((again / _links(row)[0]).read_text())
    assert urban["dataset"]["name"] == "urban1k" and urban["dataset"]["n_images"] == 11
    assert urban["dataset"]["spec"]["allow_count_mismatch"] is True


def test_suite_reads_replica_data_roots_from_a_toml_map(tmp_path, monkeypatch, micro_config):
    urban, docci = tmp_path / "urban", tmp_path / "docci"
    build_urban1k(urban)
    build_docci(docci)
    use_counts(monkeypatch, "urban1k", test=(11, 11))
    use_counts(monkeypatch, "docci", test=(5, 5))
    _suite(monkeypatch, "t-replicas", (("urban1k", "test", "retrieval"), ("docci", "test", "retrieval")))
    rmap = tmp_path / "roots.toml"
    rmap.write_text(f'urban1k = "{urban}"\ndocci = "docci"\n')  # a relative folder is relative to the map
    out = tmp_path / "out"
    assert main(["-q", "suite", "t-replicas", "--model", "hnb-micro", "--model-config", str(micro_config),
                 "--data-root-map", str(rmap), "--output", str(out), *QUICK]) == 0
    table = (out / "suite-t-replicas.md").read_text()
    results = [json.loads((out / link).read_text()) for link in _links(table)]
    assert [(r["dataset"]["name"], r["dataset"]["n_images"]) for r in results[::2]] == [("urban1k", 11), ("docci", 5)]


def test_suite_families_follow_the_protocol_specs():
    from hnbench.data.benchmarks import BENCHMARKS
    from hnbench.evaluation.suites import get_suite

    for fam in ("goal-splits", "zero-shot-splits"):
        want = {(b, p.name) for b, spec in BENCHMARKS.items() for p in spec.protocols if fam in p.families}
        got = [(e.benchmark, e.protocol) for e in get_suite(fam).entries]
        assert set(got) == want and len(got) == len(want) and want
    assert ("dci", "goal") in [(e.benchmark, e.protocol) for e in get_suite("goal-splits").entries]
    long = [(e.benchmark, e.protocol) for e in get_suite("long-caption").entries]
    assert long == [("urban1k", "test"), ("docci", "test"), ("dci", "full"), ("long-dci", "tulip"),
                    ("sharegpt4v", "1k"), ("iiw", "612")]
    assert [(e.benchmark, e.protocol, e.task) for e in get_suite("forgetting").entries] == [("imagenet", None, "zeroshot")]
    assert [(e.benchmark, e.protocol) for e in get_suite("short-caption").entries] == [("coco", "val2017"),
                                                                                      ("flickr30k", "full")]


@pytest.mark.parametrize("case", ["unknown-suite", "unknown-benchmark", "map-missing", "no-folder", "no-map"])
def test_suite_bad_input_is_one_line(tmp_path, monkeypatch, capsys, case):
    (tmp_path / "u").mkdir()
    rmap = tmp_path / "map.json"
    rmap.write_text(json.dumps({"urban1k": str(tmp_path / "u")}))
    name, words = "long-caption", ["docci, dci, long-dci, sharegpt4v, iiw"]
    if case == "unknown-suite":
        name, words = "long-captoin", ["long-caption"]
    elif case == "unknown-benchmark":
        _suite(monkeypatch, "t-bad", (("urban1k", "test", "retrieval"), ("cocoa", None, "retrieval")))
        name, words = "t-bad", ["cocoa"]
    elif case == "no-folder":
        rmap.write_text(json.dumps({"urban1k": str(tmp_path / "absent")}))
        _suite(monkeypatch, "t-one", (("urban1k", "test", "retrieval"),))
        name, words = "t-one", ["no such folder", "absent"]
    argv = ["suite", name, "--model", "hnbench-tiny", "--output", str(tmp_path / "out")]
    if case == "no-map":
        words = ["--data-root-map", "urban1k, docci"]
    else:
        argv += ["--data-root-map", str(rmap)]
    before = snapshot(tmp_path)
    assert main(argv) == 2
    assert_one_line_error(capsys.readouterr().err, *words)
    assert snapshot(tmp_path) == before and not (tmp_path / "out").exists()


def test_eval_limit_takes_a_seeded_subset_and_is_refused_for_zeroshot(tmp_path, monkeypatch, capsys, micro_config):
    from benchmark_fixtures import eval_argv

    build_docci(tmp_path / "docci")
    use_counts(monkeypatch, "docci", test=(5, 5))
    out = tmp_path / "out"
    assert main([*eval_argv(micro_config, "docci", tmp_path / "docci", out), "--limit", "3", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["dataset"]["n_images"] == 3 and record["settings"]["limit"] == 3
    assert record["dataset"]["meta"]["limit"] == {"n_images": 3, "seed": 0, "of_images": 5, "of_captions": 5}
    before = snapshot(tmp_path)
    assert main(["-q", "eval", "--task", "zeroshot",
                 "--dataset", str(tmp_path / "docci"), "--model", "hnbench-tiny", "--output", str(out),
                 "--limit", "3"]) == 2
    assert_one_line_error(capsys.readouterr().err, "--limit", "zeroshot")
    assert snapshot(tmp_path) == before
