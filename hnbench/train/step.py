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
from hnbench.errors import ConfigError
from hnbench.train.losses import duplicate_mask
from hnbench.train.objectives.base import ExtraModule, Term, TermInputs, global_term
from hnbench.train.objectives.clip import token_term

__all__ = ["MicroBatch", "Objective", "run_step"]


@dataclass
class MicroBatch:
    """This rank's pixels and tokens, plus the global batch's (image, caption) ids for the duplicate mask."""

    pixels: Tensor
    tokens: Tensor
    image_ids: list[int]  # global batch, rank order
    caption_texts: list[str]  # global batch, rank order
    g_text: Tensor | None = None  # frozen-encoder text features for Ḡ (local)
    extra: dict[str, Tensor] = field(default_factory=dict)  # side inputs through the towers (crops, sentences)
    side: dict[str, Any] = field(default_factory=dict)  # the terms' other side inputs (boxes, spans; local rows)


@dataclass
class Objective:
    """The training objective: named, weighted terms (:mod:`hnbench.train.objectives`), global-batch
    semantics on any world size.

    Built from ``terms``; without them, the ``clip`` objective of the legacy fields: ``base_fn`` (the
    registered loss of ``loss``) with ``gamma`` and ``label_smoothing``, plus ``token_weight``·L_tok. Each call
    leaves the terms' values in ``last_terms``; ``progress`` (epoch + fraction) drives the weight schedules.
    """

    base_fn: Callable[..., Tensor] | None = None
    loss: str = "hn"
    gamma: float = 0.5
    label_smoothing: float = 0.0
    mask_duplicates: bool = False
    token_weight: float = 0.0
    context: DistContext = field(default_factory=DistContext)
    terms: list[Term] = field(default_factory=list)
    progress: float = 0.0
    last_terms: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.terms:
            assert self.base_fn is not None, "an Objective needs terms or a base loss function"
            self.terms = [global_term(self.base_fn, self.loss, self.gamma, self.label_smoothing)]
            if self.token_weight > 0:
                self.terms.append(token_term(self.token_weight))

    @property
    def needs(self) -> frozenset[str]:
        return frozenset().union(*(t.needs for t in self.terms))

    @property
    def with_tokens(self) -> bool:
        return bool(self.needs & {"token_features", "token_features_cls"})

    @property
    def token_mode(self) -> bool | str:
        """What the towers compute beside the pooled features: False, True (patches, tokens), "cls" or "states"."""
        kinds = self.needs & {"token_features", "token_features_cls", "token_states"}
        if "token_states" in kinds:
            if len(kinds) > 1:
                raise ConfigError("an objective cannot mix token states with token features")
            return "states"
        if "token_features_cls" in self.needs:
            if "token_features" in self.needs:
                raise ConfigError("an objective cannot mix token features with and without CLS")
            return "cls"
        return "token_features" in self.needs

    @property
    def modules(self) -> list[ExtraModule]:
        """The terms' extra trainable modules (each once)."""
        seen: list[ExtraModule] = []
        for t in self.terms:
            if t.module is not None and all(t.module is not m for m in seen):
                seen.append(t.module)
        return seen

    def mask(self, image_ids: list[int], caption_texts: list[str]) -> Tensor | None:
        if not self.mask_duplicates:
            return None
        m = duplicate_mask(image_ids, caption_texts)
        return m if bool(m.any()) else None

    def __call__(self, out: dict[str, Tensor], *, mask: Tensor | None, g_text: Tensor | None,
                 text_mask: Tensor | None, tokens: Tensor | None = None,
                 image_ids: list[int] | None = None, side: dict[str, Any] | None = None,
                 heads: Any = None) -> Tensor:
        x = TermInputs(out, tokens if tokens is not None else out["text"], image_ids or [], mask=mask,
                       g_text=g_text, text_mask=text_mask, context=self.context, side=side or {}, heads=heads)
        total: Tensor | None = None
        values: dict[str, float] = {}
        for term in self.terms:
            value = term.fn(x)
            values[term.name] = float(value.detach())
            w = term.weight_at(self.progress)
            part = value if w == 1.0 else w * value  # x·1 is exact: weight 1 is the term itself, bit for bit
            total = part if total is None else total + part
        assert total is not None, "an objective has at least one term"
        self.last_terms = values
        return total


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
        if any(mb.extra or mb.side for mb in micro):
            raise ConfigError("--accum-mode cached does not carry side inputs (segments, edge maps): use "
                              "--accum-mode loss")
        return _cached_step(model, towers, micro, objective, autocast, backward)
    k = len(micro)
    total = 0.0
    terms: dict[str, float] = {}
    heads = towers.heads() if objective.token_mode == "states" else None
    for m, mb in enumerate(micro):
        with _sync(model, m == k - 1):
            with autocast():
                out = model(mb.pixels, mb.tokens, objective.token_mode, mb.extra or None)
            loss = objective(out, mask=objective.mask(mb.image_ids, mb.caption_texts), g_text=mb.g_text,
                             text_mask=towers.text_token_mask(mb.tokens) if objective.with_tokens else None,
                             tokens=mb.tokens, image_ids=mb.image_ids, side=mb.side, heads=heads)
            backward(loss if k == 1 else loss / k)
        total += float(loss.detach())
        for name, value in objective.last_terms.items():
            terms[name] = terms.get(name, 0.0) + value
    objective.last_terms = {name: value / k for name, value in terms.items()}  # the step's: micro-batch means
    return total / k


