"""Hugging Face transformers CLIP behind the encoder protocol (a tiny model saved locally)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import make_pairs, write_jsonl

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def hf_clip_dir(tmp_path_factory):
    """A randomly initialised tiny CLIPModel with a real CLIP BPE tokenizer, saved with save_pretrained."""
    from open_clip.tokenizer import SimpleTokenizer
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPTokenizer

    root = tmp_path_factory.mktemp("hfclip")
    tok = SimpleTokenizer()
    names = {"<start_of_text>": "<|startoftext|>", "<end_of_text>": "<|endoftext|>"}  # HF spelling
    (root / "vocab.json").write_text(json.dumps({names.get(k, k): v for k, v in tok.encoder.items()}))
    merges = sorted(tok.bpe_ranks.items(), key=lambda kv: kv[1])
    (root / "merges.txt").write_text("#version: 0.2\n" + "\n".join(" ".join(pair) for pair, _ in merges) + "\n")
    tokenizer = CLIPTokenizer(str(root / "vocab.json"), str(root / "merges.txt"))
    torch.manual_seed(0)
    config = CLIPConfig(
        text_config={"vocab_size": len(tok.encoder), "hidden_size": 32, "intermediate_size": 64,
                     "num_hidden_layers": 1, "num_attention_heads": 2, "max_position_embeddings": 40},
        vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                       "num_attention_heads": 2, "image_size": 32, "patch_size": 8},
        projection_dim=24)
    model = CLIPModel(config)
    out = root / "model"
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(out)
    return out


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
    from hnbench.evaluate import evaluate

    pairs = make_pairs(tmp_path, n=6)
    data = write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    r = evaluate(str(hf_clip_dir), str(data), output_dir=tmp_path / "out", progress=False, num_workers=0)
    assert r.model["framework"] == "transformers" and r.metrics["t2i"]["R@10"] == 100.0
    assert np.isfinite(r.metrics["i2t"]["MRR"])
