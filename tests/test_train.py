"""A real training run: the checkpoint loads in ``hnbench eval`` and scores better than its start."""

from __future__ import annotations

import json

import pytest
from conftest import make_pairs, write_jsonl
from safetensors.torch import save_file

from hnbench.cli import main
from hnbench.evaluation.evaluate import evaluate
from hnbench.models import load_model
from hnbench.train.trainer import TrainConfig, cosine_lr, load_recipe, train


@pytest.mark.slow
def test_training_improves_and_checkpoint_loads(micro_config, tmp_path):
    pairs = make_pairs(tmp_path, n=16)
    data = write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    start = load_model("hnb-micro", model_config=str(micro_config))
    init = tmp_path / "init.safetensors"
    save_file({k: v.contiguous() for k, v in start.model.state_dict().items()}, str(init))
    before = evaluate(start, str(data), progress=False, num_workers=0, ci=False)
    cfg = TrainConfig(model="hnb-micro", model_config=str(micro_config), pretrained=str(init), dataset=str(data),
                      loss="hn", gamma=0.5, epochs=40, batch_size=16, lr=2e-3, warmup_steps=5, num_workers=0,
                      log_every=5, output=str(tmp_path / "run"))
    ckpt = train(cfg, progress=False)
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert log[-1]["loss"] < log[0]["loss"]
    meta = json.loads((tmp_path / "run" / "train_config.json").read_text())
    assert meta["config"]["loss"] == "hn" and meta["steps"] == 40
    after = evaluate("hnb-micro", str(data), pretrained=str(ckpt), model_config=str(micro_config),
                     progress=False, num_workers=0, ci=False)
    gain = sum(after.metrics[d]["MRR"] - before.metrics[d]["MRR"] for d in ("t2i", "i2t"))
    assert gain > 0.2, (before.metrics, after.metrics)
    assert after.model["pretrained"] == str(ckpt)


def test_train_is_seeded(micro_config, tmp_path):
    pairs = make_pairs(tmp_path, n=8)
    data = write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    init = tmp_path / "init.safetensors"
    start = load_model("hnb-micro", model_config=str(micro_config))
    save_file({k: v.contiguous() for k, v in start.model.state_dict().items()}, str(init))
    fps = []
    for run in ("a", "b"):
        cfg = TrainConfig(model="hnb-micro", model_config=str(micro_config), pretrained=str(init),
                          dataset=str(data), loss="infonce", epochs=2, batch_size=4, num_workers=0,
                          output=str(tmp_path / run))
        fps.append(load_model("hnb-micro", str(train(cfg, progress=False)), model_config=str(micro_config))
                   .info.fingerprint)
    assert fps[0] == fps[1]


def test_recipes_and_schedule():
    r = load_recipe("tiny-synthdense")
    assert r["model"] == "hnbench-tiny" and r["loss"] in ("hn", "infonce")
    TrainConfig.from_dict(r)
    from hnbench.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown training options"):
        TrainConfig.from_dict({"epochz": 3})
    with pytest.raises(ConfigError, match="no recipe"):
        load_recipe("nope")
    assert cosine_lr(0, 100, 1.0, 10) == pytest.approx(0.1)
    assert cosine_lr(10, 100, 1.0, 10) == pytest.approx(1.0)
    assert cosine_lr(100, 100, 1.0, 10) == pytest.approx(0.0)


def test_cli_train_overrides_recipe(micro_config, tmp_path, capsys):
    pairs = make_pairs(tmp_path, n=4)
    data = write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    rc = main(["-q", "train", "--recipe", "tiny-synthdense", "--model", "hnb-micro", "--model-config",
               str(micro_config), "--dataset", str(data), "--epochs", "1", "--batch-size", "4",
               "--num-workers", "0", "--output", str(tmp_path / "run")])
    assert rc == 0 and "checkpoint.safetensors" in capsys.readouterr().out
    meta = json.loads((tmp_path / "run" / "train_config.json").read_text())
    assert meta["config"]["epochs"] == 1 and meta["config"]["lr"] == load_recipe("tiny-synthdense")["lr"]
