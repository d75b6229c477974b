"""Why InfoNCE goes silent: both losses and both full-parameter gradients on the same batch.

Every ``diag_every`` optimizer steps the trainer calls :func:`measure` on the current (first) micro-
batch, with the unwrapped model and without touching the optimizer or any RNG, and appends a
``{"kind": "step", …}`` line to ``diagnostics.jsonl``; at each epoch end :func:`summarize_epoch` adds
a ``{"kind": "epoch", …}`` line, and periodic evaluation adds ``{"kind": "eval", …}`` lines.

Per measurement (fp32)::

    loss_infonce, loss_hn          both objectives on the same features
    gnorm_infonce, gnorm_hn        ‖∇θ L‖₂ over all trainable parameters (the fp32 gradients,
                                   accumulated in fp64 so that tiny norms do not underflow)
    infonce_grad_zero              every element of ∇θ L_InfoNCE is exactly 0.0
    grad_ratio                     gnorm_hn / gnorm_infonce (only where gnorm_infonce > 0)
    grad_cos                       cos(∇θ L_HN, ∇θ L_InfoNCE) (only where both are non-zero)
    sat_rows_infonce, sat_rows_hn  share of the 2B softmax rows (both directions) whose positive
                                   has probability exactly 1.0
    infonce_zero_fp16, …_bf16      what-if: would the InfoNCE gradient (w.r.t. the features) be exactly
                                   zero if the logits were computed in fp16 / bf16, as under autocast
                                   when the loss is not kept in fp32? (softmax/CE in fp32 as autocast does)
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from hnbench.train.losses import hn_clip_loss, hn_logits

__all__ = ["measure", "saturated_rows", "summarize_epoch"]


def saturated_rows(z: Tensor) -> float:
    """Share of rows of Z and of Zᵀ whose diagonal softmax probability is exactly 1.0 (in Z's dtype)."""
    rows = [z.softmax(dim=1).diagonal(), z.T.softmax(dim=1).diagonal()]
    return float(torch.cat(rows).eq(1.0).float().mean())


def infonce_zero_in(v: Tensor, t: Tensor, s: Tensor, dtype: torch.dtype) -> bool:
    """Is ∂L_InfoNCE/∂(v, t) exactly zero when S = s·v tᵀ is computed in ``dtype`` (CE in fp32)?"""
    vv = v.detach().to(dtype).requires_grad_()
    tt = t.detach().to(dtype).requires_grad_()
    z = (s.detach().to(dtype) * (vv @ tt.T)).float()
    y = torch.arange(z.shape[0], device=z.device)
    loss = 0.5 * (torch.nn.functional.cross_entropy(z, y) + torch.nn.functional.cross_entropy(z.T, y))
    gv, gt = torch.autograd.grad(loss, [vv, tt])
    return not (bool(gv.any()) or bool(gt.any()))


def _flat(grads: Sequence[Tensor | None], params: Sequence[Tensor]) -> Tensor:
    return torch.cat([(torch.zeros_like(p) if g is None else g).reshape(-1).double()
                      for g, p in zip(grads, params)])


def measure(towers: torch.nn.Module, pixels: Tensor, tokens: Tensor, *, gamma: float,
            mask: Tensor | None = None, active_threshold: float = 1e-3,
            amp_dtype: torch.dtype | None = None) -> dict[str, Any]:
    """InfoNCE vs HN-CLIP on one batch: losses, gradient norms, exact zeros, ratio, cosine, saturation."""
    params = [p for p in towers.parameters() if p.requires_grad]
    device = pixels.device
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        if amp_dtype is not None:
            with torch.autocast(device.type, dtype=amp_dtype):
                out = towers(pixels, tokens)
        else:
            out = towers(pixels, tokens)
    v, t, s = out["image"], out["text"], out["scale"]
    nce = hn_clip_loss(v, t, s, 0.0, mask=mask)
    hn = hn_clip_loss(v, t, s, gamma, mask=mask)
    g_nce = _flat(torch.autograd.grad(nce, params, retain_graph=True, allow_unused=True), params)
    g_hn = _flat(torch.autograd.grad(hn, params, allow_unused=True), params)
    n_nce, n_hn = float(g_nce.norm()), float(g_hn.norm())
    with torch.no_grad():
        z_nce, _ = hn_logits(v.detach(), t.detach(), s.detach(), 0.0, mask=mask)
        z_hn, _ = hn_logits(v.detach(), t.detach(), s.detach(), gamma, mask=mask)
    cos = float(torch.dot(g_nce, g_hn) / (n_nce * n_hn)) if n_nce > 0 and n_hn > 0 else None
    return {
        "batch": int(v.shape[0]), "logit_scale": float(s.detach()),
        "loss_infonce": float(nce.detach()), "loss_hn": float(hn.detach()),
        "gnorm_infonce": n_nce, "gnorm_hn": n_hn,
        "infonce_grad_zero": bool(not g_nce.any()), "hn_grad_zero": bool(not g_hn.any()),
        "grad_ratio": n_hn / n_nce if n_nce > 0 else None, "grad_cos": cos,
        "sat_rows_infonce": saturated_rows(z_nce), "sat_rows_hn": saturated_rows(z_hn),
        "active_infonce": float(nce.detach()) >= active_threshold,
        "active_hn": float(hn.detach()) >= active_threshold,
        "infonce_zero_fp16": infonce_zero_in(v, t, s, torch.float16),
        "infonce_zero_bf16": infonce_zero_in(v, t, s, torch.bfloat16),
    }


def _share(values: Sequence[bool]) -> float | None:
    return sum(bool(v) for v in values) / len(values) if values else None


def _median(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def _mean(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def summarize_epoch(epoch: int, records: Sequence[dict[str, Any]], train_losses: Sequence[float],
                    active_threshold: float) -> dict[str, Any]:
    """Per-epoch aggregates of the step measurements and of every training batch's loss."""
    cos = [r["grad_cos"] for r in records if r["grad_cos"] is not None]
    return {
        "kind": "epoch", "epoch": epoch, "n_measurements": len(records), "n_batches": len(train_losses),
        "active_threshold": active_threshold,
        "share_active_train": _share([x >= active_threshold for x in train_losses]),
        "share_active_infonce": _share([r["active_infonce"] for r in records]),
        "share_active_hn": _share([r["active_hn"] for r in records]),
        "share_infonce_grad_zero": _share([r["infonce_grad_zero"] for r in records]),
        "share_infonce_zero_fp16": _share([r.get("infonce_zero_fp16", False) for r in records]),
        "share_infonce_zero_bf16": _share([r.get("infonce_zero_bf16", False) for r in records]),
        "median_grad_ratio": _median([r["grad_ratio"] for r in records]),
        "mean_grad_cos": _mean(cos), "share_grad_cos_positive": _share([c > 0 for c in cos]),
        "mean_sat_rows_infonce": _mean([r["sat_rows_infonce"] for r in records]),
        "mean_sat_rows_hn": _mean([r["sat_rows_hn"] for r in records]),
        "mean_loss_infonce": _mean([r["loss_infonce"] for r in records]),
        "mean_loss_hn": _mean([r["loss_hn"] for r in records]),
    }
