"""The option-choice task: its rules written once (tie rules, Winoground's and SugarCrepe++'s conjunctions,
micro / macro aggregation, intervals), synthdense's compositional variant with known ground truth scored end to end
offline, per-item scores stored beside the result and re-scored under another protocol without re-encoding, the
leaderboard section, and the one-line refusals of data the task cannot score."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from choice_fixtures import choice_eval, metric, stored, use_item_counts
from conftest import assert_one_line_error
from test_bench_sugarcrepe import SUBSETS, build_sugarcrepe

from hnbench.cli import main
from hnbench.data.benchmarks import get_benchmark
from hnbench.data.synthdense import CELLS
from hnbench.data.synthdense_choice import KINDS, scene_items
from hnbench.errors import ConfigError
from hnbench.metrics import clopper_pearson
from hnbench.metrics.choice import (
    Aggregation,
    Scoring,
    aggregate,
    intervals,
    option_correct,
    sugarcrepe_pp_outcomes,
    winoground_outcomes,
)
from hnbench.results.leaderboard import leaderboard
from hnbench.results.record import ResultFormatError, read_per_item, read_per_query, read_result
from hnbench.tasks.choice import rescore

SMALL = {"n_families": {"test": 3}, "family_size": 4, "image_size": 48}  # 12 scenes: seconds on a CPU


# --- the rules -------------------------------------------------------------------------------------------
def test_tie_rules_strict_gt_is_ties_wrong_and_argmax_first_lets_the_first_tied_option_win():
    rows = [np.asarray(r) for r in ([0.3, 0.3], [0.5, 0.7, 0.7], [0.5, 0.7, 0.7], [0.9, 0.1, 0.9], [0.2, 0.6, 0.4])]
    cases = [(rows[0], 0, False, True), (rows[0], 1, False, False), (rows[1], 1, False, True),
             (rows[2], 2, False, False), (rows[3], 0, False, True), (rows[4], 1, True, True)]
    for scores, c, strict, first in cases:
        assert option_correct(scores[None], c, "strict_gt")[0][0] == strict, (scores, c)
        assert option_correct(scores[None], c, "argmax_first")[0][0] == first, (scores, c)
        assert option_correct(scores[None], c, "argmax_first")[0][0] == (int(np.argmax(scores)) == c)  # numpy's argmax
    assert option_correct(rows[0][None], 0, "strict_gt")[1][0] and not option_correct(rows[4][None], 1, "strict_gt")[1][0]


def test_winoground_scores_are_the_papers_and_mtebs_argmax_is_asymmetric_on_ties():
    # s[i][j] = s(I_i, C_j)
    clean = [[0.9, 0.1], [0.2, 0.8]]
    tie_on_image0 = [[0.5, 0.5], [0.1, 0.6]]  # image 0 cannot pick: argmax takes caption 0 (right)
    tie_on_image1 = [[0.6, 0.1], [0.5, 0.5]]  # image 1 cannot pick: argmax takes caption 0 (wrong)
    text_right_image_wrong = [[0.9, 0.1], [0.95, 0.97]]
    tie_on_caption0 = [[0.5, 0.2], [0.5, 0.7]]  # caption 0 cannot pick: argmax takes image 0 (right)
    tie_on_caption1 = [[0.8, 0.4], [0.1, 0.4]]  # caption 1 cannot pick: argmax takes image 0 (wrong)
    s = np.array([clean, tie_on_image0, tie_on_image1, text_right_image_wrong, tie_on_caption0, tie_on_caption1])
    paper, tied = winoground_outcomes(s, "strict_gt")
    mteb, _ = winoground_outcomes(s, "argmax_first")
    assert paper["text"].tolist() == [True, False, False, True, True, True]
    assert mteb["text"].tolist() == [True, True, False, True, True, True]
    assert paper["image"].tolist() == [True, True, True, False, False, False]
    assert mteb["image"].tolist() == [True, True, True, False, True, False]
    assert paper["group"].tolist() == [True, False, False, False, False, False]
    assert mteb["group"].tolist() == [True, True, False, False, True, False]
    assert tied.tolist() == [False, True, True, False, True, True]


def test_sugarcrepe_pp_itt_and_tot_are_strict_conjunctions():
    it = np.array([[0.9, 0.8, 0.1], [0.5, 0.8, 0.5], [0.9, 0.2, 0.3]])  # s(I,P1), s(I,P2), s(I,N)
    tt = np.array([[0.9, 0.2, 0.3], [0.9, 0.9, 0.1], [0.4, 0.3, 0.5]])  # s(P1,P2), s(P1,N), s(P2,N)
    out, tied = sugarcrepe_pp_outcomes(it, tt)
    assert out["ITT"].tolist() == [True, False, False]  # P1 ties N: wrong (a caption equal to its negative)
    assert out["P1-Neg"].tolist() == [True, False, True] and out["P2-Neg"].tolist() == [True, True, False]
    assert out["TOT"].tolist() == [True, False, False] and tied.tolist() == [False, True, False]


def test_macro_aggregation_excludes_listed_groups_and_keeps_a_group_at_exactly_min_count():
    groups = ["a"] * 25 + ["b"] * 24 + ["sym"] * 5 + ["c"] * 30
    right = np.array([k % 5 != 0 for k in range(25)] + [True] * 24 + [False] * 5 + [k % 2 == 0 for k in range(30)])
    agg = Aggregation("rel", exclude=("sym",), min_count=25)
    a = aggregate(right, groups, agg)
    assert a.kept == ["a", "c"] and a.groups["b"]["why"] == "fewer than 25 items" and a.groups["sym"]["why"] == "excluded"
    assert a.value == pytest.approx((100 * 20 / 25 + 100 * 15 / 30) / 2) and a.micro == pytest.approx(100 * right.mean())
    with pytest.raises(ValueError, match="no group is left"):
        aggregate(right[:5], ["sym"] * 5, agg)


def test_intervals_are_clopper_pearson_for_an_accuracy_and_a_seeded_bootstrap_for_macro_and_group():
    right = np.array([True] * 37 + [False] * 13)
    (lo, hi), how = intervals(right, None, Aggregation(), "accuracy")
    assert how == "clopper-pearson" and (lo, hi) == clopper_pearson(37, 50)
    groups = ["x"] * 20 + ["y"] * 30
    agg = Aggregation("g")
    (lo, hi), how = intervals(right, groups, agg, "accuracy", seed=3)
    assert how == "bootstrap" and lo <= aggregate(right, groups, agg).value <= hi
    assert intervals(right, groups, agg, "accuracy", seed=3)[0] == (lo, hi)  # seeded: reproducible
    (glo, ghi), how = intervals(right, None, Aggregation(), "group")
    assert how == "bootstrap" and glo <= 74.0 <= ghi


def test_a_scoring_round_trips_through_its_record():
    s = Scoring("option", ("false_caption", "true_caption"), "true_caption", "argmax_first",
                Aggregation("relation_name", ("near",), exclude_source="notebook"))
    assert Scoring.from_dict(json.loads(json.dumps(s.to_dict()))) == s
    with pytest.raises(ValueError):
        Scoring("option", ("a", "b"), "c")


# --- synthdense's compositional variant ---------------------------------------------------------------
_PAIR = re.compile(r"an? (\w+) (\w+) and an? (\w+) (\w+)")
_REL = re.compile(r"the (\w+) (\w+) is (above|to the left of) the (\w+) (\w+)")


def _holds(scene: dict, text: str) -> bool:
    """Whether a relation caption is true of the scene's geometry."""
    c1, s1, rel, c2, s2 = _REL.fullmatch(text).groups()
    pos = {(o["colour"], o["shape"]): divmod(CELLS.index(o["position"]), 3) for o in scene["objects"]}
    (ra, ca), (rb, cb) = pos[(c1, s1)], pos[(c2, s2)]
    return ra < rb if rel == "above" else (ra == rb and ca < cb)


