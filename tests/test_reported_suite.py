"""The reference numbers of the suite's benchmarks (published-results.csv), each under the hnbench protocol of
the code that produced it, placed by ``--reported`` beside runs of that protocol only; zero-shot accuracies
beside zero-shot runs."""

from __future__ import annotations

import io
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
from benchmark_fixtures import eval_argv, use_counts
from conftest import COLOURS, assert_one_line_error, snapshot
from PIL import Image
from test_bench_coco import build_coco_val2017, build_karpathy_coco

from hnbench.cli import main
from hnbench.data.benchmarks import BENCHMARKS
from hnbench.evaluation.evaluate import evaluate
from hnbench.results.leaderboard import leaderboard
from hnbench.results.reported import (
    METRIC_COLUMNS,
    PROTOCOL_FAMILIES,
    PUBLISHED_CSV,
    ZERO_SHOT_SETS,
    load_published,
    protocol_of,
    reported_rows,
    task_of,
)

REPO = Path(__file__).resolve().parents[1]
SPEC_CSV = REPO.parent / "shared" / "spec" / "published-results.csv"


def _sections(md: str, level: str = "##") -> dict[str, str]:
    return {block.split("\n", 1)[0]: block for block in md.split(f"\n{level} ")[1:]}


def test_every_reported_row_names_a_registered_protocol_and_a_source():
    raw = load_published()
    assert len(raw) > 96  # the spec's rows, Long-CLIP's model zoo, and the suites' reference numbers
    for rec in raw.to_dict("records"):
        where = f"{rec['source']} {rec['method']} {rec['benchmark']} {rec['direction']}"
        assert isinstance(rec["source"], str) and rec["source"].strip(), where
        protocol = protocol_of(rec["benchmark"], rec["protocol"])
        if rec["benchmark"] in ZERO_SHOT_SETS:
            assert task_of(rec["direction"]) == "zeroshot" and protocol in ZERO_SHOT_SETS[rec["benchmark"]], where
            assert 0 < rec["top-1"] <= 100, where
        elif rec["direction"] == "choice":  # a compositional benchmark's option-choice accuracy (%)
            assert task_of(rec["direction"]) == "choice", where
            assert protocol in [p.name for p in BENCHMARKS[rec["benchmark"]].protocols], where
            assert 0 < rec["accuracy"] <= 100 and math.isnan(rec["R@1"]), where
        else:
            assert task_of(rec["direction"]) == "retrieval", where
            assert protocol in [p.name for p in BENCHMARKS[rec["benchmark"]].protocols], where
            assert 0 < rec["R@1"] <= 100 and all(math.isnan(rec[c]) or 0 < rec[c] <= 100 for c in ("R@5", "R@10"))
        if "@" in rec["source"]:  # the suites' rows: repo@commit:file, a protocol (not a family), cited
            assert rec["protocol"] not in PROTOCOL_FAMILIES, where
            assert ":" in rec["source"].split("@", 1)[1], where
    # both directions of a retrieval source/method/benchmark, one classification row per zero-shot set
    rows = reported_rows()
    retrieval = raw["direction"].isin(["t2i", "i2t"])
    assert len(rows) == retrieval.sum() // 2 + (~retrieval).sum()  # one row per classification or choice line
    # the keys the model zoo links to: (source, method)
    keys = set(zip(raw["source"], raw["method"]))
    assert ("wuw2019/LoTLIP@301b906:README.md", "LoTLIP") in keys
    assert ("UnicomAI/HiMo-CLIP@f235e97:static/images/eval_tb1.png (Table 1)", "HiMo-CLIP") in keys
    assert ("mlfoundations/open_clip@89fb801:docs/openclip_results.csv", "CLIP (OpenAI)") in keys


