"""The objective contract's parts: :class:`Term`, its inputs, extra modules, weight schedules."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor, nn

from hnbench.distributed import DistContext
from hnbench.errors import ConfigError
from hnbench.registry import LOSSES

__all__ = ["INPUTS", "ExtraModule", "Term", "TermInputs", "check_inputs", "global_term", "ramp_first_epoch"]

# the batch inputs a term may declare → how a run gets them (named in the error when one is missing)
INPUTS: dict[str, str] = {
    "pixels": "the images (always loaded)",
    "tokens": "the caption tokens (always tokenised)",
    "global_features": "the towers' pooled, L2-normalised features (always computed)",
    "token_features": "per-patch and per-token features in the joint space (open_clip ViT models)",
    "token_features_cls": "all image tokens with CLS and all text positions after the final LayerNorm and "
                          "projection, plus each caption's length (open_clip ViT models)",
    "token_states": "the last layer's image tokens before the post-LayerNorm and text states before the final "
                    "LayerNorm, with the towers' heads (open_clip ViT models)",
    "g_text": "text features of a frozen copy of the initial text encoder (--g-source frozen_init)",
    "image_ids": "the global batch's image ids (always known)",
    "segments": "a segment sidecar (boxes, sentences, token spans): synthdense writes its own; other data: make "
                "one with `hnbench segments`",
    "edge_maps": "edge maps of the images: synthdense writes them; real data: pip install 'hnbench[edges]'",
    "filtered_captions": "lexicon-filtered captions (made with the edge maps)",
}
ALWAYS = frozenset({"pixels", "tokens", "global_features", "image_ids"})


@dataclass
class TermInputs:
    """What a term's function sees: the towers' outputs and the batch inputs the objective declared."""

    out: dict[str, Tensor]  # image, text, scale (+ image_tokens, text_tokens, text_lengths when declared)
    tokens: Tensor
    image_ids: list[int]  # the global batch's, rank order
    mask: Tensor | None = None  # same-image / same-caption pairs (--mask-duplicates)
    g_text: Tensor | None = None
    text_mask: Tensor | None = None  # real tokens (token-level terms)
    context: DistContext = field(default_factory=DistContext)
    side: dict[str, Any] = field(default_factory=dict)  # segments, edge maps, filtered captions, ... (local rows)
    heads: Any = None  # the towers' TowerHeads (LN + projection, vision geometry) when a term needs token_states


@dataclass
class ExtraModule:
    """A trainable module a term brings, in its own AdamW group (``lr`` / ``weight_decay`` None: the run's).

    ``make(embed_dim)`` builds it once the model is loaded (:meth:`build`); the term's function reads
    ``module``. The trainer keeps it beside the towers (checkpointed, resumed and exported with them).
    """

    name: str
    make: Callable[[int], nn.Module]
    lr: float | None = None
    weight_decay: float | None = None
    module: nn.Module | None = None

    def build(self, embed_dim: int) -> nn.Module:
        if self.module is None:
            self.module = self.make(embed_dim)
        return self.module


@dataclass
class Term:
    """One named term: ``weight × schedule(progress) × fn(inputs)``; ``progress`` = epoch + fraction of it."""

    name: str
    fn: Callable[[TermInputs], Tensor]
    weight: float = 1.0
    needs: frozenset[str] = ALWAYS
    schedule: Callable[[float], float] | None = None
    module: ExtraModule | None = None

    def weight_at(self, progress: float) -> float:
        return self.weight if self.schedule is None else self.weight * self.schedule(progress)


def ramp_first_epoch(progress: float) -> float:
    """FineLIP's α: batch i of N in the first epoch weighs i / N, every later batch 1."""
    return min(1.0, max(0.0, progress))


def global_term(base_fn: Callable[..., Tensor], loss: str, gamma: float, label_smoothing: float = 0.0,
                name: str = "global") -> Term:
    """The framework's global contrastive term on the pooled features: InfoNCE or L_HN (``--loss``, ``--gamma``;
    Ḡ and γ passed to a loss whose entry declares ``uses_g``)."""
    is_hn = LOSSES.entry(loss).uses_g

    def fn(x: TermInputs) -> Tensor:
        out = x.out
        mask = x.mask.to(out["image"].device) if x.mask is not None else None
        hn = {"gamma": gamma, "text_features_for_g": x.g_text} if is_hn else {}
        return base_fn(out["image"], out["text"], out["scale"], mask=mask, label_smoothing=label_smoothing,
                       context=x.context, **hn)

    return Term(name, fn)


def check_inputs(needs: Iterable[str], available: Iterable[str], objective: str) -> None:
    """Refuse (one line) an objective whose declared inputs this run cannot produce: name each and how to make it."""
    have = set(available) | ALWAYS
    missing = [n for n in sorted(set(needs)) if n not in have]
    if missing:
        how = "; ".join(f"{n}: {INPUTS.get(n, 'unknown input')}" for n in missing)
        raise ConfigError(f"objective {objective!r} needs inputs this run does not have — {how}")
