"""Leaderboards from fixture result files: contents, marks, deltas, ordering, separation, formats, CLI."""

from __future__ import annotations

import io
import json
import re
import shlex
import shutil
from pathlib import Path

import pandas as pd
import pytest
from conftest import make_pairs, write_jsonl

from hnbench.cli import main
from hnbench.errors import ConfigError
from hnbench.results.leaderboard import collect, leaderboard, render
from hnbench.results.record import EvalResult, read_result, write_result
from hnbench.results.reported import PROTOCOL_FAMILIES, load_published, reported_rows

REPO = Path(__file__).resolve().parents[1]


def _result(arch, pretrained, fp, bench, protocol, ctx, t2i, i2t, created="2026-01-02T00:00:00+00:00",
            search="exact", n_images=100) -> EvalResult:
    metrics = {d: {"R@1": v[0], "R@5": v[1], "R@10": v[2], "mean_rank": 3.0, "median_rank": 1.0, "MRR": 0.5,
                   "n_queries": n_images, "n_tied": 0} for d, v in (("t2i", t2i), ("i2t", i2t))}
    ci95 = {d: {f"R@{k}": [v[i] - 1.5, v[i] + 1.25] for i, k in enumerate((1, 5, 10))}
            for d, v in (("t2i", t2i), ("i2t", i2t))}
    return EvalResult(
        model={"arch": arch, "pretrained": pretrained, "fingerprint": fp * 8, "context_length": ctx,
               "n_params": 1, "embed_dim": 32, "framework": "open_clip"},
        dataset={"name": bench, "protocol": protocol, "fingerprint": f"data-{bench}-{protocol}", "n_images": n_images,
                 "n_captions": n_images, "source": "fixture", "skipped": {}},
        metrics=metrics, ci95=ci95, tokens={"context_length": ctx}, settings={"backend": "torch", "search": search},
        created=created)


A, B, D = ("ViT-B-32", "openai", "a"), ("ViT-B-32", "laion", "b"), ("ViT-B-16", "datacomp", "d")
LONG = ("longclip-L", "ckpts/longclip-L.safetensors", "c")


@pytest.fixture(scope="module")
def results_dir(tmp_path_factory) -> Path:
    """Several models × benchmarks × protocols, a duplicate, approximate search, and three bad files."""
    root = tmp_path_factory.mktemp("results")
    sub = root / "more"  # directories are searched recursively
    gq = ("docci", "test+qual", 77)
    rows = [
        (A, gq, (50, 70, 80), (40, 60, 70)),
        (B, gq, (60, 75, 85), (45, 65, 75)),
        (D, gq, (55, 80, 85), (30, 50, 60)),
        (A, ("docci", "test", 77), (44, 66, 77), (41, 61, 71)),
        (A, ("dci", "goal", 77), (30, 50, 60), (35, 55, 65)),
        (B, ("dci", "goal", 77), (20, 40, 50), (25, 45, 55)),
        (A, ("urban1k", "test", 77), (60, 80, 90), (62, 82, 92)),
        (B, ("urban1k", "test", 77), (65, 85, 95), (66, 86, 96)),
        (LONG, ("docci", "test+qual", 248), (70, 90, 95), (68, 88, 94)),
    ]
    for (arch, pre, fp), (bench, protocol, ctx), t2i, i2t in rows:
        write_result(_result(arch, pre, fp, bench, protocol, ctx, t2i, i2t, n_images=5100 if bench == "docci" else 100),
                     sub if bench == "urban1k" else root)
    # the same model and data scored earlier: superseded by the newer file above
    old = _result(*A, *gq, (10, 20, 30), (10, 20, 30), created="2025-06-01T00:00:00+00:00", n_images=5100)
    (root / "old").mkdir()
    write_result(old, root / "old")
    # approximate search: its own table, never ranked with exact search
    write_result(_result(*B, *gq, (99, 99, 99), (99, 99, 99), search="approximate", n_images=5100), root / "approx")
    # schema version 0: no settings.search, no ci95, no model.context_length (tokens has it)
    v0 = _result("hnbench-tiny", "synthdense", "t", "synthdense", "test", 256, (30, 60, 70), (31, 61, 71)).to_dict()
    v0.update(schema_version=0, ci95={}, settings={"backend": "torch"})
    del v0["model"]["context_length"]
    (root / "tiny-v0.json").write_text(json.dumps(v0))
    (root / "broken.json").write_text('{"schema_version": 1, "model": ')
    newer = dict(v0, schema_version=99)
    (root / "future.json").write_text(json.dumps(newer))
    (root / "no-metrics.json").write_text(json.dumps(dict(v0, metrics={"t2i": {"R@1": 1.0}})))
    return root


