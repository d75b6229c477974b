"""Trainer features: resume, gradient accumulation, freezing, data fraction, diagnostics, report, CLI."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F
from conftest import assert_one_line_error, make_pairs, write_jsonl
from safetensors.torch import load_file

from hnbench.cli import main
from hnbench.errors import ConfigError
from hnbench.train import train
from hnbench.train.diagnostics import measure, saturated_rows
from hnbench.train.losses import hn_clip_loss, info_nce_loss
from hnbench.train.step import MicroBatch, Objective, run_step
from hnbench.train.trainer import TrainConfig, load_recipe


@pytest.fixture
def data(tmp_path):
    pairs = make_pairs(tmp_path, n=12)
    rows = [{"image": p, "caption": c} for p, c in pairs] + [{"image": pairs[0][0], "caption": "another caption"}]
    return write_jsonl(tmp_path / "m.jsonl", rows)


def _cfg(micro_config, data, out, **kw):
    base = {"model": "hnb-micro", "model_config": str(micro_config), "dataset": str(data), "loss": "hn",
            "epochs": 2, "batch_size": 4, "lr": 1e-3, "warmup_steps": 2, "num_workers": 0, "log_every": 1}
    return TrainConfig.from_dict({**base, **kw, "output": str(out)})


def _weights(path):
    return load_file(str(path))


@pytest.mark.parametrize("stop", [2, 3])  # mid-epoch (3 steps per epoch) and at an epoch boundary
def test_resume_gives_the_same_weights_as_an_uninterrupted_run(micro_config, data, tmp_path, stop):
    full = train(_cfg(micro_config, data, tmp_path / "full", diag_every=1), progress=False)
    cut = _cfg(micro_config, data, tmp_path / "cut", diag_every=1, stop_at_step=stop)
    train(cut, progress=False)
    meta = json.loads((tmp_path / "cut" / "train_config.json").read_text())
    assert meta["stopped_early"] and meta["steps"] == stop
    assert (tmp_path / "cut" / "last" / "trainer_state.pt").is_file()
    resumed = train(_cfg(micro_config, data, tmp_path / "cut", diag_every=1, resume=str(tmp_path / "cut")),
                    progress=False)
    a, b = _weights(full), _weights(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a)
    logs = [[json.loads(x) for x in (tmp_path / d / "log.jsonl").read_text().splitlines()] for d in ("full", "cut")]
    assert [r["loss"] for r in logs[0]] == [r["loss"] for r in logs[1]]
    diags = [[json.loads(x) for x in (tmp_path / d / "diagnostics.jsonl").read_text().splitlines()]
             for d in ("full", "cut")]
    strip = [[{k: v for k, v in r.items()} for r in d] for d in diags]
    assert strip[0] == strip[1]


def test_resume_refuses_changed_options(micro_config, data, tmp_path):
    train(_cfg(micro_config, data, tmp_path / "cut", stop_at_step=1), progress=False)
    with pytest.raises(ConfigError, match="cannot resume.*lr"):
        train(_cfg(micro_config, data, tmp_path / "cut", lr=5e-4, resume=str(tmp_path / "cut")), progress=False)


def _towers(micro_config, seed=0):
    from hnbench.models import load_model
    from hnbench.models.towers import CLIPTowers

    torch.manual_seed(seed)
    enc = load_model("hnb-micro", model_config=str(micro_config))
    return CLIPTowers(enc.model.train(), "open_clip"), enc


def _micro_batches(enc, n, sizes, seed=0):
    g = torch.Generator().manual_seed(seed)
    caps = [f"a {c} square {i}" for i, c in enumerate(["red", "blue", "green", "cyan", "white", "pink", "gray", "tan"])]
    tokens = enc.tokenize(caps[:n]).tokens
    pixels = torch.randn(n, 3, 32, 32, generator=g)
    out, start = [], 0
    for size in sizes:
        sl = slice(start, start + size)
        out.append(MicroBatch(pixels[sl], tokens[sl], list(range(start, start + size)), caps[sl]))
        start += size
    return out


def _grads(towers):
    return {n: p.grad.clone() for n, p in towers.named_parameters() if p.grad is not None}


def test_cached_accumulation_equals_one_big_batch_and_loss_mode_is_per_micro_batch(micro_config):
    obj = Objective(hn_clip_loss, "hn", 0.5)
    towers, enc = _towers(micro_config)
    big = _micro_batches(enc, 8, [8])
    loss_big = run_step(towers, towers, big, obj)
    g_big = _grads(towers)
    towers.zero_grad(set_to_none=True)
    loss_cached = run_step(towers, towers, _micro_batches(enc, 8, [4, 4]), obj, mode="cached")
    g_cached = _grads(towers)
    assert loss_cached == pytest.approx(loss_big, abs=1e-5)
    assert g_big.keys() == g_cached.keys()
    for k in g_big:
        assert torch.allclose(g_big[k], g_cached[k], rtol=1e-4, atol=1e-6), k
    towers.zero_grad(set_to_none=True)
    parts = _micro_batches(enc, 8, [4, 4])
    loss_micro = run_step(towers, towers, parts, obj, mode="loss")
    with torch.no_grad():
        each = [float(obj(towers(p.pixels, p.tokens), mask=None, g_text=None, text_mask=None)) for p in parts]
    assert loss_micro == pytest.approx(sum(each) / 2, abs=1e-5)
    assert loss_micro != pytest.approx(loss_big, abs=1e-3)  # fewer negatives: a different objective


def test_accumulation_and_clipping_in_the_trainer(micro_config, data, tmp_path):
    cfg = _cfg(micro_config, data, tmp_path / "acc", epochs=1, batch_size=2, accum_steps=2, accum_mode="cached",
               grad_clip=0.5, mask_duplicates=True)
    train(cfg, progress=False)
    meta = json.loads((tmp_path / "acc" / "train_config.json").read_text())
    assert meta["steps"] == 3  # 6 micro-batches of 2 → 3 optimizer steps


def test_lock_image_tower_and_logit_scale(micro_config, data, tmp_path):
    from hnbench.models import load_model

    init = tmp_path / "init.safetensors"
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in load_model("hnb-micro", model_config=str(micro_config))
               .model.state_dict().items()}, str(init))
    ckpt = train(_cfg(micro_config, data, tmp_path / "lock", pretrained=str(init), epochs=1, lock_image=True,
                      train_logit_scale=False, init_logit_scale=50.0), progress=False)
    before, after = _weights(init), _weights(ckpt)
    assert all(torch.equal(before[k], after[k]) for k in before if k.startswith("visual."))
    assert not all(torch.equal(before[k], after[k]) for k in before if not k.startswith("visual."))
    assert float(after["logit_scale"].exp()) == pytest.approx(50.0, rel=1e-6)


def test_data_fraction_is_seeded(micro_config, data, tmp_path):
    from hnbench.data import load_dataset
    from hnbench.train.batches import subset_fraction

    train(_cfg(micro_config, data, tmp_path / "f", epochs=1, data_fraction=0.5), progress=False)
    meta = json.loads((tmp_path / "f" / "train_config.json").read_text())
    assert meta["n_train_images"] == 6 and meta["steps"] == 2  # 6 images at batch 4: a last batch of 2
    ds = load_dataset(str(data))
    a, b, c = (subset_fraction(ds, 0.5, seed) for seed in (0, 0, 1))
    assert a.image_ids == b.image_ids != c.image_ids and a.n_images == 6
    assert subset_fraction(ds, 1.0, 0) is ds


def test_config_validation_and_recipes():
    with pytest.raises(ConfigError, match="accum_mode"):
        TrainConfig.from_dict({"accum_mode": "sum"})
    with pytest.raises(ConfigError, match="did you mean 'gamma'"):
        TrainConfig.from_dict({"gama": 0.5})
    for name in ("tiny-synthdense", "tiny-synthdense-hn", "longclip-L-hn", "longclip-L-hn-lora-r16",
                 "longclip-L-hn-dora-r16"):
        TrainConfig.from_dict(load_recipe(name))
    paper = load_recipe("longclip-L-hn")
    assert (paper["batch_size"], paper["accum_steps"], paper["lr"], paper["gamma"], paper["context_length"]) == \
        (16, 8, 2e-6, 0.5, 248)
    assert load_recipe("longclip-L-hn-dora-r16")["lora_r"] == 16


def test_yaml_recipe(tmp_path):
    pytest.importorskip("yaml")
    (tmp_path / "r.yaml").write_text("loss: infonce\nepochs: 2\nlora_targets: [c_fc]\n")
    assert load_recipe(str(tmp_path / "r.yaml")) == {"loss": "infonce", "epochs": 2, "lora_targets": ["c_fc"]}


# --------------------------------------------------------------------------- diagnostics


class _Fixed(torch.nn.Module):
    """Features as parameters (normalised), a fixed logit scale: for exact saturation cases."""

    def __init__(self, v, t, s):
        super().__init__()
        self.v, self.t = torch.nn.Parameter(v.clone()), torch.nn.Parameter(t.clone())
        self.s = s

    def forward(self, pixels, tokens):
        return {"image": F.normalize(self.v, dim=-1), "text": F.normalize(self.t, dim=-1),
                "scale": torch.tensor(self.s)}


def test_measure_flags_exactly_zero_infonce_gradient_where_hn_is_not_zero():
    # two captions with cosine g = 0.45; images on ±(t1 − t2): the cosine gap is √(2 − 2g) ≈ 1.049,
    # so at s = 100 InfoNCE's negatives are exp(−104.9) → 0 in fp32, while HN's margin γ·g·s = 22.5
    # leaves exp(−82) ≈ 2e−36, representable: its gradient is tiny but not zero.
    g = 0.45
    t = torch.tensor([[1.0, 0.0], [g, math.sqrt(1 - g * g)]])
    d = F.normalize(t[0] - t[1], dim=0)
    v = torch.stack([d, -d])
    rec = measure(_Fixed(v, t, 100.0), torch.zeros(2), torch.zeros(2), gamma=0.5)
    assert rec["infonce_grad_zero"] and rec["gnorm_infonce"] == 0.0 and rec["grad_ratio"] is None
    assert not rec["hn_grad_zero"] and rec["gnorm_hn"] > 0
    assert rec["loss_infonce"] == 0.0 and not rec["active_infonce"]
    assert rec["sat_rows_infonce"] == 1.0


def test_measure_on_ordinary_batch_matches_direct_gradients():
    gen = torch.Generator().manual_seed(0)
    t = F.normalize(torch.randn(6, 8, generator=gen), dim=-1)
    v = F.normalize(t + 0.5 * torch.randn(6, 8, generator=gen), dim=-1)
    fixed = _Fixed(v, t, 20.0)
    rec = measure(fixed, torch.zeros(6), torch.zeros(6), gamma=0.5)
    out = fixed(None, None)
    g1 = torch.autograd.grad(info_nce_loss(out["image"], out["text"], 20.0), [fixed.v, fixed.t], retain_graph=True)
    g2 = torch.autograd.grad(hn_clip_loss(out["image"], out["text"], 20.0, 0.5), [fixed.v, fixed.t])
    n1, n2 = torch.cat([x.reshape(-1) for x in g1]).norm(), torch.cat([x.reshape(-1) for x in g2]).norm()
    assert rec["gnorm_infonce"] == pytest.approx(float(n1), rel=1e-5)
    assert rec["grad_ratio"] == pytest.approx(float(n2 / n1), rel=1e-5)
    assert -1 <= rec["grad_cos"] <= 1 and rec["active_hn"] and 0 <= rec["sat_rows_hn"] <= 1


def test_saturated_rows_counts_both_directions():
    z = torch.tensor([[200.0, 0.0], [0.0, 1.0]])  # row 0 saturated; column 0 saturated too
    assert saturated_rows(z) == 0.5


def test_diagnostics_eval_and_report_end_to_end(micro_config, data, tmp_path, capsys):
    for loss in ("infonce", "hn"):
        train(_cfg(micro_config, data, tmp_path / loss, loss=loss, epochs=2, diag_every=1, eval_dataset=str(data)),
              progress=False)
    recs = [json.loads(x) for x in (tmp_path / "hn" / "diagnostics.jsonl").read_text().splitlines()]
    kinds = [r["kind"] for r in recs]
    assert kinds.count("step") == 6 and kinds.count("epoch") == 2 and kinds.count("eval") == 3
    step = next(r for r in recs if r["kind"] == "step")
    for key in ("loss_infonce", "loss_hn", "gnorm_infonce", "gnorm_hn", "infonce_grad_zero", "grad_ratio",
                "grad_cos", "sat_rows_infonce", "active_infonce"):
        assert key in step
    ev = [r for r in recs if r["kind"] == "eval"]
    assert [r["epoch"] for r in ev] == [0, 1, 2] and all(0 <= r["t2i_R@1"] <= 100 for r in ev)
    assert (tmp_path / "hn" / "eval" / "epoch-002").is_dir()
    rc = main(["train-report", str(tmp_path / "infonce"), str(tmp_path / "hn"), "--output", str(tmp_path / "r.png")])
    out = capsys.readouterr().out
    assert rc == 0 and (tmp_path / "r.png").stat().st_size > 10_000
    assert "active InfoNCE" in out and "infonce (infonce)" in out and out.count("| hn (hn, γ=0.5) |") == 3


def test_cli_train_new_options_and_set(micro_config, data, tmp_path, capsys):
    rc = main(["-q", "train", "--recipe", "tiny-synthdense", "--model", "hnb-micro", "--model-config",
               str(micro_config), "--dataset", str(data), "--epochs", "1", "--batch-size", "4", "--num-workers", "0",
               "--accum-steps", "1", "--lock-text", "--diag-every", "2", "--set", "label_smoothing=0.1",
               "--set", "mask_duplicates=true", "--output", str(tmp_path / "run")])
    assert rc == 0 and "checkpoint.safetensors" in capsys.readouterr().out
    cfg = json.loads((tmp_path / "run" / "train_config.json").read_text())["config"]
    assert cfg["lock_text"] is True and cfg["label_smoothing"] == 0.1 and cfg["mask_duplicates"] is True
    assert cfg["diag_every"] == 2 and cfg["lock_image"] is False
    rc = main(["-q", "train", "--model", "hnb-micro", "--set", "gama=1"])
    assert rc == 2 and "did you mean 'gamma'" in capsys.readouterr().err


def test_grouped_batches_keep_families_together_and_match_plain_sampler_otherwise():
    from hnbench.train.batches import GlobalBatchSampler, group_positions

    ids = [f"train-f{i // 5:03d}-v{i % 5}" for i in range(20)]
    groups = group_positions(ids, r"^(.*)-v\d+$")
    assert groups == [list(range(5 * k, 5 * k + 5)) for k in range(4)]
    sampler = GlobalBatchSampler(20, 10, last_batch="drop", generator=torch.Generator().manual_seed(0), groups=groups)
    batches = list(sampler)
    assert len(sampler) == len(batches) == 2 and sorted(sum(batches, [])) == list(range(20))
    assert all({i // 5 for i in b} and all(sum(1 for i in b if i // 5 == f) in (0, 5) for f in range(4))
               for b in batches)
    # without groups: exactly what DataLoader(shuffle=True, generator=g) draws, epoch after epoch
    g1, g2 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    ours = torch.utils.data.DataLoader(list(range(20)), generator=g1, batch_sampler=GlobalBatchSampler(
        20, 6, last_batch="keep", generator=g1))
    theirs = torch.utils.data.DataLoader(list(range(20)), batch_size=6, shuffle=True, generator=g2)
    for _ in range(2):
        assert [b.tolist() for b in ours] == [b.tolist() for b in theirs]
    with pytest.raises(ConfigError, match="divisible"):
        GlobalBatchSampler(20, 5, last_batch="drop", generator=torch.Generator(), world_size=2)


def test_low_precision_logits_silence_infonce_earlier():
    from hnbench.train.diagnostics import infonce_zero_in

    # orthonormal pairs: cosine gap 1. At s = 100 the negatives' softmax weight exp(−100) ≈ 4e−44 is a
    # (denormal) fp32 number, so the fp32 gradient is tiny but not zero; fp16 gradients underflow to 0.
    eye = torch.eye(4)
    assert not infonce_zero_in(eye, eye, torch.tensor(100.0), torch.float32)
    assert infonce_zero_in(eye, eye, torch.tensor(100.0), torch.float16)
    assert not infonce_zero_in(eye, eye, torch.tensor(10.0), torch.float16)


def test_a_fine_tunes_epoch_results_are_labelled_as_its_weights(micro_config, data, tmp_path, capsys):
    """The trainer's per-epoch results name the run's weights (run folder / epoch), not the start
    weights, so compare and the board tell them apart; a --baseline that matches nothing is refused."""
    from hnbench.results.compare import compare, model_label
    from hnbench.results.record import read_result

    train(_cfg(micro_config, data, tmp_path / "ft", epochs=1, eval_dataset=str(data)), progress=False)
    by_epoch = {p.parent.name: read_result(p) for p in sorted((tmp_path / "ft" / "eval").glob("epoch-*/*.json"))}
    assert sorted(by_epoch) == ["epoch-000", "epoch-001"]
    labels = [model_label(r.model) for r in by_epoch.values()]
    assert labels == ["hnb-micro (ft/epoch-000)", "hnb-micro (ft/epoch-001)"]
    assert all(r.model["extra"]["trained_from"] is None for r in by_epoch.values())  # random init: no start tag
    assert [m["label"] for m in compare([r.path for r in by_epoch.values()], ks=[1]).models] == labels
    board = tmp_path / "lb.md"
    assert main(["-q", "leaderboard", str(tmp_path / "ft" / "eval"), "--baseline", "hnb-micro (ft/epoch-000)",
                 "--output", str(board)]) == 0
    assert "hnb-micro (ft/epoch-001)" in board.read_text() and "Deltas in parentheses" in board.read_text()
    capsys.readouterr()
    assert main(["-q", "leaderboard", str(tmp_path / "ft" / "eval"), "--baseline", "hnb-micro (random init)",
                 "--output", str(tmp_path / "none.md")]) == 2
    assert_one_line_error(capsys.readouterr().err, "--baseline", "matches no model", "hnb-micro (ft/epoch-000)")
    assert not (tmp_path / "none.md").exists()
