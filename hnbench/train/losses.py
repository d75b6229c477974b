"""Contrastive objectives for CLIP fine-tuning: symmetric InfoNCE and HN-CLIP.

For a batch of B pairs with L2-normalised image features v and text features t (both B×D), an
exponentiated logit scale s and a margin weight γ ≥ 0::

    S = v tᵀ                              image–text similarities
    G = t tᵀ                              caption–caption similarities
    Ḡ = stopgrad(G), diagonal set to 0    (optionally from other, e.g. frozen-encoder, text features)
    Z = s · (S + γ Ḡ)
    L = ½ [CE(Z, y) + CE(Zᵀ, y)],  y_i = i

γ = 0 is exactly symmetric InfoNCE (open_clip's ``ClipLoss``); negative j of query i gets the handicap
γ·s·G_ij. S, G, Z and the CE run in fp32 (fp64 for fp64 features) with autocast off: in fp16/bf16 the
softmax saturates (positive probability exactly 1) at far smaller gaps. A bool ``mask`` drops
same-image / same-caption pairs (−inf), which would otherwise floor the loss at log(1 + e^{sγ}).

Data parallel (as open_clip's ``ClipLoss`` with ``local_loss`` and ``gather_with_grad``), the same function
takes a :class:`~hnbench.distributed.DistContext`: with W ranks of b pairs each (global batch B = W·b,
rank r holding rows r·b … r·b+b−1) rank r gathers the features with gradient and computes its share::

    Z_r   = s · (v_r T_allᵀ + γ Ḡ_r)      Ḡ_r = stopgrad(t_r T_allᵀ), entry (i, r·b+i) set to 0
    Z'_r  = s · (t_r V_allᵀ + γ Ḡ_r)      (rows of Zᵀ: Ḡ is symmetric)
    L_r   = ½ [CE(Z_r, y_r) + CE(Z'_r, y_r)],   y_r[i] = r·b + i

so mean_r L_r is exactly the loss on the concatenated batch; the gather's backward sums every rank's
gradient for this rank's slice, and DDP's averaging then gives the gradient of the global loss. World
size 1 is the special case r = 0, W = 1 (Z'_0 = Zᵀ).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hnbench.distributed import DistContext

__all__ = ["HNCLIPLoss", "InfoNCELoss", "duplicate_mask", "hn_clip_loss", "hn_logits", "info_nce_loss"]


def _check_features(image_features: Tensor, text_features: Tensor) -> None:
    if image_features.ndim != 2 or image_features.shape != text_features.shape:
        raise ValueError(
            "image_features and text_features must both be (B, D) with equal shapes, got "
            f"{tuple(image_features.shape)} and {tuple(text_features.shape)}"
        )
    if image_features.shape[0] == 0:
        raise ValueError("empty batch: B must be at least 1")


def _check_gamma(gamma: float) -> float:
    g = float(gamma)
    if not math.isfinite(g) or g < 0:
        raise ValueError(f"gamma must be a finite number >= 0, got {gamma!r}")
    return g


def _check_smoothing(label_smoothing: float) -> float:
    e = float(label_smoothing)
    if not 0.0 <= e <= 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing!r}")
    return e


# The precision policy of every loss here and in token_loss: fp32 (fp64 for fp64 inputs), autocast off.
def compute_dtype(*tensors: Tensor) -> torch.dtype:
    """fp32 for half/bf16/fp32 inputs; fp64 only if an input already is fp64 (e.g. gradcheck)."""
    return torch.float64 if any(x.dtype == torch.float64 for x in tensors) else torch.float32


def no_autocast(device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """Autocast switched off on ``device`` (a no-op where autocast does not exist)."""
    if torch.amp.is_autocast_available(device.type):
        return torch.autocast(device_type=device.type, enabled=False)
    return contextlib.nullcontext()


def as_scale(logit_scale: Tensor | float, dtype: torch.dtype, device: torch.device) -> Tensor:
    """The logit scale s as a 0-d tensor of ``dtype`` on ``device`` (gradients still flow into a tensor)."""
    if isinstance(logit_scale, Tensor):
        if logit_scale.numel() != 1:
            raise ValueError(f"logit_scale must be a scalar, got shape {tuple(logit_scale.shape)}")
        return logit_scale.reshape(()).to(device=device, dtype=dtype)
    return torch.tensor(float(logit_scale), dtype=dtype, device=device)


def _check_mask(mask: Tensor, b: int, device: torch.device) -> Tensor:
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool or tuple(mask.shape) != (b, b):
        got = f"{mask.dtype} {tuple(mask.shape)}" if isinstance(mask, Tensor) else type(mask).__name__
        raise ValueError(f"mask must be a ({b}, {b}) bool tensor, got {got}")
    mask = mask.to(device)
    if bool(mask.diagonal().any()):
        raise ValueError("mask must not cover the diagonal: the positive pair (i, i) cannot be masked")
    return mask


def _g_bar(text: Tensor, dtype: torch.dtype, text_all: Tensor | None = None, offset: int = 0) -> Tensor:
    """Ḡ = (t tᵀ) detached, diagonal zeroed; with ``text_all`` the rows t T_allᵀ of this rank's texts against
    all texts, entries (i, offset + i) zeroed."""
    with torch.no_grad():
        x = text.detach().to(dtype)
        g = x @ (x if text_all is None else text_all.detach().to(dtype)).T
        rows = torch.arange(x.shape[0], device=g.device)
        g[rows, rows + offset] = 0
    return g


def _logits(
    v: Tensor, t: Tensor, s: Tensor, gamma: float, g_bar: Tensor | None, mask: Tensor | None
) -> Tensor:
    sim = v @ t.T
    z = s * sim if g_bar is None or gamma == 0 else s * (sim + gamma * g_bar)
    return z if mask is None else z.masked_fill(mask, float("-inf"))


def _cross_entropy(z: Tensor, label_smoothing: float, mask: Tensor | None, targets: Tensor | None = None) -> Tensor:
    """Row-wise CE with targets y (default y_i = i); smoothing mass spread over the unmasked classes only."""
    y = torch.arange(z.shape[0], device=z.device) if targets is None else targets
    if mask is None or label_smoothing == 0:
        return F.cross_entropy(z, y, label_smoothing=label_smoothing)
    logp = z.log_softmax(dim=1)
    smooth = -logp.masked_fill(mask, 0.0).sum(dim=1) / (~mask).sum(dim=1)
    pos = -logp.gather(1, y[:, None]).squeeze(1)
    return ((1 - label_smoothing) * pos + label_smoothing * smooth).mean()


def hn_logits(
    image_features: Tensor,
    text_features: Tensor,
    logit_scale: Tensor | float,
    gamma: float,
    *,
    g_bar: Tensor | None = None,
    mask: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Return ``(Z, Ḡ)`` with Z = s·(S + γḠ), S = v tᵀ, for diagnostics.

    Ḡ = stopgrad(t tᵀ) with zero diagonal, or the given ``g_bar`` (detached, diagonal zeroed on a
    copy). Masked entries of Z are −inf. Both are fp32 (fp64 for fp64 features).
    """
    _check_features(image_features, text_features)
    gamma = _check_gamma(gamma)
    b, device = image_features.shape[0], image_features.device
    dtype = compute_dtype(image_features, text_features)
    mask = None if mask is None else _check_mask(mask, b, device)
    with no_autocast(device):
        if g_bar is None:
            gb = _g_bar(text_features, dtype)
        else:
            if tuple(g_bar.shape) != (b, b):
                raise ValueError(f"g_bar must be ({b}, {b}), got {tuple(g_bar.shape)}")
            gb = g_bar.detach().to(device=device, dtype=dtype).clone()
            gb.fill_diagonal_(0)
        v, t = image_features.to(dtype), text_features.to(dtype)
        z = _logits(v, t, as_scale(logit_scale, dtype, device), gamma, gb, mask)
    return z, gb


