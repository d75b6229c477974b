"""DOCCI, DCI, Long-DCI and Urban-1K loaded from tiny copies of their true on-disk layouts."""

from __future__ import annotations

import io
import json
import logging
import shutil
import tarfile
import urllib.error
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest
from benchmark_fixtures import (
    build_dci,
    build_docci,
    build_long_dci_csv,
    build_urban1k,
    dci_name,
    goal_list,
    jpeg,
    sized,
    truncate,
    urban_caption,
)

from hnbench.cli import main
from hnbench.data import load_dataset
from hnbench.data.benchmarks import BENCHMARKS, download, get_benchmark, load
from hnbench.data.benchmarks.dci import DCI_ARCHIVE
from hnbench.data.benchmarks.spec import load_benchmark, sha256_file
from hnbench.data.benchmarks.stats import caption_stats
from hnbench.errors import ConfigError, DataError, ImageLoadError
from hnbench.io import download as fetching
from hnbench.registry import DATASETS


def _paths(ds) -> list[str]:
    """For each caption, the file name of the image it is paired with."""
    return [Path(ds.images.paths[i]).name for i in ds.caption_image]


@pytest.fixture
def use_sized(monkeypatch):
    """Swap a benchmark's spec for one with fixture-sized expected counts (read at call time)."""
    def apply(name: str, **counts: int) -> None:
        monkeypatch.setitem(BENCHMARKS, name, sized(BENCHMARKS[name], **counts))
    return apply


# --- registry, protocols -------------------------------------------------------------------------
def test_registered_lazily_with_defaults():
    for name in ("docci", "dci", "long-dci", "urban1k"):
        assert name in DATASETS
        spec = get_benchmark(name)
        assert spec.protocol(None).name == spec.default_protocol
        assert spec.license and spec.citation.startswith("@") and spec.homepage.startswith("https://")
    assert get_benchmark("docci").protocol("goal").name == "test+qual"
    assert get_benchmark("urban1k").protocol("goal").name == "test"
    with pytest.raises(ConfigError, match="did you mean 'docci'"):
        get_benchmark("doci")
    with pytest.raises(ConfigError, match=r"no protocol 'val'.*test \(5000 images\)"):
        get_benchmark("docci").protocol("val")


def test_no_data_says_where_it_comes_from():
    with pytest.raises(DataError, match="hnbench datasets download urban1k"):
        load("urban1k")


# --- DOCCI ---------------------------------------------------------------------------------------
def test_docci_protocols_select_splits_and_keep_description_raw(tmp_path):
    rows = build_docci(tmp_path)
    ds = load("docci", data_root=tmp_path, expected_counts={"n_images": 5, "n_captions": 5})
    test_rows = [r for r in rows if r["split"] == "test"]
    assert ds.protocol == "test" and ds.caption_ids == [r["example_id"] for r in test_rows]
    assert ds.captions == [r["description"] for r in test_rows]  # raw: leading spaces and newline kept
    assert _paths(ds) == [r["image_file"] for r in test_rows]
    assert ds.meta["count_check"]["status"] == "ok" and ds.meta["protocol_families"] == ["zero-shot-splits"]
    goal = load("docci", data_root=tmp_path, protocol="test+qual", expected_counts={"n_images": 7, "n_captions": 7})
    assert goal.image_ids == [r["example_id"] for r in rows if r["split"] in ("test", "qual_test")]
    assert "qual_dev_00000" not in goal.image_ids and goal.meta["protocol_families"] == ["goal-splits"]


def test_count_mismatch_is_an_error_unless_allowed(tmp_path):
    build_docci(tmp_path)
    with pytest.raises(DataError, match=r"loaded 5 images / 5 captions, expected 5000 / 5000.*--allow-count-mismatch"):
        load("docci", data_root=tmp_path)
    ds = load("docci", data_root=tmp_path, allow_count_mismatch=True)
    assert ds.meta["count_check"]["status"] == "mismatch allowed"
    assert ds.meta["count_check"]["expected"] == {"n_images": 5000, "n_captions": 5000}


