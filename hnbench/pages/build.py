"""Collect a browse page's rows from a stored result, its per-query file and the re-loaded dataset."""

from __future__ import annotations

import base64
import io
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tqdm.auto import tqdm

from hnbench.data import ImageTextDataset, load_spec
from hnbench.errors import ConfigError
from hnbench.io import atomic_write_bytes, check_output, record_output
from hnbench.pages.html import render
from hnbench.pages.page import Page, Row
from hnbench.registry import DATASETS
from hnbench.results.compare import BASELINE, BASELINE_ONLY, MODEL, MODEL_ONLY, check_comparable, model_label
from hnbench.results.record import PER_QUERY_TOP, EvalResult, read_per_query, read_result
from hnbench.settings import from_options
from hnbench.specs import DataSpec

# hnbench.hardness is imported only for a page that shows hardness: its statistics import torch, which a
# page of an evaluation result does not otherwise need (and pandas, slow to import, only where frames are read).
if TYPE_CHECKING:
    from hnbench.hardness.schema import HardnessReport

THUMB_PX = 256  # stored size (long side): shown at 128 px, 2× on a HiDPI screen or enlarged on a click


def reload_dataset(result: EvalResult, dataset: str | None = None, *, data_root: str | None = None,
                   split_file: Sequence[str] | None = None, **data: Any) -> ImageTextDataset:
    """Load the dataset a result was scored on and check its fingerprint: the :class:`DataSpec` it recorded
    (a result written before specs were recorded: its name or source, protocol, skip-invalid), with the
    given DataSpec fields (``dataset``, ``data_root``, ``split_file``, ``caption_column``, ...) replacing it."""
    d = result.dataset
    flags = from_options(DataSpec, None, {"dataset": dataset, "data_root": data_root,
                                          "split_file": tuple(split_file or ()), **data})
    spec = DataSpec.from_record(d).override(**flags.set_fields())
    name = spec.dataset
    if name is not None:
        spec.validate()  # types (a result's record may say anything) and the fields its kind reads
    if not name or (name not in DATASETS and not Path(name).exists() and not str(name).startswith("hf:")):
        raise ConfigError(f"{result.path}: its dataset {d.get('name')!r} (source {d.get('source')!r}) is not here; "
                          "pass --dataset (and --data-root) to say where it is")
    ds = load_spec(spec)
    if ds.fingerprint() != d.get("fingerprint"):
        raise ConfigError(f"{result.path} was scored on dataset fingerprint {d.get('fingerprint')}, but {name} now "
                          f"has {ds.fingerprint()}; pass the dataset it was scored on")
    return ds


def thumbnail_jpeg(ds: ImageTextDataset, i: int, px: int = THUMB_PX) -> bytes:
    """Image ``i`` of ``ds`` as a JPEG whose long side is at most ``px``."""
    im = ds.images.open(i).convert("RGB")
    im.thumbnail((px, px))
    buf = io.BytesIO()
    im.save(buf, format="JPEG", quality=75)
    return buf.getvalue()


def _thumb(ds: ImageTextDataset, i: int) -> str:
    """A thumbnail embedded in the page (a data URI): the page opens from disk alone."""
    return "data:image/jpeg;base64," + base64.b64encode(thumbnail_jpeg(ds, i)).decode()


def _hardness_per_caption(path: str, report: HardnessReport,
                          ds: ImageTextDataset) -> tuple[np.ndarray, np.ndarray, list[float]]:
    """Hardest-negative index/score per caption of ``ds`` (by id) from a hardness run (read from ``path`` as
    ``report``), and its bucket edges."""
    import pandas as pd

    from hnbench.hardness.schema import read_file

    if "captions" not in report.files:
        raise ConfigError(f"{path}: the hardness run has no per-caption file")
    data = read_file(report, "captions")  # inside the run's folder, and the file its JSON recorded
    try:
        cap = pd.read_parquet(io.BytesIO(data))
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: its per-caption file {report.files['captions']} is unreadable ({e})") from e
    pos = {c: i for i, c in enumerate(ds.caption_ids)}
    hn_index = np.full(ds.n_captions, -1, np.int64)
    hn_score = np.full(ds.n_captions, np.nan)
    for cid, nid, s in zip(cap["caption_id"].astype(str), cap["nearest_id"], cap["nearest_score"]):
        if cid in pos:
            hn_index[pos[cid]] = pos.get(str(nid), -1)
            hn_score[pos[cid]] = s
    if not np.isfinite(hn_score).any():
        raise ConfigError(f"{path}: none of its caption ids is in this result's dataset")
    return hn_index, hn_score, list(report.settings.get("edges") or [])


