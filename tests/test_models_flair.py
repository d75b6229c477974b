"""FLAIR: a tiny random FLAIR saved in the release's checkpoint layout loads, its global features equal a
reference forward written here from the authors' ``src/flair/model.py`` / ``transformer.py``
(``FLAIR.encode_image`` / ``encode_text`` / ``get_logits_as_clip``), and the pairwise scorer
``flair-conditioned`` equals their ``get_logits`` (the text-conditioned pooling through
``PureAttentionPoolingBlock``) block by block. The reference runs the towers and the pooling block through
``torch.nn.MultiheadAttention`` as the authors' modules do, independent of ``hnbench.models.flair``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import assert_one_line_error, make_pairs, snapshot, write_jsonl

EMBED, V_WIDTH, V_HEADS, T_WIDTH, T_HEADS, LAYERS, VOCAB, POOL_HEADS = 32, 48, 3, 40, 4, 2, 49408, 8
IMAGE, PATCH, CONTEXT = 32, 8, 77
CAPTIONS = ["a red square on a dark ground", "two blue circles " * 30, "green", "a yellow star near a wall",
            "three purple lines"]


def _tiny_config(tmp_path):
    """ViT-B-16-FLAIR.json's schema, small."""
    cfg = {"embed_dim": EMBED, "init_logit_bias": -10,
           "vision_cfg": {"image_size": IMAGE, "layers": LAYERS, "width": V_WIDTH, "head_width": V_WIDTH // V_HEADS,
                          "patch_size": PATCH, "output_tokens": True},
           "text_cfg": {"context_length": CONTEXT, "vocab_size": VOCAB, "width": T_WIDTH, "heads": T_HEADS,
                        "layers": LAYERS}}
    path = tmp_path / "flair-tiny.json"
    path.write_text(json.dumps(cfg))
    return path


