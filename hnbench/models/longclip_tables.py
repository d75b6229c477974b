"""Long-CLIP's positional tables: the stretch 77 → 248 and the fold of a released checkpoint's two tables.

Long-CLIP (Zhang et al., 2024) stretches CLIP's 77-position text table to 248 = 4·77 − 3·20: the first
``keep`` = 20 positions (well trained on short captions) are kept, and the remaining 57 are linearly
interpolated ×4 (the last one extrapolated along the final difference). Its released checkpoints hold
two 248-row tables; the model adds ``positional_embedding`` on the first 20 positions and
``positional_embedding_res`` on the rest (masks ``mask1``/``mask2``), so the effective table is::

    P[:20] = positional_embedding[:20]        P[20:] = positional_embedding_res[20:]

which is what open_clip's single ``positional_embedding`` gets. Everything else is OpenAI-CLIP layout
(= open_clip's ``CLIP``); OpenAI-derived weights need the ``-quickgelu`` architectures
(e.g. ``ViT-L-14-quickgelu`` for Long-CLIP-L).
"""

from __future__ import annotations

import logging

import torch
from torch import Tensor

logger = logging.getLogger(__name__)

__all__ = ["KEEP", "convert_longclip_state_dict", "stretch_positional_embedding", "stretched_length"]

KEEP = 20


def stretched_length(length: int, keep: int = KEEP, factor: int = 4) -> int:
    """Positions after stretching: keep + factor·(length − keep); 77 → 248."""
    return keep + factor * (length - keep)


def stretch_positional_embedding(pe: Tensor, keep: int = KEEP, factor: int = 4) -> Tensor:
    """Long-CLIP's stretch of an (L, D) table to (keep + factor·(L − keep), D).

    Rows < keep are copied; for i < L−1−keep, rows keep + factor·i + j (j < factor) are
    ((factor−j)·P[keep+i] + j·P[keep+i+1]) / factor; the last ``factor`` rows continue the last row
    along P[L−1] − P[L−2] in steps of 1/factor.
    """
    length, dim = pe.shape
    if not 0 <= keep <= length - 2:
        raise ValueError(f"cannot keep {keep} of {length} positions and interpolate the rest")
    a, b = pe[keep:length - 1], pe[keep + 1:length]
    mid = torch.stack([(factor - j) * a / factor + j * b / factor for j in range(factor)], dim=1)
    last, step = pe[length - 1], pe[length - 1] - pe[length - 2]
    tail = torch.stack([last + j * step / factor for j in range(factor)])
    out = torch.cat([pe[:keep], mid.reshape(-1, dim), tail])
    assert out.shape[0] == stretched_length(length, keep, factor)
    return out


def convert_longclip_state_dict(sd: dict[str, Tensor], keep: int = KEEP) -> tuple[dict[str, Tensor], int | None]:
    """Fold a released Long-CLIP state dict's two tables into one; returns (state dict, context length).

    A state dict without ``positional_embedding_res`` is returned unchanged with ``None``.
    """
    if "positional_embedding_res" not in sd:
        return sd, None
    pe, res = sd["positional_embedding"], sd["positional_embedding_res"]
    if pe.shape != res.shape:
        raise ValueError(f"Long-CLIP tables differ in shape: {tuple(pe.shape)} vs {tuple(res.shape)}")
    out = {k: v for k, v in sd.items() if k not in ("positional_embedding_res", "mask1", "mask2")}
    out["positional_embedding"] = torch.cat([pe[:keep], res[keep:]]).contiguous()
    logger.info("Long-CLIP checkpoint: %d positions (first %d from positional_embedding)", pe.shape[0], keep)
    return out, int(pe.shape[0])
