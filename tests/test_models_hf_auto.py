"""``hf:`` loads every transformers image–text model through ``AutoModel``, each ``model_type`` with its
declared text policy, checked against transformers' own tokenizer + image processor + model on tiny random
configs saved with ``save_pretrained`` (tokenizers built from vocabularies written here, no network)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import assert_one_line_error, make_pairs, snapshot, write_jsonl
from PIL import Image

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

WORDS = "a red green blue square circle triangle on the left right of small big dark background".split()
TEXT = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2}
VISION = {**TEXT, "image_size": 32, "patch_size": 8}
CAPTIONS = ["A red square", "a big blue circle on the left of a small green triangle",
            "Dark background", " ".join(WORDS * 6)]  # the last one is cut at the context


def _word_tokenizer(*, pad: str, eos: str, bos: str | None = None) -> object:
    """A tiny fast tokenizer (a word vocabulary; unknown words -> <unk>), ending each text with ``eos``."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = list(dict.fromkeys([pad, "<unk>", eos, *([bos] if bos else [])]))
    vocab = {w: i for i, w in enumerate(specials + WORDS)}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    single = f"{bos} $A {eos}" if bos else f"$A {eos}"
    tk.post_processor = processors.TemplateProcessing(
        single=single, special_tokens=[(t, vocab[t]) for t in dict.fromkeys([*([bos] if bos else []), eos])])
    return PreTrainedTokenizerFast(tokenizer_object=tk, pad_token=pad, unk_token="<unk>", eos_token=eos,
                                   **({"bos_token": bos} if bos else {}))


def _save(out: Path, model: object, tokenizer: object, processor: object) -> Path:
    for part in (model, tokenizer, processor):
        part.save_pretrained(out)  # type: ignore[attr-defined]
    return out


@pytest.fixture(scope="module")
def siglip_dir(tmp_path_factory) -> Path:
    """model_type siglip (SigLIP, SigLIP 2 fixed-resolution); its pad token is its end token, as SigLIP's."""
    from transformers import SiglipConfig, SiglipImageProcessor, SiglipModel

    torch.manual_seed(0)
    tok = _word_tokenizer(pad="</s>", eos="</s>")
    cfg = SiglipConfig(text_config={**TEXT, "vocab_size": len(tok), "max_position_embeddings": 64,  # type: ignore[arg-type]
                                    "pad_token_id": tok.pad_token_id, "eos_token_id": tok.eos_token_id},  # type: ignore[attr-defined]
                       vision_config=VISION)
    return _save(tmp_path_factory.mktemp("siglip") / "model", SiglipModel(cfg), tok,
                 SiglipImageProcessor(size={"height": 32, "width": 32}))


@pytest.fixture(scope="module")
def siglip2_dir(tmp_path_factory) -> Path:
    """model_type siglip2 (NaFlex): the Gemma-style Siglip2Tokenizer (BPE, left padding) and patch-list images."""
    from transformers import Siglip2Config, Siglip2ImageProcessor, Siglip2Model, Siglip2Tokenizer

    torch.manual_seed(1)
    letters = sorted(set("".join(WORDS)))
    vocab = {t: i for i, t in enumerate(["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "▁", *letters,
                                         *(f"▁{c}" for c in letters)])}
    tok = Siglip2Tokenizer(vocab=vocab, merges=[("▁", c) for c in letters])
    vision = {k: v for k, v in VISION.items() if k != "image_size"} | {"num_patches": 16}
    cfg = Siglip2Config(text_config={**TEXT, "vocab_size": len(vocab), "max_position_embeddings": 64},
                        vision_config=vision)
    return _save(tmp_path_factory.mktemp("siglip2") / "model", Siglip2Model(cfg), tok,
                 Siglip2ImageProcessor(patch_size=8, max_num_patches=16))


@pytest.fixture(scope="module")
def metaclip2_dir(tmp_path_factory) -> Path:
    """model_type metaclip_2 (Meta CLIP 2): XLM-style <s> … </s> with a pad token that is not the end token."""
    from transformers import CLIPImageProcessor, MetaClip2Config, MetaClip2Model

    torch.manual_seed(2)
    tok = _word_tokenizer(pad="<pad>", eos="</s>", bos="<s>")
    ids = {"pad_token_id": tok.pad_token_id, "eos_token_id": tok.eos_token_id, "bos_token_id": tok.bos_token_id}  # type: ignore[attr-defined]
    cfg = MetaClip2Config(text_config={**TEXT, "vocab_size": len(tok), "max_position_embeddings": 77, **ids},  # type: ignore[arg-type]
                          vision_config=VISION, projection_dim=24)
    return _save(tmp_path_factory.mktemp("metaclip2") / "model", MetaClip2Model(cfg), tok,
                 CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}))


def _reference_texts(model_dir: Path, texts: list[str], **tokenizer_kwargs: object) -> torch.Tensor:
    """transformers' own pipeline: AutoTokenizer + AutoModel.get_text_features(**inputs), L2-normalised."""
    from transformers import AutoModel, AutoTokenizer

    from hnbench.models.hf import feature_tensor

    model, tok = AutoModel.from_pretrained(model_dir).eval(), AutoTokenizer.from_pretrained(model_dir)
    inputs = tok(texts, truncation=True, return_tensors="pt", **tokenizer_kwargs)
    with torch.no_grad():
        return torch.nn.functional.normalize(feature_tensor(model.get_text_features(**inputs)), dim=-1)


def _images() -> list[Image.Image]:
    return [Image.new("RGB", (48, 32), (200, 30, 30)), Image.new("RGB", (24, 40), (30, 200, 30)),
            Image.new("RGB", (32, 32), (30, 30, 200))]


