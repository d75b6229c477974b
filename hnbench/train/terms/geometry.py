"""A segment's box in image pixels → the ViT patch tokens it touches (``frameworks.md`` §2.1 item 3, §2.2).

GOAL (PerceptualAI-Lab/GOAL ``goal_loss_finetuning.py`` @2db3d4a) pools the last-layer patch tokens of the
whole image over every patch its segment box touches: patch rows ⌊y1/p⌋ … ⌈y2/p⌉−1 and columns
⌊x1/p⌋ … ⌈x2/p⌉−1 of the model's input, token index = 1 + row·grid + column (CLS at 0).

Two mappings from image pixels to input pixels:

- exact (default): the preprocessing open_clip applies (resize the shortest side to ``input_size``,
  centre-crop to a square), the model's real patch size, the box clipped to the crop;
- ``compat``: the authors' reading, x scaled by input_size/W and y by input_size/H (right only for square
  images) and the patch size hard-coded to 16 whatever the model's (grid = input_size // 16).

UNVERIFIED (spec §2.1, §6): how the authors' flat index treats a grid that is not input_size // 16 (we read
it as row·(input_size // 16) + column + 1, as written); whether the paper used the crop-size scale bug of the
official script (the caller passes the image size it means, §2.2).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["COMPAT_PATCH_SIZE", "box_patch_indices", "box_patch_mask", "to_input_box"]

COMPAT_PATCH_SIZE = 16  # GOAL's hard-coded patch size (spec §2.1, "Quirks")

Box = tuple[float, float, float, float]


def _check(box: Sequence[float], image_size: Sequence[int], input_size: int, patch_size: int) -> None:
    if len(box) != 4 or not all(math.isfinite(float(c)) for c in box):
        raise ValueError(f"a box is four finite numbers (x1, y1, x2, y2), got {tuple(box)!r}")
    x1, y1, x2, y2 = (float(c) for c in box)
    w, h = image_size
    if w <= 0 or h <= 0:
        raise ValueError(f"image_size must be positive (width, height), got {tuple(image_size)!r}")
    if not (0 <= x1 < x2 <= w and 0 <= y1 < y2 <= h):
        raise ValueError(f"box {tuple(box)!r} is not a non-empty box inside the {w}x{h} image")
    if patch_size < 1 or input_size < patch_size:
        raise ValueError(f"need 1 <= patch_size <= input_size, got patch {patch_size}, input {input_size}")


def to_input_box(box: Sequence[float], image_size: Sequence[int], input_size: int, *,
                 compat: bool = False) -> Box:
    """``box`` (x1, y1, x2, y2) in pixels of an image of ``image_size`` (width, height) → the same box in
    pixels of the model's ``input_size``² input: exact resize-shortest-side + centre-crop (clipped to the
    crop), or with ``compat`` GOAL's per-axis scale (spec §2.1 "Quirks")."""
    _check(box, image_size, input_size, 1)
    x1, y1, x2, y2 = (float(c) for c in box)
    w, h = (float(v) for v in image_size)
    if compat:
        sx, sy = input_size / w, input_size / h
        return x1 * sx, y1 * sy, x2 * sx, y2 * sy
    scale = input_size / min(w, h)
    ox, oy = (w * scale - input_size) / 2, (h * scale - input_size) / 2

    def clip(v: float) -> float:
        return min(max(v, 0.0), float(input_size))

    return clip(x1 * scale - ox), clip(y1 * scale - oy), clip(x2 * scale - ox), clip(y2 * scale - oy)


def box_patch_indices(box: Sequence[float], image_size: Sequence[int], *, input_size: int, patch_size: int,
                      compat: bool = False) -> list[int]:
    """Token indices (CLS at 0, patches row-major from 1) of every patch the box touches (spec §2.1 item 3).

    ``patch_size`` is the model's; with ``compat`` it is replaced by GOAL's hard-coded 16. Empty when the
    box lies wholly outside the centre crop (exact mapping): the pooling term then skips the item.
    """
    p = COMPAT_PATCH_SIZE if compat else int(patch_size)
    _check(box, image_size, input_size, p)
    x1, y1, x2, y2 = to_input_box(box, image_size, input_size, compat=compat)
    grid = input_size // p
    if x2 <= x1 or y2 <= y1:
        return []
    rows = range(max(0, math.floor(y1 / p)), min(grid, math.ceil(y2 / p)))
    cols = range(max(0, math.floor(x1 / p)), min(grid, math.ceil(x2 / p)))
    return [1 + r * grid + c for r in rows for c in cols]


def box_patch_mask(boxes: Sequence[Sequence[float]], image_sizes: Sequence[Sequence[int]], *, input_size: int,
                   patch_size: int, num_tokens: int, compat: bool = False) -> Tensor:
    """(B, num_tokens) bool mask of :func:`box_patch_indices` per item (``num_tokens`` = 1 + patches of the
    model's grid). An index past ``num_tokens`` (``compat`` on a grid finer than 16) is an error."""
    if len(boxes) != len(image_sizes):
        raise ValueError(f"{len(boxes)} boxes but {len(image_sizes)} image sizes")
    mask = torch.zeros(len(boxes), num_tokens, dtype=torch.bool)
    for i, (box, size) in enumerate(zip(boxes, image_sizes, strict=True)):
        idx = box_patch_indices(box, size, input_size=input_size, patch_size=patch_size, compat=compat)
        if idx and idx[-1] >= num_tokens:
            raise ValueError(f"patch token {idx[-1]} is past the model's {num_tokens} tokens")
        mask[i, idx] = True
    return mask