def tables(md: str) -> dict[str, pd.DataFrame]:
    """Every pipe table of a Markdown board, keyed by the heading above it, parsed back by pandas."""
    out, heading = {}, None
    for block in md.split("\n\n"):
        if block.startswith("#"):
            heading = block.lstrip("# ").strip()
        elif block.startswith("|"):
            df = pd.read_csv(io.StringIO(block), sep="|", dtype=str, skipinitialspace=True)
            df = df.drop(columns=[df.columns[0], df.columns[-1]])
            df.columns = [c.strip() for c in df.columns]
            df = df.map(lambda s: s.strip() if isinstance(s, str) else s)
            assert set(df.iloc[0].str.replace("-", "")) == {""}, "second line must be the separator"
            out[heading] = df.iloc[1:].reset_index(drop=True)
    return out


def row(df: pd.DataFrame, model: str) -> pd.Series:
    hit = df[df["model"] == model]
    assert len(hit) == 1, (model, list(df["model"]))
    return hit.iloc[0]


def test_collect_skips_bad_files_by_name(results_dir):
    frame, skipped = collect([results_dir])
    reasons = {Path(p).name: r for p, r in skipped}
    assert set(reasons) == {"broken.json", "future.json", "no-metrics.json"}
    assert "newer" in reasons["future.json"] and "malformed" in reasons["no-metrics.json"]
    v0 = frame[frame["benchmark"] == "synthdense"].iloc[0]
    assert v0["search"] == "exact" and v0["context_length"] == 256 and v0["model"] == "hnbench-tiny (synthdense)"
    assert len(frame) == 12
    assert "## synthdense · test · 100 images" in render(reported_rows().iloc[:0], ci=True) + render(frame, ci=True)


def test_tables_separate_protocols_and_search(results_dir, tmp_path):
    md = leaderboard([results_dir], tmp_path / "board.md")
    t = tables(md)
    assert list(t)[:6] == ["docci · test (zero-shot-splits) · 5100 images", "docci · test+qual (goal-splits) · 5100 images",
                           "docci · test+qual (goal-splits) · 5100 images · approximate search (not comparable with "
                           "exact search)",
                           "dci · goal (goal-splits) · 100 images", "urban1k · test (goal-splits, zero-shot-splits) · 100 images",
                           "synthdense · test · 100 images"]
    gq = t["docci · test+qual (goal-splits) · 5100 images"]
    # ordered by mean R@1: LONG 69 (248 tokens, same table: context length is a column), B 52.5, A 45, D 42.5;
    # the older duplicate of A is gone
    assert list(gq["model"]) == ["longclip-L (ckpts/longclip-L)", "ViT-B-32 (laion)", "ViT-B-32 (openai)",
                                 "ViT-B-16 (datacomp)"]
    assert list(gq["#"]) == ["1", "2", "3", "4"] and list(gq["context"]) == ["248", "77", "77", "77"]
    assert row(gq, "ViT-B-32 (openai)")["t2i R@1"] == "50.00"
    assert list(gq["arch"]) == ["longclip-L", "ViT-B-32", "ViT-B-32", "ViT-B-16"]
    assert list(gq["fingerprint"]) == ["cccccccc", "bbbbbbbb", "aaaaaaaa", "dddddddd"]
    assert set(gq["hnbench"]) == {"0.1.0"}
    name = _result(*A, "docci", "test+qual", 77, (0, 0, 0), (0, 0, 0)).stem() + ".json"
    assert name.startswith("ViT-B-32-openai-aaaaaaaa__docci-test-qual__data-doc-")  # model__data__hashes
    assert (f"superseded by the newer ../results0/{name}" in md and f"../results0/old/{name} (2025-06-01" in md)
    assert "## Skipped files" in md and "broken.json" in md and "future.json" in md


