"""Zero-shot classification (``--task zeroshot``): the forgetting check after fine-tuning, not a retrieval metric.

Inputs: a labelled image set (:mod:`hnbench.data.classes`: class folders, ImageNet-1k val, ImageNet-V2, an HF
dataset with a label column). The text classifier is open_clip's (``build_zero_shot_classifier``): for
class c, ``w_c = normalise(mean_t normalise(text(template_t(name_c))))``; the prompts' embeddings come
through the embedding cache like any caption's (keyed by model and prompt text, so by class names and
templates). An image's rank is ``1 + #{c' != c : s_c' >= s_c}`` with ``s = image · w`` (ties pessimistic,
as retrieval's); top-K = 100 · mean(rank <= K), a hit rate like retrieval's R@K, so its 95% interval over the
images follows retrieval's rule (:func:`hnbench.metrics.recall_ci`: percentile bootstrap, exact Clopper–Pearson
where hits or misses are fewer than :data:`~hnbench.metrics.EXACT_BELOW`; the method recorded in
``ci95_method``; results written before it have bootstrap intervals and no ``ci95_method``). Main score: top-1.

A template file (``--templates FILE``) holds one template per line, each ``{}`` placing the class name and
``{{``/``}}`` literal braces; it is parsed (:func:`template_parts`), never passed to ``str.format``, so a field
like ``{.__class__}`` is refused by name, not evaluated. A template that places no class name (``a photo of a
{{}}``: every class the same prompt) is refused, as is any other field (``{x}``, ``{0}``, ``{!r}``) or a stray
brace — one line naming the template, before any model or data loads (:meth:`ZeroShot.check_settings`).
"""

from __future__ import annotations

import hashlib
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hnbench.errors import ConfigError
from hnbench.io import read_text_utf8
from hnbench.results.record import EvalResult
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


class ZeroShot(Task):
    """Zero-shot classification of a labelled image set (the module docstring)."""

    def check(self, spec: Any, **options: Any) -> None:
        from hnbench.data.classes import check_classes

        check_classes(spec, **options)

    def check_settings(self, settings: Any) -> None:
        """Refuse, before any model or data loads, a ``--templates`` that is no template set, or a bad line."""
        templates(settings.task_options.templates)

    def load(self, spec: Any, **options: Any) -> Any:
        from hnbench.data.classes import load_classes

        return load_classes(spec, **options)

    def accepts(self, data: Any) -> bool:
        from hnbench.data.classes import LabelledImages

        return isinstance(data, LabelledImages)

    def run(self, encoder: Any, data: Any, settings: Any, output_dir: str | Path | None = None, *, ctx: Any = None,
            timings: dict[str, float] | None = None, t0: float | None = None, data_spec: Any = None) -> EvalResult:
        return run(encoder, data, settings, output_dir, ctx=ctx, timings=timings, t0=t0, data_spec=data_spec)

    def row_fields(self, result: Any) -> dict[str, Any]:
        """The set's layout (ImageNet-1k, ImageNet-V2) and the prompt templates: what places a published row."""
        return {"layout": (result.dataset.get("meta") or {}).get("format"),
                "templates": (result.settings or {}).get("templates", "openai")}

    def reported_key(self, row: Mapping[str, Any]) -> tuple[str, str] | None:
        """A published zero-shot row names a set's layout and its templates (whatever the set's folder is called)."""
        from hnbench.results.reported import ZERO_SHOT_SETS

        layout = row.get("layout")
        return (str(layout), str(row.get("templates"))) if layout in ZERO_SHOT_SETS else None


TASK = ZeroShot(
    name="zeroshot",
    title="Zero-shot classification",
    inputs="a labelled image set: class folders (ImageNet-1k val, ImageNet-V2), or an HF dataset with a label "
           "column; class names from open_clip's ImageNet list, --class-names FILE, or the folder names",
    groups=("classification",),
    bounds={"top-": (0.0, 100.0)},
    main_score="top-1",
    main_of=("classification top-1",),
    columns=("classification top-1", "classification top-5"),
    options=ClassOptions,
    texts="class prompts",  # its tokens block counts the prompts, not captions
    note="Top-K accuracy in %, with open_clip's prompt templates: a check that fine-tuning kept general "
         "alignment, not a retrieval metric.",
)

