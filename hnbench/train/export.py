"""A finished run's checkpoints, in the forms ``hnbench eval`` loads: the family's own export
(:meth:`~hnbench.models.family.ModelFamily.export`; :meth:`~hnbench.models.family.ModelFamily.reload` loads it).

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

from torch import nn

from hnbench.io import follow_umask
from hnbench.models.base import TrainableEncoder
from hnbench.models.checkpoint import save_state_dict
from hnbench.models.family import RANDOM_INIT, ModelFamily, family_of
from hnbench.train.adapters import save_adapter

if TYPE_CHECKING:
    from peft import PeftModel

logger = logging.getLogger(__name__)

__all__ = ["export_checkpoints"]


def _base_record(encoder: TrainableEncoder, config: Any, family: ModelFamily) -> dict[str, Any]:
    pretrained = config.pretrained
    if pretrained and os.path.exists(pretrained):
        pretrained = str(Path(pretrained).resolve())
    model_config = str(Path(config.model_config).resolve()) if config.model_config else None
    return {"framework": encoder.info.framework, "model": config.model, "pretrained": pretrained,
            "model_config": model_config, "context_length": config.context_length,
            "stretch_context": config.stretch_context, "method": config.peft, "r": config.lora_r,
            "alpha": config.lora_alpha, "targets": config.lora_targets, "revision": family.revision(pretrained)}


def export_modules(extra: nn.Module, out_dir: Path) -> Path:
    """The objective's extra modules (e.g. FineLIP's aggregation) beside the towers: ``objective_modules.safetensors``,
    keys ``NAME.PARAM`` (plain-cosine eval does not read it)."""
    return save_state_dict(extra, out_dir / "objective_modules.safetensors", {"hnbench": "train"})


def export_checkpoints(model: nn.Module, encoder: TrainableEncoder, config: Any, out_dir: Path, *,
                       family: ModelFamily | None = None, extra: nn.Module | None = None) -> dict[str, Path]:
    """Write the run's checkpoints through ``family``'s export (default: the family of ``config.model``); returns
    ``{"checkpoint": …, "adapter": …, "objective_modules": …}`` (adapter under PEFT only; objective modules when
    the objective has any)."""
    family = family_of(config.model) if family is None else family
    outputs: dict[str, Path] = {}
    if extra is not None and len(list(extra.parameters())):
        outputs["objective_modules"] = export_modules(extra, out_dir)
    metadata = {"arch": config.model, "hnbench": "train", "loss": config.loss, "objective": config.objective}
    if config.peft:
        base = _base_record(encoder, config, family)
        if config.peft_save in ("adapter", "both"):
            if family.weight_files(config.model, config.pretrained, config.model_config) == [RANDOM_INIT]:
                logger.warning("adapter-only checkpoint of a randomly initialised base: it loads only on "
                               "the same random init; use the merged checkpoint")
            outputs["adapter"] = save_adapter(cast("PeftModel", model), out_dir / "adapter", base)
        merged = copy.deepcopy(cast("PeftModel", model)).merge_and_unload()
        if config.peft_save in ("merged", "both") or "adapter" not in outputs:
            outputs["checkpoint"] = family.export(merged, encoder, out_dir, metadata)
        else:
            outputs["checkpoint"] = outputs["adapter"]
        return _umask_modes(outputs)
    outputs["checkpoint"] = family.export(model, encoder, out_dir, metadata)
    return _umask_modes(outputs)


def _umask_modes(outputs: dict[str, Path]) -> dict[str, Path]:
    """Every file of ``outputs`` with the umask's mode (peft's and transformers' safetensors files are 0600)."""
    for path in outputs.values():
        for f in [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]:
            follow_umask(f)
    return outputs
