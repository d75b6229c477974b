"""The data-parallel HN-CLIP loss as a module, for your own DDP loop.

``criterion = DistributedHNCLIPLoss(gamma=0.5)``; ``loss = criterion(v_local, t_local, logit_scale.exp())``:
this rank's share of :func:`hnbench.train.losses.hn_clip_loss` over the features gathered with gradient
from every rank (mean over ranks = the global-batch loss; DDP's gradient averaging then yields its
gradient). The distributed state is the one :class:`hnbench.distributed.DistContext`: pass one, or the
default process group already set up is used at each call. World size 1 is exactly ``hn_clip_loss``.
"""

from __future__ import annotations

from hnbench.distributed import DistContext, default_group
from hnbench.train.losses import HNCLIPLoss

__all__ = ["DistContext", "DistributedHNCLIPLoss"]


class DistributedHNCLIPLoss(HNCLIPLoss):
    """:class:`~hnbench.train.losses.HNCLIPLoss` over the default process group unless given a ``context``.

    ``mask`` (or the ids) describe the global batch of W·b pairs, in rank order.
    """

    def __init__(self, gamma: float = 0.5, label_smoothing: float = 0.0, use_mask: bool = True,
                 context: DistContext | None = None) -> None:
        super().__init__(gamma, label_smoothing, use_mask, context)

    def _context(self) -> DistContext:
        return self.context if self.context is not None else default_group()
