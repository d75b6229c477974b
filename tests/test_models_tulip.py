"""TULIP: a tiny random TULIP saved in the release's checkpoint layout loads, scores, and its text
embeddings equal a reference forward written here from the authors' ``open_clip/transformer_rope.py``
(``TextTransformerRoPE.encode_text`` as ``eval_tulip.py`` runs it), independent of
``hnbench.models.tulip``."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import assert_one_line_error, make_pairs, snapshot, write_jsonl

WIDTH, HEADS, LAYERS, VOCAB = 32, 4, 2, 49408
CAPTIONS = ["a red square on a dark ground", "two blue circles " * 30, "green"]


def _tiny_config(tmp_path):
    cfg = {"embed_dim": WIDTH, "vision_cfg": {"image_size": 32, "layers": 2, "width": 32, "head_width": 16,
                                              "patch_size": 8},
           "text_cfg": {"context_length": 77, "vocab_size": VOCAB, "width": WIDTH, "heads": HEADS, "layers": LAYERS}}
    path = tmp_path / "tulip-tiny.json"
    path.write_text(json.dumps(cfg))
    return path


def _release_state_dict(config_path, seed=0):
    """A context-fine-tuned TULIP CLIP's state dict as main_context_finetune_rope.py saves it: the open_clip CLIP's
    keys (teacher positional table and logit scale included) with the RoPE text blocks in ``transformer``."""
    import open_clip

    from hnbench.models.openclip import register_model_config

    arch = register_model_config(config_path)
    g = torch.Generator().manual_seed(seed)
    base = open_clip.create_model(arch)
    sd = {}
    for k, v in base.state_dict().items():
        sd[k] = torch.randn(v.shape, generator=g) * (0.02 if v.ndim > 1 else 0.1) + (1.0 if k.endswith("ln_1.weight")
                                                                                      else 0.0)
    return arch, sd


def _save_release(path, sd):
    torch.save({"epoch": 3, "name": "tulip-tiny", "state_dict": {f"module.{k}": v for k, v in sd.items()}}, path)
    return path


# --- the reference forward, from the authors' code (complex RoPE, (L, N, D) attention with bmm) --------------
def _freqs_cis(dim, end, theta=10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end)
    freqs = torch.outer(t, freqs).float()
    return torch.polar(torch.ones_like(freqs), freqs)


def _apply_rotary_emb(xq, xk, freqs_cis):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    shape = [d if i == 1 or i == xq_.ndim - 1 else 1 for i, d in enumerate(xq_.shape)]
    freqs_cis = freqs_cis.view(*shape)
    return (torch.view_as_real(xq_ * freqs_cis).flatten(3).type_as(xq),
            torch.view_as_real(xk_ * freqs_cis).flatten(3).type_as(xk))


def _reference_encode_text(sd, text, context_length):
    head_dim = WIDTH // HEADS
    x = F.embedding(text, sd["token_embedding.weight"])
    x = torch.cat((x, torch.zeros(x.shape[0], context_length - x.shape[1], x.shape[2])), dim=1)  # pad to context
    mask = torch.empty(context_length, context_length).fill_(float("-inf")).triu_(1)
    x = x.permute(1, 0, 2)  # NLD -> LND
    seqlen = x.shape[0]
    freqs_cis = _freqs_cis(head_dim, context_length * 2)[:seqlen]
    for i in range(LAYERS):
        p = f"transformer.resblocks.{i}."
        h = F.layer_norm(x, (WIDTH,), sd[p + "ln_1.weight"], sd[p + "ln_1.bias"])
        L, N, C = h.shape
        q, k, v = F.linear(h, sd[p + "attn.in_proj_weight"], sd[p + "attn.in_proj_bias"]).chunk(3, dim=-1)
        q, k, v = (t.reshape(L, N, HEADS, head_dim).permute(1, 0, 2, 3) for t in (q, k, v))  # N L heads hd
        q, k = _apply_rotary_emb(q, k, freqs_cis)
        q, k, v = (t.permute(0, 2, 1, 3).reshape(N * HEADS, L, head_dim) for t in (q, k, v))
        attn = torch.bmm(q * head_dim ** -0.5, k.transpose(-1, -2)) + mask
        o = torch.bmm(attn.softmax(dim=-1), v)
        o = o.view(N, HEADS, L, head_dim).permute(2, 0, 1, 3).reshape(L, N, C)  # (N*heads, L, hd) -> (L, N, C)
        x = x + F.linear(o, sd[p + "attn.out_proj.weight"], sd[p + "attn.out_proj.bias"])
        h = F.layer_norm(x, (WIDTH,), sd[p + "ln_2.weight"], sd[p + "ln_2.bias"])
        h = F.linear(F.gelu(F.linear(h, sd[p + "mlp.c_fc.weight"], sd[p + "mlp.c_fc.bias"])),
                     sd[p + "mlp.c_proj.weight"], sd[p + "mlp.c_proj.bias"])
        x = x + h
    x = x.permute(1, 0, 2)
    x = F.layer_norm(x, (WIDTH,), sd["ln_final.weight"], sd["ln_final.bias"])
    pooled = x[torch.arange(x.shape[0]), text.argmax(dim=-1)] @ sd["text_projection"]
    return F.normalize(pooled, dim=-1)


@pytest.fixture
def release(tmp_path):
    cfg = _tiny_config(tmp_path)
    arch, sd = _release_state_dict(cfg)
    return cfg, arch, sd, _save_release(tmp_path / "tulip.pt", sd)


def test_tulip_release_layout_equals_the_reference_forward(release):
    import open_clip

    from hnbench.models import load_model

    cfg, arch, sd, ckpt = release
    enc = load_model(f"tulip:{arch}", str(ckpt), model_config=cfg)
    assert enc.info.context_length == 248 and enc.info.extra["family"] == "tulip"
    tok = enc.tokenize(CAPTIONS)
    reference_tokens = open_clip.get_tokenizer(arch, context_length=248)(CAPTIONS)  # eval_tulip.py's tokenizer
    assert torch.equal(tok.tokens, reference_tokens) and tok.lengths[1] > 77
    ours = enc.encode_texts(tok.tokens)
    with torch.no_grad():
        expected = _reference_encode_text(sd, reference_tokens, 248)
    assert torch.allclose(ours, expected, atol=1e-5), (ours - expected).abs().max()
    # the image tower is open_clip's, with the checkpoint's visual.* weights (eval_tulip.py loads them so)
    base = open_clip.create_model(arch)
    base.visual.load_state_dict({k[len("visual."):]: v for k, v in sd.items() if k.startswith("visual.")})
    pixels = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        expected_img = F.normalize(base.visual.eval()(pixels), dim=-1)
    assert torch.allclose(enc.encode_images(pixels), expected_img, atol=1e-5)
    # the trimmed forward (causal: the pad positions after the end token do not reach it) equals the padded one
    assert torch.allclose(enc.encode_texts(tok.tokens[:, :int(tok.lengths.max())]), ours, atol=1e-5)


def test_tulip_scores_through_evaluate(release, tmp_path):
    from hnbench.evaluation.evaluate import evaluate

    cfg, arch, _, ckpt = release
    pairs = make_pairs(tmp_path, n=6)
    data = write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    r = evaluate(f"tulip:{arch}", str(data), pretrained=str(ckpt), model_config=str(cfg),
                 output_dir=tmp_path / "out", progress=False, num_workers=0)
    assert r.model["context_length"] == 248 and r.model["arch"] == f"tulip:{arch}"
    assert np.isfinite(r.metrics["t2i"]["MRR"]) and np.isfinite(r.metrics["i2t"]["MRR"])
    assert len(list((tmp_path / "out").glob("*.json"))) == 1


def test_tulip_checkpoint_with_unexpected_keys_is_one_line_and_writes_nothing(release, tmp_path, capsys):
    from hnbench.cli import main

    cfg, arch, sd, _ = release
    bad = _save_release(tmp_path / "bad.pt", {**sd, "cope.gate.weight": torch.zeros(3), "extra_head.bias": torch.zeros(2)})
    pairs = make_pairs(tmp_path, n=2)
    write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    before = snapshot(tmp_path)
    rc = main(["eval", "--model", f"tulip:{arch}", "--model-config", str(cfg), "--pretrained", str(bad),
               "--dataset", str(tmp_path / "m.jsonl"), "--output", str(tmp_path / "out")])
    assert rc == 2
    assert_one_line_error(capsys.readouterr().err, "TULIP checkpoint", "unexpected keys (2)", "cope.gate.weight",
                          "extra_head.bias")
    assert snapshot(tmp_path) == before
