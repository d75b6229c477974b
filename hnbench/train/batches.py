"""Training batches: one global, seeded batch order shared by all ranks, split into rank slices.

Every rank draws the same permutation (the same seeded generator), so the *global* batch of B pairs
is identical to the single-process batch and rank r trains on its slice [r·b, (r+1)·b), b = B/W.
That is what makes a W-process run equal to the single-process run on the concatenated batch, and a
resumed run equal to an uninterrupted one (the sampler can skip already-trained batches without
loading their images).
"""

from __future__ import annotations

import collections
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import BatchSampler, RandomSampler, Sampler

from hnbench.errors import ConfigError

__all__ = ["EdgeItems", "GlobalBatchSampler", "PairItems", "PlannedSegment", "SegmentItems", "SegmentPlan",
           "group_positions", "subset_fraction"]


class PairItems(torch.utils.data.Dataset[tuple[torch.Tensor, int]]):
    """Image position → (pixels, position)."""

    def __init__(self, source: Any, transform: Any):
        self.source, self.transform = source, transform

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return self.transform(self.source.open(i)), i


@dataclass(frozen=True)
class PlannedSegment:
    """One usable segment of an image: its box (image pixels) in an image of ``image_size``, the position of
    the long caption its spans index, its sentence, and the sentence's token span [a, b) in that caption."""

    box: tuple[float, float, float, float]
    image_size: tuple[int, int]
    caption: int
    sentence: str
    span: tuple[int, int]


@dataclass
class SegmentPlan:
    """Each image's usable segments (best first) and the rule that picks one per epoch: ``best`` (GOAL's top-1)
    or ``random`` (seeded by the run's seed, the epoch and the image position: any rank, any loader worker,
    a resumed run pick the same)."""

    segments: list[list[PlannedSegment]]
    choice: str = "best"
    seed: int = 0

    def pick(self, i: int, epoch: int) -> PlannedSegment:
        segs = self.segments[i]
        if self.choice == "best" or len(segs) == 1:
            return segs[0]
        return segs[int(np.random.default_rng([self.seed, 22, epoch, i]).integers(len(segs)))]

    @classmethod
    def build(cls, sidecar: Any, ds: Any, encode: Callable[[str], Sequence[int]], context_length: int, *,
              choice: str = "best", seed: int = 0) -> SegmentPlan:
        """From a checked :class:`~hnbench.sidecars.segments.SegmentSidecar` of ``ds``: segments whose sentence
        survives the caption's truncation to ``context_length`` tokens; an image left with none is refused."""
        from hnbench.sidecars.segments import token_span

        caption_of: dict[tuple[int, str], int] = {}
        for j, (text, k) in enumerate(zip(ds.captions, ds.caption_image.tolist())):
            caption_of.setdefault((int(k), text), j)
        plan = []
        for i, entry in enumerate(sidecar.per_image(ds)):
            assert entry is not None and entry.segments, "checked before the model loaded (require_segments)"
            keep = []
            for s in entry.segments:
                span = token_span(entry.caption, s.char_span, encode, context_length=context_length)
                if span is not None:
                    keep.append(PlannedSegment(s.box, (entry.width, entry.height), caption_of[(i, entry.caption)],
                                               s.sentence, span))
            if not keep:
                raise ConfigError(f"image {entry.id!r}: every segment's sentence lies past the {context_length}-token "
                                  "context of its caption (truncated away): a longer context (--stretch-context) or "
                                  "a sidecar with earlier sentences")
            plan.append(keep)
        return cls(plan, choice, seed)


class SegmentItems(PairItems):
    """Image position → (pixels, position, the pixels of its segment's crop this epoch); set :attr:`epoch`
    before each pass (loader workers start with the dataset's state at each pass)."""

    def __init__(self, source: Any, transform: Any, plan: SegmentPlan, margin: float = 0.0):
        super().__init__(source, transform)
        self.plan, self.margin, self.epoch = plan, margin, 0

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int, torch.Tensor]:  # type: ignore[override]
        from hnbench.sidecars.segments import crop_box

        image = self.source.open(i)
        crop = crop_box(image, self.plan.pick(i, self.epoch).box, self.margin)
        return self.transform(image), i, self.transform(crop)


