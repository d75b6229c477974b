"""TULIP (ICLR'25, ``ivonajdenkoska/tulip``): open_clip's image tower with a rotary-position (RoPE) text tower.

``--model tulip:ARCH --pretrained FILE``: ``ARCH`` is the open_clip architecture TULIP was distilled from (the
release: ``ViT-L-14``); the text tower's width, heads, layers and vocabulary are that architecture's text config
(the authors' ``eval_tulip.py`` builds ``TextTransformerRoPE`` from the teacher config, output width = text width),
its context 248 (``--context-length`` overrides; tulip#4: results shift at 200), its tokenizer the architecture's
CLIP BPE. The checkpoint is the release's layout: a training checkpoint (``{"state_dict": …}``, ``module.``
prefixes) holding the RoPE text tower's keys at the top level (``token_embedding``, ``transformer.resblocks.*``,
``ln_final``, ``text_projection``) and the image tower under ``visual.``; the teacher's learned
``positional_embedding`` that the context fine-tune leaves in the file is unused by the RoPE tower and dropped.
Any other key is refused in one line that lists it (:func:`hnbench.models.checkpoint.load_into`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from hnbench.errors import CheckpointError, ConfigError
from hnbench.models.base import ModelInfo, state_dict_fingerprint
from hnbench.models.checkpoint import FINELIP_CROSS_NET, load_checkpoint, read_state_dict
from hnbench.models.family import RANDOM_INIT
from hnbench.models.openclip import (
    OpenCLIPEncoder,
    OpenCLIPFamily,
    _quiet_random_init,
    _seeded,
    register_builtin_configs,
    register_model_config,
    resolve_pretrained,
)

__all__ = ["TULIP", "RoPETextCLIP", "TulipFamily", "load_tulip"]

logger = logging.getLogger(__name__)

PREFIX = "tulip:"
DEFAULT_ARCH = "ViT-L-14"
CONTEXT_LENGTH = 248  # eval_tulip.py's default; the released model was fine-tuned to it
# A distilled TULIP file (main_distill_rope.py, or eval_tulip.py's --lit_style): the student text tower alone.
_TEXT_ONLY = ("it holds only TULIP's RoPE text tower (no visual.* keys: a distilled / --lit_style text file); "
              "scoring it needs the image tower in the same file: add the teacher's (open_clip {arch}, the weights "
              "it was distilled from) visual.* keys to it, or use the context-fine-tuned release that has both")
# Keys the release carries that the RoPE model does not use (dropped with an INFO line): the teacher's learned table.
UNUSED_KEYS = ("positional_embedding",)


def rope_tables(head_dim: int, n_positions: int, theta: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin ``(n_positions, head_dim // 2)`` of the rotation each adjacent channel pair turns by."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2)[: head_dim // 2].float() / head_dim))
    angles = torch.outer(torch.arange(n_positions).float(), inv_freq)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate channel pairs ``(2i, 2i+1)`` of ``x`` ``(N, heads, L, head_dim)`` by position (computed in fp32)."""
    xf = x.float().reshape(*x.shape[:-1], -1, 2)
    a, b = xf[..., 0], xf[..., 1]
    out = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)
    return out.type_as(x)


