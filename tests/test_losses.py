"""HN-CLIP / InfoNCE losses: the facts from shared/spec/hn-clip.md, pinned."""

from __future__ import annotations

import math

import open_clip
import pytest
import torch
import torch.nn.functional as F

from hnbench.train.losses import (
    HNCLIPLoss,
    InfoNCELoss,
    duplicate_mask,
    hn_clip_loss,
    hn_logits,
    info_nce_loss,
)


def _feats(b: int = 8, d: int = 32, seed: int = 0, *, nonneg: bool = False, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    v, t = torch.randn(2, b, d, generator=g, dtype=torch.float64)
    if nonneg:
        v, t = v.abs(), t.abs()
    return F.normalize(v, dim=-1).to(dtype), F.normalize(t, dim=-1).to(dtype)


def _reference(v, t, s, gamma, g_const):
    """The HN-CLIP formula written out, with Ḡ a constant tensor supplied by the caller."""
    z = s * (v @ t.T + gamma * g_const)
    y = torch.arange(v.shape[0])
    return 0.5 * (F.cross_entropy(z, y) + F.cross_entropy(z.T, y))


def _const_gbar(t):
    g = (t @ t.T).detach().clone()
    g.fill_diagonal_(0)
    return g


# --------------------------------------------------------------------------- γ = 0 is InfoNCE


@pytest.mark.parametrize("scale", [14.285, 100.0])
def test_gamma_zero_is_infonce_and_open_clip(scale):
    noise, t = _feats(16, 64, seed=1)
    v = F.normalize(t + 2.0 * noise, dim=-1)  # paired features, so the loss is O(1) and 1e-6 is tight
    s = torch.tensor(scale)
    ref = open_clip.loss.ClipLoss()(v, t, s)
    hn0 = hn_clip_loss(v, t, s, 0.0)
    nce = info_nce_loss(v, t, s)
    assert hn0.dtype == nce.dtype == torch.float32 and hn0.ndim == 0
    assert torch.allclose(hn0, ref, rtol=0, atol=1e-6)
    assert torch.allclose(nce, ref, rtol=0, atol=1e-6)
    assert 1e-3 < ref < 3
    assert torch.equal(nce, info_nce_loss(v, t, scale))  # float scale
    with pytest.raises(TypeError):  # InfoNCE has no margin: a gamma is refused, not silently ignored
        info_nce_loss(v, t, scale, gamma=3.0)
    assert hn_clip_loss(v, t, s, 0.5) > nce  # random features: Ḡ has both signs, but γ > 0 matters


# --------------------------------------------------------------------------- structure of Z and Ḡ


def test_diag_of_z_is_scaled_diag_of_s_and_gbar_has_zero_diagonal():
    v, t = _feats(8, 16, seed=2)
    t.requires_grad_()
    s = 30.0
    z, g_bar = hn_logits(v, t, s, 0.7)
    assert torch.allclose(z.diagonal(), s * (v @ t.T).diagonal(), rtol=0, atol=1e-6)
    assert torch.equal(g_bar.diagonal(), torch.zeros(8))
    off = ~torch.eye(8, dtype=torch.bool)
    assert torch.allclose(g_bar[off], (t @ t.T)[off].detach(), atol=1e-7)
    assert not g_bar.requires_grad and z.requires_grad
    assert torch.allclose(z, s * (v @ t.T + 0.7 * g_bar), atol=1e-5)
    # A supplied Ḡ is detached and gets its diagonal zeroed (on a copy).
    g_in = torch.ones(8, 8, requires_grad=True)
    z2, g2 = hn_logits(v, t, s, 0.7, g_bar=g_in)
    assert torch.equal(g2.diagonal(), torch.zeros(8)) and torch.equal(g_in.detach(), torch.ones(8, 8))
    assert torch.allclose(z2.diagonal(), z.diagonal())


# --------------------------------------------------------------------------- stop-gradient


def test_gradient_equals_constant_gbar_formula():
    v, t = _feats(12, 24, seed=3)
    s, gamma = 20.0, 0.5
    v1, t1 = v.clone().requires_grad_(), t.clone().requires_grad_()
    got = torch.autograd.grad(hn_clip_loss(v1, t1, s, gamma), (v1, t1))
    v2, t2 = v.clone().requires_grad_(), t.clone().requires_grad_()
    want = torch.autograd.grad(_reference(v2, t2, s, gamma, _const_gbar(t)), (v2, t2))
    for a, b in zip(got, want):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-7)
    # The comparison has power: letting gradient flow through G changes the t-gradient.
    v3, t3 = v.clone().requires_grad_(), t.clone().requires_grad_()
    g_live = (t3 @ t3.T) * (1 - torch.eye(12))
    through = torch.autograd.grad(_reference(v3, t3, s, gamma, g_live), (v3, t3))
    assert torch.allclose(through[0], got[0], rtol=1e-5, atol=1e-7)
    assert not torch.allclose(through[1], got[1], rtol=1e-3, atol=1e-5)


