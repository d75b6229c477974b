"""``--objective clip``: the global term (``--loss infonce|hn``) plus, with ``--token-loss-weight λ > 0``, the
FILIP-style token-level term (the paper's L = L_HN + λ·L_tok)."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from hnbench.registry import LOSSES
from hnbench.train.objectives.base import ALWAYS, Term, TermInputs, global_term
from hnbench.train.token_loss import token_loss

__all__ = ["build", "clip_terms", "token_term"]


def token_term(weight: float) -> Term:
    """λ·L_tok on the per-patch and per-token features."""

    def fn(x: TermInputs) -> Tensor:
        assert x.text_mask is not None, "the token-level loss needs the text token mask"
        return token_loss(x.out["image_tokens"], x.out["text_tokens"], x.text_mask, x.out["scale"],
                          context=x.context)

    return Term("token", fn, weight=weight, needs=ALWAYS | {"token_features"})


def clip_terms(loss: str, gamma: float, label_smoothing: float = 0.0, token_weight: float = 0.0) -> list[Term]:
    terms = [global_term(LOSSES.get(loss), loss, gamma, label_smoothing)]
    return terms + [token_term(token_weight)] if token_weight > 0 else terms


def build(config: Any) -> list[Term]:
    """The terms of a :class:`~hnbench.train.config.TrainConfig` for ``--objective clip``."""
    return clip_terms(config.loss, config.gamma, config.label_smoothing, config.token_loss_weight)
