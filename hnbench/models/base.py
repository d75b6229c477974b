"""The encoder protocols model adapters implement (:class:`Encoder`; :class:`TrainableEncoder` for the
fine-tuner and the PEFT loader), and the metadata they carry."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, cast, runtime_checkable

import numpy as np
import torch
from torch import nn

from hnbench.errors import ConfigError


@dataclass
class ModelInfo:
    """Who the model is: recorded in every result file."""

    arch: str
    pretrained: str | None
    fingerprint: str
    context_length: int
    n_params: int
    embed_dim: int
    framework: str = "open_clip"
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class TokenizedTexts:
    """Token ids padded to the context length (dynamic-padding encoders: to the batch's longest), and each
    caption's untruncated length in tokens."""

    tokens: torch.Tensor  # (n, context_length) int64
    lengths: np.ndarray  # (n,) int64, incl. start/end tokens, before truncation

    def n_truncated(self, context_length: int) -> int:
        return int((self.lengths > context_length).sum())


@runtime_checkable
class Encoder(Protocol):
    """Encode images and texts into one L2-normalised embedding space.

    Every member is read by a caller (none by ``getattr``): ``dynamic_padding`` is True when ``tokenize`` pads a
    batch only to its longest text (then :func:`hnbench.evaluation.encode.encode_texts` groups captions of similar length);
    ``transform_description`` is the cache's description of ``image_transform`` when the encoder knows it without
    building the transform (a remembered model), else None; ``has_images`` is False for a text-only encoder.
    """

    info: ModelInfo
    device: torch.device

    @property
    def dynamic_padding(self) -> bool: ...  # read-only: a remembered encoder asks the model it builds

    @property
    def transform_description(self) -> str | None: ...

    @property
    def has_images(self) -> bool: ...

    @property
    def image_transform(self) -> Callable[[Any], torch.Tensor]: ...  # read-only: a lazy encoder builds it

    def tokenize(self, texts: Sequence[str]) -> TokenizedTexts: ...

    def encode_images(self, pixels: torch.Tensor) -> torch.Tensor: ...

    def encode_texts(self, tokens: torch.Tensor) -> torch.Tensor: ...

    def to(self, device: str | torch.device) -> Encoder: ...


@runtime_checkable
class DeferredEncoder(Encoder, Protocol):
    """An :class:`Encoder` that stands in for a model not built yet (a remembered fingerprint,
    :class:`hnbench.evaluation.remembered.RememberedEncoder`): :meth:`real` builds and returns it."""

    @property
    def built(self) -> bool:
        """Whether :meth:`real` has built the model yet."""
        ...

    def real(self) -> Encoder:
        """The encoder itself, built on first use."""
        ...


def as_deferred(encoder: Encoder) -> DeferredEncoder | None:
    """``encoder`` as a :class:`DeferredEncoder`, or None for an encoder that is built already.

    Asked of its class, not of the object: on Python 3.11 ``isinstance`` against a runtime protocol reads every
    member, and reading a deferred encoder's properties builds its model.
    """
    cls = type(encoder)
    if callable(getattr(cls, "real", None)) and isinstance(getattr(cls, "built", None), property):
        return cast(DeferredEncoder, encoder)
    return None


@runtime_checkable
class TrainableEncoder(Encoder, Protocol):
    """An :class:`Encoder` whose weights are one CLIP module the fine-tuner and the PEFT loader may change.

    Implemented by the open_clip and HF CLIP adapters; a text-only sentence encoder is not one.
    """

    model: nn.Module  # the whole CLIP model; training and PEFT replace it by its adapted or merged form
    framework: Literal["open_clip", "transformers"]  # the CLIP implementation under ``model`` (= info.framework)
    tokenizer: Any  # the framework's own tokenizer object (an HF export saves it beside the weights)

    @property
    def eos_token_id(self) -> int | None:
        """The end-of-text token id that ends HF CLIP's attention mask (None: the model finds the end itself)."""
        ...

    def to(self, device: str | torch.device) -> TrainableEncoder: ...


def require_trainable(encoder: Encoder, purpose: str) -> TrainableEncoder:
    """``encoder`` as a :class:`TrainableEncoder`, or a one-line :class:`ConfigError` naming ``purpose``."""
    if not isinstance(encoder, TrainableEncoder):
        raise ConfigError(f"{encoder.info.arch} ({type(encoder).__name__}) cannot be used for {purpose}: only "
                          "open_clip and HF CLIP models can (it exposes no trainable CLIP module)")
    return encoder


def state_dict_fingerprint(state_dict: dict[str, torch.Tensor]) -> str:
    """sha256 over the sorted parameter names, shapes, dtypes and bytes (16 hex digits)."""
    h = hashlib.sha256()
    for name in sorted(state_dict):
        t = state_dict[name].detach().cpu().contiguous().reshape(-1)
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:16]


def family_config(family: str, schema: str, name: str, model_config: str | Path | None,
                  releases: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """The architecture config of a family's ``name``: ``--model-config FILE.json`` when given, else the release's
    config of that name; an unreadable file or an unknown name is one line (``schema``: whose config schema)."""
    from hnbench.io import loads_json

    if model_config is not None:
        path = Path(model_config)
        try:
            cfg: dict[str, Any] = loads_json(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise ConfigError(f"--model-config {path}: cannot read JSON ({e})") from e
        return cfg
    if name in releases:
        return releases[name]
    raise ConfigError(f"{family}: unknown architecture {name!r}; known: {', '.join(releases)} "
                      f"(or pass --model-config FILE.json in {schema}'s config schema)")
