"""Retrieval, the first task: image–caption search both ways (today's pipeline, :mod:`hnbench.evaluation.evaluate`).

t2i: each caption queries the images; i2t: each image queries the captions. Metrics per direction: R@K (%),
mean and median rank, MRR, query and tie counts. Main score: mean R@1 = (t2i R@1 + i2t R@1) / 2.
"""

from __future__ import annotations

import math

from hnbench.tasks import Task

TASK = Task(
    name="retrieval",
    title="Retrieval",
    inputs="an image–caption set (a registered benchmark, a manifest, an image folder, an HF dataset)",
    groups=("t2i", "i2t"),
    bounds={"R@": (0.0, 100.0), "MRR": (0.0, 1.0), "mean_rank": (1.0, math.inf), "median_rank": (1.0, math.inf)},
    main_score="mean R@1",
    main_of=("t2i R@1", "i2t R@1"),
    columns=tuple(f"{d} R@{k}" for d in ("t2i", "i2t") for k in (1, 5, 10)),
    load="hnbench.data:load_spec",
    run="hnbench.evaluation.evaluate:run_evaluation",
)
