"""FLAIR (CVPR'25, ``ExplainableML/flair``): open_clip's ViT with its local tokens, a CLIP text tower, and a
text-conditioned attention pooling block.

``--model flair:ViT-B-16-FLAIR --pretrained FILE`` (the release's architecture, ``src/flair/model_configs/
ViT-B-16-FLAIR.json``: embed 512, ViT-B/16 at 224 px, text context 77, logit bias initialised to -10), or
``--model flair:NAME --model-config FILE.json`` in the same schema. ``--pretrained`` is a released
``flair-*.pt`` (HF ``xiaorui638/flair``) in the layout the authors' ``FLAIR`` module saves and their
``load_state_dict`` reads (a ``{"state_dict": …}`` training checkpoint and ``module.`` prefixes accepted):

- ``visual.*``: the ViT (``conv1``, ``class_embedding``, ``positional_embedding``, ``ln_pre``,
  ``transformer.resblocks.*``, ``ln_post``), no ``visual.proj``: the tower returns its ``ln_post``-ed class token
  and patch tokens;
- the text tower at the top level (``token_embedding``, ``positional_embedding``, ``transformer.resblocks.*``,
  ``ln_final``), pooled at the end token (the largest id), no ``text_projection``;
- ``image_post.proj`` / ``text_post.proj``: the post-projections of both towers' tokens into the joint space;
- ``visual_proj.*``: ``PureAttentionPoolingBlock`` (LayerNorms ``ln_q`` / ``ln_k`` / ``ln_v`` and an 8-head
  attention with a zero-attention slot, ``attn.in_proj_*`` / ``attn.out_proj.*``);
- ``logit_scale``, ``logit_bias`` (a file without a bias gets a zero one, as the authors' loader does).

Any other key, or a missing one, is refused in one line that lists them (:func:`hnbench.models.checkpoint.load_into`).

FLAIR is not a dual encoder. As an :class:`~hnbench.models.base.Encoder` it scores FLAIR's **global** mode
(``get_logits_as_clip``, ``--direct-global-matching``: plain cosine of the post-projected class token and end
token; recorded as ``info.extra["scoring"]``), which the authors say did not produce the paper's numbers. The
paper's scoring is the pairwise scorer ``flair-conditioned`` (:class:`FlairConditionedScorer`,
:meth:`FlairFamily.pair_scorers`): every caption's global token queries every image's local tokens through the
pooling block, and the caption is scored against that text-specific image embedding.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hnbench.errors import CheckpointError, ConfigError
from hnbench.models.base import Encoder, ModelInfo, as_deferred, family_config, state_dict_fingerprint
from hnbench.models.checkpoint import load_checkpoint, read_state_dict
from hnbench.models.family import RANDOM_INIT, ModelFamily, TextPreprocessing
from hnbench.models.openclip import OPEN_CLIP, OpenCLIPEncoder, _seeded

__all__ = ["FLAIR", "FlairCLIP", "FlairConditionedScorer", "FlairEncoder", "FlairFamily", "TextConditionedPool",
           "load_flair"]

PREFIX = "flair:"
DEFAULT_ARCH = "ViT-B-16-FLAIR"
POOL_HEADS = 8  # PureAttentionPoolingBlock(context_dim=embed_dim)'s default, the one FLAIR builds
SCORER = "flair-conditioned"
# The released architecture (FLAIR's src/flair/model_configs/ViT-B-16-FLAIR.json).
RELEASE_CONFIGS: dict[str, dict[str, Any]] = {
    DEFAULT_ARCH: {"embed_dim": 512, "init_logit_bias": -10,
                   "vision_cfg": {"image_size": 224, "layers": 12, "width": 768, "patch_size": 16,
                                  "output_tokens": True},
                   "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 512, "heads": 8, "layers": 12}},
}


class PostProjection(nn.Module):
    """``x @ proj``: FLAIR's ``VisionPostProcess`` / ``TextPostProcess`` as the release builds them (no LayerNorm,
    no normalisation)."""

    def __init__(self, width: int, embed_dim: int):
        super().__init__()
        self.proj = nn.Parameter(width ** -0.5 * torch.randn(width, embed_dim))

    def forward(self, x: Tensor) -> Tensor:
        return x @ self.proj


class TextConditionedPool(nn.Module):
    """FLAIR's text-conditioned attention pooling: LayerNorms on query, keys and values, then multi-head attention
    whose keys and values get one all-zero slot after their projection (``add_zero_attn``), so a query may attend
    to nothing. Parameters named as ``nn.MultiheadAttention``'s (``attn.in_proj_weight`` …), which holds them.

    Split in three so a blocked evaluation projects each side once: :meth:`queries` (per caption),
    :meth:`keys_values` (per image), :meth:`pool` (per block of captions × images)."""

    def __init__(self, dim: int, heads: int = POOL_HEADS):
        super().__init__()
        if dim % heads:
            raise ConfigError(f"flair: embed_dim {dim} is not a multiple of the pooling block's {heads} heads")
        self.heads = heads
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True, add_zero_attn=True)
        self.ln_q, self.ln_k, self.ln_v = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)

    def _project(self, x: Tensor, part: int) -> Tensor:
        """``x`` (…, L, D) through the ``part``-th third of the in-projection, as heads (…, heads, L, D/heads)."""
        dim = x.shape[-1]
        w = self.attn.in_proj_weight[part * dim:(part + 1) * dim]
        b = cast(Tensor, self.attn.in_proj_bias)[part * dim:(part + 1) * dim]
        return F.linear(x, w, b).reshape(*x.shape[:-1], self.heads, dim // self.heads).transpose(-3, -2)

    def queries(self, text: Tensor) -> Tensor:
        """``(heads, T, D/heads)`` queries of ``T`` global text tokens ``(T, D)``."""
        return self._project(self.ln_q(text), 0)

    def keys_values(self, tokens: Tensor) -> tuple[Tensor, Tensor]:
        """``(I, heads, L+1, D/heads)`` keys and values of ``I`` images' local tokens ``(I, L, D)``, the zero slot
        appended last."""
        k, v = self._project(self.ln_k(tokens), 1), self._project(self.ln_v(tokens), 2)
        zero = k.new_zeros(*k.shape[:-2], 1, k.shape[-1])
        return torch.cat((k, zero), dim=-2), torch.cat((v, zero), dim=-2)

    def pool(self, queries: Tensor, keys: Tensor, values: Tensor) -> Tensor:
        """``(I, T, D)``: each of ``T`` queries ``(heads, T, d)`` attends over each of ``I`` images' keys and values
        ``(I, heads, L+1, d)`` in one attention call."""
        n_images = keys.shape[0]
        out = F.scaled_dot_product_attention(queries.unsqueeze(0).expand(n_images, -1, -1, -1), keys, values)
        return cast(Tensor, self.attn.out_proj(out.transpose(1, 2).flatten(2)))

    def forward(self, text: Tensor, tokens: Tensor) -> Tensor:
        """``(I, T, D)`` text-conditioned image embeddings of ``T`` global text tokens ``(T, D)`` over ``I`` images'
        local tokens ``(I, L, D)``."""
        return self.pool(self.queries(text), *self.keys_values(tokens))


class FlairCLIP(nn.Module):
    """FLAIR's modules under the release's names, with open_clip's ``encode_image`` / ``encode_text`` API giving the
    global features (:meth:`image_tokens` and :meth:`text_tokens` give what the pooling block takes)."""

    attn_mask: Tensor
    token_embedding: nn.Embedding
    positional_embedding: nn.Parameter
    transformer: nn.Module
    ln_final: nn.Module

    def __init__(self, visual: nn.Module, text: nn.Module, *, embed_dim: int, init_logit_bias: float | None):
        super().__init__()
        self.visual = visual
        self.visual_proj = TextConditionedPool(embed_dim)
        tower: Any = text  # open_clip's TextTransformer: its parts are kept, its text_projection is not
        self.context_length = int(tower.context_length)
        self.token_embedding, self.positional_embedding = tower.token_embedding, tower.positional_embedding
        self.transformer, self.ln_final = tower.transformer, tower.ln_final
        self.register_buffer("attn_mask", tower.attn_mask, persistent=False)
        self.logit_scale = nn.Parameter(torch.ones([]) * math.log(1 / 0.07))
        self.logit_bias = nn.Parameter(torch.ones([]) * init_logit_bias) if init_logit_bias is not None else None
        self.image_post = PostProjection(int(cast(Any, visual).transformer.width), embed_dim)
        self.text_post = PostProjection(int(tower.width), embed_dim)

    def image_tokens(self, image: Tensor) -> tuple[Tensor, Tensor]:
        """The post-projected class token ``(N, D)`` and patch tokens ``(N, L, D)``."""
        pooled, tokens = self.visual(image)
        return self.image_post(pooled), self.image_post(tokens)

    def text_tokens(self, text: Tensor) -> Tensor:
        """The post-projected end-token feature ``(N, D)`` of ``text`` (padded to the context or trimmed to the
        batch's longest caption: the tower is causal, the end token sees only what precedes it)."""
        length = text.shape[1]
        if length > self.context_length:
            raise ConfigError(f"FLAIR text tower: {length} tokens exceed its context length {self.context_length}")
        x = self.token_embedding(text) + self.positional_embedding[:length]
        x = self.ln_final(self.transformer(x, attn_mask=self.attn_mask[:length, :length]))
        return cast(Tensor, self.text_post(x[torch.arange(x.shape[0], device=x.device), text.argmax(dim=-1)]))

    def encode_image(self, image: Tensor, normalize: bool = False) -> Tensor:
        features = self.image_tokens(image)[0]
        return F.normalize(features, dim=-1) if normalize else features

    def encode_text(self, text: Tensor, normalize: bool = False) -> Tensor:
        features = self.text_tokens(text)
        return F.normalize(features, dim=-1) if normalize else features


class FlairEncoder(OpenCLIPEncoder):
    """FLAIR as a dual encoder (its global mode); :class:`FlairConditionedScorer` reads ``model`` for the rest."""

    model: FlairCLIP


def _config(model: str, model_config: str | Path | None) -> tuple[str, dict[str, Any]]:
    name = (model[len(PREFIX):] if model.lower().startswith(PREFIX) else model) or DEFAULT_ARCH
    cfg = family_config("flair", "FLAIR", name, model_config, RELEASE_CONFIGS)
    from open_clip.model import CLIPTextCfg, CLIPVisionCfg

    where = model_config or name
    vision, text = cfg.get("vision_cfg"), cfg.get("text_cfg")
    if not isinstance(vision, dict) or not isinstance(text, dict) or not isinstance(cfg.get("embed_dim"), int):
        raise ConfigError(f"flair: {where}: a FLAIR config needs embed_dim, vision_cfg and text_cfg")
    for part, given, schema in (("vision_cfg", vision, CLIPVisionCfg), ("text_cfg", text, CLIPTextCfg)):
        unknown = sorted(set(given) - {f.name for f in dataclasses.fields(schema)})
        if unknown:
            raise ConfigError(f"flair: {where}: unknown {part} keys: {', '.join(unknown)}")
    if vision.get("timm_model_name") or not isinstance(vision.get("layers", 12), int) or text.get("hf_model_name"):
        raise ConfigError(f"flair: {where}: FLAIR's towers are open_clip's ViT and CLIP text transformer "
                          "(no timm, ResNet or Hugging Face tower)")
    if vision.get("attentional_pool") or text.get("embed_cls") or text.get("no_causal_mask") \
            or text.get("pool_type", "argmax") != "argmax" or vision.get("pool_type", "tok") != "tok":
        raise ConfigError(f"flair: {where}: FLAIR pools the class token and the end token (a causal text tower)")
    return name, cfg


def _check(model: str, pretrained: str | None, model_config: str | Path | None) -> tuple[str, dict[str, Any]]:
    name, cfg = _config(model, model_config)
    if pretrained and not Path(pretrained).is_file():
        raise CheckpointError(f"checkpoint not found: {pretrained}")
    return name, cfg


def load_flair(model: str, pretrained: str | None = None, *, model_config: str | Path | None = None,
               context_length: int | None = None, device: str = "cpu", precision: str = "fp32",
               init_seed: int | None = 0) -> FlairEncoder:
    """Build FLAIR from ``flair:ARCH`` (its checkpoint, or a seeded random init without one)."""
    from open_clip.model import CLIPTextCfg, CLIPVisionCfg, _build_text_tower, _build_vision_tower
    from open_clip.tokenizer import SimpleTokenizer
    from open_clip.transform import PreprocessCfg, image_transform_v2

    name, cfg = _check(model, pretrained, model_config)
    sd = read_state_dict(pretrained) if pretrained else None  # read (and refused) before anything is built
    embed_dim, quick_gelu = int(cfg["embed_dim"]), bool(cfg.get("quick_gelu", False))
    text_cfg = dict(cfg["text_cfg"])
    ctx = int(context_length or text_cfg.get("context_length", 77))
    text_cfg["context_length"] = ctx
    seed = None if sd is not None else init_seed
    with _seeded(seed):
        visual = _build_vision_tower(embed_dim, CLIPVisionCfg(**{**cfg["vision_cfg"], "output_tokens": True}),
                                     quick_gelu)
        visual.proj = None  # FLAIR's tower ends at ln_post; image_post projects its tokens
        text = _build_text_tower(embed_dim, CLIPTextCfg(**text_cfg), quick_gelu)
        bias = cfg.get("init_logit_bias")
        clip = FlairCLIP(visual, text, embed_dim=embed_dim, init_logit_bias=None if bias is None else float(bias))
    if sd is not None:
        if clip.logit_bias is not None and "logit_bias" not in sd:
            sd["logit_bias"] = torch.zeros(())  # FLAIR's load_checkpoint does the same for a file without one
        load_checkpoint(clip, sd, f"FLAIR checkpoint {pretrained}")
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
    if dtype is not None:
        clip.to(dtype)
    preprocess = image_transform_v2(PreprocessCfg(size=cast(Any, visual).image_size), is_train=False)
    info = ModelInfo(arch=f"{PREFIX}{name}", pretrained=pretrained,
                     fingerprint=state_dict_fingerprint(clip.state_dict()), context_length=ctx,
                     n_params=sum(p.numel() for p in clip.parameters()), embed_dim=embed_dim, framework="open_clip",
                     extra={"precision": precision, "family": "flair",
                            "scoring": "global (FLAIR's get_logits_as_clip: cosine of the global image and text "
                                       f"features; the paper's text-conditioned scoring is --scorer {SCORER})",
                            **({"init_seed": seed} if seed is not None else {})})
    tokenizer = SimpleTokenizer(context_length=ctx)  # FLAIR's get_tokenizer: CLIP's BPE
    return FlairEncoder(clip.to(device), tokenizer, preprocess, info)


class FlairConditionedScorer:
    """FLAIR's paper scoring of (caption, image) pairs (``FLAIR.get_logits``; ``--inference-with-flair``): the
    caption's post-projected global token queries the image's post-projected local tokens through the pooling
    block, and the score is the cosine of that text-specific image embedding with the caption's global feature
    (FLAIR's logit ``exp(logit_scale) * cos + logit_bias`` ranks the same).

    States hold what each side contributes, projected once: per image the pooling block's keys and values with
    their zero slot (``(heads, L+1, D/heads)`` each) and the global feature; per caption its queries
    (``(heads, D/heads)``) and normalised global feature. :meth:`score` of a block of ``T`` captions × ``I`` images
    makes one attention call; its memory is O(T·I·D), never the whole gallery's."""

    name = SCORER
    description = ("FLAIR's text-conditioned scoring: each caption's global token attends over the image's local "
                   "tokens (the pooling block); cosine of that text-specific image embedding with the caption")

    def __init__(self, encoder: Encoder):
        self._encoder = encoder

    def _model(self) -> FlairCLIP:
        encoder = self._encoder
        deferred = as_deferred(encoder)
        if deferred is not None:  # remembered: the model is built on first use
            encoder = deferred.real()
        if not isinstance(encoder, FlairEncoder):
            raise ConfigError(f"--scorer {SCORER} needs a FLAIR model (flair:ARCH), not {encoder.info.arch}")
        return encoder.model

    @torch.inference_mode()
    def image_state(self, pixels: Tensor) -> dict[str, Tensor]:
        model = self._model()
        weight = model.image_post.proj
        global_, local = model.image_tokens(pixels.to(device=weight.device, dtype=weight.dtype))
        keys, values = model.visual_proj.keys_values(local)
        return {"keys": keys, "values": values, "global": F.normalize(global_, dim=-1)}

    @torch.inference_mode()
    def text_state(self, tokens: Tensor) -> dict[str, Tensor]:
        model = self._model()
        text = model.text_tokens(tokens.to(model.image_post.proj.device))
        return {"queries": model.visual_proj.queries(text).transpose(0, 1), "feature": F.normalize(text, dim=-1)}

    @torch.inference_mode()
    def score(self, text_state: dict[str, Tensor], image_state: dict[str, Tensor]) -> Tensor:
        """``(n_texts, n_images)`` cosines of every caption of the block with its own view of every image."""
        model = self._model()
        device = model.image_post.proj.device
        queries = text_state["queries"].to(device).transpose(0, 1)
        keys, values = image_state["keys"].to(device), image_state["values"].to(device)
        conditioned = F.normalize(model.visual_proj.pool(queries, keys, values), dim=-1)  # (I, T, D)
        scores = torch.einsum("itd,td->ti", conditioned.float(), text_state["feature"].to(device).float())
        return scores.to(text_state["feature"].device)


class FlairFamily(ModelFamily):
    """FLAIR: loads with :func:`load_flair`; weights from its checkpoint file; CLIP's BPE padded to the context (77);
    the pairwise scorer ``flair-conditioned``. Fine-tuning is refused (FLAIR trains with its own sigmoid loss)."""

    name = "flair"

    def load(self, model: str, pretrained: str | None = None, *, model_config: str | Path | None = None,
             context_length: int | None = None, device: str = "cpu", precision: str = "fp32",
             init_seed: int | None = 0) -> FlairEncoder:
        return load_flair(model, pretrained, model_config=model_config, context_length=context_length,
                          device=device, precision=precision, init_seed=init_seed)

    def check(self, model: str, pretrained: str | None = None, *, model_config: str | Path | None = None) -> None:
        _check(model, pretrained, model_config)

    def weight_files(self, model: str, pretrained: str | None, model_config: str | Path | None) -> list[str] | None:
        if not pretrained:
            return [RANDOM_INIT]
        path = Path(pretrained)
        return [str(path.resolve())] if path.is_file() else None

    def text_preprocessing(self, encoder: Any) -> TextPreprocessing:
        return OPEN_CLIP.text_preprocessing(encoder)  # open_clip's SimpleTokenizer, padded to the context

    def check_training(self, model: str) -> None:
        raise ConfigError(f"{model}: hnbench does not fine-tune FLAIR (its text-conditioned sigmoid loss is not "
                          "implemented); evaluate it with hnbench eval")

    def pair_scorers(self, encoder: Any) -> dict[str, Any]:
        """The pairwise scorers a loaded (or remembered) FLAIR encoder offers: ``flair-conditioned``."""
        return {SCORER: FlairConditionedScorer(encoder)}

    def pair_scorer_names(self, model: str, pretrained: str | None) -> list[str] | None:
        """Every FLAIR model offers ``flair-conditioned`` (known before it loads)."""
        return [SCORER]


FLAIR = FlairFamily()