def _rows(frame: Any, ds: ImageTextDataset, direction: str, top: int, keep: np.ndarray,
          hard: np.ndarray | None) -> list[Row]:
    """Display rows of the selected queries (positions in ``frame``'s direction block)."""
    first_caption = {int(i): j for j, i in reversed(list(enumerate(ds.caption_image.tolist())))}
    by_image = ds.image_captions()
    rows = []
    for r in frame.iloc[keep].itertuples():
        qi = int(r.query_index)
        if direction == "t2i":
            positives = {int(ds.caption_image[qi])}
            query_text, query_image, gt_image = ds.captions[qi], None, ds.image_ids[int(r.gt_index)]
            ids = list(getattr(r, "topk_index", ())[:top]) or ([r.best_wrong_index] if r.best_wrong_index >= 0 else [])
            items = [{"id": ds.image_ids[int(g)], "image": ds.image_ids[int(g)], "positive": int(g) in positives,
                      "text": ds.captions[first_caption[int(g)]]} for g in ids]
        else:
            positives = set(by_image[qi].tolist())
            query_text, query_image, gt_image = ds.captions[int(r.gt_index)], ds.image_ids[qi], None
            ids = list(getattr(r, "topk_index", ())[:top]) or ([r.best_wrong_index] if r.best_wrong_index >= 0 else [])
            items = [{"id": ds.caption_ids[int(g)], "image": None, "positive": int(g) in positives,
                      "text": ds.captions[int(g)]} for g in ids]
        scores = list(getattr(r, "topk_score", ())[:top]) or [r.best_wrong_score] * len(items)
        for it, s in zip(items, scores):
            it["score"] = float(s)
        wrong = int(r.best_wrong_index)
        confuser = "" if wrong < 0 else (ds.captions[first_caption[wrong]] if direction == "t2i" else ds.captions[wrong])
        h = None if hard is None else float(hard[qi])
        rows.append(Row(direction=direction, query_id=str(r.query_id), rank=int(r.rank),
                        margin=float(r.best_wrong_score - r.gt_score) if wrong >= 0 else float("-inf"),
                        query_image=query_image, query_text=query_text, gt_image=gt_image, items=items,
                        confuser_text=confuser, hardness=h if h == h else None))
    return rows


def build_page(result: EvalResult, ds: ImageTextDataset, *, other: EvalResult | None = None,
               hardness: str | None = None, limit: int = 200, top: int = 5, progress: bool = True,
               frame: Any = None, hardness_report: HardnessReport | None = None,
               thumb: Callable[[ImageTextDataset, int], str] = _thumb) -> Page:
    """Select the worst queries (and with ``other``, the baseline, every disagreement at K=1), collect texts and
    thumbnails. ``result`` is the page's *model*, ``other`` its *baseline* (:data:`hnbench.results.compare.BASELINE`:
    what ``hnbench compare`` takes first).

    ``frame`` / ``hardness_report``: the result's per-query frame and the hardness report when the caller
    has read them already (else they are read here); ``thumb`` gives image ``i``'s ``src`` (default: an embedded
    JPEG; a site links to a file it writes once for every page)."""
    if frame is None:
        frame = read_per_query(result)
    other_frame = read_per_query(other) if other is not None else None
    notes = []
    if frame.attrs.get("schema_version", 1) < 2:
        notes.append("This result's per-query file predates top-k storage (per-query schema 1): each query shows "
                     "only its best wrong item. Re-run `hnbench eval` for the top items.")
    hard_t2i = hard_i2t = None
    records = []
    if hardness:
        from hnbench.hardness.recall import recall_by_hardness  # imports torch: see the top of the module
        from hnbench.hardness.schema import read_report

        report = hardness_report if hardness_report is not None else read_report(hardness)
        hn_index, hn_score, edges = _hardness_per_caption(hardness, report, ds)
        hard_t2i = hn_score
        hard_i2t = np.full(ds.n_images, -np.inf)
        ok = np.isfinite(hn_score)
        np.maximum.at(hard_i2t, ds.caption_image[ok], hn_score[ok])
        hard_i2t[~np.isfinite(hard_i2t)] = np.nan
        for res, f in ((result, frame), (other, other_frame)):
            if res is None or f is None:  # no other result, no other frame
                continue
            try:
                rec, _ = recall_by_hardness(f, caption_ids=ds.caption_ids, image_ids=ds.image_ids,
                                            caption_image=ds.caption_image, hn_index=hn_index, hn_score=hn_score,
                                            edges=edges, n_wrong=0, result=str(res.path))
            except ValueError as e:
                raise ConfigError(f"{hardness}: {e}") from e
            records.append({"label": model_label(res.model), "role": MODEL if res is result else BASELINE,
                            "t2i": rec.t2i, "i2t": rec.i2t})
    rows: list[Row] = []
    counts = {}
    for direction, hard in (("t2i", hard_t2i), ("i2t", hard_i2t)):
        f = frame[frame["direction"] == direction].sort_values("query_index", kind="stable").reset_index(drop=True)
        margin = (f["best_wrong_score"] - f["gt_score"]).fillna(-np.inf).to_numpy()
        order = np.lexsort((f["query_index"].to_numpy(), -margin, -f["rank"].to_numpy()))  # worst first
        keep = order if limit == 0 else order[:limit]
        status = np.full(len(f), "", dtype=object)
        baseline_rank = None
        if other_frame is not None:
            g = other_frame[other_frame["direction"] == direction]
            baseline_rank = g.set_index(g["query_id"].astype(str)).loc[f["query_id"].astype(str), "rank"].to_numpy()
            a1, b1 = f["rank"].to_numpy() == 1, baseline_rank == 1
            status[a1 & ~b1], status[~a1 & b1] = MODEL_ONLY, BASELINE_ONLY
            shown = set(keep.tolist())
            keep = np.concatenate([keep, np.asarray([i for i in order if status[i] and i not in shown], np.int64)])
        counts[direction] = len(f)
        part = _rows(f, ds, direction, top, keep, hard)
        for row, i in zip(part, keep.tolist()):
            row.status = status[i]
            row.baseline_rank = None if baseline_rank is None else int(baseline_rank[i])
        rows += part
    needed = sorted({x for r in rows for x in [r.query_image, r.gt_image, *(it["image"] for it in r.items)] if x})
    img_pos = {c: i for i, c in enumerate(ds.image_ids)}
    thumbs = {c: thumb(ds, img_pos[c]) for c in tqdm(needed, desc="thumbnails", disable=not progress)}
    models = [{"label": model_label(r.model), "role": role, "metrics": r.metrics, "ci95": r.ci95 or {},
               "result": r.path} for r, role in ((result, MODEL), (other, BASELINE)) if r is not None]
    d = result.dataset
    return Page(title=f"{models[0]['label']} on {d.get('name')} · {d.get('protocol') or 'default'}", models=models,
                rows=rows, thumbs=thumbs, notes=notes, hardness=records, counts=counts)