def test_synthdense_compositional_items_have_known_ground_truth(micro_config, tmp_path):
    from hnbench.data.synthdense import SynthDenseConfig, generate_synthdense

    root = generate_synthdense(tmp_path / "sd", SynthDenseConfig(**SMALL))
    rows = [json.loads(x) for x in (root / "test" / "metadata.jsonl").read_text().splitlines()]
    kinds = {k: 0 for k in KINDS}
    for row in rows:
        scene = row["scene"]
        pairs = {(o["colour"], o["shape"]) for o in scene["objects"]}
        items = scene_items(scene, np.random.default_rng([0, *row["id"].encode()]))
        for kind, (pos, neg) in items.items():
            kinds[kind] += 1
            if kind == "swap-att":
                a = _PAIR.fullmatch(pos).groups()
                b = _PAIR.fullmatch(neg).groups()
                assert {(a[0], a[1]), (a[2], a[3])} <= pairs and not {(b[0], b[1]), (b[2], b[3])} & pairs
            elif kind == "swap-rel":
                assert _holds(scene, pos) and not _holds(scene, neg)
            elif kind == "replace-obj":
                assert tuple(pos.split()[-2:]) in pairs and tuple(neg.split()[-2:]) not in pairs
            else:
                assert sorted(pos.split()) == sorted(neg.split()) and pos != neg
    assert all(kinds.values())