def _release_state_dict(seed=0):
    """The keys and shapes ``FLAIR(**cfg).state_dict()`` has (visual tower without ``proj``, text tower at the top
    level without ``text_projection``, ``image_post`` / ``text_post``, ``visual_proj``, logit scale and bias), random."""
    g = torch.Generator().manual_seed(seed)

    def rand(*shape, ln=False):
        return torch.randn(*shape, generator=g) * (0.1 if ln else 0.05) + (1.0 if ln else 0.0)

    def block(prefix, width):
        return {f"{prefix}ln_1.weight": rand(width, ln=True), f"{prefix}ln_1.bias": rand(width),
                f"{prefix}attn.in_proj_weight": rand(3 * width, width), f"{prefix}attn.in_proj_bias": rand(3 * width),
                f"{prefix}attn.out_proj.weight": rand(width, width), f"{prefix}attn.out_proj.bias": rand(width),
                f"{prefix}ln_2.weight": rand(width, ln=True), f"{prefix}ln_2.bias": rand(width),
                f"{prefix}mlp.c_fc.weight": rand(4 * width, width), f"{prefix}mlp.c_fc.bias": rand(4 * width),
                f"{prefix}mlp.c_proj.weight": rand(width, 4 * width), f"{prefix}mlp.c_proj.bias": rand(width)}

    n_patches = (IMAGE // PATCH) ** 2
    sd = {"visual.class_embedding": rand(V_WIDTH), "visual.positional_embedding": rand(n_patches + 1, V_WIDTH),
          "visual.conv1.weight": rand(V_WIDTH, 3, PATCH, PATCH),
          "visual.ln_pre.weight": rand(V_WIDTH, ln=True), "visual.ln_pre.bias": rand(V_WIDTH),
          "visual.ln_post.weight": rand(V_WIDTH, ln=True), "visual.ln_post.bias": rand(V_WIDTH),
          "token_embedding.weight": rand(VOCAB, T_WIDTH), "positional_embedding": rand(CONTEXT, T_WIDTH),
          "ln_final.weight": rand(T_WIDTH, ln=True), "ln_final.bias": rand(T_WIDTH),
          "image_post.proj": rand(V_WIDTH, EMBED) * 4, "text_post.proj": rand(T_WIDTH, EMBED) * 4,
          "visual_proj.attn.in_proj_weight": rand(3 * EMBED, EMBED) * 4, "visual_proj.attn.in_proj_bias": rand(3 * EMBED),
          "visual_proj.attn.out_proj.weight": rand(EMBED, EMBED) * 4, "visual_proj.attn.out_proj.bias": rand(EMBED),
          "logit_scale": torch.tensor(np.log(10.0), dtype=torch.float32), "logit_bias": torch.tensor(-10.0)}
    for ln in ("ln_q", "ln_k", "ln_v"):
        sd[f"visual_proj.{ln}.weight"], sd[f"visual_proj.{ln}.bias"] = rand(EMBED, ln=True), rand(EMBED)
    for i in range(LAYERS):
        sd.update(block(f"visual.transformer.resblocks.{i}.", V_WIDTH))
        sd.update(block(f"transformer.resblocks.{i}.", T_WIDTH))
    return sd


def _save_release(path, sd, wrapped=True):
    """As FLAIR's training loop saves it (``{"epoch", "name", "state_dict"}`` with DDP's ``module.``) or bare."""
    obj = {"epoch": 32, "name": "flair-tiny", "state_dict": {f"module.{k}": v for k, v in sd.items()}} if wrapped \
        else sd
    torch.save(obj, path)
    return path


# --- the reference forward, from the authors' modules --------------------------------------------------------
def _mha(sd, prefix, width, heads, add_zero_attn=False):
    mha = torch.nn.MultiheadAttention(width, heads, batch_first=True, add_zero_attn=add_zero_attn)
    mha.load_state_dict({k[len(prefix):]: v for k, v in sd.items() if k.startswith(prefix)})
    return mha.eval()


def _ln(sd, prefix, x):
    return F.layer_norm(x, (x.shape[-1],), sd[prefix + ".weight"], sd[prefix + ".bias"])


def _transformer(sd, prefix, x, width, heads, attn_mask=None):
    """FLAIR's ``Transformer`` (batch-first ``ResidualAttentionBlock``s, ``ls`` = Identity, GELU MLP)."""
    for i in range(LAYERS):
        p = f"{prefix}resblocks.{i}."
        h = _ln(sd, p + "ln_1", x)
        x = x + _mha(sd, p + "attn.", width, heads)(h, h, h, need_weights=False, attn_mask=attn_mask)[0]
        h = _ln(sd, p + "ln_2", x)
        x = x + F.linear(F.gelu(F.linear(h, sd[p + "mlp.c_fc.weight"], sd[p + "mlp.c_fc.bias"])),
                         sd[p + "mlp.c_proj.weight"], sd[p + "mlp.c_proj.bias"])
    return x


def _reference_encode_image(sd, image):
    """``FLAIR.encode_image`` (VisionTransformer with ``text_con``): ln_post-ed class token and patch tokens."""
    x = F.conv2d(image, sd["visual.conv1.weight"], stride=PATCH)
    x = x.reshape(x.shape[0], x.shape[1], -1).permute(0, 2, 1)
    x = torch.cat([sd["visual.class_embedding"].view(1, 1, -1).expand(x.shape[0], -1, -1), x], dim=1)
    x = x + sd["visual.positional_embedding"]
    x = _ln(sd, "visual.ln_pre", x)
    x = _transformer(sd, "visual.transformer.", x, V_WIDTH, V_HEADS)
    x = _ln(sd, "visual.ln_post", x)
    return x[:, 0], x[:, 1:]


def _reference_encode_text(sd, text):
    """``FLAIR.encode_text``: the 77-token causal tower, pooled at the argmax (end) token."""
    x = F.embedding(text, sd["token_embedding.weight"]) + sd["positional_embedding"]
    mask = torch.empty(CONTEXT, CONTEXT).fill_(float("-inf")).triu_(1)
    x = _transformer(sd, "transformer.", x, T_WIDTH, T_HEADS, attn_mask=mask)
    x = _ln(sd, "ln_final", x)
    return x[torch.arange(x.shape[0]), text.argmax(dim=-1)]


def _reference_get_logits_as_clip(sd, image, text):
    g_img, _ = _reference_encode_image(sd, image)
    g_txt = _reference_encode_text(sd, text)
    image_features = F.normalize(g_img @ sd["image_post.proj"], dim=-1)
    text_features = F.normalize(g_txt @ sd["text_post.proj"], dim=-1)
    return image_features, text_features


def _reference_get_logits(sd, image, text):
    """``FLAIR.get_logits``: ``image_logits`` (B images, T texts)."""
    global_image_token, local_image_tokens = _reference_encode_image(sd, image)
    global_text_token = _reference_encode_text(sd, text) @ sd["text_post.proj"]
    local_image_tokens = local_image_tokens @ sd["image_post.proj"]
    batch_size = global_image_token.shape[0]
    global_text_token = global_text_token.unsqueeze(0).expand(batch_size, -1, -1)
    # PureAttentionPoolingBlock.forward
    q = _ln(sd, "visual_proj.ln_q", global_text_token)
    k = _ln(sd, "visual_proj.ln_k", local_image_tokens)
    v = _ln(sd, "visual_proj.ln_v", local_image_tokens)
    local_image_features = _mha(sd, "visual_proj.attn.", EMBED, POOL_HEADS, add_zero_attn=True)(
        q, k, v, need_weights=False)[0]
    text_features, image_features = F.normalize(global_text_token, dim=-1), F.normalize(local_image_features, dim=-1)
    image_logits = sd["logit_scale"].exp() * torch.einsum("bij,bij->bi", image_features, text_features)
    return image_logits + sd["logit_bias"]


@pytest.fixture
def manifest(tmp_path):
    pairs = make_pairs(tmp_path, n=2)
    return write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])


