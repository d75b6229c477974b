"""StructXLIP's terms (hnbench.train.terms.structxlip, .lexicon) on hand-sized tensors: frameworks.md §3.7 item 5."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F
from open_clip.tokenizer import SimpleTokenizer
from torch import nn

from hnbench.settings import check_declared
from hnbench.train.losses import hn_clip_loss, info_nce_loss
from hnbench.train.terms.lexicon import FilterOptions, filter_caption
from hnbench.train.terms.structxlip import (
    STRUCTXLIP_TERMS,
    StructXLIPOptions,
    chunk_embeddings,
    chunk_spans,
    local_structure_loss,
    local_structure_term,
    rgb_structure_loss,
    schedule_factor,
    structure_loss,
    structxlip_weights,
)


def _unit(b: int, d: int, seed: int) -> torch.Tensor:
    return F.normalize(torch.randn(b, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64), dim=-1)


def test_structure_loss_is_clip_loss_on_the_masked_subset_with_detached_scale() -> None:
    e, t = _unit(4, 6, 0).requires_grad_(), _unit(4, 6, 1)
    has = torch.tensor([True, False, True, True])
    s = torch.tensor(20.0, dtype=torch.float64, requires_grad=True)
    got = structure_loss(e, t, has, s)
    z = 20.0 * e[has] @ t[has].T
    y = torch.arange(3)
    want = (F.cross_entropy(z, y) + F.cross_entropy(z.T, y)) / 2
    assert float(got.detach()) == pytest.approx(float(want.detach()), abs=1e-12)
    assert torch.equal(got, info_nce_loss(e[has], t[has], 20.0))
    got.backward()
    assert s.grad is None and e.grad is not None and torch.count_nonzero(e.grad[1]) == 0  # s̄ detached


def test_structure_terms_are_zero_with_no_edge_maps() -> None:
    v, e, t = _unit(3, 4, 0).requires_grad_(), _unit(3, 4, 1).requires_grad_(), _unit(3, 4, 2)
    none = torch.zeros(3, dtype=torch.bool)
    sc, rgb = structure_loss(e, t, none, 30.0), rgb_structure_loss(v, e, none)
    assert float(sc.detach()) == 0.0 and float(rgb.detach()) == 0.0
    (sc + rgb).backward()  # still attached to the graph (data parallel needs every parameter used)
    assert e.grad is not None and torch.count_nonzero(e.grad) == 0


def test_rgb_structure_loss_is_mean_one_minus_cosine() -> None:
    v = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    e = torch.tensor([[0.0, 3.0], [1.0, 1.0], [0.0, -1.0]], dtype=torch.float64)
    has = torch.tensor([True, True, False])
    assert float(rgb_structure_loss(v, e, has)) == pytest.approx((1.0 + (1 - 2 ** -0.5)) / 2, abs=1e-12)


def _lsc_batch() -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
    chunks = [_unit(2, 3, 10), _unit(1, 3, 11)]  # image 0: 2 chunks, image 1: 1 chunk
    crops = torch.stack([_unit(2, 3, 12), _unit(2, 3, 13)])  # (B=2, K=2, D=3)
    valid = torch.tensor([[True, True], [True, False]])  # image 1's second crop is invalid
    return chunks, crops, valid


def test_local_structure_loss_closed_form_b2_k2_one_invalid() -> None:
    chunks, crops, valid = _lsc_batch()
    s = 3.0  # s/τ = 42.86 < 100
    se = s / 0.07
    e = [crops[0, 0], crops[0, 1], crops[1, 0]]  # the valid crops
    def ell(c: torch.Tensor, own: list[int]) -> float:
        z = [math.exp(se * float(c @ x)) for x in e]
        return -math.log(sum(z[k] for k in own) / sum(z))
    want = ((ell(chunks[0][0], [0, 1]) + ell(chunks[0][1], [0, 1])) / 2 + ell(chunks[1][0], [2])) / 2
    assert float(local_structure_loss(chunks, crops, valid, s)) == pytest.approx(want, rel=1e-10)
    # s/τ above 100 is capped at 100
    capped = local_structure_loss(chunks, crops, valid, 100 * 0.07)
    assert torch.equal(local_structure_loss(chunks, crops, valid, 50.0), capped)


def test_invalid_crops_never_enter_the_denominator() -> None:
    chunks, crops, valid = _lsc_batch()
    before = local_structure_loss(chunks, crops, valid, 3.0)
    moved = crops.clone()
    moved[1, 1] = chunks[0][0] * 7  # the invalid crop now matches a chunk perfectly
    assert torch.equal(local_structure_loss(chunks, moved, valid, 3.0), before)
    # an image without chunks or without a valid crop is left out of the mean
    no_own = valid.clone()
    no_own[1] = False
    only0 = local_structure_loss(chunks, crops, no_own, 3.0)
    assert torch.equal(only0, local_structure_loss([chunks[0], chunks[1][:0]], crops, no_own, 3.0))
    empty = local_structure_loss([c[:0] for c in chunks], crops, valid, 3.0)
    assert float(empty) == 0.0


def test_chunk_spans_for_a_known_sentence_match_the_hand_count() -> None:
    tok = SimpleTokenizer()
    caption = "a red ball, on the big wooden table."
    # every word is one BPE token: SOT a red ball , on the big wooden table . → positions 1..10
    assert [len(tok.encode(w)) for w in caption.replace(",", " ,").replace(".", " .").split()] == [1] * 10
    # clause 1 has 3 words (window 2): "a red", "red ball"; clause 2 has 5 words (window 3): three chunks
    assert chunk_spans(caption, tok.encode) == [(1, 3), (2, 4), (5, 8), (6, 9), (7, 10)]
    assert chunk_spans(caption, tok.encode, max_chunks=3) == [(1, 3), (2, 4), (5, 8)]
    assert chunk_spans(caption, tok.encode, context_length=9) == [(1, 3), (2, 4), (5, 8)]  # EOT at 8
    # a word of several tokens: the span covers all of them
    long = "an extraordinarily tall giraffe"
    n = len(tok.encode("extraordinarily"))
    assert n > 1 and chunk_spans(long, tok.encode)[0] == (1, 2 + n)
    assert chunk_spans("", tok.encode) == [] and chunk_spans("...", tok.encode) == []


def test_chunk_windows_grow_with_clause_length() -> None:
    tok = SimpleTokenizer()
    for n_words, width in [(4, 2), (5, 3), (10, 3), (11, 4), (20, 4), (21, 5), (41, 6)]:
        spans = chunk_spans(" ".join(["cat"] * n_words), tok.encode, max_chunks=100)
        assert len(spans) == n_words - width + 1 and spans[0] == (1, 1 + width)


def test_schedule_factors_per_epoch() -> None:
    got = [round(schedule_factor(e, 0.7), 3) for e in range(10)]
    assert got == [1.0, 1.0, 0.985, 0.944, 0.883, 0.817, 0.756, 0.715, 0.7, 0.7]
    w = structxlip_weights(8)
    assert w == pytest.approx({"global": 1.0, "structure": 0.5 * 0.7, "rgb_structure": 0.05 * 0.5,
                               "local_structure": 0.1 * 0.4})
    assert structxlip_weights(0, StructXLIPOptions(sketch_epochs=1))["global"] == 0.0
    assert set(w) == set(STRUCTXLIP_TERMS)
    assert schedule_factor(0, 0.5, warm=2, decay_start=2) == 0.5  # linear warm-up (e+1)/warm


def test_hn_at_gamma_zero_equals_infonce() -> None:
    v, t = _unit(4, 6, 3).requires_grad_(), _unit(4, 6, 4).requires_grad_()
    hn, nce = hn_clip_loss(v, t, 33.0, gamma=0.0), info_nce_loss(v, t, 33.0)
    assert torch.equal(hn, nce)
    assert all(torch.equal(a, b) for a, b in zip(torch.autograd.grad(hn, (v, t)), torch.autograd.grad(nce, (v, t)),
                                                 strict=True))
    has = torch.ones(4, dtype=torch.bool)
    on = StructXLIPOptions(structure_hn=True)
    assert torch.equal(structure_loss(v, t, has, 33.0, loss="hn", gamma=0.0, options=on),
                       structure_loss(v, t, has, 33.0))
    assert not torch.equal(structure_loss(v, t, has, 33.0, loss="hn", gamma=0.5, options=on),
                           structure_loss(v, t, has, 33.0, loss="hn", gamma=0.5))


def _text_head(width: int, dim: int) -> tuple[nn.LayerNorm, nn.Linear]:
    torch.manual_seed(0)
    return nn.LayerNorm(width).double(), nn.Linear(width, dim, bias=False).double()


def test_chunk_embeddings_norm_softmax_pooling_and_double_ln_compat() -> None:
    ln, proj = _text_head(4, 3)
    states = torch.randn(6, 4, dtype=torch.float64)
    h = states[1:3]
    w = torch.softmax(h.norm(dim=-1), dim=0)
    want = F.normalize(proj(ln((h * w[:, None]).sum(0, keepdim=True))), dim=-1)
    assert torch.allclose(chunk_embeddings(states, [(1, 3)], ln, proj), want, atol=1e-12)
    compat = chunk_embeddings(states, [(1, 3)], ln, proj, options=StructXLIPOptions(compat_double_ln=True))
    assert torch.allclose(compat, chunk_embeddings(ln(states), [(1, 3)], ln, proj), atol=1e-12)
    with pytest.raises(ValueError, match="outside"):
        chunk_embeddings(states, [(4, 9)], ln, proj)


def test_local_term_pools_filtered_states_unless_span_shift_compat() -> None:
    tok = SimpleTokenizer()
    ln, proj = _text_head(4, 3)
    g = torch.Generator().manual_seed(5)
    caption_states = torch.randn(2, 12, 4, generator=g, dtype=torch.float64)
    filtered_states = torch.randn(2, 12, 4, generator=g, dtype=torch.float64)
    texts = ["a ball on the big table.", "two cats, one dog."]
    crops, valid = torch.stack([_unit(2, 3, 6), _unit(2, 3, 7)]), torch.ones(2, 2, dtype=torch.bool)
    args = (texts, tok.encode, ln, proj, crops, valid, 3.0)
    fixed = local_structure_term(caption_states, filtered_states, *args)
    chunks = [chunk_embeddings(filtered_states[i], chunk_spans(texts[i], tok.encode), ln, proj) for i in range(2)]
    assert torch.equal(fixed, local_structure_loss(chunks, crops, valid, 3.0))
    shifted = local_structure_term(caption_states, filtered_states, *args,
                                   options=StructXLIPOptions(compat_span_shift=True))
    assert torch.equal(shifted, local_structure_term(caption_states, caption_states, *args))
    assert not torch.equal(shifted, fixed)


def test_lexicon_filter() -> None:
    assert filter_caption("A red ball on a navy blue table.") == "A ball on a table."
    assert filter_caption("A red ball on a navy blue table.", FilterOptions(filter_colors=False)) == \
        "A red ball on a navy blue table."
    assert filter_caption("A  shiny wooden ball ,next to glass.", FilterOptions(filter_textures=True,
                                                                              filter_materials=True)) == \
        "A wooden ball,next to."  # whole words only ("wooden" is not "wood"); no space is added after punctuation
    assert filter_caption("red and blue.") == "red and blue."  # too few content words remain: kept
    assert filter_caption("A red , blue, ball and a  cat!!") == "A, ball and a cat!"  # punctuation repaired


def test_options_are_declared_fields() -> None:
    for cls in (StructXLIPOptions, FilterOptions):
        check_declared(cls())
        assert all(f.metadata["help"] for f in dataclasses.fields(cls))


def test_half_precision_inputs_compute_in_fp32() -> None:
    chunks, crops, valid = _lsc_batch()
    ref = local_structure_loss([c.float() for c in chunks], crops.float(), valid, 3.0)
    got = local_structure_loss([c.bfloat16() for c in chunks], crops.bfloat16(), valid, 3.0)
    assert got.dtype == torch.float32 and float(got) == pytest.approx(float(ref), rel=0.05)
    v, e = _unit(3, 4, 0).bfloat16(), _unit(3, 4, 1).bfloat16()
    has = torch.tensor([True, False, True])
    assert rgb_structure_loss(v, e, has).dtype == torch.float32
    assert structure_loss(e, v, has, 30.0).dtype == torch.float32