def test_gradcheck_on_constant_gbar_function_and_not_on_whole_loss():
    v, t = _feats(6, 5, seed=4, dtype=torch.float64)
    v.requires_grad_()
    t.requires_grad_()
    t0 = t.detach().clone()
    s = torch.tensor(7.0, dtype=torch.float64)
    assert hn_clip_loss(v, t, s, 0.6).dtype == torch.float64  # fp64 stays fp64 (fp32 is the floor)
    assert torch.autograd.gradcheck(lambda a, b: _reference(a, b, s, 0.6, _const_gbar(t0)), (v, t))
    assert torch.autograd.gradcheck(lambda a, b: hn_clip_loss(a, b, s, 0.6, text_features_for_g=t0), (v, t))
    assert torch.autograd.gradcheck(lambda a, b: hn_logits(a, b, s, 0.6, g_bar=_const_gbar(t0))[0], (v, t))
    # On the whole loss gradcheck fails by design: a finite-difference step in t moves G.
    assert not torch.autograd.gradcheck(
        lambda a, b: hn_clip_loss(a, b, s, 0.6), (v, t), raise_exception=False
    )


# --------------------------------------------------------------------------- monotonicity, symmetry, B = 1


def test_loss_non_decreasing_in_gamma_when_gbar_non_negative():
    v, t = _feats(16, 32, seed=5, nonneg=True)
    assert (t @ t.T).min() >= 0
    gammas = torch.linspace(0, 2, 21).tolist()
    losses = torch.stack([hn_clip_loss(v, t, 10.0, g) for g in gammas])
    assert (losses.diff() > 0).all(), losses


@pytest.mark.parametrize("gamma", [0.0, 0.5, 1.0])
def test_joint_permutation_invariance(gamma):
    v, t = _feats(10, 16, seed=6)
    perm = torch.randperm(10, generator=torch.Generator().manual_seed(0))
    mask = duplicate_mask(image_ids=[0, 1, 2, 0, 3, 4, 5, 2, 6, 7])
    base = hn_clip_loss(v, t, 25.0, gamma, mask=mask)
    permuted = hn_clip_loss(v[perm], t[perm], 25.0, gamma, mask=mask[perm][:, perm])
    assert torch.allclose(base, permuted, rtol=1e-6, atol=1e-7)
    assert torch.allclose(
        hn_clip_loss(v, t, 25.0, gamma), hn_clip_loss(v[perm], t[perm], 25.0, gamma), rtol=1e-6
    )


def test_batch_of_one_gives_exactly_zero():
    v, t = _feats(1, 8, seed=7)
    v.requires_grad_()
    for loss in (
        hn_clip_loss(v, t, 100.0, 0.5),
        hn_clip_loss(v, t, 100.0, 0.5, label_smoothing=0.1),
        info_nce_loss(v, t, torch.tensor(50.0)),
    ):
        assert loss.item() == 0.0 and loss.dtype == torch.float32
        assert torch.equal(torch.autograd.grad(loss, v)[0], torch.zeros_like(v))


# --------------------------------------------------------------------------- fp32 saturation