def test_docci_bad_rows(tmp_path):
    build_docci(tmp_path)
    path = tmp_path / "docci_descriptions.jsonlines"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], '{"example_id": "test_9", "split": "test"', *lines[1:]]) + "\n")
    with pytest.raises(DataError, match=r"docci_descriptions.jsonlines:2: malformed annotation line"):
        load("docci", data_root=tmp_path, allow_count_mismatch=True)
    ds = load("docci", data_root=tmp_path, skip_invalid=True, expected_counts={"n_images": 5, "n_captions": 5})
    assert ds.n_images == 5 and list(ds.skipped) == ["malformed annotation"]
    path.write_text("\n".join(lines) + "\n")
    (tmp_path / "images" / "test_00002.jpg").unlink()  # a caption without its image
    with pytest.raises(DataError, match=r"image 'test_00002' not found at .*images/test_00002.jpg"):
        load("docci", data_root=tmp_path, allow_count_mismatch=True)
    # a skip leaves a smaller benchmark: the count check compares what is left with the published count
    with pytest.raises(DataError, match=r"loaded 4 images / 4 captions after skipping 1 items \(missing image\), "
                                        r"expected 5 / 5.*another benchmark.*--allow-count-mismatch"):
        load("docci", data_root=tmp_path, skip_invalid=True, expected_counts={"n_images": 5, "n_captions": 5})
    ds = load("docci", data_root=tmp_path, skip_invalid=True, allow_count_mismatch=True,
              expected_counts={"n_images": 5, "n_captions": 5})
    assert ds.n_images == 4 and ds.skipped == {"missing image": ["test_00002"]}
    check = ds.meta["count_check"]
    assert (check["status"], check["n_skipped"], check["loaded"]["n_images"]) == ("mismatch allowed", 1, 4)


# --- DCI -----------------------------------------------------------------------------------------
def test_dci_full_order_and_caption_text(tmp_path):
    base = build_dci(tmp_path)
    assert (base / "complete").is_dir() and dci_name(8) not in (base / "splits.json").read_text()
    ds = load("dci", data_root=tmp_path, expected_counts={"n_images": 8, "n_captions": 8})
    # splits.json order: train (2..4), valid (0..1), test (5..7); sa_1008's annotation is in no split
    assert ds.image_ids == [f"sa_{1000 + i}" for i in (2, 3, 4, 0, 1, 5, 6, 7)]
    assert ds.captions[0] == "Short caption 2.\nExtra caption 2. It has two sentences"
    assert ds.captions[1] == "Short caption 3.\n"  # empty extra caption kept: short + newline
    assert _paths(ds) == [f"{i}.jpg" for i in ds.image_ids]
    assert ds.meta["splits"] == {"train": 3, "valid": 2, "test": 3}
    sent = load("dci", data_root=tmp_path / "densely_captioned_images", protocol="full-sentences",
                expected_counts={"n_images": 8, "n_captions": 8})
    assert sent.captions[0] == "Short caption 2. Extra caption 2. It has two sentences"
    assert sent.meta["caption_rule"] == "short+extra-sentences"


def test_dci_goal_needs_the_list_and_indexes_annotations_by_image(tmp_path, caplog):
    build_dci(tmp_path)
    with pytest.raises(DataError, match=r"DCI_test.json \(1999 items\).*PerceptualAI-Lab/GOAL.*2db3d4a0c035.*--split-file"):
        load("dci", data_root=tmp_path, protocol="goal")
    lst = goal_list(tmp_path / "elsewhere" / "my_list.json", [6, 7, 0, 8], captions={0: "not the release's"})
    with caplog.at_level(logging.WARNING):
        ds = load("dci", data_root=tmp_path, protocol="goal", split_file=str(lst),
                  expected_counts={"n_images": 4, "n_captions": 4})
    # annotations are <unit id>-data.json: each found through its `image` field, in the list's order
    assert ds.image_ids == ["sa_1006", "sa_1007", "sa_1000", "sa_1008"]  # sa_1008: in no split of splits.json
    assert ds.captions == [f"Extra caption {i}. It has two sentences" for i in (6, 7, 0, 8)]  # extra_caption only
    rec = ds.meta["split_lists"][0]
    assert rec["file"] == "DCI_test.json" and rec["verified"] is False and len(rec["sha256"]) == 64
    assert "differs from the published" in caplog.text and ds.meta["list_captions_differing"] == 1
    with pytest.raises(ConfigError, match="uses no split list"):
        load("dci", data_root=tmp_path, split_file=str(lst))
    # a list whose hash is the published one is marked verified
    spec = get_benchmark("dci")
    goal = spec.protocol("goal")
    published = replace(goal.lists[0], sha256=sha256_file(lst))
    spec = replace(spec, protocols=(replace(goal, lists=(published,), n_images=4, n_captions=4),))
    ds = load_benchmark(spec, data_root=tmp_path, protocol="goal", split_file=str(lst))
    assert ds.meta["split_lists"][0]["verified"] is True and ds.meta["count_check"]["status"] == "ok"