def test_reported_numbers_are_as_read_in_their_sources():
    rows = reported_rows().set_index(["source", "model", "arch", "benchmark"]).sort_index()
    lot = rows.loc[("wuw2019/LoTLIP@301b906:README.md", "LoTLIP", "ViT-B/16 128tok", "iiw")]
    assert (lot["protocol"], lot["i2t R@1"], lot["t2i R@1"], lot["context_length"]) == ("612", 94.28, 92.65, 128)
    assert rows.loc[("wuw2019/LoTLIP@301b906:README.md", "CLIP", "ViT-B/32", "sharegpt4v"), "protocol"] == "10k-sentences"
    himo = rows.loc[("UnicomAI/HiMo-CLIP@f235e97:static/images/eval_tb1.png (Table 1)", "HiMo-CLIP", "ViT-L/14 248tok",
                     "urban1k")]
    assert (himo["protocol"], himo["i2t R@1"], himo["t2i R@1"]) == ("longclip", 93.0, 93.1)  # as the README's text
    tulip = rows.loc[("UnicomAI/HiMo-CLIP@f235e97:static/images/eval_tb1.png (Table 1)", "TULIP", "ViT-L/14 248tok")]
    assert tulip.loc["urban1k", "protocol"] == "longclip" and tulip.loc["long-dci", "protocol"] == "tulip"
    assert (tulip.loc["urban1k", "i2t R@1"], tulip.loc["urban1k", "t2i R@1"]) == (90.1, 91.1)  # as tulip#4 quotes
    zoo = rows.loc[("mlfoundations/open_clip@89fb801:docs/openclip_retrieval_results.csv", "CLIP (OpenAI)", "ViT-B/16",
                    "coco")]
    assert (zoo["protocol"], zoo["t2i R@1"], zoo["i2t R@10"]) == ("karpathy-test", 33.09, 84.62)
    zs = rows.loc[("mlfoundations/open_clip@89fb801:docs/openclip_results.csv", "CLIP (OpenAI)", "ViT-L/14",
                   "imagenet-1k")]
    assert (zs["task"], zs["protocol"], zs["top-1"]) == ("zeroshot", "openai", 75.54) and math.isnan(zs["top-5"])
    unverified = rows[rows["note"].str.contains("protocol unverified")]
    assert set(unverified.index.get_level_values("benchmark")) == {"docci", "flickr30k"}
    # LoTLIP's Urban-1K numbers: its loader's rule is hnbench's lotlip protocol (readlines()[0], sentences re-joined)
    lot_urban = rows.loc[("wuw2019/LoTLIP@301b906:README.md", "LoTLIP", "ViT-B/32 128tok", "urban1k")]
    assert (lot_urban["protocol"], lot_urban["i2t R@1"]) == ("lotlip", 84.1)


def test_an_older_published_file_still_reads(tmp_path):
    """A file of the schema before zero-shot rows (no top-1/top-5 columns) reads, its rows unchanged in the
    packaged file."""
    old = tmp_path / "published-results.csv"
    if SPEC_CSV.exists():
        old.write_bytes(SPEC_CSV.read_bytes())
    else:  # the schema's first line and a row of it
        old.write_text("source,protocol,method,backbone,training,benchmark,direction,R@1,R@5,R@10,note\n"
                       "debias-clip-2026,zero-shot-splits,CLIP,ViT-B/16,zero-shot,docci,t2i,57.1,,,\n"
                       "debias-clip-2026,zero-shot-splits,CLIP,ViT-B/16,zero-shot,docci,i2t,60.6,,,\n")
    assert "top-1" not in old.read_text().splitlines()[0]
    raw = load_published(old)
    assert set(METRIC_COLUMNS) <= set(raw.columns) and raw["top-1"].isna().all()
    rows = reported_rows(old)
    assert (rows["task"] == "retrieval").all() and "top-1" not in rows
    key = ["source", "method", "backbone", "benchmark", "direction"]  # each old row, unchanged in the packaged file
    packaged = load_published(PUBLISHED_CSV).merge(raw[key], on=key)
    assert len(packaged) == len(raw)
    pd.testing.assert_frame_equal(packaged.reset_index(drop=True), raw.reset_index(drop=True), check_dtype=False)


def test_reported_pairwise_numbers_are_marked_as_pairwise(tmp_path):
    """A reported row produced by a query-conditioned scorer (FLAIR's README numbers: text-conditioned pooling)
    says so in its ``scorer`` cell, a registered scorer, and the leaderboard marks it ``‡ pairwise`` with the
    legend, never as a dual encoder's; rows of an older file (no scorer column) are dual encoders."""
    from hnbench.registry import SCORERS

    raw = load_published(PUBLISHED_CSV)
    named = set(raw["scorer"]) - {""}
    assert named and named <= set(SCORERS.names())
    flair = raw[raw["source"].str.startswith("ExplainableML/flair")]
    assert len(flair) and (flair["scorer"] == "flair-conditioned").all()
    assert (raw.loc[~raw["source"].str.startswith("ExplainableML/flair"), "scorer"] == "").all()
    rows = reported_rows()
    assert set(rows.loc[rows["model"].str.startswith("FLAIR"), "scorer"]) == {"flair-conditioned"}
    assert set(rows.loc[~rows["model"].str.startswith("FLAIR"), "scorer"]) == {"cosine"}
    out = tmp_path / "published.md"
    assert main(["leaderboard", "--reported", "--output", str(out)]) == 0
    md = out.read_text()
    assert "FLAIR (flair-merged30m) ‡ pairwise (flair-conditioned) †" in md and "‡ pairwise (SCORER)" in md
    assert "Long-CLIP-L ‡" not in md
    old = tmp_path / "old.csv"
    old.write_text("source,protocol,method,backbone,training,benchmark,direction,R@1,R@5,R@10,note\n"
                   "debias-clip-2026,zero-shot-splits,CLIP,ViT-B/16,zero-shot,docci,t2i,57.1,,,\n")
    assert list(reported_rows(old)["scorer"]) == ["cosine"]