def _cached_step(model: torch.nn.Module, towers: Any, micro: list[MicroBatch], objective: Objective,
                 autocast: Callable[[], Any], backward: Callable[[Tensor], None]) -> float:
    device = micro[0].pixels.device
    outs, snaps = [], []
    for mb in micro:  # 1) features without a graph
        snaps.append(_rng_snapshot(device))
        with torch.no_grad(), autocast():
            outs.append(towers(mb.pixels, mb.tokens, objective.token_mode))
    keys = [k for k in outs[0] if k != "scale"]
    leaves = {k: torch.cat([o[k] for o in outs]).detach().requires_grad_() for k in keys}
    leaves["scale"] = outs[0]["scale"].detach().requires_grad_()
    world = objective.context.world_size
    sizes = [mb.pixels.shape[0] for mb in micro]  # this rank's pairs of each (an epoch's last may be smaller)
    # gathered order is rank-major over each rank's concatenated micro-batches
    ids = [mb.image_ids[r * b:(r + 1) * b] for r in range(world) for mb, b in zip(micro, sizes)]
    caps = [mb.caption_texts[r * b:(r + 1) * b] for r in range(world) for mb, b in zip(micro, sizes)]
    g_texts = [mb.g_text for mb in micro if mb.g_text is not None]  # all of them or none
    g_text = torch.cat(g_texts) if g_texts else None
    tokens = torch.cat([mb.tokens for mb in micro])
    loss = objective(leaves, mask=objective.mask(sum(ids, []), sum(caps, [])), g_text=g_text,
                     text_mask=towers.text_token_mask(tokens) if objective.with_tokens else None,
                     tokens=tokens, image_ids=sum(ids, []))
    backward(loss)  # 2) gradient w.r.t. the cached features (and the scale)
    grads = {k: leaves[k].grad for k in leaves}
    scale_grad = grads["scale"]
    assert scale_grad is not None, "every loss depends on the logit scale"
    k_micro = len(micro)
    starts = [sum(sizes[:m]) for m in range(k_micro)]
    for m, (mb, snap) in enumerate(zip(micro, snaps)):  # 3) re-encode with a graph, push the cached gradient
        with _sync(model, m == k_micro - 1):
            _rng_restore(snap, device)
            with autocast():
                out = model(mb.pixels, mb.tokens, objective.token_mode)
            sl = slice(starts[m], starts[m] + sizes[m])
            surrogate = out["scale"] * (scale_grad / k_micro)
            for key in keys:
                grad = grads[key]
                if grad is not None:
                    surrogate = surrogate + (out[key] * grad[sl].to(out[key].dtype)).sum()
            _backward(surrogate)
    return float(loss.detach())
