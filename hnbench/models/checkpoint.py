"""Safe checkpoint reading: safetensors or ``torch.load(weights_only=True)``, never arbitrary pickles."""

from __future__ import annotations

import contextlib
import logging
import pickle
import zipfile
from collections.abc import Collection, Mapping
from pathlib import Path
from types import MappingProxyType

import torch

from hnbench.errors import CheckpointError, first_line

logger = logging.getLogger(__name__)

_NESTED_KEYS = ("state_dict", "model", "model_state_dict", "module")
# Key prefixes a released fine-tuning checkpoint adds to its CLIP weights, stripped from the keys that carry them
# (StructXLIP's ``retrieval.py`` reads ``clip_model.``-prefixed files this way).
_WRAPPER_PREFIXES = ("clip_model.",)

# Modules a framework trains beside CLIP that plain-cosine evaluation never uses, by key prefix → why: each family
# allow-lists the ones its releases carry (:attr:`hnbench.models.family.ModelFamily.training_only_keys`); they are
# dropped (one WARNING per module naming them) when the model has no such keys. Any other unexpected key is refused
# by :func:`load_into`.
FINELIP_CROSS_NET = {
    "cross_net.": "FineLIP's token aggregation module (its cross-modal late-interaction score, used only by "
                  "FineLIP's fused --finegrain re-scoring); plain-cosine eval scores the towers alone "
                  "(--scorer finelip-finegrained reads them from the file)",
}
SMARTCLIP_MASK_NET = {
    "mask_net.": "SmartCLIP's mask network (it selects the text-conditioned token masks during training); "
                 "plain-cosine eval scores the towers alone",
}
# A buffer, not a weight: HF CLIP's arange of positions; whether it is saved depends on the transformers version.
POSITION_IDS_SUFFIX = "embeddings.position_ids"


def load_torch(path: str | Path) -> object:
    """``torch.load(weights_only=True)`` of a ``.pt`` file; a pickled object or an unreadable (or empty) file is one
    line."""
    _check_not_empty(path)
    try:
        return torch.load(str(path), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise CheckpointError(
            f"{path}: refused to unpickle: the file holds objects other than tensors and plain "
            f"containers ({first_line(e, 200)}). Convert it to safetensors from a trusted "
            f"environment.") from e
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError) as e:
        raise CheckpointError(f"{path}: not a readable torch checkpoint ({first_line(e, 200)})") from e


def _check_not_empty(path: str | Path) -> None:
    """One line for a 0-byte file (an interrupted copy or download): no loader has anything to say about it."""
    with contextlib.suppress(OSError):  # unreadable: the loader names it
        if Path(path).is_file() and Path(path).stat().st_size == 0:
            raise CheckpointError(f"{path}: the file is empty (0 bytes), not a checkpoint: an interrupted copy or "
                                  "download? fetch it again")


