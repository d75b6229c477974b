"""Winoground read from replicas of both release layouts (the Hub's parquet, the original examples.jsonl + images),
its text / image / group scores checked against the card's functions and MTEB's argmax on the same scores, and each
refusal of the spec one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from choice_fixtures import choice_eval, picture, stored, use_item_counts
from conftest import assert_one_line_error

from hnbench.cli import main
from hnbench.data.benchmarks import get_benchmark
from hnbench.data.benchmarks.download import plan

N = 6
TAGS = ["Object", "Relation", "Both", "Object", "Relation", "Object"]


def examples() -> list[dict]:
    """Six examples; the fourth's captions differ only in case (one token sequence: both images tie on them)."""
    rows = []
    for i in range(N):
        c0, c1 = f"a dog {i} chases a cat", f"a cat {i} chases a dog"
        if i == 3:
            c0, c1 = "The Red cup left of the blue one", "the red cup left of the blue one"
        rows.append({"id": i, "caption_0": c0, "caption_1": c1, "tag": TAGS[i], "secondary_tag": "" if i % 2 else "Symbolic",
                     "num_main_preds": 1 + i % 2, "collapsed_tag": TAGS[i], "image_0": f"ex_{i}_img_0",
                     "image_1": f"ex_{i}_img_1"})
    return rows


