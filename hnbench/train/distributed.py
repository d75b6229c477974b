"""Data-parallel HN-CLIP: features gathered with gradient, each rank's rows against the global batch.

With W ranks of b pairs each (global batch B = W·b, rank r holding rows r·b … r·b+b−1), rank r computes
the *local loss*::

    Z_r   = s · (v_r T_allᵀ + γ Ḡ_r)      Ḡ_r = stopgrad(t_r T_allᵀ), entry (i, r·b+i) set to 0
    Z'_r  = s · (t_r V_allᵀ + γ Ḡ_r)      (rows of Zᵀ: Ḡ is symmetric)
    L_r   = ½ [CE(Z_r, y_r) + CE(Z'_r, y_r)],   y_r[i] = r·b + i

so mean_r L_r is exactly the single-process loss on the concatenated batch. The gather keeps gradients
(like ``torch.distributed.nn.functional.all_gather``: its backward sums every rank's gradient for this
rank's slice), and DDP then averages parameter gradients over ranks, which together give the gradient of the
global loss. World size 1 calls :func:`~hnbench.train.losses.hn_clip_loss` itself.

Usable in any data-parallel loop (see :class:`DistributedHNCLIPLoss`); the trainer uses it under
``torchrun``.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from hnbench.train.losses import (
    _check_features,
    _check_gamma,
    _check_mask,
    _check_smoothing,
    _compute_dtype,
    _cross_entropy,
    _no_autocast,
    _scale,
    hn_clip_loss,
)

logger = logging.getLogger(__name__)

__all__ = ["DistContext", "DistributedHNCLIPLoss", "gather_features", "hn_clip_local_loss",
           "hn_clip_loss_distributed", "setup_distributed", "world_info"]


@dataclass
class DistContext:
    """Where this process sits: rank, world size, and the device it trains on."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: str = "cpu"
    initialized_here: bool = False

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.world_size > 1:
            torch.distributed.barrier()

    def close(self) -> None:
        if self.initialized_here and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


def world_info() -> tuple[int, int]:
    """(rank, world size) of the default process group; (0, 1) when none is initialised."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def setup_distributed(device: str = "cpu") -> DistContext:
    """Join the ``torchrun`` process group (env ``WORLD_SIZE`` > 1): NCCL on CUDA, gloo on CPU.

    On CUDA each process takes ``cuda:LOCAL_RANK``. Without ``torchrun`` (or with WORLD_SIZE = 1)
    this is a no-op returning rank 0 of 1 on ``device``.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1 and not torch.distributed.is_initialized():
        return DistContext(device=device)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = device.startswith("cuda")
    if cuda:
        device = f"cuda:{local_rank}"
        torch.cuda.set_device(device)
    here = False
    if not torch.distributed.is_initialized():
        torch.distributed.init_process_group(backend="nccl" if cuda else "gloo")
        here = True
    rank, world = world_info()
    logger.info("distributed: rank %d of %d on %s", rank, world, device)
    return DistContext(rank=rank, world_size=world, local_rank=local_rank, device=device, initialized_here=here)


def gather_features(x: Tensor, *, with_grad: bool = True) -> Tensor:
    """Concatenate ``x`` (b, …) from all ranks in rank order → (W·b, …); identity for world size 1.

    ``with_grad`` keeps the autograd link (the backward sums all ranks' gradients for the local slice).
    Every rank must pass the same shape.
    """
    _, world = world_info()
    if world == 1:
        return x
    if with_grad:
        return _GatherWithGrad.apply(x)
    parts = [torch.empty_like(x) for _ in range(world)]
    torch.distributed.all_gather(parts, x.detach().contiguous())
    return torch.cat(parts, dim=0)


class _GatherWithGrad(torch.autograd.Function):
    """all_gather whose backward hands each rank the *sum* over ranks of the gradient for its slice.

    Every rank's local loss depends on every rank's features, so the gradient of Σ_r L_r w.r.t. this
    rank's features is the sum of all ranks' gradients for its slice: a reduce-scatter (NCCL), or an
    all-reduce followed by taking the slice (gloo has no reduce-scatter).
    """

    @staticmethod
    def forward(ctx: Any, x: Tensor) -> Tensor:
        rank, world = world_info()
        ctx.rank, ctx.world, ctx.b = rank, world, x.shape[0]
        parts = [torch.empty_like(x) for _ in range(world)]
        torch.distributed.all_gather(parts, x.contiguous())
        return torch.cat(parts, dim=0)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        grad = grad.contiguous()
        if torch.distributed.get_backend() == "nccl":
            out = torch.empty_like(grad[:ctx.b])
            torch.distributed.reduce_scatter_tensor(out, grad)
            return out
        grad = grad.clone()
        torch.distributed.all_reduce(grad)
        return grad[ctx.rank * ctx.b:(ctx.rank + 1) * ctx.b]


