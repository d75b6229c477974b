"""The objective contract: named, weighted terms with declared inputs; the clip objective re-expressed in it."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import make_pairs, write_jsonl

from hnbench.errors import ConfigError
from hnbench.registry import LOSSES, OBJECTIVES
from hnbench.train.config import TrainConfig
from hnbench.train.losses import hn_clip_loss, info_nce_loss
from hnbench.train.objectives import Term, TermInputs, check_inputs, ramp_first_epoch
from hnbench.train.report import read_run, render_table, term_table
from hnbench.train.step import Objective
from hnbench.train.token_loss import token_loss
from hnbench.train.trainer import train


def _towers(micro_config):
    from hnbench.models import load_model
    from hnbench.models.towers import CLIPTowers

    torch.manual_seed(0)
    enc = load_model("hnb-micro", model_config=str(micro_config))
    return CLIPTowers(enc.model.train(), "open_clip"), enc


def _batch(enc, n=6):
    caps = [f"a {c} square number {i}" for i, c in enumerate(["red", "blue", "green", "cyan", "white", "pink"][:n])]
    return torch.randn(n, 3, 32, 32, generator=torch.Generator().manual_seed(1)), enc.tokenize(caps).tokens


def _loss_and_grads(towers, fn):
    towers.zero_grad(set_to_none=True)
    loss = fn()
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in towers.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("loss_name", ["hn", "infonce"])
def test_clip_objective_is_bitwise_the_direct_formula(micro_config, loss_name):
    towers, enc = _towers(micro_config)
    pixels, tokens = _batch(enc)
    mask = towers.text_token_mask(tokens)
    terms = OBJECTIVES.get("clip")(TrainConfig(loss=loss_name, gamma=0.5, token_loss_weight=0.7))
    obj = Objective(terms=terms)
    assert [t.name for t in obj.terms] == ["global", "token"] and obj.with_tokens

    def direct():
        out = towers(pixels, tokens, True)
        base = (hn_clip_loss(out["image"], out["text"], out["scale"], gamma=0.5) if loss_name == "hn"
                else info_nce_loss(out["image"], out["text"], out["scale"]))
        return base + 0.7 * token_loss(out["image_tokens"], out["text_tokens"], mask, out["scale"])

    ref, g_ref = _loss_and_grads(towers, direct)
    got, g_got = _loss_and_grads(towers, lambda: obj(towers(pixels, tokens, True), mask=None, g_text=None,
                                                     text_mask=mask))
    assert torch.equal(ref, got)
    assert g_ref.keys() == g_got.keys() and all(torch.equal(g_ref[k], g_got[k]) for k in g_ref)
    assert set(obj.last_terms) == {"global", "token"}
    assert obj.last_terms["global"] + 0.7 * obj.last_terms["token"] == pytest.approx(float(got), rel=1e-6)


def test_the_legacy_constructor_builds_the_clip_terms():
    obj = Objective(LOSSES.get("hn"), "hn", 0.5)
    assert [t.name for t in obj.terms] == ["global"] and not obj.with_tokens
    assert obj.needs == {"pixels", "tokens", "global_features", "image_ids"}
    assert [t.name for t in Objective(LOSSES.get("infonce"), "infonce", 0.0, token_weight=1.0).terms] == \
        ["global", "token"]


def test_weights_schedules_and_a_new_term():
    assert [ramp_first_epoch(p) for p in (0.0, 0.25, 0.999, 1.0, 3.5)] == [0.0, 0.25, 0.999, 1.0, 1.0]

    def const(x: TermInputs) -> torch.Tensor:
        return x.out["scale"] * 0 + 2.0

    obj = Objective(terms=[Term("a", const, weight=3.0), Term("b", const, weight=0.5, schedule=ramp_first_epoch)])
    out = {"image": torch.zeros(2, 4), "text": torch.zeros(2, 4), "scale": torch.tensor(1.0)}
    obj.progress = 0.5
    assert float(obj(out, mask=None, g_text=None, text_mask=None)) == 3.0 * 2 + 0.5 * 0.5 * 2
    assert obj.last_terms == {"a": 2.0, "b": 2.0}  # unweighted values, by name
    obj.progress = 2.0
    assert float(obj(out, mask=None, g_text=None, text_mask=None)) == 3.0 * 2 + 0.5 * 2


def test_missing_side_inputs_name_what_and_how():
    check_inputs({"pixels", "token_features"}, {"token_features"}, "clip")
    with pytest.raises(ConfigError) as e:
        check_inputs({"pixels", "segments", "edge_maps"}, {"token_features"}, "goal")
    msg = str(e.value)
    assert "\n" not in msg and "'goal'" in msg and "segments" in msg and "hnbench segments" in msg
    assert "edge_maps" in msg and "hnbench[edges]" in msg


def test_loss_flag_maps_onto_the_global_term_and_objective_defaults_to_clip():
    cfg = TrainConfig(loss="infonce")
    assert cfg.objective == "clip"
    with pytest.raises(ConfigError, match="objective"):
        TrainConfig(objective="nope").validate()


def test_every_term_is_logged_by_name_and_reported(micro_config, tmp_path):
    pairs = make_pairs(tmp_path, n=8)
    data = write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    cfg = TrainConfig(model="hnb-micro", model_config=str(micro_config), dataset=str(data), loss="hn",
                      token_loss_weight=0.5, epochs=2, batch_size=4, num_workers=0, log_every=1,
                      output=str(tmp_path / "run"))
    train(cfg, progress=False)
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert len(log) == 4 and all(set(r["terms"]) == {"global", "token"} for r in log)
    for r in log:  # the step's loss is its weighted terms
        assert r["loss"] == pytest.approx(r["terms"]["global"] + 0.5 * r["terms"]["token"], rel=1e-5)
    run = read_run(tmp_path / "run")
    rows = term_table(run)
    assert [r["epoch"] for r in rows] == [1, 2]
    assert rows[0]["token"] == pytest.approx((log[0]["terms"]["token"] + log[1]["terms"]["token"]) / 2)
    table = render_table([run])
    assert "term global" in table and "term token" in table
