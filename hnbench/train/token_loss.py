"""FILIP-style token-level late interaction, the paper's auxiliary term L_tok (weight λ).

For image i with L2-normalised patch features x_i ∈ R^{P×D} and text j with L2-normalised token
features y_j ∈ R^{T×D} (valid tokens m_j ⊆ 1..T, padding excluded)::

    a_ij = mean_p  max_{k∈m_j} ⟨x_ip, y_jk⟩        each patch to its most similar token
    c_ij = mean_{k∈m_j} max_p ⟨x_ip, y_jk⟩         each token to its most similar patch
    L_tok = ½ [CE(s·A, y) + CE(s·Cᵀ, y)],  y_i = i

Computed in fp32 with autocast off. Memory is O(B²·P·T); ``chunk`` bounds it by processing columns
in groups. Data parallel, with a :class:`~hnbench.distributed.DistContext`, it is this rank's share, as
:func:`~hnbench.train.losses.hn_clip_loss` (local rows, gathered columns).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from hnbench.distributed import DistContext
from hnbench.train.losses import as_scale, compute_dtype, no_autocast

__all__ = ["filip_scores", "token_loss"]


def filip_scores(image_tokens: Tensor, text_tokens: Tensor, text_mask: Tensor, *,
                 chunk: int = 64) -> tuple[Tensor, Tensor]:
    """Return (A, C), both (B_img, B_txt): A = patch→token late interaction, C = token→patch.

    ``image_tokens`` (Bi, P, D) and ``text_tokens`` (Bt, T, D) are L2-normalised; ``text_mask``
    (Bt, T) bool marks real tokens (at least one per caption).
    """
    if image_tokens.ndim != 3 or text_tokens.ndim != 3 or image_tokens.shape[-1] != text_tokens.shape[-1]:
        raise ValueError(f"need (B, P, D) image tokens and (B, T, D) text tokens, got "
                         f"{tuple(image_tokens.shape)} and {tuple(text_tokens.shape)}")
    if text_mask.shape != text_tokens.shape[:2] or text_mask.dtype != torch.bool:
        raise ValueError(f"text_mask must be a bool tensor of shape {tuple(text_tokens.shape[:2])}")
    if not bool(text_mask.any(dim=1).all()):
        raise ValueError("every caption needs at least one valid token in text_mask")
    a_cols, c_cols = [], []
    n_valid = text_mask.sum(dim=1).to(image_tokens.dtype)  # (Bt,)
    for j0 in range(0, text_tokens.shape[0], chunk):
        y, m = text_tokens[j0:j0 + chunk], text_mask[j0:j0 + chunk]
        sim = torch.einsum("ipd,jtd->ijpt", image_tokens, y)  # (Bi, bj, P, T)
        a_cols.append(sim.masked_fill(~m[None, :, None, :], float("-inf")).amax(dim=3).mean(dim=2))
        best_patch = sim.amax(dim=2).masked_fill(~m[None], 0.0)  # (Bi, bj, T)
        c_cols.append(best_patch.sum(dim=2) / n_valid[j0:j0 + chunk][None])
    return torch.cat(a_cols, dim=1), torch.cat(c_cols, dim=1)


def _prepare(image_tokens: Tensor, text_tokens: Tensor) -> tuple[Tensor, Tensor]:
    dtype = compute_dtype(image_tokens, text_tokens)
    return F.normalize(image_tokens.to(dtype), dim=-1), F.normalize(text_tokens.to(dtype), dim=-1)


def token_loss(image_tokens: Tensor, text_tokens: Tensor, text_mask: Tensor,
               logit_scale: Tensor | float, *, context: DistContext | None = None) -> Tensor:
    """L_tok = ½[CE(s·A, y) + CE(s·Cᵀ, y)] on one batch (features are normalised here).

    With a ``context`` of several ranks: this rank's share, local images against all texts and local
    texts against all images (gathered with gradient); its mean over ranks is L_tok on the global batch.
    """
    device, b = image_tokens.device, image_tokens.shape[0]
    img_all, txt_all, mask_all, offset = image_tokens, text_tokens, text_mask, 0
    if context is not None and context.enabled:  # gather the global batch; this rank's rows start at offset
        img_all, txt_all = context.gather(image_tokens), context.gather(text_tokens)
        mask_all = context.gather(text_mask.to(torch.uint8), with_grad=False).bool()
        offset = context.rank * b
    with no_autocast(device):
        x, y = _prepare(image_tokens, text_tokens)
        if img_all is image_tokens:
            s = as_scale(logit_scale, x.dtype, device)
            a, c = filip_scores(x, y, text_mask)
        else:
            xa, ya = _prepare(img_all, txt_all)
            s = as_scale(logit_scale, x.dtype, device)
            a, _ = filip_scores(x, ya, mask_all)  # local images vs all texts
            _, c = filip_scores(xa, y, text_mask)  # all images vs local texts
        target = torch.arange(b, device=device) + offset
        return 0.5 * (F.cross_entropy(s * a, target) + F.cross_entropy(s * c.T, target))
