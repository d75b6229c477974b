"""One distributed context for evaluation and training: rank, world size, device, timeout, collectives.

A :class:`DistContext` is made once per run by :func:`from_env` (``torchrun``'s ``WORLD_SIZE``, ``RANK``,
``LOCAL_RANK``) and passed down; a single process is rank 0 of 1 and every collective is then a no-op, so
callers write one code path. The trainer (:mod:`hnbench.train.trainer`), the HN loss
(:func:`hnbench.train.losses.hn_clip_loss`, which gathers features through :meth:`DistContext.gather`)
and data-parallel evaluation below all use it.

**Timeout policy.** Ranks regularly wait for rank 0 alone: while it scores an evaluation, writes a
result, or, in training, evaluates after an epoch and saves the checkpoint. Every process group hnbench
creates gets one timeout, ``HNBENCH_DIST_TIMEOUT_S`` seconds (default 6 hours, so a large model's
evaluation fits; see :func:`timeout_from_env`), and those waits (:meth:`DistContext.barrier`, the object
hand-overs) always go through a gloo group created with it: the default group when hnbench created it
with gloo, otherwise (NCCL on GPUs, or a group someone else set up with their own, possibly short,
timeout such as NCCL's 10-minute default) a separate gloo group. Tensor collectives (DDP, the feature
gather) use the default group.

**Data-parallel encoding.** Usage (one node, N processes; on GPUs rank r uses ``cuda:LOCAL_RANK``)::

    torchrun --nproc_per_node=N -m hnbench eval --model ... --dataset ... --output DIR [--device cuda]

:func:`hnbench.evaluation.evaluate.evaluate` switches to this mode by itself when ``WORLD_SIZE > 1`` and no process
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
group is gloo on CPU and ``cpu:gloo,cuda:nccl`` on GPUs.
"""

from __future__ import annotations

import datetime
import logging
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import numpy as np
import torch
import torch.distributed as torch_dist

from hnbench.errors import ConfigError, HnbenchError

logger = logging.getLogger(__name__)

T = TypeVar("T")
TIMEOUT_ENV = "HNBENCH_DIST_TIMEOUT_S"
DEFAULT_TIMEOUT = datetime.timedelta(hours=6)  # ranks wait for rank 0's evaluation and for the slowest encoder


class DistributedError(HnbenchError):
    """Another rank failed, or the ranks disagree about the model or the data."""


def timeout_from_env() -> datetime.timedelta:
    """The process-group timeout: ``HNBENCH_DIST_TIMEOUT_S`` seconds (a positive number), else 6 hours."""
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ConfigError(f"{TIMEOUT_ENV} must be a positive number of seconds, got {raw!r}")
    return datetime.timedelta(seconds=seconds)


@dataclass
class DistContext:
    """Where this process sits (rank, world size, device) and how it talks to the others; one process is 0 of 1."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: str = "cpu"
    group: Any = None  # gloo group, created with ``timeout``, for waits and object collectives (None: default)
    owns_process_group: bool = False
    timeout: datetime.timedelta = DEFAULT_TIMEOUT
    owns_group: bool = False  # ``group`` was created by this context (destroyed by :meth:`close`)

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        """Wait until every rank gets here (for up to ``timeout``: rank 0 may be evaluating meanwhile)."""
        if self.enabled:
            torch_dist.barrier(group=self.group)

    def all_gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order (a barrier too)."""
        if not self.enabled:
            return [obj]
        out: list[Any] = [None] * self.world_size
        torch_dist.all_gather_object(out, obj, group=self.group)
        return out

    def broadcast(self, obj: Any = None) -> Any:
        """Rank 0's ``obj`` on every rank."""
        if not self.enabled:
            return obj
        box = [obj]
        torch_dist.broadcast_object_list(box, src=0, group=self.group)
        return box[0]

    def gather(self, x: torch.Tensor, *, with_grad: bool = True) -> torch.Tensor:
        """Every rank's ``x`` (b, …) concatenated in rank order → (W·b, …); ``x`` itself for world size 1.

        ``with_grad`` keeps the autograd link: the backward hands this rank the sum over ranks of the
        gradient for its slice. Every rank must pass the same shape. Runs on the default group (NCCL on GPUs).
        """
        if not self.enabled:
            return x
        if with_grad:
            return cast(torch.Tensor, _GatherWithGrad.apply(x, self.rank, self.world_size))
        parts = [torch.empty_like(x) for _ in range(self.world_size)]
        torch_dist.all_gather(parts, x.detach().contiguous())
        return torch.cat(parts, dim=0)

    def mean(self, value: float) -> float:
        """The mean over ranks of a number (e.g. each rank's share of a loss), on every rank."""
        if not self.enabled:
            return value
        t = torch.tensor(value, dtype=torch.float64, device=self.device)
        torch_dist.all_reduce(t)
        return float(t) / self.world_size

    def close(self) -> None:
        """Destroy the process group if this context created it (and the gloo group it made for itself)."""
        if self.owns_process_group:
            torch_dist.destroy_process_group()
        elif self.owns_group and torch_dist.is_initialized():
            torch_dist.destroy_process_group(self.group)
        self.owns_process_group = self.owns_group = False


