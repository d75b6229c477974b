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
import torch.nn.functional as F
from torch import Tensor, nn

from hnbench.errors import ConfigError
from hnbench.registry import LOSSES
from hnbench.train.losses import no_autocast
from hnbench.train.objectives.base import ALWAYS, ExtraModule, Term, TermInputs, global_term, ramp_first_epoch

__all__ = ["ATRM", "TokenAggregation", "build", "clim_scores", "finelip_k", "vse_hinge"]


def finelip_k(num_patches: int) -> int:
    """FineLIP's K = ⌊num_patches · aggr_ratio 0.4 · sparse_ratio 0.5⌋ (39 for its default 196 patches)."""
    return max(1, int(num_patches * 0.4 * 0.5))


class TokenAggregation(nn.Module):
    """Agg(Z) = W·Z, W = softmax over the n tokens of (τ·MLP(Z))ᵀ ∈ R^{K×n}; MLP = LN → Linear(D, ⌊0.2D⌋) → GELU →
    Linear(·, K); τ learned, initialised to 1. Each of the K outputs is a convex combination of the tokens."""

    def __init__(self, dim: int, k: int) -> None:
        super().__init__()
        hidden = max(1, int(0.2 * dim))
        self.mlp = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, k))
        self.tau = nn.Parameter(torch.ones(()))

    def weights(self, z: Tensor, mask: Tensor | None = None) -> Tensor:
        """(B, K, n) aggregation weights; ``mask`` (B, n) bool keeps the tokens to aggregate over."""
        logits: Tensor = self.tau * self.mlp(z)  # (B, n, K)
        if mask is not None:
            logits = logits.masked_fill(~mask[..., None], float("-inf"))
        return logits.softmax(dim=1).transpose(1, 2)

    def forward(self, z: Tensor, mask: Tensor | None = None) -> Tensor:
        return self.weights(z, mask) @ z


class ATRM(nn.Module):
    """FineLIP's two aggregators: image I = norm([CLS; Agg_img(patches)]), text T = norm([Agg_txt(SOT..words); EOT])."""

    def __init__(self, dim: int, k: int) -> None:
        super().__init__()
        self.aggr_net = TokenAggregation(dim, k)
        self.cap_aggr_net = TokenAggregation(dim, k)

    def image(self, tokens: Tensor) -> Tensor:
        """``tokens`` (B, 1+P, D) with CLS first → (B, K+1, D), L2-normalised."""
        return F.normalize(torch.cat([tokens[:, :1], self.aggr_net(tokens[:, 1:])], dim=1), dim=-1)

    def text(self, tokens: Tensor, lengths: Tensor) -> Tensor:
        """``tokens`` (B, T, D) at every position, ``lengths`` n_j (SOT, words, EOT) → (B, K+1, D), normalised."""
        eot = lengths - 1
        keep = torch.arange(tokens.shape[1], device=tokens.device)[None, :] < eot[:, None]
        last = tokens[torch.arange(tokens.shape[0], device=tokens.device), eot]
        return F.normalize(torch.cat([self.cap_aggr_net(tokens, keep), last[:, None]], dim=1), dim=-1)


def clim_scores(image_sets: Tensor, text_sets: Tensor, *, negative_slope: float | None = 0.1) -> Tensor:
    """S̃ (B_img, B_txt): A = leaky_relu(T_j I_iᵀ); S̃_ij = mean over text tokens of max over image tokens of A +
    mean over image tokens of max over text tokens of A (in [−0.2, 2] for normalised sets; no temperature).
    ``negative_slope=None``: no leaky ReLU (then it is FILIP's max-mean, both directions, summed)."""
    a = torch.einsum("ipd,jtd->ijtp", image_sets, text_sets)
    if negative_slope is not None:
        a = F.leaky_relu(a, negative_slope)
    return a.amax(dim=3).mean(dim=2) + a.amax(dim=2).mean(dim=2)


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
    k = finelip_k(config.finelip_num_patches)
    atrm = ExtraModule("finelip", lambda dim: ATRM(dim, k), lr=config.finelip_lr,
                       weight_decay=config.finelip_weight_decay)
    if config.finelip_swap == "margin-hinge":
        gamma = config.gamma if config.loss == "hn" else 0.0
        return [_hinge_term(atrm, config.finelip_margin, gamma, config.finelip_max_violation)]
    return [_hinge_term(atrm, config.finelip_margin, 0.0, config.finelip_max_violation),
            global_term(LOSSES.get(config.loss), config.loss, config.gamma, config.label_smoothing)]
