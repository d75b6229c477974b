"""Small registries mapping names to lazy ``"module:attr"`` targets (so importing hnbench stays light)."""

from __future__ import annotations

import difflib
import importlib
from typing import Any

from hnbench.errors import ConfigError


class Registry:
    """Names → ``"module:attr"`` strings, resolved on first use; unknown names answer with "did you mean"."""

    def __init__(self, kind: str):
        self.kind = kind
        self._targets: dict[str, str | Any] = {}

    def register(self, name: str, target: str | Any) -> None:
        self._targets[name.lower()] = target

    def names(self) -> list[str]:
        return sorted(self._targets)

    def __contains__(self, name: str) -> bool:
        return name.lower() in self._targets

    def get(self, name: str) -> Any:
        key = name.lower()
        if key not in self._targets:
            close = difflib.get_close_matches(key, self._targets, n=3)
            hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
            raise ConfigError(f"unknown {self.kind} {name!r}{hint} (known: {', '.join(self.names())})")
        target = self._targets[key]
        if isinstance(target, str):
            module, _, attr = target.partition(":")
            target = getattr(importlib.import_module(module), attr)
            self._targets[key] = target
        return target


DATASETS = Registry("dataset")
DATASETS.register("synthdense", "hnbench.data.synthdense_loader:load_synthdense")
DATASETS.register("docci", "hnbench.data.benchmarks:load_docci")
DATASETS.register("dci", "hnbench.data.benchmarks:load_dci")
DATASETS.register("long-dci", "hnbench.data.benchmarks:load_long_dci")
DATASETS.register("urban1k", "hnbench.data.benchmarks:load_urban1k")

LOSSES = Registry("loss")
LOSSES.register("infonce", "hnbench.train.losses:info_nce_loss")
LOSSES.register("hn", "hnbench.train.losses:hn_clip_loss")
