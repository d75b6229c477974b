"""GOAL's terms (hnbench.train.terms.goal, .geometry) on hand-sized tensors: frameworks.md §2.7 item 6."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from open_clip.tokenizer import SimpleTokenizer
from torch import nn

from hnbench.settings import check_declared
from hnbench.train.losses import info_nce_loss
from hnbench.train.terms.geometry import box_patch_indices, box_patch_mask, to_input_box
from hnbench.train.terms.goal import (
    GOAL_TERMS,
    GoalOptions,
    goal_global_loss,
    goal_patch_loss,
    goal_segment_loss,
    goal_text_loss,
    goal_total,
    pool_tokens,
    sentence_token_span,
    span_mask,
)

BOX = (30.0, 50.0, 100.0, 120.0)  # x1, y1, x2, y2 in a 224×224 image


def _indices(rows: range, cols: range, grid: int) -> list[int]:
    return [1 + r * grid + c for r in rows for c in cols]


@pytest.mark.parametrize(("patch", "rows", "cols"), [
    (16, range(3, 8), range(1, 7)),    # ⌊50/16⌋=3 … ⌈120/16⌉−1=7; ⌊30/16⌋=1 … ⌈100/16⌉−1=6
    (14, range(3, 9), range(2, 8)),    # ⌊50/14⌋=3 … ⌈120/14⌉−1=8; ⌊30/14⌋=2 … ⌈100/14⌉−1=7
    (8, range(6, 15), range(3, 13)),   # ⌊50/8⌋=6 … ⌈120/8⌉−1=14; ⌊30/8⌋=3 … ⌈100/8⌉−1=12
])
def test_box_to_patch_indices_per_patch_size(patch: int, rows: range, cols: range) -> None:
    got = box_patch_indices(BOX, (224, 224), input_size=224, patch_size=patch)
    assert got == _indices(rows, cols, 224 // patch)


def test_synthdense_cell_box_maps_to_its_grid_cell() -> None:
    # synthdense-like geometry: 3×3 cells of a 224 px side, an object filling the centre cell exactly
    cell = 224 / 3
    box = (cell, cell, 2 * cell, 2 * cell)
    assert box_patch_indices(box, (224, 224), input_size=224, patch_size=16) == _indices(range(4, 10),
                                                                                        range(4, 10), 14)


def test_compat_hard_codes_patch_16_and_scales_per_axis() -> None:
    # ViT-L/14 at 224: the exact mapping uses p = 14 (grid 16), compat GOAL's p = 16 (grid 14)
    assert box_patch_indices(BOX, (224, 224), input_size=224, patch_size=14, compat=True) == \
        _indices(range(3, 8), range(1, 7), 14)
    # a non-square 448×224 image: exact = shortest side to 224, centre crop (112 px off each side)
    assert to_input_box((112, 0, 224, 112), (448, 224), 224) == (0.0, 0.0, 112.0, 112.0)
    assert to_input_box((112, 0, 224, 112), (448, 224), 224, compat=True) == (56.0, 0.0, 112.0, 112.0)
    assert box_patch_indices((0, 0, 100, 224), (448, 224), input_size=224, patch_size=16) == []  # outside the crop


def test_box_patch_mask_and_bad_boxes() -> None:
    mask = box_patch_mask([BOX, (0, 0, 16, 16)], [(224, 224), (224, 224)], input_size=224, patch_size=16,
                          num_tokens=1 + 196)
    assert mask.shape == (2, 197) and int(mask[0].sum()) == 30 and mask[1].nonzero().flatten().tolist() == [1]
    with pytest.raises(ValueError, match="inside the 224x224 image"):
        box_patch_indices((0, 0, 300, 10), (224, 224), input_size=224, patch_size=16)
    with pytest.raises(ValueError, match="past the model"):  # compat's 14-grid on a 16-grid model is fine; 8 is not
        box_patch_mask([(200, 200, 224, 224)], [(224, 224)], input_size=224, patch_size=8, num_tokens=50,
                       compat=True)


def test_pooled_span_equals_the_sentences_tokens() -> None:
    tok = SimpleTokenizer()
    prefix, sentence, rest = "A wide grey room. ", "A small red ball sits on the left.", " Two chairs."
    ids = [tok.encoder["<start_of_text>"], *tok.encode(prefix + sentence + rest), tok.encoder["<end_of_text>"]]
    start, end = sentence_token_span(prefix, sentence, tok.encode)
    assert ids[start:end] == tok.encode(sentence)
    c_start, c_end = sentence_token_span(prefix, sentence, tok.encode, compat=True)
    assert (c_start, c_end) == (start + 1, end + 1)  # GOAL's one-token shift
    states = torch.arange(len(ids), dtype=torch.float64)[None, :, None].repeat(1, 1, 3)
    pooled = pool_tokens(states, span_mask([(start, end)], len(ids)))
    assert torch.equal(pooled, states[0, start:end].mean(dim=0, keepdim=True))
    assert sentence_token_span("", sentence, tok.encode)[0] == 1  # first sentence: right after SOT


def _head(width: int, dim: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.LayerNorm(width), nn.Linear(width, dim, bias=False)).double()


def test_pooling_terms_are_zero_when_pooled_equals_segment_embedding() -> None:
    torch.manual_seed(1)
    head, states = _head(6, 4), torch.randn(3, 5, 6, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[0, 1, 1, 0, 0], [0, 0, 0, 1, 1], [0, 1, 1, 1, 1]], dtype=torch.bool)
    target = head(pool_tokens(states, mask)).detach() * 2.5  # same direction
    assert float(goal_patch_loss(states, mask, head, target).detach()) < 1e-24
    assert float(goal_text_loss(states, mask, head, target).detach()) < 1e-24


def test_pooling_term_closed_form() -> None:
    # identity head, B = 2: pooled (1, 0) vs target (0, 1) → cos 0 → 1; pooled (1, 1) vs (1, 0) → (1/√2 − 1)²
    states = torch.tensor([[[9.0, 9.0], [1.0, 0.0], [1.0, 0.0]], [[9.0, 9.0], [2.0, 0.0], [0.0, 2.0]]],
                          dtype=torch.float64)
    mask = torch.tensor([[0, 1, 1], [0, 1, 1]], dtype=torch.bool)
    target = torch.tensor([[0.0, 1.0], [1.0, 0.0]], dtype=torch.float64)
    want = (1.0 + (2 ** -0.5 - 1) ** 2) / 2
    assert float(goal_patch_loss(states, mask, nn.Identity(), target)) == pytest.approx(want, abs=1e-12)
    # an item whose box touches no patch is left out of the mean
    mask[1] = False
    assert float(goal_patch_loss(states, mask, nn.Identity(), target)) == pytest.approx(1.0, abs=1e-12)


def test_weights_are_1_half_1_1() -> None:
    o = GoalOptions()
    assert (o.goal_global_weight, o.goal_segment_weight, o.goal_patch_weight, o.goal_text_weight) == (1, 0.5, 1, 1)
    terms = dict(zip(GOAL_TERMS, torch.tensor([2.0, 4.0, 8.0, 16.0]).unbind(), strict=True))
    assert float(goal_total(terms)) == 2 + 0.5 * 4 + 8 + 16
    assert float(goal_total(terms, dataclasses.replace(o, goal_segment_weight=0.0))) == 26.0


def _features(b: int = 4, d: int = 8, seed: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return (F.normalize(torch.randn(b, d, generator=g), dim=-1).requires_grad_(),
            F.normalize(torch.randn(b, d, generator=g), dim=-1).requires_grad_())


def test_hn_at_gamma_zero_equals_infonce_exactly() -> None:
    v, t = _features()
    hn = goal_global_loss(v, t, 100.0, loss="hn", gamma=0.0)
    nce = goal_global_loss(v, t, 100.0, loss="infonce")
    assert torch.equal(hn, nce) and torch.equal(nce, info_nce_loss(v, t, 100.0))
    g_hn, g_nce = torch.autograd.grad(hn, (v, t)), torch.autograd.grad(nce, (v, t))
    assert all(torch.equal(a, b) for a, b in zip(g_hn, g_nce, strict=True))
    assert not torch.equal(goal_global_loss(v, t, 100.0, loss="hn", gamma=0.5), nce)


def test_segment_term_takes_hn_only_when_switched_on() -> None:
    c, s = _features(seed=3)
    nce = info_nce_loss(c, s, 100.0)
    assert torch.equal(goal_segment_loss(c, s, 100.0, loss="hn", gamma=0.5), nce)
    on = GoalOptions(goal_segment_hn=True)
    assert not torch.equal(goal_segment_loss(c, s, 100.0, loss="hn", gamma=0.5, options=on), nce)
    with pytest.raises(ValueError, match="infonce or hn"):
        goal_global_loss(c, s, 100.0, loss="nce")


def test_options_are_declared_fields() -> None:
    check_declared(GoalOptions())
    assert all(f.metadata["help"] for f in dataclasses.fields(GoalOptions))
    with pytest.raises(dataclasses.FrozenInstanceError):
        GoalOptions().goal_compat = True  # type: ignore[misc]
