"""LoTLIP (NeurIPS'24, ``wuw2019/LoTLIP``): a timm ViT image tower and a BERT text tower with corner tokens.

``--model lotlip:ViT-B-16`` / ``lotlip:ViT-B-32`` (the released configs, ``open_clip/model_configs/
lotlip_bert-ViT-B-*.json``: timm ``vit_base_patch*_224.augreg_in21k`` + ``bert-base-uncased``, 2 corner tokens,
context 128), or ``--model lotlip:NAME --model-config FILE.json`` in the same schema (``hf_model_name`` /
``hf_tokenizer_name`` may be local folders). ``--pretrained`` is the release's ``model.pt`` (open_clip training
checkpoint: ``visual.trunk.*``, ``text.transformer.*`` with the corner rows appended to the word embeddings,
``text.proj.weight``, ``logit_scale``); any key the model lacks is refused in one line that lists it.

The text rule is the authors' ``HFTokenizer``: sentences split on ``". "`` and joined with the tokenizer's
separator token, the corner tokens (``[Corner0] [Corner1]``, added as special tokens) prefixed, open_clip's
whitespace clean, padded to the context. The text tower (``HFTextEncoder`` with ``num_corner_token``) lets the
corner tokens and ``[CLS]`` attend to themselves and the text but not each other, the text not to the corners;
the caption embedding is the ``[CLS]`` position through BERT's pooler (dense + tanh) and the linear projection.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from hnbench.errors import CheckpointError, ConfigError
from hnbench.models.base import ModelInfo, TokenizedTexts, family_config, state_dict_fingerprint
from hnbench.models.checkpoint import FINELIP_CROSS_NET, POSITION_IDS_SUFFIX, load_checkpoint, read_state_dict
from hnbench.models.family import RANDOM_INIT, ModelFamily, TextPreprocessing
from hnbench.models.openclip import OpenCLIPEncoder, _seeded

__all__ = ["LOTLIP", "LoTLIPCLIP", "LoTLIPEncoder", "LoTLIPFamily", "LoTLIPTokenizer", "load_lotlip"]

PREFIX = "lotlip:"


def _release(timm_name: str) -> dict[str, Any]:
    return {"embed_dim": 768,
            "vision_cfg": {"timm_model_name": timm_name, "timm_model_pretrained": False, "timm_pool": "token",
                           "timm_proj": "none"},
            "text_cfg": {"context_length": 128, "hf_model_name": "bert-base-uncased",
                         "hf_tokenizer_name": "bert-base-uncased", "hf_proj_type": "linear",
                         "hf_pooler_type": "cls_pooler", "num_corner_token": 2}}


# The released architectures (LoTLIP's open_clip/model_configs/lotlip_bert-ViT-B-{16,32}.json).
RELEASE_CONFIGS = {"ViT-B-16": _release("vit_base_patch16_224.augreg_in21k"),
                   "ViT-B-32": _release("vit_base_patch32_224.augreg_in21k")}
# Buffers transformers saves or not depending on its version: never a weight.
_BUFFER_SUFFIXES = (POSITION_IDS_SUFFIX, "embeddings.token_type_ids")


class LoTLIPTokenizer:
    """The authors' ``HFTokenizer`` with corner tokens, around a transformers tokenizer (``.tokenizer``)."""

    def __init__(self, tokenizer: Any, name: str, num_corner_token: int):
        self.tokenizer = tokenizer
        self.name = name
        self.corners = [f"[Corner{k}]" for k in range(num_corner_token)]
        if self.corners:
            tokenizer.add_tokens(self.corners, special_tokens=True)
        self.sep_token = tokenizer.sep_token

    def prepare(self, text: str) -> str:
        """The caption as the authors' tokenizer hands it to BERT's (their rule keys on a "bert" tokenizer name;
        a local folder holding a BERT tokenizer counts too)."""
        from open_clip.tokenizer import _clean_whitespace

        if "bert" in self.name or type(self.tokenizer).__name__.startswith("Bert"):
            text = self.sep_token.join(text.split(". "))
        return str(_clean_whitespace(" ".join(self.corners) + text))

    def encode(self, texts: Sequence[str], context_length: int) -> TokenizedTexts:
        """Ids padded to ``context_length`` (transformers' truncation of one sequence: the tail cut, the closing
        special token kept) and each caption's untruncated length; one tokenizer pass."""
        full = self.tokenizer([self.prepare(t) for t in texts], truncation=False)["input_ids"]
        lengths = np.array([len(x) for x in full], dtype=np.int64)
        out = torch.full((len(full), context_length), int(self.tokenizer.pad_token_id), dtype=torch.long)
        for i, x in enumerate(full):
            if len(x) > context_length:
                x = x[:context_length - 1] + x[-1:]
            out[i, :len(x)] = torch.tensor(x)
        return TokenizedTexts(out, lengths)