def _shared_direction_batch(b: int = 16, shared: float = 0.9):
    """t_i = a·u + b·w_i (all caption pairs have cosine a² = shared), v_i = w_i: gap = √(1 − a²)."""
    eye = torch.eye(b + 1)
    t = math.sqrt(shared) * eye[0] + math.sqrt(1 - shared) * eye[1:]
    return eye[1:].clone(), t


def _row_probs(z):
    return z.softmax(dim=1).diagonal(), z.T.softmax(dim=1).diagonal()


def test_saturation_row_level_at_s100_gap_0p32():
    """s·gap = 31.6 ≫ 16.6 + ln 15: every InfoNCE row's positive has probability exactly 1.0 in fp32.

    The positive's pull P_ii − 1 is then exactly 0 and the loss is exactly 0, yet the feature gradient
    is NOT exactly zero: each negative still pushes with P_ij ≈ e^{-31.6} ≈ 2e-14. HN-CLIP, with caption
    cosines 0.9, moves every negative up by γ·s·0.9 = 45 > 31.6 and gets a real gradient.
    """
    v, t = _shared_direction_batch(16, 0.9)
    v.requires_grad_()
    t.requires_grad_()
    s = 100.0
    gap = (v @ t.T)[0, 0] - (v @ t.T)[0, 1]
    assert gap >= 0.3
    z0, _ = hn_logits(v, t, s, 0.0)
    for p in _row_probs(z0):
        assert (p == 1.0).all()
    nce = info_nce_loss(v, t, s)
    assert nce.item() == 0.0
    z0 = z0.detach().requires_grad_()
    y = torch.arange(16)
    g_z = torch.autograd.grad(0.5 * (F.cross_entropy(z0, y) + F.cross_entropy(z0.T, y)), z0)[0]
    assert (g_z.diagonal() == 0).all() and (g_z > 0).sum() == 16 * 15  # pull silent, pushes alive
    g_nce = torch.autograd.grad(nce, (v, t))
    assert 0 < max(g.abs().max() for g in g_nce) < 1e-10

    z5, _ = hn_logits(v, t, s, 0.5)
    for p in _row_probs(z5):
        assert (p < 1e-3).all()
    hn = hn_clip_loss(v, t, s, 0.5)
    g_hn = torch.autograd.grad(hn, (v, t))
    assert hn > 10 and min(g.norm() for g in g_hn) > 1.0


def test_saturation_threshold_tracks_s_times_gap():
    """Rows saturate once Σ_j e^{-s·gap} drops below fp32 resolution (≈ s·gap > 16.6 + ln(B−1) = 19.3)."""
    v, t = _shared_direction_batch(16, 0.9)
    gap = math.sqrt(0.1)
    for sgap, saturated in [(12.0, False), (15.0, False), (25.0, True), (30.0, True)]:
        z, _ = hn_logits(v, t, sgap / gap, 0.0)
        assert all(bool((p == 1.0).all()) == saturated for p in _row_probs(z)), sgap
        if not saturated and sgap >= 12:
            # Half precision would already be silent here; the loss upcasts fp16 inputs, so it is not.
            assert (
                all((p == 1.0).all() for p in _row_probs(z.half())) and (z.bfloat16().softmax(1) == 1).any()
            )
            assert info_nce_loss(v.half(), t.half(), sgap / gap) > 0


def _simplex(n: int) -> torch.Tensor:
    x = torch.eye(n, dtype=torch.float64) - 1.0 / n
    return x / x.norm(dim=1, keepdim=True)