def test_bold_best_and_underline_second_with_ties(results_dir):
    gq = tables(leaderboard([results_dir], context_lengths=77))["docci · test+qual (goal-splits) · 5100 images"]
    assert row(gq, "ViT-B-32 (laion)")["t2i R@1"] == "**60.00**"
    assert row(gq, "ViT-B-16 (datacomp)")["t2i R@1"] == "<u>55.00</u>"
    assert row(gq, "ViT-B-16 (datacomp)")["t2i R@5"] == "**80.00**"
    # t2i R@10: 85 twice (both bold), 80 is the second distinct value
    assert [row(gq, m)["t2i R@10"] for m in ("ViT-B-32 (laion)", "ViT-B-16 (datacomp)", "ViT-B-32 (openai)")] == \
        ["**85.00**", "**85.00**", "<u>80.00</u>"]
    assert row(gq, "ViT-B-32 (laion)")["mean R@1"] == "**52.50**"
    gq = tables(leaderboard([results_dir]))["docci · test+qual (goal-splits) · 5100 images"]  # with the 248-token row
    assert row(gq, "longclip-L (ckpts/longclip-L)")["t2i R@1"] == "**70.00**"
    assert row(gq, "ViT-B-32 (laion)")["t2i R@1"] == "<u>60.00</u>"
    # a one-row table has nothing to compare: no marks
    assert tables(leaderboard([results_dir]))["docci · test (zero-shot-splits) · 5100 images"]["t2i R@1"][0] == "44.00"


def test_deltas_against_baseline(results_dir):
    md = leaderboard([results_dir], baseline="ViT-B-32 (open*")
    gq = tables(md)["docci · test+qual (goal-splits) · 5100 images"]
    assert row(gq, "ViT-B-32 (laion)")["t2i R@1"] == "<u>60.00</u> (+10.00)"
    assert row(gq, "ViT-B-16 (datacomp)")["i2t R@1"] == "30.00 (\u221210.00)"
    assert row(gq, "ViT-B-32 (openai)")["t2i R@1"] == "50.00"  # the baseline row itself: no delta
    assert "Deltas in parentheses are against ViT-B-32 (open\\*, in the tables that have it." in md  # escaped
    t = tables(leaderboard([results_dir], baseline="ViT-B-32*"))  # ambiguous: no deltas, and a note says why
    assert row(t["docci · test+qual (goal-splits) · 5100 images"], "ViT-B-16 (datacomp)")["i2t R@1"] == "30.00"
    assert "Note: baseline 'ViT-B-32\\*' matches 2 rows here; no deltas" in leaderboard([results_dir], baseline="ViT-B-32*")


def test_sort_keys_and_confidence_intervals(results_dir):
    gq = tables(leaderboard([results_dir], sort="t2i-R@5", ci=True))["docci · test+qual (goal-splits) · 5100 images"]
    assert list(gq["model"]) == ["longclip-L (ckpts/longclip-L)", "ViT-B-16 (datacomp)", "ViT-B-32 (laion)",
                                 "ViT-B-32 (openai)"]
    assert row(gq, "ViT-B-32 (openai)")["t2i R@1"] == "50.00 [48.50, 51.25]"
    by_name = tables(leaderboard([results_dir], sort="model"))["docci · test+qual (goal-splits) · 5100 images"]
    assert list(by_name["model"]) == ["ViT-B-16 (datacomp)", "ViT-B-32 (laion)", "ViT-B-32 (openai)",
                                      "longclip-L (ckpts/longclip-L)"]
    assert list(by_name["#"]) == ["4", "2", "3", "1"]  # ranks stay by mean R@1
    with pytest.raises(ConfigError, match="did you mean"):
        leaderboard([results_dir], sort="t2i R@2")


