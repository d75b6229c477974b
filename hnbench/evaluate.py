"""The one orchestration: data → encode → exact search → metrics → result file.

t2i: each caption queries the images (its own image is the positive).
i2t: each image queries the captions (any of its captions is a positive; R@K is the "hit" rate).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hnbench.data import ImageTextDataset, load_dataset
from hnbench.encode import encode_images, encode_texts
from hnbench.metrics import csr_from_assignment, summarize
from hnbench.models import Encoder, load_model
from hnbench.results import EvalResult, atomic_write_bytes, write_result
from hnbench.search import RetrievalOutput, resolve_backend, retrieve

logger = logging.getLogger(__name__)


def token_stats(lengths: np.ndarray, context_length: int) -> dict[str, Any]:
    """Caption lengths in tokens (incl. start/end) and how many the context length truncates."""
    n_trunc = int((lengths > context_length).sum())
    return {
        "context_length": int(context_length), "mean": float(lengths.mean()), "median": float(np.median(lengths)),
        "p95": float(np.percentile(lengths, 95)), "max": int(lengths.max()), "n_truncated": n_trunc,
        "share_truncated": n_trunc / len(lengths), "over_77": int((lengths > 77).sum()),
        "over_248": int((lengths > 248).sum()),
    }


def score_embeddings(
    image_vectors: np.ndarray,
    text_vectors: np.ndarray,
    caption_image: np.ndarray,
    *,
    ks: Sequence[int] = (1, 5, 10),
    backend: str = "auto",
    device: str = "cpu",
    ci: bool = True,
    progress: bool = False,
) -> tuple[dict[str, dict], dict[str, dict], dict[str, RetrievalOutput]]:
    """Score given embeddings in both directions: returns (metrics, ci95, raw outputs) keyed t2i / i2t."""
    k = max(ks)
    n_images = image_vectors.shape[0]
    t2i_ptr, t2i_idx = np.arange(len(caption_image) + 1, dtype=np.int64), caption_image.astype(np.int64)
    i2t_ptr, i2t_idx = csr_from_assignment(caption_image, n_images)
    outs = {
        "t2i": retrieve(text_vectors, image_vectors, t2i_ptr, t2i_idx, k=k, backend=backend, device=device,
                        progress=progress, desc="search t2i"),
        "i2t": retrieve(image_vectors, text_vectors, i2t_ptr, i2t_idx, k=k, backend=backend, device=device,
                        progress=progress, desc="search i2t"),
    }
    metrics, ci95 = {}, {}
    for direction, out in outs.items():
        summary = summarize(out.rank, out.tied, ks=ks, ci=ci)
        ci95[direction] = summary.pop("ci95", None) or {}
        metrics[direction] = summary
    return metrics, ci95, outs


def per_query_frame(ds: ImageTextDataset, outs: dict[str, RetrievalOutput]) -> Any:
    """One row per query and direction: rank, ground-truth and best-wrong item with their scores."""
    import pandas as pd

    frames = []
    for direction, out in outs.items():
        q_ids = ds.caption_ids if direction == "t2i" else ds.image_ids
        g_ids = np.asarray(ds.image_ids if direction == "t2i" else ds.caption_ids, dtype=object)
        wrong = out.best_wrong_index
        frames.append(pd.DataFrame({
            "direction": direction, "query_index": np.arange(len(q_ids)), "query_id": q_ids,
            "rank": out.rank, "tied": out.tied, "gt_index": out.gt_index, "gt_id": g_ids[out.gt_index],
            "gt_score": out.gt_score, "best_wrong_index": wrong,
            "best_wrong_id": np.where(wrong >= 0, g_ids[np.maximum(wrong, 0)], None),
            "best_wrong_score": out.best_wrong_score,
        }))
    return pd.concat(frames, ignore_index=True)


def evaluate(
    model: str | Encoder,
    dataset: str | ImageTextDataset,
    *,
    pretrained: str | None = None,
    model_config: str | None = None,
    data_root: str | None = None,
    protocol: str | None = None,
    split: str | None = None,
    image_column: str | None = None,
    caption_column: str | None = None,
    output_dir: str | Path | None = None,
    device: str = "cpu",
    batch_size: int = 64,
    text_batch_size: int | None = None,
    num_workers: int | None = None,
    context_length: int | None = None,
    precision: str = "fp32",
    amp: bool = False,
    backend: str = "auto",
    ks: Sequence[int] = (1, 5, 10),
    ci: bool = True,
    skip_invalid: bool = False,
    use_cache: bool = True,
    progress: bool = True,
) -> EvalResult:
    """Score a model on an image–caption set: R@K both ways, ranks, MRR, bootstrap CIs, per-query file.

    ``model`` is a name understood by :func:`hnbench.models.load_model` or a loaded encoder;
    ``dataset`` a registered name, a path, or a loaded :class:`ImageTextDataset`. With
    ``output_dir`` the result JSON and a per-query parquet are written there (atomically; the JSON
    last, so its presence means the run is complete). ``skip_invalid`` drops (and counts) images
    that are missing or cannot be decoded and captions that are empty, instead of failing.
    ``use_cache`` is accepted for forward compatibility (the embedding cache is not built yet).
    """
    t0 = time.perf_counter()
    timings: dict[str, float] = {}
    if isinstance(dataset, str):
        dataset = load_dataset(dataset, data_root=data_root, protocol=protocol, split=split,
                               image_column=image_column, caption_column=caption_column, skip_invalid=skip_invalid)
    timings["load_data"] = time.perf_counter() - t0
    t = time.perf_counter()
    encoder = model if not isinstance(model, str) else load_model(
        model, pretrained, model_config=model_config, context_length=context_length, device=device,
        precision=precision)
    timings["load_model"] = time.perf_counter() - t

    img = encode_images(encoder, dataset.images, batch_size=batch_size, num_workers=num_workers,
                        skip_bad=skip_invalid, amp=amp, progress=progress)
    image_vectors = img.vectors
    if img.bad:
        keep = [i for i in range(dataset.n_images) if i not in img.bad]
        dataset = dataset.drop_images(sorted(img.bad), reason="unreadable image")
        image_vectors = image_vectors[keep]
    timings["encode_images"] = img.seconds
    txt = encode_texts(encoder, dataset.captions, batch_size=text_batch_size or max(batch_size, 64), amp=amp,
                       progress=progress)
    timings["encode_texts"] = txt.seconds

    t = time.perf_counter()
    used_backend = resolve_backend(backend, device, dataset.n_images)
    metrics, ci95, outs = score_embeddings(image_vectors, txt.vectors, dataset.caption_image, ks=ks,
                                           backend=used_backend, device=device, ci=ci, progress=progress)
    timings["search_and_metrics"] = time.perf_counter() - t
    timings["total"] = time.perf_counter() - t0

    result = EvalResult(
        model=encoder.info.to_dict(),
        dataset={"name": dataset.name, "protocol": dataset.protocol, "fingerprint": dataset.fingerprint(),
                 "n_images": dataset.n_images, "n_captions": dataset.n_captions, "source": dataset.source,
                 "skipped": {k: len(v) for k, v in dataset.skipped.items()}},
        metrics=metrics, ci95=ci95, tokens=token_stats(txt.lengths, encoder.info.context_length),
        settings={"device": str(device), "batch_size": batch_size, "precision": precision, "amp": amp,
                  "backend": outs["t2i"].backend, "search": "exact", "ks": list(ks),
                  "tie_rule": "pessimistic: rank = 1 + #non-positives scoring >= the best positive",
                  "similarity": "cosine, fp32", "cache": False},
        timings={k: round(v, 4) for k, v in timings.items()},
    )
    if dataset.n_skipped():
        logger.warning("%d items skipped: %s", dataset.n_skipped(), result.dataset["skipped"])
    if output_dir is not None:
        per_query = Path(output_dir) / f"{result.stem()}.queries.parquet"
        import io

        buf = io.BytesIO()
        per_query_frame(dataset, outs).to_parquet(buf, index=False)
        atomic_write_bytes(per_query, buf.getvalue())
        result.per_query = per_query.name
        write_result(result, output_dir)
    return result
