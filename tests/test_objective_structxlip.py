"""StructXLIP through the objective contract (frameworks.md §3.7): closed form per term on a hand-sized batch,
the per-epoch weights, the L_HN swap at γ = 0, 2 gloo processes = 1, the logit-scale clamp, real runs that log
every term and a checkpoint eval scores, and missing side inputs refused in one line."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.multiprocessing as mp
from open_clip.tokenizer import SimpleTokenizer
from test_objective_goal import _data, _nce, _refused, _sidecar, _towers, _unit
from test_train_distributed import _free_port, _train_worker

from hnbench.cli import main
from hnbench.models.towers import TowerHeads
from hnbench.train.config import TrainConfig, load_recipe
from hnbench.train.objectives.structxlip import MAX_LOGIT_SCALE, build
from hnbench.train.step import MicroBatch, Objective, run_step

TERMS = {"global", "structure", "rgb_structure", "local_structure"}
SX = ("--objective", "structxlip")


def _hand_batch():
    s = 1.0
    out = {"image": _unit((1, 0), (1, 1)), "text": _unit((1, 1), (0, 1)), "scale": torch.tensor(s, dtype=torch.float64),
           "edge": _unit((1, 0), (0, 1)), "filtered": _unit((0, 1), (0, 1)),
           # image 0's crops (1, 0), (0, 1); image 1's (0, 1) and an invalid one (never in a denominator)
           "edge_crops": _unit((1, 0), (0, 1), (0, 1), (5, 5))}
    # constant token states per caption: every chunk of caption 0 is (1, 0), of caption 1 (0, 1)
    out["filtered_states"] = torch.tensor([[[1.0, 0.0]] * 8, [[0.0, 2.0]] * 8], dtype=torch.float64)
    out["text_states"] = out["filtered_states"].clone()
    side = {"crop_valid": torch.tensor([[True, True], [True, False]]), "filtered_captions": ["one two three."] * 2,
            "encode": SimpleTokenizer().encode}
    heads = TowerHeads(lambda h: h, lambda h: h, lambda h: h, input_size=4, patch_size=2)
    return out, side, heads, s


def test_structxlip_closed_form_per_term_on_a_hand_sized_batch():
    out, side, heads, s = _hand_batch()
    obj = Objective(terms=build(TrainConfig(objective="structxlip", loss="infonce")))
    assert [(t.name, t.weight) for t in obj.terms] == [("global", 1.0), ("structure", 0.5), ("rgb_structure", 0.05),
                                                       ("local_structure", 0.1)]
    total = obj(out, mask=None, g_text=None, text_mask=None, tokens=torch.zeros(2, 8, dtype=torch.long),
                image_ids=[0, 1], side=side, heads=heads)
    got = obj.last_terms
    assert got["global"] == pytest.approx(_nce(out["image"], out["text"], s), abs=1e-12)
    assert got["structure"] == pytest.approx(_nce(out["edge"], out["filtered"], s), abs=1e-12)
    assert got["rgb_structure"] == pytest.approx(((1 - 1) + (1 - 2 ** -0.5)) / 2, abs=1e-12)
    a = s / 0.07  # s_eff = min(s/τ, 100)
    # image 0's chunks (1, 0): own crops cos 1 and 0; all valid crops: those and image 1's (0, 1) (cos 0)
    l0 = -math.log((math.exp(a) + 1) / (math.exp(a) + 2))
    # image 1's chunks (0, 1): own valid crop cos 1; all valid: (1, 0) → 0, (0, 1) → 1, (0, 1) → 1
    l1 = -math.log(math.exp(a) / (1 + 2 * math.exp(a)))
    assert got["local_structure"] == pytest.approx((l0 + l1) / 2, abs=1e-9)
    want = got["global"] + 0.5 * got["structure"] + 0.05 * got["rgb_structure"] + 0.1 * got["local_structure"]
    assert float(total) == pytest.approx(want, abs=1e-12)


def test_structxlip_weights_decay_per_epoch_to_their_floors():
    terms = {t.name: t for t in build(TrainConfig(objective="structxlip"))}
    assert [round(terms["structure"].weight_at(e + 0.5) / 0.5, 3) for e in range(10)] == \
        [1.0, 1.0, 0.985, 0.944, 0.883, 0.817, 0.756, 0.715, 0.7, 0.7]  # frameworks.md §3.1
    assert terms["rgb_structure"].weight_at(9) == pytest.approx(0.05 * 0.5)
    assert terms["local_structure"].weight_at(9) == pytest.approx(0.1 * 0.4)
    assert terms["global"].weight_at(9) == 1.0
    sketch = {t.name: t for t in build(TrainConfig(objective="structxlip", objective_options={"sketch_epochs": 1}))}
    assert sketch["global"].weight_at(0.5) == 0.0 and sketch["global"].weight_at(1.0) == 1.0


def test_structxlip_structure_term_does_not_train_the_scale():
    out, side, heads, _ = _hand_batch()
    out["scale"] = out["scale"].clone().requires_grad_()
    out["edge"] = out["edge"].clone().requires_grad_()
    obj = Objective(terms=[t for t in build(TrainConfig(objective="structxlip")) if t.name == "structure"])
    value = obj(out, mask=None, g_text=None, text_mask=None, tokens=torch.zeros(2, 8, dtype=torch.long),
                image_ids=[0, 1], side=side, heads=heads)
    edge_grad, scale_grad = torch.autograd.grad(value, (out["edge"], out["scale"]), allow_unused=True)
    assert edge_grad is not None and scale_grad is None  # s̄ = s detached (logit_scale_aux)


def _micro_batch(enc):
    caps = [f"a {c} square, on grey ground" for c in ("red", "blue", "green", "cyan")]
    g = torch.Generator().manual_seed(4)
    k = 2
    extra = {"edge": torch.randn(4, 3, 32, 32, generator=g), "edge_crops": torch.randn(4 * k, 3, 32, 32, generator=g),
             "filtered": enc.tokenize([c.replace(" red", "") for c in caps]).tokens}
    side = {"crop_valid": torch.tensor([[True, True], [True, False], [False, False], [True, True]]),
            "filtered_captions": [c.replace(" red", "") for c in caps], "encode": SimpleTokenizer().encode}
    return MicroBatch(torch.randn(4, 3, 32, 32, generator=g), enc.tokenize(caps).tokens, [0, 1, 2, 3], caps,
                      extra=extra, side=side)


@pytest.mark.parametrize("structure_hn", [False, True])
def test_structxlip_hn_at_gamma_zero_equals_infonce_bit_for_bit(micro_config, structure_hn):
    towers, enc = _towers(micro_config)
    mb = _micro_batch(enc)
    results = []
    for loss in ("infonce", "hn"):
        obj = Objective(terms=build(TrainConfig(objective="structxlip", loss=loss, gamma=0.0,
                                                objective_options={"structure_hn": structure_hn})))
        towers.zero_grad(set_to_none=True)
        value = run_step(towers, towers, [mb], obj)
        grads = {n: p.grad.clone() for n, p in towers.named_parameters() if p.grad is not None}
        results.append((value, grads, obj.last_terms))
    (l0, g0, t0), (l1, g1, t1) = results
    assert set(t0) == TERMS and t0 == t1 and l0 == l1 and all(v > 0 for v in t0.values())
    assert g0.keys() == g1.keys() and all(torch.equal(g0[k], g1[k]) for k in g0)
    assert "model.ln_final.weight" in g0


# ----------------------------------------------------------------------------- missing side inputs

def test_structxlip_refuses_missing_side_inputs_in_one_line(tmp_path, monkeypatch, capsys):
    data = _data(tmp_path)
    _refused(tmp_path, monkeypatch, capsys, [*SX, "--dataset", str(data)], "segment sidecar", "hnbench segments")
    sidecar = _sidecar(tmp_path, data)
    _refused(tmp_path, monkeypatch, capsys, [*SX, "--dataset", str(data), "--segments", str(sidecar), "--edges", "outline"],
             "outline", "synthdense", "--edges canny")
    _refused(tmp_path, monkeypatch, capsys, [*SX, "--dataset", str(data), "--segments", str(sidecar), "--edge-blur", "4"],
             "--edge-blur", "odd")
    _refused(tmp_path, monkeypatch, capsys, [*SX, "--dataset", str(data), "--segments", str(sidecar), "--canny-low", "300"],
             "--canny-low", "above --canny-high")


# ----------------------------------------------------------------------------- real runs

def _config(micro_config, **kw):
    return {"model": "hnb-micro", "model_config": str(micro_config), "dataset": "synthdense",
            "dataset_options": {"n_families": {"train": 4, "test": 4}}, "objective": "structxlip",
            "structxlip_top_k": 2, "loss": "hn", "epochs": 1, "batch_size": 4, "lr": 1e-4, "warmup_steps": 1,
            "num_workers": 0, "log_every": 1, "seed": 3, "max_logit_scale": MAX_LOGIT_SCALE, "stop_at_step": 2, **kw}


def test_structxlip_trains_logs_every_term_clamps_the_scale_and_records_its_inputs(micro_config, tmp_path):
    from safetensors.torch import load_file

    from hnbench.train.trainer import train

    cfg = _config(micro_config, init_logit_scale=100.0, output=str(tmp_path / "run"))
    weights = load_file(str(train(TrainConfig.from_dict(cfg), progress=False)))
    assert float(weights["logit_scale"]) == pytest.approx(3.5)  # log s clamped to [0, 3.5] after each step
    log = [json.loads(x) for x in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert len(log) == 2 and all(set(r["terms"]) == TERMS for r in log)
    for r in log:
        t = r["terms"]
        want = t["global"] + 0.5 * t["structure"] + 0.05 * t["rgb_structure"] + 0.1 * t["local_structure"]
        assert r["loss"] == pytest.approx(want, rel=1e-5)
    side = json.loads((tmp_path / "run" / "train_config.json").read_text())["side_inputs"]
    assert side["edge_maps"]["method"] == "outline" and side["segments"]["writer"] == "synthdense"
    assert side["filtered_captions"]["lexicons"]["filter_colors"] is True and side["filtered_captions"]["changed"] > 0


@pytest.mark.slow
def test_structxlip_two_gloo_processes_equal_one_process(micro_config, tmp_path):
    from safetensors.torch import load_file

    from hnbench.train.trainer import train

    base = _config(micro_config, accum_steps=2, structxlip_structure_hn=True, stop_at_step=None, data_root=None)
    one = train(TrainConfig.from_dict({**base, "output": str(tmp_path / "one")}), progress=False)
    mp.spawn(_train_worker, args=(2, _free_port(), {**base, "output": str(tmp_path / "two")}), nprocs=2, join=True)
    log1 = [json.loads(x) for x in (tmp_path / "one" / "log.jsonl").read_text().splitlines()]
    log2 = [json.loads(x) for x in (tmp_path / "two" / "log.jsonl").read_text().splitlines()]
    assert len(log1) == len(log2) >= 2
    for a, b in zip(log1, log2):
        assert a["loss"] == pytest.approx(b["loss"], abs=1e-5)
        assert all(a["terms"][k] == pytest.approx(b["terms"][k], abs=1e-5) for k in TERMS)
    w1, w2 = load_file(str(one)), load_file(str(tmp_path / "two" / "checkpoint.safetensors"))
    diff = torch.cat([(w1[k] - w2[k]).abs().reshape(-1) for k in w1])
    assert float(diff.max()) <= 2 * base["lr"] * len(log1) + 1e-6
    assert float((diff > 5e-6).float().mean()) < 2e-3


def test_structxlip_recipes_record_the_published_defaults():
    tiny = TrainConfig.from_dict(load_recipe("tiny-synthdense-structxlip"))
    assert (tiny.objective, tiny.edges, tiny.max_logit_scale) == ("structxlip", "outline", MAX_LOGIT_SCALE)
    big = TrainConfig.from_dict(load_recipe("longclip-L-structxlip-hn"))  # frameworks.md §3.4, finetune.sh
    assert (big.batch_size, big.epochs, big.lr, big.weight_decay, big.warmup_steps, big.seed) == (16, 10, 5e-6, 0.05, 0, 42)
    o = big.objective_options
    assert (o.structure_weight, o.rgb_weight, o.local_weight, o.top_k, o.filter_colors, big.edges) == \
        (0.25, 0.001, 0.001, 2, True, "canny")
    assert big.max_logit_scale == pytest.approx(math.exp(3.5)) and big.position_table == "trainable"


@pytest.mark.slow
def test_tiny_structxlip_recipe_trains_logs_terms_and_eval_scores_it(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "--recipe", "tiny-synthdense-structxlip", "--loss", "hn", "--epochs", "1",
                 "--output", str(run)]) == 0
    log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    assert log and all(set(r["terms"]) == TERMS for r in log)
    capsys.readouterr()
    assert main(["eval", "--model", "hnbench-tiny", "--pretrained", str(run / "checkpoint.safetensors"),
                 "--dataset", "synthdense", "--output", str(tmp_path / "eval")]) == 0
    assert "R@1" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["goal", "structxlip"])
def test_side_input_objectives_train_under_bf16_autocast(micro_config, name):
    """The terms run outside autocast: the bf16 token states meet the towers' heads in their fp32 weights."""
    import test_objective_goal

    from hnbench.registry import OBJECTIVES

    towers, enc = _towers(micro_config)
    mb = (test_objective_goal._micro_batch if name == "goal" else _micro_batch)(enc)
    obj = Objective(terms=OBJECTIVES.get(name)(TrainConfig(objective=name)))
    value = run_step(towers, towers, [mb], obj, autocast=lambda: torch.autocast("cpu", dtype=torch.bfloat16))
    assert math.isfinite(value) and len(obj.last_terms) == 4 and all(math.isfinite(v) for v in obj.last_terms.values())
    assert all(p.grad is not None for n, p in towers.named_parameters() if "ln_final" in n or "ln_post" in n)