def test_filters(results_dir):
    t = tables(leaderboard([results_dir], benchmarks="docci", protocols=["test+qual"], model_glob="vit-b-32*"))
    assert [k.split(" · ")[:3] for k in t] == [["docci", "test+qual (goal-splits)", "5100 images"]] * 2
    assert set(t["docci · test+qual (goal-splits) · 5100 images"]["model"]) == {"ViT-B-32 (laion)", "ViT-B-32 (openai)"}


def test_borda_rank_across_benchmarks(results_dir):
    t = tables(leaderboard([results_dir]))
    borda = t["goal-splits"]  # one family over every context length, as the tables are
    # docci test+qual: LONG 3 pts, B 2, A 1, D 0; dci goal: A 1, B 0; urban1k test: B 1, A 0; coverage first
    assert list(borda["model"]) == ["ViT-B-32 (laion)", "ViT-B-32 (openai)", "longclip-L (ckpts/longclip-L)",
                                    "ViT-B-16 (datacomp)"]
    assert list(borda["points"]) == ["3", "2", "3", "0"] and list(borda["benchmarks"]) == ["3", "3", "1", "1"]
    assert list(borda["dci rank"]) == ["2", "1", "—", "—"]


def test_reported_rows_are_marked_and_only_join_their_protocol(results_dir):
    md = leaderboard([results_dir], reported=True)
    t = tables(md)
    docci_test = t["docci · test (zero-shot-splits) · 5100 images"]  # zero-shot-splits: 77- and 248-token rows
    assert {"ViT-B-32 (openai)", "CLIP [ViT-B/16] †", "CLIP [ViT-L/14] †", "Long-CLIP-L †"} <= set(docci_test["model"])
    assert row(docci_test, "Long-CLIP-L †")["context"] == "248" and row(docci_test, "CLIP [ViT-B/16] †")["context"] == "77"
    clip = row(docci_test, "CLIP [ViT-B/16] †")
    assert clip["source"] == "reported: debias-clip-2026" and clip["t2i R@1"].endswith("57.10")
    assert row(docci_test, "ViT-B-32 (openai)")["source"].startswith("[result](")
    # goal-splits rows sit in the goal-splits table (at any context length), never in the zero-shot one
    assert "HN-CLIP †" in set(t["docci · test+qual (goal-splits) · 5100 images"]["model"])
    assert "HN-CLIP †" not in set(docci_test["model"])
    assert not any("†" in m for m in t["synthdense · test · 100 images"]["model"])
    # every reported row is marked, and no measured one is
    for df in t.values():
        if "source" in df:
            assert all(("†" in m) == s.startswith("reported: ") for m, s in zip(df["model"], df["source"]))


def test_published_rows_cover_the_csv_and_map_protocols():
    raw, rows = load_published(), reported_rows()
    retrieval = raw[raw["direction"].isin(["t2i", "i2t"])]  # a t2i and an i2t line make one retrieval row
    assert (rows["task"] == "retrieval").sum() * 2 == len(retrieval)
    # a zero-shot or option-choice line is one row of its task
    assert (rows["task"] == "zeroshot").sum() == (raw["direction"] == "classification").sum() > 0
    assert (rows["task"] == "choice").sum() == (raw["direction"] == "choice").sum() > 0
    assert len(rows) == len(retrieval) // 2 + len(raw) - len(retrieval)
    # a family, or (this rows) a protocol name of the benchmark: tests/test_reported_suite.py
    assert set(retrieval.loc[~retrieval["source"].str.contains("@"), "protocol"]) <= set(PROTOCOL_FAMILIES)
    hn = rows[(rows["model"] == "HN-CLIP") & (rows["benchmark"] == "dci")].iloc[0]
    assert (hn["protocol"], hn["context_length"], hn["t2i R@1"], hn["i2t R@10"]) == ("goal", 248, 80.69, 94.65)
    spec = REPO.parent / "shared" / "spec" / "published-results.csv"
    if spec.exists():
        # the spec's rows, then hnbench's own additions (the suites' reference numbers)
        # (read as frames: the packaged file has the zero-shot columns the spec's older schema lacks)
        pd.testing.assert_frame_equal(load_published().iloc[:len(load_published(spec))], load_published(spec))


