"""Long-CLIP conversion and stretching; the FILIP token-level term and the towers' token features."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from hnbench.models import load_model
from hnbench.models.longclip import (
    convert_longclip_state_dict,
    stretch_openclip,
    stretch_positional_embedding,
    stretched_length,
)
from hnbench.train.token_loss import filip_scores, token_loss


def _longclip_reference(pe, keep_len=20):
    """Long-CLIP's own loop (model/longclip.py), transcribed."""
    length, dim = pe.shape
    new = torch.zeros([4 * length - 3 * keep_len, dim], dtype=pe.dtype)
    for i in range(keep_len):
        new[i] = pe[i]
    for i in range(length - 1 - keep_len):
        new[4 * i + keep_len] = pe[i + keep_len]
        new[4 * i + 1 + keep_len] = 3 * pe[i + keep_len] / 4 + 1 * pe[i + 1 + keep_len] / 4
        new[4 * i + 2 + keep_len] = 2 * pe[i + keep_len] / 4 + 2 * pe[i + 1 + keep_len] / 4
        new[4 * i + 3 + keep_len] = 1 * pe[i + keep_len] / 4 + 3 * pe[i + 1 + keep_len] / 4
    for j in range(4):
        new[4 * length - 3 * keep_len - 4 + j] = pe[length - 1] + j * (pe[length - 1] - pe[length - 2]) / 4
    return new


def test_stretch_77_to_248_matches_longclip():
    pe = torch.randn(77, 12, generator=torch.Generator().manual_seed(0))
    out = stretch_positional_embedding(pe)
    assert out.shape == (248, 12) and stretched_length(77) == 248
    assert torch.equal(out[:20], pe[:20])  # the first 20 positions are kept
    assert torch.equal(out[20::4][:57], pe[20:77])  # every 4th row after them is an original row
    assert torch.allclose(out[21], 0.75 * pe[20] + 0.25 * pe[21], atol=1e-6)
    assert torch.allclose(out[-1], pe[76] + 0.75 * (pe[76] - pe[75]), atol=1e-6)
    assert torch.allclose(out, _longclip_reference(pe), rtol=0, atol=1e-6)


def test_convert_released_longclip_state_dict():
    g = torch.Generator().manual_seed(1)
    sd = {"positional_embedding": torch.randn(248, 8, generator=g),
          "positional_embedding_res": torch.randn(248, 8, generator=g), "ln_final.weight": torch.ones(8)}
    out, ctx = convert_longclip_state_dict(sd)
    assert ctx == 248 and "positional_embedding_res" not in out and out["ln_final.weight"] is sd["ln_final.weight"]
    pe = out["positional_embedding"]
    assert torch.equal(pe[:20], sd["positional_embedding"][:20])
    assert torch.equal(pe[20:], sd["positional_embedding_res"][20:])
    plain = {"positional_embedding": torch.zeros(77, 8)}
    assert convert_longclip_state_dict(plain) == (plain, None)


def test_load_a_longclip_shaped_checkpoint_into_open_clip(micro_config, tmp_path):
    """A synthetic checkpoint in Long-CLIP's layout (OpenAI keys + the two 248-row tables, saved as .pt)."""
    import open_clip

    from hnbench.models.openclip import register_model_config

    register_model_config(micro_config, "hnb-micro")
    torch.manual_seed(0)
    model = open_clip.create_model("hnb-micro", force_context_length=248)
    sd = {k: v.clone() for k, v in model.state_dict().items()}
    res = torch.randn_like(sd["positional_embedding"])
    sd["positional_embedding_res"] = res
    torch.save(sd, tmp_path / "longclip-micro.pt")
    enc = load_model("hnb-micro", str(tmp_path / "longclip-micro.pt"), model_config=str(micro_config))
    assert enc.info.context_length == 248 and enc.tokenize(["x"]).tokens.shape == (1, 248)
    pe = enc.model.positional_embedding.detach()
    assert torch.equal(pe[:20], sd["positional_embedding"][:20]) and torch.equal(pe[20:], res[20:])
    long_caption = " ".join(["red square"] * 60)
    assert enc.tokenize([long_caption]).lengths[0] > 77
    assert torch.isfinite(enc.encode_texts(enc.tokenize([long_caption]).tokens)).all()


