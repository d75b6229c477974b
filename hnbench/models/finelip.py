"""FineLIP (CVPR 2025) at inference: its adaptive token aggregation (ATRM: :class:`TokenAggregation` per tower), its
cross-modal late interaction (:func:`clim_scores`) and the fine-grained pairwise scorer they make
(:class:`FineLIPScorer`, ``--scorer finelip-finegrained``), read from a FineLIP run's or release's weights. The
objective that trains them is :mod:`hnbench.train.objectives.finelip`.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hnbench.errors import ConfigError
from hnbench.models.scorers import PairScorer
from hnbench.models.towers import CLIPTowers

__all__ = ["ATRM", "FINELIP", "FineLIPScorer", "TokenAggregation", "clim_scores", "finelip_cross_net", "finelip_k",
           "finelip_scorers"]


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


# -- FineLIP's fine-grained scorer ------------------------------------------------------------------------
FINELIP = "finelip-finegrained"
FINELIP_COS_WEIGHT = 0.8  # the authors' fusion (frameworks.md §1.3): 0.8·cos + 0.2·S̃
OBJECTIVE_MODULES = "objective_modules.safetensors"  # a training run's extra modules (hnbench.train.export)
_RUN_PREFIX, _RELEASE_PREFIX = "finelip.", "cross_net."


class FineLIPScorer:
    """FineLIP's ``--finegrain`` inference: 0.8·cos(v, t) + 0.2·S̃, with v, t the CLS / EOT features and S̃ the
    cross-modal late interaction (:func:`clim_scores`, the score its objective
    trains) of the cross-net's aggregated token sets (:class:`ATRM`), every pair.

    States: ``global`` (B, D) normalised features, ``tokens`` (B, K+1, D) normalised aggregated sets."""

    name = FINELIP
    description = ("FineLIP fine-grained: 0.8·cos + 0.2·S̃ (the cross-net's token aggregation and late "
                   "interaction), every pair")

    def __init__(self, encoder: Any, atrm: Any):
        self.encoder = encoder
        self.towers = CLIPTowers(encoder.model, "open_clip", encoder=encoder)
        self.atrm = atrm.to(encoder.device).eval()

    @torch.no_grad()
    def image_state(self, pixels: Tensor) -> dict[str, Tensor]:
        e = self.encoder
        pixels = pixels.to(device=e.device, dtype=getattr(e, "input_dtype", None) or pixels.dtype)
        v, tokens = self.towers._image_with_tokens(pixels, cls=True)
        return {"global": v.float(), "tokens": self.atrm.image(tokens.float())}

    @torch.no_grad()
    def text_state(self, tokens: Tensor) -> dict[str, Tensor]:
        ctx = int(self.encoder.info.context_length)
        tokens = F.pad(tokens, (0, ctx - tokens.shape[1])) if tokens.shape[1] < ctx else tokens  # trimmed batches
        tokens = tokens.to(self.encoder.device)
        t, x = self.towers._text_with_tokens(tokens)
        return {"global": t.float(), "tokens": self.atrm.text(x.float(), (tokens != 0).sum(dim=1))}

    def score(self, text_state: dict[str, Tensor], image_state: dict[str, Tensor]) -> Tensor:
        # in float64, rounded to float32 once: a pair's score does not depend on where it sits in a block (fp32
        # kernels sum in a position-dependent order), so equal items tie exactly whatever the block sizes
        t, i = {k: v.double() for k, v in text_state.items()}, {k: v.double() for k, v in image_state.items()}
        cos = t["global"] @ i["global"].T
        fine = clim_scores(i["tokens"], t["tokens"]).T  # (images, texts) → (texts, images)
        return (FINELIP_COS_WEIGHT * cos + (1 - FINELIP_COS_WEIGHT) * fine).float()


def finelip_cross_net(pretrained: str | None, *, read: bool = True) -> dict[str, Tensor] | bool | None:
    """FineLIP's cross-net for the weights ``pretrained``: a training run's ``objective_modules.safetensors`` beside
    the checkpoint (keys ``finelip.*``), or a released state dict's own ``cross_net.*`` keys (which the plain-cosine
    load drops). Returns its state dict (``aggr_net.*``, ``cap_aggr_net.*``), or with ``read=False`` whether there
    is one (None: not known without reading a pickled checkpoint whole); an empty dict / False: none."""
    if not pretrained or not Path(pretrained).exists():
        return {} if read else False
    path = Path(pretrained)
    beside = path.parent / OBJECTIVE_MODULES  # RUN/checkpoint.safetensors or RUN/adapter: the run's folder
    sources = [(beside, _RUN_PREFIX)] if beside.is_file() else []
    if path.is_file():
        sources.append((path, _RELEASE_PREFIX))
    for source, prefix in sources:
        if not read:
            if source.suffix != ".safetensors":
                return None
            from safetensors import safe_open

            with contextlib.suppress(Exception), safe_open(str(source), "pt") as f:
                if any(k.startswith(prefix) for k in f.keys()):  # noqa: SIM118 (safe_open has no __iter__)
                    return True
            continue
        from hnbench.models.checkpoint import read_state_dict

        sd = read_state_dict(source)
        found = {k[len(prefix):]: v for k, v in sd.items() if k.startswith(prefix)}
        if found:
            return found
    return {} if read else False


def finelip_scorers(encoder: Any) -> dict[str, PairScorer]:
    """``{"finelip-finegrained": …}`` for an open_clip encoder whose weights carry FineLIP's cross-net, else ``{}``."""
    sd = finelip_cross_net(encoder.info.pretrained)
    if not isinstance(sd, dict) or not sd or not hasattr(encoder.model, "visual"):
        return {}
    from hnbench.models.checkpoint import load_into

    head = sd.get("aggr_net.mlp.3.weight")
    norm = sd.get("aggr_net.mlp.0.weight")
    if head is None or norm is None:
        raise ConfigError(f"{encoder.info.pretrained}: its FineLIP cross-net lacks aggr_net.mlp weights "
                          f"(keys: {', '.join(sorted(sd)[:4])}, …)")
    atrm = ATRM(int(norm.shape[0]), int(head.shape[0]))
    load_into(atrm, {k: v.float() for k, v in sd.items()}, f"the FineLIP cross-net of {encoder.info.pretrained}")
    scorer: PairScorer = FineLIPScorer(encoder, atrm)
    return {FINELIP: scorer}
