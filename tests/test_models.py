"""Model loading: custom configs, checkpoint formats, untrusted pickles, mismatches, tokenization."""

from __future__ import annotations

import json

import open_clip
import pytest
import torch
from safetensors.torch import save_file

from hnbench.errors import CheckpointError, ConfigError
from hnbench.models import load_model
from hnbench.models.base import state_dict_fingerprint


@pytest.fixture(scope="module")
def micro(micro_config):
    torch.manual_seed(0)
    return load_model("hnb-micro", model_config=str(micro_config))


def _sd(enc):
    return {k: v.clone() for k, v in enc.model.state_dict().items()}


def test_model_config_registers_architecture(micro, micro_config):
    assert micro.info.arch == "hnb-micro" and micro.info.context_length == 32 and micro.info.embed_dim == 32
    assert "hnb-micro" in open_clip.list_models()
    renamed = load_model("my-arch", model_config=str(micro_config))
    assert renamed.info.arch == "my-arch"
    with pytest.raises(ConfigError, match="did you mean"):
        load_model("hnb-micr")


@pytest.mark.parametrize("fmt", ["safetensors", "raw.pt", "train.pt", "module.bin"])
def test_local_checkpoint_formats_round_trip(micro, micro_config, tmp_path, fmt):
    sd = _sd(micro)
    path = tmp_path / f"ckpt.{fmt.split('.')[-1]}"
    if fmt == "safetensors":
        save_file(sd, str(path))
    elif fmt == "raw.pt":
        torch.save(sd, path)
    elif fmt == "train.pt":  # open_clip training checkpoint: DDP prefixes under "state_dict"
        torch.save({"epoch": 3, "name": "run", "state_dict": {f"module.{k}": v for k, v in sd.items()}}, path)
    else:
        torch.save({f"module.{k}": v for k, v in sd.items()}, path)
    enc = load_model("hnb-micro", str(path), model_config=str(micro_config))
    assert enc.info.fingerprint == state_dict_fingerprint(sd) == micro.info.fingerprint
    assert enc.info.pretrained == str(path)


def test_untrusted_pickle_is_refused(micro_config, tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    path = tmp_path / "evil.pt"
    torch.save({"state_dict": {"x": torch.zeros(1)}, "obj": Evil()}, path)
    with pytest.raises(CheckpointError, match="refused to unpickle"):
        load_model("hnb-micro", str(path), model_config=str(micro_config))


def test_checkpoint_for_another_architecture_names_keys(micro_config, tmp_path):
    other = dict(json.loads(micro_config.read_text()))
    other["text_cfg"] = dict(other["text_cfg"], layers=2)
    other["embed_dim"] = 16
    cfg2 = tmp_path / "hnb-micro2.json"
    cfg2.write_text(json.dumps(other))
    enc2 = load_model("hnb-micro2", model_config=str(cfg2))
    path = tmp_path / "other.safetensors"
    save_file(_sd(enc2), str(path))
    with pytest.raises(CheckpointError) as e:
        load_model("hnb-micro", str(path), model_config=str(micro_config))
    msg = str(e.value)
    assert "does not match the architecture" in msg and "unexpected keys" in msg
    assert "transformer.resblocks.1" in msg and "shape mismatch" in msg and "text_projection" in msg


def test_corrupt_and_missing_checkpoints(micro_config, tmp_path):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x00garbage" * 10)
    with pytest.raises(CheckpointError, match="not a readable safetensors"):
        load_model("hnb-micro", str(bad), model_config=str(micro_config))
    with pytest.raises(CheckpointError, match="not found"):
        load_model("hnb-micro", str(tmp_path / "nope.pt"), model_config=str(micro_config))
    trunc = tmp_path / "trunc.pt"
    torch.save({"a": torch.zeros(1000)}, trunc)
    trunc.write_bytes(trunc.read_bytes()[:200])
    with pytest.raises(CheckpointError, match="not a readable torch checkpoint"):
        load_model("hnb-micro", str(trunc), model_config=str(micro_config))


def test_context_length_mismatch_is_explicit(micro, micro_config, tmp_path):
    path = tmp_path / "c.safetensors"
    save_file(_sd(micro), str(path))
    with pytest.raises(CheckpointError, match="--context-length 32"):
        load_model("hnb-micro", str(path), model_config=str(micro_config), context_length=64)


def test_tokenize_matches_open_clip_and_counts_truncation(micro):
    texts = ["word " * 100, "short caption", "x"]
    tok = micro.tokenize(texts)
    ref = open_clip.get_tokenizer("hnb-micro", context_length=32)(texts)
    assert torch.equal(tok.tokens, ref)
    assert tok.lengths.tolist()[1:] == [4, 3] and tok.lengths[0] > 32
    assert tok.n_truncated(32) == 1
    feats = micro.encode_texts(tok.tokens)
    assert feats.dtype == torch.float32 and torch.allclose(feats.norm(dim=-1), torch.ones(3), atol=1e-5)


def test_unknown_pretrained_tag_says_internet(micro_config):
    with pytest.raises(CheckpointError, match="needs the internet|known tags"):
        load_model("ViT-B-32", "laion2b_s34b_b79k_nonexistent_tag")
