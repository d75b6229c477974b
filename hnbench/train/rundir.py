"""A training run's folder: what a run may write there, the manifest of what it did write, and its lock.

``RUN/.hnbench-run.json`` lists the entries of ``RUN_OUTPUTS`` a run wrote into the folder (recorded
before each is written, so an interrupted run's partial output is listed too); ``--overwrite`` removes
those entries and nothing else, so a user's files, and entries of those names that no recorded run
wrote, are never removed. ``RUN/.hnbench-run.lock`` is held with ``fcntl.flock`` while a run uses the
folder: a second run is refused, and since the OS drops the lock when its process dies, a killed run
never leaves a stale lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from hnbench.errors import ConfigError
from hnbench.io import atomic_write_bytes

__all__ = ["LOCK", "MANIFEST", "RUN_OUTPUTS", "check_run_dir", "run_outputs", "claim", "clear_recorded", "locked", "recorded"]

# What a run writes into its output directory (the only names its manifest may list), beside its model family's
# export (:func:`run_outputs`).
RUN_OUTPUTS = ("last", "eval", "adapter", "hf_model", "checkpoint.safetensors", "log.jsonl", "diagnostics.jsonl",
               "train_config.json", "objective_modules.safetensors")


def run_outputs() -> tuple[str, ...]:
    """:data:`RUN_OUTPUTS` and every registered model family's export entries."""
    from hnbench.models.family import export_names

    return tuple(dict.fromkeys(RUN_OUTPUTS + export_names()))
MANIFEST = ".hnbench-run.json"
LOCK = ".hnbench-run.lock"


def recorded(run_dir: Path) -> set[str]:
    """The entries the manifest of ``run_dir`` says a run wrote (empty without a readable manifest)."""
    try:
        outputs = json.loads((run_dir / MANIFEST).read_text()).get("outputs", [])
    except (OSError, ValueError, AttributeError):
        return set()
    allowed = run_outputs()
    return {name for name in outputs if name in allowed} if isinstance(outputs, list) else set()


def claim(run_dir: Path, *names: str) -> None:
    """Record ``names`` (entries of :func:`run_outputs`) in the manifest before the run writes them."""
    assert set(names) <= set(run_outputs()), names
    have = recorded(run_dir)
    if not set(names) <= have:
        atomic_write_bytes(run_dir / MANIFEST, (json.dumps({"format": 1, "outputs": sorted(have | set(names))},
                                                           indent=1) + "\n").encode())


def clear_recorded(run_dir: Path) -> list[str]:
    """``--overwrite``: remove the entries the manifest lists (nothing else) and empty it; returns their names."""
    removed = []
    for name in sorted(recorded(run_dir)):
        path = run_dir / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
        else:
            continue
        removed.append(name)
    atomic_write_bytes(run_dir / MANIFEST, (json.dumps({"format": 1, "outputs": []}, indent=1) + "\n").encode())
    return removed


def _held(run_dir: Path) -> bool:
    """Whether a live process holds the lock of ``run_dir`` (probed without creating anything)."""
    try:
        fd = os.open(run_dir / LOCK, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing releases a lock the probe took
    return False


def _in_use(run_dir: Path) -> ConfigError:
    return ConfigError(f"--output {run_dir} is in use by another hnbench train (it holds {run_dir / LOCK}); wait "
                       "for it to finish, or choose another --output")


@contextlib.contextmanager
def locked(run_dir: Path, *, resume: bool, overwrite: bool) -> Iterator[None]:
    """Hold the lock of ``run_dir`` (created if need be) for the ``with`` block: refused if another run holds
    it; the folder's contents are checked again (:func:`check_run_dir`) once it is held."""
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(run_dir / LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _in_use(run_dir) from None
        _check_contents(run_dir, resume=resume, overwrite=overwrite)  # another run may have used it meanwhile
        yield
    finally:
        os.close(fd)


def check_run_dir(run_dir: Path, *, resume: bool, overwrite: bool) -> None:
    """Refuse a folder in use by another run, a non-empty one without ``resume``/``overwrite``, and under
    ``overwrite`` one holding entries of a run's names that no recorded run wrote (they would be mixed
    with this run's). Writes nothing: call it before :func:`locked` makes the lock file."""
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError(f"--output {run_dir} is a file, not a run directory")
    if run_dir.is_dir():
        if _held(run_dir):
            raise _in_use(run_dir)
        _check_contents(run_dir, resume=resume, overwrite=overwrite)


def _check_contents(run_dir: Path, *, resume: bool, overwrite: bool) -> None:
    if resume or not any(p.name != LOCK for p in run_dir.iterdir()):
        return
    if not overwrite:
        raise ConfigError(f"--output {run_dir} is not empty (an earlier run?): pass --resume to continue it, "
                          "--overwrite to replace it, or another --output")
    mine = recorded(run_dir)
    foreign = [n for n in run_outputs() if n not in mine and ((run_dir / n).exists() or (run_dir / n).is_symlink())]
    if foreign:
        raise ConfigError(f"--output {run_dir}: --overwrite removes only what a recorded run wrote, and no run "
                          f"manifest ({MANIFEST}) lists {', '.join(foreign)}: move them away or choose another "
                          "--output")