def _masked_nce(a, b, s, masked):
    """Symmetric InfoNCE of s·a bᵀ by hand, the pairs in ``masked`` (i, j) no negatives of each other."""
    n = a.shape[0]
    sim = [[s * float(a[i] @ b[j]) for j in range(n)] for i in range(n)]

    def side(m):
        return sum(-m[i][i] + math.log(sum(math.exp(m[i][j]) for j in range(n)
                                           if j == i or ((i, j) not in masked and (j, i) not in masked)))
                   for i in range(n)) / n

    return (side(sim) + side([list(r) for r in zip(*sim)])) / 2


def test_structxlip_masks_identical_filtered_captions_in_the_structure_term():
    from hnbench.train.terms.structxlip import StructXLIPOptions, structure_loss

    edge = _unit((1, 0), (1, 1), (0, 1))
    filtered = _unit((1, 0.2), (1, 0.3), (0, 1))
    tokens = torch.tensor([[49406, 320, 1929, 49407], [49406, 320, 1929, 49407], [49406, 320, 2368, 49407]])
    every = torch.ones(3, dtype=torch.bool)
    masked = structure_loss(edge, filtered, every, 2.0, filtered_tokens=tokens)
    assert float(masked) == pytest.approx(_masked_nce(edge, filtered, 2.0, {(0, 1)}), abs=1e-12)
    plain = _masked_nce(edge, filtered, 2.0, set())
    assert float(masked) != pytest.approx(plain, abs=1e-6)  # the two colour variants are negatives no more
    off = StructXLIPOptions(mask_duplicates=False)
    assert float(structure_loss(edge, filtered, every, 2.0, options=off, filtered_tokens=tokens)) == \
        pytest.approx(plain, abs=1e-12)
    distinct = tokens.clone()
    distinct[1, 2] = 7
    # no identical pair: exactly the unmasked loss, bit for bit
    assert torch.equal(structure_loss(edge, filtered, every, 2.0, filtered_tokens=distinct),
                       structure_loss(edge, filtered, every, 2.0))
