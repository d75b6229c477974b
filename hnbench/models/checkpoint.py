"""Safe checkpoint reading: safetensors or ``torch.load(weights_only=True)``, never arbitrary pickles."""

from __future__ import annotations

import pickle
import zipfile
from collections.abc import Mapping
from pathlib import Path

import torch

from hnbench.errors import CheckpointError

_NESTED_KEYS = ("state_dict", "model", "model_state_dict", "module")


def load_torch(path: str | Path) -> object:
    """``torch.load(weights_only=True)`` of a ``.pt`` file; a pickled object or an unreadable file is one line."""
    try:
        return torch.load(str(path), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise CheckpointError(
            f"{path}: refused to unpickle: the file holds objects other than tensors and plain "
            f"containers ({str(e).splitlines()[0][:200]}). Convert it to safetensors from a trusted "
            f"environment.") from e
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError) as e:
        raise CheckpointError(f"{path}: not a readable torch checkpoint ({str(e).splitlines()[0][:200]})") from e


def read_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """Read a state dict from ``.safetensors``, ``.pt``/``.pth``/``.bin`` (weights-only), unwrapping
    open_clip training checkpoints (``state_dict`` key) and DDP ``module.`` prefixes."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    if path.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            obj: object = load_file(str(path), device="cpu")
        except (SafetensorError, OSError, ValueError) as e:
            raise CheckpointError(f"{path}: not a readable safetensors file ({e})") from e
    else:
        obj = load_torch(path)
    if isinstance(obj, Mapping):
        for key in _NESTED_KEYS:
            if key in obj and isinstance(obj[key], Mapping):
                obj = obj[key]
                break
    if not isinstance(obj, Mapping) or not obj:
        raise CheckpointError(f"{path}: no state dict found (got {type(obj).__name__})")
    sd = {str(k): v for k, v in obj.items() if isinstance(v, torch.Tensor)}
    if not sd:
        raise CheckpointError(f"{path}: the checkpoint holds no tensors")
    if all(k.startswith("module.") for k in sd):
        sd = {k[len("module."):]: v for k, v in sd.items()}
    return sd


def load_into(model: torch.nn.Module, state_dict: dict[str, torch.Tensor], source: str) -> None:
    """``load_state_dict(strict=True)`` with an error that names missing, unexpected and mis-shaped keys."""
    own = model.state_dict()
    missing = sorted(set(own) - set(state_dict))
    unexpected = sorted(set(state_dict) - set(own))
    shapes = sorted(k for k in set(own) & set(state_dict) if tuple(own[k].shape) != tuple(state_dict[k].shape))
    if missing or unexpected or shapes:
        parts = []
        if missing:
            parts.append(f"missing keys ({len(missing)}): {_short(missing)}")
        if unexpected:
            parts.append(f"unexpected keys ({len(unexpected)}): {_short(unexpected)}")
        if shapes:
            parts.append("shape mismatch: " + _short(
                [f"{k} {tuple(state_dict[k].shape)} vs model {tuple(own[k].shape)}" for k in shapes]))
        raise CheckpointError(f"{source} does not match the architecture: " + "; ".join(parts))
    model.load_state_dict(state_dict, strict=True)


def _short(items: list[str], n: int = 5) -> str:
    more = f", … (+{len(items) - n} more)" if len(items) > n else ""
    return ", ".join(items[:n]) + more
