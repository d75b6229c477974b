"""One trainable module over open_clip or HF CLIP: ``forward(pixels, tokens)`` → normalised features.

The trainer, diagnostics and DDP all go through :class:`CLIPTowers`, so the training code does not
care which framework the model comes from. Freezing (lock a tower) and the optional token-level
features for the FILIP term live here as well.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hnbench.errors import ConfigError
from hnbench.models.hf import eos_attention_mask, feature_tensor

__all__ = ["CLIPTowers"]


class CLIPTowers(nn.Module):
    """Wraps ``model`` (open_clip ``CLIP`` or ``transformers.CLIPModel``).

    ``forward(pixels, tokens, with_tokens=False)`` returns a dict: ``image`` and ``text`` (B, D)
    L2-normalised features, ``scale`` = exp(logit_scale) clamped at ``max_logit_scale``; with
    ``with_tokens`` also ``image_tokens`` (B, P, D) and ``text_tokens`` (B, T, D) projected into the
    joint space (open_clip only); ``with_tokens="cls"``: ``image_tokens`` (B, 1+P, D) with the CLS token
    first (every token after ln_post and the projection), as FineLIP reads them.
    """

    def __init__(self, model: nn.Module, framework: str, *, max_logit_scale: float = 100.0,
                 eos_token_id: int | None = None) -> None:
        super().__init__()
        if framework not in ("open_clip", "transformers"):
            raise ConfigError(f"unknown model framework {framework!r}")
        # Any: the framework's own attributes (encode_image, visual, get_text_features, ...) are read below
        self.model: Any = model
        self.framework = framework
        self.max_logit_scale = float(max_logit_scale)
        self.eos_token_id = eos_token_id
        self.extra = nn.ModuleDict()  # an objective's trainable modules (FineLIP's aggregation), set by the trainer

    # -- features -----------------------------------------------------------------------------
    def encode_image(self, pixels: Tensor) -> Tensor:
        if self.framework == "open_clip":
            features: Tensor = self.model.encode_image(pixels, normalize=True)
            return features
        return F.normalize(feature_tensor(self.model.get_image_features(pixel_values=pixels)), dim=-1)

    def encode_text(self, tokens: Tensor) -> Tensor:
        if self.framework == "open_clip":
            features: Tensor = self.model.encode_text(tokens, normalize=True)
            return features
        return F.normalize(feature_tensor(self.model.get_text_features(
            input_ids=tokens, attention_mask=self.hf_attention_mask(tokens))), dim=-1)

    def hf_attention_mask(self, tokens: Tensor) -> Tensor:
        """Attend up to and including the first end token (HF CLIP's pad token may equal it)."""
        return eos_attention_mask(tokens, self.eos_token_id)

    def scale(self) -> Tensor:
        scale: Tensor = self.model.logit_scale.exp().clamp(max=self.max_logit_scale)
        return scale

    def forward(self, pixels: Tensor, tokens: Tensor, with_tokens: bool | str = False) -> dict[str, Tensor]:
        if with_tokens:
            image, image_tokens = self._image_with_tokens(pixels, cls=with_tokens == "cls")
            text, text_tokens = self._text_with_tokens(tokens)
            return {"image": image, "text": text, "scale": self.scale(),
                    "image_tokens": image_tokens, "text_tokens": text_tokens}
        return {"image": self.encode_image(pixels), "text": self.encode_text(tokens), "scale": self.scale()}

    def clamp_logit_scale(self) -> None:
        """Keep the stored log-scale in [0, log(max_logit_scale)] (open_clip's habit, after each step)."""
        with torch.no_grad():
            self.model.logit_scale.clamp_(0, math.log(self.max_logit_scale))

    # -- token-level features (FILIP term) ----------------------------------------------------
    def _image_with_tokens(self, pixels: Tensor, cls: bool = False) -> tuple[Tensor, Tensor]:
        if self.framework != "open_clip":
            raise ConfigError("the token-level loss needs per-patch features: open_clip models only for now")
        visual = self.model.visual
        if not all(hasattr(visual, a) for a in ("_embeds", "_pool", "transformer")):
            raise ConfigError(f"the token-level loss needs an open_clip VisionTransformer, not "
                              f"{type(visual).__name__}")
        x = visual.transformer(visual._embeds(pixels))
        pooled, patches = visual._pool(x)
        if cls:
            if getattr(visual, "pool_type", "tok") != "tok":
                raise ConfigError("token features with CLS need a ViT that pools its CLS token (pool_type 'tok')")
            patches = torch.cat([pooled[:, None], patches], dim=1)
        if visual.proj is not None:
            pooled, patches = pooled @ visual.proj, patches @ visual.proj
        return F.normalize(pooled, dim=-1), patches

    def _text_with_tokens(self, tokens: Tensor) -> tuple[Tensor, Tensor]:
        # heavy (open_clip and its model zoo): imported only when the token-level loss runs
        from open_clip.transformer import text_global_pool

        m = self.model
        if not hasattr(m, "token_embedding"):
            raise ConfigError("the token-level loss needs open_clip's built-in text tower (CLIP, not CustomTextCLIP)")
        cast = m.transformer.get_cast_dtype()
        x = m.token_embedding(tokens).to(cast) + m.positional_embedding.to(cast)
        x = m.ln_final(m.transformer(x, attn_mask=m.attn_mask))
        pooled = text_global_pool(x, tokens, m.text_pool_type, eos_token_id=getattr(m, "text_eos_id", None))
        proj = m.text_projection
        if proj is not None:
            pooled, x = (proj(pooled), proj(x)) if isinstance(proj, nn.Linear) else (pooled @ proj, x @ proj)
        return F.normalize(pooled, dim=-1), x

    def text_token_mask(self, tokens: Tensor) -> Tensor:
        """Real tokens: start token up to and including the end token (argmax for open_clip's BPE)."""
        end = tokens.argmax(dim=1)
        return torch.arange(tokens.shape[1], device=tokens.device)[None, :] <= end[:, None]

    # -- parameters ---------------------------------------------------------------------------
    def tower_of(self, name: str) -> str:
        """'image', 'text' or 'shared' (logit scale / bias) for a parameter name of ``self.model``."""
        if "logit_scale" in name or "logit_bias" in name:
            return "shared"
        if self.framework == "open_clip":
            return "image" if name.startswith("visual.") else "text"
        return "image" if name.startswith(("vision_model.", "visual_projection")) else "text"

    def lock(self, *, image: bool = False, text: bool = False, logit_scale: bool = False) -> None:
        """Freeze a tower (and/or the logit scale): ``requires_grad = False``."""
        for name, p in self.model.named_parameters():
            tower = self.tower_of(name)
            if (tower == "image" and image) or (tower == "text" and text) or (tower == "shared" and logit_scale):
                p.requires_grad_(False)

    def frozen_text_copy(self) -> CLIPTowers:
        """A detached, eval-mode copy of the current text side (for Ḡ from the initial encoder)."""
        clone = copy.deepcopy(self).eval()
        if self.framework == "open_clip":
            clone.model.visual = nn.Identity()
        else:
            clone.model.vision_model = nn.Identity()
        for p in clone.parameters():
            p.requires_grad_(False)
        return clone


def param_groups(named: list[tuple[str, nn.Parameter]], weight_decay: float) -> list[dict[str, Any]]:
    """AdamW groups: weight decay on matrices except embeddings; none on gains, biases, embeddings, scale."""
    decay = [p for n, p in named if p.ndim >= 2 and "embedding" not in n]
    no_decay = [p for n, p in named if not (p.ndim >= 2 and "embedding" not in n)]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