def hn_clip_local_loss(
    image_local: Tensor,
    text_local: Tensor,
    image_all: Tensor,
    text_all: Tensor,
    logit_scale: Tensor | float,
    gamma: float = 0.5,
    *,
    offset: int,
    mask: Tensor | None = None,
    label_smoothing: float = 0.0,
    g_local: Tensor | None = None,
    g_all: Tensor | None = None,
) -> Tensor:
    """One rank's share L_r of the HN-CLIP loss (see the module docstring): local rows, global columns.

    ``image_all``/``text_all`` are the gathered (B, D) features, the local rows being
    ``[offset, offset + b)``. ``mask`` is the *global* (B, B) bool mask (True = excluded pair);
    ``g_local``/``g_all`` optionally replace the text features Ḡ is built from (e.g. a frozen copy).
    Computed in fp32 (fp64 for fp64 inputs) with autocast off.
    """
    _check_features(image_local, text_local)
    _check_features(image_all, text_all)
    gamma = _check_gamma(gamma)
    label_smoothing = _check_smoothing(label_smoothing)
    b, big_b = image_local.shape[0], image_all.shape[0]
    if not 0 <= offset <= big_b - b:
        raise ValueError(f"offset {offset} does not place {b} local rows inside a batch of {big_b}")
    device = image_local.device
    dtype = _compute_dtype(image_local, text_local, image_all, text_all)
    rows = torch.arange(b, device=device)
    cols = rows + offset
    mask_i2t = mask_t2i = None
    if mask is not None:
        mask = _check_mask(mask, big_b, device)
        mask_i2t, mask_t2i = mask[offset:offset + b], mask.T[offset:offset + b]
    with _no_autocast(device):
        s = _scale(logit_scale, dtype, device)
        v, t = image_local.to(dtype), text_local.to(dtype)
        va, ta = image_all.to(dtype), text_all.to(dtype)
        sim_i2t, sim_t2i = v @ ta.T, t @ va.T
        if gamma > 0:
            with torch.no_grad():
                gl = (text_local if g_local is None else g_local).detach().to(dtype)
                ga = (text_all if g_all is None else g_all).detach().to(dtype)
                g_bar = gl @ ga.T
                g_bar[rows, cols] = 0
            sim_i2t, sim_t2i = sim_i2t + gamma * g_bar, sim_t2i + gamma * g_bar
        z_i2t, z_t2i = s * sim_i2t, s * sim_t2i
        if mask_i2t is not None:
            z_i2t, z_t2i = z_i2t.masked_fill(mask_i2t, float("-inf")), z_t2i.masked_fill(mask_t2i, float("-inf"))
        return 0.5 * (_cross_entropy(z_i2t, label_smoothing, mask_i2t, cols)
                      + _cross_entropy(z_t2i, label_smoothing, mask_t2i, cols))


def hn_clip_loss_distributed(
    image_features: Tensor,
    text_features: Tensor,
    logit_scale: Tensor | float,
    gamma: float = 0.5,
    *,
    mask: Tensor | None = None,
    label_smoothing: float = 0.0,
    text_features_for_g: Tensor | None = None,
) -> Tensor:
    """HN-CLIP over the global batch from this rank's local features: gather, then the local loss.

    ``mask`` is the global (B, B) mask (every rank knows the global batch ids). With world size 1 this
    is :func:`hn_clip_loss` exactly.
    """
    rank, world = world_info()
    if world == 1:
        return hn_clip_loss(image_features, text_features, logit_scale, gamma, mask=mask,
                            label_smoothing=label_smoothing, text_features_for_g=text_features_for_g)
    v_all, t_all = gather_features(image_features), gather_features(text_features)
    g_all = None if text_features_for_g is None else gather_features(text_features_for_g, with_grad=False)
    return hn_clip_local_loss(image_features, text_features, v_all, t_all, logit_scale, gamma,
                              offset=rank * image_features.shape[0], mask=mask, label_smoothing=label_smoothing,
                              g_local=text_features_for_g, g_all=g_all)


class DistributedHNCLIPLoss(nn.Module):
    """Drop-in loss module for data-parallel loops: ``loss = crit(v_local, t_local, logit_scale.exp())``.

    Gathers with gradient and returns this rank's local loss (mean over ranks = global loss). Wrap the
    model in DDP as usual; DDP's gradient averaging then yields the global-batch gradient.
    """

    def __init__(self, gamma: float = 0.5, label_smoothing: float = 0.0) -> None:
        super().__init__()
        self.gamma = _check_gamma(gamma)
        self.label_smoothing = _check_smoothing(label_smoothing)

    def extra_repr(self) -> str:
        return f"gamma={self.gamma}, label_smoothing={self.label_smoothing}"

    def forward(self, image_features: Tensor, text_features: Tensor, logit_scale: Tensor | float, *,
                mask: Tensor | None = None, text_features_for_g: Tensor | None = None) -> Tensor:
        return hn_clip_loss_distributed(image_features, text_features, logit_scale, self.gamma, mask=mask,
                                        label_smoothing=self.label_smoothing,
                                        text_features_for_g=text_features_for_g)
