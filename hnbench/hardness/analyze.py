"""All statistics of one caption set (and its images) from embeddings already computed: no IO, no models."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Sequence

import numpy as np

from hnbench.hardness.schema import HardnessArrays, HardnessReport, ModalityStats, Pair, PairList
from hnbench.hardness.stats import (
    Distribution,
    Nearest,
    PairSample,
    batch_buckets,
    check_edges,
    nearest_other,
    sample_pairs,
    unique_pairs,
    unit_rows,
)
from hnbench.hardness.structure import Structure, label_structure
from hnbench.settings import HardnessSettings

logger = logging.getLogger(__name__)


def _pair_list(a: np.ndarray, b: np.ndarray, s: np.ndarray, ids: Sequence[str], texts: Sequence[str] | None,
               threshold: float, n_items: int, n_top: int, other: np.ndarray | None = None) -> PairList:
    involved = np.unique(np.concatenate([a, b])).size if a.size else 0
    top = [Pair(a_index=int(x), b_index=int(y), a=str(ids[x]), b=str(ids[y]), score=float(v),
                a_text=texts[x] if texts is not None else None, b_text=texts[y] if texts is not None else None,
                other_score=None if other is None else float(other[k]))
           for k, (x, y, v) in enumerate(zip(a[:n_top].tolist(), b[:n_top].tolist(), s[:n_top].tolist()))]
    return PairList(threshold=float(threshold), n_pairs=int(a.size), n_items=int(involved),
                    share_items=involved / max(n_items, 1), top=top)


def _geometry(x: np.ndarray, groups: np.ndarray | None, *, exact_max: int, n_sample: int, seed: int, device: str,
              block_bytes: int | None, progress: bool, timings: dict[str, float],
              prefix: str) -> tuple[Nearest, Distribution, PairSample | None]:
    """Nearest negatives (always exact) and the pairwise distribution (exact up to exact_max items)."""
    t = time.perf_counter()
    exact = x.shape[0] <= exact_max
    near: Nearest = nearest_other(x, groups, pairwise=exact, device=device, block_bytes=block_bytes, progress=progress)
    timings[f"{prefix}_nearest{'_and_pairwise' if exact else ''}"] = time.perf_counter() - t
    sample = None
    if exact:
        assert near.pairs is not None  # asked for with pairwise=exact
        pairwise = Distribution.from_sums(near.pairs)
    else:
        t = time.perf_counter()
        sample = sample_pairs(x, groups, n_sample=n_sample, seed=seed, device=device)
        pairwise = Distribution.from_values(sample.values, method="sampled", population=sample.population)
        timings[f"{prefix}_pairwise_sampled"] = time.perf_counter() - t
    return near, pairwise, sample


def _pair_max(cap: np.ndarray, caption_image: np.ndarray, n_images: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """For image pairs (a, b): the highest caption–caption cosine between their captions."""
    order = np.argsort(caption_image, kind="stable")
    ptr = np.searchsorted(caption_image[order], np.arange(n_images + 1))
    out = np.full(a.size, -np.inf, np.float32)
    na, nb = ptr[a + 1] - ptr[a], ptr[b + 1] - ptr[b]
    if np.all(na == 1) and np.all(nb == 1):
        single: np.ndarray = np.einsum("ij,ij->i", cap[order[ptr[a]]], cap[order[ptr[b]]]).astype(np.float32)
        return single
    for k in range(a.size):  # several captions per image: small loops over the candidates only
        ca, cb = order[ptr[a[k]]:ptr[a[k] + 1]], order[ptr[b[k]]:ptr[b[k] + 1]]
        out[k] = float((cap[ca] @ cap[cb].T).max())
    return out


def analyze(
    text_vectors: np.ndarray,
    *,
    captions: Sequence[str] | None = None,
    caption_ids: Sequence[str] | None = None,
    caption_image: np.ndarray | None = None,
    image_vectors: np.ndarray | None = None,
    image_ids: Sequence[str] | None = None,
    labels: Sequence[str] | None = None,
    label_field: str = "label",
    batch_size: int = HardnessSettings.batch_size,  # the defaults are declared once, in HardnessSettings
    n_batches: int = HardnessSettings.n_batches,
    edges: Sequence[float] = HardnessSettings.edges,
    threshold: float = HardnessSettings.threshold,
    image_threshold: float | None = HardnessSettings.image_threshold,
    exact_max: int = HardnessSettings.exact_max,
    n_sample_pairs: int = HardnessSettings.n_sample_pairs,
    seed: int = HardnessSettings.seed,
    device: str = HardnessSettings.device,
    block_bytes: int | None = None,
    n_top: int = 50,
    progress: bool = False,
) -> HardnessReport:
    """Every hardness statistic of (N, d) caption embeddings (and (M, d') image embeddings, if given).

    ``caption_image`` maps each caption to its image (default: each caption its own); captions of one
    image are never negatives of each other. ``labels`` (one per image) name known structure such as
    synthdense's families. The returned report has empty ``dataset``/``encoder``; its ``arrays``
    (:class:`~hnbench.hardness.schema.HardnessArrays`) hold the per-item nearest neighbours, the full pair
    lists and one example batch's Ḡ.
    """
    edges = check_edges(edges)
    timings: dict[str, float] = {}
    text = unit_rows(text_vectors)
    n = text.shape[0]
    cap_img = np.arange(n, dtype=np.int64) if caption_image is None else np.asarray(caption_image, np.int64)
    caption_ids = [str(i) for i in range(n)] if caption_ids is None else list(caption_ids)
    image_threshold = threshold if image_threshold is None else image_threshold
    geometry = functools.partial(_geometry, exact_max=exact_max, n_sample=n_sample_pairs, seed=seed, device=device,
                                 block_bytes=block_bytes, progress=progress, timings=timings)

    near, pairwise, sample = geometry(text, cap_img, prefix="text")
    a, b, s = unique_pairs(near.index, near.score, threshold)
    t = time.perf_counter()
    buckets, gbar, batch = batch_buckets(text, cap_img, batch_size=batch_size, n_batches=n_batches, edges=edges,
                                         seed=seed, device=device)
    timings["text_buckets"] = time.perf_counter() - t
    arrays = HardnessArrays(text_nearest_index=near.index, text_nearest_score=near.score, text_pairs=(a, b, s),
                            gbar=gbar, gbar_items=batch)
    text_stats = ModalityStats(n_items=n, pairwise=pairwise, nearest=Distribution.from_values(near.score),
                               near_duplicates=_pair_list(a, b, s, caption_ids, captions, threshold, n, n_top),
                               buckets=buckets)
    structure: dict[str, Structure] = {}
    label_of = None if labels is None else np.asarray([str(v) for v in labels])  # per image
    if label_of is not None:
        t = time.perf_counter()
        structure["text"] = label_structure(text, label_of[cap_img], cap_img, nearest_index=near.index,
                                            pairs=near.pairs, sample=sample, field=label_field, device=device)
        timings["text_structure"] = time.perf_counter() - t

    image_stats: ModalityStats | None = None
    both: PairList | None = None
    if image_vectors is not None:
        img = unit_rows(image_vectors)
        m = img.shape[0]
        image_ids = [str(i) for i in range(m)] if image_ids is None else list(image_ids)
        inear, ipair, isample = geometry(img, None, prefix="image")
        ia, ib, iscore = unique_pairs(inear.index, inear.score, image_threshold)
        arrays.image_nearest_index, arrays.image_nearest_score = inear.index, inear.score
        arrays.image_pairs = (ia, ib, iscore)
        image_stats = ModalityStats(n_items=m, pairwise=ipair, nearest=Distribution.from_values(inear.score),
                                    near_duplicates=_pair_list(ia, ib, iscore, image_ids, None, image_threshold, m, n_top))
        if label_of is not None:
            structure["image"] = label_structure(img, label_of, None, nearest_index=inear.index, pairs=inear.pairs,
                                                 sample=isample, field=label_field, device=device)
        # near-duplicates in both modalities: candidates are the image-neighbour pairs and the images of
        # caption-neighbour pairs; kept when both the image and the best caption similarity pass
        t = time.perf_counter()
        ci = np.flatnonzero(near.index >= 0)
        ca, cb = cap_img[ci], cap_img[near.index[ci]]
        ii = np.flatnonzero(inear.index >= 0)
        pa = np.concatenate([ca, ii])
        pb = np.concatenate([cb, inear.index[ii]])
        keep = pa != pb
        pa, pb = np.minimum(pa, pb)[keep], np.maximum(pa, pb)[keep]
        key = np.unique(pa * (m + 1) + pb)
        pa, pb = key // (m + 1), key % (m + 1)
        isim = np.einsum("ij,ij->i", img[pa], img[pb]).astype(np.float32)
        csim = _pair_max(text, cap_img, m, pa, pb)
        ok = (isim >= image_threshold) & (csim >= threshold)
        pa, pb, isim, csim = pa[ok], pb[ok], isim[ok], csim[ok]
        order = np.lexsort((pb, pa, -np.minimum(isim, csim)))
        pa, pb, isim, csim = pa[order], pb[order], isim[order], csim[order]
        arrays.both_pairs = (pa, pb, isim, csim)
        both = _pair_list(pa, pb, isim, image_ids, None, image_threshold, m, n_top, other=csim)
        timings["both_modalities"] = time.perf_counter() - t

    # the B and batch count used (a set smaller than B is one batch of all of it), and what was asked when it differs
    asked = {"batch_size_asked": batch_size, "n_batches_asked": n_batches} if (
        buckets.batch_size, buckets.n_batches) != (batch_size, n_batches) else {}
    settings = {"batch_size": buckets.batch_size, "n_batches": buckets.n_batches, **asked, "edges": edges, "threshold": threshold,
                "image_threshold": image_threshold, "exact_max": exact_max, "n_sample_pairs": n_sample_pairs,
                "seed": seed, "device": str(device), "label_field": label_field if labels is not None else None,
                "negatives": "items of another group (captions of the same image are not negatives)",
                "similarity": "cosine, fp32"}
    return HardnessReport(dataset={"n_captions": n}, encoder={}, settings=settings, text=text_stats,
                          image=image_stats, both=both, structure=structure,
                          timings={k: round(v, 4) for k, v in timings.items()}, arrays=arrays)