def build_jsonl(root: Path, rows: list[dict] | None = None) -> Path:
    """The original layout: data/examples.jsonl and data/images/<name>.png."""
    rows = examples() if rows is None else rows
    (root / "data").mkdir(parents=True, exist_ok=True)
    (root / "data" / "examples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for r in rows:
        for k in (0, 1):
            picture(root / "data" / "images" / f"{r[f'image_{k}']}.png", 2 * r["id"] + k)
    return root


def build_parquet(root: Path, from_jsonl: Path, empty: tuple[int, int] | None = None) -> Path:
    """The Hub's layout: data/test-00000-of-00001.parquet with HF Image columns holding the same PNG bytes."""
    import datasets

    rows = [json.loads(line) for line in (from_jsonl / "data" / "examples.jsonl").read_text().splitlines()]
    cols: dict[str, list] = {k: [] for k in rows[0]}
    for r in rows:
        for k, v in r.items():
            if k.startswith("image_"):
                v = None if empty == (r["id"], int(k[-1])) else {
                    "bytes": (from_jsonl / "data" / "images" / f"{v}.png").read_bytes(), "path": f"{v}.png"}
            cols[k].append(v)
    features = datasets.Features({"id": datasets.Value("int32"), "image_0": datasets.Image(), "image_1": datasets.Image(),
                                  "caption_0": datasets.Value("string"), "caption_1": datasets.Value("string"),
                                  "tag": datasets.Value("string"), "secondary_tag": datasets.Value("string"),
                                  "num_main_preds": datasets.Value("int32"), "collapsed_tag": datasets.Value("string")})
    (root / "data").mkdir(parents=True, exist_ok=True)
    datasets.Dataset.from_dict(cols, features=features).to_parquet(str(root / "data" / "test-00000-of-00001.parquet"))
    return root


@pytest.fixture
def replica(tmp_path, monkeypatch) -> tuple[Path, Path]:
    use_item_counts(monkeypatch, "winoground", official={"examples": N}, mteb={"examples": N})
    jsonl = build_jsonl(tmp_path / "jsonl")
    return jsonl, build_parquet(tmp_path / "parquet", jsonl)


# the card's demo functions (copied by many evaluation scripts), on {"c{j}_i{i}": s(C_j, I_i)}
def text_correct(result):
    return result["c0_i0"] > result["c1_i0"] and result["c1_i1"] > result["c0_i1"]


def image_correct(result):
    return result["c0_i0"] > result["c0_i1"] and result["c1_i1"] > result["c1_i0"]


def group_correct(result):
    return image_correct(result) and text_correct(result)


def mteb_scores(score: np.ndarray) -> tuple[bool, bool, bool]:
    """MTEB's _compute_metrics on one (images × texts) matrix: argmax per image / per caption vs arange(2)."""
    image_closest_text, text_closest_image = score.argmax(axis=1), score.argmax(axis=0)
    text = bool((image_closest_text == np.arange(2)).all())
    image = bool((text_closest_image == np.arange(2)).all())
    return text, image, text and image


def test_both_layouts_give_the_cards_text_image_and_group_scores(replica, micro_config, tmp_path):
    jsonl, parquet = replica
    runs = {layout: choice_eval(micro_config, "winoground", root, "official", tmp_path / layout)
            for layout, root in (("jsonl", jsonl), ("parquet", parquet))}
    assert runs["jsonl"].dataset["meta"]["layout"] == "jsonl" and runs["parquet"].dataset["meta"]["layout"] == "parquet"
    for layout, result in runs.items():
        scores = stored(result)
        assert sorted(scores) == [f"ex_{i}" for i in range(N)]
        winoground = [{f"c{j}_i{i}": s["m"][i][j] for i in (0, 1) for j in (0, 1)} for s in scores.values()]
        m = result.metrics["choice"]
        for name, fn in (("text", text_correct), ("image", image_correct), ("group", group_correct)):
            assert m[name] == pytest.approx(100 * np.mean([fn(r) for r in winoground]), abs=1e-9), (layout, name)
        assert m["accuracy"] == m["group"] and m["headline"] == "group" and m["n_queries"] == N
        assert scores["ex_3"]["m"][0][0] == scores["ex_3"]["m"][0][1]  # the case-only captions tie on each image
        assert m["n_tied"] >= 1 and not text_correct(winoground[3])
    assert runs["jsonl"].metrics["choice"] == runs["parquet"].metrics["choice"]  # the same images and captions
    assert runs["jsonl"].ci95_method["choice"]["group"] == "bootstrap"
    assert runs["jsonl"].ci95_method["choice"]["text"] == "clopper-pearson"


def test_mteb_protocol_is_mtebs_argmax_over_the_same_scores(replica, micro_config, tmp_path):
    jsonl, _ = replica
    result = choice_eval(micro_config, "winoground", jsonl, "mteb", tmp_path / "out")
    got = [mteb_scores(s["m"]) for s in stored(result).values()]
    m = result.metrics["choice"]
    for k, name in enumerate(("text", "image", "group")):
        assert m[name] == pytest.approx(100 * np.mean([g[k] for g in got]), abs=1e-9), name
    assert result.settings["scoring"]["tie_rule"] == "argmax_first"


def _run(micro_config, root, out) -> int:
    return main(["-q", "eval", "--task", "choice", "--dataset", "winoground", "--data-root", str(root), "--model",
                 "hnb-micro", "--model-config", str(micro_config), "--output", str(out), "--num-workers", "0", "--no-ci"])


@pytest.mark.parametrize("case, words", [
    ("count", ["examples: 5 items, published 6"]),
    ("duplicate id", ["id 1 again"]),
    ("identical captions", ["caption_0 equals caption_1"]),
    ("missing field", ["'collapsed_tag'"]),
    ("image name without file", ["ex_2_img_1", "not found"]),
    ("parquet empty image", ["no image_1 image"]),
    ("no layout", ["gated", "huggingface.co/datasets/facebook/winoground"]),
])
def test_a_winoground_release_the_spec_refuses_is_one_line(replica, micro_config, tmp_path, capsys, case, words):
    jsonl, _ = replica
    rows = examples()
    root = tmp_path / "bad"
    if case == "count":
        build_jsonl(root, rows[:5])
    elif case == "duplicate id":
        rows[2]["id"] = 1
        build_jsonl(root, rows)
    elif case == "identical captions":
        rows[2]["caption_1"] = rows[2]["caption_0"]
        build_jsonl(root, rows)
    elif case == "missing field":
        rows[4].pop("collapsed_tag")
        build_jsonl(root, rows)
    elif case == "image name without file":
        build_jsonl(root, rows)
        (root / "data" / "images" / "ex_2_img_1.png").unlink()
    elif case == "parquet empty image":
        build_parquet(root, jsonl, empty=(2, 1))
    else:
        root.mkdir()
    capsys.readouterr()  # what building the replica printed
    assert _run(micro_config, root, tmp_path / "out") == 2
    assert_one_line_error(capsys.readouterr().err, *words)


def test_winoground_is_never_downloaded_by_hnbench(tmp_path):
    """Gated on the Hub: the download plan lists it as the user's to fetch with their own token."""
    steps = plan(get_benchmark("winoground"), tmp_path)
    assert [s.action for s in steps] == ["manual"] and "own token" in steps[0].source