class _GatherWithGrad(torch.autograd.Function):
    """all_gather whose backward hands each rank the *sum* over ranks of the gradient for its slice.

    Every rank's local loss depends on every rank's features, so the gradient of Σ_r L_r w.r.t. this
    rank's features is the sum of all ranks' gradients for its slice: a reduce-scatter (NCCL), or an
    all-reduce followed by taking the slice (gloo has no reduce-scatter).
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, rank: int, world: int) -> torch.Tensor:
        ctx.rank, ctx.b = rank, x.shape[0]
        parts = [torch.empty_like(x) for _ in range(world)]
        torch_dist.all_gather(parts, x.contiguous())
        return torch.cat(parts, dim=0)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        grad = grad.contiguous()
        if grad.is_cuda and "nccl" in torch_dist.get_backend():
            out = torch.empty_like(grad[:ctx.b])
            torch_dist.reduce_scatter_tensor(out, grad)
            return out, None, None
        grad = grad.clone()
        torch_dist.all_reduce(grad)
        return grad[ctx.rank * ctx.b:(ctx.rank + 1) * ctx.b], None, None


def wanted(distributed: bool | None) -> bool:
    """Whether an evaluation runs data-parallel: ``True``/``False`` as asked; ``None`` (auto) when torchrun
    started several processes and nobody has set up a process group yet. A program that already has
    one (a trainer evaluating on rank 0 only) must opt in with ``True``, so that a call made by a
    single rank never waits for the others."""
    if distributed is not None:
        return distributed
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    return not _initialized()


def _initialized() -> bool:
    return torch_dist.is_available() and torch_dist.is_initialized()


def from_env(device: str = "cpu") -> DistContext:
    """The context torchrun describes (``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``), or the process group
    already set up: joins it or creates it with the timeout policy above; rank 0 of 1 on ``device`` when
    there is neither. Under torchrun ``cuda`` means this rank's GPU (see :func:`rank_device`)."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 and not _initialized():
        return DistContext(device=device)
    timeout = timeout_from_env()  # validated before a process group (or anything else) is set up
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    on_cuda = device.startswith("cuda")
    if on_cuda:
        torch.cuda.set_device(local_rank)
    owns = False
    if not torch_dist.is_initialized():
        torch_dist.init_process_group("cpu:gloo,cuda:nccl" if on_cuda else "gloo", timeout=timeout)
        owns = True
    # Waits for rank 0 go through gloo with our timeout: not through NCCL (its watchdog), nor through a
    # group someone else set up, whose timeout we do not know.
    own_group = not (owns and torch_dist.get_backend() == "gloo")
    group = torch_dist.new_group(backend="gloo", timeout=timeout) if own_group else None
    ctx = DistContext(rank=torch_dist.get_rank(), world_size=torch_dist.get_world_size(), local_rank=local_rank,
                      group=group, owns_process_group=owns, timeout=timeout, owns_group=own_group)
    ctx.device = rank_device(device, ctx)
    logger.info("distributed: rank %d of %d on %s (timeout %s)", ctx.rank, ctx.world_size, ctx.device, timeout)
    return ctx


def default_group() -> DistContext:
    """The context of a default process group someone else set up (rank 0 of 1 if none); creates nothing."""
    if not _initialized():
        return DistContext()
    return DistContext(torch_dist.get_rank(), torch_dist.get_world_size())


def rank_device(device: str, ctx: DistContext) -> str:
    """A CUDA device means this rank's GPU (``cuda:LOCAL_RANK``) under torchrun; anything else is kept."""
    return f"cuda:{ctx.local_rank}" if ctx.enabled and device.startswith("cuda") else device


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
    return cast(T, value)


def default_num_workers(device: torch.device | str | None = None) -> int:
    """Decoding/tokenizing workers when not given (evaluation's encoder, training's loader): one per core (at
    most 8) beside an accelerator, but on the CPU only the cores torch's forward leaves free — there workers
    would slow the forward they feed (on 2 cores, 2 workers made a cold hnbench-tiny evaluate ~25% slower;
    benchmarks/README.md)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if device is not None and torch.device(device).type == "cpu":
        cores -= torch.get_num_threads()
    return max(0, min(8, cores))