def test_reported_only_and_empty_boards(tmp_path):
    md = leaderboard(reported=True, benchmarks="urban1k", ci=True)
    t = tables(md)
    assert all("†" in m for df in t.values() for m in df["model"])
    assert row(t["urban1k · test (goal-splits, zero-shot-splits)"], "HN-CLIP †")["t2i R@1"] == "**91.10**"
    csv = pd.read_csv(io.StringIO(leaderboard(reported=True, fmt="csv", ci=True)))
    assert len(csv) == len(reported_rows()) and csv["t2i R@1 lo"].isna().all()
    assert "No results to show." in leaderboard([tmp_path])


def test_links_are_relative_to_the_output_file(results_dir, tmp_path):
    out = tmp_path / "boards" / "lb.md"
    md = leaderboard([results_dir], out)
    assert out.read_text() == md
    links = re.findall(r"\[result\]\(([^)]+)\)", md)
    assert len(links) == 11 and all((out.parent / link).resolve().is_file() for link in links)


def test_csv_and_html_formats(results_dir):
    csv = pd.read_csv(io.StringIO(leaderboard([results_dir], fmt="csv", baseline="ViT-B-32 (openai)", ci=True)))
    gq = csv[(csv["protocol"] == "test+qual") & (csv["context_length"] == 77) & (csv["search"] == "exact")]
    assert list(gq["model"]) == ["ViT-B-32 (laion)", "ViT-B-32 (openai)", "ViT-B-16 (datacomp)"]
    assert list(gq["delta t2i R@1"]) == [10.0, 0.0, 5.0] and list(gq["rank"]) == [2, 3, 4]  # LONG (248) is 1
    assert gq["t2i R@1 lo"].iloc[0] == 58.5
    html = leaderboard([results_dir], fmt="html", reported=True)
    assert html.count("<table") == len(tables(leaderboard([results_dir], reported=True)))
    assert "<b>88.31</b>" in html and "<u>88.25</u>" in html and 'href="' in html and "†" in html


def test_cli_end_to_end(results_dir, tmp_path, capsys):
    out = tmp_path / "lb.md"
    assert main(["-q", "leaderboard", str(results_dir), "--output", str(out), "--baseline", "ViT-B-32 (openai)",
                 "--benchmark", "docci", "--reported", "--ci"]) == 0
    md = out.read_text()
    assert capsys.readouterr().out == f"wrote {out}\n"
    assert f"`hnbench leaderboard {results_dir} --benchmark docci --output {out}" in md
    assert set(tables(md)) >= {"docci · test+qual (goal-splits) · 5100 images", "docci · test (zero-shot-splits) · 5100 images"}
    assert main(["-q", "leaderboard", str(results_dir), "--format", "csv", "--protocol", "goal"]) == 0
    assert set(pd.read_csv(io.StringIO(capsys.readouterr().out))["benchmark"]) == {"dci"}
    assert main(["-q", "leaderboard", str(tmp_path / "missing")]) == 2
    assert main(["-q", "leaderboard"]) == 2
    assert "nothing to show" in capsys.readouterr().err