def test_exact_zero_infonce_gradient_needs_sgap_above_100():
    """Whole-batch exact zero needs every P_ij / 2B below half the smallest fp32 denormal (2^-150).

    That is s·gap ≳ 145·ln 2 ≈ 100.5 for B = 16, i.e. a cosine gap > 1 at s = 100, which is only
    possible when every caption pair has cosine ≤ ~0.49 (|S_ii − S_ij| ≤ ‖t_i − t_j‖). Here: 8 pairs of
    captions with cosine 0.2 (others at −a²/7), gap 1.026. InfoNCE's gradient is exactly 0; HN-CLIP
    (γ = 1) lifts each pair partner by s·γ·0.2 = 20 and its gradient is non-zero (if tiny).
    """
    k, g_pair, c = 8, 0.2, 0.7
    a, b = math.sqrt((1 + g_pair) / 2), math.sqrt((1 - g_pair) / 2)
    u = torch.zeros(k, 2 * k, dtype=torch.float64)
    u[:, :k] = _simplex(k)
    w = torch.zeros(k, 2 * k, dtype=torch.float64)
    w[:, k:] = torch.eye(k)
    t = torch.stack([a * u[i] + sg * b * w[i] for i in range(k) for sg in (1, -1)])
    v = F.normalize(torch.stack([sg * w[i] + c * u[i] for i in range(k) for sg in (1, -1)]), dim=1)
    v, t = v.float().requires_grad_(), t.float().requires_grad_()
    s = torch.tensor(100.0)
    sim = (v @ t.T).detach()
    off = ~torch.eye(2 * k, dtype=torch.bool)
    gaps = torch.cat([(sim.diagonal()[:, None] - sim)[off], (sim.diagonal()[None, :] - sim)[off]])
    assert gaps.min() > 1.02 and torch.allclose((t @ t.T)[0, 1], torch.tensor(0.2))

    g_nce = torch.autograd.grad(info_nce_loss(v, t, s), (v, t))
    assert all((g == 0).all() for g in g_nce)
    g_hn = torch.autograd.grad(hn_clip_loss(v, t, s, 1.0), (v, t))
    assert all((g != 0).any() for g in g_hn)


# --------------------------------------------------------------------------- precision


@pytest.mark.parametrize("low", [torch.bfloat16, torch.float16])
def test_fp32_under_autocast_and_low_precision_inputs(low):
    v, t = _feats(16, 64, seed=8)
    v_lo, t_lo = v.to(low), t.to(low)
    want = hn_clip_loss(v_lo.float(), t_lo.float(), 100.0, 0.5)
    assert torch.equal(hn_clip_loss(v_lo, t_lo, 100.0, 0.5), want)
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        assert (v @ t.T).dtype == torch.bfloat16  # autocast is really on
        got = hn_clip_loss(v_lo, t_lo, torch.tensor(100.0, dtype=low), 0.5)
        got32 = hn_clip_loss(v, t, 100.0, 0.5)
        z, g_bar = hn_logits(v_lo, t_lo, 100.0, 0.5)
    assert got.dtype == got32.dtype == z.dtype == g_bar.dtype == torch.float32
    assert torch.equal(got, want)
    assert torch.equal(got32, hn_clip_loss(v, t, 100.0, 0.5))


def test_logit_scale_tensor_receives_gradient():
    v, t = _feats(8, 16, seed=9)
    log_s = torch.tensor(math.log(20.0), requires_grad=True)
    loss = hn_clip_loss(v, t, log_s.exp(), 0.5)
    assert torch.allclose(loss, hn_clip_loss(v, t, 20.0, 0.5))
    loss.backward()
    assert log_s.grad is not None and log_s.grad != 0


# --------------------------------------------------------------------------- duplicates and masks


def test_exact_duplicate_pair_floor_and_mask_removes_it():
    v, t = _feats(2, 16, seed=10)
    v, t = v[:1].repeat(2, 1), t[:1].repeat(2, 1)  # the same pair twice
    s, gamma = 10.0, 0.5
    floor = math.log1p(math.exp(s * gamma))
    assert hn_clip_loss(v, t, s, gamma).item() == pytest.approx(floor, rel=1e-5)
    assert info_nce_loss(v, t, s).item() == pytest.approx(math.log(2), rel=1e-6)
    mask = duplicate_mask(image_ids=["a", "a"])
    assert hn_clip_loss(v, t, s, gamma, mask=mask).item() == 0.0


