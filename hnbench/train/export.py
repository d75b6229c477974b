"""A finished run's checkpoints, in the forms ``hnbench eval`` loads.

* open_clip: ``checkpoint.safetensors`` (the architecture's state dict; under PEFT the adapters are
  merged into it) → ``hnbench eval --model ARCH --pretrained RUN/checkpoint.safetensors``.
* HF CLIP: ``hf_model/`` (``save_pretrained`` with tokenizer and image processor; merged under PEFT)
  → ``hnbench eval --model RUN/hf_model``.
* PEFT adapter-only: ``adapter/`` (peft files + ``hnbench_base.json``)
  → ``hnbench eval --model ARCH --pretrained RUN/adapter``.
"""

from __future__ import annotations

import copy
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from safetensors.torch import save_file
from torch import nn

from hnbench.io import follow_umask
from hnbench.models.base import TrainableEncoder
from hnbench.train.adapters import save_adapter

if TYPE_CHECKING:
    from peft import PeftModel
    from transformers import PreTrainedModel

logger = logging.getLogger(__name__)

__all__ = ["export_checkpoints"]


def _base_record(encoder: TrainableEncoder, config: Any) -> dict[str, Any]:
    pretrained = config.pretrained
    if pretrained and os.path.exists(pretrained):
        pretrained = str(Path(pretrained).resolve())
    model_config = str(Path(config.model_config).resolve()) if config.model_config else None
    return {"framework": encoder.info.framework, "model": config.model, "pretrained": pretrained,
            "model_config": model_config, "context_length": config.context_length,
            "stretch_context": config.stretch_context, "method": config.peft, "r": config.lora_r,
            "alpha": config.lora_alpha, "targets": config.lora_targets,
            "revision": pretrained if encoder.info.framework == "transformers" else None}


def _save_module(module: nn.Module, path: Path, metadata: dict[str, str] | None = None) -> Path:
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        save_file({k: v.detach().cpu().contiguous() for k, v in module.state_dict().items()}, str(tmp),
                  metadata=metadata)
        tmp.replace(path)
    except BaseException:  # a full disk: no partial file left behind
        tmp.unlink(missing_ok=True)
        raise
    return path


def _save_open_clip(model: nn.Module, config: Any, out_dir: Path) -> Path:
    return _save_module(model, out_dir / "checkpoint.safetensors",
                        {"arch": config.model, "hnbench": "train", "loss": config.loss, "objective": config.objective})


def _save_hf(model: nn.Module, encoder: TrainableEncoder, out_dir: Path) -> Path:
    target = out_dir / "hf_model"
    cast("PreTrainedModel", model).save_pretrained(str(target), safe_serialization=True)  # an HF CLIPModel
    encoder.tokenizer.save_pretrained(str(target))
    processor = getattr(encoder.image_transform, "processor", None)
    if processor is not None:
        processor.save_pretrained(str(target))
    return target


def export_modules(extra: nn.Module, out_dir: Path) -> Path:
    """The objective's extra modules (e.g. FineLIP's aggregation) beside the towers: ``objective_modules.safetensors``,
    keys ``NAME.PARAM`` (plain-cosine eval does not read it)."""
    return _save_module(extra, out_dir / "objective_modules.safetensors", {"hnbench": "train"})


def export_checkpoints(model: nn.Module, encoder: TrainableEncoder, config: Any,
                       out_dir: Path, *, extra: nn.Module | None = None) -> dict[str, Path]:
    """Write the run's checkpoints; returns ``{"checkpoint": …, "adapter": …, "objective_modules": …}`` (adapter
    under PEFT only; objective modules when the objective has any)."""
    outputs: dict[str, Path] = {}
    if extra is not None and len(list(extra.parameters())):
        outputs["objective_modules"] = export_modules(extra, out_dir)
    hf = encoder.info.framework == "transformers"
    if config.peft:
        base = _base_record(encoder, config)
        if config.peft_save in ("adapter", "both"):
            if base["pretrained"] is None and not hf:
                logger.warning("adapter-only checkpoint of a randomly initialised base: it loads only on "
                               "the same random init; use the merged checkpoint")
            outputs["adapter"] = save_adapter(cast("PeftModel", model), out_dir / "adapter", base)
        merged = copy.deepcopy(cast("PeftModel", model)).merge_and_unload()
        if config.peft_save in ("merged", "both") or "adapter" not in outputs:
            outputs["checkpoint"] = _save_hf(merged, encoder, out_dir) if hf else _save_open_clip(merged, config, out_dir)
        else:
            outputs["checkpoint"] = outputs["adapter"]
        return _umask_modes(outputs)
    outputs["checkpoint"] = _save_hf(model, encoder, out_dir) if hf else _save_open_clip(model, config, out_dir)
    return _umask_modes(outputs)


def _umask_modes(outputs: dict[str, Path]) -> dict[str, Path]:
    """Every file of ``outputs`` with the umask's mode (peft's and transformers' safetensors files are 0600)."""
    for path in outputs.values():
        for f in [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]:
            follow_umask(f)
    return outputs