def test_dci_goal_list_naming_absent_images_fails_the_count_check(micro_config, tmp_path, use_sized, capsys):
    """A copy holding fewer of the listed images is a smaller benchmark, not "invalid input"."""
    build_dci(tmp_path / "dci")
    lst = goal_list(tmp_path / "DCI_test.json", [6, 7, 0, 90, 91])  # sa_1090, sa_1091: not in this release
    use_sized("dci", goal=5)
    argv = ["--dataset", "dci", "--data-root", str(tmp_path / "dci"), "--protocol", "goal", "--split-file", str(lst)]
    rc, res = _eval(micro_config, tmp_path / "out", *argv)
    err = capsys.readouterr().err.strip()
    assert (rc, res) == (2, None) and "no DCI annotation" in err and "'sa_1090.jpg'" in err
    rc, res = _eval(micro_config, tmp_path / "out", *argv, "--skip-invalid")
    err = capsys.readouterr().err.strip()
    assert (rc, res) == (2, None) and len(err.splitlines()) == 1
    assert "loaded 3 images / 3 captions after skipping 2 items (not in the release), expected 5 / 5" in err
    assert "--allow-count-mismatch" in err
    rc, res = _eval(micro_config, tmp_path / "out", *argv, "--skip-invalid", "--allow-count-mismatch")
    assert rc == 0
    d = res["dataset"]
    assert (d["n_images"], d["skipped"]) == (3, {"not in the release": 2})
    check = d["meta"]["count_check"]
    assert (check["status"], check["n_skipped"], check["expected"]) == ("mismatch allowed", 2,
                                                                        {"n_images": 5, "n_captions": 5})


def test_dci_bad_annotations(tmp_path):
    base = build_dci(tmp_path)
    bad = base / "annotations" / dci_name(4)
    bad.write_text('{"image": "sa_1004.jpg", "short_caption": ')
    with pytest.raises(DataError, match=rf"annotations/{dci_name(4)}: malformed annotation"):
        load("dci", data_root=tmp_path, allow_count_mismatch=True)
    with pytest.raises(DataError, match=r"loaded 7 images / 7 captions after skipping 1 items"):
        load("dci", data_root=tmp_path, skip_invalid=True, expected_counts={"n_images": 8, "n_captions": 8})
    ds = load("dci", data_root=tmp_path, skip_invalid=True, allow_count_mismatch=True,
              expected_counts={"n_images": 8, "n_captions": 8})
    assert ds.n_images == 7 and ds.meta["count_check"]["status"] == "mismatch allowed"
    lst = goal_list(tmp_path / "DCI_test.json", [4])  # the unreadable annotation cannot be found by its image
    with pytest.raises(DataError, match=rf"has image 'sa_1004.jpg'; 1 annotation files have no readable 'image', "
                                        rf"e.g. {dci_name(4)}"):
        load("dci", data_root=tmp_path, protocol="goal", split_file=str(lst), allow_count_mismatch=True)
    bad.write_text(json.dumps({"image": "sa_1004.jpg", "short_caption": "x"}))
    with pytest.raises(DataError, match=rf"{dci_name(4)}: malformed annotation: no string field\(s\) \['extra_caption'\]"):
        load("dci", data_root=tmp_path, allow_count_mismatch=True)
    (base / "splits.json").unlink()
    with pytest.raises(DataError, match=r"splits.json not found; it ships in DCI's dci.tar.gz"):
        load("dci", data_root=tmp_path)
    shutil.rmtree(base / "photos")
    with pytest.raises(DataError, match=r"photos not found; DCI's photos are SA-1B archive sa_000138.tar"):
        load("dci", data_root=tmp_path)


