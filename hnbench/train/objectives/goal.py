"""``--objective goal``: GOAL (CVPR 2025) — the global term, 0.5 × the crop–sentence InfoNCE and the two
(1 − cos)² pooling terms (frameworks.md §2.1)::

    L = w_g·L_global(--loss) + w_seg·L_segment + w_patch·L_patch + w_text·L_text      (1 / 0.5 / 1 / 1)

Side inputs (``segments``): per image one segment of the sidecar per epoch (``--segment-choice``), its crop
and its sentence through the towers in the batch's own forward, its box and the sentence's token span in
the long caption. ``token_states``: the image's last-layer tokens before the post-LayerNorm and the long
caption's states before the final LayerNorm, pooled here and put through the towers' heads. The box maps
to patches exactly with the model's real patch size; ``--goal-compat`` reproduces the authors' quirks (patch
16, per-axis scale, the span one token late). The term functions: :mod:`hnbench.train.terms.goal`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from torch import Tensor

from hnbench.registry import LOSSES
from hnbench.train.objective_options import GoalOptions
from hnbench.train.objectives.base import ALWAYS, Term, TermInputs, global_term
from hnbench.train.terms.geometry import box_patch_mask
from hnbench.train.terms.goal import goal_patch_loss, goal_segment_loss, goal_text_loss, span_mask

__all__ = ["NEEDS", "build", "patch_mask", "text_span_mask"]

NEEDS = ALWAYS | {"segments", "token_states"}


def patch_mask(x: TermInputs, options: GoalOptions) -> Tensor:
    """(b, 1+P) the patch tokens each row's box touches, on the model's own input grid (CLS at 0)."""
    heads, states = x.heads, x.out["image_states"]
    return box_patch_mask(x.side["boxes"], x.side["image_sizes"], input_size=heads.input_size,
                          patch_size=heads.patch_size, num_tokens=states.shape[1], compat=options.compat)


def text_span_mask(x: TermInputs, options: GoalOptions) -> Tensor:
    """(b, T) each row's sentence tokens in its long caption (``compat``: one token late, as the authors')."""
    shift = int(options.compat)
    spans = [(a + shift, b + shift) for a, b in x.side["spans"]]
    return span_mask(spans, x.out["text_states"].shape[1])


def goal_terms(loss: str, gamma: float, options: GoalOptions, label_smoothing: float = 0.0) -> list[Term]:
    """GOAL's four named terms; ``loss``/``gamma`` choose the global term (and, with ``segment_hn``, the
    segment term's)."""
    o = options

    def segment(x: TermInputs) -> Tensor:
        return goal_segment_loss(x.out["crop"], x.out["sentence"], x.out["scale"], loss=loss, gamma=gamma,
                                 options=o, context=x.context)

    def patch(x: TermInputs) -> Tensor:
        return goal_patch_loss(x.out["image_states"], patch_mask(x, o), x.heads.image, x.out["crop"],
                               context=x.context)

    def text(x: TermInputs) -> Tensor:
        return goal_text_loss(x.out["text_states"], text_span_mask(x, o), x.heads.text, x.out["sentence"],
                              context=x.context)

    glob = replace(global_term(LOSSES.get(loss), loss, gamma, label_smoothing), weight=o.global_weight,
                   needs=NEEDS)
    return [glob, Term("segment", segment, weight=o.segment_weight, needs=NEEDS),
            Term("patch", patch, weight=o.patch_weight, needs=NEEDS),
            Term("text", text, weight=o.text_weight, needs=NEEDS)]


def build(config: Any) -> list[Term]:
    """GOAL's terms for a :class:`~hnbench.train.config.TrainConfig` (its ``objective_options``: GoalOptions)."""
    options = config.objective_options
    assert isinstance(options, GoalOptions), "TrainConfig.validate checks the options are the objective's"
    return goal_terms(config.loss, config.gamma, options, config.label_smoothing)
