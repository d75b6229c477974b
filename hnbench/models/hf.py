"""Hugging Face ``transformers`` CLIP models (``hf:ORG/NAME`` or a local directory); needs the ``hf`` extra."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np
import torch

from hnbench.errors import CheckpointError, ConfigError
from hnbench.models.base import ModelInfo, TokenizedTexts, state_dict_fingerprint
from hnbench.models.checkpoint import (
    POSITION_IDS_SUFFIX,
    drop_training_only,
    layout_hint,
    load_into,
    read_state_dict,
)


class _HFImageTransform:
    """PIL image → pixel tensor with the checkpoint's own image processor (picklable for workers)."""

    def __init__(self, processor: Any):
        self.processor = processor

    def __call__(self, image: Any) -> torch.Tensor:
        pixels: torch.Tensor = self.processor(images=image, return_tensors="pt")["pixel_values"][0]
        return pixels


def feature_tensor(out: Any) -> torch.Tensor:
    """The embeddings from ``CLIPModel.get_image_features`` / ``get_text_features``: transformers 4 returns the
    tensor, transformers 5 may return a model output that carries it (``image_embeds``, ``text_embeds`` or
    ``pooler_output``)."""
    if isinstance(out, torch.Tensor):
        return out
    for attr in ("image_embeds", "text_embeds", "pooler_output"):
        value: torch.Tensor | None = getattr(out, attr, None)
        if value is not None:
            return value
    raise TypeError(f"unexpected feature output {type(out).__name__}")


def eos_attention_mask(tokens: torch.Tensor, eos_token_id: int | None) -> torch.Tensor:
    """HF CLIP's text attention mask: attend up to and including the first end token (the pad token may equal
    it, so the tokenizer's own mask would stop too early or not at all)."""
    if eos_token_id is None:
        raise ConfigError("an HF CLIP text tower needs its tokenizer's end-of-text token id (it is None)")
    first_eos = torch.eq(tokens, eos_token_id).int().argmax(dim=1)
    positions = torch.arange(tokens.shape[1], device=tokens.device)
    return torch.le(positions[None, :], first_eos[:, None]).long()


class HFCLIPEncoder:
    """A ``transformers.CLIPModel`` behind the :class:`~hnbench.models.base.TrainableEncoder` protocol.

    Batches are padded to their longest caption, not the context (``dynamic_padding``): the
    attention mask ends at the end token and attention is causal, so padding never changes a
    caption's features, only the work spent on it.
    """

    dynamic_padding = True
    framework: Literal["open_clip", "transformers"] = "transformers"

    def __init__(self, model: Any, tokenizer: Any, processor: Any, info: ModelInfo):
        self.model: Any = model.eval()  # a transformers CLIPModel (or its PEFT-merged form)
        self.tokenizer = tokenizer
        self.image_transform = _HFImageTransform(processor)
        self.info = info
        self.device = next(model.parameters()).device

    @property
    def eos_token_id(self) -> int | None:
        """The tokenizer's end token: attention stops after its first occurrence (the pad token may equal it)."""
        eos = self.tokenizer.eos_token_id
        return None if eos is None else int(eos)

    def to(self, device: str | torch.device) -> HFCLIPEncoder:
        self.model.to(device)
        self.device = torch.device(device)
        return self

    def tokenize(self, texts: Sequence[str]) -> TokenizedTexts:
        ctx = self.info.context_length
        enc = self.tokenizer(list(texts), padding="longest", truncation=True, max_length=ctx,
                             return_tensors="pt")
        lengths = np.array([len(x) for x in self.tokenizer(list(texts), truncation=False)["input_ids"]],
                           dtype=np.int64)
        return TokenizedTexts(enc["input_ids"], lengths)

    @torch.inference_mode()
    def encode_images(self, pixels: torch.Tensor) -> torch.Tensor:
        pixels = pixels.to(device=self.device, dtype=self.model.dtype, non_blocking=True)  # fp16/bf16 weights
        f = feature_tensor(self.model.get_image_features(pixel_values=pixels))
        return torch.nn.functional.normalize(f.float(), dim=-1)

    @torch.inference_mode()
    def encode_texts(self, tokens: torch.Tensor) -> torch.Tensor:
        tokens = tokens.to(self.device, non_blocking=True)
        mask = eos_attention_mask(tokens, self.eos_token_id)
        f = feature_tensor(self.model.get_text_features(input_ids=tokens, attention_mask=mask))
        return torch.nn.functional.normalize(f.float(), dim=-1)


_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


# A --pretrained value that names a weights file (else it is the hub revision).
WEIGHT_SUFFIXES = (".pt", ".pth", ".bin", ".safetensors", ".ckpt")
TEXT_POSITIONS = "text_model.embeddings.position_embedding.weight"


def weights_file(pretrained: str | None) -> str | None:
    """``pretrained`` when it names a weights file (an existing file, or a checkpoint suffix), else None."""
    if pretrained and (Path(pretrained).is_file() or pretrained.endswith(WEIGHT_SUFFIXES)):
        return pretrained
    return None