@pytest.fixture
def release(tmp_path):
    cfg = _tiny_config(tmp_path)
    sd = _release_state_dict()
    return cfg, sd, _save_release(tmp_path / "flair-tiny-recap.pt", sd)


@pytest.mark.parametrize("wrapped", [True, False], ids=["training-checkpoint", "bare-state-dict"])
def test_flair_release_layout_global_features_equal_the_reference(release, tmp_path, wrapped):
    import open_clip

    from hnbench.models import load_model
    from hnbench.models.flair import FLAIR

    cfg, sd, ckpt = release
    if not wrapped:
        ckpt = _save_release(tmp_path / "bare.pt", sd, wrapped=False)
    enc = load_model("flair:tiny", str(ckpt), model_config=cfg)
    assert enc.info.context_length == 77 and enc.info.extra["family"] == "flair"
    assert enc.info.extra["scoring"].startswith("global") and "flair-conditioned" in enc.info.extra["scoring"]
    assert FLAIR.text_preprocessing(enc).to_dict() == {"tokenizer": "SimpleTokenizer", "context_length": 77,
                                                        "padding": "context", "lowercase": False, "prompts": {}}
    tok = enc.tokenize(CAPTIONS)
    reference_tokens = open_clip.get_tokenizer("ViT-B-16")(CAPTIONS)  # FLAIR's get_tokenizer: SimpleTokenizer, 77
    assert torch.equal(tok.tokens, reference_tokens) and tok.lengths[1] > 77 and tok.n_truncated(77) == 1
    pixels = torch.rand(4, 3, IMAGE, IMAGE)
    with torch.no_grad():
        expected_img, expected_txt = _reference_get_logits_as_clip(sd, pixels, reference_tokens)
    ours_txt, ours_img = enc.encode_texts(tok.tokens), enc.encode_images(pixels)
    assert torch.allclose(ours_txt, expected_txt, atol=1e-5), (ours_txt - expected_txt).abs().max()
    assert torch.allclose(ours_img, expected_img, atol=1e-5), (ours_img - expected_img).abs().max()
    # the trimmed forward (causal: padding after the end token does not reach it) equals the padded one
    assert torch.allclose(enc.encode_texts(tok.tokens[:, :int(min(tok.lengths.max(), 77))]), ours_txt, atol=1e-5)