def test_board_from_real_eval_results(micro_config, tmp_path):
    """A result file written by `hnbench eval` (micro model, random init) renders, with its parquet beside it."""
    pairs = make_pairs(tmp_path, n=6)
    data = write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    assert main(["-q", "eval", "--model", "hnb-micro", "--model-config", str(micro_config), "--dataset", str(data),
                 "--output", str(tmp_path / "res"), "--num-workers", "0", "--context-length", "16"]) == 0
    md = leaderboard([tmp_path / "res"], tmp_path / "lb.md", ci=True)
    ((heading, df),) = tables(md).items()
    assert heading == "m · default · 6 images" and df.iloc[0]["context"] == "16"
    r = df.iloc[0]
    assert r["model"] == "hnb-micro (random init)" and r["source"].startswith("[result](res/")
    assert re.fullmatch(r"\d+\.\d\d \[\d+\.\d\d, \d+\.\d\d\]", r["t2i R@5"])
    assert "Skipped" not in md


@pytest.mark.parametrize("name", ["published.md", "synthdense.md"])
def test_committed_board_is_current(tmp_path, monkeypatch, name):
    """Each board in leaderboards/ is exactly what the command in its header produces from the stored files (run
    in a copy of the repository's layout, so the board's relative links come out the same)."""
    board = REPO / "leaderboards" / name
    if not board.exists():
        pytest.skip(f"leaderboards/{name} not generated")
    text = board.read_text()
    cmd = shlex.split(re.search(r"Generated by `hnbench leaderboard ([^`]*)`", text).group(1))
    shutil.copytree(REPO / "leaderboards" / "results", tmp_path / "leaderboards" / "results")
    monkeypatch.chdir(tmp_path)
    assert cmd[cmd.index("--output") + 1] == f"leaderboards/{name}"
    assert main(["-q", "leaderboard", *cmd]) == 0
    fresh = (tmp_path / "leaderboards" / name).read_text()
    assert fresh == text


# --- tables keyed by data, context length a column -------------------------------------------------
@pytest.fixture(scope="module")
def same_name_sets(tmp_path_factory, micro_config) -> Path:
    """Real results: one model at context 8 and 16 on a 10-image manifest.jsonl, and at 16 on another,
    6-image manifest.jsonl, both named ``manifest`` (the same name, different data)."""
    root = tmp_path_factory.mktemp("same-name")
    for folder, n in (("one", 10), ("two", 6)):
        data = write_jsonl(root / folder / "manifest.jsonl",
                           [{"image": p, "caption": c} for p, c in make_pairs(root / folder, n=n, seed=n)])
        for ctx in ((8, 16) if folder == "one" else (16,)):
            assert main(["-q", "eval", "--model", "hnb-micro", "--model-config", str(micro_config), "--dataset",
                         str(data), "--name", "manifest", "--output", str(root / "results"), "--num-workers", "0",
                         "--context-length", str(ctx), "--no-cache", "--no-ci"]) == 0
    return root / "results"


def test_two_data_sets_of_one_name_get_two_titled_tables(same_name_sets):
    """Two different sets both called manifest.jsonl are never ranked together nor supersede each
    other; each table's title names the data (name, image count, short fingerprint)."""
    fps = {read_result(p).dataset["n_images"]: read_result(p).dataset["fingerprint"]
           for p in same_name_sets.glob("*.json")}
    t = tables(leaderboard([same_name_sets]))
    assert set(t) == {f"manifest · default · 10 images · data {fps[10][:8]}",
                      f"manifest · default · 6 images · data {fps[6][:8]}"}
    assert len(t[f"manifest · default · 10 images · data {fps[10][:8]}"]) == 2  # context 8 and 16: both rows
    assert len(t[f"manifest · default · 6 images · data {fps[6][:8]}"]) == 1
    assert "superseded" not in leaderboard([same_name_sets])


