"""The example plugin's model family: ``example:colour``, a colour histogram of each image against the colour words
of each caption (no weights: always built, never trained)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torchvision.transforms.functional import pil_to_tensor

from hnbench.errors import ConfigError
from hnbench.models import ModelInfo, TokenizedTexts
from hnbench.models.family import ModelFamily

COLOURS = {"red": (220, 30, 30), "green": (30, 200, 30), "blue": (30, 30, 220), "yellow": (230, 230, 40),
           "purple": (140, 40, 180), "cyan": (40, 220, 220), "orange": (240, 140, 20), "white": (250, 250, 250)}
PALETTE = torch.tensor(list(COLOURS.values()), dtype=torch.float32)


def to_pixels(image: Any) -> torch.Tensor:
    return pil_to_tensor(image.convert("RGB")).float()  # (3, H, W), 0-255


class ColourEncoder:
    """Images: the share of pixels near each palette colour; captions: how often each colour is named."""

    def __init__(self) -> None:
        self.device, self.image_transform = torch.device("cpu"), to_pixels
        self.transform_description, self.has_images, self.dynamic_padding = "to_pixels: RGB 0-255", True, False
        self.info = ModelInfo(arch="example:colour", pretrained=None, fingerprint="example-colour-v1",
                              context_length=77, n_params=0, embed_dim=len(COLOURS), framework="example")

    def tokenize(self, texts: Sequence[str]) -> TokenizedTexts:
        counts = [[t.lower().replace(",", " ").replace(".", " ").split().count(c) for c in COLOURS] for t in texts]
        return TokenizedTexts(torch.tensor(counts), np.array([len(t.split()) for t in texts]))

    def encode_images(self, pixels: torch.Tensor) -> torch.Tensor:
        dist = torch.cdist(pixels.flatten(2).transpose(1, 2), PALETTE)  # (batch, pixels, colours)
        return F.normalize((dist < 40).float().mean(1), dim=-1)

    def encode_texts(self, tokens: torch.Tensor) -> torch.Tensor:
        return F.normalize(tokens.float(), dim=-1)

    def to(self, device: Any) -> ColourEncoder:
        return self


class ColourFamily(ModelFamily):
    """``example:colour``: the colour histogram (the only model of this family)."""

    name = "example"
    framework = "example"

    def load(self, model: str, pretrained: str | None = None, **_: Any) -> ColourEncoder:
        if model != "example:colour" or pretrained is not None:
            raise ConfigError(f"{model}: the example family has one model, example:colour, without weights")
        return ColourEncoder()


FAMILY = ColourFamily()
