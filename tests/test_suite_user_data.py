"""A suite file lists the user's own data (a manifest, an image folder, an HF dataset folder, a class folder for
zero-shot) beside registered benchmarks, each entry checked as ``eval --dataset`` checks it, before any model loads.

Real data on disk (PNG/JPEG files, a ``save_to_disk`` HF dataset, a DOCCI-layout replica), the micro open_clip model.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from benchmark_fixtures import build_docci, use_counts
from conftest import assert_one_line_error, make_pairs, snapshot, write_jsonl
from PIL import Image

from hnbench.cli import main
from hnbench.evaluation.suites import read_suite_file, user_data_keys

QUICK = ["--num-workers", "0", "--no-ci"]


def _links(table: str) -> list[str]:
    return re.findall(r"\]\(([^)]+)\)", table)


def _class_folder(root: Path) -> Path:
    for k, (name, colour) in enumerate((("red", (220, 30, 30)), ("green", (30, 200, 30)), ("blue", (30, 30, 220)))):
        (root / name).mkdir(parents=True)
        for i in range(2):
            im = Image.new("RGB", (32, 32), (15, 15, 15))
            im.paste(colour, (4 + 3 * i, 4 + 3 * i, 20 + 3 * i, 20 + 3 * i))
            im.save(root / name / f"{k}{i}.png")
    return root


def _hf_folder(root: Path) -> Path:
    import datasets

    pairs = make_pairs(root / "src", n=6, seed=1)
    hf = datasets.Dataset.from_dict({"img": [str(root / "src" / p) for p, _ in pairs], "desc": [c for _, c in pairs]})
    hf.cast_column("img", datasets.Image()).save_to_disk(str(root / "hfset"))
    return root / "hfset"


def _micro(micro_config: Path) -> list[str]:
    return ["--model", "hnb-micro", "--model-config", str(micro_config)]


def test_a_suite_file_scores_the_users_data_beside_a_benchmark(tmp_path, monkeypatch, micro_config, capsys):
    work = tmp_path / "work"
    pairs = make_pairs(work / "mine")
    write_jsonl(work / "mine" / "long.jsonl", [{"image": p, "long_caption": c} for p, c in pairs])
    folder_pairs = make_pairs(work / "folder", n=5, seed=2)
    write_jsonl(work / "folder" / "metadata.jsonl", [{"file_name": p, "text": c} for p, c in folder_pairs])
    _hf_folder(work)
    _class_folder(work / "classes")
    (work / "classes.txt").write_text("red\ngreen\nblue\n")
    build_docci(tmp_path / "docci")
    use_counts(monkeypatch, "docci", test=(5, 5))
    (work / "roots.json").write_text(json.dumps({"docci": str(tmp_path / "docci")}))
    (work / "mine.toml").write_text("\n".join([  # paths relative to the suite file, not to the working directory
        'name = "mine"',
        '[[entries]]', 'benchmark = "docci"', 'protocol = "test"',
        '[[entries]]', 'dataset = "mine/long.jsonl"', 'caption_column = "long_caption"', 'name = "my-long"',
        '[[entries]]', 'dataset = "folder"',
        '[[entries]]', 'dataset = "hfset"', 'image_column = "img"', 'caption_column = "desc"',
        '[[entries]]', 'dataset = "classes"', 'task = "zeroshot"', 'class_names = "classes.txt"', ""]))
    monkeypatch.chdir(tmp_path)  # elsewhere than the suite file
    out = tmp_path / "out"
    assert main(["-q", "suite", str(work / "mine.toml"), *_micro(micro_config), "--data-root-map",
                 str(work / "roots.json"), "--output", str(out), "--templates", "simple", *QUICK]) == 0
    table = (out / "suite-mine.md").read_text()
    assert table in capsys.readouterr().out
    for head in ("docci/test t2i R@1", "my-long t2i R@1", "folder i2t R@1", "hfset t2i R@1", "classes top-1"):
        assert head in table, head
    results = [json.loads((out / link).read_text()) for link in dict.fromkeys(_links(table))]
    got = {(r["dataset"]["name"], r["task"]): r for r in results}
    assert got["docci", "retrieval"]["dataset"]["n_images"] == 5
    mine = got["my-long", "retrieval"]
    assert mine["dataset"]["n_images"] == 12 and mine["dataset"]["spec"]["caption_column"] == "long_caption"
    assert got["folder", "retrieval"]["dataset"]["n_images"] == 5
    assert got["hfset", "retrieval"]["dataset"]["spec"]["image_column"] == "img"
    zs = got["classes", "zeroshot"]
    assert zs["metrics"]["classification"]["n_queries"] == 6 and zs["dataset"]["n_classes"] == 3
    recorded = json.loads((out / ".suite-mine.md.inputs.json").read_text())["entries"]
    assert [e["dataset"] for e in recorded][1:] == [str(work / p) for p in ("mine/long.jsonl", "folder", "hfset",
                                                                          "classes")]


def _bad_suite(tmp_path: Path, lines: list[str]) -> Path:
    pairs = make_pairs(tmp_path / "d", n=4)
    write_jsonl(tmp_path / "d" / "captions.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    (tmp_path / "d" / "empty" / "red").mkdir(parents=True)  # a class folder without images
    (tmp_path / "d" / "other").mkdir()
    write_jsonl(tmp_path / "d" / "other" / "captions.jsonl", [{"image": f"../{p}", "caption": c} for p, c in pairs])
    path = tmp_path / "d" / "bad.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


BAD = {
    "missing-file": (['[[entries]]', 'dataset = "absent.jsonl"'], ["dataset not found", "absent.jsonl"]),
    "option-its-kind-does-not-read": (['[[entries]]', 'dataset = "captions.jsonl"', 'split = "test"'],
                                      ["suite entry captions.jsonl", "--split is not read by"]),
    "unknown-key": (['[[entries]]', 'dataset = "captions.jsonl"', 'captoin_column = "x"'],
                    ["entry 1", "'captoin_column'", "caption_column"]),
    "two-entries-one-label": (['[[entries]]', 'dataset = "captions.jsonl"', '[[entries]]',
                               'dataset = "other/captions.jsonl"'],
                              ["entries 1 and 2 are both captions.jsonl", "a 'name' tells two data sets apart"]),
    "a-benchmark-named-as-dataset": (['[[entries]]', 'dataset = "docci"'], ["registered benchmark", "benchmark = 'docci'"]),
    "empty-class-folder": (['[[entries]]', 'dataset = "empty"', 'task = "zeroshot"'], ["empty", "class folder"]),
    "another-tasks-option": (['[[entries]]', 'dataset = "captions.jsonl"', 'class_names = "names.txt"'],
                             ["--class-names is read by --task zeroshot only"]),
    "a-wrongly-typed-option": (['[[entries]]', 'dataset = "empty"', 'task = "zeroshot"', 'class_names = 3'],
                               ["suite entry empty", "--class-names must be a string, got 3"]),
    "skip-invalid-is-the-suites": (['[[entries]]', 'dataset = "captions.jsonl"', 'skip_invalid = true'],
                                   ["'skip_invalid' is a setting of the whole suite"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_user_data_entry_is_one_line_before_any_model_loads(tmp_path, capsys, case):
    lines, words = BAD[case]
    path = _bad_suite(tmp_path, lines)
    before = snapshot(tmp_path)
    # a model name that does not exist: the data's error comes first, nothing is loaded or written
    assert main(["suite", str(path), "--model", "no-such-model", "--output", str(tmp_path / "out")]) == 2
    assert_one_line_error(capsys.readouterr().err, *words)
    assert snapshot(tmp_path) == before and not (tmp_path / "out").exists()


def test_a_data_set_entry_resolves_against_the_suite_file_and_takes_the_declared_options(tmp_path):
    path = _bad_suite(tmp_path, ['[[entries]]', 'dataset = "captions.jsonl"', 'name = "four"',
                                 '[[entries]]', 'dataset = "hf:org/set"', 'split = "test"'])
    suite = read_suite_file(path)
    local, hub = suite.entries
    assert (local.dataset, local.label, dict(local.options)) == (str(tmp_path / "d" / "captions.jsonl"), "four",
                                                                 {"name": "four"})
    assert (hub.dataset, hub.label, hub.benchmark) == ("hf:org/set", "hf:org/set", None)  # a hub id as given
    keys = user_data_keys()
    assert {"name", "split", "image_column", "caption_column", "allow_outside_paths", "class_names"} <= set(keys)
    assert not {"dataset", "skip_invalid", "data_root", "protocol", "split_file"} & set(keys)
