"""``--objective finelip``: FineLIP (CVPR 2025) — adaptive token aggregation (ATRM), cross-modal late
interaction (CLIM) and the summed margin hinge, with L_HN swapped in one of two ways (``--finelip-swap``):

* ``add-global``: L = α·L_tri + L_global(v, t), the global term (``--loss infonce|hn``) FineLIP lacks added
  on the CLS / EOT features;
* ``margin-hinge``: the adaptive margin inside the hinge, m_ij = m + γ·Ḡ_ij (Ḡ: detached, zero-diagonal
  caption–caption cosine of the global text features); ``--loss infonce`` (or γ = 0) is FineLIP's plain hinge.

α ramps from 0 to 1 over the first epoch (FineLIP's ``embedding_warmup_epochs = 0``). Written from the
description in the issue's spec (frameworks.md §1), not from the authors' code.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from hnbench.errors import ConfigError
from hnbench.models.finelip import ATRM, clim_scores, finelip_k
from hnbench.registry import LOSSES
from hnbench.train.losses import no_autocast
from hnbench.train.objective_options import FineLIPOptions
from hnbench.train.objectives.base import ALWAYS, ExtraModule, Term, TermInputs, global_term, ramp_first_epoch

__all__ = ["build", "vse_hinge"]


def vse_hinge(scores: Tensor, same: Tensor, margin: float | Tensor = 0.2, *, max_violation: bool = False) -> Tensor:
    """Σ_{i≠j} [m_ij + S̃_ij − S̃_ii]_+ + [m_ij + S̃_ij − S̃_jj]_+, pairs with ``same`` (B, B; the diagonal
    included) left out; a sum, not a mean. ``max_violation``: only each row's and column's hardest negative."""
    d = scores.diagonal()
    cost_caption = (margin + scores - d[:, None]).clamp(min=0).masked_fill(same, 0.0)  # image i: captions j
    cost_image = (margin + scores - d[None, :]).clamp(min=0).masked_fill(same, 0.0)  # caption j: images i
    if max_violation:
        return cost_caption.amax(dim=1).sum() + cost_image.amax(dim=0).sum()
    return cost_caption.sum() + cost_image.sum()


def _hinge_term(atrm: ExtraModule, margin: float, gamma: float, max_violation: bool) -> Term:
    def fn(x: TermInputs) -> Tensor:
        module = atrm.module
        assert isinstance(module, ATRM), "the trainer builds the FineLIP module before the first step"
        out, device = x.out, x.out["image"].device
        lengths = (x.tokens != 0).sum(dim=1)
        with no_autocast(device):
            images = module.image(out["image_tokens"].float())
            texts = module.text(out["text_tokens"].float(), lengths)
            images, texts = x.context.gather(images), x.context.gather(texts)  # every rank: the full-batch hinge
            scores = clim_scores(images, texts)
            ids = torch.tensor(x.image_ids or list(range(scores.shape[0])), device=device)
            same = ids[:, None] == ids[None, :]
            m: float | Tensor = margin
            if gamma:
                t = x.context.gather(out["text"].detach().float(), with_grad=False)
                g_bar = (t @ t.T).fill_diagonal_(0.0)
                m = margin + gamma * g_bar
            loss = vse_hinge(scores, same, m, max_violation=max_violation)
        # every rank computes the whole global-batch hinge (their mean is it; the gathers' backward sums the
        # ranks' gradients, so the data-parallel mean is its gradient). The hinge never reads the logit scale:
        # + 0·s gives it an exact zero gradient, so data parallelism finds every parameter in the loss
        return loss + 0.0 * out["scale"]

    return Term("hinge", fn, needs=ALWAYS | {"token_features_cls"}, schedule=ramp_first_epoch, module=atrm)


def build(config: Any) -> list[Term]:
    """FineLIP's terms for a TrainConfig: the hinge (α-ramped) and, for ``add-global``, the global term."""
    if config.token_loss_weight > 0:
        raise ConfigError("--objective finelip: --token-loss-weight is the clip objective's token-level term; FineLIP's own "
                          "token term is its hinge (drop --token-loss-weight, or use --objective clip)")
    o = config.objective_options
    assert isinstance(o, FineLIPOptions), "TrainConfig.validate checks the options are the objective's"
    k = finelip_k(o.num_patches)
    atrm = ExtraModule("finelip", lambda dim: ATRM(dim, k), lr=o.lr, weight_decay=o.weight_decay)
    if o.swap == "margin-hinge":
        gamma = config.gamma if LOSSES.entry(config.loss).uses_g else 0.0
        return [_hinge_term(atrm, o.margin, gamma, o.max_violation)]
    return [_hinge_term(atrm, o.margin, 0.0, o.max_violation),
            global_term(LOSSES.get(config.loss), config.loss, config.gamma, config.label_smoothing)]
