"""Option choice (``--task choice``): compositional benchmarks scored by their official rules.

Inputs: a :class:`~hnbench.data.choices.ChoiceSet` (SugarCrepe, SugarCrepe++, Winoground, ARO, or synthdense's
compositional variant): per item one or two images and K texts, with the protocol's
:class:`~hnbench.metrics.choice.Scoring`. Each distinct image and text is encoded once, through the embedding
cache; ``s(I, T)`` is the cosine of the L2-normalised fp32 embeddings, computed in float64 (identical texts have
one embedding, so they score identically: a tie is decided by the protocol's tie rule, never by rounding).

Metrics (group ``choice``, in %): the rule's metrics (``accuracy``; Winoground's ``text``, ``image``, ``group``;
SugarCrepe++'s ``ITT``, ``TOT``, ``P1-Neg``, ``P2-Neg``), aggregated as the protocol says (micro, or macro by a
field: then ``micro`` beside it), and ``accuracy`` = the protocol's headline (group, ITT). Main score: accuracy.
Intervals (:func:`hnbench.metrics.choice.intervals`): Clopper–Pearson for an accuracy, the bootstrap over items for a
macro average and the group score; ``ci95_method`` says which.

Per-item scores are stored beside the result (``<stem>.<sha12>.queries.parquet``, one row per item: its images,
texts, the image–text scores in the texts' role order, the text–text scores where the rule reads them, each
metric's outcome, its fields), so another protocol's rule is applied to them without re-encoding
(:func:`rescore`), and a reader checks the JSON's numbers against them (:func:`check_items`).
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hnbench.errors import ConfigError
from hnbench.results.record import EvalResult
from hnbench.tasks import Task
from hnbench.tasks.common import TaskRun

RULE_METRICS = ("accuracy", "text", "image", "group", "ITT", "TOT", "P1-Neg", "P2-Neg", "micro")
ITEMS_KEY = "hnbench_choice_items"  # pandas attrs key of the per-item file's version
ITEMS_VERSION = 1
SCORE_CHUNK = 4096  # items scored per block (bounds the gathered embeddings' memory)

class Choice(Task):
    """Option choice on compositional benchmarks (the module docstring). The data it scores: a registered benchmark
    whose spec names this task (:attr:`hnbench.data.benchmarks.spec.BenchmarkSpec.task`), or synthdense's
    compositional variant (:mod:`hnbench.data.synthdense_choice`)."""

    def benchmarks(self) -> list[str]:
        """The registered benchmarks this task scores (their specs name it)."""
        from hnbench.data.benchmarks import BENCHMARKS

        return sorted(name for name, spec in BENCHMARKS.items() if spec.task == self.name)

    def check(self, spec: Any, **options: Any) -> None:
        """Refuse, before anything loads, data it cannot score: anything but an option-choice benchmark or
        synthdense's compositional protocols, and a protocol the benchmark does not have."""
        from hnbench.data.benchmarks import BENCHMARKS
        from hnbench.data.synthdense_choice import PROTOCOLS

        name = str(spec.dataset or "")
        known = f"{', '.join(self.benchmarks())} or synthdense (protocols {', '.join(PROTOCOLS)})"
        if name.lower() == "synthdense":
            protocol = spec.protocol or spec.split
            if protocol is None or protocol not in PROTOCOLS:
                raise ConfigError(f"--task choice on synthdense needs --protocol {' | '.join(PROTOCOLS)} (its "
                                  f"compositional variant), not {protocol or 'the default (test, an image–caption set)'}")
            return
        bench = BENCHMARKS.get(name.lower())
        if bench is None or bench.task != self.name:
            raise ConfigError(f"--task choice scores option-choice items: {known}; {name!r} is "
                              + ("an image–caption benchmark (--task retrieval)" if bench is not None else "not one"))
        bench.protocol(spec.protocol or spec.split)  # an unknown protocol: one line naming the known ones

    def load(self, spec: Any, **options: Any) -> Any:
        from hnbench.data.benchmarks import get_benchmark
        from hnbench.data.choices import load_choice_benchmark
        from hnbench.data.synthdense_choice import load_synthdense_choices

        spec.validate()
        self.check(spec)
        opts = {**spec.loader_options(), **options}
        if str(spec.dataset).lower() == "synthdense":
            return load_synthdense_choices(**opts)
        return load_choice_benchmark(get_benchmark(str(spec.dataset)), **opts)

    def accepts(self, data: Any) -> bool:
        from hnbench.data.choices import ChoiceSet

        return isinstance(data, ChoiceSet)

    def run(self, encoder: Any, data: Any, settings: Any, output_dir: str | Path | None = None, *, ctx: Any = None,
            timings: dict[str, float] | None = None, t0: float | None = None, data_spec: Any = None) -> EvalResult:
        return run(encoder, data, settings, output_dir, ctx=ctx, timings=timings, t0=t0, data_spec=data_spec)

    def check_per_item(self, result: Any, frame: Any) -> list[str]:
        return check_items(result, frame)