def read_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """Read a state dict from ``.safetensors``, ``.pt``/``.pth``/``.bin`` (weights-only), unwrapping
    open_clip training checkpoints (``state_dict`` key) and DDP ``module.`` prefixes."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    _check_not_empty(path)
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
    for prefix in _WRAPPER_PREFIXES:
        if any(k.startswith(prefix) for k in sd):
            sd = {k.removeprefix(prefix): v for k, v in sd.items()}
    return sd


def drop_training_only(state_dict: dict[str, torch.Tensor], model_keys: set[str] | dict[str, torch.Tensor],
                       source: str, training_only: Mapping[str, str] = MappingProxyType({}), *,
                       keep: Collection[str] = ()) -> dict[str, torch.Tensor]:
    """``state_dict`` without the ``training_only`` modules (key prefix → why: the loading family's
    :attr:`~hnbench.models.family.ModelFamily.training_only_keys`) the model lacks; one WARNING per module names the
    dropped keys and why. ``keep``: prefixes kept all the same (a scorer that uses that module asks for it)."""
    out = dict(state_dict)
    for prefix, why in training_only.items():
        if prefix in keep:
            continue
        dropped = sorted(k for k in out if k.startswith(prefix) and k not in model_keys)
        if dropped:
            for k in dropped:
                del out[k]
            logger.warning("%s: ignoring %d keys of %s (%s): %s", source, len(dropped), prefix.rstrip("."), why,
                           _short(dropped))
    return out


def layout_hint(state_dict: dict[str, torch.Tensor]) -> str:
    """What to pass for a checkpoint, read from its keys and shapes: the family (open_clip/OpenAI-CLIP or HF
    ``CLIPModel`` layout), the vision tower (width, patch) and the text context."""
    hf_patch = state_dict.get("vision_model.embeddings.patch_embedding.weight")
    if hf_patch is not None:
        width, patch = int(hf_patch.shape[0]), int(hf_patch.shape[-1])
        pos = state_dict.get("text_model.embeddings.position_embedding.weight")
        ctx = f" --context-length {int(pos.shape[0])}" if pos is not None else ""
        base = _HF_BASES.get((width, patch))
        model = f"hf:{base}" if base else "hf:ORG/NAME (a transformers CLIP with this vision tower)"
        return (f"it holds Hugging Face CLIPModel keys (GOAL / StructXLIP layout; vision width {width}, patch {patch}): "
                f"pass --model {model} --pretrained FILE{ctx}")
    oa_patch = state_dict.get("visual.conv1.weight")
    if oa_patch is not None:
        width, patch = int(oa_patch.shape[0]), int(oa_patch.shape[-1])
        arch = _OPENAI_ARCHS.get((width, patch), "an open_clip architecture with this vision tower")
        pos = state_dict.get("positional_embedding")
        ctx = f" --context-length {int(pos.shape[0])}" if pos is not None and pos.shape[0] != 77 else ""
        return (f"it holds OpenAI-CLIP / open_clip keys (Long-CLIP / FineLIP layout; vision width {width}, patch "
                f"{patch}): pass --model {arch} --pretrained FILE{ctx}")
    return "its keys are neither open_clip / OpenAI-CLIP nor Hugging Face CLIPModel layout"


# (vision width, patch size) -> the OpenAI base a released fine-tune starts from
_HF_BASES = {(768, 32): "openai/clip-vit-base-patch32", (768, 16): "openai/clip-vit-base-patch16",
             (1024, 14): "openai/clip-vit-large-patch14"}
_OPENAI_ARCHS = {(768, 32): "ViT-B-32-quickgelu", (768, 16): "ViT-B-16-quickgelu", (1024, 14): "ViT-L-14-quickgelu"}


def load_into(model: torch.nn.Module, state_dict: dict[str, torch.Tensor], source: str, *,
              hint: str | None = None) -> None:
    """``load_state_dict(strict=True)`` with an error that names missing, unexpected and mis-shaped keys (and ends
    with ``hint``, e.g. :func:`layout_hint`'s advice on what to pass)."""
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
        raise CheckpointError(f"{source} does not match the architecture: " + "; ".join(parts)
                              + (f"; {hint}" if hint else ""))
    model.load_state_dict(state_dict, strict=True)


def load_checkpoint(model: torch.nn.Module, state_dict: dict[str, torch.Tensor], source: str,
                    training_only: Mapping[str, str] = MappingProxyType({})) -> None:
    """A released checkpoint into ``model``: the family's ``training_only`` modules dropped (none by default: a
    family allow-lists its own), tensors cast to the model's dtypes, then :func:`load_into` (any other key the model
    lacks is refused, listed)."""
    own = model.state_dict()
    state_dict = drop_training_only(state_dict, own, source, training_only)
    load_into(model, {k: v.to(own[k].dtype) if k in own else v for k, v in state_dict.items()}, source)


def save_state_dict(module: torch.nn.Module, path: Path, metadata: dict[str, str] | None = None) -> Path:
    """``module``'s state dict as safetensors at ``path``, atomically (a full disk leaves no partial file)."""
    from safetensors.torch import save_file

    tmp = path.with_name(f".{path.name}.tmp")
    try:
        save_file({k: v.detach().cpu().contiguous() for k, v in module.state_dict().items()}, str(tmp),
                  metadata=metadata)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def _short(items: list[str], n: int = 5) -> str:
    more = f", … (+{len(items) - n} more)" if len(items) > n else ""
    return ", ".join(items[:n]) + more
