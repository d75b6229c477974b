"""LoTLIP: a tiny random LoTLIP (timm ViT + BERT with 2 corner tokens) saved in the release's checkpoint
layout loads, scores, and its text embeddings equal a reference forward written here from the authors'
``open_clip/hf_model.py`` (``HFTextEncoder.build_attn_mask`` / ``forward``), ``open_clip/model.py``
(``CustomTextCLIP.encode_text``) and ``open_clip/tokenizer.py`` (``HFTokenizer.__call__``), run as
transformers 4.39 extended a 3-D mask, independent of ``hnbench.models.lotlip``."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import assert_one_line_error, make_pairs, snapshot, write_jsonl

WORDS = ("a red square on dark ground two blue circles green the dog sits near grey wall , .").split()
CAPTIONS = ["A red square on a dark ground. Two blue circles", "the dog sits near the grey wall. " * 30, "green"]
N_CORNER, WIDTH, EMBED = 2, 32, 64


@pytest.fixture
def release(tmp_path):
    from open_clip.model import CLIPVisionCfg, _build_vision_tower
    from transformers import BertConfig, BertModel, BertTokenizer

    bert_dir = tmp_path / "tiny-bert"
    bert_dir.mkdir()
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    (bert_dir / "vocab.txt").write_text("\n".join(vocab) + "\n")
    BertTokenizer(vocab={w: i for i, w in enumerate(vocab)}).save_pretrained(bert_dir)  # a WordPiece vocab
    bert_cfg = BertConfig(vocab_size=len(vocab), hidden_size=WIDTH, num_hidden_layers=2, num_attention_heads=4,
                          intermediate_size=64, max_position_embeddings=128)
    bert_cfg.save_pretrained(bert_dir)
    cfg = {"embed_dim": EMBED,
           "vision_cfg": {"timm_model_name": "test_vit", "timm_model_pretrained": False, "image_size": 160,
                          "checkpoint_path": "pytorch_model.bin", "timm_pool": "token", "timm_proj": "none"},
           "text_cfg": {"context_length": 128, "hf_model_name": str(bert_dir), "hf_tokenizer_name": str(bert_dir),
                        "hf_proj_type": "linear", "hf_pooler_type": "cls_pooler", "num_corner_token": N_CORNER}}
    cfg_path = tmp_path / "lotlip-tiny.json"
    cfg_path.write_text(json.dumps(cfg))
    torch.manual_seed(0)
    visual = _build_vision_tower(EMBED, CLIPVisionCfg(timm_model_name="test_vit", image_size=160, timm_pool="token",
                                                      timm_proj="none"))
    bert = BertModel(bert_cfg, add_pooling_layer=True)
    # HFTextEncoder.resize_token_embeddings: vocab + corner rows, the old rows copied
    grown = torch.nn.Embedding(len(vocab) + N_CORNER, WIDTH)
    grown.weight.data.normal_(0.0, 0.02)
    grown.weight.data[:len(vocab)] = bert.embeddings.word_embeddings.weight.data
    bert.embeddings.word_embeddings = grown
    for p in bert.parameters():  # LayerNorms and biases away from their 1/0 init, so they are really compared
        p.data.add_(torch.randn_like(p) * 0.05)
    proj = torch.nn.Linear(WIDTH, EMBED, bias=False)
    sd = {**{f"visual.{k}": v for k, v in visual.state_dict().items()},
          **{f"text.transformer.{k}": v for k, v in bert.state_dict().items()},
          "text.proj.weight": proj.weight.data, "logit_scale": torch.tensor(np.log(1 / 0.07))}
    ckpt = tmp_path / "model.pt"
    torch.save({"epoch": 10, "name": "lotlip-tiny", "state_dict": {f"module.{k}": v for k, v in sd.items()}}, ckpt)
    return cfg_path, bert_dir, visual.eval(), bert.eval(), proj, ckpt, sd


def _reference_tokenize(bert_dir, texts, context_length=128):
    from open_clip.tokenizer import _clean_whitespace
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(bert_dir))
    added = []
    for k in range(N_CORNER):
        tokenizer.add_tokens(["[Corner" + str(k) + "]"], special_tokens=True)
        added.append("[Corner" + str(k) + "]")
    added_corner_tokens = " ".join(added)
    sep_token = tokenizer._convert_id_to_token(tokenizer.sep_token_id)
    texts = list(texts)
    for i, text in enumerate(texts):
        text = sep_token.join(text.split(". "))  # 'bert' in the tokenizer name
        texts[i] = "".join([added_corner_tokens] + [text])
    texts = [_clean_whitespace(t) for t in texts]
    return tokenizer(texts, return_tensors="pt", max_length=context_length, padding="max_length",
                     truncation=True).input_ids


def _reference_encode_text(bert, proj, x, pad_token_id=0):
    attn_mask = (x != pad_token_id).long()
    attn_mask = attn_mask[:, None, :].repeat(1, attn_mask.shape[-1], 1)
    for i in range(x.shape[0]):
        cur_mask = attn_mask[i]
        cur_mask[:, : N_CORNER + 1] = cur_mask[:, : N_CORNER + 1] * 0
        cur_mask[N_CORNER + 1:, 0] = 1
        for cls_token_id in range(N_CORNER + 1):
            cur_mask[cls_token_id, cls_token_id] = 1
        attn_mask[i] = cur_mask
    # transformers 4.39 BertModel.get_extended_attention_mask of a 3-D mask
    extended = attn_mask[:, None, :, :].to(torch.float32)
    extended = (1.0 - extended) * torch.finfo(torch.float32).min
    out = bert(input_ids=x, attention_mask=extended)
    pooled_out = out.last_hidden_state[:, :N_CORNER + 1, :]
    pooled_out = pooled_out.reshape(-1, pooled_out.shape[-1])
    pooled_out = bert.pooler.activation(bert.pooler.dense(pooled_out))
    features = proj(pooled_out)
    features = features.reshape(x.shape[0], N_CORNER + 1, features.shape[-1])[:, 0]
    return F.normalize(features, dim=-1)


def test_lotlip_release_layout_equals_the_reference_forward(release):
    from hnbench.models import load_model

    cfg, bert_dir, visual, bert, proj, ckpt, _ = release
    enc = load_model("lotlip:tiny", str(ckpt), model_config=cfg)
    assert enc.info.context_length == 128 and enc.info.extra["num_corner_token"] == 2
    tok = enc.tokenize(CAPTIONS)
    expected_tokens = _reference_tokenize(bert_dir, CAPTIONS)
    assert torch.equal(tok.tokens, expected_tokens)
    assert tok.tokens[0, 1] == len(WORDS) + 5 and tok.tokens[0, 2] == len(WORDS) + 6  # [Corner0] [Corner1]
    assert (tok.tokens[0] == 3).sum() == 2 and tok.lengths[1] > 128 and tok.lengths[2] == 5  # [SEP] per ". "
    with torch.no_grad():
        expected = _reference_encode_text(bert, proj, expected_tokens)
    ours = enc.encode_texts(tok.tokens)
    assert torch.allclose(ours, expected, atol=1e-5), (ours - expected).abs().max()
    with torch.no_grad():  # the corner-token mask matters: BERT's plain padding mask gives other embeddings
        out = bert(input_ids=expected_tokens, attention_mask=(expected_tokens != 0).long())
        plain = F.normalize(proj(out.pooler_output), dim=-1)
    assert not torch.allclose(ours, plain, atol=1e-3)
    pixels = torch.rand(2, 3, 160, 160)
    with torch.no_grad():
        expected_img = F.normalize(visual(pixels), dim=-1)
    assert torch.allclose(enc.encode_images(pixels), expected_img, atol=1e-5)


def test_lotlip_scores_through_evaluate(release, tmp_path):
    from hnbench.evaluation.evaluate import evaluate

    cfg, _, _, _, _, ckpt, _ = release
    pairs = make_pairs(tmp_path, n=6)
    data = write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    r = evaluate("lotlip:tiny", str(data), pretrained=str(ckpt), model_config=str(cfg),
                 output_dir=tmp_path / "out", progress=False, num_workers=0)
    assert r.model["context_length"] == 128 and r.model["arch"] == "lotlip:tiny"
    assert np.isfinite(r.metrics["t2i"]["MRR"]) and np.isfinite(r.metrics["i2t"]["MRR"])
    assert len(list((tmp_path / "out").glob("*.json"))) == 1


def test_lotlip_checkpoint_with_unexpected_keys_is_one_line_and_writes_nothing(release, tmp_path, capsys):
    from hnbench.cli import main

    cfg, _, _, _, _, _, sd = release
    bad = tmp_path / "bad.pt"
    torch.save({"state_dict": {**sd, "logit_scale_local": torch.zeros(()), "text.mlm_head.bias": torch.zeros(3)}},
               bad)
    pairs = make_pairs(tmp_path, n=2)
    write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    before = snapshot(tmp_path)
    rc = main(["eval", "--model", "lotlip:tiny", "--model-config", str(cfg), "--pretrained", str(bad),
               "--dataset", str(tmp_path / "m.jsonl"), "--output", str(tmp_path / "out")])
    assert rc == 2
    assert_one_line_error(capsys.readouterr().err, "LoTLIP checkpoint", "unexpected keys (2)", "logit_scale_local",
                          "text.mlm_head.bias")
    assert snapshot(tmp_path) == before