def test_reported_row_joins_a_run_of_the_same_protocol_only(micro_config, tmp_path, monkeypatch):
    """open_clip's CLIP_benchmark numbers (Karpathy test) sit beside a karpathy-test run, HiMo's (val2017) beside a
    val2017 run; neither in the other's table, nor in a table of a protocol nobody ran (val2017-all)."""
    build_coco_val2017(tmp_path / "coco")
    build_karpathy_coco(tmp_path / "coco")
    use_counts(monkeypatch, "coco", val2017=(3, 15), karpathy_test=(2, 11))
    for protocol in ("val2017", "karpathy-test"):
        assert main([*eval_argv(micro_config, "coco", tmp_path / "coco", tmp_path / "res"), "--protocol", protocol]) == 0
    sections = _sections(leaderboard([tmp_path / "res"], reported=True))
    karpathy = sections["coco · karpathy-test (karpathy-splits) · 2 images"]
    val2017 = sections["coco · val2017 (longclip-splits, tulip-splits) · 3 images"]
    assert "CLIP (OpenAI)" in karpathy and "reported: mlfoundations/open_clip@89fb801" in karpathy
    assert "HiMo-CLIP" not in karpathy and "LongCLIP-L/14" not in karpathy and "hnb-micro" in karpathy
    assert "HiMo-CLIP [ViT-L/14 248tok] †" in val2017 and "CLIP (OpenAI)" not in val2017 and "hnb-micro" in val2017
    assert not any("val2017-all" in title or title.startswith("flickr30k") for title in sections)


def _imagenet_layout(root: Path, n: int = 4) -> tuple[Path, Path]:
    """An ImageNet-1k val layout in miniature: WordNet-id class folders and a class-names file for them."""
    names = list(COLOURS)[:n]
    rng = np.random.default_rng(0)
    for k, name in enumerate(names):
        (root / f"n{k:08d}").mkdir(parents=True)
        for j in range(2):
            a = np.clip(np.full((32, 32, 3), COLOURS[name]) + rng.integers(0, 30, (32, 32, 3)), 0, 255)
            Image.fromarray(a.astype(np.uint8)).save(root / f"n{k:08d}" / f"{j}.jpg")
    names_file = root.parent / "names.txt"
    names_file.write_text("\n".join(names) + "\n")
    return root, names_file


def test_zeroshot_section_shows_reported_accuracies_beside_runs(micro_config, tmp_path):
    """A zero-shot run on an ImageNet-1k layout (any folder name) with the OpenAI templates gets open_clip's
    ImageNet-1k top-1 rows in its table; a run with other templates or on another layout gets none."""
    folder, names = _imagenet_layout(tmp_path / "val")
    tpl = tmp_path / "tpl.txt"
    tpl.write_text("a photo of a {}.\n")
    kw = {"model_config": str(micro_config), "task": "zeroshot", "num_workers": 0, "progress": False}
    evaluate("hnb-micro", folder, output_dir=tmp_path / "res", dataset_options={"class_names": str(names)}, **kw)
    md = leaderboard([tmp_path / "res"], reported=True)
    assert "## Zero-shot classification" in md and "## Retrieval" not in md
    assert "Rank by mean R@1" not in md and "R@K in %" not in md  # a zero-shot board says no retrieval rule
    sections = _sections(md, "###")
    (title, table), = sections.items()
    assert title.startswith("val · default")
    assert "CLIP (OpenAI) [ViT-L/14] †" in table and "75.54" in table and "hnb-micro" in table
    assert "reported: mlfoundations/open_clip@89fb801:docs/openclip_results.csv" in table
    assert "69.83" not in table  # ImageNet-V2's number: another set
    csv = pd.read_csv(io.StringIO(leaderboard([tmp_path / "res"], reported=True, fmt="csv")))
    assert set(csv.loc[csv["kind"] == "reported", "top-1"]) == {75.54, 68.34, 63.32}
    # other templates: not the protocol the reported numbers were measured with
    evaluate("hnb-micro", folder, output_dir=tmp_path / "simple", templates=str(tpl),
             dataset_options={"class_names": str(names)}, **kw)
    assert "CLIP (OpenAI)" not in leaderboard([tmp_path / "simple"], reported=True)