def hn_clip_loss(
    image_features: Tensor,
    text_features: Tensor,
    logit_scale: Tensor | float,
    gamma: float = 0.5,
    *,
    mask: Tensor | None = None,
    label_smoothing: float = 0.0,
    text_features_for_g: Tensor | None = None,
    context: DistContext | None = None,
) -> Tensor:
    """HN-CLIP loss L = ½[CE(Z, y) + CE(Zᵀ, y)], Z = s·(S + γḠ), y_i = i.

    Args:
        image_features, text_features: L2-normalised (B, D) features (any float dtype).
        logit_scale: the exponentiated scale s (tensor, gradients flow into it, or float).
        gamma: margin weight γ ≥ 0; γ = 0 is symmetric InfoNCE.
        mask: (B, B) bool, True for off-diagonal pairs to exclude (−inf in Z, so in both CE
            directions); see :func:`duplicate_mask`. The diagonal may not be masked.
        label_smoothing: as in ``F.cross_entropy``; with a mask it is spread over unmasked classes.
        text_features_for_g: (B, D') normalised features Ḡ is built from instead of
            ``text_features`` (e.g. a frozen initial text encoder); always detached.
        context: data parallel over ``context.world_size`` > 1 ranks: the features (and
            ``text_features_for_g``) are this rank's b pairs, gathered here with gradient; ``mask`` is the
            global (W·b, W·b) mask; the result is this rank's share L_r, whose mean over ranks is the
            loss on the global batch (module docstring). None or world size 1: one process.

    Returns a scalar, fp32 (fp64 only for fp64 features); exactly 0 for B = 1.
    """
    _check_features(image_features, text_features)
    gamma = _check_gamma(gamma)
    label_smoothing = _check_smoothing(label_smoothing)
    b, device = image_features.shape[0], image_features.device
    g_src = text_features if text_features_for_g is None else text_features_for_g
    if g_src.ndim != 2 or g_src.shape[0] != b:
        raise ValueError(f"text_features_for_g must be ({b}, D'), got {tuple(g_src.shape)}")
    g_src = g_src.to(device)
    v_all, t_all, g_all, offset = image_features, text_features, None, 0
    if context is not None and context.enabled:  # gather the global batch; this rank's rows start at offset
        v_all, t_all = context.gather(image_features), context.gather(text_features)
        if v_all.shape[0] != context.world_size * b:
            raise ValueError(f"every rank must pass the same batch size: gathered {v_all.shape[0]} rows, "
                             f"expected {context.world_size} x {b}")
        if gamma > 0:
            g_all = t_all if text_features_for_g is None else context.gather(g_src, with_grad=False)
        offset = context.rank * b
    single = v_all is image_features
    dtype = compute_dtype(image_features, text_features)
    mask_i2t = mask_t2i = None
    if mask is not None:
        mask = _check_mask(mask, v_all.shape[0], device)
        mask_i2t, mask_t2i = mask[offset:offset + b], mask.T[offset:offset + b]
    with no_autocast(device):
        s = as_scale(logit_scale, dtype, device)
        g_bar = _g_bar(g_src, dtype, g_all, offset) if gamma > 0 else None
        v = image_features.to(dtype)
        z_i2t = _logits(v, t_all.to(dtype), s, gamma, g_bar, mask_i2t)
        targets = torch.arange(b, device=device) + offset
        loss_i2t = _cross_entropy(z_i2t, label_smoothing, mask_i2t, targets)
        # Ḡ is symmetric: the text→image logits are Zᵀ in one process, this rank's rows of Zᵀ otherwise. (Zᵀ
        # is taken after the first CE, as it always was: the order of the autograd graph decides in which
        # order the two gradients for Z are summed, and with it the last bit of the logit scale's gradient.)
        z_t2i = z_i2t.T if single else _logits(text_features.to(dtype), v_all.to(dtype), s, gamma, g_bar, mask_t2i)
        return 0.5 * (loss_i2t + _cross_entropy(z_t2i, label_smoothing, mask_t2i, targets))