def test_mask_on_duplicate_captions_lowers_loss_with_finite_gradients():
    v, t = _feats(8, 32, seed=11)
    t = t.clone()
    t[5] = t[2]  # two different images, identical captions
    texts = [f"caption {i}" for i in range(8)]
    texts[5] = texts[2]
    mask = duplicate_mask(caption_ids_or_texts=texts)
    assert mask.sum() == 2 and mask[2, 5] and mask[5, 2]
    v.requires_grad_()
    t.requires_grad_()
    s, gamma = 50.0, 0.5
    plain = hn_clip_loss(v, t, s, gamma)
    masked = hn_clip_loss(v, t, s, gamma, mask=mask)
    assert torch.isfinite(masked) and masked < plain
    # Rows 2 and 5 (image→text) each carry at least log(1 + e^{sγ}) without the mask.
    assert plain >= 2 * math.log1p(math.exp(s * gamma)) / (2 * 8)
    z, _ = hn_logits(v, t, s, gamma, mask=mask)
    assert z[2, 5] == -math.inf and z[5, 2] == -math.inf and torch.isfinite(z.diagonal()).all()
    for g in torch.autograd.grad(masked, (v, t)):
        assert torch.isfinite(g).all()


def test_mask_validation():
    v, t = _feats(4, 8, seed=12)
    with pytest.raises(ValueError, match="diagonal"):
        hn_clip_loss(v, t, 10.0, mask=torch.eye(4, dtype=torch.bool))
    with pytest.raises(ValueError, match="bool"):
        hn_clip_loss(v, t, 10.0, mask=torch.zeros(4, 4))
    with pytest.raises(ValueError):
        hn_clip_loss(v, t, 10.0, mask=torch.zeros(3, 3, dtype=torch.bool))


def test_duplicate_mask():
    m = duplicate_mask(image_ids=torch.tensor([3, 1, 3, 2]))
    assert m.dtype == torch.bool and m.shape == (4, 4)
    assert m.nonzero().tolist() == [[0, 2], [2, 0]]
    tokens = torch.tensor([[1, 2], [1, 3], [1, 2], [4, 4]])  # token-id rows compare as captions
    both = duplicate_mask(image_ids=[0, 1, 2, 1], caption_ids_or_texts=tokens)
    assert both.nonzero().tolist() == [[0, 2], [1, 3], [2, 0], [3, 1]]
    assert not both.diagonal().any() and torch.equal(both, both.T)
    assert not duplicate_mask(caption_ids_or_texts=["a", "b", "c"]).any()
    with pytest.raises(ValueError):
        duplicate_mask()
    with pytest.raises(ValueError):
        duplicate_mask([0, 1], ["a", "b", "c"])


# --------------------------------------------------------------------------- label smoothing


def test_label_smoothing_matches_cross_entropy_on_z():
    v, t = _feats(8, 16, seed=13)
    s, gamma, eps = 30.0, 0.5, 0.1
    z, _ = hn_logits(v, t, s, gamma)
    y = torch.arange(8)
    want = 0.5 * (F.cross_entropy(z, y, label_smoothing=eps) + F.cross_entropy(z.T, y, label_smoothing=eps))
    got = hn_clip_loss(v, t, s, gamma, label_smoothing=eps)
    assert torch.allclose(got, want, rtol=1e-6) and not torch.allclose(got, hn_clip_loss(v, t, s, gamma))
    # An all-False mask takes the masked code path and must agree.
    none = torch.zeros(8, 8, dtype=torch.bool)
    assert torch.allclose(hn_clip_loss(v, t, s, gamma, label_smoothing=eps, mask=none), want, rtol=1e-6)


def test_label_smoothing_with_mask_spreads_over_unmasked_classes():
    v, t = _feats(6, 16, seed=14)
    mask = duplicate_mask(image_ids=[0, 1, 0, 2, 3, 1])
    s, gamma, eps = 20.0, 0.5, 0.2
    got = hn_clip_loss(v, t, s, gamma, label_smoothing=eps, mask=mask)
    z, _ = hn_logits(v, t, s, gamma, mask=mask)

    def ce(logits, m):
        rows = []
        for i in range(6):
            keep = ~m[i]
            logp = logits[i][keep].log_softmax(0)
            pos = int(keep[:i].sum())
            rows.append((1 - eps) * -logp[pos] + eps * -logp.mean())
        return torch.stack(rows).mean()

    assert torch.isfinite(got)
    assert torch.allclose(got, 0.5 * (ce(z, mask) + ce(z.T, mask.T)), rtol=1e-6)


