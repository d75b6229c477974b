"""Caption-length monotonicity (``--task monotonicity``, HiMo-Docci's HiMo@K): Pearson r between prefix index
and image–text cosine per list, mean over lists; closed form on hand-made embeddings."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from conftest import make_pairs, write_jsonl

from hnbench.cli import main
from hnbench.evaluation.evaluate import evaluate
from hnbench.models import load_model
from hnbench.results.leaderboard import leaderboard
from hnbench.results.record import read_result
from hnbench.tasks.monotonicity import himo_scores, pearson, prefix_lists


def _unit(cos: float) -> list[float]:
    """A 2-d unit vector whose cosine with (1, 0) is ``cos``."""
    return [cos, math.sqrt(1 - cos * cos)]


def test_himo_closed_form_on_hand_made_embeddings():
    image = np.array([[1.0, 0.0], [0.0, 1.0]])
    cosines = {"rising": [0.1, 0.4, 0.7], "falling": [0.7, 0.4, 0.1], "v": [0.5, 0.2, 0.5], "curve": [0.2, 0.5, 0.9]}
    texts, lists = [], []
    for ys in cosines.values():
        lists.append((0, list(range(len(texts), len(texts) + len(ys)))))
        texts += [_unit(y) for y in ys]
    # a second image: its vector is (0, 1), so its texts' cosines are the vectors' second coordinates
    lists.append((1, [0, 1]))  # cosines sqrt(1-0.01), sqrt(1-0.16): falling with length
    r = himo_scores(image, np.array(texts), lists)
    # x = 1..3: r = (y3 - y1) / sqrt(2 Σ (y - ȳ)²); linear rise +1, fall -1, a V 0
    curve = cosines["curve"]
    mean = sum(curve) / 3
    expected_curve = (curve[2] - curve[0]) / math.sqrt(2 * sum((y - mean) ** 2 for y in curve))
    assert r[:3] == pytest.approx([1.0, -1.0, 0.0], abs=1e-12)
    assert r[3] == pytest.approx(expected_curve, rel=1e-12) and r[4] == pytest.approx(-1.0)
    assert math.isnan(pearson([0.3])) and math.isnan(pearson([0.3, 0.3]))


def test_prefix_lists_from_sentences_and_from_captions():
    texts, lists = prefix_lists(["A red cube. It is small! A ball?", "One."], [0, 1], "sentences")
    assert texts == ["A red cube.", "A red cube. It is small!", "A red cube. It is small! A ball?", "One."]
    assert lists == [(0, [0, 1, 2]), (1, [3])]
    texts, lists = prefix_lists(["a", "a b", "x", "a b c"], [0, 0, 1, 0], "captions")
    assert lists == [(0, [0, 1, 3]), (1, [2])]


def test_monotonicity_eval_equals_the_formula_on_its_embeddings(micro_config, tmp_path, capsys):
    pairs = make_pairs(tmp_path, n=4)
    rows = [{"image": p, "caption": f"{c}. It sits in a corner. The light is dim. Nothing else is there."}
            for p, c in pairs]
    manifest = write_jsonl(tmp_path / "m.jsonl", rows)
    encoder = load_model("hnb-micro", model_config=str(micro_config))
    r = evaluate(encoder, manifest, task="monotonicity", output_dir=tmp_path / "out", num_workers=0, progress=False)
    # by hand: each caption's four sentence prefixes, their embeddings, Pearson r against 1..4, the mean
    import torch

    from hnbench.data import load_dataset

    ds = load_dataset(manifest)
    texts, lists = prefix_lists(ds.captions, ds.caption_image.tolist(), "sentences")
    with torch.no_grad():
        img = encoder.encode_images(torch.stack([encoder.image_transform(ds.images.open(i))
                                                 for i in range(ds.n_images)])).numpy()
        txt = encoder.encode_texts(encoder.tokenize(texts).tokens).numpy()
    by_hand = [float(np.corrcoef(np.arange(1, len(t) + 1), [img[i] @ txt[j] for j in t])[0, 1]) for i, t in lists]
    m = r.metrics["monotonicity"]
    assert m["HiMo@K"] == pytest.approx(np.mean(by_hand), abs=1e-5) and m["n_queries"] == 4
    assert m["mean_prefixes"] == 4.0 and r.main_score["name"] == "HiMo@K"
    lo, hi = r.ci95["monotonicity"]["HiMo@K"]
    assert -1 <= lo <= m["HiMo@K"] <= hi <= 1
    stored = read_result(r.path)
    assert stored.task == "monotonicity" and "monotonicity" in stored.stem()
    board = leaderboard([tmp_path / "out"])
    assert "## Caption-length monotonicity" in board and "HiMo@K" in board and "R@1" not in board.split("## ")[-1]
    # the CLI: --task monotonicity --prefixes captions on the same manifest (one caption per image: nothing to
    # correlate) is one line, exit 2
    code = main(["eval", "--model", "hnb-micro", "--model-config", str(micro_config), "--dataset", str(manifest),
                 "--task", "monotonicity", "--prefixes", "captions", "--output", str(tmp_path / "cli"),
                 "--num-workers", "0"])
    err = capsys.readouterr().err
    assert code == 2 and err.strip().startswith("hnbench: error:") and "HiMo@K is undefined" in err


@pytest.mark.slow
def test_monotonicity_on_synthdense_is_a_bounded_himo_recorded_under_its_task(tmp_path):
    r = evaluate("hnbench-tiny", "synthdense", pretrained="synthdense", protocol="test", task="monotonicity",
                 output_dir=tmp_path, num_workers=0, progress=False)
    m = r.metrics["monotonicity"]
    assert -1 <= m["HiMo@K"] <= 1 and m["n_queries"] > 0 and m["mean_prefixes"] > 1
    assert json.loads((tmp_path / f"{r.stem()}.json").read_text())["task"] == "monotonicity"