# --- Long-DCI ------------------------------------------------------------------------------------
def test_long_dci_csv_and_rebuild_agree(tmp_path):
    base = build_dci(tmp_path)
    rebuilt = load("long-dci", data_root=tmp_path, expected_counts={"n_images": 8, "n_captions": 8})
    # TULIP's construction: every annotations/*.json (sa_1008 is in no split), sorted by file name (the
    # fixture's unit ids fall as the photo number rises); only a zero-length extra_caption is dropped
    assert rebuilt.image_ids == [f"sa_{1000 + i}" for i in (8, 7, 6, 5, 4, 2, 1, 0)]
    assert rebuilt.meta["dropped_empty"] == 1 and "sa_1003" not in rebuilt.image_ids
    assert rebuilt.captions[3] == " \n  " and rebuilt.meta["empty_captions"] == ["sa_1005"]  # whitespace kept
    assert rebuilt.captions[0] == "Extra caption 8. It has two sentences"
    build_long_dci_csv(tmp_path, base)
    csv_ds = load("long-dci", data_root=tmp_path, expected_counts={"n_images": 8, "n_captions": 8})
    assert csv_ds.meta["list_source"]["file"].endswith("dci_long.csv")
    assert (csv_ds.image_ids, csv_ds.captions, _paths(csv_ds)) == (rebuilt.image_ids, rebuilt.captions, _paths(rebuilt))
    assert csv_ds.meta["empty_captions"] == ["sa_1005"] and csv_ds.fingerprint() == rebuilt.fingerprint()
    with open(tmp_path / "dci_long.csv", "a") as f:
        f.write("sa_1099.jpg\tA caption whose photo is missing\n")
    with pytest.raises(DataError, match=r"image 'sa_1099' not found at .*sa_1099.jpg"):
        load("long-dci", data_root=tmp_path, allow_count_mismatch=True)


def test_long_dci_goal_uses_both_lists(tmp_path):
    build_dci(tmp_path)
    goal_list(tmp_path / "lists" / "DCI_train_del_org.json", [1, 2, 4])
    goal_list(tmp_path / "lists" / "DCI_test.json", [6, 7])
    with pytest.raises(DataError, match="needs DCI_train_del_org.json"):
        load("long-dci", data_root=tmp_path, protocol="goal")
    ds = load("long-dci", data_root=tmp_path, protocol="goal", split_file=[str(tmp_path / "lists")],  # a folder
              expected_counts={"n_images": 5, "n_captions": 5})
    assert ds.image_ids == ["sa_1001", "sa_1002", "sa_1004", "sa_1006", "sa_1007"]
    assert [r["file"] for r in ds.meta["split_lists"]] == ["DCI_train_del_org.json", "DCI_test.json"]
    with pytest.raises(ConfigError, match="needs DCI_train_del_org.json and DCI_test.json"):
        load("long-dci", data_root=tmp_path, protocol="goal", split_file=[str(goal_list(tmp_path / "x.json", [1]))])


# --- Urban-1K ------------------------------------------------------------------------------------
def test_urban1k_first_nonempty_line_numeric_order(tmp_path):
    base = build_urban1k(tmp_path)  # 5.txt starts with a blank line, as the release's 592.txt
    assert (base / "caption" / "5.txt").read_text().startswith("\n")
    assert (base / "caption" / "2.txt").read_text()[-1] != "\n" and (base / "caption" / "3.txt").read_text()[-1] == "\n"
    ds = load("urban1k", data_root=tmp_path, expected_counts={"n_images": 11, "n_captions": 11})
    assert ds.image_ids == [str(k) for k in range(1, 12)]  # 1, 2, ..., 10, 11 — not 1, 10, 11, 2
    assert ds.captions == [urban_caption(k) for k in range(1, 12)]  # with or without a final line break alike
    assert _paths(ds) == [f"{k}.jpg" for k in range(1, 12)]
    assert ds.meta["caption_rule"] == "first-nonempty-line" and ds.meta["first_line_blank"] == ["5"]
    assert "first line that is not blank" in ds.meta["caption_rule_text"]


def test_urban1k_longclip_rule_keeps_the_empty_query(tmp_path):
    build_urban1k(tmp_path)
    ds = load("urban1k", data_root=tmp_path, protocol="longclip", expected_counts={"n_images": 11, "n_captions": 11})
    # readlines()[0] verbatim: line break kept where the file has one, an empty query for the blank first line
    assert ds.captions[:5] == [urban_caption(1) + "\n", urban_caption(2), urban_caption(3) + "\n", urban_caption(4),
                               "\n"]
    assert ds.image_ids == [str(k) for k in range(1, 12)] and ds.meta["empty_captions"] == ["5"]
    assert ds.meta["caption_rule"] == "longclip-first-line" and ds.meta["first_line_blank"] == ["5"]
    assert ds.fingerprint() != load("urban1k", data_root=tmp_path, expected_counts={"n_images": 11,
                                                                                   "n_captions": 11}).fingerprint()