# --- user-defined suite files ----------------------------------------------------------------------------------
def _readme_suite_toml() -> str:
    text = (REPO / "docs" / "guides" / "suites.md").read_text()
    return "#" + text.split("```toml\n#", 1)[1].split("```", 1)[0]


def test_the_documented_suite_file_example_reads_as_a_suite(tmp_path):
    from hnbench.evaluation.suites import get_suite

    path = tmp_path / "my-suite.toml"
    path.write_text(_readme_suite_toml())
    (tmp_path / "data").mkdir()  # the example's own data set, relative to the suite file
    (tmp_path / "data" / "my-long-captions.jsonl").write_text('{"image": "a.png", "long_caption": "a cube"}\n')
    suite = get_suite(str(path))
    assert suite.name == "karpathy"
    assert [(e.benchmark, e.protocol, e.task) for e in suite.entries] == [
        ("coco", "karpathy-test", "retrieval"), ("flickr30k", "karpathy-test", "retrieval"), ("imagenet", None, "zeroshot"),
        (None, None, "retrieval")]
    mine = suite.entries[3]
    assert mine.label == "my-long" and dict(mine.options) == {"name": "my-long", "caption_column": "long_caption"}
    assert Path(mine.dataset).resolve() == (tmp_path / "data" / "my-long-captions.jsonl").resolve()
    # the same suite as JSON: a list of entries, named after the file
    (tmp_path / "same.json").write_text(json.dumps([{"benchmark": e.benchmark, "protocol": e.protocol,
                                                    "task": e.task} for e in suite.entries[:2]]))
    assert [(e.benchmark, e.protocol) for e in get_suite(str(tmp_path / "same.json")).entries] == [
        ("coco", "karpathy-test"), ("flickr30k", "karpathy-test")]


def test_suite_file_runs_like_a_registered_suite(tmp_path, monkeypatch, micro_config, capsys):
    from benchmark_fixtures import build_docci, build_urban1k

    build_urban1k(tmp_path / "urban")
    build_docci(tmp_path / "docci")
    use_counts(monkeypatch, "urban1k", longclip=(11, 11))
    use_counts(monkeypatch, "docci", test=(5, 5))
    (tmp_path / "roots.toml").write_text('urban1k = "urban"\ndocci = "docci"\n')
    suite = tmp_path / "mine.toml"
    suite.write_text('[[entries]]\nbenchmark = "urban1k"\nprotocol = "longclip"\n\n[[entries]]\nbenchmark = "docci"\n')
    out = tmp_path / "out"
    assert main(["-q", "suite", str(suite), "--model", "hnb-micro", "--model-config", str(micro_config),
                 "--data-root-map", str(tmp_path / "roots.toml"), "--output", str(out), "--num-workers", "0",
                 "--no-ci"]) == 0
    table = (out / "suite-mine.md").read_text()
    assert table.startswith("# Suite mine") and "urban1k/longclip t2i R@1" in table and "docci t2i R@1" in table
    links = re.findall(r"\]\(([^)]+)\)", table)
    assert [json.loads((out / link).read_text())["dataset"]["protocol"] for link in links[::2]] == ["longclip", "test"]