TASK = Choice(
    name="choice",
    title="Option choice (compositional benchmarks)",
    data_noun="option-choice benchmark",
    inputs="option-choice items, one or two images and K texts each: sugarcrepe, sugarcrepe-pp, winoground, aro (each "
           "protocol an official subset and rule, or MTEB's), synthdense --protocol compositional (generated)",
    groups=("choice",),
    bounds={m: (0.0, 100.0) for m in RULE_METRICS},
    main_score="accuracy",
    main_of=("choice accuracy",),
    columns=("choice accuracy", "choice text", "choice image", "choice TOT", "choice micro"),
    per_item=True,
    sparse_columns=True,
    ci_rule="95% interval over the items: † exact binomial (Clopper–Pearson) for an accuracy; percentile bootstrap "
            "for a macro average (items resampled within each group) and Winoground's group score",
    note="Accuracy in % by each protocol's official rule (SugarCrepe: pos > neg; Winoground: the group score; "
         "SugarCrepe++: ITT, TOT beside it; ARO VG: the macro accuracy, micro beside it), not a retrieval metric.",
)


def item_scores(image_vectors: Any, text_vectors: Any, item_images: Any, item_texts: Any,
                pairs: Sequence[tuple[int, int]] = ()) -> tuple[Any, Any]:
    """``(image_text, text_text)``: ``image_text[n, i, t] = <image i, text t>`` of each item (N, n_images, n_texts)
    and ``text_text[n, p] = <text j, text k>`` for each pair ``(j, k)`` of ``pairs`` (N, len(pairs)), from the
    L2-normalised embeddings, in float64, in blocks of :data:`SCORE_CHUNK` items."""
    import numpy as np

    iv, tv = np.asarray(image_vectors, dtype=np.float64), np.asarray(text_vectors, dtype=np.float64)
    n = len(item_images)
    it = np.empty((n, item_images.shape[1], item_texts.shape[1]), dtype=np.float64)
    tt = np.empty((n, len(pairs)), dtype=np.float64)
    for start in range(0, n, SCORE_CHUNK):
        stop = min(n, start + SCORE_CHUNK)
        images, texts = iv[item_images[start:stop]], tv[item_texts[start:stop]]
        it[start:stop] = np.einsum("nid,ntd->nit", images, texts)
        for p, (j, k) in enumerate(pairs):
            tt[start:stop, p] = np.einsum("nd,nd->n", texts[:, j], texts[:, k])
    return it, tt


def choice_metrics(scoring: Any, image_text: Any, text_text: Any, text_roles: Sequence[str],
                   fields: Mapping[str, Sequence[str]], breakdown: Sequence[str] = ()
                   ) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """``(metrics, outcomes, tied)`` of items' stored scores under ``scoring``: each metric of its rule aggregated
    (:func:`hnbench.metrics.choice.aggregate`), ``accuracy`` = the headline, ``micro`` beside a macro one, counts,
    and per-group accuracies of the ``breakdown`` fields (``by``)."""
    import numpy as np

    from hnbench.metrics.choice import Aggregation, aggregate, outcomes

    right, tied = outcomes(scoring, image_text, text_text, text_roles)
    agg = scoring.aggregation
    groups = list(fields[agg.field]) if agg.field is not None else None
    metrics: dict[str, Any] = {}
    for name in scoring.metrics:
        metrics[name] = aggregate(right[name], groups, agg).value
    head = aggregate(right[scoring.headline], groups, agg)
    metrics["accuracy"] = head.value
    if agg.field is not None:
        metrics.update(micro=head.micro, n_groups=len(head.kept), n_groups_left_out=len(head.groups) - len(head.kept))
    metrics.update(n_queries=int(len(tied)), n_tied=int(np.sum(tied)), headline=scoring.headline)
    by: dict[str, Any] = {}
    for name in breakdown:
        if name == agg.field:
            by[name] = head.groups
        elif name in fields:
            by[name] = aggregate(right[scoring.headline], list(fields[name]), Aggregation(name)).groups
    if by:
        metrics["by"] = by
    return metrics, right, tied