def test_stretch_openclip_keeps_short_captions_identical(micro_config):
    enc = load_model("hnb-micro", model_config=str(micro_config))  # 32 positions
    long = stretch_openclip(enc)
    assert long.info.context_length == stretched_length(32) == 68
    assert long.info.extra["stretched_from"] == 32
    short = ["a red square"]  # < 20 tokens: causal attention never sees a stretched position
    a = enc.encode_texts(enc.tokenize(short).tokens)
    b = long.encode_texts(long.tokenize(short).tokens)
    assert torch.allclose(a, b, atol=1e-6)
    with pytest.raises(ValueError, match="gives 68"):
        stretch_openclip(enc, 248)


def test_trainer_stretch_context(micro_config, tmp_path):
    import json

    from conftest import make_pairs, write_jsonl

    from hnbench.train.trainer import TrainConfig, train

    pairs = make_pairs(tmp_path, n=4)
    data = write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    ckpt = train(TrainConfig(model="hnb-micro", model_config=str(micro_config), dataset=str(data), epochs=1,
                             batch_size=4, num_workers=0, stretch_context=68, token_loss_weight=1.0,
                             output=str(tmp_path / "run")), progress=False)
    enc = load_model("hnb-micro", str(ckpt), model_config=str(micro_config), context_length=68)
    assert enc.info.context_length == 68
    assert json.loads((tmp_path / "run" / "train_config.json").read_text())["config"]["stretch_context"] == 68


# --------------------------------------------------------------------------- FILIP token-level term


def test_filip_scores_hand_computed():
    x = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])  # one image, two patches
    y = torch.tensor([[[1.0, 0.0], [0.6, 0.8], [0.0, -1.0]]])  # one text, three tokens, the last is padding
    mask = torch.tensor([[True, True, False]])
    a, c = filip_scores(x, y, mask)
    # patch 0 → best token 1.0; patch 1 → best token 0.8: mean 0.9
    assert a.item() == pytest.approx(0.9)
    # token 0 → best patch 1.0; token 1 → best patch 0.8: mean 0.9 (the padding token is ignored)
    assert c.item() == pytest.approx(0.9)
    with pytest.raises(ValueError, match="at least one valid token"):
        filip_scores(x, y, torch.zeros(1, 3, dtype=torch.bool))


def test_token_loss_is_symmetric_infonce_on_late_interaction_scores():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(4, 5, 8, generator=g), torch.randn(4, 6, 8, generator=g)
    mask = torch.ones(4, 6, dtype=torch.bool)
    mask[1, 4:] = False
    x.requires_grad_()
    loss = token_loss(x, y, mask, 10.0)
    a, c = filip_scores(F.normalize(x, dim=-1), F.normalize(y, dim=-1), mask)
    target = torch.arange(4)
    ref = 0.5 * (F.cross_entropy(10 * a, target) + F.cross_entropy(10 * c.T, target))
    assert torch.allclose(loss, ref, atol=1e-6) and loss.dtype == torch.float32
    loss.backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    # chunked columns give the same scores
    a2, c2 = filip_scores(F.normalize(x, dim=-1), F.normalize(y, dim=-1), mask, chunk=1)
    assert torch.allclose(a, a2) and torch.allclose(c, c2)


def test_towers_token_features_match_the_pooled_path(micro_config):
    from hnbench.models.towers import CLIPTowers

    enc = load_model("hnb-micro", model_config=str(micro_config))
    towers = CLIPTowers(enc.model, "open_clip")
    pixels = torch.randn(3, 3, 32, 32)
    tokens = enc.tokenize(["a red square", "two blue circles on grass", "x"]).tokens
    plain = towers(pixels, tokens)
    full = towers(pixels, tokens, with_tokens=True)
    assert torch.allclose(plain["image"], full["image"], atol=1e-6)
    assert torch.allclose(plain["text"], full["text"], atol=1e-6)
    assert full["image_tokens"].shape == (3, 16, 32) and full["text_tokens"].shape == (3, 32, 32)
    mask = towers.text_token_mask(tokens)
    assert mask.sum(1).tolist() == [int(x) for x in enc.tokenize(["a red square", "two blue circles on grass", "x"]).lengths]
    # the projected token at the end position is the pooled text feature before normalisation
    end = tokens.argmax(1)
    assert torch.allclose(F.normalize(full["text_tokens"][torch.arange(3), end], dim=-1), full["text"], atol=1e-6)
