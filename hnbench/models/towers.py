"""One trainable module over any model family's CLIP module: ``forward(pixels, tokens)`` → normalised features.

The trainer, diagnostics and DDP all go through :class:`CLIPTowers`, which asks the family's adapter
(:class:`~hnbench.models.family.ModelFamily`: its training forward, text attention mask and tower split), so the
training code never branches on the family. Freezing (lock a tower) and the optional token-level features for the
FILIP term live here as well.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hnbench.errors import ConfigError
from hnbench.models.family import ModelFamily, as_family

__all__ = ["CLIPTowers", "TowerHeads", "bpe_encode", "freeze_position_rows"]


@dataclass(frozen=True)
class TowerHeads:
    """The towers' heads as callables on a pooled last-layer state (B, W) → (B, D), unnormalised: ``image``
    = post-LayerNorm + projection, ``text`` = final LayerNorm + projection; and the vision input geometry
    (``input_size`` pixels square, ``patch_size``) that maps a box to its patch tokens."""

    image: Callable[[Tensor], Tensor]
    text_ln: Callable[[Tensor], Tensor]  # the final LayerNorm alone (StructXLIP's chunks: its compat double LN)
    text_proj: Callable[[Tensor], Tensor]  # the text projection alone
    input_size: int
    patch_size: int

    def text(self, h: Tensor) -> Tensor:
        """Final LayerNorm, then the projection."""
        return self.text_proj(self.text_ln(h))


class CLIPTowers(nn.Module):
    """Wraps ``model``, the CLIP module of ``family`` (an adapter, or a name :func:`~hnbench.models.family.as_family`
    resolves: a registered family's name, an encoder's ``info.framework``); ``encoder``: the encoder the module came
    from, whose own text attention mask the text tower gets (without one, the family's mask from ``eos_token_id``).

    ``forward(pixels, tokens, with_tokens=False)`` returns a dict: ``image`` and ``text`` (B, D)
    L2-normalised features, ``scale`` = exp(logit_scale) clamped at ``max_logit_scale``; with
    ``with_tokens`` also ``image_tokens`` (B, P, D) and ``text_tokens`` (B, T, D) projected into the
    joint space (open_clip only); ``with_tokens="cls"``: ``image_tokens`` (B, 1+P, D) with the CLS token
    first (every token after ln_post and the projection), as FineLIP reads them; ``with_tokens="states"``:
    ``image_states`` (B, 1+P, W), the last layer's tokens *before* ln_post (CLS at 0), and ``text_states``
    (B, T, W) *before* ln_final (GOAL's pooling; :meth:`heads` applies the rest to a pooled state).

    ``extra`` (name → tensor): side inputs that go through a tower in the same call (one forward, as data
    parallelism requires): float pixels through the vision tower, token ids through the text tower, each
    concatenated after the batch and split off again as ``out[name]``, (N, D) L2-normalised (and their token
    features as ``out[name + "_states"]`` etc.).
    """

    def __init__(self, model: nn.Module, family: ModelFamily | str, *, max_logit_scale: float = 100.0,
                 eos_token_id: int | None = None, encoder: Any = None) -> None:
        super().__init__()
        self.family = as_family(family)
        # Any: the module's own attributes (logit_scale, visual, token_embedding, ...) are read below
        self.model: Any = model
        self.encoder = encoder  # not a module: not copied into the state dict
        self.max_logit_scale = float(max_logit_scale)
        self.eos_token_id = eos_token_id
        self.extra = nn.ModuleDict()  # an objective's trainable modules (FineLIP's aggregation), set by the trainer

    # -- features -----------------------------------------------------------------------------
    def encode_image(self, pixels: Tensor) -> Tensor:
        return self.family.image_features(self.model, pixels)

    def encode_text(self, tokens: Tensor) -> Tensor:
        return self.family.text_features(self.model, tokens, self.text_attention_mask(tokens))

    def text_attention_mask(self, tokens: Tensor) -> Tensor | None:
        """The text tower's mask for padded ``tokens``: the encoder's own (SigLIP's is not CLIP's end-token mask)."""
        return self.family.text_attention_mask(self.encoder, tokens, self.eos_token_id)

    def scale(self) -> Tensor:
        scale: Tensor = self.model.logit_scale.exp().clamp(max=self.max_logit_scale)
        return scale

    def forward(self, pixels: Tensor, tokens: Tensor, with_tokens: bool | str = False,
                extra: dict[str, Tensor] | None = None) -> dict[str, Tensor]:
        if not extra:
            return self._forward(pixels, tokens, with_tokens)
        images = {k: v for k, v in extra.items() if v.is_floating_point()}
        texts = {k: v for k, v in extra.items() if not v.is_floating_point()}
        out = self._forward(torch.cat([pixels, *images.values()]), torch.cat([tokens, *texts.values()]), with_tokens)
        for side, group, n in (("image", images, pixels.shape[0]), ("text", texts, tokens.shape[0])):
            rows = [v.shape[0] for v in group.values()]
            parts = torch.split(out[side], [n, *rows])
            out[side] = parts[0]
            out.update(zip(group, parts[1:]))
            for key in [k for k in out if k.startswith(side + "_")]:  # token features: split alike, e.g.
                suffix = key[len(side) + 1:]  # text_states → text_states (the batch's) + filtered_states
                pieces = torch.split(out[key], [n, *rows])
                out[key] = pieces[0]
                out.update({f"{name}_{suffix}": piece for name, piece in zip(group, pieces[1:])})
        return out

    def _forward(self, pixels: Tensor, tokens: Tensor, with_tokens: bool | str) -> dict[str, Tensor]:
        if with_tokens == "states":
            image, image_states = self._image_states(pixels)
            text, text_states = self._text_states(tokens)
            return {"image": image, "text": text, "scale": self.scale(),
                    "image_states": image_states, "text_states": text_states}
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

    # -- token-level features (FILIP term, FineLIP, GOAL) --------------------------------------
    def _visual(self) -> Any:
        visual = getattr(self.model, "visual", None)
        if visual is None:
            raise ConfigError(f"the token-level loss needs per-patch features: open_clip models only for now, not "
                              f"{self.family.name}")
        if not all(hasattr(visual, a) for a in ("_embeds", "_pool", "transformer")):
            raise ConfigError(f"the token-level loss needs an open_clip VisionTransformer, not "
                              f"{type(visual).__name__}")
        return visual

    def _image_states(self, pixels: Tensor) -> tuple[Tensor, Tensor]:
        """(normalised pooled features, the last layer's tokens before ln_post) — encode_image's own steps."""
        visual = self._visual()
        x = visual.transformer(visual._embeds(pixels))
        pooled, _ = visual._pool(x)
        if visual.proj is not None:
            pooled = pooled @ visual.proj
        return F.normalize(pooled, dim=-1), x

    def heads(self) -> TowerHeads:
        """The towers' heads and vision geometry (open_clip ViT): see :class:`TowerHeads`."""
        visual, m = self._visual(), self.model
        if getattr(visual, "attn_pool", None) is not None:
            raise ConfigError("GOAL's pooling needs a ViT without attention pooling (pool_type 'tok' or 'avg')")

        # the terms run outside autocast: a pooled state (bf16 under AMP) goes through the heads in their own dtype
        def image(h: Tensor) -> Tensor:
            h = visual.ln_post(h.to(visual.ln_post.weight.dtype))
            return h @ visual.proj if visual.proj is not None else h

        def text_ln(h: Tensor) -> Tensor:
            out: Tensor = m.ln_final(h.to(m.ln_final.weight.dtype))
            return out

        def text_proj(h: Tensor) -> Tensor:
            proj = m.text_projection
            if proj is None:
                return h
            out: Tensor = proj(h) if isinstance(proj, nn.Linear) else h @ proj
            return out

        size, patch = visual.image_size, visual.patch_size
        return TowerHeads(image, text_ln, text_proj, int(size[0] if isinstance(size, tuple) else size),
                          int(patch[0] if isinstance(patch, tuple) else patch))

    def _image_with_tokens(self, pixels: Tensor, cls: bool = False) -> tuple[Tensor, Tensor]:
        visual = self._visual()
        x = visual.transformer(visual._embeds(pixels))
        pooled, patches = visual._pool(x)
        if cls:
            if getattr(visual, "pool_type", "tok") != "tok":
                raise ConfigError("token features with CLS need a ViT that pools its CLS token (pool_type 'tok')")
            patches = torch.cat([pooled[:, None], patches], dim=1)
        if visual.proj is not None:
            pooled, patches = pooled @ visual.proj, patches @ visual.proj
        return F.normalize(pooled, dim=-1), patches

    def _text_layers(self, tokens: Tensor) -> Tensor:
        """The text transformer's last-layer states (B, T, W), before ln_final (open_clip's own steps)."""
        m = self.model
        if not hasattr(m, "token_embedding"):
            raise ConfigError("the token-level loss needs open_clip's built-in text tower (CLIP, not CustomTextCLIP)")
        cast = m.transformer.get_cast_dtype()
        x = m.token_embedding(tokens).to(cast) + m.positional_embedding.to(cast)
        states: Tensor = m.transformer(x, attn_mask=m.attn_mask)
        return states

    def _text_with_tokens(self, tokens: Tensor, states: Tensor | None = None) -> tuple[Tensor, Tensor]:
        # heavy (open_clip and its model zoo): imported only when the token-level loss runs
        from open_clip.transformer import text_global_pool

        m = self.model
        x = m.ln_final(self._text_layers(tokens) if states is None else states)
        pooled = text_global_pool(x, tokens, m.text_pool_type, eos_token_id=getattr(m, "text_eos_id", None))
        proj = m.text_projection
        if proj is not None:
            pooled, x = (proj(pooled), proj(x)) if isinstance(proj, nn.Linear) else (pooled @ proj, x @ proj)
        return F.normalize(pooled, dim=-1), x

    def _text_states(self, tokens: Tensor) -> tuple[Tensor, Tensor]:
        """(normalised pooled features, the last layer's states before ln_final)."""
        states = self._text_layers(tokens)
        return self._text_with_tokens(tokens, states)[0], states

    def text_token_mask(self, tokens: Tensor) -> Tensor:
        """Real tokens: start token up to and including the end token (argmax for open_clip's BPE)."""
        end = tokens.argmax(dim=1)
        return torch.arange(tokens.shape[1], device=tokens.device)[None, :] <= end[:, None]

    # -- parameters ---------------------------------------------------------------------------
    def tower_of(self, name: str) -> str:
        """'image', 'text' or 'shared' (logit scale / bias) for a parameter name of ``self.model``."""
        return self.family.tower_of(name)

    def lock(self, *, image: bool = False, text: bool = False, logit_scale: bool = False) -> None:
        """Freeze a tower (and/or the logit scale): ``requires_grad = False``."""
        for name, p in self.model.named_parameters():
            tower = self.tower_of(name)
            if (tower == "image" and image) or (tower == "text" and text) or (tower == "shared" and logit_scale):
                p.requires_grad_(False)

    def frozen_text_copy(self) -> CLIPTowers:
        """A detached, eval-mode copy of the current text side (for Ḡ from the initial encoder): the module's
        image-tower submodules (every parameter in the family's image tower) are dropped."""
        shared = {id(self.family): self.family, id(self.encoder): self.encoder}  # the adapter and encoder: not copied
        clone = copy.deepcopy(self, shared).eval()
        for name, child in list(clone.model.named_children()):
            params = [f"{name}.{p}" for p, _ in child.named_parameters()]
            if params and all(self.tower_of(p) == "image" for p in params):
                setattr(clone.model, name, nn.Identity())
        for p in clone.parameters():
            p.requires_grad_(False)
        return clone


def param_groups(named: list[tuple[str, nn.Parameter]], weight_decay: float) -> list[dict[str, Any]]:
    """AdamW groups: weight decay on matrices except embeddings; none on gains, biases, embeddings, scale."""
    decay = [p for n, p in named if p.ndim >= 2 and "embedding" not in n]
    no_decay = [p for n, p in named if not (p.ndim >= 2 and "embedding" not in n)]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def bpe_encode(encoder: Any) -> Callable[[str], list[int]]:
    """The encoder's BPE without start/end tokens (open_clip's SimpleTokenizer), for token spans of sentences."""
    from open_clip.tokenizer import SimpleTokenizer

    tok = encoder.tokenizer
    if not isinstance(tok, SimpleTokenizer):
        raise ConfigError(f"segment token spans need open_clip's CLIP tokenizer, not {type(tok).__name__}")
    encode: Callable[[str], list[int]] = tok.encode
    return encode


def freeze_position_rows(model: nn.Module, rows: int) -> None:
    """Long-CLIP's frozen rows: the first ``rows`` rows of the text position table get no gradient (so AdamW,
    which does not decay embeddings, leaves them exactly as loaded); the rest train."""
    table = getattr(model, "positional_embedding", None)
    if not isinstance(table, nn.Parameter):
        raise ConfigError("--position-table frozen-20 needs open_clip's text position table (positional_embedding)")
    keep = torch.ones_like(table[:, :1])
    keep[:rows] = 0
    table.register_hook(lambda grad: grad * keep.to(grad.dtype))  # type: ignore[no-untyped-call]
