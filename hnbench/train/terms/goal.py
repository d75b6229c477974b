"""GOAL's objective as term functions (``frameworks.md`` §2.1, §2.7 item 3, §4).

Follows PerceptualAI-Lab/GOAL ``goal_loss_finetuning.py`` @2db3d4a (same code in TakumiHirose11/GOAL
``goal.py`` @fd3ea90). Per image one segment pair: the image I with its long caption T, a crop I_s with its
sentence T_s::

    L = w_g·L_org + w_seg·L_seg + w_patch·L_patch + w_text·L_text      (weights 1 / 0.5 / 1 / 1)

- L_org: symmetric InfoNCE of (image, long caption) — the term L_HN replaces (``--loss hn``):
  :func:`hnbench.train.objectives.global_term` (spec §2.1 item 1, ``goal_loss_finetuning.py``);
- L_seg: the same on (crop, sentence) pairs; optionally L_HN too, Ḡ from the sentence embeddings;
- L_patch: mean_i (cos(pool_i, crop_i) − 1)², pool_i = the image's last-layer patch tokens inside the box,
  averaged *before* the vision tower's post-LayerNorm, then post-LN + projection;
- L_text: mean_i (cos(pool_i, sentence_i) − 1)², pool_i = the long caption's last-layer states over the
  sentence's token span, averaged *before* the final LayerNorm, then final LN + projection.

Both pooling terms are local (not gathered) with no stop-gradient on either side, as the authors'.

UNVERIFIED (spec §2, §6): which term(s) the HN-CLIP paper swapped (L_org only, or L_seg too: a switch here);
the plug-in γ and weights; whether the paper's numbers used the bbox-scale bug; the authors' ε = 1e-8 added
before normalising is not reproduced (``F.normalize`` is used).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from hnbench.distributed import DistContext
from hnbench.registry import LOSSES
from hnbench.train.losses import compute_dtype, hn_clip_loss
from hnbench.train.objective_options import GoalOptions
from hnbench.train.terms import gather_all

__all__ = ["GOAL_TERMS", "GoalOptions", "goal_patch_loss", "goal_segment_loss",
           "goal_text_loss", "pool_tokens", "span_mask"]

DEFAULTS = GoalOptions()  # the default options of the functions below

GOAL_TERMS = ("global", "segment", "patch", "text")

Head = Callable[[Tensor], Tensor]  # a tower's LayerNorm + projection applied to a pooled (B, W) state


def goal_segment_loss(crop: Tensor, sentence: Tensor, logit_scale: Tensor | float, *, loss: str = "infonce",
                      gamma: float = 0.5, options: GoalOptions = DEFAULTS,
                      context: DistContext | None = None) -> Tensor:
    """L_seg (spec §2.1 item 2): InfoNCE on (crop, sentence) embeddings, sentences of other images the
    negatives; L_HN (Ḡ from the sentences) only with a ``loss`` that uses Ḡ (``hn``) and ``options.segment_hn``."""
    swap = LOSSES.entry(loss).uses_g and options.segment_hn
    return hn_clip_loss(crop, sentence, logit_scale, gamma if swap else 0.0, context=context)


def pool_tokens(states: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``states`` (B, N, W) over the True entries of ``mask`` (B, N); rows with none give 0."""
    if states.ndim != 3 or mask.shape != states.shape[:2] or mask.dtype != torch.bool:
        raise ValueError(f"need (B, N, W) states and a (B, N) bool mask, got {tuple(states.shape)} and "
                         f"{mask.dtype} {tuple(mask.shape)}")
    m = mask.to(device=states.device, dtype=states.dtype)
    return (states * m[:, :, None]).sum(dim=1) / m.sum(dim=1).clamp(min=1)[:, None]


def _pooled_cosine_loss(states: Tensor, mask: Tensor, head: Head, target: Tensor,
                        context: DistContext | None) -> Tensor:
    """mean over rows with a non-empty mask of (cos(normalize(head(pool)), target) − 1)²; data parallel, the
    rows of every rank (gathered with gradient), the same global mean on each rank."""
    if target.ndim != 2 or target.shape[0] != states.shape[0]:
        raise ValueError(f"target must be (B, D) with B = {states.shape[0]}, got {tuple(target.shape)}")
    mask = mask.to(states.device)
    pooled = head(pool_tokens(states, mask))
    dtype = compute_dtype(pooled, target)
    cos = (F.normalize(pooled.to(dtype), dim=-1) * F.normalize(target.to(dtype), dim=-1)).sum(dim=-1)
    keep = mask.any(dim=1)
    cos, keep = gather_all(context, cos, keep, grad=(True, False))
    if not bool(keep.any()):
        return cos.sum() * 0
    return ((cos[keep] - 1) ** 2).mean()


def goal_patch_loss(image_states: Tensor, patch_mask: Tensor, image_head: Head, crop: Tensor, *,
                    context: DistContext | None = None) -> Tensor:
    """L_patch (spec §2.1 item 3; ``goal_loss_finetuning.py``): ``image_states`` (B, 1+P, W) are the whole
    image's last-layer tokens *before* post-LayerNorm (CLS at 0), ``patch_mask`` (B, 1+P) the box's patches
    (:func:`hnbench.train.terms.geometry.box_patch_mask`), ``image_head`` post-LN + projection, ``crop``
    (B, D) the crop's embedding. Items whose box touches no patch are left out of the mean. Data parallel
    (``context``): the mean over the global batch on every rank (so DDP's average is its gradient)."""
    return _pooled_cosine_loss(image_states, patch_mask, image_head, crop, context)


def goal_text_loss(text_states: Tensor, span: Tensor, text_head: Head, sentence: Tensor, *,
                   context: DistContext | None = None) -> Tensor:
    """L_text (spec §2.1 item 4; ``goal_loss_finetuning.py``): ``text_states`` (B, T, W) are the long
    caption's last-layer states *before* the final LayerNorm, ``span`` (B, T) the sentence's tokens
    (:func:`span_mask`), ``text_head`` final LN + projection, ``sentence`` (B, D) the sentence's embedding;
    data parallel as :func:`goal_patch_loss`."""
    return _pooled_cosine_loss(text_states, span, text_head, sentence, context)


def span_mask(spans: Sequence[tuple[int, int]], num_tokens: int) -> Tensor:
    """(B, num_tokens) bool mask, True on [start, end) per item; a span reaching past ``num_tokens`` (a
    truncated caption) is cut at it."""
    mask = torch.zeros(len(spans), num_tokens, dtype=torch.bool)
    for i, (start, end) in enumerate(spans):
        if not 0 <= start < end:
            raise ValueError(f"span {(start, end)} is not a non-empty [start, end) span")
        mask[i, start:min(end, num_tokens)] = True
    return mask