def _reference_images(model_dir: Path, images: list[Image.Image]) -> torch.Tensor:
    from transformers import AutoImageProcessor, AutoModel

    from hnbench.models.hf import feature_tensor

    model, processor = AutoModel.from_pretrained(model_dir).eval(), AutoImageProcessor.from_pretrained(model_dir)
    with torch.no_grad():
        f = feature_tensor(model.get_image_features(**processor(images=images, return_tensors="pt")))
    return torch.nn.functional.normalize(f, dim=-1)


def _hnbench(model_dir: Path, texts: list[str], images: list[Image.Image]) -> tuple[object, torch.Tensor, torch.Tensor]:
    from hnbench.models import load_model

    enc = load_model(str(model_dir))
    tokens = enc.tokenize(texts).tokens
    pixels = torch.stack([enc.image_transform(im) for im in images])
    return enc, enc.encode_texts(tokens), enc.encode_images(pixels)


@pytest.mark.parametrize("fixture", ["siglip_dir", "siglip2_dir"])
def test_siglip_policy_equals_the_max_length_pipeline_not_padding_true(fixture, request):
    model_dir = request.getfixturevalue(fixture)
    enc, text, image = _hnbench(model_dir, CAPTIONS, _images())
    assert enc.info.context_length == 64 and enc.policy.lowercase and not enc.dynamic_padding
    assert enc.tokenize(CAPTIONS).tokens.shape == (len(CAPTIONS), 64)
    lowered = [c.lower() for c in CAPTIONS]
    expected = _reference_texts(model_dir, lowered, padding="max_length", max_length=64)
    assert torch.allclose(text, expected, atol=1e-5)
    # padding=True (a batch of captions shorter than 64): the tower pools the last position, which is then
    # another token (the end token, or a pad at another place) than the model was trained to pool
    wrong = _reference_texts(model_dir, lowered[:3], padding=True, max_length=64)
    assert (text[:3] - wrong).norm(dim=-1).min() > 1e-3
    # captions as given: capitals are other tokens for a tokenizer that does not lower-case (SigLIP 2's
    # Siglip2Tokenizer lower-cases itself, so there the policy's step changes nothing)
    cased = _reference_texts(model_dir, CAPTIONS, padding="max_length", max_length=64)
    assert ((text[0] - cased[0]).norm() > 1e-3) == (fixture == "siglip_dir")
    assert enc.tokenize(CAPTIONS).n_truncated(64) == 1
    assert torch.allclose(image, _reference_images(model_dir, _images()), atol=1e-5)
    assert enc.info.embed_dim == text.shape[1] == image.shape[1]
    assert enc.info.extra["model_type"] == enc.model.config.model_type
    from hnbench.models.family import family_of

    pre = family_of(str(model_dir)).text_preprocessing(enc)  # what the hf adapter declares for this type
    assert (pre.padding, pre.context_length, pre.lowercase) == ("max_length", 64, True)


def test_metaclip2_equals_the_transformers_pipeline(metaclip2_dir):
    enc, text, image = _hnbench(metaclip2_dir, CAPTIONS, _images())
    assert enc.info.context_length == 77 and enc.dynamic_padding and not enc.policy.lowercase
    assert torch.allclose(text, _reference_texts(metaclip2_dir, CAPTIONS, padding=True, max_length=77), atol=1e-5)
    # padded to the longest caption or to the context: the same features (causal, pooled at the end token)
    assert torch.allclose(text, _reference_texts(metaclip2_dir, CAPTIONS, padding="max_length", max_length=77),
                          atol=1e-5)
    assert torch.allclose(image, _reference_images(metaclip2_dir, _images()), atol=1e-5)
    assert enc.info.embed_dim == 24 == text.shape[1]


def test_clip_through_automodel_keeps_its_policy(hf_clip_dir):
    """CLIP keeps its policy: longest padding, the end-token mask (its pad token is its end token)."""
    from hnbench.models.hf import TEXT_POLICIES

    enc, text, image = _hnbench(hf_clip_dir, CAPTIONS, _images())
    assert enc.policy is TEXT_POLICIES["clip"] and enc.dynamic_padding and "model_type" not in enc.info.extra
    expected = torch.cat([_reference_texts(hf_clip_dir, [c], max_length=40) for c in CAPTIONS])
    assert torch.allclose(text, expected, atol=1e-5)
    assert torch.allclose(image, _reference_images(hf_clip_dir, _images()), atol=1e-5)


def test_siglip2_naflex_scores_end_to_end(siglip2_dir, tmp_path):
    """NaFlex images (patches + mask + grid) batch through the data loader like any other."""
    from hnbench.evaluation.evaluate import evaluate

    pairs = make_pairs(tmp_path, n=6)
    data = write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    r = evaluate(str(siglip2_dir), str(data), output_dir=tmp_path / "out", progress=False, num_workers=0)
    assert r.model["framework"] == "transformers" and r.model["context_length"] == 64
    assert np.isfinite(r.metrics["t2i"]["MRR"]) and r.model["extra"]["model_type"] == "siglip2"


def test_text_only_transformers_model_is_refused_in_one_line(tmp_path, capsys):
    from transformers import BertConfig, BertModel

    from hnbench.cli import main

    d = tmp_path / "bert"
    BertModel(BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=8)).save_pretrained(d)
    pairs = make_pairs(tmp_path, n=2)
    write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    before, _ = snapshot(tmp_path), capsys.readouterr()  # transformers' progress bars while saving
    rc = main(["eval", "--model", str(d), "--dataset", str(tmp_path / "m.jsonl"), "--output", str(tmp_path / "out")])
    assert rc == 2
    assert_one_line_error(capsys.readouterr().err, "bert", "not an image-text model")
    assert snapshot(tmp_path) == before