TOP_KS = (1, 5)


def template_parts(template: str, where: str) -> list[str]:
    """The text around each ``{}`` of ``template`` (``name.join(parts)`` is the class's prompt), braces
    ``{{``/``}}`` read as literal ones. Refused (one line naming ``where`` and the template): a template that
    places no class name (every class would get the same prompt), any field other than a bare ``{}`` (``{x}``,
    ``{.__class__}``, ``{0}``, ``{!r}``, ``{:>9}``: only parsed, never formatted, so nothing is evaluated) and
    a stray brace."""
    rule = "{} places the class name, {{ and }} are literal braces"
    parts, text = [], ""
    try:
        pieces = list(string.Formatter().parse(template))
    except ValueError as e:  # an unmatched or stray brace
        raise ConfigError(f"{where} {template!r}: {e}; {rule}") from None
    for literal, field_name, spec, conversion in pieces:
        text += literal
        if field_name is None:
            continue
        if field_name or spec or conversion:
            shown = "{" + field_name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
            raise ConfigError(f"{where} {template!r}: {shown} is not a place for the class name; {rule}")
        parts.append(text)
        text = ""
    if not parts:
        raise ConfigError(f"{where} {template!r}: places no class name, so every class would get the same prompt; "
                          f"{rule}")
    return [*parts, text]


def templates(name: str) -> list[Any]:
    """The prompt templates ``name`` names: ``openai`` (open_clip's 80 OPENAI_IMAGENET_TEMPLATES), ``simple``
    (its SIMPLE_IMAGENET_TEMPLATES), or a text file of templates, one per line, ``{}`` standing for the name
    (each checked by :func:`template_parts`)."""
    if name in ("openai", "simple"):  # open_clip imports torch: only for these
        from open_clip import OPENAI_IMAGENET_TEMPLATES, SIMPLE_IMAGENET_TEMPLATES

        return list(OPENAI_IMAGENET_TEMPLATES if name == "openai" else SIMPLE_IMAGENET_TEMPLATES)
    path = Path(name)
    if not path.is_file():
        raise ConfigError(f"--templates {name}: neither openai, simple nor a file of templates")
    lines = [(n, line.strip()) for n, line in enumerate(read_text_utf8(path).splitlines(), 1) if line.strip()]
    if not lines:
        raise ConfigError(f"--templates {name}: no template in it (one per line, {{}} standing for the class name)")
    for n, line in lines:
        template_parts(line, f"--templates {name}: line {n}")
    return [line for _, line in lines]


def prompts(class_names: Sequence[str], tpls: Sequence[Any]) -> list[str]:
    """Every class's prompts, class-major: ``[t(c) for c in classes for t in templates]``; a text template's
    ``{}`` filled by :func:`template_parts` (never ``str.format``)."""
    parts = [None if callable(t) else template_parts(t, "template") for t in tpls]
    return [t(c) if p is None else c.join(p) for c in class_names for t, p in zip(tpls, parts)]


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
    from hnbench.evaluation.encode import encode_images, encode_texts
    from hnbench.metrics import ci_methods, recall_ci

    if not isinstance(data, LabelledImages):
        raise ConfigError(f"--task zeroshot scores a labelled image set, not {type(data).__name__}")
    s = settings
    tpls = templates(s.task_options.templates)
    texts = prompts(data.class_names, tpls)
    job = TaskRun(TASK, encoder, data, s, output_dir, {
        "templates": s.task_options.templates, "n_templates": len(tpls),
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
    ci95: dict[str, Any] = {}
    how: dict[str, Any] = {}
    if s.ci:  # top-K is a hit rate (keyed R@K there): retrieval's interval, by retrieval's rule
        ci, methods = recall_ci(rank, TOP_KS, seed=s.seed), ci_methods(rank, TOP_KS)
        ci95 = {"classification": {f"top-{k}": list(ci[f"R@{k}"]) for k in TOP_KS}}
        how = {"classification": {f"top-{k}": methods[f"R@{k}"] for k in TOP_KS}}
    return job.finish(metrics, ci95, img, txt, ci95_method=how, n_classes=len(data.class_names))
