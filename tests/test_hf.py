"""Hugging Face transformers CLIP behind the encoder protocol (a tiny model saved locally)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import make_pairs, write_jsonl

transformers = pytest.importorskip("transformers")


def test_hf_clip_encoder_matches_direct_calls(hf_clip_dir):
    from hnbench.models import load_model

    enc = load_model(str(hf_clip_dir))
    assert enc.info.framework == "transformers" and enc.info.context_length == 40 and enc.info.embed_dim == 24
    texts = ["a red square on a dark background", "word " * 60]
    tok = enc.tokenize(texts)
    assert tok.tokens.shape == (2, 40) and tok.n_truncated(40) == 1 and tok.lengths[0] == 9
    feats = enc.encode_texts(tok.tokens)
    assert torch.allclose(feats.norm(dim=-1), torch.ones(2), atol=1e-5)
    # direct transformers call on the unpadded first caption gives the same embedding
    ids = enc.tokenizer(texts[:1], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        direct = enc.model.get_text_features(input_ids=ids)
    direct = direct if isinstance(direct, torch.Tensor) else direct.pooler_output
    assert torch.allclose(torch.nn.functional.normalize(direct, dim=-1)[0], feats[0], atol=1e-5)


def test_hf_clip_end_to_end(hf_clip_dir, tmp_path):
    from hnbench.evaluation.evaluate import evaluate

    pairs = make_pairs(tmp_path, n=6)
    data = write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    r = evaluate(str(hf_clip_dir), str(data), output_dir=tmp_path / "out", progress=False, num_workers=0)
    assert r.model["framework"] == "transformers" and r.metrics["t2i"]["R@10"] == 100.0
    assert np.isfinite(r.metrics["i2t"]["MRR"])


def test_feature_tensor_reads_tensors_and_model_outputs(hf_clip_dir):
    from transformers.modeling_outputs import BaseModelOutputWithPooling

    from hnbench.models import load_model
    from hnbench.models.hf import eos_attention_mask, feature_tensor
    from hnbench.models.towers import CLIPTowers

    x = torch.randn(2, 4)
    assert feature_tensor(x) is x and feature_tensor(BaseModelOutputWithPooling(pooler_output=x)) is x
    with pytest.raises(TypeError, match="BaseModelOutputWithPooling"):
        feature_tensor(BaseModelOutputWithPooling())
    mask = eos_attention_mask(torch.tensor([[5, 7, 9, 9], [5, 9, 9, 9]]), 9)
    assert mask.tolist() == [[1, 1, 1, 0], [1, 1, 0, 0]]  # up to and including the first end token
    # the training towers and the evaluation encoder give the same features through these helpers
    enc = load_model(str(hf_clip_dir))
    towers = CLIPTowers(enc.model, enc.framework, eos_token_id=enc.eos_token_id).eval()
    tokens = enc.tokenize(["a red square", "a much longer caption about a blue circle"]).tokens
    with torch.no_grad():
        assert torch.allclose(towers.encode_text(tokens), enc.encode_texts(tokens), atol=1e-6)
