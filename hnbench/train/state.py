"""Resumable training state and the final checkpoints of a run.

``RUN/last/`` holds everything an interrupted run needs to continue bit-for-bit: the trainable
module's weights (``model.safetensors``) and ``trainer_state.pt`` (optimizer, grad scaler, step,
epoch, position inside the epoch, the loader generator's state at the epoch start, the numpy /
python / torch RNG states, and the epoch's diagnostics so far). It is written atomically (a temp
directory renamed into place) every ``save_every`` steps, at each epoch end and when a run stops.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import shlex
import shutil
import signal
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import save_file

from hnbench.errors import CheckpointError, ConfigError
from hnbench.io import atomic_write_bytes, follow_umask, human_bytes
from hnbench.models.checkpoint import load_into, load_torch, read_state_dict
from hnbench.registry import OBJECTIVES
from hnbench.settings import resume_free
from hnbench.train.config import TrainConfig, options_class, upgrade
from hnbench.train.rundir import LOCK

logger = logging.getLogger(__name__)

__all__ = ["WRITE_ERRORS", "TrainState", "check_resume_config", "load_state", "resolve_resume", "resume_hint", "save_state",
           "write_failed"]

STATE_DIR = "last"
# Options that may differ between an interrupted run and its continuation (they do not touch the weights):
# the TrainConfig fields declared ``resume_free``.
RESUME_FREE = resume_free(TrainConfig)


@dataclass
class TrainState:
    """Counters and RNG state at an optimizer-step boundary."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0  # micro-batches of ``epoch`` already trained
    epoch_generator_state: torch.Tensor | None = None
    epoch_records: list[dict[str, Any]] = field(default_factory=list)
    epoch_losses: list[float] = field(default_factory=list)
    seconds: float = 0.0


def _rng_state(np_rng: np.random.Generator) -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "numpy": np_rng.bit_generator.state, "python": random.getstate(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}


def _set_rng_state(saved: dict[str, Any], np_rng: np.random.Generator) -> None:
    torch.set_rng_state(saved["torch"])
    np_rng.bit_generator.state = saved["numpy"]
    random.setstate(saved["python"])
    if saved.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(saved["cuda"])


def save_state(run_dir: Path, module: torch.nn.Module, optimizer: torch.optim.Optimizer, scaler: Any,
               state: TrainState, np_rng: np.random.Generator, config: dict[str, Any]) -> Path:
    """Write ``run_dir/last`` atomically; returns it."""
    final = run_dir / STATE_DIR
    tmp = run_dir / f".{STATE_DIR}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
        save_file({k: v.detach().cpu().contiguous() for k, v in module.state_dict().items()},
                  str(tmp / "model.safetensors"))
        follow_umask(tmp / "model.safetensors")
        torch.save({
            "step": state.step, "epoch": state.epoch, "batch_in_epoch": state.batch_in_epoch,
            "epoch_generator_state": state.epoch_generator_state, "epoch_records": state.epoch_records,
            "epoch_losses": state.epoch_losses, "seconds": state.seconds,
            "optimizer": optimizer.state_dict(), "scaler": scaler.state_dict() if scaler is not None else None,
            "rng": _rng_state(np_rng),
        }, tmp / "trainer_state.pt")
        (tmp / "train_config.json").write_text(json.dumps(config, indent=2) + "\n")
    except BaseException as e:  # disk full, quota, I/O error, Ctrl-C: no half state left filling the disk
        free = shutil.disk_usage(run_dir).free  # before the clean-up gives the space back
        shutil.rmtree(tmp, ignore_errors=True)
        if not isinstance(e, WRITE_ERRORS):
            raise
        kept = (f"the previous state ({_saved_step(final)}) is kept" if (final / "trainer_state.pt").is_file()
                else "no earlier state was saved")
        raise write_failed(f"the resumable state in {final}", e, free, kept) from e
    old = run_dir / f".{STATE_DIR}.old-{os.getpid()}"
    with _signals_held():  # a Ctrl-C between the two renames would leave no state at all
        if final.exists():
            os.replace(final, old)
        os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)
    return final


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM held back (delivered when the block ends) where this thread can block them."""
    held = {signal.SIGINT, signal.SIGTERM}
    try:
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    except (AttributeError, OSError, ValueError):  # no pthread_sigmask on this platform
        yield
        return
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


# What a failed write raises: the OS error, or torch's / safetensors' wrapping of it.
WRITE_ERRORS = (OSError, RuntimeError, SafetensorError)


def write_failed(what: str, error: BaseException, free: int, kept: str) -> CheckpointError:
    """The one line for a run's write that failed (disk full, quota, I/O error), once its partial file is gone."""
    return CheckpointError(f"cannot save {what} ({str(error).splitlines()[0][:160]}; {human_bytes(free)} free on "
                           f"its disk): {kept}; free some space, then continue with --resume")


def _saved_step(state_dir: Path) -> str:
    """``step N`` of the state in ``state_dir`` (for messages; "an earlier step" if it cannot be read)."""
    try:
        saved = load_torch(state_dir / "trainer_state.pt")
        return f"step {saved['step']}" if isinstance(saved, dict) else "an earlier step"
    except (CheckpointError, KeyError):
        return "an earlier step"


