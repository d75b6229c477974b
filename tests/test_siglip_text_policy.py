"""SigLIP's text is encoded as the checkpoint's own processor + model encode it: with the attention mask its tokenizer
returns, or with none where it returns input ids only (``model_input_names == ["input_ids"]``, as transformers'
SigLIP conversion saves it: the tower was trained attending to its pad tokens).

Tiny random ``SiglipModel`` folders written with ``save_pretrained`` (a word-level fast tokenizer whose pad token is
its end token, as SigLIP's), compared with ``AutoProcessor`` + ``AutoModel.get_text_features`` loaded from the same
folder, exactly as transformers' own pipeline runs them."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from test_models_hf_auto import CAPTIONS, TEXT, VISION, _word_tokenizer  # noqa: E402  (the tiny SigLIP parts)

INPUT_IDS_ONLY = ["input_ids"]
WITH_MASK = ["input_ids", "attention_mask"]


def _siglip_folder(out: Path, model_input_names: list[str]) -> Path:
    """A SigLIP checkpoint whose tokenizer returns ``model_input_names`` (saved in its tokenizer_config.json)."""
    from transformers import SiglipConfig, SiglipImageProcessor, SiglipModel

    torch.manual_seed(0)
    tok = _word_tokenizer(pad="</s>", eos="</s>")
    tok.model_input_names = model_input_names  # type: ignore[attr-defined]
    tok.init_kwargs["model_input_names"] = model_input_names  # type: ignore[attr-defined]
    tok.model_max_length = 64  # type: ignore[attr-defined]
    ids = {"pad_token_id": tok.pad_token_id, "eos_token_id": tok.eos_token_id}  # type: ignore[attr-defined]
    cfg = SiglipConfig(text_config={**TEXT, "vocab_size": len(tok), "max_position_embeddings": 64, **ids},  # type: ignore[arg-type]
                       vision_config=VISION)
    for part in (SiglipModel(cfg), tok, SiglipImageProcessor(size={"height": 32, "width": 32})):
        part.save_pretrained(out)  # type: ignore[attr-defined]
    return out


@pytest.fixture(scope="module")
def unmasked_dir(tmp_path_factory) -> Path:
    return _siglip_folder(tmp_path_factory.mktemp("siglip-ids") / "model", INPUT_IDS_ONLY)


@pytest.fixture(scope="module")
def masked_dir(tmp_path_factory) -> Path:
    return _siglip_folder(tmp_path_factory.mktemp("siglip-mask") / "model", WITH_MASK)


def _transformers_pipeline(model_dir: Path, texts: list[str]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """SigLIP's documented use: ``processor(text=..., padding="max_length")`` into ``get_text_features``; the
    normalised features and the processor's output."""
    from transformers import AutoModel, AutoProcessor

    from hnbench.models.hf import feature_tensor

    processor = AutoProcessor.from_pretrained(model_dir, trust_remote_code=False)
    model = AutoModel.from_pretrained(model_dir, trust_remote_code=False).eval()
    inputs = processor(text=texts, padding="max_length", max_length=64, truncation=True, return_tensors="pt")
    with torch.no_grad():
        return torch.nn.functional.normalize(feature_tensor(model.get_text_features(**inputs)), dim=-1), dict(inputs)


def _lowered() -> list[str]:
    # hnbench's SigLIP policy lower-cases (SiglipTokenizer's canonicalisation does it inside the tokenizer; this
    # word-level stand-in does not, so the reference is given the lower-cased captions)
    return [c.lower() for c in CAPTIONS]


def test_a_siglip_tokenizer_that_returns_input_ids_only_is_encoded_without_a_mask(unmasked_dir):
    from hnbench.models import load_model
    from hnbench.models.base import state_dict_fingerprint
    from hnbench.models.hf import HF, feature_tensor, tokenizer_attention_mask

    expected, inputs = _transformers_pipeline(unmasked_dir, _lowered())
    assert list(inputs) == ["input_ids"]  # the checkpoint's own processor gives no mask
    enc = load_model(str(unmasked_dir))
    tokens = enc.tokenize(CAPTIONS).tokens
    assert torch.equal(tokens, inputs["input_ids"])
    ours = enc.encode_texts(tokens)
    assert torch.allclose(ours, expected, atol=1e-5)
    # the mask hnbench used to rebuild from the pad ids (pad == end token: attend up to the first one) is another
    # encoding of every caption shorter than the context: what this check tells apart
    rebuilt = tokenizer_attention_mask(tokens, enc.tokenizer.pad_token_id, enc.tokenizer.eos_token_id)
    with torch.no_grad():
        masked = torch.nn.functional.normalize(feature_tensor(enc.model.get_text_features(
            input_ids=tokens, attention_mask=rebuilt)), dim=-1)
    assert (masked[:3] - expected[:3]).norm(dim=-1).min() > 1e-3
    # recorded, and the fingerprint (the embedding cache's key) is not the masked encoding's
    weights = state_dict_fingerprint(enc.model.state_dict())
    assert enc.info.extra["text_attention_mask"].startswith("none")
    assert enc.info.extra["weights_fingerprint"] == weights != enc.info.fingerprint
    # training's forward is the same encoding (HFFamily.text_attention_mask follows the encoder)
    assert HF.text_attention_mask(enc, tokens) is None
    with torch.no_grad():
        assert torch.allclose(HF.text_features(enc.model, tokens, None), ours, atol=1e-5)


def test_a_siglip_tokenizer_that_returns_a_mask_keeps_its_mask(masked_dir):
    from hnbench.models import load_model
    from hnbench.models.base import state_dict_fingerprint

    expected, inputs = _transformers_pipeline(masked_dir, _lowered())
    assert "attention_mask" in inputs
    enc = load_model(str(masked_dir))
    tokens = enc.tokenize(CAPTIONS).tokens
    mask = enc.text_attention_mask(tokens)
    assert mask is not None and torch.equal(mask, inputs["attention_mask"])  # the processor's own mask
    assert torch.allclose(enc.encode_texts(tokens), expected, atol=1e-5)
    assert "text_attention_mask" not in enc.info.extra and "weights_fingerprint" not in enc.info.extra
    assert enc.info.fingerprint == state_dict_fingerprint(enc.model.state_dict())  # as before


def test_the_two_checkpoints_differ_only_in_their_tokenizers_mask(unmasked_dir, masked_dir):
    """Same seed, same weights: what separates their embeddings is the mask alone (so a cache of one never serves
    the other: their fingerprints differ)."""
    from hnbench.models import load_model

    a, b = load_model(str(unmasked_dir)), load_model(str(masked_dir))
    assert a.info.extra["weights_fingerprint"] == b.info.fingerprint != a.info.fingerprint
    tokens = a.tokenize(CAPTIONS).tokens
    assert (a.encode_texts(tokens)[:3] - b.encode_texts(tokens)[:3]).norm(dim=-1).min() > 1e-3