def test_synthdense_compositional_runs_offline_and_equals_the_rule_on_its_scores(micro_config, tmp_path):
    import torch
    from PIL import Image

    from hnbench.models import load_model

    result = choice_eval(micro_config, "synthdense", None, "compositional", tmp_path / "out",
                         dataset_options=SMALL)
    scores = stored(result)
    frame = read_per_item(result)
    kinds = frame["field_kind"].tolist()
    right = np.array([s["s"]["positive"] > s["s"]["negative"] for s in scores.values()])
    per_kind = [right[np.array(kinds) == k].mean() for k in KINDS]
    m = result.metrics["choice"]
    assert m["accuracy"] == pytest.approx(100 * np.mean(per_kind), abs=1e-9)  # macro over the four kinds
    assert m["micro"] == pytest.approx(100 * right.mean(), abs=1e-9) and m["n_groups"] == 4
    assert set(m["by"]["kind"]) == set(KINDS) and result.dataset["protocol"] == "compositional"
    # each distinct image and text encoded once (the replica's texts repeat: "a red circle" ...)
    enc = result.settings["encoding"]["encoded"]
    assert enc == {"images": result.dataset["n_images"], "texts": result.dataset["n_texts"]}
    assert result.dataset["n_texts"] < 2 * result.dataset["n_items"]
    # the scores are cosines of each image and text encoded alone
    model = load_model("hnb-micro", model_config=str(micro_config))
    folder = Path(result.dataset["meta"]["root"]) / "test"
    for item in list(scores.values())[:6]:
        with torch.no_grad():
            iv = model.encode_images(model.image_transform(Image.open(folder / item["images"][0]).convert("RGB"))[None])
            tv = model.encode_texts(model.tokenize(item["texts"]).tokens)
        assert item["m"][0] == pytest.approx((tv @ iv[0]).numpy(), abs=1e-5)
    again = choice_eval(micro_config, "synthdense", None, "compositional", tmp_path / "out", dataset_options=SMALL)
    assert again.settings["encoding"]["encoded"] == {"images": 0, "texts": 0} and again.metrics == result.metrics
    for kind in KINDS:  # each kind's own protocol: micro over its items
        one = choice_eval(micro_config, "synthdense", None, kind, dataset_options=SMALL)
        assert one.metrics["choice"]["n_queries"] == kinds.count(kind) and "micro" not in one.metrics["choice"]
        assert metric(one) == pytest.approx(100 * right[np.array(kinds) == kind].mean(), abs=1e-9), kind


# --- per-item scores: stored, checked, re-scored ------------------------------------------------------------
def test_stored_scores_are_rescored_under_another_protocol_without_reencoding(micro_config, tmp_path, monkeypatch):
    """SugarCrepe's seven official per-subset runs, pooled and re-scored by MTEB's rule, give the mteb run."""
    use_item_counts(monkeypatch, "sugarcrepe", **{s: {s: 3} for s in SUBSETS}, mteb={s: 3 for s in SUBSETS})
    root = build_sugarcrepe(tmp_path / "sc")
    frames = [read_per_item(choice_eval(micro_config, "sugarcrepe", root, s.replace("_", "-"), tmp_path / "out"))
              for s in SUBSETS]
    mteb = choice_eval(micro_config, "sugarcrepe", root, "mteb", tmp_path / "out")
    again = rescore(frames, get_benchmark("sugarcrepe").protocol("mteb").scoring, breakdown=("subset",))
    for key in ("accuracy", "n_queries", "n_tied", "by"):
        assert again[key] == mteb.metrics["choice"][key], key
    official = rescore(frames[0], get_benchmark("sugarcrepe").protocol("add-att").scoring)
    assert official["accuracy"] < again["by"]["subset"]["add_att"]["accuracy"]  # its tie: wrong, then right


