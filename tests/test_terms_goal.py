"""GOAL's terms (hnbench.train.terms.goal, .geometry) on hand-sized tensors: frameworks.md §2.7 item 6."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from open_clip.tokenizer import SimpleTokenizer
from torch import nn

from hnbench.distributed import DistContext
from hnbench.settings import check_declared
from hnbench.sidecars.segments import token_span
from hnbench.train.losses import hn_clip_loss, info_nce_loss
from hnbench.train.terms.geometry import box_patch_indices, box_patch_mask, to_input_box
from hnbench.train.terms.goal import (
    GOAL_TERMS,
    GoalOptions,
    goal_patch_loss,
    goal_segment_loss,
    goal_text_loss,
    pool_tokens,
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


def _span(prefix: str, rest: str, sentence: str, tok: SimpleTokenizer) -> tuple[int, int]:
    """The sentence's token span in ``prefix + rest`` as the objective takes it: the sidecar's ``token_span``."""
    span = token_span(prefix + rest, (len(prefix), len(prefix) + len(sentence)), tok.encode)
    assert span is not None
    return span


def test_pooled_span_equals_the_sentences_tokens() -> None:
    tok = SimpleTokenizer()
    prefix, sentence, rest = "A wide grey room. ", "A small red ball sits on the left.", " Two chairs."
    ids = [tok.encoder["<start_of_text>"], *tok.encode(prefix + sentence + rest), tok.encoder["<end_of_text>"]]
    start, end = _span(prefix, sentence + rest, sentence, tok)
    assert ids[start:end] == tok.encode(sentence)
    states = torch.arange(len(ids), dtype=torch.float64)[None, :, None].repeat(1, 1, 3)
    pooled = pool_tokens(states, span_mask([(start, end)], len(ids)))
    assert torch.equal(pooled, states[0, start:end].mean(dim=0, keepdim=True))
    assert _span("", sentence + rest, sentence, tok)[0] == 1  # first sentence: right after SOT


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
    assert (o.global_weight, o.segment_weight, o.patch_weight, o.text_weight) == (1, 0.5, 1, 1)
    assert GOAL_TERMS == ("global", "segment", "patch", "text")
    assert dataclasses.replace(o, segment_weight=0.0).segment_weight == 0.0


def _features(b: int = 4, d: int = 8, seed: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return (F.normalize(torch.randn(b, d, generator=g), dim=-1).requires_grad_(),
            F.normalize(torch.randn(b, d, generator=g), dim=-1).requires_grad_())


def test_hn_at_gamma_zero_equals_infonce_exactly() -> None:
    v, t = _features()
    hn = hn_clip_loss(v, t, 100.0, gamma=0.0)
    nce = info_nce_loss(v, t, 100.0)
    assert torch.equal(hn, nce) and torch.equal(nce, info_nce_loss(v, t, 100.0))
    g_hn, g_nce = torch.autograd.grad(hn, (v, t)), torch.autograd.grad(nce, (v, t))
    assert all(torch.equal(a, b) for a, b in zip(g_hn, g_nce, strict=True))
    assert not torch.equal(hn_clip_loss(v, t, 100.0, gamma=0.5), nce)


def test_segment_term_takes_hn_only_when_switched_on() -> None:
    c, s = _features(seed=3)
    nce = info_nce_loss(c, s, 100.0)
    assert torch.equal(goal_segment_loss(c, s, 100.0, loss="hn", gamma=0.5), nce)
    on = GoalOptions(segment_hn=True)
    assert not torch.equal(goal_segment_loss(c, s, 100.0, loss="hn", gamma=0.5, options=on), nce)


def test_options_are_declared_fields() -> None:
    check_declared(GoalOptions())
    assert all(f.metadata["help"] for f in dataclasses.fields(GoalOptions))
    with pytest.raises(dataclasses.FrozenInstanceError):
        GoalOptions().compat = True  # type: ignore[misc]


# ----------------------------------------------------------------------------- 2 gloo processes

def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _term_inputs() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    b, d, w, n = 4, 5, 6, 7
    def unit(*shape: int) -> torch.Tensor:
        return F.normalize(torch.randn(*shape, generator=g, dtype=torch.float64), dim=-1)
    return {"v": unit(b, d), "t": unit(b, d), "crop": unit(b, d), "sent": unit(b, d), "edge": unit(b, d),
            "filt": unit(b, d), "states": torch.randn(b, n, w, generator=g, dtype=torch.float64),
            "mask": torch.tensor([[0, 1, 1, 0, 0, 0, 0], [0, 0, 1, 1, 1, 0, 0], [0, 1, 0, 0, 0, 0, 1],
                                  [0] * 7], dtype=torch.bool),  # rank 1 has one item without patches
            "has_edge": torch.tensor([True, True, True, False]),
            "chunks": unit(b, 3, d), "counts": torch.tensor([2, 0, 3, 1]),
            "crops": unit(b, 2, d), "valid": torch.tensor([[True, False], [True, True], [False, False], [True, True]]),
            "s": torch.tensor(20.0, dtype=torch.float64)}


_DIFF = ("v", "t", "crop", "sent", "edge", "filt", "states", "chunks", "crops", "s")


def _terms(x: dict[str, torch.Tensor], ctx: DistContext | None) -> dict[str, torch.Tensor]:
    from hnbench.train.terms.structxlip import (
        local_structure_loss,
        rgb_structure_loss,
        structure_loss,
        )

    torch.manual_seed(0)
    head = nn.Linear(6, 5).double()
    chunks = [x["chunks"][i, :int(x["counts"][i])] for i in range(x["chunks"].shape[0])]
    return {
        "goal_global": hn_clip_loss(x["v"], x["t"], x["s"], 0.5, context=ctx),
        "goal_segment": goal_segment_loss(x["crop"], x["sent"], x["s"], context=ctx),
        "goal_patch": goal_patch_loss(x["states"], x["mask"], head, x["crop"], context=ctx),
        "goal_text": goal_text_loss(x["states"], x["mask"], head, x["sent"], context=ctx),
        "sx_global": hn_clip_loss(x["v"], x["t"], x["s"], 0.5, context=ctx),
        "sx_structure": structure_loss(x["edge"], x["filt"], x["has_edge"], x["s"], context=ctx),
        "sx_rgb": rgb_structure_loss(x["v"], x["edge"], x["has_edge"], context=ctx),
        "sx_local": local_structure_loss(chunks, x["crops"], x["valid"], x["s"], context=ctx),
    }


def _grads(x: dict[str, torch.Tensor], loss: torch.Tensor) -> dict[str, torch.Tensor]:
    leaves = [k for k in _DIFF if x[k].requires_grad]
    grads = torch.autograd.grad(loss, [x[k] for k in leaves], allow_unused=True)
    return {k: torch.zeros_like(x[k]) if g is None else g for k, g in zip(leaves, grads, strict=True)}


def _terms_worker(rank: int, world: int, port: int, root: str) -> None:
    import os
    from pathlib import Path

    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
                       "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank)})
    torch.set_num_threads(1)
    from hnbench.distributed import from_env

    ctx = from_env("cpu")
    full = _term_inputs()
    b = full["v"].shape[0] // world
    x = {k: (v if k == "s" else v[rank * b:(rank + 1) * b]).clone() for k, v in full.items()}
    for k in _DIFF:
        x[k].requires_grad_()
    out = {name: (loss.detach(), _grads(x, loss)) for name, loss in _terms(x, ctx).items()}
    torch.save(out, Path(root) / f"rank{rank}.pt")
    ctx.close()


@pytest.mark.slow
def test_goal_and_structxlip_terms_on_two_gloo_ranks_equal_one_process(tmp_path) -> None:
    """Mean over 2 gloo ranks of each term equals the term on the whole batch; each rank's gradient for its
    rows is 2× the whole-batch gradient (all-gather's backward sums the ranks), the scale's is the mean."""
    import torch.multiprocessing as mp

    mp.spawn(_terms_worker, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(2)]
    full = _term_inputs()
    for k in _DIFF:
        full[k].requires_grad_()
    for name, loss in _terms(full, None).items():
        want = _grads(full, loss)
        assert float(loss.detach()) > 0, name  # every term is live on this batch
        assert torch.allclose((ranks[0][name][0] + ranks[1][name][0]) / 2, loss.detach(), atol=1e-12), name
        for k, g in want.items():
            if k == "s":
                got = (ranks[0][name][1][k] + ranks[1][name][1][k]) / 2
            else:
                got = torch.cat([ranks[0][name][1][k], ranks[1][name][1][k]]) / 2
            assert torch.allclose(got, g, atol=1e-10), (name, k)


def test_pooling_terms_on_a_real_micro_open_clip(micro_config) -> None:
    """The terms on a real (tiny) open_clip CLIP: its pre-ln_post patch tokens pooled over a box of its real
    8 px patches, its ln_post + proj as the head; the caption's pre-ln_final states over the sentence's span."""
    from hnbench.models import load_model

    model = load_model("hnb-micro", model_config=str(micro_config)).model.train()
    visual = model.visual
    torch.manual_seed(3)
    pixels = torch.randn(2, 3, 32, 32)
    states = visual.transformer(visual._embeds(pixels))  # (2, 1 + 16, 32), before ln_post
    boxes = [(0.0, 0.0, 16.0, 16.0), (8.0, 8.0, 32.0, 20.0)]
    mask = box_patch_mask(boxes, [(32, 32)] * 2, input_size=32, patch_size=8, num_tokens=states.shape[1])
    assert mask[0].nonzero().flatten().tolist() == [1, 2, 5, 6]  # rows 0–1, cols 0–1 of the 4×4 grid

    def image_head(h: torch.Tensor) -> torch.Tensor:
        return visual.ln_post(h) @ visual.proj
    crop = F.normalize(torch.randn(2, 32), dim=-1)
    loss = goal_patch_loss(states, mask, image_head, crop)
    pooled = torch.stack([states[i, mask[i]].mean(dim=0) for i in range(2)])
    cos = F.cosine_similarity(image_head(pooled), crop, dim=-1)
    assert float(loss.detach()) == pytest.approx(float(((cos - 1) ** 2).mean().detach()), rel=1e-5)
    loss.backward()
    assert visual.proj.grad is not None and float(visual.proj.grad.abs().sum()) > 0

    tok = SimpleTokenizer()
    prefix, sentence = "a grey room. ", "a red ball."
    ids = torch.tensor([[tok.encoder["<start_of_text>"], *tok.encode(prefix + sentence), tok.encoder["<end_of_text>"]]
                        + [0] * 20])
    x = model.token_embedding(ids) + model.positional_embedding[: ids.shape[1]]
    text_states = model.transformer(x, attn_mask=model.attn_mask[: ids.shape[1], : ids.shape[1]])  # before ln_final
    start, end = _span(prefix, sentence, sentence, tok)
    assert ids[0, start:end].tolist() == tok.encode(sentence)

    def text_head(h: torch.Tensor) -> torch.Tensor:
        return model.ln_final(h) @ model.text_projection
    target = text_head(text_states[0, start:end].mean(dim=0, keepdim=True)).detach()
    assert float(goal_text_loss(text_states, span_mask([(start, end)], ids.shape[1]), text_head, target).detach()) < 1e-10
