"""Adapter-only (peft LoRA/DoRA) checkpoints: load the base model, attach the adapter, merge.

An adapter directory holds peft's ``adapter_config.json`` + ``adapter_model.safetensors`` and, when
written by ``hnbench train``, ``hnbench_base.json`` naming the base (framework, architecture, weights,
model config, context length, Long-CLIP stretch). ``hnbench eval --model ARCH --pretrained ADAPTER_DIR``
goes through :func:`load_with_adapter`.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from hnbench.errors import CheckpointError, ConfigError, first_line
from hnbench.io import loads_json
from hnbench.models.base import TrainableEncoder, require_trainable, state_dict_fingerprint
from hnbench.models.family import RANDOM_INIT, check_trusted, family_of

logger = logging.getLogger(__name__)

__all__ = ["is_adapter_dir", "load_with_adapter"]

BASE_FILE = "hnbench_base.json"


def is_adapter_dir(path: str | Path | None) -> bool:
    return path is not None and Path(path).is_dir() and (Path(path) / "adapter_config.json").is_file()


def _read_base(adapter: Path) -> dict[str, Any]:
    f = adapter / BASE_FILE
    if not f.is_file():
        return {}
    try:
        base: dict[str, Any] = loads_json(f.read_text())
        return base
    except (OSError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{f}: unreadable ({e})") from e


def load_with_adapter(model: str | None, adapter_dir: str | Path, *, model_config: str | Path | None = None,
                      context_length: int | None = None, device: str = "cpu",
                      precision: str = "fp32", trust_remote_code: bool = False) -> TrainableEncoder:
    """Base model (from ``hnbench_base.json`` unless given) + the adapter in ``adapter_dir``, merged. A base whose
    family runs release code is refused unless ``trust_remote_code`` (:func:`check_trusted`); peft itself reads
    the adapter's config and weights and runs no code (its ``from_pretrained`` takes no ``trust_remote_code``)."""
    try:
        from peft import PeftModel  # optional: the train extra
    except ImportError as e:
        raise ConfigError("adapter checkpoints need peft: pip install 'hnbench[train]'") from e
    adapter = Path(adapter_dir)
    base = _read_base(adapter)
    arch = model or base.get("model")
    if not arch:
        raise ConfigError(f"{adapter}: no {BASE_FILE}; pass --model with the base architecture")
    if base.get("model") and model and model != base["model"]:
        raise ConfigError(f"{adapter} was trained on {base['model']!r}, not {model!r}")
    family = family_of(arch)  # the base's family loads it: its weights (open_clip) or revision (hf) are "pretrained"
    pretrained = base.get("pretrained")
    trusted = check_trusted(arch, pretrained, trust_remote_code)  # the base's code, if its family runs any
    encoder = require_trainable(family.load(arch, pretrained, model_config=model_config or base.get("model_config"),
                                            context_length=base.get("context_length") if context_length is None
                                            else context_length, precision=precision, device="cpu", **trusted),
                                "a PEFT adapter")
    if base.get("stretch_context") and encoder.info.context_length != base["stretch_context"]:
        encoder = require_trainable(family.stretch(encoder, base["stretch_context"]), "a PEFT adapter")
    if base.get("model") and family.weight_files(arch, pretrained, model_config) == [RANDOM_INIT]:
        logger.warning("%s: the base model was randomly initialised; the merged weights will not match training",
                       adapter)
    try:
        merged = PeftModel.from_pretrained(encoder.model, str(adapter)).merge_and_unload()
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        raise CheckpointError(f"could not attach adapter {adapter} to {arch}: {first_line(e)}") from e
    encoder.model = merged.eval()
    encoder.info.pretrained = str(adapter)
    encoder.info.fingerprint = state_dict_fingerprint(merged.state_dict())
    encoder.info.extra = {**encoder.info.extra, "adapter": {k: base.get(k) for k in ("method", "r", "alpha",
                                                                                      "targets", "pretrained")}}
    return encoder.to(device)