def test_a_result_whose_numbers_differ_from_its_per_item_file_is_refused(micro_config, tmp_path, capsys):
    result = choice_eval(micro_config, "synthdense", None, "swap-att", tmp_path / "out", dataset_options=SMALL)
    path = Path(result.path)
    with pytest.raises(ResultFormatError, match="per-item scores"):
        read_per_query(read_result(path))  # browse, compare, hardness read retrieval's ranks: not these
    board = leaderboard([tmp_path / "out"])
    assert "## Option choice (compositional benchmarks)" in board and "synthdense · swap-att" in board
    header = [c.strip() for c in next(line for line in board.splitlines() if line.startswith("| #")).split("|")]
    assert "accuracy" in header and not {"text", "image", "TOT", "micro"} & set(header)  # the rule's metrics only
    d = json.loads(path.read_text())
    d["metrics"]["choice"]["accuracy"] = 99.0
    d["main_score"]["value"] = 99.0
    path.write_text(json.dumps(d))
    with pytest.raises(ResultFormatError, match="do not match its per-item file"):
        read_per_item(read_result(path))
    board = leaderboard([tmp_path / "out"])
    assert "Option choice" not in board and "its metrics do not match its per-item file" in board  # skipped, said
    assert main(["browse", str(path), "--output", str(tmp_path / "page")]) == 2
    assert_one_line_error(capsys.readouterr().err, "per-item scores")


# --- what the task refuses -----------------------------------------------------------------------------
@pytest.mark.parametrize("argv, words", [
    (["--dataset", "sugarcrepe"], ["option-choice benchmark", "--task choice"]),
    (["--dataset", "aro", "--task", "monotonicity"], ["option-choice benchmark", "--task choice"]),
    (["--dataset", "docci", "--task", "choice"], ["image–caption benchmark", "sugarcrepe"]),
    (["--dataset", "synthdense", "--protocol", "compositional"], ["--task choice"]),
    (["--dataset", "synthdense", "--task", "choice"], ["--protocol compositional"]),
    (["--dataset", "winoground", "--task", "choice", "--protocol", "group"], ["no protocol 'group'", "official"]),
    (["--dataset", "sugarcrepe", "--task", "choice", "--split-file", "x.json"], ["--split-file"]),
])
def test_data_the_task_cannot_score_is_one_line_before_any_model_loads(micro_config, tmp_path, capsys, argv, words):
    (tmp_path / "root").mkdir()
    extra = ["--data-root", str(tmp_path / "root")] if argv[1] not in ("synthdense", "docci") else []
    code = main(["-q", "eval", *argv, *extra, "--model", "hnb-micro", "--model-config", str(micro_config),
                 "--output", str(tmp_path / "out")])
    assert code == 2
    assert_one_line_error(capsys.readouterr().err, *words)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_datasets_info_of_a_choice_benchmark_counts_its_items(tmp_path, monkeypatch, capsys):
    use_item_counts(monkeypatch, "sugarcrepe", add_att={"add_att": 3})
    root = build_sugarcrepe(tmp_path / "sc")
    assert main(["datasets", "info", "sugarcrepe", "--data-root", str(root), "--protocol", "add-att"]) == 0
    out = capsys.readouterr().out
    assert "protocol add-att (default): 3 items (add_att 3)" in out and "3 items, 3 images, 6 texts" in out
    assert "verified=False" in out  # the replica is not the pinned file
    with pytest.raises(ConfigError, match="--task choice"):
        from hnbench.data import load_dataset

        load_dataset("sugarcrepe", data_root=str(root))
