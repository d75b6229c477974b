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
from torch.utils.data import RandomSampler, Sampler

from hnbench.errors import ConfigError

__all__ = ["LAST_BATCH", "EdgeItems", "GlobalBatchSampler", "PairItems", "PlannedSegment", "SegmentItems", "SegmentPlan",
           "batch_note", "epoch_batch_sizes", "group_positions", "subset_fraction"]


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


LAST_BATCH = ("keep", "drop")  # what an epoch does with the pairs past its last full batch (TrainConfig.last_batch)


def epoch_batch_sizes(n: int, batch_size: int, world_size: int = 1, last_batch: str = "keep") -> list[int]:
    """The sizes of one epoch's global batches over ``n`` images (the same every epoch; the order is reshuffled).

    ``keep`` uses every image: the last batch is smaller (the ``n mod batch_size`` left over), a lone left-over
    pair joins the batch before it (a batch of one pair has no negatives: its contrastive loss is a constant 0),
    and under ``world_size`` processes the last batch is cut to a multiple of them (every rank holds the same
    number of pairs in every step; the fewer than ``world_size`` cut pairs differ from epoch to epoch). ``drop``
    is ``drop_last``: every batch holds ``batch_size`` pairs and the rest of each epoch's order is not trained.
    Fewer images than one batch are one batch of them all (one process; several are refused).
    """
    if last_batch not in LAST_BATCH:
        raise ConfigError(f"last_batch must be one of {LAST_BATCH}, got {last_batch!r}")
    full, rest = divmod(n, batch_size)
    if full == 0:
        return [n]
    sizes = [batch_size] * full
    if last_batch == "drop":
        return sizes
    rest -= rest % world_size
    if rest == 1:  # one process: the lone pair joins the batch before it
        sizes[-1] += 1
    elif rest:
        sizes.append(rest)
    return sizes


def batch_note(n: int, batch_size: int, world_size: int = 1, last_batch: str = "keep") -> str | None:
    """One line saying what an epoch does with the images that do not fill a last batch (None where they all do)."""
    sizes = epoch_batch_sizes(n, batch_size, world_size, last_batch)
    skipped = n - sum(sizes)
    if n % batch_size == 0 or len(sizes) == 1 and sizes[0] == n < batch_size:
        return None
    head = f"{n} training images at --batch-size {batch_size}: "
    if last_batch == "drop":
        return (head + f"each epoch trains {_batches(len(sizes))} and skips the last {skipped} images of its "
                "shuffled order (--last-batch drop; --last-batch keep trains them in a smaller last batch)")
    if skipped:  # several processes: the last batch is a multiple of them
        last = f"a last batch of {sizes[-1]}" if sizes[-1] != batch_size else "no smaller last batch"
        return (head + f"each epoch trains {_batches(len(sizes))}, {last}; {skipped} images of each epoch's shuffled "
                f"order are skipped so that each of the {world_size} processes trains the same number of pairs")
    if sizes[-1] == batch_size + 1:
        return (head + f"the one image left over joins each epoch's last batch ({batch_size + 1} pairs: a batch of "
                "one pair has no negatives); every image is trained every epoch")
    return (head + f"each epoch's last batch has {sizes[-1]} pairs; every image is trained every epoch "
            "(--last-batch drop: only full batches)")


def _batches(k: int) -> str:
    return f"{k} batch{'' if k == 1 else 'es'}"


class GlobalBatchSampler(Sampler[list[int]]):
    """Shuffled global batches of the sizes :func:`epoch_batch_sizes` gives (the order ``RandomSampler`` draws
    on ``generator``), yielding this rank's slice of each. With ``groups``, whole groups are shuffled and
    kept together (hard negatives in every batch).

    With one rank and full batches this draws exactly what ``DataLoader(shuffle=True, generator=g)`` draws. Each
    yielded global batch is also appended to :attr:`issued` (a FIFO the consumer pops from, in order,
    as the loader delivers batches: the loader may prefetch ahead). ``skip`` drops the first batches
    of the next pass (resuming mid-epoch) without touching their images.
    """

    def __init__(self, n: int, batch_size: int, *, generator: torch.Generator, last_batch: str = "keep",
                 rank: int = 0, world_size: int = 1, groups: list[list[int]] | None = None) -> None:
        if batch_size % world_size:
            raise ConfigError(f"batch_size {batch_size} (the global batch) must be divisible by the "
                              f"number of processes {world_size}")
        if world_size > 1 and n < batch_size:
            raise ConfigError(f"{n} training images are fewer than one global batch of {batch_size}")
        self.n, self.generator, self.groups, self.last_batch = n, generator, groups, last_batch
        self.sizes = epoch_batch_sizes(n, batch_size, world_size, last_batch)
        self.rank, self.world_size = rank, world_size
        self.skip = 0
        self.issued: collections.deque[list[int]] = collections.deque()

    def __len__(self) -> int:
        return len(self.sizes)

    def record(self) -> dict[str, Any]:
        """What every epoch trains (a run's ``train_config.json`` keeps it): its batches, the last one's size and
        the images it leaves out."""
        return {"last_batch": self.last_batch, "batches": len(self.sizes), "last_batch_size": self.sizes[-1],
                "images": self.n, "images_skipped": self.n - sum(self.sizes)}

    def _order(self) -> list[int]:
        """This epoch's order of the image positions (one draw of the generator, as ``RandomSampler`` makes it)."""
        if self.groups is None:
            return list(RandomSampler(range(self.n), generator=self.generator))
        order = torch.randperm(len(self.groups), generator=self.generator).tolist()
        return [i for k in order for i in self.groups[k]]

    def __iter__(self) -> Iterator[list[int]]:
        skip, self.skip = self.skip, 0
        self.issued.clear()
        order, start = self._order(), 0
        for k, size in enumerate(self.sizes):
            batch, start = order[start:start + size], start + size
            if k < skip:
                continue
            self.issued.append(batch)
            local = size // self.world_size
            yield batch if self.world_size == 1 else batch[self.rank * local:(self.rank + 1) * local]


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
