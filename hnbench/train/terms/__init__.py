"""Framework objectives' terms as pure tensor functions (issue 22; ``shared/spec/frameworks.md`` §2, §3, §4).

Each term is a function of tensors and a small frozen options dataclass (fields made with
:func:`hnbench.settings.option`, so flags and recipe keys can be generated from them) returning a
differentiable scalar tensor; nothing here holds module state. The objective contract (``hnbench.train``)
registers and weights them.

- :mod:`~hnbench.train.terms.geometry`: a segment box in image pixels → the ViT patch tokens it touches.
- :mod:`~hnbench.train.terms.goal`: GOAL's global, segment, patch-pooling and text-pooling terms.
- :mod:`~hnbench.train.terms.structxlip`: StructXLIP's edge-map, RGB–edge and chunk terms, its per-epoch
  weight schedule and logit-scale clamp.
- :mod:`~hnbench.train.terms.lexicon`: StructXLIP's lexicon filter (colours, materials, textures, insect terms).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from hnbench.distributed import DistContext
from hnbench.train.losses import hn_clip_loss

__all__ = ["LOSS_CHOICES", "gather_all", "global_loss", "weighted_total"]

LOSS_CHOICES = ("infonce", "hn")


def global_loss(image: Tensor, text: Tensor, logit_scale: Tensor | float, *, loss: str = "infonce",
                gamma: float = 0.5, context: DistContext | None = None) -> Tensor:
    """A framework's global term (``frameworks.md`` §4): symmetric InfoNCE of s·v tᵀ on the normalised global
    image and text embeddings, no label smoothing, no mask (GOAL's and StructXLIP's L_org, GOAL's L_seg);
    ``loss="hn"``: L_HN with Ḡ from the detached texts (:func:`hnbench.train.losses.hn_clip_loss`; γ = 0 is
    that InfoNCE exactly). Data parallel: hnbench's local-loss form, this rank's share."""
    if loss not in LOSS_CHOICES:
        raise ValueError(f"loss must be infonce or hn, got {loss!r}")
    return hn_clip_loss(image, text, logit_scale, gamma if loss == "hn" else 0.0, context=context)


def gather_all(context: DistContext | None, *xs: Tensor, grad: Sequence[bool]) -> list[Tensor]:
    """``xs`` (this rank's rows) gathered from every rank in rank order, with gradient where ``grad`` (bool
    tensors travel as uint8); in one process, ``xs`` as they are.

    Terms on a subset of the batch (items with a box, an edge map, a valid crop) are computed whole on every
    rank from these: all-gather's backward sums the ranks' identical gradients for this rank's rows, and
    DDP's average over ranks brings that back to the gradient of the global loss."""
    if context is None or not context.enabled:
        return list(xs)
    out = []
    for x, g in zip(xs, grad, strict=True):
        if x.dtype == torch.bool:
            out.append(context.gather(x.to(torch.uint8), with_grad=False).bool())
        else:
            out.append(context.gather(x, with_grad=g))
    return out


def weighted_total(terms: dict[str, Tensor], weights: dict[str, float]) -> Tensor:
    """Σ_k weights[k]·terms[k], in the order of ``weights``; the two must name the same terms."""
    if set(terms) != set(weights):
        raise ValueError(f"the terms are {', '.join(weights)}, got {', '.join(sorted(terms))}")
    first = next(iter(weights))
    total = weights[first] * terms[first]
    for name in list(weights)[1:]:
        total = total + weights[name] * terms[name]
    return total
