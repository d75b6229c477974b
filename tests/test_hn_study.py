"""The HN-vs-InfoNCE study's bookkeeping (benchmarks/hn_study.py): arms, seeds, aggregation, intervals."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def _load():
    spec = importlib.util.spec_from_file_location("hn_study", ROOT / "benchmarks" / "hn_study.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["hn_study"] = mod
    spec.loader.exec_module(mod)
    return mod


study = _load()


def test_plan_is_seed_major_and_complete():
    runs = study.plan(["infonce", "hn-g0.5"], 3)
    assert [(r.arm.name, r.seed) for r in runs] == [("infonce", 0), ("hn-g0.5", 0), ("infonce", 1), ("hn-g0.5", 1),
                                                    ("infonce", 2), ("hn-g0.5", 2)]
    assert len({r.name for r in study.plan(list(study.ARMS), 5)}) == 5 * len(study.ARMS)
    with pytest.raises(SystemExit, match="unknown arm"):
        study.plan(["hn-g0.7"], 1)


def test_arms_cover_the_issue_grid_and_pair_with_an_infonce_twin():
    arms = study.ARMS
    assert {a.gamma for a in arms.values() if a.loss == "hn"} == {0.25, 0.5, 1.0}
    assert {a.precision for a in arms.values()} == {"fp32", "bf16"}
    assert {a.batching for a in arms.values()} == {"random", "family"}
    assert {a.scale for a in arms.values()} == {"fixed100", "learned"}
    assert arms["infonce"].data_fraction == 0.2 and arms["infonce"].batching == "random"
    main = arms["hn-g0.5"]
    for a in arms.values():
        if a.loss == "hn":
            twin = arms[study.baseline_of(a)]
            assert (twin.loss, twin.precision, twin.batching, twin.scale) == ("infonce", a.precision, a.batching, a.scale)
        else:
            assert study.baseline_of(a) is None
        if a.name.startswith("hn-g0.5-"):  # an ablation changes exactly one factor of the main arm
            changed = [f for f in ("precision", "batching", "scale") if getattr(a, f) != getattr(main, f)]
            assert len(changed) == 1, a


def test_train_config_maps_each_factor(tmp_path):
    sizes = study.StudySizes()
    cfg = lambda name, seed=0: study.train_config(study.Run(study.ARMS[name], seed), sizes, tmp_path, "synthdense")  # noqa: E731
    c = cfg("hn-g0.25", seed=3)
    assert (c.loss, c.gamma, c.seed, c.batch_size, c.data_fraction) == ("hn", 0.25, 3, 16, 0.2)
    assert (c.init_logit_scale, c.train_logit_scale, c.amp, c.group_by) == (100.0, False, False, None)
    assert c.output == str(tmp_path / "runs" / "hn-g0.25__s3")
    assert cfg("infonce-bf16").amp and cfg("infonce-bf16").amp_dtype == "bf16"
    assert cfg("hn-g0.5-family").group_by == study.FAMILY_PATTERN
    learned = cfg("hn-g0.5-learned")
    assert learned.init_logit_scale is None and learned.train_logit_scale
    assert cfg("infonce").loss == "infonce"


def test_t_interval_against_a_hand_computed_example():
    # x = 1..5: mean 3, sample sd sqrt(2.5) = 1.58114, se = 0.707107, t_{0.975, 4} = 2.776445 → half-width 1.963243
    mean, lo, hi = study.t_interval([1.0, 2.0, 3.0, 4.0, 5.0])
    assert mean == 3.0
    assert lo == pytest.approx(3 - 1.963243, abs=1e-5) and hi == pytest.approx(3 + 1.963243, abs=1e-5)
    # two seeds 40 and 44: mean 42, sd 2.828427, se 2, t_{0.975, 1} = 12.706205 → 42 ± 25.41241
    assert study.t_interval([40.0, 44.0])[1:] == pytest.approx((42 - 25.41241, 42 + 25.41241), abs=1e-4)
    one = study.t_interval([7.0])
    assert one[0] == 7.0 and math.isnan(one[1]) and math.isnan(one[2])


def test_pooled_mcnemar_sums_discordant_pairs_over_seeds():
    r = study.pooled_mcnemar([(3, 1), (2, 0)])  # b = 5, c = 1: p = 2 · P[Bin(6, ½) ≤ 1] = 2 · 7/64
    assert (r["a_only"], r["b_only"]) == (5, 1) and r["p_value"] == pytest.approx(14 / 64)
    assert study.pooled_mcnemar([(0, 0), (0, 0)])["p_value"] == 1.0


def _row(arm, seed, t2i, i2t, zero=0.0):
    return {"arm": arm, "seed": seed, "t2i_R@1": t2i, "i2t_R@1": i2t, "share_infonce_grad_zero": zero,
            "share_infonce_zero_bf16": None, "share_infonce_zero_fp16": 0.5, "share_inactive_infonce": 0.25,
            "share_inactive_train": None}


def test_aggregate_per_arm_in_declared_order():
    rows = [_row("hn-g0.5", 1, 42.0, 40.0), _row("infonce", 0, 39.0, 38.0, zero=1.0), _row("hn-g0.5", 0, 40.0, 44.0),
            _row("infonce", 1, 41.0, 38.0, zero=0.0)]
    out = study.aggregate(rows)
    assert [a["arm"] for a in out] == ["infonce", "hn-g0.5"]
    nce, hn = out
    assert nce["seeds"] == [0, 1] and nce["t2i_R@1"]["mean"] == 40.0 and nce["t2i_R@1"]["per_seed"] == [39.0, 41.0]
    assert nce["i2t_R@1"]["ci95"] == [38.0, 38.0]  # no spread across seeds: a zero-width interval
    assert nce["share_infonce_grad_zero"] == 0.5 and nce["share_infonce_zero_bf16"] is None
    assert hn["t2i_R@1"]["ci95"] == pytest.approx([41 - 12.706205, 41 + 12.706205], abs=1e-4)


def test_paired_vs_baseline_uses_the_same_seeds_and_the_twin():
    per_seed = {
        "infonce": {0: {"t2i": {"R@1": 40.0}, "i2t": {"R@1": 38.0}}, 1: {"t2i": {"R@1": 42.0}, "i2t": {"R@1": 40.0}},
                    2: {"t2i": {"R@1": 41.0}, "i2t": {"R@1": 39.0}}},
        "hn-g0.5": {s: {d: {"R@1": r, "a_only": 3, "b_only": 1, "p": 0.6} for d, r in zip(("t2i", "i2t"), vals)}
                    for s, vals in {0: (43.0, 38.0), 1: (45.0, 41.0), 7: (50.0, 50.0)}.items()},
        "hn-g0.5-bf16": {0: {d: {"R@1": 1.0, "a_only": 0, "b_only": 0} for d in ("t2i", "i2t")}},  # no twin ran
    }
    out = study.paired_vs_baseline(per_seed)
    assert len(out) == 1
    p = out[0]
    assert (p["arm"], p["baseline"], p["seeds"]) == ("hn-g0.5", "infonce", [0, 1])  # seed 7 has no twin
    assert p["t2i"]["per_seed_diff"] == [3.0, 3.0] and p["t2i"]["diff_ci95"] == [3.0, 3.0]
    assert p["i2t"]["diff_mean"] == 0.5
    assert (p["t2i"]["a_only"], p["t2i"]["b_only"]) == (6, 2)
    assert p["t2i"]["p_value"] == pytest.approx(2 * (1 + 8 + 28) / 256)


def test_batch_gap_and_saturation_onset():
    v = torch.eye(3)
    t = torch.tensor([[1.0, 0.0, 0.0], [0.6, 0.8, 0.0], [0.0, 0.0, 1.0]])
    # S = v tᵀ: rows (1, .6, 0), (0, .8, 0), (0, 0, 1). Row margins (i2t): 0.4, 0.8, 1; column margins
    # (t2i): 1, 0.8 − 0.6 = 0.2, 1. The batch's gap is the smallest: 0.2
    assert study.batch_gap(v, t) == pytest.approx(0.2)
    rows = [{"dtype": "fp16", "s_gap": x, "grad_zero": z, "scale": s} for x, z, s in
            [(5.0, False, 10.0), (12.0, False, 100.0), (20.0, True, 100.0), (40.0, True, 200.0)]]
    onset = study.saturation_onset(rows)
    assert onset["fp16"]["max_s_gap_nonzero"] == 12.0 and onset["fp16"]["min_s_gap_zero"] == 20.0
    assert onset["fp16"]["share_zero"] == 0.5 and onset["fp16"]["share_zero_at_s100"] == 0.5
    assert onset["fp32"]["share_zero"] is None


def test_render_states_the_claims_from_the_numbers():
    arms = study.aggregate([_row("infonce", 0, 40.0, 38.0), _row("infonce", 1, 42.0, 40.0),
                            _row("hn-g0.5", 0, 43.0, 38.0), _row("hn-g0.5", 1, 45.0, 41.0)])
    per_seed = {"infonce": {s: {d: {"R@1": a[f"{d}_R@1"]["per_seed"][s]} for d in ("t2i", "i2t")} for s in (0, 1)
                            for a in arms if a["arm"] == "infonce"},
                "hn-g0.5": {s: {d: {"R@1": a[f"{d}_R@1"]["per_seed"][s], "a_only": 4, "b_only": 1, "p": 0.4}
                                for d in ("t2i", "i2t")} for s in (0, 1) for a in arms if a["arm"] == "hn-g0.5"}}
    arms[0]["share_inactive_train"], arms[1]["share_inactive_train"] = 0.44, 0.0
    text = study.render(arms, study.paired_vs_baseline(per_seed), None, study.StudySizes())
    assert "HN arm vs its InfoNCE twin: hn-g0.5 0.0% vs infonce 44.0%." in text
    assert "does not hold in fp32; it holds only for fp16 logits." in text  # 0% fp32 zeros, 50% fp16
    assert "the best main arm (hn-g0.5) vs InfoNCE on the same 2 seeds: t2i +3.00 [+3.00, +3.00] (excludes 0" in text
    text = study.render(arms, [], None, study.StudySizes(), start={"t2i_R@1": 41.0, "i2t_R@1": 40.0})
    # InfoNCE means 41 / 39, the HN arm 44 / 39.5
    assert "*Against the start model* (t2i 41.00, i2t 40.00): InfoNCE t2i +0.00, i2t -1.00; the best HN arm " \
           "(hn-g0.5) t2i +3.00, i2t -0.50 (means over seeds)." in text



def test_bf16_autocast_trains_on_cpu(micro_config, tmp_path):
    """The study's bf16 arms: ``amp`` with bf16 autocasts on the CPU (the weights differ from the fp32 run's
    and stay finite); fp16 on the CPU falls back to fp32 with a warning."""
    from conftest import make_pairs, write_jsonl
    from safetensors.torch import load_file

    from hnbench.train.trainer import TrainConfig, train

    pairs = make_pairs(tmp_path, n=8)
    data = write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    base = {"model": "hnb-micro", "model_config": str(micro_config), "dataset": str(data), "epochs": 1,
            "batch_size": 4, "lr": 1e-3, "warmup_steps": 1, "num_workers": 0}
    got = {name: load_file(str(train(TrainConfig.from_dict({**base, **kw, "output": str(tmp_path / name)}),
                                     progress=False)))
           for name, kw in {"fp32": {}, "bf16": {"amp": True}, "fp16": {"amp": True, "amp_dtype": "fp16"}}.items()}
    assert all(torch.isfinite(w).all() for w in got["bf16"].values())
    assert any(not torch.equal(got["fp32"][k], got["bf16"][k]) for k in got["fp32"])
    assert all(torch.equal(got["fp32"][k], got["fp16"][k]) for k in got["fp32"])
