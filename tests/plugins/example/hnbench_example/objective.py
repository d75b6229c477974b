"""The example plugin's training objective: the run's global term (``--loss``) plus a uniformity term on the image
features (Wang & Isola 2020: the log of the mean Gaussian potential between every two images of the batch), weighted
by the objective's one option. Its options are a dataclass declared with :func:`hnbench.settings.option`, so
hnbench generates ``--example-objective-spread``, the recipe table ``[example-objective]`` and
``--set example-objective.spread=`` from it, with its bound checked in one line."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from hnbench.registry import LOSSES
from hnbench.settings import option
from hnbench.train.objectives.base import Term, TermInputs, global_term


@dataclass(frozen=True)
class ExampleOptions:
    """``--objective example-objective``'s options."""

    spread: float = option(0.1, minimum=0, help="example-objective: the weight of the image-uniformity term")


def uniformity(x: TermInputs) -> Tensor:
    """log mean exp(-2 ||u - v||²) over the batch's pairs of distinct image features (lower: more spread)."""
    image = x.out["image"].float()
    distances = torch.pdist(image, p=2).pow(2)
    return torch.logsumexp(-2 * distances, dim=0) - torch.log(torch.tensor(float(distances.numel())))


def build(config: Any) -> list[Term]:
    """The terms of ``--objective example-objective``: the global term and the weighted uniformity term."""
    options = config.objective_options
    assert isinstance(options, ExampleOptions)
    return [global_term(LOSSES.get(config.loss), config.loss, config.gamma),
            Term("example-spread", uniformity, weight=options.spread)]