def browse(result: str | Path, output_dir: str | Path, *, compare: str | Path | None = None,
           hardness: str | Path | None = None, dataset: str | None = None, data_root: str | None = None,
           split_file: Sequence[str] | None = None, limit: int = 200, top: int = 5, progress: bool = True,
           overwrite: bool = False, **data: Any) -> Path:
    """Write ``output_dir/index.html``: summary, recall by hardness, worst queries, disagreements.

    ``compare`` is the baseline, as ``hnbench compare``'s first result: the page shows ``result`` (the model)
    and marks the queries only one of the two gets right at K=1 (``model only`` / ``baseline only``).

    The result's data is reloaded from the spec it recorded; ``dataset``, ``data_root``, ``split_file`` and
    the other :class:`~hnbench.specs.DataSpec` fields in ``data`` replace its fields (e.g. where the data is
    now). A page of other inputs already there is not replaced unless ``overwrite``."""
    from_options(DataSpec, None, data)  # an unknown keyword fails before anything is read
    if limit < 0:
        raise ConfigError(f"--limit must be >= 0 (0: all queries), got {limit}")
    if not 1 <= top <= PER_QUERY_TOP:
        raise ConfigError(f"--top must be between 1 and {PER_QUERY_TOP}, got {top}")
    report: HardnessReport | None = None
    if hardness is not None:
        from hnbench.hardness.schema import read_report  # imports torch: see the top of the module

        if not Path(hardness).is_file():
            raise ConfigError(f"{hardness}: no such hardness file")
        report = read_report(hardness)  # a corrupt or newer file fails before any data is loaded
    res = read_result(result)
    other = read_result(compare) if compare is not None else None
    if other is not None:
        check_comparable([res, other])
    frame = read_per_query(res)  # fails on a missing per-query file before any data is loaded
    out = Path(output_dir) / "index.html"
    inputs = {"result": res.stem(), "compare": other and other.stem(),
              "hardness": hardness and str(Path(hardness).resolve()), "limit": limit, "top": top}
    check_output(out, "a page", inputs, overwrite=overwrite)
    ds = reload_dataset(res, dataset, data_root=data_root, split_file=split_file, **data)
    page = build_page(res, ds, other=other, hardness=str(hardness) if hardness else None, limit=limit, top=top,
                      progress=progress, frame=frame, hardness_report=report)
    record_output(out, inputs)
    atomic_write_bytes(out, render(page).encode())
    return out
