"""Data-parallel encoding with ``torchrun``: every rank encodes a share into the cache, rank 0 scores.

Usage (one node, N processes; on GPUs rank r uses ``cuda:LOCAL_RANK``)::

    torchrun --nproc_per_node=N -m hnbench eval --model ... --dataset ... --output DIR [--device cuda]

:func:`hnbench.evaluate.evaluate` switches to this mode by itself when ``WORLD_SIZE > 1`` and no process
group exists yet (``distributed=True`` asks for it inside a program that set one up; see :func:`wanted`):

1. every rank loads the same dataset and model (checked: the dataset and model fingerprints must agree);
2. rank r encodes image batches r, r+N, r+2N, … and caption batches likewise — the very batches a
   single process would form, so the vectors are the ones one process computes — writing them to
   the embedding cache as shards;
3. a collective gathers every rank's status (a failure on any rank is raised on all of them);
4. rank 0 reads everything back from the cache, searches, computes metrics and writes the result,
   which it then broadcasts so ``evaluate`` returns it on every rank.

The cache is the hand-over, so with several nodes ``--cache-dir`` must be on a shared file system.
With ``--no-cache`` a private cache directory is used for the run and deleted after it. The process
group is gloo on CPU and ``cpu:gloo,cuda:nccl`` on GPUs; the hand-over itself only needs small
object collectives, which always go through gloo.
"""

from __future__ import annotations

import datetime
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from hnbench.errors import HnbenchError

logger = logging.getLogger(__name__)

T = TypeVar("T")
TIMEOUT = datetime.timedelta(hours=6)  # ranks wait for the slowest one's share of the encoding


class DistributedError(HnbenchError):
    """Another rank failed, or the ranks disagree about the model or the data."""


@dataclass
class DistContext:
    """Rank and world size of this process; a single process is rank 0 of 1."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    group: Any = None  # gloo group for object collectives
    owns_process_group: bool = False

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def all_gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order (a barrier too)."""
        if not self.enabled:
            return [obj]
        import torch.distributed as dist

        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj, group=self.group)
        return out

    def broadcast(self, obj: Any = None) -> Any:
        """Rank 0's ``obj`` on every rank."""
        if not self.enabled:
            return obj
        import torch.distributed as dist

        box = [obj]
        dist.broadcast_object_list(box, src=0, group=self.group)
        return box[0]

    def close(self) -> None:
        """Destroy the process group if this context created it."""
        if self.owns_process_group:
            import torch.distributed as dist

            dist.destroy_process_group()
            self.owns_process_group = False


def wanted(distributed: bool | None) -> bool:
    """Whether an evaluation runs data-parallel: ``True``/``False`` as asked; ``None`` (auto) when torchrun
    started several processes and nobody has set up a process group yet. A program that already has
    one (a trainer evaluating on rank 0 only) must opt in with ``True``, so that a call made by a
    single rank never waits for the others."""
    if distributed is not None:
        return distributed
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    import torch.distributed as dist

    return not (dist.is_available() and dist.is_initialized())


def from_env(device: str = "cpu") -> DistContext:
    """The context torchrun describes (``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``); joins or creates the group."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return DistContext()
    import torch
    import torch.distributed as dist

    owns = False
    if not dist.is_initialized():
        on_cuda = torch.device(device).type == "cuda"
        if on_cuda:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("cpu:gloo,cuda:nccl" if on_cuda else "gloo", timeout=TIMEOUT)
        owns = True
    group = None if dist.get_backend() == "gloo" else dist.new_group(backend="gloo", timeout=TIMEOUT)
    return DistContext(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")), group,
                       owns)


def rank_device(device: str, ctx: DistContext) -> str:
    """``cuda`` means this rank's GPU (``cuda:LOCAL_RANK``) under torchrun; anything else is kept."""
    return f"cuda:{ctx.local_rank}" if ctx.enabled and device == "cuda" else device


def batch_share(n: int, batch_size: int, rank: int, world_size: int) -> np.ndarray:
    """Positions of batches rank, rank + world_size, … of ``range(n)`` cut into ``batch_size`` batches."""
    starts = np.arange(rank * batch_size, n, world_size * batch_size)
    if not starts.size:
        return np.zeros(0, dtype=np.int64)
    return np.concatenate([np.arange(s, min(n, s + batch_size)) for s in starts]).astype(np.int64)


def check_same(ctx: DistContext, what: str, value: Any) -> None:
    """Raise on every rank unless all ranks hold the same ``value``."""
    values = ctx.all_gather(value)
    if any(v != values[0] for v in values):
        raise DistributedError(f"ranks disagree about the {what}: {values} (every rank must load the same "
                               "model weights and data; seed or load a checkpoint)")


def encode_share(ctx: DistContext, encode: Callable[[], dict[str, int]]) -> dict[str, int]:
    """Run this rank's share of the encoding, then gather: counts summed over ranks, or the failure."""
    error, counts = None, {}
    try:
        counts = encode()
    except Exception as e:  # every rank must reach the collective below, or the others hang
        error = e
    statuses = ctx.all_gather((None if error is None else f"{type(error).__name__}: {error}", counts))
    if error is not None:
        raise error
    for rank, (message, _) in enumerate(statuses):
        if message is not None:
            raise DistributedError(f"rank {rank} failed while encoding: {message}")
    return {key: sum(c.get(key, 0) for _, c in statuses) for key in counts}


def on_main(ctx: DistContext, fn: Callable[[], T]) -> T:
    """Run ``fn`` on rank 0 and hand its result, or its failure, to every rank."""
    if not ctx.enabled:
        return fn()
    if ctx.is_main:
        try:
            result = fn()
        except BaseException as e:
            ctx.broadcast(("error", f"{type(e).__name__}: {e}"))
            raise
        ctx.broadcast(("ok", result))
        return result
    status, value = ctx.broadcast()
    if status == "error":
        raise DistributedError(f"rank 0 failed: {value}")
    return value