def items_frame(data: Any, image_text: Any, text_text: Any, right: Mapping[str, Any], tied: Any) -> Any:
    """The per-item file's frame (see the module docstring; version :data:`ITEMS_VERSION` in its attrs)."""
    import pandas as pd

    n = data.n_items
    frame = pd.DataFrame({
        "item_index": range(n), "item_id": data.item_ids,
        "images": [[data.image_ids[i] for i in row] for row in data.item_images.tolist()],
        "texts": [[data.texts[t] for t in row] for row in data.item_texts.tolist()],
        "image_text": list(image_text.reshape(n, -1)), "text_text": list(text_text), "tied": tied,
        **{f"right_{m}": v for m, v in right.items()},
        **{f"field_{k}": v for k, v in data.fields.items()},
    })
    frame.attrs = {ITEMS_KEY: ITEMS_VERSION, "image_roles": list(data.image_roles),
                   "text_roles": list(data.text_roles), "scoring": data.scoring.to_dict()}
    return frame


def _frame_arrays(frames: Sequence[Any]) -> tuple[Any, Any, list[str], dict[str, list[str]]]:
    """``(image_text, text_text, text roles, fields)`` of per-item frames (one protocol's, or several to pool)."""
    import numpy as np

    roles = [list(f.attrs.get("text_roles") or ()) for f in frames]
    n_images = [len(f.attrs.get("image_roles") or ()) for f in frames]
    if not roles[0] or any(r != roles[0] for r in roles) or any(k != n_images[0] for k in n_images):
        raise ConfigError("per-item files to pool must hold items of one layout (the same image and text roles)")
    it = np.concatenate([np.stack(f["image_text"].to_numpy()).astype(np.float64) for f in frames])
    it = it.reshape(len(it), n_images[0], len(roles[0]))
    tt_rows = [np.stack(f["text_text"].to_numpy()).astype(np.float64) for f in frames]
    tt = np.concatenate(tt_rows) if all(r.ndim == 2 for r in tt_rows) else None
    names = [c for c in frames[0].columns if c.startswith("field_")]
    fields = {c.removeprefix("field_"): [str(v) for f in frames for v in f[c]] for c in names}
    return it, tt, roles[0], fields


def rescore(frames: Any | Sequence[Any], scoring: Any, breakdown: Sequence[str] = ()) -> dict[str, Any]:
    """The metrics of stored per-item scores (one per-item frame, or several pooled: SugarCrepe's seven subsets as
    MTEB pools them) under ``scoring`` (a :class:`~hnbench.metrics.choice.Scoring`, e.g. another protocol's):
    nothing is re-encoded."""
    frames = [frames] if hasattr(frames, "columns") else list(frames)
    it, tt, roles, fields = _frame_arrays(frames)
    if scoring.rule == "sugarcrepe-pp" and (tt is None or tt.shape[1] != 3):
        raise ConfigError("the SugarCrepe++ rule needs the text–text scores its per-item file holds")
    return choice_metrics(scoring, it, tt, roles, fields, breakdown)[0]


