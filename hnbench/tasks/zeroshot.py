"""Zero-shot classification (``--task zeroshot``): the forgetting check after fine-tuning, not a retrieval metric.

Inputs: a labelled image set (:mod:`hnbench.data.classes`: class folders, ImageNet-1k val, ImageNet-V2, an HF
dataset with a label column). The text classifier is open_clip's (``build_zero_shot_classifier``): for
class c, ``w_c = normalise(mean_t normalise(text(template_t(name_c))))``; the prompts' embeddings come
through the embedding cache like any caption's (keyed by model and prompt text, so by class names and
templates). An image's rank is ``1 + #{c' != c : s_c' >= s_c}`` with ``s = image · w`` (ties pessimistic,
as retrieval's); top-K = 100 · mean(rank <= K), with percentile bootstrap intervals over images
(:func:`hnbench.metrics.bootstrap_ci`). Main score: top-1.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hnbench.errors import ConfigError
from hnbench.io import read_text_utf8
from hnbench.results import EvalResult
from hnbench.settings import option
from hnbench.tasks import Task
from hnbench.tasks.common import TaskRun


@dataclass
class ClassOptions:
    """The data options only zero-shot classification reads (its :attr:`Task.options`)."""

    class_names: str | None = option(None, group="zero-shot data", metavar="FILE",
                                     help="--task zeroshot: the class names, one per line in class-index order "
                                          "(default: open_clip's ImageNet names for ImageNet-1k/-V2 folders, the "
                                          "dataset's ClassLabel names, else the folder names)")
    label_column: str | None = option(None, group="zero-shot data",
                                      help="--task zeroshot: the class-index column of an HF dataset (default: label)")


TASK = Task(
    name="zeroshot",
    title="Zero-shot classification",
    inputs="a labelled image set: class folders (ImageNet-1k val, ImageNet-V2), or an HF dataset with a label "
           "column; class names from open_clip's ImageNet list, --class-names FILE, or the folder names",
    groups=("classification",),
    bounds={"top-": (0.0, 100.0)},
    main_score="top-1",
    main_of=("classification top-1",),
    columns=("classification top-1", "classification top-5"),
    load="hnbench.data.classes:load_classes",
    run="hnbench.tasks.zeroshot:run",
    check="hnbench.data.classes:check_classes",
    options="hnbench.tasks.zeroshot:ClassOptions",
    texts="class prompts",  # its tokens block counts the prompts, not captions
    note="Top-K accuracy in %, with open_clip's prompt templates: a check that fine-tuning kept general "
         "alignment, not a retrieval metric.",
)

TOP_KS = (1, 5)


def templates(name: str) -> list[Any]:
    """The prompt templates ``name`` names: ``openai`` (open_clip's 80 OPENAI_IMAGENET_TEMPLATES), ``simple``
    (its SIMPLE_IMAGENET_TEMPLATES), or a text file of templates, one per line, ``{}`` standing for the name."""
    from open_clip import OPENAI_IMAGENET_TEMPLATES, SIMPLE_IMAGENET_TEMPLATES

    if name == "openai":
        return list(OPENAI_IMAGENET_TEMPLATES)
    if name == "simple":
        return list(SIMPLE_IMAGENET_TEMPLATES)
    path = Path(name)
    if not path.is_file():
        raise ConfigError(f"--templates {name}: neither openai, simple nor a file of templates")
    lines = [line.strip() for line in read_text_utf8(path).splitlines() if line.strip()]
    if not lines or any("{}" not in t for t in lines):
        raise ConfigError(f"--templates {name}: every line must be a template holding {{}} for the class name")
    return lines


def prompts(class_names: Sequence[str], tpls: Sequence[Any]) -> list[str]:
    """Every class's prompts, class-major: ``[t(c) for c in classes for t in templates]``."""
    fill: Callable[[Any, str], str] = lambda t, c: t(c) if callable(t) else t.format(c)  # noqa: E731
    return [fill(t, c) for c in class_names for t in tpls]


def class_ranks(image_vectors: Any, classifier: Any, labels: Any) -> tuple[Any, Any]:
    """``(rank, tied)`` of each image's true class among the classes: rank = 1 + #{c' != c : s_c' >= s_c}."""
    import numpy as np

    scores = image_vectors @ classifier.T  # (n_images, n_classes): classes are few, images streamed by caller
    true = scores[np.arange(len(labels)), labels][:, None]
    other = np.ones_like(scores, dtype=bool)
    other[np.arange(len(labels)), labels] = False
    rank = 1 + ((scores >= true) & other).sum(axis=1)
    tied = ((scores == true) & other).any(axis=1)
    return rank.astype(np.int64), tied


def run(encoder: Any, data: Any, settings: Any, output_dir: str | Path | None = None, *, ctx: Any = None,
        timings: dict[str, float] | None = None, t0: float | None = None, data_spec: Any = None) -> EvalResult:
    """Score ``encoder`` on a loaded :class:`~hnbench.data.classes.LabelledImages`; write the result JSON."""
    import numpy as np

    from hnbench.data.classes import LabelledImages  # the pipeline's modules import numpy and torch
    from hnbench.encode import encode_images, encode_texts
    from hnbench.metrics import bootstrap_ci

    if not isinstance(data, LabelledImages):
        raise ConfigError(f"--task zeroshot scores a labelled image set, not {type(data).__name__}")
    s = settings
    tpls = templates(s.templates)
    texts = prompts(data.class_names, tpls)
    job = TaskRun(TASK, encoder, data, s, output_dir, {
        "templates": s.templates, "n_templates": len(tpls),
        "prompts_sha256": hashlib.sha256("\0".join(texts).encode()).hexdigest(),
        "tie_rule": "pessimistic: rank = 1 + #other classes scoring >= the true class",
        "classifier": "normalised mean of the normalised prompt embeddings (open_clip)"},
        ctx=ctx, t0=t0, timings=timings, data_spec=data_spec)
    cache = job.start()
    img = encode_images(encoder, data.images, batch_size=s.batch_size, num_workers=s.num_workers,
                        skip_bad=s.skip_invalid, amp=s.amp, progress=s.progress, cache=cache)
    vectors = img.vectors
    if img.bad:
        keep = [i for i in range(data.n_images) if i not in img.bad]
        job.data = data = data.drop_images(sorted(img.bad))
        vectors = vectors[keep]
    txt = encode_texts(encoder, texts, batch_size=s.text_batch_size or max(s.batch_size, 64), amp=s.amp,
                       progress=s.progress, cache=cache, num_workers=s.num_workers)
    per_class = txt.vectors.reshape(len(data.class_names), len(tpls), -1).mean(axis=1)
    classifier = per_class / np.linalg.norm(per_class, axis=1, keepdims=True)
    rank, tied = class_ranks(vectors, classifier.astype(np.float32), data.labels)
    metrics: dict[str, Any] = {f"top-{k}": float(100.0 * np.mean(rank <= k)) for k in TOP_KS}
    metrics.update(n_queries=int(len(rank)), n_classes=len(data.class_names), n_tied=int(tied.sum()))
    ci = bootstrap_ci(rank, TOP_KS, seed=s.seed) if s.ci else {}  # keyed R@K: the same hit-rate bootstrap
    ci95 = {"classification": {f"top-{k}": list(ci[f"R@{k}"]) for k in TOP_KS}} if s.ci else {}
    return job.finish(metrics, ci95, img, txt, n_classes=len(data.class_names))