def test_suite_file_problems_are_one_line_all_at_once(tmp_path, capsys):
    """Unknown benchmark, protocol and task and a malformed entry: one line naming each, exit 2, before anything
    loads (no data-root map read, no output folder made)."""
    suite = tmp_path / "bad.json"
    suite.write_text(json.dumps({"entries": [
        {"benchmark": "cocoa"}, {"benchmark": "flickr30k", "protocol": "karpathy-tset"},
        {"benchmark": "urban1k", "task": "zeroshott"}, {"benchmark": "docci", "split": "test"}, {"protocol": "x"}]}))
    before = snapshot(tmp_path)
    assert main(["suite", str(suite), "--model", "hnbench-tiny", "--data-root-map", str(tmp_path / "absent.toml"),
                 "--output", str(tmp_path / "out")]) == 2
    assert_one_line_error(capsys.readouterr().err, "5 problems", "'cocoa'", "did you mean 'coco'", "karpathy-tset",
                          "karpathy-test", "'zeroshott'", "entry 4", "'split'", "entry 5")
    assert snapshot(tmp_path) == before and not (tmp_path / "out").exists()
    for text, words in (("entries = []", ["non-empty 'entries'"]), ("name = 'a b'\n[[entries]]\nbenchmark = 'coco'",
                                                                     ["plain name"]), ("[[entries", ["not valid TOML"])):
        (tmp_path / "x.toml").write_text(text)
        assert main(["suite", str(tmp_path / "x.toml"), "--model", "hnbench-tiny", "--output", str(tmp_path / "o")]) == 2
        assert_one_line_error(capsys.readouterr().err, *words)
    assert main(["suite", str(tmp_path / "none.toml"), "--model", "hnbench-tiny", "--output", str(tmp_path / "o")]) == 2
    assert_one_line_error(capsys.readouterr().err, "none.toml", "unreadable")


# --- the --limit heading; protocol families named after their paper, each a suite ------------------
def test_suite_limit_is_said_once_under_the_title(tmp_path):
    from hnbench.evaluation.suites import Entry, Suite, render_table

    suite = Suite("t", (Entry("urban1k", "test"), Entry("imagenet", None, "zeroshot"), Entry("docci", "test")))
    table = render_table(suite, ["m (w)"], {}, {}, tmp_path, limit=50, seed=3)
    lines = table.splitlines()
    assert lines[0] == "# Suite t" and lines[2] == ("Seeded 50-image subsets (seed 3) of urban1k/test, docci/test, for a "
                                                    "quick look: not comparable with full runs.")
    header = next(line for line in lines if line.startswith("| model"))
    assert "subset" not in header and "urban1k/test t2i R@1" in header and "imagenet top-1" in header
    assert "Seeded" not in render_table(suite, ["m (w)"], {}, {}, tmp_path, limit=None, seed=3)


def test_protocol_families_are_papers_tables_and_suites():
    from hnbench.evaluation.suites import get_suite
    from hnbench.registry import FAMILIES, SUITES

    declared = {fam for spec in BENCHMARKS.values() for p in spec.protocols for fam in p.families}
    assert declared == set(FAMILIES) == set(PROTOCOL_FAMILIES)
    for fam in set(FAMILIES) - {"train"}:
        assert fam in SUITES and SUITES.help(fam) == FAMILIES[fam]
        assert len({e.benchmark for e in get_suite(fam).entries}) >= 2, fam  # a table: several benchmarks
    assert "train" not in SUITES
    # the tables as their code reads them (suite notes §1; the reference rows above sit under these protocols)
    assert PROTOCOL_FAMILIES["longclip-splits"] == {"urban1k": "longclip", "coco": "val2017", "flickr30k": "full",
                                                    "sharegpt4v": "1k"}
    assert PROTOCOL_FAMILIES["tulip-splits"] == {"long-dci": "tulip", "urban1k": "longclip", "coco": "val2017",
                                                 "flickr30k": "full", "sharegpt4v": "1k-raw"}
    assert PROTOCOL_FAMILIES["lotlip-10k"] == {"dci": "full-sentences", "sharegpt4v": "10k-sentences", "iiw": "612"}
    assert PROTOCOL_FAMILIES["flair-splits"]["dci"] == "full-sentences"


def test_the_suites_guide_lists_the_registered_suites():
    from docs_pages import page

    from hnbench.registry import SUITES

    text = page("guides/suites.md").split("# Suites", 1)[1]  # its suite table generated, as the site shows it
    rows = re.findall(r"^\| `([^`]+)` \| (.*) \|$", text.split("\n\nEvery model", 1)[0], flags=re.M)
    assert rows == [(name, SUITES.help(name)) for name in SUITES.declared()]


def test_suite_list_prints_each_suite_with_its_entries(capsys):
    import pytest

    from hnbench.registry import SUITES

    with pytest.raises(SystemExit) as exit_:
        main(["suite", "--list"])  # no NAME, --model or --output: it lists and exits, as --help does
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    for name in SUITES.declared():
        assert f"{name}: {SUITES.help(name)}\n" in out
    assert "\n    urban1k/longclip, coco/val2017, flickr30k/full, sharegpt4v/1k\n" in out  # longclip-splits
    assert "\n    imagenet (zeroshot)\n" in out
