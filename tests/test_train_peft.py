"""LoRA / DoRA runs write merged and adapter-only checkpoints that ``hnbench eval`` loads alike."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import make_pairs, write_jsonl
from safetensors.torch import load_file, save_file

from hnbench.cli import main
from hnbench.errors import ConfigError
from hnbench.models import load_model
from hnbench.train.trainer import TrainConfig, train

pytest.importorskip("peft")


@pytest.fixture
def setup(micro_config, tmp_path):
    pairs = make_pairs(tmp_path, n=8)
    data = write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    init = tmp_path / "init.safetensors"
    save_file({k: v.contiguous() for k, v in load_model("hnb-micro", model_config=str(micro_config))
               .model.state_dict().items()}, str(init))
    return data, init


def _eval(micro_config, data, pretrained, out, capsys):
    rc = main(["-q", "eval", "--model", "hnb-micro", "--model-config", str(micro_config), "--pretrained",
               str(pretrained), "--dataset", str(data), "--output", str(out), "--num-workers", "0", "--no-ci",
               "--json"])
    assert rc == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("method,targets", [("lora", ["c_fc", "c_proj", "attn"]), ("dora", None)])
def test_open_clip_peft_checkpoints_load_in_eval(micro_config, setup, tmp_path, capsys, method, targets):
    data, init = setup
    cfg = TrainConfig(model="hnb-micro", model_config=str(micro_config), pretrained=str(init), dataset=str(data),
                      epochs=2, batch_size=4, lr=1e-2, warmup_steps=1, num_workers=0, peft=method, lora_r=4,
                      lora_alpha=8, lora_targets=targets, output=str(tmp_path / method))
    ckpt = train(cfg, progress=False)
    run = tmp_path / method
    assert ckpt == run / "checkpoint.safetensors" and (run / "adapter" / "adapter_config.json").is_file()
    assert json.loads((run / "adapter" / "hnbench_base.json").read_text())["pretrained"] == str(init.resolve())
    merged, base = load_file(str(ckpt)), load_file(str(init))
    assert merged.keys() == base.keys()  # a plain checkpoint of the base architecture
    changed = [k for k in base if not torch.equal(merged[k], base[k])]
    assert changed and all(("c_fc" in k or "c_proj" in k or "attn" in k) for k in changed)
    r_merged = _eval(micro_config, data, ckpt, tmp_path / "e1", capsys)
    r_adapter = _eval(micro_config, data, run / "adapter", tmp_path / "e2", capsys)
    assert r_adapter["model"]["pretrained"] == str(run / "adapter")
    for d in ("t2i", "i2t"):
        assert r_merged["metrics"][d]["R@1"] == r_adapter["metrics"][d]["R@1"]
        assert r_merged["metrics"][d]["MRR"] == pytest.approx(r_adapter["metrics"][d]["MRR"], abs=1e-6)
    enc_m = load_model("hnb-micro", str(ckpt), model_config=str(micro_config))
    enc_a = load_model("hnb-micro", str(run / "adapter"), model_config=str(micro_config))
    toks = enc_m.tokenize(["a red square"]).tokens
    assert torch.allclose(enc_m.encode_texts(toks), enc_a.encode_texts(toks), atol=1e-5)


def test_dora_on_multihead_attention_is_refused_with_advice(micro_config):
    from hnbench.train.adapters import apply_peft

    model = load_model("hnb-micro", model_config=str(micro_config)).model
    with pytest.raises(ConfigError, match="DoRA on nn.MultiheadAttention.*c_fc"):
        apply_peft(model, "open_clip", "dora", targets=["attn"])
    with pytest.raises(ConfigError, match="read directly by nn.MultiheadAttention"):
        apply_peft(model, "open_clip", "lora", targets=["out_proj"])
    with pytest.raises(ConfigError, match="no module of the model matches"):
        apply_peft(model, "open_clip", "lora", targets=["q_proj"])


def test_adapter_for_wrong_architecture_is_an_error(micro_config, setup, tmp_path):
    data, init = setup
    train(TrainConfig(model="hnb-micro", model_config=str(micro_config), pretrained=str(init), dataset=str(data),
                      epochs=1, batch_size=4, num_workers=0, peft="lora", lora_r=2, peft_save="adapter",
                      output=str(tmp_path / "r")), progress=False)
    assert not (tmp_path / "r" / "checkpoint.safetensors").exists()
    with pytest.raises(ConfigError, match="trained on 'hnb-micro'"):
        load_model("ViT-B-32", str(tmp_path / "r" / "adapter"))


@pytest.mark.slow
def test_hf_clip_full_and_lora_training(hf_clip_dir, setup, tmp_path):
    data, _ = setup
    base = {"model": str(hf_clip_dir), "dataset": str(data), "epochs": 1, "batch_size": 4, "lr": 1e-2,
            "warmup_steps": 1, "num_workers": 0, "diag_every": 1}
    full = train(TrainConfig.from_dict({**base, "output": str(tmp_path / "full")}), progress=False)
    assert full == tmp_path / "full" / "hf_model"
    enc = load_model(str(full))
    assert enc.info.framework == "transformers" and enc.info.fingerprint != load_model(str(hf_clip_dir)).info.fingerprint
    lora = train(TrainConfig.from_dict({**base, "peft": "lora", "lora_r": 4, "output": str(tmp_path / "lora")}),
                 progress=False)
    merged = load_model(str(lora))
    adapted = load_model(str(hf_clip_dir), str(tmp_path / "lora" / "adapter"))
    toks = merged.tokenize(["a red square", "a blue square"]).tokens
    assert torch.allclose(merged.encode_texts(toks), adapted.encode_texts(toks), atol=1e-5)
    assert not torch.allclose(merged.encode_texts(toks), load_model(str(hf_clip_dir)).encode_texts(toks), atol=1e-4)
