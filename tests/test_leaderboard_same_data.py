"""One data set is one table and one Borda benchmark whatever its results call it: an unregistered set (a
manifest, an image folder) is grouped by its content fingerprint, its names listed; and a manifest's default name
is not a file name everyone shares (``captions``, ``metadata``): eval says which name it used and how to set it."""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from pathlib import Path

import pandas as pd
import pytest
from conftest import make_pairs, write_jsonl
from test_leaderboard import _result, row, tables

from hnbench.cli import main
from hnbench.data import load_dataset
from hnbench.results.leaderboard import leaderboard
from hnbench.results.record import read_result, write_result


@pytest.fixture(scope="module")
def one_set_two_names(tmp_path_factory, micro_config) -> tuple[Path, dict[int, str]]:
    """The micro model at context 8 and 24 on one manifest, ``realset/captions.jsonl``: scored once under its
    default name and once under ``--name my-set``; the results' folder and what each eval printed."""
    root = tmp_path_factory.mktemp("same-data")
    data = write_jsonl(root / "realset" / "captions.jsonl",
                       [{"image": p, "caption": c} for p, c in make_pairs(root / "realset", n=8)])
    printed = {}
    for ctx, name in ((8, []), (24, ["--name", "my-set"])):
        capture = io.StringIO()
        with redirect_stdout(capture):
            assert main(["-q", "eval", "--model", "hnb-micro", "--model-config", str(micro_config), "--dataset",
                         str(data), *name, "--output", str(root / "results"), "--num-workers", "0",
                         "--context-length", str(ctx), "--no-cache", "--no-ci", "--k", "1", "5"]) == 0
        printed[ctx] = capture.getvalue()
    return root / "results", printed


def test_one_data_set_under_two_names_is_one_table_listing_both(one_set_two_names):
    results, _ = one_set_two_names
    by_ctx = {read_result(p).model["context_length"]: read_result(p) for p in results.glob("*.json")}
    assert by_ctx[8].dataset["name"] == "realset" and by_ctx[24].dataset["name"] == "my-set"
    fingerprint = by_ctx[8].dataset["fingerprint"]
    assert by_ctx[24].dataset["fingerprint"] == fingerprint  # the same images and captions
    md = leaderboard([results])
    ((title, df),) = tables(md).items()
    assert title == "my-set / realset · default · 8 images"  # one table, no fingerprint needed to tell it apart
    assert sorted(df["context"]) == ["24", "8"]
    assert f"one data set (content fingerprint {fingerprint}) that results name my-set, realset" in md
    assert "superseded" not in md  # two models (context lengths), not one twice
    csv = pd.read_csv(io.StringIO(leaderboard([results], fmt="csv")))
    assert list(csv["benchmark"]) == ["my-set / realset"] * 2 and csv["data_fingerprint"].nunique() == 1
    # either name selects the table
    for name in ("realset", "my-set"):
        assert set(tables(leaderboard([results], benchmarks=[name]))) == {title}


def test_eval_says_which_name_it_used_and_how_to_set_it(one_set_two_names):
    _, printed = one_set_two_names
    assert "on realset/default:" in printed[8]
    assert "data set named 'realset' after its folder; --name NAME names it otherwise" in printed[8]
    assert "on my-set/default:" in printed[24] and "named" not in printed[24]  # given: nothing to explain


def test_a_manifest_or_folder_named_for_its_role_is_named_after_the_folder_above(tmp_path):
    pairs = make_pairs(tmp_path / "realset", n=3)
    rows = [{"image": p, "caption": c} for p, c in pairs]
    for stem in ("captions", "metadata", "manifest"):
        ds = load_dataset(str(write_jsonl(tmp_path / "realset" / f"{stem}.jsonl", rows)))
        assert (ds.name, ds.meta["name_from"]) == ("realset", "folder")
    own = load_dataset(str(write_jsonl(tmp_path / "realset" / "long-captions-v2.jsonl", rows)))
    assert (own.name, own.meta["name_from"]) == ("long-captions-v2", "file")  # a name of its own: kept
    given = load_dataset(str(tmp_path / "realset" / "captions.jsonl"), name="mine")
    assert (given.name, given.meta["name_from"]) == ("mine", "--name")
    # a generic folder takes the one above it: realset/test/captions.jsonl and the image folder realset/test/
    split = tmp_path / "realset" / "test"
    split.mkdir()
    write_jsonl(split / "captions.jsonl", [{"image": f"../{p}", "caption": c} for p, c in pairs])
    assert load_dataset(str(split / "captions.jsonl"), allow_outside_paths=True).name == "realset-test"
    write_jsonl(split / "metadata.jsonl", [{"file_name": f"../{p}", "caption": c} for p, c in pairs])
    folder = load_dataset(str(split), allow_outside_paths=True)
    assert (folder.name, folder.meta["format"], folder.meta["name_from"]) == ("realset-test", "imagefolder", "folder")


def _write(tmp_path: Path, model: tuple[str, str, str], name: str, fingerprint: str, r1: float,
           created: str = "2026-01-02T00:00:00+00:00") -> None:
    r = _result(*model, name, None, 77, (r1, 70, 80), (r1, 70, 80), created=created)
    r.dataset["fingerprint"] = fingerprint
    write_result(r, tmp_path)


GOOD, WEAK = ("ViT-B-32", "openai", "a"), ("ViT-B-32", "laion", "b")


def test_the_borda_rank_counts_one_data_set_once_whatever_its_names(tmp_path):
    """GOOD beats WEAK on set S and ties it on set T. WEAK was also scored on S under a second name: counted as a
    third benchmark, that made WEAK cover more benchmarks and rank first. One data set counts once."""
    _write(tmp_path, GOOD, "captions", "fp-s", 40)
    _write(tmp_path, WEAK, "captions", "fp-s", 30)
    _write(tmp_path, WEAK, "realset", "fp-s", 30, created="2026-01-03T00:00:00+00:00")
    _write(tmp_path, GOOD, "other-set", "fp-t", 50)
    _write(tmp_path, WEAK, "other-set", "fp-t", 50)
    md = leaderboard([tmp_path])
    t = tables(md)
    assert set(t) == {"captions / realset · default · 100 images", "other-set · default · 100 images", "default"}
    borda = t["default"]
    assert [c for c in borda.columns if c.endswith(" rank")] == ["captions / realset rank", "other-set rank"]
    assert row(borda, "ViT-B-32 (openai)")["#"] == "1" and row(borda, "ViT-B-32 (laion)")["#"] == "2"
    assert set(borda["benchmarks"]) == {"2"}
    assert "superseded by the newer" in md  # WEAK on S twice: the newer file is its row


def test_two_data_sets_sharing_one_of_their_names_are_told_apart_by_fingerprint(tmp_path):
    """Data S named ``captions`` and ``realset``, data U named ``realset``: two tables, each titled with its
    data's short fingerprint, and two Borda columns."""
    _write(tmp_path, GOOD, "captions", "fp-s-0000", 40)
    _write(tmp_path, WEAK, "realset", "fp-s-0000", 30)
    _write(tmp_path, GOOD, "realset", "fp-u-0000", 20)
    t = tables(leaderboard([tmp_path]))
    assert {"captions / realset · default · 100 images · data fp-s-000",
            "realset · default · 100 images · data fp-u-000"} <= set(t)
    assert {"captions / realset (fp-s-000) rank", "realset (fp-u-000) rank"} <= set(t["default"].columns)