class EdgeItems(PairItems):
    """Image position → (pixels, position, its edge map's pixels, (K, 3, H, W) the edge map cropped at its first K
    ``boxes`` (black where it has fewer), (K,) which crops are real) — StructXLIP's inputs, through ``transform``."""

    def __init__(self, source: Any, transform: Any, edges: Any, boxes: list[list[Any]], k: int):
        super().__init__(source, transform)
        self.edges, self.boxes, self.k = edges, boxes, k

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int, torch.Tensor, torch.Tensor, torch.Tensor]:  # type: ignore[override]
        from PIL import Image

        from hnbench.sidecars.segments import crop_box

        edge = self.edges.open(i)
        boxes = self.boxes[i][:self.k]
        blank = self.transform(Image.new("RGB", edge.size))
        crops = [self.transform(crop_box(edge, box)) for box in boxes] + [blank] * (self.k - len(boxes))
        valid = torch.arange(self.k) < len(boxes)
        return self.transform(self.source.open(i)), i, self.transform(edge), torch.stack(crops), valid


class GlobalBatchSampler(Sampler[list[int]]):
    """Shuffled global batches of ``batch_size`` positions (``RandomSampler`` + ``BatchSampler`` on
    ``generator``), yielding this rank's slice of each. With ``groups``, whole groups are shuffled and
    kept together (hard negatives in every batch).

    With one rank this draws exactly what ``DataLoader(shuffle=True, generator=g)`` draws. Each
    yielded global batch is also appended to :attr:`issued` (a FIFO the consumer pops from, in order,
    as the loader delivers batches: the loader may prefetch ahead). ``skip`` drops the first batches
    of the next pass (resuming mid-epoch) without touching their images.
    """

    def __init__(self, n: int, batch_size: int, *, drop_last: bool, generator: torch.Generator,
                 rank: int = 0, world_size: int = 1, groups: list[list[int]] | None = None) -> None:
        if batch_size % world_size:
            raise ConfigError(f"batch_size {batch_size} (the global batch) must be divisible by the "
                              f"number of processes {world_size}")
        if world_size > 1 and n < batch_size:
            raise ConfigError(f"{n} training images are fewer than one global batch of {batch_size}")
        drop_last = drop_last or world_size > 1
        self.inner: Any = (BatchSampler(RandomSampler(range(n), generator=generator), batch_size, drop_last=drop_last)
                           if groups is None else _GroupedBatches(groups, batch_size, drop_last, generator))
        self.local = batch_size // world_size
        self.rank, self.world_size = rank, world_size
        self.skip = 0
        self.issued: collections.deque[list[int]] = collections.deque()

    def __len__(self) -> int:
        return len(self.inner)

    def __iter__(self) -> Iterator[list[int]]:
        skip, self.skip = self.skip, 0
        self.issued.clear()
        for k, batch in enumerate(self.inner):
            if k < skip:
                continue
            self.issued.append(batch)
            yield batch if self.world_size == 1 else batch[self.rank * self.local:(self.rank + 1) * self.local]


class _GroupedBatches:
    """Shuffle whole groups (e.g. synthdense families), concatenate their members, cut into batches."""

    def __init__(self, groups: list[list[int]], batch_size: int, drop_last: bool, generator: torch.Generator):
        self.groups, self.batch_size, self.drop_last, self.generator = groups, batch_size, drop_last, generator
        self.n = sum(len(g) for g in groups)

    def __len__(self) -> int:
        return self.n // self.batch_size if self.drop_last else -(-self.n // self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        order = torch.randperm(len(self.groups), generator=self.generator).tolist()
        flat = [i for k in order for i in self.groups[k]]
        for start in range(len(self)):
            yield flat[start * self.batch_size:(start + 1) * self.batch_size]


def group_positions(image_ids: list[str], pattern: str) -> list[list[int]]:
    """Image positions grouped by the first capture group (or the whole match) of ``pattern`` on the id."""
    try:
        rx = re.compile(pattern)
    except re.error as e:
        raise ConfigError(f"group_by: invalid regular expression {pattern!r} ({e})") from e
    groups: dict[str, list[int]] = {}
    for i, image_id in enumerate(image_ids):
        m = rx.search(image_id)
        key = (m.group(1) if m.groups() else m.group(0)) if m else image_id
        groups.setdefault(key, []).append(i)
    return list(groups.values())


def subset_fraction(ds: Any, fraction: float, seed: int) -> Any:
    """Keep a seeded random ``fraction`` of the images (and their captions): the paper's 20% runs."""
    if not 0 < fraction <= 1:
        raise ConfigError(f"data_fraction must be in (0, 1], got {fraction}")
    if fraction == 1:
        return ds
    n = ds.n_images
    keep = max(1, round(fraction * n))
    rng = np.random.default_rng([seed, 20])  # its own stream: the training RNGs are untouched
    kept = set(rng.choice(n, size=keep, replace=False).tolist())
    return ds.drop_images([i for i in range(n) if i not in kept], reason=f"data_fraction={fraction}")
