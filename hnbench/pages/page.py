"""What the browse page shows: plain records between :mod:`.build` (data) and :mod:`.html` (markup)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Row:
    """One query as shown: ids and texts are display-ready; ``items`` are the top retrieved gallery items."""

    direction: str
    query_id: str
    rank: int
    margin: float  # best wrong score − ground-truth score (> 0: a wrong item wins)
    query_image: str | None  # i2t: the query image id
    query_text: str  # t2i: the caption; i2t: the image's best-ranked true caption
    gt_image: str | None  # t2i: the true image id
    items: list[dict[str, Any]]  # {id, score, positive, image (t2i), text}
    confuser_text: str  # caption of the best wrong item, diffed against query_text
    hardness: float | None = None
    baseline_rank: int | None = None  # with a baseline (browse --compare): the query's rank there
    status: str = ""  # "" or "model only" / "baseline only": right at K=1 for that result only


@dataclass
class Page:
    """Everything the HTML renderer needs."""

    title: str
    models: list[dict[str, Any]]  # {label, role, metrics, ci95, result}: the page's result (role "model"), then
    # the baseline it is compared with, if any (browse --compare; hnbench compare's convention)
    rows: list[Row]
    thumbs: dict[str, str]  # image id → data URI
    notes: list[str] = field(default_factory=list)
    hardness: list[dict[str, Any]] = field(default_factory=list)  # per model: {label, edges, t2i, i2t}
    counts: dict[str, int] = field(default_factory=dict)
