"""The example plugin's task, ``example-margin``: for each image, its own caption's cosine minus the best cosine of
any other image's caption (the margin a retrieval model keeps over its hardest negative caption). Metrics (group
``margin``): ``mean`` (the mean margin), ``positive`` (% of images whose margin is above 0; main score).

Its option (:class:`MarginOptions`, declared with the task's registration): ``--example-margin-top K`` measures the
margin over the mean of the K best other captions instead of the best one; recorded in the result as
``example_margin_top`` when set, and part of the result file's name."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hnbench.settings import option
from hnbench.tasks import Task
from hnbench.tasks.common import TaskRun


@dataclass(frozen=True)
class MarginOptions:
    """The task's own option: flag ``--example-margin-top`` (its prefix is the task's name)."""

    top: int = option(1, minimum=1, record="if_set", identity=True,
                      help="the margin over the mean of the K best other captions (default 1: the best one)")


class Margin(Task):
    """The margin of each image's own caption over the best other caption."""

    def load(self, spec: Any, **options: Any) -> Any:
        from hnbench.data import load_spec

        return load_spec(spec, **options)

    def accepts(self, data: Any) -> bool:
        from hnbench.data import ImageTextDataset

        return isinstance(data, ImageTextDataset)

    def run(self, encoder: Any, data: Any, settings: Any, output_dir: str | Path | None = None, *, ctx: Any = None,
            timings: dict[str, float] | None = None, t0: float | None = None, data_spec: Any = None) -> Any:
        import numpy as np

        from hnbench.evaluation.encode import encode_images, encode_texts

        s = settings
        job = TaskRun(self, encoder, data, s, output_dir, {"similarity": "cosine, fp32"}, ctx=ctx, t0=t0,
                      timings=timings, data_spec=data_spec)
        cache = job.start()
        img = encode_images(encoder, data.images, batch_size=s.batch_size, num_workers=s.num_workers, amp=s.amp,
                            progress=s.progress, cache=cache)
        txt = encode_texts(encoder, data.captions, batch_size=s.text_batch_size or max(s.batch_size, 64), amp=s.amp,
                           progress=s.progress, cache=cache, num_workers=s.num_workers)
        scores = img.vectors @ txt.vectors.T  # (images, captions)
        own = np.asarray(data.caption_image) == np.arange(data.n_images)[:, None]
        others = np.sort(np.where(own, -np.inf, scores), axis=1)[:, ::-1][:, :s.task_options.top]
        margin = np.where(own, scores, -np.inf).max(1) - others.mean(1)
        metrics = {"mean": float(margin.mean()), "positive": float(100.0 * (margin > 0).mean()),
                   "n_queries": int(data.n_images)}
        return job.finish(metrics, {}, img, txt, n_captions=data.n_captions)


TASK = Margin(
    name="example-margin",
    title="Example margin (the example plugin's task)",
    inputs="an image–caption set",
    groups=("margin",),
    bounds={"positive": (0.0, 100.0), "mean": (-2.0, 2.0)},
    main_score="positive",
    main_of=("margin positive",),
    columns=("margin positive", "margin mean"),
    note="% of images whose own caption scores above every other caption, and the mean margin.",
)
