"""Models behind one encoder protocol: open_clip architectures, HF CLIP, hnbench's own tiny model."""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hnbench.errors import CheckpointError, ConfigError
from hnbench.models import zoo
from hnbench.models.base import Encoder, ModelInfo, TokenizedTexts
from hnbench.models.family import check_trusted, family_of
from hnbench.models.peft_loading import is_adapter_dir, load_with_adapter
from hnbench.registry import TEXT_ENCODERS
from hnbench.validate import check_precision

__all__ = ["NO_WEIGHTS", "Encoder", "ModelInfo", "TokenizedTexts", "check_model", "load_model", "model_pairs"]


def load_model(
    model: str,
    pretrained: str | None = None,
    *,
    model_config: str | Path | None = None,
    context_length: int | None = None,
    device: str = "cpu",
    precision: str = "fp32",
    init_seed: int | None = 0,
    trust_remote_code: bool = False,
) -> Encoder:
    """Load a model by open_clip name (``ViT-B-32``, ``hf-hub:…``, ``local-dir:…``), HF CLIP (``hf:ORG/NAME``) or
    model-zoo name (``longclip-l14``: :mod:`hnbench.models.zoo`, its weights fetched; recorded in
    ``info.extra["zoo"]``; an explicit ``pretrained`` wins over the entry's weights); the family is picked by name prefix in :data:`hnbench.registry.MODELS` and its adapter
    (:class:`hnbench.models.family.ModelFamily`) loads it.

    ``pretrained`` is an open_clip tag (downloads; needs the internet), hnbench's built-in tag
    (``hnbench-tiny`` / ``synthdense``) or a local checkpoint file (``.safetensors`` preferred;
    ``.pt``/``.bin`` are read with ``weights_only=True``), or a LoRA/DoRA adapter directory written by
    ``hnbench train`` (base weights named in it; merged on load). Released Long-CLIP checkpoints load
    into the open_clip architecture with their 248 positions (a FineLIP run's ``cross_net`` dropped with a
    warning); GOAL's / StructXLIP's ``.pth`` (HF ``CLIPModel`` keys) load into an ``hf:`` base. An open_clip model without weights is
    initialised from ``init_seed`` (``None``: torch's global RNG, as the trainer seeds it itself).
    A remote-code model (``remote:…``) runs its release's code: refused unless ``trust_remote_code``.
    """
    check_precision(precision)
    trusted = check_trusted(model, pretrained, trust_remote_code)
    resolved = zoo.resolve(model, pretrained, download=True)  # a zoo name: its family's model and weights
    model, pretrained = resolved.model, resolved.pretrained
    try:
        return zoo.mark(_load(model, pretrained, model_config=model_config, context_length=context_length, device=device,
                     precision=precision, init_seed=init_seed, **trusted), resolved)
    except pickle.UnpicklingError as e:  # torch.load(weights_only=True) inside open_clip / transformers / peft
        where = pretrained if pretrained and Path(pretrained).is_dir() else model
        raise CheckpointError(f"{where}: refused to unpickle a weights file: it holds objects other than tensors "
                              f"({_first_reason(e)}). Convert it to safetensors from a trusted environment.") from e


def check_model(model: str, pretrained: str | None = None, *, model_config: str | Path | None = None,
                trust_remote_code: bool = False) -> None:
    """What can be checked of ``model`` and its weights without loading them (one line each): for open_clip the
    architecture, a weights file's existence, a tag's name and whether it can be fetched. Another family, or an
    adapter directory, is checked when it loads. A remote-code model is refused unless ``trust_remote_code``."""
    zoo.check(model, pretrained)
    model, pretrained = (r := zoo.resolve(model, pretrained)).model, r.pretrained
    if not (pretrained is not None and is_adapter_dir(pretrained)):
        family_of(model).check(model, pretrained, model_config=model_config)
        check_trusted(model, pretrained, trust_remote_code)


def _first_reason(e: Exception) -> str:
    """The line of a weights-only load error that names the refused global."""
    lines = [x.strip() for x in str(e).splitlines() if x.strip()]
    return next((x for x in lines if "GLOBAL" in x), lines[0] if lines else type(e).__name__)[:200]


def _load(model: str, pretrained: str | None, *, model_config: str | Path | None, context_length: int | None,
          device: str, precision: str, init_seed: int | None, **trusted: bool) -> Encoder:
    if pretrained is not None and is_adapter_dir(pretrained):
        encoder: Encoder = load_with_adapter(model, pretrained, model_config=model_config,
                                             context_length=context_length, device=device, precision=precision,
                                             trust_remote_code=bool(trusted.get("trust_remote_code")))
        return encoder
    return family_of(model)(model, pretrained, model_config=model_config, context_length=context_length,
                            device=device, precision=precision, init_seed=init_seed, **trusted)


NO_WEIGHTS = "none"  # a --pretrained value: this --model takes no weights (a random init, a text-only encoder)


def model_pairs(models: Sequence[Any], pretrained: Sequence[str | None] | None = None, *,
                model_config: str | None = None, check: bool = True,
                trust_remote_code: bool = False) -> list[tuple[Any, str | None]]:
    """The (model, weights) pairs of repeated ``--model`` / ``--pretrained`` values, each checked (``check``)
    before any loads (:func:`hnbench.models.check_model`): one model with several weights, or one weights value
    per model, in order (:data:`NO_WEIGHTS` for a model without); weights never pass from one model to another."""
    models, weights = list(models), [None if p == NO_WEIGHTS else p for p in pretrained or []]
    if len(models) == 1 and len(weights) > 1:  # one architecture, several checkpoints
        models = models * len(weights)
    if not weights:
        weights = [None] * len(models)
    if len(weights) != len(models):
        raise ConfigError(f"{len(weights)} --pretrained values for {len(models)} models: give one per --model, in "
                          f"order ('{NO_WEIGHTS}' for a model without weights)")
    for m, pt in zip(models if check else (), weights):
        if not isinstance(m, str):
            continue
        if m in TEXT_ENCODERS:
            if pt is not None:
                raise ConfigError(f"--model {m} is a text-only encoder and takes no weights, got --pretrained {pt} "
                                  f"(give '{NO_WEIGHTS}' for it)")
            continue
        check_model(m, pt, model_config=model_config, trust_remote_code=trust_remote_code)
    return list(zip(models, weights))