def info_nce_loss(
    image_features: Tensor,
    text_features: Tensor,
    logit_scale: Tensor | float,
    *,
    mask: Tensor | None = None,
    label_smoothing: float = 0.0,
    context: DistContext | None = None,
) -> Tensor:
    """Symmetric InfoNCE ½[CE(s·v tᵀ, y) + CE(s·t vᵀ, y)] in fp32: :func:`hn_clip_loss` with γ = 0."""
    return hn_clip_loss(image_features, text_features, logit_scale, 0.0, mask=mask, label_smoothing=label_smoothing,
                        context=context)


def _codes(ids: Iterable[Any] | Tensor) -> list[int]:
    items = ids.tolist() if hasattr(ids, "tolist") else list(ids)
    index: dict[Any, int] = {}
    return [index.setdefault(tuple(x) if isinstance(x, list) else x, len(index)) for x in items]


def duplicate_mask(
    image_ids: Iterable[Any] | Tensor | None = None,
    caption_ids_or_texts: Iterable[Any] | Tensor | None = None,
) -> Tensor:
    """(B, B) bool mask, True at (i, j), j ≠ i, where pair j shares i's image id or caption.

    Ids are any hashables (a 1-D tensor, or a 2-D token-id tensor: one row per caption); captions
    are compared exactly. The mask is symmetric with a False diagonal, ready for ``mask=``.
    """
    groups = [_codes(x) for x in (image_ids, caption_ids_or_texts) if x is not None]
    if not groups:
        raise ValueError("duplicate_mask needs image_ids and/or caption_ids_or_texts")
    if len(groups) == 2 and len(groups[0]) != len(groups[1]):
        raise ValueError(f"image_ids has {len(groups[0])} entries but captions have {len(groups[1])}")
    b = len(groups[0])
    mask = torch.zeros(b, b, dtype=torch.bool)
    for codes in groups:
        c = torch.tensor(codes, dtype=torch.long)
        mask |= c[:, None] == c[None, :]
    return mask & ~torch.eye(b, dtype=torch.bool)