def test_urban1k_lotlip_rule_rejoins_the_first_lines_sentences(tmp_path):
    """LoTLIP's dataloaders/urban1k.py: readlines()[0], split on newlines / </s> / '.', re-joined with '. '."""
    base = build_urban1k(tmp_path)
    (base / "caption" / "3.txt").write_text("A tram.  Two cyclists </s>a red car..\nA second line never read.\n")
    ds = load("urban1k", data_root=tmp_path, protocol="lotlip", expected_counts={"n_images": 11, "n_captions": 11})
    assert ds.captions[2] == "A tram. Two cyclists. a red car"
    assert ds.captions[0] == urban_caption(1).rstrip(".") and ds.captions[4] == ""  # 5.txt: its first line is blank
    assert ds.image_ids == [str(k) for k in range(1, 12)] and ds.meta["empty_captions"] == ["5"]
    assert ds.meta["caption_rule"] == "longclip-first-line-sentences"
    assert get_benchmark("urban1k").protocol("lotlip").families == ("lotlip-splits",)


def test_urban1k_unpaired_and_empty_files(tmp_path):
    base = build_urban1k(tmp_path, n=6)
    (base / "image" / "3.jpg").unlink()
    with pytest.raises(DataError, match=r"caption/3.txt: caption without an image"):
        load("urban1k", data_root=tmp_path, allow_count_mismatch=True)
    jpeg(base / "image" / "3.jpg", 3)
    (base / "caption" / "5.txt").unlink()
    with pytest.raises(DataError, match=r"image/5.jpg: image without a caption"):
        load("urban1k", data_root=tmp_path, allow_count_mismatch=True)
    with pytest.raises(DataError, match=r"loaded 5 images / 5 captions after skipping 1 items"):
        load("urban1k", data_root=base, skip_invalid=True, expected_counts={"n_images": 6, "n_captions": 6})
    ds = load("urban1k", data_root=base, skip_invalid=True, allow_count_mismatch=True,
              expected_counts={"n_images": 6, "n_captions": 6})
    assert "5" not in ds.image_ids and ds.skipped == {"image without caption": [str(base / "image" / "5.jpg")]}
    (base / "caption" / "5.txt").write_text(" \n\n")
    for protocol in ("test", "longclip"):  # no rule makes a caption of a file with no text
        with pytest.raises(DataError, match=r"caption/5.txt: caption file has no text"):
            load("urban1k", data_root=base, protocol=protocol, allow_count_mismatch=True)


# --- end to end through the CLI ------------------------------------------------------------------
def _eval(micro_config, out, *args) -> tuple[int, dict | None]:
    rc = main(["-q", "eval", "--model", "hnb-micro", "--model-config", str(micro_config), "--output", str(out),
               "--num-workers", "0", "--no-ci", *args])
    files = sorted(Path(out).glob("*.json"))
    return rc, (json.loads(files[-1].read_text()) if files else None)


def test_cli_eval_each_benchmark(micro_config, tmp_path, use_sized):
    build_docci(tmp_path / "docci")
    build_dci(tmp_path / "dci")
    lst = goal_list(tmp_path / "DCI_test.json", [6, 7, 0])
    use_sized("docci", test=5)
    use_sized("dci", goal=3)
    use_sized("long-dci", tulip=8)
    cases = [("docci", "test", []), ("dci", "goal", ["--protocol", "goal", "--split-file", str(lst)]), ("long-dci", "tulip", [])]
    for name, protocol, extra in cases:
        root = tmp_path / name.replace("long-", "")
        rc, res = _eval(micro_config, tmp_path / "out" / name, "--dataset", name, "--data-root", str(root), *extra)
        assert rc == 0
        d = res["dataset"]
        assert (d["name"], d["protocol"], d["meta"]["count_check"]["status"]) == (name, protocol, "ok")
        assert d["n_images"] == d["n_captions"] == res["metrics"]["t2i"]["n_queries"]
        assert len(d["fingerprint"]) == 16 and d["meta"]["caption_rule"]
    assert d["meta"]["dropped_empty"] == 1 and d["meta"]["empty_captions"] == ["sa_1005"]  # TULIP keeps it


