"""Argument checks shared by the CLI and the Python API, run before any model or data is loaded.

Each check raises :class:`~hnbench.errors.ConfigError` with one line naming the option, so a bad
value costs nothing: no download, no encoding, nothing written.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import numbers
import operator
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TypeGuard

from hnbench.errors import ConfigError

logger = logging.getLogger(__name__)

# Weight precisions an evaluation accepts (open_clip's names; the pixels are cast to match).
PRECISIONS = ("fp32", "fp16", "bf16")
BACKENDS = ("auto", "torch", "faiss", "faiss-gpu")  # exact search: auto picks per search (hnbench.search.exact)
SEARCHES = ("exact", "approximate")
MODEL_FORMATS = ("text", "md", "csv", "json")  # what `hnbench models --format` prints (hnbench.models.zoo)
DEFAULT_KS = (1, 5, 10)  # the recall cut-offs R@K of eval, compare and the published numbers (hnbench.metrics,
# which imports nothing of hnbench, repeats it as its default)
_DEVICE = re.compile(r"^(cpu|mps|cuda(:\d+)?)$")


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_at_least(name: str, value: object, low: int) -> None:
    """``value`` is an integer >= ``low`` (the bound a settings field declares with ``option(minimum=)``)."""
    if _is_int(value) and value >= low:
        return
    what = {0: "0 or more", 1: "a positive integer"}.get(low, f"an integer >= {low}")
    raise ConfigError(f"{name} must be {what}, got {value!r}")


def _is_real(value: object) -> TypeGuard[float]:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_number(name: str, value: object, *, minimum: float | None = None, above: float | None = None,
                 maximum: float | None = None, below: float | None = None) -> None:
    """``value`` is a finite number within the bounds a float settings field declares with ``option(...)``:
    ``minimum``/``maximum`` inclusive, ``above``/``below`` exclusive (no bound: any finite number)."""
    bounds = [(b, sign, test) for b, sign, test in ((minimum, ">=", operator.ge), (above, ">", operator.gt),
                                                    (maximum, "<=", operator.le), (below, "<", operator.lt))
              if b is not None]
    if _is_real(value) and math.isfinite(value) and all(test(value, b) for b, _, test in bounds):
        return
    if len(bounds) == 2:  # a range: [0, 1), (0, 1]
        (low, low_sign, _), (high, high_sign, _) = bounds
        what = f" in {'[' if low_sign == '>=' else '('}{low:g}, {high:g}{']' if high_sign == '<=' else ')'}"
    else:
        what = "".join(f" {sign} {b:g}" for b, sign, _ in bounds)
    raise ConfigError(f"{name} must be a finite number{what}, got {value!r}")


def check_edges(edges: Sequence[float]) -> list[float]:
    """Similarity bucket edges (hardness): at least two increasing numbers; returned as floats."""
    e = [float(v) for v in edges]
    if len(e) < 2 or any(b <= a for a, b in zip(e, e[1:])):
        raise ValueError(f"bucket edges must be at least two increasing numbers, got {list(edges)}")
    return e


def check_ks(ks: Sequence[int]) -> None:
    """Recall cut-offs: at least one, each a positive integer."""
    if not len(ks):
        raise ConfigError("--k needs at least one recall cut-off")
    for k in ks:
        if not _is_int(k) or k < 1:
            raise ConfigError(f"--k values must be positive integers (R@K needs K >= 1), got {k!r}")


def check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise ConfigError(f"--precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")


def check_device_name(device: str) -> None:
    """cpu, cuda, cuda:N or mps (the spelling only: a recipe may name a device this machine lacks)."""
    if not isinstance(device, str) or not _DEVICE.match(device):
        raise ConfigError(f"--device must be cpu, cuda, cuda:N or mps, got {device!r}")


def check_device(device: str) -> None:
    """cpu, cuda, cuda:N or mps, and the accelerator must be there."""
    check_device_name(device)
    if device == "cpu":
        return
    import torch  # only for an accelerator: settings (and so the CLI) validate without importing torch

    if device == "mps":
        if not torch.backends.mps.is_available():
            raise ConfigError("--device mps: no Apple MPS device is available; use --device cpu")
        return
    if not torch.cuda.is_available():
        raise ConfigError(f"--device {device}: no CUDA GPU is visible to torch "
                          f"(torch {torch.__version__}, CUDA build {torch.version.cuda}); use --device cpu")
    index = int(device.partition(":")[2] or 0)
    if index >= torch.cuda.device_count():
        raise ConfigError(f"--device {device}: only {torch.cuda.device_count()} CUDA device(s) are visible")


def check_output_dir(path: str | Path | None, option: str = "--output") -> None:
    """``path`` is (or can become) a directory we can write in; probes with a nameless temporary file."""
    if path is None:
        return
    path = Path(path)
    existing = path
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if not existing.is_dir():
        what = "is a file" if existing == path else f"lies under {existing}, which is a file"
        raise ConfigError(f"{option} {path}: {what}, not a directory")
    try:
        with tempfile.TemporaryFile(dir=existing):  # unlinked at once: nothing is left behind
            pass
    except OSError as e:
        raise ConfigError(f"{option} {path}: cannot write in {existing} ({e.strerror or e})") from e


def check_model_config_name(model: object, model_config: object) -> None:
    """With ``--model-config`` the model name is the architecture it registers (a file name in open_clip's
    config registry): no path separator in it."""
    if model_config is None or not isinstance(model, str):
        return
    if "/" in model or "\\" in model:
        raise ConfigError(f"--model {model!r} with --model-config: the name is the architecture the config "
                          f"registers and cannot hold '/' or '\\'; name it e.g. {model.replace('/', '-')!r}")


def warn_trivial_ks(ks: Sequence[int], n_images: int, n_captions: int) -> None:
    """Warn of a cut-off K at or above a direction's gallery size: every query then finds a positive in
    its top K, so that R@K is 100 by construction and says nothing."""
    trivial = [f"R@{k} text→image ({n_images} images)" for k in ks if k >= n_images]
    trivial += [f"R@{k} image→text ({n_captions} captions)" for k in ks if k >= n_captions]
    if trivial:
        logger.warning("%s: K is at least the gallery size, so R@K is 100 by construction; choose a smaller "
                       "--k", ", ".join(trivial))


def check_eval(*, ks: Sequence[int], device: str, output_dir: str | Path | None, backend: str = "auto") -> None:
    """The evaluation settings beyond what their fields declare (bounds, choices), before anything is loaded."""
    check_ks(ks)
    check_device(device)
    if backend in ("faiss", "faiss-gpu") and importlib.util.find_spec("faiss") is None:
        raise ConfigError(f"--backend {backend} needs faiss, which is not installed (pip install faiss-cpu); "
                          "use --backend torch or auto")
    if backend == "faiss-gpu" and not device.startswith("cuda"):
        raise ConfigError(f"--backend faiss-gpu searches on a CUDA device; with --device {device} use --backend "
                          "faiss, torch or auto")
    check_output_dir(output_dir)
