"""Batched encoding of images and captions into L2-normalised fp32 embeddings.

Images are decoded and transformed in DataLoader workers; the model runs under ``inference_mode``
with autocast only on CUDA and only when asked. A decoding failure is raised naming the image, or —
with ``skip_bad`` — recorded and the image left out later by the caller.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from hnbench.data.base import ImageSource
from hnbench.errors import ImageLoadError
from hnbench.models.base import Encoder

logger = logging.getLogger(__name__)


@dataclass
class ImageEmbeddings:
    vectors: np.ndarray  # (n, d) float32; rows of bad images are NaN
    bad: dict[int, str] = field(default_factory=dict)  # position -> reason
    seconds: float = 0.0


@dataclass
class TextEmbeddings:
    vectors: np.ndarray  # (n, d) float32
    lengths: np.ndarray  # (n,) tokens incl. start/end, before truncation
    context_length: int = 77
    seconds: float = 0.0

    @property
    def n_truncated(self) -> int:
        return int((self.lengths > self.context_length).sum())


class _ImageItems(torch.utils.data.Dataset):
    """Position → (position, pixels | None, error | None); never raises, so workers survive bad files."""

    def __init__(self, source: ImageSource, transform: Any, positions: Sequence[int]):
        self.source, self.transform, self.positions = source, transform, list(positions)

    def __len__(self) -> int:
        return len(self.positions)

    def __getitem__(self, k: int) -> tuple[int, torch.Tensor | None, str | None]:
        i = self.positions[k]
        try:
            return i, self.transform(self.source.open(i)), None
        except ImageLoadError as e:
            return i, None, e.reason
        except Exception as e:  # a transform failing on an odd image is the image's fault too
            return i, None, f"{type(e).__name__}: {e}"


def _collate(batch: list) -> tuple[list[int], torch.Tensor | None, list[tuple[int, str]]]:
    good = [(i, x) for i, x, err in batch if err is None]
    bad = [(i, err) for i, _, err in batch if err is not None]
    pixels = torch.stack([x for _, x in good]) if good else None
    return [i for i, _ in good], pixels, bad


def default_num_workers() -> int:
    return max(0, min(8, (os.cpu_count() or 1)))


def _autocast(device: torch.device, amp: bool) -> contextlib.AbstractContextManager:
    if amp and device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16)
    return contextlib.nullcontext()


def encode_images(
    encoder: Encoder,
    source: ImageSource,
    *,
    positions: Sequence[int] | None = None,
    batch_size: int = 64,
    num_workers: int | None = None,
    skip_bad: bool = False,
    amp: bool = False,
    progress: bool = True,
) -> ImageEmbeddings:
    """Encode images (all, or ``positions``) of ``source``; raises :class:`ImageLoadError` on a bad image
    unless ``skip_bad``."""
    start = time.perf_counter()
    positions = list(range(len(source))) if positions is None else list(positions)
    workers = default_num_workers() if num_workers is None else num_workers
    workers = min(workers, max(0, len(positions) // max(1, batch_size)))  # no pool for one batch
    loader = torch.utils.data.DataLoader(
        _ImageItems(source, encoder.image_transform, positions), batch_size=batch_size, shuffle=False,
        num_workers=workers, collate_fn=_collate, pin_memory=encoder.device.type == "cuda",
        persistent_workers=False,
    )
    out: np.ndarray | None = None
    bad: dict[int, str] = {}
    with tqdm(total=len(positions), desc="encode images", unit="img", disable=not progress) as bar:
        for idx, pixels, errors in loader:
            for i, reason in errors:
                if not skip_bad:
                    raise ImageLoadError(source.ids[i], source.describe(i), reason)
                bad[i] = reason
            if pixels is not None:
                with _autocast(encoder.device, amp):
                    feats = encoder.encode_images(pixels).float().cpu().numpy()
                if out is None:
                    out = np.full((len(source), feats.shape[1]), np.nan, dtype=np.float32)
                out[idx] = feats
            bar.update(len(idx) + len(errors))
    if out is None:
        out = np.full((len(source), encoder.info.embed_dim), np.nan, dtype=np.float32)
    if bad:
        logger.warning("%d unreadable images skipped, e.g. %s: %s", len(bad), source.ids[next(iter(bad))],
                       next(iter(bad.values())))
    return ImageEmbeddings(out, bad, time.perf_counter() - start)


def encode_texts(
    encoder: Encoder,
    texts: Sequence[str],
    *,
    batch_size: int = 256,
    amp: bool = False,
    progress: bool = True,
) -> TextEmbeddings:
    """Tokenize (truncating as the model's tokenizer does) and encode captions."""
    start = time.perf_counter()
    tokenized = encoder.tokenize(texts)
    chunks = []
    for s in tqdm(range(0, len(texts), batch_size), desc="encode texts", unit="batch", disable=not progress):
        with _autocast(encoder.device, amp):
            chunks.append(encoder.encode_texts(tokenized.tokens[s:s + batch_size]).float().cpu().numpy())
    vectors = np.concatenate(chunks) if chunks else np.zeros((0, encoder.info.embed_dim), np.float32)
    return TextEmbeddings(vectors, tokenized.lengths, encoder.info.context_length, time.perf_counter() - start)