def load(model: str, pretrained: str | None = None, *, model_config: str | Path | None = None,
         context_length: int | None = None, device: str = "cpu", precision: str = "fp32",
         init_seed: int | None = 0) -> HFCLIPEncoder:
    """The model registry's loader signature: ``pretrained`` is a weights file (a released GOAL / StructXLIP
    ``.pth``: HF ``CLIPModel`` keys, any text context) loaded into ``model``'s architecture, else the hub
    revision; no config or seed applies."""
    weights = weights_file(pretrained)
    return load_hf_clip(model, context_length=context_length, device=device,
                        revision=None if weights else pretrained, precision=precision, weights=weights)


def load_hf_clip(name: str, *, context_length: int | None = None, device: str = "cpu",
                 revision: str | None = None, precision: str = "fp32", weights: str | None = None) -> HFCLIPEncoder:
    """Load ``hf:ORG/NAME`` (hub, needs the internet) or a local ``save_pretrained`` directory.

    ``weights``: a state-dict file with HF ``CLIPModel`` keys (``model_state_dict`` / ``clip_model.`` wrappers
    unwrapped, read weights-only) replacing the base's weights; the text table's rows set the positions (GOAL's
    and StructXLIP's 248). The base supplies the config, tokenizer and image processor."""
    try:
        from transformers import AutoTokenizer, CLIPConfig, CLIPImageProcessor, CLIPModel
    except ImportError as e:
        raise ConfigError("HF CLIP models need transformers: pip install 'hnbench[hf]'") from e
    path = name.removeprefix("hf:")
    if not Path(path).is_dir() and name.startswith("hf:") is False:
        raise ConfigError(f"{name}: not a directory; write hub models as hf:ORG/NAME")
    if precision not in _DTYPES:
        raise ConfigError(f"--precision must be one of {', '.join(_DTYPES)}, got {precision!r}")
    sd = _released_state_dict(weights) if weights else None
    at: dict[str, Any] = {} if revision is None else {"revision": revision}  # None: the hub's default branch
    try:
        # Any: transformers' decorated methods (to, get_*_features) are not typed usefully
        model: Any
        if sd is None:
            model = CLIPModel.from_pretrained(path, use_safetensors=None, **at)
        else:
            config: Any = CLIPConfig.from_pretrained(path, **at)
            config.text_config.max_position_embeddings = int(sd[TEXT_POSITIONS].shape[0])
            with _no_init():  # every weight is overwritten by the strict load below
                model = CLIPModel(config)
        tokenizer = AutoTokenizer.from_pretrained(path, **at)
        processor = CLIPImageProcessor.from_pretrained(path, **at)
    except (OSError, ValueError) as e:
        raise CheckpointError(f"could not load HF CLIP model {name}: {str(e).splitlines()[0]}") from e
    if sd is not None:
        _load_weights(model, sd, f"checkpoint {weights} into {name}")
    model = model.to(_DTYPES[precision])
    max_pos = int(model.config.text_config.max_position_embeddings)
    ctx = context_length or max_pos
    if ctx > max_pos:
        raise ConfigError(f"{name}: --context-length {ctx} exceeds the model's {max_pos} positions")
    if sd is not None and int(tokenizer.model_max_length) < max_pos:
        tokenizer.model_max_length = max_pos  # the base's 77: would warn on every caption the table now fits
    info = ModelInfo(arch=f"hf:{path}" if not name.startswith("hf:") else name,
                     pretrained=weights or revision or "main",
                     fingerprint=state_dict_fingerprint(model.state_dict()), context_length=ctx,
                     n_params=sum(p.numel() for p in model.parameters()),
                     embed_dim=int(model.config.projection_dim), framework=HFCLIPEncoder.framework,
                     extra={"precision": precision, **({"base": name} if sd is not None else {})})
    return HFCLIPEncoder(model.to(device), tokenizer, processor, info)


def _no_init() -> contextlib.AbstractContextManager[None]:
    """transformers' switch that skips weight initialisation (its module moved in 5.0), else nothing."""
    import importlib

    for module in ("transformers.initialization", "transformers.modeling_utils"):
        try:
            switch = getattr(importlib.import_module(module), "no_init_weights", None)
        except ImportError:
            continue
        if switch is not None:
            return cast(contextlib.AbstractContextManager[None], switch())
    return contextlib.nullcontext()


def _released_state_dict(weights: str) -> dict[str, torch.Tensor]:
    """A weights file's state dict, refused in one line unless it has HF ``CLIPModel`` keys (saying what to pass)."""
    sd = read_state_dict(weights)
    if TEXT_POSITIONS not in sd:
        raise CheckpointError(f"{weights}: no {TEXT_POSITIONS} key, so not an HF CLIPModel state dict; "
                              f"{layout_hint(sd)}")
    return sd


def _load_weights(model: Any, sd: dict[str, torch.Tensor], source: str) -> None:
    """Strict load of ``sd`` into ``model``: position-id buffers follow the model (saved or not, by transformers
    version), known training-only modules are dropped with a warning, anything else that does not fit is refused."""
    own = model.state_dict()
    sd = {k: v for k, v in sd.items() if not k.endswith(POSITION_IDS_SUFFIX)}
    sd.update({k: v for k, v in own.items() if k.endswith(POSITION_IDS_SUFFIX)})
    sd = drop_training_only(sd, own, source)
    load_into(model, {k: v.to(own[k].dtype) if k in own else v for k, v in sd.items()}, source,
              hint=layout_hint(sd))