def test_flair_conditioned_scorer_equals_the_reference_get_logits_block_by_block(release):
    from hnbench.models import load_model
    from hnbench.models.family import family_of

    cfg, sd, ckpt = release
    enc = load_model("flair:tiny", str(ckpt), model_config=cfg)
    scorers = family_of("flair:tiny").pair_scorers(enc)
    assert list(scorers) == ["flair-conditioned"]
    scorer = scorers["flair-conditioned"]
    assert scorer.name == "flair-conditioned" and scorer.description
    tokens = enc.tokenize(CAPTIONS).tokens
    pixels = torch.rand(4, 3, IMAGE, IMAGE, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        image_logits = _reference_get_logits(sd, pixels, tokens)  # (4 images, 5 texts)
    expected = ((image_logits - sd["logit_bias"]) / sd["logit_scale"].exp()).T  # the cosines, (5 texts, 4 images)
    texts, images = scorer.text_state(tokens), scorer.image_state(pixels)
    assert all(v.shape[0] == len(CAPTIONS) for v in texts.values()) and all(v.shape[0] == 4 for v in images.values())
    assert images["keys"].shape == (4, POOL_HEADS, (IMAGE // PATCH) ** 2 + 1, EMBED // POOL_HEADS)  # + zero slot
    full = scorer.score(texts, images)
    assert full.shape == (5, 4) and torch.allclose(full, expected, atol=1e-5), (full - expected).abs().max()
    # blocks that do not divide the gallery, each scored alone, give the same numbers
    rows = []
    for t0, t1 in ((0, 2), (2, 5)):
        row = [scorer.score({k: v[t0:t1] for k, v in texts.items()}, {k: v[i0:i1] for k, v in images.items()})
               for i0, i1 in ((0, 3), (3, 4))]
        assert [b.shape for b in row] == [(t1 - t0, 3), (t1 - t0, 1)]
        rows.append(torch.cat(row, dim=1))
    assert torch.allclose(torch.cat(rows), expected, atol=1e-5)
    empty = scorer.score({k: v[:0] for k, v in texts.items()}, {k: v[:2] for k, v in images.items()})
    assert empty.shape == (0, 2) and scorer.score(texts, {k: v[:0] for k, v in images.items()}).shape == (5, 0)
    # it is not the global mode: the conditioned ranking differs from the dual encoder's cosine
    global_cos = enc.encode_texts(tokens) @ enc.encode_images(pixels).T
    assert not torch.allclose(full, global_cos, atol=1e-2)


def test_flair_scorer_on_a_remembered_encoder_builds_it_only_to_score(release, tmp_path):
    from hnbench.evaluation.remembered import RememberedEncoder, load_remembered
    from hnbench.models.family import family_of

    cfg, _, ckpt = release
    built = load_remembered("flair:tiny", str(ckpt), root=tmp_path / "cache", model_config=cfg)
    remembered = load_remembered("flair:tiny", str(ckpt), root=tmp_path / "cache", model_config=cfg)
    assert isinstance(remembered, RememberedEncoder) and not remembered.built
    assert remembered.info.fingerprint == built.info.fingerprint
    scorer = family_of("flair:tiny").pair_scorers(remembered)["flair-conditioned"]
    assert not remembered.built  # offering the scorer builds nothing
    tokens, pixels = built.tokenize(CAPTIONS[:2]).tokens, torch.rand(3, 3, IMAGE, IMAGE)
    ours = scorer.score(scorer.text_state(tokens), scorer.image_state(pixels))
    direct = family_of("flair:tiny").pair_scorers(built)["flair-conditioned"]
    assert remembered.built and torch.allclose(ours, direct.score(direct.text_state(tokens),
                                                                  direct.image_state(pixels)), atol=1e-6)


def test_flair_evaluate_scores_global_mode_and_records_the_text_budget_on_tiny_synthdense(release, tmp_path):
    from open_clip.tokenizer import SimpleTokenizer

    from hnbench.data.synthdense_loader import load_synthdense
    from hnbench.evaluation.evaluate import evaluate

    cfg, _, ckpt = release
    tiny = {"n_families": {"test": 4, "train": 0}}
    r = evaluate("flair:tiny", "synthdense", pretrained=str(ckpt), model_config=str(cfg), dataset_options=tiny,
                 output_dir=tmp_path / "out", progress=False, num_workers=0)
    assert r.model["arch"] == "flair:tiny" and r.model["extra"]["scoring"].startswith("global")
    assert np.isfinite(r.metrics["t2i"]["MRR"]) and np.isfinite(r.metrics["i2t"]["MRR"])
    assert len(list((tmp_path / "out").glob("*.json"))) == 1
    # the text budget, recorded like any model's: FLAIR's 77 tokens, truncation counted with CLIP's BPE
    tok = SimpleTokenizer()
    lengths = [len(tok.encode(c)) + 2 for c in load_synthdense(**tiny).captions]
    assert r.tokens["context_length"] == 77 and r.tokens["max"] == max(lengths)
    assert r.tokens["n_truncated"] == sum(n > 77 for n in lengths) > 0


def test_flair_conditioned_scorer_end_to_end_equals_the_reference_ranks(release, tmp_path, capsys):
    """``hnbench eval --scorer flair-conditioned``: FLAIR's paper scoring over the whole gallery, in blocks, gives
    the ranks of the reference ``get_logits`` over every (image, caption) pair at once; recorded as pairwise."""
    from hnbench.cli import main
    from hnbench.data import load_dataset
    from hnbench.metrics import csr_from_assignment
    from hnbench.models import load_model
    from hnbench.results.record import read_result

    cfg, sd, ckpt = release
    data = tmp_path / "m.jsonl"
    pairs = make_pairs(tmp_path, n=6)
    write_jsonl(data, [{"image": p, "caption": c} for p, c in pairs]
                + [{"image": pairs[0][0], "caption": "a second caption of the first image"}])
    out = tmp_path / "out"
    args = ["eval", "--model", "flair:tiny", "--pretrained", str(ckpt), "--model-config", str(cfg),
            "--dataset", str(data), "--output", str(out), "--no-ci"]
    assert main([*args, "--scorer", "flair-conditioned"]) == 0
    assert "scored by flair-conditioned" in capsys.readouterr().out
    (r,) = [read_result(f) for f in out.glob("*.json")]
    assert r.scorer["name"] == "flair-conditioned" and r.scorer["rerank_top"] is None
    ds = load_dataset(str(data))
    enc = load_model("flair:tiny", str(ckpt), model_config=cfg)
    pixels = torch.stack([enc.image_transform(ds.images.open(i)) for i in range(ds.n_images)])
    with torch.no_grad():
        s = _reference_get_logits(sd, pixels, enc.tokenize(list(ds.captions)).tokens).T.numpy()  # (texts, images)
    for direction, scores, (ptr, idx) in (("t2i", s, (np.arange(ds.n_captions + 1), ds.caption_image)),
                                          ("i2t", s.T, csr_from_assignment(ds.caption_image, ds.n_images))):
        ranks = np.array([1 + sum(scores[q, j] >= max(scores[q, p] for p in idx[ptr[q]:ptr[q + 1]])
                                  for j in range(scores.shape[1]) if j not in set(idx[ptr[q]:ptr[q + 1]]))
                          for q in range(scores.shape[0])])
        for k in (1, 5):
            assert r.metrics[direction][f"R@{k}"] == pytest.approx(100 * np.mean(ranks <= k))


@pytest.mark.slow
def test_flair_cli_eval_on_synthdense_writes_a_global_mode_result(release, tmp_path):
    from hnbench.cli import main

    cfg, _, ckpt = release
    out = tmp_path / "out"
    assert main(["-q", "eval", "--model", "flair:tiny", "--model-config", str(cfg), "--pretrained", str(ckpt),
                 "--dataset", "synthdense", "--output", str(out)]) == 0
    results = list(out.glob("*.json"))
    assert len(results) == 1
    r = json.loads(results[0].read_text())
    assert r["model"]["arch"] == "flair:tiny" and r["model"]["context_length"] == 77
    assert r["model"]["extra"]["scoring"].startswith("global") and r["tokens"]["context_length"] == 77
    assert np.isfinite(r["metrics"]["t2i"]["MRR"]) and np.isfinite(r["metrics"]["i2t"]["MRR"])


def test_flair_checkpoint_with_unexpected_and_missing_keys_is_one_line(release, manifest, tmp_path, capsys):
    from hnbench.cli import main

    cfg, sd, _ = release
    bad_sd = {k: v for k, v in sd.items() if k != "visual_proj.ln_q.bias"}
    bad = _save_release(tmp_path / "bad.pt", {**bad_sd, "visual.proj": torch.zeros(V_WIDTH, EMBED),
                                              "text_projection": torch.zeros(T_WIDTH, EMBED)})
    before = snapshot(tmp_path)
    rc = main(["eval", "--model", "flair:tiny", "--model-config", str(cfg), "--pretrained", str(bad),
               "--dataset", str(manifest), "--output", str(tmp_path / "out")])
    assert rc == 2
    assert_one_line_error(capsys.readouterr().err, "FLAIR checkpoint", "missing keys (1)", "visual_proj.ln_q.bias",
                          "unexpected keys (2)", "text_projection", "visual.proj")
    assert snapshot(tmp_path) == before


def test_flair_refusals_are_one_line_and_the_release_pooling_block_has_its_published_size(release, manifest, tmp_path, capsys):
    from hnbench.cli import main
    from hnbench.models.flair import RELEASE_CONFIGS, TextConditionedPool

    cfg, _, ckpt = release
    before = snapshot(tmp_path)
    # scored, not fine-tuned (README): train refuses it before anything loads
    rc = main(["train", "--model", "flair:tiny", "--model-config", str(cfg), "--pretrained", str(ckpt),
               "--dataset", str(manifest), "--output", str(tmp_path / "run")])
    assert rc == 2
    assert_one_line_error(capsys.readouterr().err, "flair:tiny", "does not fine-tune FLAIR")
    rc = main(["eval", "--model", "flair:ViT-L-14-FLAIR", "--dataset", str(manifest), "--output", str(tmp_path / "o")])
    assert rc == 2
    assert_one_line_error(capsys.readouterr().err, "ViT-L-14-FLAIR", "ViT-B-16-FLAIR", "--model-config")
    rc = main(["eval", "--model", "flair:tiny", "--model-config", str(cfg), "--pretrained", str(ckpt),
               "--context-length", "248", "--dataset", str(manifest), "--output", str(tmp_path / "o")])
    assert rc == 2  # the release's 77 positions are not stretched silently
    assert_one_line_error(capsys.readouterr().err, "FLAIR checkpoint", "positional_embedding (77, 40) vs model (248, 40)")
    hf_text = tmp_path / "cfgs" / "hf-text.json"
    hf_text.parent.mkdir()
    hf_text.write_text(json.dumps({**json.loads(cfg.read_text()), "text_cfg": {"hf_model_name": "bert-base-uncased"}}))
    rc = main(["eval", "--model", "flair:x", "--model-config", str(hf_text), "--dataset", str(manifest),
               "--output", str(tmp_path / "o")])
    assert rc == 2
    assert_one_line_error(capsys.readouterr().err, "hf-text.json", "Hugging Face tower")
    hf_text.unlink()
    hf_text.parent.rmdir()
    assert snapshot(tmp_path) == before
    # the released architecture's pooling block: 8 heads over embed 512, about 1.05M parameters (frameworks.md §5)
    pool = TextConditionedPool(RELEASE_CONFIGS["ViT-B-16-FLAIR"]["embed_dim"])
    assert pool.heads == 8 and sum(p.numel() for p in pool.parameters()) == 1_053_696
    readme = (Path(__file__).resolve().parents[1] / "docs" / "guides" / "scoring.md").read_text()
    assert "`train` refuses it in one line" in readme and "model.extra.scoring" in readme
