"""One optimizer step's forward/backward over its micro-batches, in the two accumulation modes.

* ``accum_mode = "loss"`` — the paper's: each micro-batch of B pairs gets its own loss (B − 1
  in-batch negatives), gradients are averaged over the k micro-batches.
* ``accum_mode = "cached"`` — cached features (GradCache): features of all k micro-batches are computed
  without a graph, the loss is taken over the whole effective batch (k·B − 1 negatives), its gradient
  w.r.t. the features is cached, and each micro-batch is re-encoded with a graph and back-propagated
  with that cached gradient. Same gradient as one big batch, at the memory of one micro-batch
  (plus one extra forward pass). RNG state is replayed so dropout masks match.

Under DDP both modes skip the gradient all-reduce on all but the last micro-batch (``no_sync``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from hnbench.distributed import DistContext
from hnbench.train.losses import duplicate_mask
from hnbench.train.token_loss import token_loss

__all__ = ["MicroBatch", "Objective", "run_step"]


@dataclass
class MicroBatch:
    """This rank's pixels and tokens, plus the global batch's (image, caption) ids for the duplicate mask."""

    pixels: Tensor
    tokens: Tensor
    image_ids: list[int]  # global batch, rank order
    caption_texts: list[str]  # global batch, rank order
    g_text: Tensor | None = None  # frozen-encoder text features for Ḡ (local)


@dataclass
class Objective:
    """The training loss: HN-CLIP or InfoNCE (+ λ·token loss), global-batch semantics on any world size.

    ``base_fn`` is the registered loss function, called with this run's ``context`` (world size 1: exactly
    as the minimal trainer did; several ranks: each rank's share of the global-batch loss).
    """

    base_fn: Callable[..., Tensor]
    loss: str
    gamma: float
    label_smoothing: float = 0.0
    mask_duplicates: bool = False
    token_weight: float = 0.0
    context: DistContext = field(default_factory=DistContext)

    @property
    def with_tokens(self) -> bool:
        return self.token_weight > 0

    def mask(self, image_ids: list[int], caption_texts: list[str]) -> Tensor | None:
        if not self.mask_duplicates:
            return None
        m = duplicate_mask(image_ids, caption_texts)
        return m if bool(m.any()) else None

    def __call__(self, out: dict[str, Tensor], *, mask: Tensor | None, g_text: Tensor | None,
                 text_mask: Tensor | None) -> Tensor:
        v, t, s = out["image"], out["text"], out["scale"]
        if mask is not None:
            mask = mask.to(v.device)
        hn = {"gamma": self.gamma, "text_features_for_g": g_text} if self.loss == "hn" else {}
        loss = self.base_fn(v, t, s, mask=mask, label_smoothing=self.label_smoothing, context=self.context, **hn)
        if self.token_weight > 0:
            assert text_mask is not None, "the token-level loss needs the text token mask"
            loss = loss + self.token_weight * token_loss(out["image_tokens"], out["text_tokens"], text_mask, s,
                                                         context=self.context)
        return loss


def _rng_snapshot(device: torch.device) -> tuple[Tensor, Any]:
    return torch.get_rng_state(), torch.cuda.get_rng_state(device) if device.type == "cuda" else None


def _rng_restore(snap: tuple[Tensor, Any], device: torch.device) -> None:
    torch.set_rng_state(snap[0])
    if snap[1] is not None:
        torch.cuda.set_rng_state(snap[1], device)


def _backward(loss: Tensor) -> None:
    loss.backward()  # type: ignore[no-untyped-call]  # torch leaves Tensor.backward unannotated


def _sync(model: torch.nn.Module, sync: bool) -> contextlib.AbstractContextManager[Any]:
    """DDP's ``no_sync()`` (no gradient all-reduce) unless ``sync``; a plain module always syncs."""
    no_sync = getattr(model, "no_sync", None)
    return contextlib.nullcontext() if sync or no_sync is None else no_sync()


def run_step(model: torch.nn.Module, towers: Any, micro: list[MicroBatch], objective: Objective, *,
             mode: str = "loss", autocast: Callable[[], Any] = contextlib.nullcontext,
             backward: Callable[[Tensor], None] = _backward) -> float:
    """Forward + backward for one optimizer step (``model`` may be the DDP wrapper of ``towers``).

    Returns the step's loss: the mean of the micro-batch losses ("loss") or the effective-batch
    loss ("cached"). ``backward`` lets a grad scaler scale the loss.
    """
    if mode == "cached" and len(micro) > 1:
        return _cached_step(model, towers, micro, objective, autocast, backward)
    k = len(micro)
    total = 0.0
    for m, mb in enumerate(micro):
        with _sync(model, m == k - 1):
            with autocast():
                out = model(mb.pixels, mb.tokens, objective.with_tokens)
            loss = objective(out, mask=objective.mask(mb.image_ids, mb.caption_texts), g_text=mb.g_text,
                             text_mask=towers.text_token_mask(mb.tokens) if objective.with_tokens else None)
            backward(loss if k == 1 else loss / k)
        total += float(loss.detach())
    return total / k


def _cached_step(model: torch.nn.Module, towers: Any, micro: list[MicroBatch], objective: Objective,
                 autocast: Callable[[], Any], backward: Callable[[Tensor], None]) -> float:
    device = micro[0].pixels.device
    outs, snaps = [], []
    for mb in micro:  # 1) features without a graph
        snaps.append(_rng_snapshot(device))
        with torch.no_grad(), autocast():
            outs.append(towers(mb.pixels, mb.tokens, objective.with_tokens))
    keys = [k for k in outs[0] if k != "scale"]
    leaves = {k: torch.cat([o[k] for o in outs]).detach().requires_grad_() for k in keys}
    leaves["scale"] = outs[0]["scale"].detach().requires_grad_()
    world = objective.context.world_size
    b = micro[0].pixels.shape[0]
    # gathered order is rank-major over each rank's concatenated micro-batches
    ids = [mb.image_ids[r * b:(r + 1) * b] for r in range(world) for mb in micro]
    caps = [mb.caption_texts[r * b:(r + 1) * b] for r in range(world) for mb in micro]
    g_texts = [mb.g_text for mb in micro if mb.g_text is not None]  # all of them or none
    g_text = torch.cat(g_texts) if g_texts else None
    tokens = torch.cat([mb.tokens for mb in micro])
    loss = objective(leaves, mask=objective.mask(sum(ids, []), sum(caps, [])), g_text=g_text,
                     text_mask=towers.text_token_mask(tokens) if objective.with_tokens else None)
    backward(loss)  # 2) gradient w.r.t. the cached features (and the scale)
    grads = {k: leaves[k].grad for k in leaves}
    scale_grad = grads["scale"]
    assert scale_grad is not None, "every loss depends on the logit scale"
    k_micro = len(micro)
    for m, (mb, snap) in enumerate(zip(micro, snaps)):  # 3) re-encode with a graph, push the cached gradient
        with _sync(model, m == k_micro - 1):
            _rng_restore(snap, device)
            with autocast():
                out = model(mb.pixels, mb.tokens, objective.with_tokens)
            sl = slice(m * b, (m + 1) * b)
            surrogate = out["scale"] * (scale_grad / k_micro)
            for key in keys:
                grad = grads[key]
                if grad is not None:
                    surrogate = surrogate + (out[key] * grad[sl].to(out[key].dtype)).sum()
            _backward(surrogate)
    return float(loss.detach())
