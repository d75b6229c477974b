"""LoRA / DoRA fine-tuning through ``peft`` (the ``train`` extra), for any model family that declares its targets.

Targets (peft ``target_modules``, matched against module-name suffixes; the default is the family's
:meth:`~hnbench.models.family.ModelFamily.lora_targets`):

* HF CLIP: ``q_proj, k_proj, v_proj, out_proj`` by default (plain ``nn.Linear``: LoRA and DoRA).
* open_clip: attention is ``nn.MultiheadAttention``. peft wraps it as a whole for **LoRA** (target
  ``attn``) but does **not** support **DoRA** on it; wrapping its ``out_proj`` alone does nothing
  (MHA reads that weight directly). The default is therefore the MLP layers ``c_fc, c_proj``, which
  work for both; add ``attn`` for LoRA on attention.

Checkpoints: *merged* (adapters folded into the base weights: a normal checkpoint of the base
architecture) and/or *adapter-only* (peft's ``adapter_model.safetensors`` + ``adapter_config.json``
and ``hnbench_base.json`` naming the base weights). ``hnbench eval`` loads both.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch import nn

from hnbench.errors import ConfigError
from hnbench.models.family import ModelFamily, as_family
from hnbench.models.peft_loading import BASE_FILE

if TYPE_CHECKING:
    from peft import PeftModel

logger = logging.getLogger(__name__)

__all__ = ["BASE_FILE", "apply_peft", "default_targets", "save_adapter"]

METHODS = ("lora", "dora")


def default_targets(family: ModelFamily | str) -> list[str]:
    """The family's default peft targets (``family``: an adapter or a name :func:`as_family` resolves)."""
    return as_family(family).lora_targets()


# The layer types peft puts adapters on (nn.MultiheadAttention: LoRA only, see below).
ADAPTABLE: tuple[type[nn.Module], ...] = (nn.Linear, nn.Embedding, nn.Conv1d, nn.Conv2d, nn.Conv3d,
                                          nn.MultiheadAttention)


def _check_targets(model: nn.Module, targets: list[str], method: str) -> None:
    names = {n: m for n, m in model.named_modules()}
    adaptable = sorted({n.rsplit(".", 1)[-1] for n, m in names.items() if n and isinstance(m, ADAPTABLE)
                        and not (method == "dora" and isinstance(m, nn.MultiheadAttention))})
    matched = {n: m for n, m in names.items() if any(n == t or n.endswith("." + t) for t in targets)}
    if not matched:
        raise ConfigError(f"no module of the model matches lora_targets {targets} (adaptable layers: "
                          f"{', '.join(adaptable[:16])})")
    for name, module in matched.items():
        if not isinstance(module, ADAPTABLE):
            raise ConfigError(f"lora_targets: {name} is a {type(module).__name__}, which adapters cannot wrap; "
                              f"target Linear, Embedding, Conv or (LoRA) attention layers: "
                              f"{', '.join(adaptable[:16])}")
        if isinstance(module, nn.MultiheadAttention) and method == "dora":
            raise ConfigError(
                f"peft does not support DoRA on nn.MultiheadAttention ({name}): target open_clip's MLP "
                f"layers (lora_targets = ['c_fc', 'c_proj'], the default) or use LoRA for 'attn'")
        if name.endswith("attn.out_proj") and isinstance(names.get(name.rsplit(".", 1)[0]), nn.MultiheadAttention):
            raise ConfigError(
                f"{name} is read directly by nn.MultiheadAttention, so an adapter on it would never run; "
                f"target 'attn' (LoRA only) or the MLP layers 'c_fc', 'c_proj'")


def apply_peft(model: nn.Module, family: ModelFamily | str, method: str, *, r: int = 16, alpha: float = 32.0,
               dropout: float = 0.0, targets: list[str] | None = None) -> nn.Module:
    """Wrap ``model`` with LoRA or DoRA adapters; only adapter weights stay trainable."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as e:
        raise ConfigError("LoRA/DoRA need peft: pip install 'hnbench[train]'") from e
    method = method.lower()
    if method not in METHODS:
        raise ConfigError(f"peft method must be one of {METHODS}, got {method!r}")
    targets = list(targets) if targets else default_targets(family)
    _check_targets(model, targets, method)
    # peft annotates lora_alpha as int, but only divides by r with it: a float α works (and is TrainConfig's type)
    cfg = LoraConfig(r=int(r), lora_alpha=float(alpha),  # type: ignore[arg-type]
                     lora_dropout=float(dropout), target_modules=targets, use_dora=method == "dora", bias="none")
    peft_model = get_peft_model(model, cfg)
    n_train = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    logger.info("%s r=%d on %s: %d trainable parameters", method, r, targets, n_train)
    return peft_model


def save_adapter(peft_model: PeftModel, out_dir: Path, base: dict[str, Any]) -> Path:
    """Write peft's adapter files plus ``hnbench_base.json`` (base arch and weights) into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    peft_model.save_pretrained(str(out_dir), safe_serialization=True)
    (out_dir / BASE_FILE).write_text(json.dumps(base, indent=2) + "\n")
    return out_dir