def test_context_length_is_a_column_and_a_filter(same_name_sets, tmp_path, capsys):
    """Results of one benchmark at two context lengths share a table, the context a column (and the
    label tells the two rows of one model apart); --context-length keeps one."""
    t = tables(leaderboard([same_name_sets]))
    (ten,) = [df for title, df in t.items() if "10 images" in title]
    assert sorted(ten["context"]) == ["16", "8"] and set(ten["#"]) <= {"1", "2"}
    assert len(set(ten["model"])) == 2 and all(m.startswith("hnb-micro (random init) [") for m in ten["model"])
    out = tmp_path / "lb.md"
    assert main(["-q", "leaderboard", str(same_name_sets), "--context-length", "8", "--output", str(out)]) == 0
    md = out.read_text()
    only = tables(md)
    assert [list(df["context"]) for df in only.values()] == [["8"]]  # the 6-image set has no 8-token result
    assert "--context-length 8" in md  # the header's command reproduces the board
    csv = pd.read_csv(io.StringIO(leaderboard([same_name_sets], fmt="csv")))
    assert sorted(csv["context_length"]) == [8, 16, 16] and csv["data_fingerprint"].nunique() == 2


def test_one_model_at_two_context_lengths_is_two_labelled_rows(tmp_path):
    """The same weights (one fingerprint) scored at 77 and 248 tokens: two rows of one table, told apart by
    their context length; neither supersedes the other."""
    for ctx, r1 in ((77, 40), (248, 50)):
        write_result(_result(*A, "urban1k", "test", ctx, (r1, 70, 80), (r1, 70, 80)), tmp_path)
    md = leaderboard([tmp_path])
    ((title, df),) = tables(md).items()
    assert title == "urban1k · test (goal-splits, zero-shot-splits) · 100 images"
    assert list(df["model"]) == ["ViT-B-32 (openai) [248 tokens]", "ViT-B-32 (openai) [77 tokens]"]
    assert list(df["context"]) == ["248", "77"] and "superseded" not in md


def test_two_revisions_of_one_benchmark_are_two_tables_and_two_borda_columns(tmp_path):
    """DOCCI scored on two data revisions: two tables titled with their fingerprints, and in the Borda rank
    one column each (a model is never credited for a table of data it was not compared on)."""
    for model, fp, r1 in ((A, "data-one", 40), (B, "data-one", 30), (A, "data-two", 20)):
        r = _result(*model, "docci", "test+qual", 77, (r1, 70, 80), (r1, 70, 80), n_images=5100)
        r.dataset["fingerprint"] = fp
        write_result(r, tmp_path)
    for model, r1 in ((A, 10), (B, 20)):
        write_result(_result(*model, "dci", "goal", 77, (r1, 70, 80), (r1, 70, 80)), tmp_path)
    t = tables(leaderboard([tmp_path]))
    assert {"docci · test+qual (goal-splits) · 5100 images · data data-one",
            "docci · test+qual (goal-splits) · 5100 images · data data-two"} <= set(t)
    borda = t["goal-splits"]
    assert {"docci (data-one) rank", "docci (data-two) rank", "dci rank"} <= set(borda.columns)
    # coverage counts benchmarks, not data revisions: both models cover docci and dci
    assert row(borda, "ViT-B-32 (openai)")["benchmarks"] == "2" and row(borda, "ViT-B-32 (laion)")["benchmarks"] == "2"
    assert row(borda, "ViT-B-32 (openai)")["docci (data-two) rank"] == "1" and row(borda, "ViT-B-32 (laion)")["docci (data-two) rank"] == "—"


def test_board_says_what_its_brackets_are(results_dir):
    """An R@K interval may be exact (Clopper–Pearson) where the bootstrap degenerates: the board's legend says
    both, in the one sentence every page uses (hnbench.metrics.CI_RULE)."""
    from hnbench.metrics import CI_RULE

    md = leaderboard([results_dir], ci=True)
    assert f"Brackets: {CI_RULE}." in md and "Clopper–Pearson" in md
    assert "Brackets: 95% bootstrap confidence interval." not in md