class RoPEAttention(nn.Module):
    """Multi-head self-attention with rotary positions on queries and keys (open_clip's parameter names)."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.in_proj_weight = nn.Parameter(torch.empty(3 * width, width))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * width))
        self.out_proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        n, length, width = x.shape
        q, k, v = (t.reshape(n, length, self.heads, -1).transpose(1, 2)
                   for t in F.linear(x, self.in_proj_weight, self.in_proj_bias).chunk(3, dim=-1))
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        projected: torch.Tensor = self.out_proj(out.transpose(1, 2).reshape(n, length, width))
        return projected


class _MLP(nn.Module):
    def __init__(self, width: int, hidden: int):
        super().__init__()
        self.c_fc = nn.Linear(width, hidden)
        self.c_proj = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.c_proj(F.gelu(self.c_fc(x)))
        return out


class RoPEBlock(nn.Module):
    def __init__(self, width: int, heads: int, mlp_ratio: float):
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = RoPEAttention(width, heads)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = _MLP(width, int(width * mlp_ratio))

    def forward(self, x: torch.Tensor, mask: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), mask, cos, sin)
        out: torch.Tensor = x + self.mlp(self.ln_2(x))
        return out


class _Blocks(nn.Module):
    def __init__(self, width: int, heads: int, layers: int, mlp_ratio: float):
        super().__init__()
        self.resblocks = nn.ModuleList(RoPEBlock(width, heads, mlp_ratio) for _ in range(layers))


class RoPETextCLIP(nn.Module):
    """An open_clip image tower (``visual``) and TULIP's causal RoPE text tower, pooled at the end token (the
    largest id), with open_clip's ``encode_image`` / ``encode_text`` API."""

    rope_cos: torch.Tensor
    rope_sin: torch.Tensor

    def __init__(self, visual: nn.Module, *, vocab_size: int, width: int, heads: int, layers: int,
                 context_length: int, mlp_ratio: float = 4.0):
        super().__init__()
        self.visual = visual
        self.context_length = context_length
        self.token_embedding = nn.Embedding(vocab_size, width)
        self.transformer = _Blocks(width, heads, layers, mlp_ratio)
        self.ln_final = nn.LayerNorm(width)
        self.text_projection = nn.Parameter(torch.empty(width, width))
        self.logit_scale = nn.Parameter(torch.ones([]) * math.log(1 / 0.07))
        cos, sin = rope_tables(width // heads, 2 * context_length)  # the authors' table: twice the context
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self._init(width, layers)

    def _init(self, width: int, layers: int) -> None:  # TextTransformerRoPE.init_parameters' scales
        nn.init.normal_(self.token_embedding.weight, std=0.02)
        for block in self.transformer.resblocks:
            assert isinstance(block, RoPEBlock)
            nn.init.normal_(block.attn.in_proj_weight, std=width ** -0.5)
            nn.init.normal_(block.attn.out_proj.weight, std=width ** -0.5 * (2 * layers) ** -0.5)
            nn.init.normal_(block.mlp.c_fc.weight, std=(2 * width) ** -0.5)
            nn.init.normal_(block.mlp.c_proj.weight, std=width ** -0.5 * (2 * layers) ** -0.5)
        nn.init.normal_(self.text_projection, std=width ** -0.5)

    def encode_image(self, image: torch.Tensor, normalize: bool = False) -> torch.Tensor:
        features: torch.Tensor = self.visual(image)
        return F.normalize(features, dim=-1) if normalize else features

    def encode_text(self, text: torch.Tensor, normalize: bool = False) -> torch.Tensor:
        length = text.shape[1]
        if length > self.context_length:
            raise ConfigError(f"TULIP text tower: {length} tokens exceed its context length {self.context_length}")
        x = self.token_embedding(text)
        mask = torch.full((length, length), float("-inf"), device=x.device, dtype=x.dtype).triu_(1)
        cos, sin = self.rope_cos[:length], self.rope_sin[:length]
        for block in self.transformer.resblocks:
            x = block(x, mask, cos, sin)
        x = self.ln_final(x)
        pooled = x[torch.arange(x.shape[0], device=x.device), text.argmax(dim=-1)] @ self.text_projection
        return F.normalize(pooled, dim=-1) if normalize else pooled


def arch_of(model: str) -> str:
    """The open_clip architecture of a ``tulip:ARCH`` name (bare ``tulip``: the release's ViT-L-14)."""
    arch = model[len(PREFIX):] if model.lower().startswith(PREFIX) else ""
    return arch or DEFAULT_ARCH


def load_tulip(model: str, pretrained: str | None = None, *, model_config: str | Path | None = None,
               context_length: int | None = None, device: str = "cpu", precision: str = "fp32",
               init_seed: int | None = 0) -> OpenCLIPEncoder:
    """Build TULIP from ``tulip:ARCH`` (its checkpoint, or a seeded random init without one)."""
    import open_clip

    register_builtin_configs()
    arch = arch_of(model)
    if model_config is not None:
        arch = register_model_config(model_config, name=arch)
    cfg = open_clip.get_model_config(arch)
    if not cfg:
        raise ConfigError(f"tulip: unknown open_clip architecture {arch!r} (the teacher TULIP was distilled from, "
                          f"e.g. tulip:{DEFAULT_ARCH}; or pass --model-config FILE.json)")
    text = cfg["text_cfg"]
    if int(cfg["embed_dim"]) != int(text["width"]):
        raise ConfigError(f"tulip: {arch}'s embed_dim {cfg['embed_dim']} differs from its text width "
                          f"{text['width']}; TULIP's text tower projects to its width (eval_tulip.py)")
    if text.get("act_kwargs") or cfg.get("quick_gelu") or text.get("norm_kwargs"):
        raise ConfigError(f"tulip: {arch}'s text config is not TULIP's (GELU, LayerNorm)")
    local_file, tag = resolve_pretrained(arch, pretrained)
    if tag:
        raise ConfigError(f"tulip: --pretrained must be a TULIP checkpoint file, not an open_clip tag ({tag!r})")
    sd = read_state_dict(local_file) if local_file else None  # read (and refused) before anything is built
    ctx = int(context_length or CONTEXT_LENGTH)
    seed = None if sd is not None else init_seed
    with _quiet_random_init(enabled=True), _seeded(seed):  # only the image tower is kept
        base, _, preprocess = open_clip.create_model_and_transforms(arch, pretrained=None, device="cpu")
        clip = RoPETextCLIP(base.visual, vocab_size=int(text["vocab_size"]), width=int(text["width"]),
                            heads=int(text["heads"]), layers=int(text["layers"]), context_length=ctx,
                            mlp_ratio=float(text.get("mlp_ratio", 4.0)))
    if sd is not None:
        if not any(k.startswith("visual.") for k in sd):
            raise CheckpointError(f"TULIP checkpoint {local_file}: {_TEXT_ONLY.format(arch=arch)}")
        dropped = [k for k in UNUSED_KEYS if k in sd]
        if dropped:
            logger.info("%s: ignoring %s (unused by the RoPE text tower)", local_file, ", ".join(dropped))
        sd = {k: v for k, v in sd.items() if k not in UNUSED_KEYS}
        sd.setdefault("logit_scale", clip.logit_scale.detach().clone())  # a distilled text file has none
        load_checkpoint(clip, sd, f"TULIP checkpoint {local_file}", TULIP.training_only_keys)
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
    if dtype is not None:
        clip.to(dtype)
    info = ModelInfo(arch=f"{PREFIX}{arch}", pretrained=pretrained, fingerprint=state_dict_fingerprint(clip.state_dict()),
                     context_length=ctx, n_params=sum(p.numel() for p in clip.parameters()),
                     embed_dim=int(cfg["embed_dim"]), framework="open_clip",
                     extra={"precision": precision, "family": "tulip", "text_positions": "rope",
                            **({"init_seed": seed} if seed is not None else {})})
    tokenizer = open_clip.get_tokenizer(arch, context_length=ctx)
    return OpenCLIPEncoder(clip.to(device), tokenizer, preprocess, info)


class TulipFamily(OpenCLIPFamily):
    """TULIP: open_clip's towers' names (so the open_clip tower split, LoRA targets and safetensors export hold),
    a RoPE text tower that has no position table to stretch."""

    name = "tulip"
    training_only_keys = MappingProxyType(FINELIP_CROSS_NET)  # as before families declared their own
    trims_text_batches = False  # its RoPE tower runs each batch padded to the context (trimming not proved equal)

    def load(self, model: str, pretrained: str | None = None, *, model_config: str | Path | None = None,
             context_length: int | None = None, device: str = "cpu", precision: str = "fp32",
             init_seed: int | None = 0) -> OpenCLIPEncoder:
        return load_tulip(model, pretrained, model_config=model_config, context_length=context_length,
                          device=device, precision=precision, init_seed=init_seed)

    def catalogue(self, *, architectures: bool = True) -> list[dict[str, Any]]:
        return []  # open_clip's built-in model and architectures are open_clip's to list, not TULIP's

    def weight_files(self, model: str, pretrained: str | None, model_config: str | Path | None) -> list[str] | None:
        if not pretrained:
            return [RANDOM_INIT]
        path = Path(pretrained)
        return [str(path.resolve())] if path.is_file() else None

    def claims(self, state_dict: Mapping[str, torch.Tensor], arch: str) -> str | None:
        """A CLIP text tower (``token_embedding``, ``transformer.resblocks.*``) with no position table is TULIP's RoPE
        tower: an open_clip text tower always has ``positional_embedding``. (The context-fine-tuned release keeps the
        teacher's table and open_clip's key names, so no key or shape tells it from a CLIP fine-tune.)"""
        if "token_embedding.weight" not in state_dict or "positional_embedding" in state_dict or not any(
                k.startswith("transformer.resblocks.") for k in state_dict):
            return None
        base = arch.removeprefix(PREFIX)
        why = f"it holds TULIP's RoPE text tower (text keys with no position table): load it with --model tulip:{base}"
        if not any(k.startswith("visual.") for k in state_dict):
            why += ", once the teacher's image tower (visual.*) is added to it: it has none"
        return why

    def stretch(self, encoder: Any, context_length: int) -> OpenCLIPEncoder:
        raise ConfigError("tulip: its rotary text positions have no table to stretch; pass --context-length instead")

    def reload(self, exported: Path, encoder: Any, *, device: str = "cpu") -> OpenCLIPEncoder:
        info = encoder.info
        return load_tulip(info.arch, str(exported), context_length=int(info.context_length), device=device,
                          precision=info.extra.get("precision", "fp32"))


TULIP = TulipFamily()