class CornerTokenText(nn.Module):
    """BERT (``transformer``, with its pooler) and a linear ``proj``; the corner-token attention mask."""

    def __init__(self, transformer: nn.Module, width: int, embed_dim: int, num_corner_token: int, pad_token_id: int):
        super().__init__()
        self.transformer = transformer
        self.proj = nn.Linear(width, embed_dim, bias=False)
        self.num_corner_token = num_corner_token
        self.pad_token_id = pad_token_id

    def attention_mask(self, ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """``(n, 1, L, L)`` additive mask: row = query position, column = key position."""
        n, length = ids.shape
        heads = self.num_corner_token + 1  # [CLS] and the corner tokens
        allowed = (ids != self.pad_token_id)[:, None, :].expand(n, length, length).clone()
        allowed[:, :, :heads] = False
        allowed[:, heads:, 0] = True
        idx = torch.arange(heads, device=ids.device)
        allowed[:, idx, idx] = True
        return (1.0 - allowed[:, None].to(dtype)) * torch.finfo(dtype).min

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        dtype = self.proj.weight.dtype
        out = self.transformer(input_ids=ids, attention_mask=self.attention_mask(ids, dtype))
        pooler = cast(Any, self.transformer).pooler
        pooled = pooler.activation(pooler.dense(out.last_hidden_state[:, 0]))
        projected: torch.Tensor = self.proj(pooled)
        return projected


class LoTLIPCLIP(nn.Module):
    """``visual`` (open_clip's timm tower), ``text`` (:class:`CornerTokenText`), ``logit_scale``."""

    def __init__(self, visual: nn.Module, text: CornerTokenText):
        super().__init__()
        self.visual = visual
        self.text = text
        self.logit_scale = nn.Parameter(torch.ones([]) * np.log(1 / 0.07))

    def encode_image(self, image: torch.Tensor, normalize: bool = False) -> torch.Tensor:
        features: torch.Tensor = self.visual(image)
        return F.normalize(features, dim=-1) if normalize else features

    def encode_text(self, text: torch.Tensor, normalize: bool = False) -> torch.Tensor:
        features = self.text(text)
        return F.normalize(features, dim=-1) if normalize else features


class LoTLIPEncoder(OpenCLIPEncoder):
    """An :class:`OpenCLIPEncoder` whose tokenizer is LoTLIP's rule (true lengths counted after the rule)."""

    def tokenize(self, texts: Sequence[str]) -> TokenizedTexts:
        return cast(LoTLIPTokenizer, self.tokenizer).encode(texts, self.info.context_length)


def _config(model: str, model_config: str | Path | None) -> tuple[str, dict[str, Any]]:
    name = model[len(PREFIX):] if model.lower().startswith(PREFIX) else model
    cfg = family_config("lotlip", "LoTLIP", name, model_config, RELEASE_CONFIGS)
    text, vision = cfg.get("text_cfg", {}), cfg.get("vision_cfg", {})
    if not isinstance(text, dict) or not isinstance(vision, dict) or "embed_dim" not in cfg \
            or "hf_model_name" not in text or "timm_model_name" not in vision:
        raise ConfigError(f"lotlip: {model_config or name}: a LoTLIP config needs embed_dim, vision_cfg."
                          "timm_model_name and text_cfg.hf_model_name")
    return name, cfg


def load_lotlip(model: str, pretrained: str | None = None, *, model_config: str | Path | None = None,
                context_length: int | None = None, device: str = "cpu", precision: str = "fp32",
                init_seed: int | None = 0) -> LoTLIPEncoder:
    """Build LoTLIP from ``lotlip:ARCH`` (its checkpoint, or a seeded random init without one)."""
    from open_clip.model import CLIPVisionCfg, _build_vision_tower
    from open_clip.transform import PreprocessCfg, image_transform_v2
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    name, cfg = _config(model, model_config)
    text_cfg, embed_dim = cfg["text_cfg"], int(cfg["embed_dim"])
    if pretrained and not Path(pretrained).is_file():
        raise CheckpointError(f"checkpoint not found: {pretrained}")
    sd = read_state_dict(pretrained) if pretrained else None  # read (and refused) before anything is built
    ctx = int(context_length or text_cfg.get("context_length", 128))
    known = {f.name for f in dataclasses.fields(CLIPVisionCfg)}
    vision = CLIPVisionCfg(**{k: v for k, v in cfg["vision_cfg"].items() if k in known})
    num_corner = int(text_cfg.get("num_corner_token", 0))
    seed = None if sd is not None else init_seed
    with _seeded(seed):
        visual = _build_vision_tower(embed_dim, vision)
        # the text tower a LoTLIP config names (a BERT): transformers' own classes, never a repo's code
        hf_config = AutoConfig.from_pretrained(text_cfg["hf_model_name"], trust_remote_code=False)
        bert = cast(Any, AutoModel).from_config(hf_config, add_pooling_layer=True, trust_remote_code=False)
        old = bert.get_input_embeddings()
        grown = nn.Embedding(old.num_embeddings + num_corner, old.embedding_dim)
        grown.weight.data.normal_(0.0, float(getattr(hf_config, "initializer_range", 0.02)))
        grown.weight.data[:old.num_embeddings] = old.weight.data
        bert.set_input_embeddings(grown)
        text = CornerTokenText(bert, int(hf_config.hidden_size), embed_dim, num_corner,
                               int(hf_config.pad_token_id or 0))
        clip = LoTLIPCLIP(visual, text)
    if sd is not None:
        own = clip.state_dict()
        load_checkpoint(clip, {k: v for k, v in sd.items() if k in own or not k.endswith(_BUFFER_SUFFIXES)},
                        f"LoTLIP checkpoint {pretrained}", LOTLIP.training_only_keys)
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
    if dtype is not None:
        clip.to(dtype)
    tokenizer_name = str(text_cfg.get("hf_tokenizer_name", text_cfg["hf_model_name"]))
    tokenizer = LoTLIPTokenizer(AutoTokenizer.from_pretrained(tokenizer_name, trust_remote_code=False), tokenizer_name, num_corner)
    if len(tokenizer.tokenizer) != grown.num_embeddings:
        raise ConfigError(f"lotlip: tokenizer {tokenizer_name} has {len(tokenizer.tokenizer)} tokens with its corner "
                          f"tokens but the text tower {grown.num_embeddings} rows")
    image_size = cast(Any, visual).image_size
    preprocess = image_transform_v2(PreprocessCfg(size=image_size), is_train=False)
    info = ModelInfo(arch=f"{PREFIX}{name}", pretrained=pretrained,
                     fingerprint=state_dict_fingerprint(clip.state_dict()), context_length=ctx,
                     n_params=sum(p.numel() for p in clip.parameters()), embed_dim=embed_dim, framework="open_clip",
                     extra={"precision": precision, "family": "lotlip", "num_corner_token": num_corner,
                            **({"init_seed": seed} if seed is not None else {})})
    return LoTLIPEncoder(clip.to(device), tokenizer, preprocess, info)


class LoTLIPFamily(ModelFamily):
    """LoTLIP: loads with :func:`load_lotlip`; weights from its checkpoint file; text by its corner-token rule, padded
    to 128. No LoRA targets or export are declared yet (training LoTLIP is refused by the base class)."""

    name = "lotlip"
    training_only_keys = MappingProxyType(FINELIP_CROSS_NET)  # as before families declared their own

    def weight_files(self, model: str, pretrained: str | None, model_config: str | Path | None) -> list[str] | None:
        if not pretrained:
            return [RANDOM_INIT]  # the towers are built from their configs, never from pretrained weights
        path = Path(pretrained)
        return [str(path.resolve())] if path.is_file() else None

    def text_preprocessing(self, encoder: Any) -> TextPreprocessing:
        tok = cast(LoTLIPTokenizer, encoder.tokenizer)
        return TextPreprocessing(tokenizer=f"{tok.name} + corner tokens {' '.join(tok.corners)}, '. ' -> "
                                           f"{tok.sep_token}", context_length=int(encoder.info.context_length),
                                 padding="max_length")

    def tower_of(self, param_name: str) -> str:
        if "logit_scale" in param_name:
            return "shared"
        return "image" if param_name.startswith("visual.") else "text"


LOTLIP = LoTLIPFamily(load_lotlip)
