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
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

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


def _compute_dtype(*tensors: Tensor) -> torch.dtype:
    """fp32 for half/bf16/fp32 inputs; fp64 only if an input already is fp64 (e.g. gradcheck)."""
    return torch.float64 if any(x.dtype == torch.float64 for x in tensors) else torch.float32


def _no_autocast(device: torch.device) -> contextlib.AbstractContextManager[Any]:
    if torch.amp.is_autocast_available(device.type):
        return torch.autocast(device_type=device.type, enabled=False)
    return contextlib.nullcontext()


def _scale(logit_scale: Tensor | float, dtype: torch.dtype, device: torch.device) -> Tensor:
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


def _g_bar(text: Tensor, dtype: torch.dtype) -> Tensor:
    """Ḡ = (t tᵀ) detached, diagonal zeroed."""
    with torch.no_grad():
        x = text.detach().to(dtype)
        g = x @ x.T
        g.fill_diagonal_(0)
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
    dtype = _compute_dtype(image_features, text_features)
    mask = None if mask is None else _check_mask(mask, b, device)
    with _no_autocast(device):
        if g_bar is None:
            gb = _g_bar(text_features, dtype)
        else:
            if tuple(g_bar.shape) != (b, b):
                raise ValueError(f"g_bar must be ({b}, {b}), got {tuple(g_bar.shape)}")
            gb = g_bar.detach().to(device=device, dtype=dtype).clone()
            gb.fill_diagonal_(0)
        v, t = image_features.to(dtype), text_features.to(dtype)
        z = _logits(v, t, _scale(logit_scale, dtype, device), gamma, gb, mask)
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

    Returns a scalar, fp32 (fp64 only for fp64 features); exactly 0 for B = 1.
    """
    _check_features(image_features, text_features)
    gamma = _check_gamma(gamma)
    label_smoothing = _check_smoothing(label_smoothing)
    b, device = image_features.shape[0], image_features.device
    g_src = text_features if text_features_for_g is None else text_features_for_g
    if g_src.ndim != 2 or g_src.shape[0] != b:
        raise ValueError(f"text_features_for_g must be ({b}, D'), got {tuple(g_src.shape)}")
    dtype = _compute_dtype(image_features, text_features)
    mask = None if mask is None else _check_mask(mask, b, device)
    with _no_autocast(device):
        g_bar = _g_bar(g_src.to(device), dtype) if gamma > 0 else None
        v, t = image_features.to(dtype), text_features.to(dtype)
        z = _logits(v, t, _scale(logit_scale, dtype, device), gamma, g_bar, mask)
        mask_t = None if mask is None else mask.T
        return 0.5 * (_cross_entropy(z, label_smoothing, mask) + _cross_entropy(z.T, label_smoothing, mask_t))


def info_nce_loss(
    image_features: Tensor,
    text_features: Tensor,
    logit_scale: Tensor | float,
    gamma: float = 0.5,
    *,
    mask: Tensor | None = None,
    label_smoothing: float = 0.0,
    text_features_for_g: Tensor | None = None,
) -> Tensor:
    """Symmetric InfoNCE ½[CE(s·v tᵀ, y) + CE(s·t vᵀ, y)] in fp32.

    ``gamma`` and ``text_features_for_g`` are accepted and ignored, so this is a drop-in for
    :func:`hn_clip_loss`; ``mask`` and ``label_smoothing`` behave as there.
    """
    del gamma, text_features_for_g
    return hn_clip_loss(
        image_features, text_features, logit_scale, 0.0, mask=mask, label_smoothing=label_smoothing
    )


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
    """Shared module logic: stores gamma, label_smoothing, use_mask; no parameters.

    ``forward(v, t, s, *, mask=None, image_ids=None, caption_ids_or_texts=None,
    text_features_for_g=None)``: ids are turned into a :func:`duplicate_mask` (OR-ed with ``mask``);
    with ``use_mask=False`` every mask is ignored.
    """

    def __init__(self, gamma: float, label_smoothing: float = 0.0, use_mask: bool = True) -> None:
        super().__init__()
        self.gamma = _check_gamma(gamma)
        self.label_smoothing = _check_smoothing(label_smoothing)
        self.use_mask = bool(use_mask)

    def extra_repr(self) -> str:
        return f"gamma={self.gamma}, label_smoothing={self.label_smoothing}, use_mask={self.use_mask}"

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
        kw = {
            "mask": mask,
            "label_smoothing": self.label_smoothing,
            "text_features_for_g": text_features_for_g,
        }
        return hn_clip_loss(image_features, text_features, logit_scale, self.gamma, **kw)


class HNCLIPLoss(_PairLoss):
    """Module form of :func:`hn_clip_loss`."""

    def __init__(self, gamma: float = 0.5, label_smoothing: float = 0.0, use_mask: bool = True) -> None:
        super().__init__(gamma, label_smoothing, use_mask)


class InfoNCELoss(_PairLoss):
    """Module form of :func:`info_nce_loss`: γ is fixed at 0 (a ``gamma`` argument is ignored)."""

    def __init__(self, gamma: float = 0.0, label_smoothing: float = 0.0, use_mask: bool = True) -> None:
        super().__init__(0.0, label_smoothing, use_mask)
