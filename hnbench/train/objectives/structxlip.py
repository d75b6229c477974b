"""``--objective structxlip``: StructXLIP (CVPR 2026) — the global term plus three structure terms on edge
maps, each weighted by a per-epoch cosine decay to its floor (frameworks.md §3.1)::

    L = λ_g·L_global(--loss) + λ_SC(e)·L_SC + λ_RGB(e)·L_RGB + λ_LSC(e)·L_LSC

Side inputs: each image's edge map (``edge_maps``: synthdense's exact outlines or Canny, ``--edges``), the
edge map cropped at the image's best ``--structxlip-top-k`` segment boxes (``segments``; fewer: masked
out, never in a denominator), and the lexicon-filtered caption (``filtered_captions``); edge maps, crops
and filtered captions go through the towers in the batch's own forward. ``token_states``: the chunk term
pools the filtered caption's states before the final LayerNorm. The logit-scale clamp [0, 3.5] is the
run's ``max_logit_scale`` = e^3.5 (the recipes set it). Term functions: :mod:`hnbench.train.terms.structxlip`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from hnbench.registry import LOSSES
from hnbench.train.objective_options import StructXLIPOptions
from hnbench.train.objectives.base import ALWAYS, Term, TermInputs, global_term
from hnbench.train.terms.structxlip import (
    local_structure_term,
    rgb_structure_loss,
    schedule_factor,
    structure_loss,
)

__all__ = ["NEEDS", "build", "structxlip_terms"]

NEEDS = ALWAYS | {"segments", "edge_maps", "filtered_captions", "token_states"}
MAX_LOGIT_SCALE = math.exp(3.5)  # StructXLIP clamps log s to [0, 3.5] after every optimiser step


def _decay(options: StructXLIPOptions, floor: float) -> Callable[[float], float]:
    o = options
    return lambda progress: schedule_factor(int(progress), floor, warm=o.warm_epochs, decay_start=o.decay_start,
                                            decay_end=o.decay_end)


def structxlip_terms(loss: str, gamma: float, options: StructXLIPOptions, label_smoothing: float = 0.0) -> list[Term]:
    """StructXLIP's four named terms; ``loss``/``gamma`` choose the global term (and, with
    ``structure_hn``, L_SC's)."""
    o = options

    def every(x: TermInputs) -> Tensor:  # every image has an edge map here (made, not read from files)
        return torch.ones(x.out["image"].shape[0], dtype=torch.bool, device=x.out["image"].device)

    def structure(x: TermInputs) -> Tensor:
        return structure_loss(x.out["edge"], x.out["filtered"], every(x), x.out["scale"], loss=loss, gamma=gamma,
                              options=o, context=x.context, filtered_tokens=x.side.get("filtered_tokens"))

    def rgb(x: TermInputs) -> Tensor:
        return rgb_structure_loss(x.out["image"], x.out["edge"], every(x), context=x.context)

    def local(x: TermInputs) -> Tensor:
        valid = x.side["crop_valid"]
        crops = x.out["edge_crops"].reshape(*valid.shape, -1)
        return local_structure_term(x.out["text_states"], x.out["filtered_states"], x.side["filtered_captions"],
                                    x.side["encode"], x.heads.text_ln, x.heads.text_proj, crops, valid,
                                    x.out["scale"], options=o, context=x.context)

    sketch = o.sketch_epochs
    glob = replace(global_term(LOSSES.get(loss), loss, gamma, label_smoothing), weight=o.global_weight,
                   needs=NEEDS, schedule=(lambda p: 0.0 if p < sketch else 1.0) if sketch else None)
    return [glob,
            Term("structure", structure, o.structure_weight, NEEDS, _decay(o, o.structure_floor)),
            Term("rgb_structure", rgb, o.rgb_weight, NEEDS, _decay(o, o.rgb_floor)),
            Term("local_structure", local, o.local_weight, NEEDS, _decay(o, o.local_floor))]


def build(config: Any) -> list[Term]:
    """StructXLIP's terms for a :class:`~hnbench.train.config.TrainConfig` (its ``objective_options``:
    StructXLIPOptions)."""
    options = config.objective_options
    assert isinstance(options, StructXLIPOptions), "TrainConfig.validate checks the options are the objective's"
    return structxlip_terms(config.loss, config.gamma, options, config.label_smoothing)
