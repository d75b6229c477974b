"""hnbench: score, analyse and fine-tune CLIP models on long, dense, near-duplicate captions.

Public API (imported lazily so ``import hnbench`` stays light)::

    hnbench.evaluate(model, dataset, ...) -> EvalResult
    hnbench.load_model(name, pretrained, ...) -> Encoder
    hnbench.load_dataset(name_or_path, ...) -> ImageTextDataset
    hnbench.read_result(path) -> EvalResult
    hnbench.hardness(data, model, ...) -> HardnessReport
    hnbench.compare([a.json, b.json, ...], ks=...) -> Comparison
    hnbench.browse(result.json, output_dir, ...) -> Path of index.html
    hnbench.run_suite(name, models, data_root_map=..., output_dir=...) -> SuiteRun
    hnbench.list_models(family=None) -> DataFrame of model families, the built-in model, zoo entries and
        open_clip architectures
    hnbench.export([result.json, folder, ...], format, output_dir, ...) -> Export: stored results as a model
        card's model-index, Hub .eval_results, CLIP_benchmark JSON/CSV, MTEB results or open_clip's CSV
"""

from __future__ import annotations

import sys
import types
from typing import Any

from hnbench._version import __version__
from hnbench.registry import Target

_LAZY = {
    "evaluate": "hnbench.evaluation.evaluate:evaluate",
    "load_model": "hnbench.models:load_model",
    "load_dataset": "hnbench.data:load_dataset",
    "read_result": "hnbench.results.record:read_result",
    "EvalResult": "hnbench.results.record:EvalResult",
    "ImageTextDataset": "hnbench.data.base:ImageTextDataset",
    "train": "hnbench.train:train",
    "TrainConfig": "hnbench.train.config:TrainConfig",
    "leaderboard": "hnbench.results.leaderboard:leaderboard",
    "hardness": "hnbench.hardness:hardness",
    "compare": "hnbench.results.compare:compare",
    "browse": "hnbench.pages.build:browse",
    "run_suite": "hnbench.evaluation.suites:run_suite",
    "list_models": "hnbench.models.zoo:list_models",
    "export": "hnbench.publish:export",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = Target(_LAZY[name]).resolve()
        globals()[name] = value  # resolved once; later look-ups never reach __getattr__ again
        return value
    raise AttributeError(f"module 'hnbench' has no attribute {name!r}")


class _PublicAPI(types.ModuleType):
    """``hnbench`` itself: the public functions stay callable when a submodule of the same name is imported.

    Importing ``hnbench.evaluation.evaluate`` (or ``.leaderboard``, ``.hardness``, ``.train``) for the first time makes
    the import system set the attribute of that name on this package to the submodule, which would hide
    the function ``hnbench.evaluation.evaluate`` from then on. Such assignments are dropped here: the submodules stay
    reachable as ``sys.modules[...]`` and through ``from hnbench.evaluation.evaluate import ...``.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _LAZY and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _PublicAPI
