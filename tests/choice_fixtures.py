"""Helpers of the option-choice tests: run the choice task on a replica, read back its stored per-item scores, and
set a benchmark's published item counts to a replica's."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from hnbench.evaluation.evaluate import evaluate
from hnbench.results.record import EvalResult, read_per_item

SHAPES = [(220, 30, 30), (30, 200, 30), (30, 30, 220), (230, 230, 40), (140, 40, 180), (40, 220, 220),
          (240, 140, 20), (250, 250, 250)]


def picture(path: Path, i: int, size: tuple[int, int] = (48, 40), fmt: str | None = None) -> Path:
    """A small image, distinct per ``i``: coloured blocks at places that depend on ``i`` (so crops differ too)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    im = Image.new("RGB", size, (15, 15, 15))
    for k in range(3):
        x, y = (7 * i + 13 * k) % (size[0] - 12), (5 * i + 11 * k) % (size[1] - 12)
        im.paste(SHAPES[(i + k) % len(SHAPES)], (x, y, x + 12, y + 12))
    im.save(path, format=fmt or ("PNG" if path.suffix == ".png" else "JPEG"), quality=95)
    return path


def use_item_counts(monkeypatch: Any, name: str, **protocols: dict[str, int]) -> None:
    """Swap benchmark ``name``'s spec for one whose protocols (``_`` for ``-``) expect the replica's item counts
    (part → items)."""
    from hnbench.data.benchmarks import BENCHMARKS

    named = {k.replace("_", "-"): v for k, v in protocols.items()}
    spec = BENCHMARKS[name]
    protos = tuple(replace(p, counts=named[p.name]) if p.name in named else p for p in spec.protocols)
    monkeypatch.setitem(BENCHMARKS, name, replace(spec, protocols=protos))


def choice_eval(micro_config: Path, dataset: str, root: Path | None, protocol: str, out: Path | None = None,
                **options: Any) -> EvalResult:
    """``--task choice`` of the micro model on a replica (no workers, quiet)."""
    return evaluate("hnb-micro", dataset, model_config=str(micro_config), data_root=None if root is None else str(root),
                    protocol=protocol, output_dir=None if out is None else str(out), task="choice", num_workers=0,
                    progress=False, **options)


def stored(result: EvalResult) -> dict[str, dict[str, Any]]:
    """Each item's stored scores, by item id: ``m`` (n_images, n_texts) in role order, ``s`` (text role → the first
    image's score), ``tt`` (the text–text scores), ``texts`` and ``images``."""
    frame = read_per_item(result)
    images, texts = frame.attrs["image_roles"], frame.attrs["text_roles"]
    out = {}
    for row in frame.itertuples():
        m = np.asarray(row.image_text, dtype=np.float64).reshape(len(images), len(texts))
        out[row.item_id] = {"m": m, "s": dict(zip(texts, m[0])), "tt": np.asarray(row.text_text, dtype=np.float64),
                            "texts": list(row.texts), "images": list(row.images)}
    return out


def metric(result: EvalResult, name: str = "accuracy") -> float:
    return float(result.metrics["choice"][name])
