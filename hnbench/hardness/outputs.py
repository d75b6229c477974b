"""Files of a hardness run: per-caption parquet, pair and error CSVs, PNG plots, the Markdown report;
and the side-by-side comparison of several runs."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hnbench import plots
from hnbench.hardness.captions import CaptionSet
from hnbench.hardness.markdown import render_comparison, render_report
from hnbench.hardness.schema import HardnessReport, read_report, record_digests
from hnbench.io import atomic_write_bytes, csv_bytes, csv_frame


def _write_csv(path: Path, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    atomic_write_bytes(path, csv_bytes(header, rows))


def write_outputs(report: HardnessReport, output_dir: str | Path, cs: CaptionSet, *, n_show: int = 10) -> None:
    """Per-item parquet, pair CSVs, plots and the Markdown report (the JSON is written by the caller)."""
    import pandas as pd  # slow to import: only where a frame is written

    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    a = report.require_arrays()
    files: dict[str, str] = {}
    hn_i, hn_s = a.text_nearest_index, a.text_nearest_score
    ids = np.asarray(cs.caption_ids, dtype=object)
    img_ids = np.asarray(cs.image_ids, dtype=object)
    nearest_id = np.where(hn_i >= 0, ids[np.maximum(hn_i, 0)], np.array(None, dtype=object))
    frame = pd.DataFrame({"caption_index": np.arange(len(ids)), "caption_id": ids,
                          "image_id": img_ids[cs.caption_image], "nearest_index": hn_i,
                          "nearest_id": nearest_id, "nearest_score": hn_s})
    if cs.labels is not None:
        lab = np.asarray(cs.labels, dtype=object)[cs.caption_image]
        frame["label"] = lab
    buf = io.BytesIO()
    frame.to_parquet(buf, index=False)
    atomic_write_bytes(out / "captions.parquet", buf.getvalue())
    files["captions"] = "captions.parquet"

    pa, pb, ps = a.text_pairs
    _write_csv(out / "near_duplicates.csv", ["a_id", "b_id", "similarity", "a_caption", "b_caption"],
               [(ids[x], ids[y], f"{s:.6f}", cs.captions[x], cs.captions[y]) for x, y, s in zip(pa, pb, ps)])
    report.text.near_duplicates.file = files["near_duplicates"] = "near_duplicates.csv"
    if (report.image is not None and report.both is not None
            and a.image_pairs is not None and a.both_pairs is not None):  # analyze() fills them together
        ia, ib, isc = a.image_pairs
        _write_csv(out / "image_near_duplicates.csv", ["a_id", "b_id", "similarity"],
                   [(img_ids[x], img_ids[y], f"{s:.6f}") for x, y, s in zip(ia, ib, isc)])
        report.image.near_duplicates.file = files["image_near_duplicates"] = "image_near_duplicates.csv"
        ba, bb, bi, bc = a.both_pairs
        _write_csv(out / "both_near_duplicates.csv", ["a_id", "b_id", "image_similarity", "caption_similarity"],
                   [(img_ids[x], img_ids[y], f"{s:.6f}", f"{c:.6f}") for x, y, s, c in zip(ba, bb, bi, bc)])
        report.both.file = files["both_near_duplicates"] = "both_near_duplicates.csv"
    for k, errors in enumerate(a.errors):
        name = f"errors_{k}.csv"
        atomic_write_bytes(out / name, csv_frame(errors))
        report.recall[k].file = files[f"errors_{k}"] = name

    t = report.text
    p = out / "plots"
    title = report.label
    files["text_similarity"] = "plots/" + plots.plot_histograms(
        p / "text_similarity.png", [("all caption pairs", t.pairwise.histogram, t.pairwise.mean),
                                    ("hardest negative", t.nearest.histogram, t.nearest.mean)],
        title=f"Caption similarity — {title}", markers=[(f"threshold {report.settings['threshold']:g}",
                                                         report.settings["threshold"])]).name
    if report.image is not None:
        files["image_similarity"] = "plots/" + plots.plot_histograms(
            p / "image_similarity.png", [("all image pairs", report.image.pairwise.histogram, report.image.pairwise.mean),
                                         ("nearest image", report.image.nearest.histogram, report.image.nearest.mean)],
            title=f"Image similarity — {title}").name
    if t.buckets is not None:
        b = t.buckets
        whole = b.batch_size == report.text.n_items  # the one batch is the whole set (drawn in a seeded order)
        files["buckets"] = "plots/" + plots.plot_buckets(
            p / "buckets.png", b.labels, [("captions", b.shares, b.standard_errors())],
            title=f"In-batch negatives by caption similarity\n(B = {b.batch_size}, "
                  + ("one batch: no standard error)" if b.n_batches < 2 else f"{b.n_batches} batches, ± s.e.)")).name
        files["gbar"] = "plots/" + plots.plot_heatmap(
            p / "gbar.png", a.gbar, title=f"Ḡ of one random batch\n(B = {b.batch_size}"
                                          + (": all captions, in seeded order" if whole else "") + "; diagonal masked)").name
    for mod, s in report.structure.items():
        files[f"structure_{mod}"] = "plots/" + plots.plot_histograms(
            p / f"structure_{mod}.png", [(f"same {s.field}", s.within.histogram, s.within.mean),
                                         (f"different {s.field}", s.between.histogram, s.between.mean)],
            title=f"{mod.capitalize()} similarity within vs between {s.field}").name
    for k, rec in enumerate(report.recall):
        files[f"recall_{k}"] = "plots/" + plots.plot_recall(
            p / f"recall_{k}.png", [("t2i", rec.t2i), ("i2t", rec.i2t)],
            title=f"R@1 by hardness — {rec.model.get('arch')} ({rec.model.get('pretrained') or 'random init'})").name
    files["report"] = "report.md"
    files["summary"] = "hardness.json"
    report.files = files
    atomic_write_bytes(out / "report.md", render_report(report, n_show=n_show).encode())
    record_digests(report, out)  # the JSON, written last by the caller, ties this set of files together


def compare(reports: Sequence[HardnessReport | str | Path], output_dir: str | Path) -> Path:
    """Write ``comparison.md`` (+ ``comparison.json`` and overlaid plots) for several hardness runs."""
    out = Path(output_dir)
    loaded = [read_report(r) if isinstance(r, (str, Path)) else r for r in reports]
    if not loaded:
        raise ValueError("compare needs at least one hardness report")
    links = []
    for r in loaded:
        rel = Path(r.path).parent / (r.files.get("report") or "report.md") if r.path else None
        links.append(str(rel.resolve().relative_to(out.resolve())) if rel and rel.resolve().is_relative_to(out.resolve())
                     else str(rel) if rel else "")
    figs = {
        "pairwise": plots.plot_histograms(out / "plots" / "compare_pairwise.png",
                                          [(r.label, r.text.pairwise.histogram, r.text.pairwise.mean) for r in loaded],
                                          title="Pairwise caption similarity"),
        "hardest": plots.plot_histograms(out / "plots" / "compare_hardest.png",
                                         [(r.label, r.text.nearest.histogram, r.text.nearest.mean) for r in loaded],
                                         title="Hardest-negative caption similarity"),
    }
    with_b = [(r.label, b) for r in loaded if (b := r.text.buckets) is not None]
    if with_b and all(b.labels == with_b[0][1].labels for _, b in with_b):
        figs["buckets"] = plots.plot_buckets(out / "plots" / "compare_buckets.png", with_b[0][1].labels,
                                             [(label, b.shares, b.standard_errors()) for label, b in with_b],
                                             title="In-batch negatives by caption similarity")
    rel_plots = {k: f"plots/{v.name}" for k, v in figs.items()}
    atomic_write_bytes(out / "comparison.md", render_comparison(loaded, links=links, plots=rel_plots).encode())
    summary = {"kind": "hnbench.hardness.comparison", "schema_version": 1,
               "runs": [{"label": r.label, "summary": str(r.path) if r.path else None, "dataset": r.dataset,
                         "encoder": r.encoder, "pairwise_mean": r.text.pairwise.mean,
                         "hardest_mean": r.text.nearest.mean,
                         "bucket_shares": dict(zip(r.text.buckets.labels, r.text.buckets.shares))
                         if r.text.buckets else None} for r in loaded]}
    atomic_write_bytes(out / "comparison.json", (json.dumps(summary, indent=2) + "\n").encode())
    return out / "comparison.md"
