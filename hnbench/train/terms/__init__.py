"""Framework objectives' terms as pure tensor functions (issue 22; ``shared/spec/frameworks.md`` §2, §3, §4).

Each term is a function of tensors and its objective's frozen options dataclass
(:mod:`hnbench.train.objective_options`: fields made with :func:`hnbench.settings.option`, so flags and recipe
keys are generated from them) returning a differentiable scalar tensor; nothing here holds module state. The objective contract
(:mod:`hnbench.train.objectives`) names, weights and schedules them; each framework's global term (the one
L_HN replaces) is :func:`hnbench.train.objectives.global_term`.

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

__all__ = ["gather_all"]


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