# --------------------------------------------------------------------------- modules


def test_modules_equal_functions():
    v, t = _feats(8, 16, seed=15)
    s = torch.tensor(40.0)
    ids = [0, 1, 2, 0, 3, 4, 5, 6]
    mask = duplicate_mask(image_ids=ids)
    hn = HNCLIPLoss(gamma=0.7, label_smoothing=0.05)
    assert list(hn.parameters()) == [] and "gamma=0.7" in repr(hn)
    assert torch.equal(hn(v, t, s), hn_clip_loss(v, t, s, 0.7, label_smoothing=0.05))
    masked = hn_clip_loss(v, t, s, 0.7, label_smoothing=0.05, mask=mask)
    assert torch.equal(hn(v, t, s, mask=mask), masked)
    assert torch.equal(hn(v, t, s, image_ids=ids), masked)
    assert torch.equal(HNCLIPLoss(0.7, 0.05, use_mask=False)(v, t, s, mask=mask), hn(v, t, s))
    nce = InfoNCELoss(gamma=0.9)  # gamma ignored
    assert nce.gamma == 0.0
    assert torch.equal(nce(v, t, s), info_nce_loss(v, t, s))
    assert torch.equal(nce(v, t, s, mask=mask), info_nce_loss(v, t, s, mask=mask))
    t0 = _feats(8, 16, seed=16)[1]
    assert torch.equal(
        hn(v, t, s, text_features_for_g=t0),
        hn_clip_loss(v, t, s, 0.7, label_smoothing=0.05, text_features_for_g=t0),
    )


# --------------------------------------------------------------------------- frozen Ḡ source


def test_text_features_for_g():
    v, t = _feats(8, 16, seed=17)
    v.requires_grad_()
    t.requires_grad_()
    s, gamma = 30.0, 0.5
    default = hn_clip_loss(v, t, s, gamma)
    same = hn_clip_loss(v, t, s, gamma, text_features_for_g=t)
    assert torch.equal(default, same)
    g_default = torch.autograd.grad(default, (v, t))
    g_same = torch.autograd.grad(same, (v, t))
    assert all(torch.equal(a, b) for a, b in zip(g_default, g_same))

    frozen = _feats(8, 16, seed=18)[1].requires_grad_()
    loss = hn_clip_loss(v, t, s, gamma, text_features_for_g=frozen)
    assert not torch.allclose(loss, default)
    loss.backward()
    assert frozen.grad is None and t.grad is not None
    v2, t2 = v.detach().clone().requires_grad_(), t.detach().clone().requires_grad_()
    want = torch.autograd.grad(_reference(v2, t2, s, gamma, _const_gbar(frozen.detach())), (v2, t2))
    assert torch.allclose(t.grad, want[1], rtol=1e-5, atol=1e-7)
    with pytest.raises(ValueError):
        hn_clip_loss(v, t, s, gamma, text_features_for_g=frozen[:4])


# --------------------------------------------------------------------------- argument checks


def test_argument_validation():
    v, t = _feats(4, 8, seed=19)
    for bad in (-0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="gamma"):
            hn_clip_loss(v, t, 10.0, bad)
        with pytest.raises(ValueError, match="gamma"):
            HNCLIPLoss(gamma=bad)
    with pytest.raises(ValueError, match="label_smoothing"):
        hn_clip_loss(v, t, 10.0, label_smoothing=1.5)
    with pytest.raises(ValueError):
        hn_clip_loss(v, t[:3], 10.0)
    with pytest.raises(ValueError):
        hn_clip_loss(v[:0], t[:0], 10.0)
    with pytest.raises(ValueError):
        hn_clip_loss(v, t, torch.tensor([10.0, 20.0]))
