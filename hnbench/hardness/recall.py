"""Recall by hardness: a stored evaluation's per-query ranks joined with each query's hardest negative.

- t2i query (a caption) ``q``: hardness ``h_q`` = similarity of its hardest-negative caption.
- i2t query (an image): hardness = max of ``h_q`` over the image's captions.
- Bucket ``k`` of the edges holds ``e_k <= h < e_{k+1}`` (first open below, last open above, as the
  in-batch buckets); ``R@1(bucket) = 100 · #{q in bucket : rank_q = 1} / #{q in bucket}``, with
  the evaluation's pessimistic tie rule (a tie at the top is not rank 1).
- A t2i error is *at the hardest negative* when the image the model ranked first is the image of
  the query's hardest-negative caption.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hnbench.errors import ConfigError
from hnbench.hardness.schema import RecallBucket, RecallByHardness, WrongQuery
from hnbench.hardness.stats import bucket_index, bucket_labels, check_edges
from hnbench.results.record import EvalResult, read_per_query, read_result

if TYPE_CHECKING:  # pandas is imported where the frames are built (it is slow to import); here only its type
    import pandas as pd

logger = logging.getLogger(__name__)


def load_per_query(result_path: str | Path) -> tuple[EvalResult, pd.DataFrame]:
    """``(EvalResult, per-query DataFrame)`` of a result JSON (the parquet lies beside it, checked against it)."""
    result = read_result(result_path)
    if not result.per_query:
        raise ConfigError(f"{result_path}: the result has no per-query file (evaluate with an output_dir)")
    return result, read_per_query(result)


def _buckets(hard: np.ndarray, hit: np.ndarray, edges: Sequence[float]) -> list[RecallBucket]:
    b = bucket_index(hard, edges)
    out = []
    for k, label in enumerate(bucket_labels(edges)):
        m = b == k
        out.append(RecallBucket(label=label, n=int(m.sum()), r_at_1=float(100 * hit[m].mean()) if m.any() else float("nan")))
    return out


def recall_by_hardness(per_query: pd.DataFrame, *, caption_ids: Sequence[str], image_ids: Sequence[str],
                       caption_image: np.ndarray, hn_index: np.ndarray, hn_score: np.ndarray,
                       edges: Sequence[float], captions: Sequence[str] | None = None,
                       text_vectors: np.ndarray | None = None, n_wrong: int = 20, result: str = "",
                       model: dict[str, Any] | None = None) -> tuple[RecallByHardness, pd.DataFrame]:
    """R@1 per hardness bucket both ways, and the t2i errors (all of them as a DataFrame, the
    ``n_wrong`` hardest in the record). ``per_query`` has hnbench's per-query columns."""
    import pandas as pd  # slow to import: only where the frames are built

    e = check_edges(edges)
    cap_pos = {c: i for i, c in enumerate(caption_ids)}
    img_pos = {c: i for i, c in enumerate(image_ids)}
    caption_image = np.asarray(caption_image)
    img_hard = np.full(len(image_ids), -np.inf)
    has = np.isfinite(hn_score)
    np.maximum.at(img_hard, caption_image[has], hn_score[has])
    img_hard[~np.isfinite(img_hard)] = np.nan
    out: dict[str, list[RecallBucket]] = {}
    matched: dict[str, int] = {}
    frames = {}
    for direction, pos, hard in (("t2i", cap_pos, hn_score), ("i2t", img_pos, img_hard)):
        f = per_query[per_query["direction"] == direction]
        q = f["query_id"].astype(str).map(pos)
        ok = q.notna().to_numpy()
        f, q = f[ok], q[ok].astype(np.int64).to_numpy()
        h = hard[q]
        fin = np.isfinite(h)
        f, q, h = f[fin], q[fin], h[fin]
        if (~fin).any():
            logger.info("recall by hardness (%s): %d queries without a negative left out", direction, int((~fin).sum()))
        if (~ok).any():
            logger.warning("recall by hardness (%s): %d of %d queries are not in this caption set", direction,
                           int((~ok).sum()), ok.size)
        matched[direction] = int(len(f))
        out[direction] = _buckets(h, f["rank"].to_numpy() == 1, e)
        frames[direction] = (f, q, h)
    if not matched.get("t2i"):
        raise ValueError(f"{result or 'per-query results'}: no t2i query id matches this caption set's ids")

    f, q, h = frames["t2i"]
    err = f["rank"].to_numpy() > 1
    fe, qe, he = f[err], q[err], h[err]
    wrong_img = fe["best_wrong_id"].astype(str).map(img_pos).fillna(-1).astype(np.int64).to_numpy()
    hn_img = np.where(hn_index[qe] >= 0, caption_image[np.maximum(hn_index[qe], 0)], -2)
    at_hn = wrong_img == hn_img
    # the wrong image's caption most similar to the query (its first caption without vectors)
    by_image: dict[int, list[int]] = {}
    for c, i in enumerate(caption_image.tolist()):
        by_image.setdefault(i, []).append(c)
    wrong_cap, wrong_sim = [], []
    for qi, wi in zip(qe.tolist(), wrong_img.tolist()):
        cands = by_image.get(wi, [])
        if not cands:
            wrong_cap.append(-1)
            wrong_sim.append(np.nan)
            continue
        if text_vectors is not None:
            s = text_vectors[cands] @ text_vectors[qi]
            k = int(np.argmax(s))
            wrong_cap.append(cands[k])
            wrong_sim.append(float(s[k]))
        else:
            wrong_cap.append(cands[0])
            wrong_sim.append(np.nan)

    def text(i: int) -> str:
        return captions[i] if captions is not None and i >= 0 else ""

    errors = pd.DataFrame({
        "query_index": qe, "query_id": fe["query_id"].astype(str).to_numpy(), "rank": fe["rank"].to_numpy(),
        "hardness": he, "gt_id": fe["gt_id"].astype(str).to_numpy(),
        "wrong_id": fe["best_wrong_id"].astype(str).to_numpy(), "wrong_caption_index": wrong_cap,
        "wrong_similarity": wrong_sim, "at_hardest_negative": at_hn,
        "query_text": [text(i) for i in qe.tolist()], "wrong_text": [text(i) for i in wrong_cap],
    }).sort_values(["hardness", "query_index"], ascending=[False, True], kind="stable")
    wrong = [WrongQuery(query_id=r.query_id, query_text=r.query_text, rank=int(r.rank), hardness=float(r.hardness),
                        gt_id=r.gt_id, wrong_id=r.wrong_id, wrong_text=r.wrong_text,
                        wrong_similarity=float(r.wrong_similarity), at_hardest_negative=bool(r.at_hardest_negative))
             for r in errors.head(n_wrong).itertuples()]
    record = RecallByHardness(
        result=str(result), model=dict(model or {}), edges=e, t2i=out["t2i"], i2t=out["i2t"], n_matched=matched,
        n_errors=int(err.sum()), errors_at_hardest_negative=float(at_hn.mean()) if err.any() else float("nan"),
        wrong=wrong)
    return record, errors