def test_cli_eval_urban1k_with_nothing_else(micro_config, tmp_path, use_sized, capsys):
    build_urban1k(tmp_path / "u", n=6)
    out = tmp_path / "out"
    argv = ["-q", "eval", "--dataset", "urban1k", "--data-root", str(tmp_path / "u"), "--model", "hnb-micro",
            "--model-config", str(micro_config), "--output", str(out)]
    assert main(argv) == 2  # real spec: 1,000 expected
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "expected 1000 / 1000" in err and "--allow-count-mismatch" in err
    assert main([*argv, "--allow-count-mismatch", "--num-workers", "0", "--no-ci"]) == 0
    res = json.loads(next(out.glob("*.json")).read_text())
    assert res["dataset"]["meta"]["count_check"]["status"] == "mismatch allowed"
    use_sized("urban1k", test=6, longclip=6)
    assert main([*argv[:-1], str(tmp_path / "out2")]) == 0
    res = json.loads(next((tmp_path / "out2").glob("*.json")).read_text())
    assert res["dataset"]["protocol"] == "test" and res["dataset"]["n_images"] == 6
    assert res["dataset"]["meta"]["count_check"]["status"] == "ok"
    assert res["dataset"]["meta"]["caption_rule"] == "first-nonempty-line"
    # Long-CLIP's reading: 5.txt's blank first line is an empty query, scored like any other
    assert main([*argv[:-1], str(tmp_path / "out3"), "--protocol", "longclip"]) == 0
    res = json.loads(next((tmp_path / "out3").glob("*.json")).read_text())
    meta = res["dataset"]["meta"]
    assert (meta["caption_rule"], meta["empty_captions"], res["metrics"]["t2i"]["n_queries"]) == (
        "longclip-first-line", ["5"], 6)


def test_truncated_jpeg_errors_or_is_skipped(micro_config, tmp_path, use_sized):
    base = build_urban1k(tmp_path, n=6)
    truncate(base / "image" / "4.jpg")
    use_sized("urban1k", test=6)
    from hnbench.evaluation.evaluate import evaluate

    kw = dict(data_root=str(tmp_path), model_config=str(micro_config), num_workers=0, progress=False, ci=False)
    with pytest.raises(ImageLoadError, match=r"image/4.jpg"):
        evaluate("hnb-micro", "urban1k", **kw)
    # an image found unreadable while encoding also leaves a smaller benchmark: the count check runs again
    with pytest.raises(DataError, match=r"loaded 5 images / 5 captions after skipping 1 items \(unreadable image\)"):
        evaluate("hnb-micro", "urban1k", skip_invalid=True, **kw)
    r = evaluate("hnb-micro", "urban1k", skip_invalid=True, dataset_options={"allow_count_mismatch": True}, **kw)
    assert r.dataset["n_images"] == 5 and r.dataset["skipped"] == {"unreadable image": 1}
    assert r.dataset["meta"]["count_check"]["status"] == "mismatch allowed"