def check_items(result: EvalResult, frame: Any) -> list[str]:
    """Where a choice result's JSON differs from its per-item file (its metrics re-computed from the stored scores
    under the recorded scoring); empty when they agree (:meth:`hnbench.tasks.Task.check_per_item`)."""
    from hnbench.metrics.choice import Scoring

    if frame.attrs.get(ITEMS_KEY) != ITEMS_VERSION:
        return [f"per-item file version {frame.attrs.get(ITEMS_KEY)!r}, not {ITEMS_VERSION}"]
    try:
        scoring = Scoring.from_dict((result.settings or {})["scoring"])
        got = rescore(frame, scoring)
    except (KeyError, TypeError, ValueError, ConfigError) as e:
        return [f"its per-item scores cannot be re-scored ({e})"]
    wrong = []
    recorded = (result.metrics or {}).get("choice") or {}
    for key in dict.fromkeys((*scoring.metrics, "accuracy", "micro", "n_queries")):
        value = recorded.get(key)
        if key not in got or not isinstance(value, (int, float)) or isinstance(value, bool):
            if key in got:
                wrong.append(f"{key} is missing from the JSON")
            continue
        if abs(float(value) - float(got[key])) > 1e-9 * max(1.0, abs(float(got[key]))):
            wrong.append(f"{key} = {value:g} in the JSON, {got[key]:g} from the per-item file")
    return wrong


def run(encoder: Any, data: Any, settings: Any, output_dir: str | Path | None = None, *, ctx: Any = None,
        timings: dict[str, float] | None = None, t0: float | None = None, data_spec: Any = None) -> EvalResult:
    """Score ``encoder`` on a loaded :class:`~hnbench.data.choices.ChoiceSet`; write the result JSON and the
    per-item file."""
    from hnbench.data.choices import ChoiceSet, recheck_item_counts
    from hnbench.evaluation.encode import encode_images, encode_texts
    from hnbench.metrics.choice import TIE_RULES, Aggregation, intervals

    if not isinstance(data, ChoiceSet):
        raise ConfigError(f"--task choice scores option-choice items, not {type(data).__name__}")
    s = settings
    scoring = data.scoring
    job = TaskRun(TASK, encoder, data, s, output_dir, {
        "scoring": scoring.to_dict(), "image_roles": list(data.image_roles), "text_roles": list(data.text_roles),
        "tie_rule": TIE_RULES[scoring.tie_rule], "aggregation": scoring.aggregation.describe(),
        "similarity": "cosine of the L2-normalised fp32 embeddings, computed in float64"},
        ctx=ctx, t0=t0, timings=timings, data_spec=data_spec)
    cache = job.start()
    img = encode_images(encoder, data.images, batch_size=s.batch_size, num_workers=s.num_workers,
                        skip_bad=s.skip_invalid, amp=s.amp, progress=s.progress, cache=cache)
    image_vectors = img.vectors
    if img.bad:  # --skip-invalid: the items showing an unreadable image are dropped (counted), the counts rechecked
        old = {image_id: i for i, image_id in enumerate(data.image_ids)}
        job.data = data = recheck_item_counts(data.drop_images(sorted(img.bad)))
        job.dataset.update(fingerprint=data.fingerprint(), meta=data.meta)  # the items scored, as retrieval records
        image_vectors = image_vectors[[old[i] for i in data.image_ids]]
    txt = encode_texts(encoder, data.texts, batch_size=s.text_batch_size or max(s.batch_size, 64), amp=s.amp,
                       progress=s.progress, cache=cache, num_workers=s.num_workers)
    image_text, text_text = item_scores(image_vectors, txt.vectors, data.item_images, data.item_texts,
                                        data.text_pairs)
    metrics, right, tied = choice_metrics(scoring, image_text, text_text, data.text_roles, data.fields,
                                          data.breakdown)
    ci95: dict[str, Any] = {}
    how: dict[str, Any] = {}
    if s.ci:
        agg = scoring.aggregation
        groups = data.fields[agg.field] if agg.field is not None else None
        lo_hi: dict[str, Any] = {}
        for name in scoring.metrics:
            lo_hi[name] = intervals(right[name], groups, agg, name, seed=s.seed)
        lo_hi["accuracy"] = lo_hi[scoring.headline]
        if agg.field is not None:
            lo_hi["micro"] = intervals(right[scoring.headline], None, Aggregation(), "micro", seed=s.seed)
        ci95 = {"choice": {k: [float(v[0][0]), float(v[0][1])] for k, v in lo_hi.items()}}
        how = {"choice": {k: v[1] for k, v in lo_hi.items()}}
    buf = io.BytesIO()
    items_frame(data, image_text, text_text, right, tied).to_parquet(buf, index=False)
    return job.finish(metrics, ci95, img, txt, ci95_method=how, per_query=buf.getvalue(), n_items=data.n_items,
                      n_texts=data.n_texts)
