"""Caption-length monotonicity (``--task monotonicity``): HiMo-Docci's HiMo@K (HiMo-CLIP, AAAI'26).

A *list* is an image with K caption prefixes of increasing length. Its score is Pearson's correlation
between the prefix index and the image–text cosine::

    r = Σ_k (k − k̄)(s_k − s̄) / sqrt(Σ_k (k − k̄)² · Σ_k (s_k − s̄)²),   s_k = cos(image, prefix_k), k = 1..K

and HiMo@K is the mean of r over the lists (HiMo's ``eval/text_mono/get_himo.py``: tokenise with truncation,
normalise, cosine, Pearson per image, mean). A list with fewer than two prefixes, or whose cosines are all
equal (r undefined), is left out and counted. The 95% interval is the percentile bootstrap of that mean,
lists resampled (:func:`hnbench.metrics.bootstrap_mean_ci`).

Where the prefixes come from (``--prefixes``): ``sentences`` (default): each caption's cumulative sentence
prefixes (sentences split as :func:`hnbench.sidecars.segments.split_sentences` splits them), one list per
caption — DOCCI's or synthdense's captions; ``captions``: each image's captions, in the data's order, are
its prefixes (HiMo-Docci's ``himo_docci_data.json`` written one row per prefix).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hnbench.errors import ConfigError
from hnbench.results.record import EvalResult
from hnbench.tasks import Task
from hnbench.tasks.common import TaskRun


class Monotonicity(Task):
    """Caption-length monotonicity, HiMo@K (the module docstring)."""

    def load(self, spec: Any, **options: Any) -> Any:
        from hnbench.data import load_spec

        return load_spec(spec, **options)

    def accepts(self, data: Any) -> bool:
        from hnbench.data import ImageTextDataset

        return isinstance(data, ImageTextDataset)

    def run(self, encoder: Any, data: Any, settings: Any, output_dir: str | Path | None = None, *, ctx: Any = None,
            timings: dict[str, float] | None = None, t0: float | None = None, data_spec: Any = None) -> EvalResult:
        return run(encoder, data, settings, output_dir, ctx=ctx, timings=timings, t0=t0, data_spec=data_spec)


TASK = Monotonicity(
    name="monotonicity",
    title="Caption-length monotonicity",
    inputs="an image–caption set: each caption's cumulative sentence prefixes (--prefixes sentences) or each "
           "image's captions in order (--prefixes captions, HiMo-Docci's lists)",
    groups=("monotonicity",),
    bounds={"HiMo@K": (-1.0, 1.0)},
    main_score="HiMo@K",
    main_of=("monotonicity HiMo@K",),
    columns=("monotonicity HiMo@K",),
    texts="caption prefixes",
    note="HiMo@K: mean Pearson r between caption-prefix index and image–text cosine (1: every longer prefix "
         "scores higher), not a retrieval metric.",
)


def pearson(y: Sequence[float]) -> float:
    """Pearson's r between 1..K and ``y`` (NaN when K < 2 or ``y`` is constant)."""
    k = len(y)
    if k < 2:
        return math.nan
    ym, xm = sum(y) / k, (k + 1) / 2
    sxy = sum((i + 1 - xm) * (v - ym) for i, v in enumerate(y))
    sxx, syy = sum((i + 1 - xm) ** 2 for i in range(k)), sum((v - ym) ** 2 for v in y)
    return sxy / math.sqrt(sxx * syy) if syy > 0 else math.nan


def himo_scores(image_vectors: Any, text_vectors: Any, lists: Sequence[tuple[int, Sequence[int]]]) -> list[float]:
    """r of each list ``(image index, text indices in prefix order)`` from L2-normalised embeddings."""
    return [pearson([float(image_vectors[i] @ text_vectors[j]) for j in texts]) for i, texts in lists]


def prefix_lists(captions: Sequence[str], caption_image: Sequence[int], rule: str
                 ) -> tuple[list[str], list[tuple[int, list[int]]]]:
    """``(texts to encode, lists)`` under ``rule`` (``sentences`` or ``captions``; see the module docstring)."""
    from hnbench.sidecars.segments import split_sentences

    if rule == "captions":
        by_image: dict[int, list[int]] = {}
        for j, i in enumerate(caption_image):
            by_image.setdefault(int(i), []).append(j)
        return list(captions), sorted(by_image.items())
    texts: list[str] = []
    lists: list[tuple[int, list[int]]] = []
    for caption, i in zip(captions, caption_image):
        ends = [end for _, end in split_sentences(caption)]
        lists.append((int(i), list(range(len(texts), len(texts) + len(ends)))))
        texts += [caption[:end] for end in ends]
    return texts, lists


def run(encoder: Any, data: Any, settings: Any, output_dir: str | Path | None = None, *, ctx: Any = None,
        timings: dict[str, float] | None = None, t0: float | None = None, data_spec: Any = None) -> EvalResult:
    """HiMo@K of ``encoder`` on a loaded image–caption set; write the result JSON."""
    import numpy as np

    from hnbench.data import ImageTextDataset  # the pipeline's modules import numpy and torch
    from hnbench.evaluation.encode import encode_images, encode_texts
    from hnbench.metrics import bootstrap_mean_ci

    if not isinstance(data, ImageTextDataset):
        raise ConfigError(f"--task monotonicity scores an image–caption set, not {type(data).__name__}")
    s = settings
    job = TaskRun(TASK, encoder, data, s, output_dir, {
        "prefixes": s.task_options.prefixes, "similarity": "cosine, fp32",
        "metric": "mean over lists of Pearson r(prefix index, cosine)"},
        ctx=ctx, t0=t0, timings=timings, data_spec=data_spec)
    cache = job.start()
    img = encode_images(encoder, data.images, batch_size=s.batch_size, num_workers=s.num_workers, amp=s.amp,
                        progress=s.progress, cache=cache)
    texts, lists = prefix_lists(data.captions, data.caption_image.tolist(), s.task_options.prefixes)
    txt = encode_texts(encoder, texts, batch_size=s.text_batch_size or max(s.batch_size, 64), amp=s.amp,
                       progress=s.progress, cache=cache, num_workers=s.num_workers)
    r = np.asarray(himo_scores(img.vectors, txt.vectors, lists), dtype=np.float64)
    ok = ~np.isnan(r)
    if not ok.any():
        raise ConfigError(f"{data.name}: no list of two prefixes or more with distinct cosines (--prefixes "
                          f"{s.task_options.prefixes}); HiMo@K is undefined")
    metrics = {"HiMo@K": float(r[ok].mean()), "n_queries": int(ok.sum()), "n_skipped": int((~ok).sum()),
               "mean_prefixes": float(np.mean([len(t) for _, t in lists])),
               "share_increasing": float(np.mean(r[ok] > 0))}
    ci95 = {}
    if s.ci:
        lo, hi = bootstrap_mean_ci(r[ok][:, None], n_boot=1000, alpha=0.05, seed=s.seed)  # in percent
        ci95 = {"monotonicity": {"HiMo@K": [float(lo[0]) / 100, float(hi[0]) / 100]}}
    return job.finish(metrics, ci95, img, txt, n_captions=data.n_captions, n_prefixes=len(texts))
