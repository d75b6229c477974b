"""FineLIP through the objective contract: closed forms of its parts (frameworks.md §1.7), the L_HN swap,
a real run that logs its terms and a checkpoint that eval scores."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from conftest import assert_one_line_error

from hnbench.cli import main
from hnbench.models.finelip import ATRM, TokenAggregation, clim_scores, finelip_k
from hnbench.train.config import TrainConfig, load_recipe
from hnbench.train.objectives.finelip import build, vse_hinge
from hnbench.train.step import Objective
from hnbench.train.token_loss import filip_scores


def test_hinge_b2_closed_form_and_id_mask():
    s = torch.tensor([[0.9, 0.8], [0.3, 0.5]])
    same = torch.eye(2, dtype=torch.bool)
    # caption side (row anchors): [0.2+0.8-0.9]+ = 0.1, [0.2+0.3-0.5]+ = 0; image side (column anchors):
    # [0.2+0.3-0.9]+ = 0, [0.2+0.8-0.5]+ = 0.5
    assert vse_hinge(s, same, 0.2).item() == pytest.approx(0.6)
    assert vse_hinge(s, torch.ones(2, 2, dtype=torch.bool), 0.2).item() == 0.0  # the same image twice
    assert vse_hinge(s, same, 0.2, max_violation=True).item() == pytest.approx(0.6)


def test_max_violation_is_the_hardest_negative_brute_force():
    g = torch.Generator().manual_seed(0)
    s = torch.rand(5, 5, generator=g) * 2 - 0.2
    same = torch.eye(5, dtype=torch.bool)
    want = 0.0
    for i in range(5):
        want += max(max(0.0, 0.2 + float(s[i, j] - s[i, i])) for j in range(5) if j != i)
        want += max(max(0.0, 0.2 + float(s[j, i] - s[i, i])) for j in range(5) if j != i)
    assert vse_hinge(s, same, 0.2, max_violation=True).item() == pytest.approx(want, rel=1e-6)


def test_margin_hinge_at_gamma_zero_is_the_plain_hinge():
    s = torch.rand(4, 4, generator=torch.Generator().manual_seed(1))
    same = torch.eye(4, dtype=torch.bool)
    g_bar = torch.rand(4, 4).fill_diagonal_(0)
    assert torch.equal(vse_hinge(s, same, 0.2 + 0.0 * g_bar), vse_hinge(s, same, 0.2))
    assert vse_hinge(s, same, 0.2 + 0.5 * g_bar) >= vse_hinge(s, same, 0.2)  # a margin that only grows


def test_clim_range_and_identity_reduction_to_filip():
    g = torch.Generator().manual_seed(2)
    images = F.normalize(torch.randn(3, 5, 8, generator=g), dim=-1)
    texts = F.normalize(torch.randn(4, 6, 8, generator=g), dim=-1)
    s = clim_scores(images, texts)
    assert s.shape == (3, 4) and bool((s >= -0.2).all()) and bool((s <= 2).all())
    same = clim_scores(images, images)
    assert torch.allclose(same.diagonal(), torch.full((3,), 2.0))  # a set against itself: 1 + 1
    a, c = filip_scores(images, texts, torch.ones(4, 6, dtype=torch.bool))
    assert torch.allclose(clim_scores(images, texts, negative_slope=None), a + c, atol=1e-6)


def test_aggregator_weights_are_convex_and_masked():
    torch.manual_seed(0)
    agg = TokenAggregation(8, 3)
    z = torch.randn(2, 5, 8)
    mask = torch.tensor([[True] * 5, [True, True, False, False, False]])
    w = agg.weights(z, mask)
    assert w.shape == (2, 3, 5) and torch.allclose(w.sum(-1), torch.ones(2, 3)) and bool((w >= 0).all())
    assert torch.equal(w[1, :, 2:], torch.zeros(3, 3))  # masked tokens get no weight
    out = agg(z, mask)  # in the tokens' convex hull: within each coordinate's range of the kept tokens
    assert bool((out[1] <= z[1, :2].amax(0) + 1e-6).all()) and bool((out[1] >= z[1, :2].amin(0) - 1e-6).all())


def test_atrm_shapes_eot_kept_and_parameter_count():
    assert finelip_k(196) == 39 and finelip_k(256) == 51
    assert sum(p.numel() for p in ATRM(512, 39).parameters()) == 114_736  # frameworks.md §1.3
    assert sum(p.numel() for p in ATRM(768, 39).parameters()) == 250_400
    torch.manual_seed(0)
    m = ATRM(8, 3)
    x, y = torch.randn(2, 7, 8), torch.randn(2, 10, 8)
    lengths = torch.tensor([4, 10])
    img, txt = m.image(x), m.text(y, lengths)
    assert img.shape == txt.shape == (2, 4, 8)
    assert torch.allclose(img[:, 0], F.normalize(x[:, 0], dim=-1))  # CLS first, unaggregated
    assert torch.allclose(txt[:, -1], F.normalize(y[torch.arange(2), lengths - 1], dim=-1))  # EOT last


def _towers(micro_config):
    from hnbench.models import load_model
    from hnbench.models.towers import CLIPTowers

    torch.manual_seed(0)
    enc = load_model("hnb-micro", model_config=str(micro_config))
    return CLIPTowers(enc.model.train(), "open_clip"), enc


@pytest.mark.parametrize("swap", ["add-global", "margin-hinge"])
def test_hn_at_gamma_zero_equals_infonce_and_the_ramp(micro_config, swap):
    towers, enc = _towers(micro_config)
    caps = [f"a {c} square" for c in ("red", "blue", "green", "cyan")]
    tokens = enc.tokenize(caps).tokens
    pixels = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(3))
    results = []
    for loss in ("infonce", "hn"):
        terms = build(TrainConfig(objective="finelip", loss=loss, gamma=0.0, objective_options={"swap": swap}))
        obj = Objective(terms=terms)
        torch.manual_seed(5)
        for m in obj.modules:
            m.build(enc.info.embed_dim)
        obj.progress = 0.5
        towers.zero_grad(set_to_none=True)
        out = towers(pixels, tokens, obj.token_mode)
        value = obj(out, mask=None, g_text=None, text_mask=None, tokens=tokens, image_ids=[0, 1, 2, 3])
        value.backward()
        grads = [p.grad.clone() for p in towers.parameters() if p.grad is not None]
        grads += [p.grad.clone() for m in obj.modules for p in m.module.parameters()]
        results.append((value.detach(), grads, obj.last_terms))
    (l0, g0, t0), (l1, g1, t1) = results
    assert set(t0) == ({"hinge", "global"} if swap == "add-global" else {"hinge"})
    assert torch.equal(l0, l1) and all(torch.equal(a, b) for a, b in zip(g0, g1))  # bit for bit
    assert float(l0) == pytest.approx(0.5 * t0["hinge"] + t0.get("global", 0.0), rel=1e-6)  # α = 0.5 mid-epoch 0


def test_finelip_refuses_the_clip_token_term_in_one_line(capsys, tmp_path):
    rc = main(["train", "--recipe", "tiny-synthdense-finelip", "--token-loss-weight", "1",
               "--output", str(tmp_path / "run")])
    assert rc == 2 and not (tmp_path / "run").exists()
    assert_one_line_error(capsys.readouterr().err, "--token-loss-weight", "finelip")


def test_recipe_records_finelip_defaults():
    r = load_recipe("tiny-synthdense-finelip")
    cfg = TrainConfig.from_dict(r)
    assert cfg.objective == "finelip" and cfg.objective_options.lr == 2e-4 and cfg.objective_options.margin == 0.2


@pytest.mark.slow
def test_tiny_finelip_recipe_trains_logs_terms_and_eval_scores_it(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "--recipe", "tiny-synthdense-finelip", "--loss", "hn", "--epochs", "1",
                 "--output", str(run)]) == 0
    log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    assert log and all(set(r["terms"]) == {"hinge", "global"} for r in log)
    meta = json.loads((run / "train_config.json").read_text())
    assert meta["config"]["objective_options"]["swap"] == "add-global" and meta["outputs"]["objective_modules"]
    from safetensors.torch import load_file

    modules = load_file(str(run / "objective_modules.safetensors"))
    assert any(k.startswith("finelip.aggr_net.") for k in modules) and any("cap_aggr_net" in k for k in modules)
    capsys.readouterr()
    assert main(["eval", "--model", "hnbench-tiny", "--pretrained", str(run / "checkpoint.safetensors"),
                 "--dataset", "synthdense", "--output", str(tmp_path / "eval")]) == 0
    assert "R@1" in capsys.readouterr().out


@pytest.mark.slow
def test_the_module_resumes_bit_for_bit_and_trains_at_its_own_rate(micro_config, tmp_path):
    from conftest import make_pairs, write_jsonl
    from safetensors.torch import load_file

    from hnbench.train.trainer import train

    pairs = make_pairs(tmp_path, n=8)
    data = write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])

    def cfg(out, **kw):
        return TrainConfig(model="hnb-micro", model_config=str(micro_config), dataset=str(data), objective="finelip",
                           objective_options={"num_patches": 20}, loss="hn", epochs=2, batch_size=4, num_workers=0,
                           log_every=1, warmup_steps=1, output=str(tmp_path / out), **kw)

    train(cfg("whole"), progress=False)
    train(cfg("cut", stop_at_step=1), progress=False)
    train(cfg("cut", resume=str(tmp_path / "cut")), progress=False)
    whole = load_file(str(tmp_path / "whole" / "objective_modules.safetensors"))
    cut = load_file(str(tmp_path / "cut" / "objective_modules.safetensors"))
    assert whole.keys() == cut.keys() and all(torch.equal(whole[k], cut[k]) for k in whole)
    assert load_file(str(tmp_path / "whole" / "checkpoint.safetensors")).keys() == \
        load_file(str(tmp_path / "cut" / "checkpoint.safetensors")).keys()
    log = [json.loads(line) for line in (tmp_path / "whole" / "log.jsonl").read_text().splitlines()]
    assert [r["terms"]["hinge"] > 0 for r in log] == [True] * 4
    assert log[0]["loss"] == pytest.approx(log[0]["terms"]["global"])  # α = 0 on the first batch
    from hnbench.models.checkpoint import load_torch

    groups = load_torch(tmp_path / "whole" / "last" / "trainer_state.pt")["optimizer"]["param_groups"]
    own = [g for g in groups if "base_lr" in g]
    assert len(own) == 2 and all(g["base_lr"] == 2e-4 and g["weight_decay"] in (0.1, 0.0) for g in own)
    base = [g for g in groups if "base_lr" not in g]
    assert all(g["lr"] == pytest.approx(base[0]["lr"] * 2e-4 / 5e-4) for g in own)  # the same schedule, its peak