class _PairLoss(nn.Module):
    """Shared module logic: stores gamma, label_smoothing, use_mask and the distributed context; no parameters.

    ``forward(v, t, s, *, mask=None, image_ids=None, caption_ids_or_texts=None,
    text_features_for_g=None)``: ids are turned into a :func:`duplicate_mask` (OR-ed with ``mask``);
    with ``use_mask=False`` every mask is ignored. With a ``context`` of several ranks, see :func:`hn_clip_loss`
    (``mask`` and ids then describe the global batch).
    """

    def __init__(self, gamma: float, label_smoothing: float = 0.0, use_mask: bool = True,
                 context: DistContext | None = None) -> None:
        super().__init__()
        self.gamma = _check_gamma(gamma)
        self.label_smoothing = _check_smoothing(label_smoothing)
        self.use_mask = bool(use_mask)
        self.context = context

    def extra_repr(self) -> str:
        return f"gamma={self.gamma}, label_smoothing={self.label_smoothing}, use_mask={self.use_mask}"

    def _context(self) -> DistContext | None:
        return self.context

    def forward(
        self,
        image_features: Tensor,
        text_features: Tensor,
        logit_scale: Tensor | float,
        *,
        mask: Tensor | None = None,
        image_ids: Any = None,
        caption_ids_or_texts: Any = None,
        text_features_for_g: Tensor | None = None,
    ) -> Tensor:
        if not self.use_mask:
            mask = None
        elif image_ids is not None or caption_ids_or_texts is not None:
            dup = duplicate_mask(image_ids, caption_ids_or_texts)
            mask = dup if mask is None else mask | dup.to(mask.device)
        kw: dict[str, Any] = {
            "mask": mask,
            "label_smoothing": self.label_smoothing,
            "text_features_for_g": text_features_for_g,
            "context": self._context(),
        }
        return hn_clip_loss(image_features, text_features, logit_scale, self.gamma, **kw)


class HNCLIPLoss(_PairLoss):
    """Module form of :func:`hn_clip_loss`."""

    def __init__(self, gamma: float = 0.5, label_smoothing: float = 0.0, use_mask: bool = True,
                 context: DistContext | None = None) -> None:
        super().__init__(gamma, label_smoothing, use_mask, context)


class InfoNCELoss(_PairLoss):
    """Module form of :func:`info_nce_loss`: γ is fixed at 0 (a ``gamma`` argument is ignored)."""

    def __init__(self, gamma: float = 0.0, label_smoothing: float = 0.0, use_mask: bool = True,
                 context: DistContext | None = None) -> None:
        super().__init__(0.0, label_smoothing, use_mask, context)