def resume_hint(run_dir: Path) -> str:
    """How to go on after a run in ``run_dir`` was interrupted (the Ctrl-C line): ``--resume`` from the state it
    saved last, or, where it saved none, start again (``--overwrite`` where the folder was left non-empty)."""
    state = run_dir / STATE_DIR
    if (state / "trainer_state.pt").is_file():
        return (f"its state at {_saved_step(state)} is saved in {state}: continue with --resume "
                f"{shlex.quote(str(run_dir))} (and the same options)")
    when = "a state is saved at each epoch end and every --save-every steps"
    if run_dir.is_dir() and any(p.name != LOCK for p in run_dir.iterdir()):
        return f"no resumable state was saved yet ({when}): start again with --overwrite"
    return f"no resumable state was saved yet ({when}): start it again"


def resolve_resume(path: str | Path) -> Path:
    """A run directory or its ``last/`` directory → the state directory."""
    p = Path(path)
    for cand in (p / STATE_DIR, p):
        if (cand / "trainer_state.pt").is_file():
            return cand
    raise CheckpointError(f"no resumable state in {p} (expected {p / STATE_DIR / 'trainer_state.pt'})")


def _by_option(config: dict[str, Any]) -> dict[str, Any]:
    """A config's fields with its objective's options as ``<objective>.<option>`` keys (compared one by one)."""
    out = {k: v for k, v in config.items() if k != "objective_options"}
    options = config.get("objective_options")
    out.update({f"{config.get('objective')}.{k}": v for k, v in options.items()} if isinstance(options, dict)
               else {"objective_options": options})
    return out


def _resume_free_options(objective: Any) -> frozenset[str]:
    """The options of ``objective`` declared ``resume_free``, as ``<objective>.<option>``."""
    if not isinstance(objective, str) or objective not in OBJECTIVES:
        return frozenset()
    return frozenset(f"{objective}.{name}" for name in resume_free(options_class(objective)))


def check_resume_config(saved: dict[str, Any], current: dict[str, Any]) -> None:
    """Refuse to continue a run with options that change what it trains (its objective's options each by
    name, ``finelip.margin``; those declared ``resume_free`` may change, as TrainConfig's fields)."""
    free = RESUME_FREE | _resume_free_options(current.get("objective"))
    saved, current = _by_option(saved), _by_option(current)
    diff = sorted(k for k in set(saved) | set(current)
                  if k not in free and saved.get(k) != current.get(k))
    if diff:
        details = "; ".join(f"{k}: {saved.get(k)!r} → {current.get(k)!r}" for k in diff[:6])
        raise ConfigError(f"cannot resume: the run was started with different options ({details})")


def _upgraded(started_with: dict[str, Any], state_dir: Path) -> dict[str, Any]:
    """The saved config in today's shape (:func:`hnbench.train.config.upgrade`: a run started before options
    were nested recorded every objective's flat)."""
    try:
        return upgrade(started_with)
    except ConfigError as e:
        raise CheckpointError(f"{state_dir / 'train_config.json'}: {e}; it records the options the run was started "
                              "with, so the run cannot be resumed") from None


def load_state(state_dir: Path, module: torch.nn.Module, optimizer: torch.optim.Optimizer, scaler: Any,
               np_rng: np.random.Generator, config: dict[str, Any]) -> TrainState:
    """Restore weights, optimizer, scaler and RNGs from ``state_dir``; returns the counters."""
    try:
        started_with = json.loads((state_dir / "train_config.json").read_text())
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{state_dir / 'train_config.json'}: unreadable ({e}); it records the options the "
                              "run was started with, so the run cannot be resumed") from None
    if isinstance(started_with, dict):  # a run started before last_batch existed trained drop_last's batches
        started_with.setdefault("last_batch", "drop")
        started_with = _upgraded(started_with, state_dir)  # its objective's options nested, as they are now
    check_resume_config(started_with, config)
    saved = load_torch(state_dir / "trainer_state.pt")  # weights only: a pickled object is refused in one line
    if not isinstance(saved, dict) or not {"step", "epoch", "batch_in_epoch", "optimizer", "rng"} <= set(saved):
        raise CheckpointError(f"{state_dir / 'trainer_state.pt'}: not a trainer state hnbench wrote")
    load_into(module, read_state_dict(state_dir / "model.safetensors"), f"resume state {state_dir}")
    optimizer.load_state_dict(saved["optimizer"])
    if scaler is not None and saved.get("scaler"):
        scaler.load_state_dict(saved["scaler"])
    _set_rng_state(saved["rng"], np_rng)
    logger.info("resuming from %s at step %d (epoch %d, batch %d)", state_dir, saved["step"], saved["epoch"],
                saved["batch_in_epoch"])
    return TrainState(step=saved["step"], epoch=saved["epoch"], batch_in_epoch=saved["batch_in_epoch"],
                      epoch_generator_state=saved["epoch_generator_state"],
                      epoch_records=list(saved["epoch_records"]), epoch_losses=list(saved["epoch_losses"]),
                      seconds=float(saved.get("seconds", 0.0)))


def trim_jsonl(path: Path, keep: Any) -> None:
    """Drop lines of a JSONL log for which ``keep(record)`` is false (log lines past a resume point)."""
    if not path.is_file():
        return
    lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
    atomic_write_bytes(path, "".join(ln + "\n" for ln in lines if keep(json.loads(ln))).encode())  # never a cut log