# --- datasets list / info ------------------------------------------------------------------------
def test_datasets_list_and_info(tmp_path, capsys, use_sized):
    assert main(["datasets", "list"]) == 0
    out = capsys.readouterr().out
    assert all(n in out for n in ("docci", "dci", "long-dci", "urban1k", "synthdense")) and "test+qual (5100)" in out
    assert main(["datasets", "info", "dci"]) == 0
    out = capsys.readouterr().out
    assert "CC BY-NC" in out and "@InProceedings{Urbanek_2024_CVPR" in out and "no data found" in out
    # every protocol's count and caption rule
    assert "protocol goal: 1999 images / 1999 captions" in out and "caption rule extra: DCI extra_caption alone, raw" in out
    assert main(["datasets", "info", "urban1k"]) == 0
    out = capsys.readouterr().out
    assert "protocol longclip: 1000 images / 1000 captions" in out and "caption rule longclip-first-line" in out
    build_urban1k(tmp_path, n=6)
    use_sized("urban1k", test=6)
    assert main(["datasets", "info", "urban1k", "--data-root", str(tmp_path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["n_images"], info["n_captions"], info["count_check"]["status"]) == (6, 6, "ok")
    tokens = info["caption_stats"]["tokens"]
    assert info["caption_stats"]["words"]["mean"] == 10.0 and tokens["share_over_77"] == 0.0
    assert info["license"] == "CC BY-NC 4.0" and info["citation"] and len(info["fingerprint"]) == 16
    assert info["fingerprint"] == load("urban1k", data_root=tmp_path).fingerprint()
    assert info["caption_rule"] == "first-nonempty-line"
    assert {p["name"]: p["caption_rule"] for p in info["protocols"]} == {
        "test": "first-nonempty-line", "longclip": "longclip-first-line", "lotlip": "longclip-first-line-sentences"}


def test_datasets_info_takes_the_eval_flags(tmp_path, capsys, use_sized):
    base = build_urban1k(tmp_path, n=6)
    (base / "caption" / "4.txt").unlink()  # a bad item
    use_sized("urban1k", test=6)
    argv = ["-q", "datasets", "info", "urban1k", "--data-root", str(tmp_path), "--json"]
    assert main(argv) == 2
    assert "image without a caption (no caption/4.txt) (pass --skip-invalid" in capsys.readouterr().err
    assert main([*argv, "--skip-invalid"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "after skipping 1 items" in err and "--allow-count-mismatch" in err
    assert main([*argv, "--skip-invalid", "--allow-count-mismatch"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["n_images"], info["skipped"], info["count_check"]["status"]) == (
        5, {"image without caption": 1}, "mismatch allowed")


def test_caption_stats_counts_clip_tokens():
    s = caption_stats(["a photo", " ".join(["word"] * 100), " ".join(["word"] * 300)])
    assert s["words"]["max"] == 300 and s["tokens"]["max"] == 302  # one BPE token a word + start/end
    assert (s["tokens"]["n_over_77"], s["tokens"]["n_over_248"]) == (2, 1)


# --- download ------------------------------------------------------------------------------------
def test_download_plan_names_official_sources(tmp_path):
    steps = {s.resource.filename: s for s in download.plan(get_benchmark("dci"), tmp_path)}
    assert steps["dci.tar.gz"].source == "https://dl.fbaipublicfiles.com/densely_captioned_images/dci.tar.gz"
    assert steps["dci.tar.gz"].resource.sha256 == "d865c244150168d3f25daaad0bf5b70b2123cf3e83ca7b0e207d5b26943c5fc7"
    assert steps["sa_000138.tar"].action == "manual" and "segment-anything" in steps["sa_000138.tar"].source
    assert steps["DCI_test.json"].source == ("https://raw.githubusercontent.com/PerceptualAI-Lab/GOAL/"
                                             "2db3d4a0c03576bb961632832af7a43aaf3c60db/datasets/DCI_test.json")
    for bad in ("[1, 2]", '{"resources": ["dci.tar.gz"]}', "\xff not text"):  # a hand-edited or foreign record
        (tmp_path / "hnbench_download.json").write_bytes(bad.encode("latin-1"))
        assert [s.action for s in download.plan(get_benchmark("dci"), tmp_path)] == [
            s.action for s in steps.values()]  # read as no record: nothing counts as present
    (tmp_path / "hnbench_download.json").unlink()
    urban = download.plan(get_benchmark("urban1k"), tmp_path)
    assert urban[0].source.startswith("https://huggingface.co/datasets/BeichenZhang/Urban1k")
    with pytest.raises(ConfigError, match="none of its files"):
        download.plan(get_benchmark("dci"), tmp_path, local=["other.tar"])


def _tar(path: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz" if path.suffix == ".gz" else "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_download_from_local_files_builds_the_loader_layout(tmp_path, use_sized):
    src = tmp_path / "src"
    build_docci(src)
    archive = _tar(tmp_path / "docci_images.tar.gz", {f"images/{p.name}": p.read_bytes()
                                                      for p in sorted((src / "images").iterdir())})
    to = tmp_path / "docci"
    out = download.download(get_benchmark("docci"), to, local=[archive, src / "docci_descriptions.jsonlines"],
                            progress=False)
    assert out["resources"]["docci_images.tar.gz"]["n_files"] == 10 and not out["manual"]
    use_sized("docci", test=5)
    ds = load("docci", data_root=to)
    assert ds.n_images == 5 and ds.meta["download"]["resources"]["docci_images.tar.gz"]["sha256"]
    # SA-1B's archive: only the jpgs, flattened into DCI's photos/
    sa = _tar(tmp_path / "sa_000138.tar", {"sa_1.jpg": b"x", "sa_1.json": b"{}", "sub/sa_2.jpg": b"y"})
    n = fetching.extract(sa, tmp_path / "photos", members="*.jpg")
    assert n == 2 and sorted(p.name for p in (tmp_path / "photos").iterdir()) == ["sa_1.jpg", "sa_2.jpg"]


def test_download_urban1k_zip_and_checksum_mismatch(tmp_path, use_sized):
    src = build_urban1k(tmp_path / "src", n=3)
    with zipfile.ZipFile(tmp_path / "Urban1k.zip", "w") as z:
        for p in sorted(src.rglob("*")):
            if p.is_file():
                z.write(p, f"Urban1k/{p.relative_to(src)}")
    download.download(get_benchmark("urban1k"), tmp_path / "u", local=[tmp_path / "Urban1k.zip"], progress=False)
    use_sized("urban1k", test=3)
    assert load("urban1k", data_root=tmp_path / "u").n_images == 3
    fake = _tar(tmp_path / "dci.tar.gz", {"densely_captioned_images/splits.json": b"{}"})
    with pytest.raises(DataError, match=r"dci.tar.gz: sha256 [0-9a-f]{64} does not match the published d865c244"):
        download.download(get_benchmark("dci"), tmp_path / "d", local=[fake], progress=False)
    assert not (tmp_path / "d" / "densely_captioned_images").exists()
    bad = tmp_path / "evil.zip"
    with zipfile.ZipFile(bad, "w") as z:
        z.writestr("../outside.txt", "x")
    with pytest.raises(DataError, match="outside"):
        fetching.extract(bad, tmp_path / "x")


def test_superseded_dci_archive_is_accepted_with_a_warning_naming_it(tmp_path, caplog, use_sized):
    assert download.verify_sha256(DCI_ARCHIVE, DCI_ARCHIVE.sha256) == {"verified": True}
    old = "9caff10cb6324c801d9020638f49925f04de87d897ca8614c599f3c43bef3aeb"
    with caplog.at_level(logging.WARNING):
        assert download.verify_sha256(DCI_ARCHIVE, old)["verified"] == "superseded"
    assert "9caff10cb632 is the dci.tar.gz DCI's download script checked before its commit 5e893931" in caplog.text
    # a stand-in archive through download(): its hash registered as a superseded release of the spec's dci.tar.gz
    src = build_dci(tmp_path / "src")
    standin = _tar(tmp_path / "dci.tar.gz", {f"densely_captioned_images/{p.relative_to(src)}": p.read_bytes()
                                             for p in sorted(src.rglob("*.json"))})
    archive = replace(DCI_ARCHIVE, superseded=((sha256_file(standin), "a stand-in for an older dci.tar.gz"),))
    spec = replace(get_benchmark("dci"), resources=(archive,))
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        out = download.download(spec, tmp_path / "d", local=[standin], progress=False)
    assert "dci.tar.gz: sha256" in caplog.text and "is a stand-in for an older dci.tar.gz" in caplog.text
    entry = out["resources"]["dci.tar.gz"]
    assert (entry["verified"], entry["superseded"]) == ("superseded", "a stand-in for an older dci.tar.gz")
    assert (tmp_path / "d" / "densely_captioned_images" / "splits.json").is_file()  # unpacked


def test_download_offline_is_one_clear_line(tmp_path, monkeypatch, capsys):
    def offline(*a, **k):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(fetching, "_urlopen", offline)
    assert main(["-q", "datasets", "download", "docci", "--to", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cannot download https://storage.googleapis.com/docci/" in err
    assert "--local" in err

    import huggingface_hub

    def no_hub(*a, **k):
        raise OSError("We couldn't connect to 'https://huggingface.co'\nmore detail")

    monkeypatch.setattr(huggingface_hub.HfApi, "dataset_info", no_hub)
    assert main(["-q", "datasets", "download", "urban1k", "--to", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "huggingface.co/datasets/BeichenZhang/Urban1k" in err


def test_load_dataset_routes_benchmark_names(tmp_path, use_sized):
    build_urban1k(tmp_path, n=4)
    use_sized("urban1k", test=4)
    ds = load_dataset("urban1k", data_root=str(tmp_path), split="test")
    assert ds.name == "urban1k" and ds.n_images == 4
    with pytest.raises(ConfigError, match="unknown option"):
        load_dataset("urban1k", data_root=str(tmp_path), bogus=1)
