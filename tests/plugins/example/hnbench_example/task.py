"""The example plugin's task, ``example-margin``: for each image, its own caption's cosine minus the best cosine of
any other image's caption (the margin a retrieval model keeps over its hardest negative caption). Metrics (group
``margin``): ``mean`` (the mean margin), ``positive`` (% of images whose margin is above 0; main score)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hnbench.tasks import Task
from hnbench.tasks.common import TaskRun


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
        margin = np.where(own, scores, -np.inf).max(1) - np.where(own, -np.inf, scores).max(1)
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
