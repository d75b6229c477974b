"""hnbench: score, analyse and fine-tune CLIP models on long, dense, near-duplicate captions.

Public API (imported lazily so ``import hnbench`` stays light)::

    hnbench.evaluate(model, dataset, ...) -> EvalResult
    hnbench.load_model(name, pretrained, ...) -> Encoder
    hnbench.load_dataset(name_or_path, ...) -> ImageTextDataset
    hnbench.read_result(path) -> EvalResult
    hnbench.hardness(data, model, ...) -> HardnessReport
    hnbench.compare([a.json, b.json, ...], ks=...) -> Comparison
    hnbench.browse(result.json, output_dir, ...) -> Path of index.html
"""

from __future__ import annotations

import importlib
from typing import Any

from hnbench._version import __version__

_LAZY = {
    "evaluate": "hnbench.evaluate:evaluate",
    "load_model": "hnbench.models:load_model",
    "load_dataset": "hnbench.data:load_dataset",
    "read_result": "hnbench.results:read_result",
    "EvalResult": "hnbench.results:EvalResult",
    "ImageTextDataset": "hnbench.data.base:ImageTextDataset",
    "train": "hnbench.train.trainer:train",
    "TrainConfig": "hnbench.train.trainer:TrainConfig",
    "leaderboard": "hnbench.leaderboard:leaderboard",
    "hardness": "hnbench.hardness:hardness",
    "compare": "hnbench.comparison:compare",
    "browse": "hnbench.pages:browse",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, _, attr = _LAZY[name].partition(":")
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'hnbench' has no attribute {name!r}")
