"""``--format open-clip-csv``: ``openclip_retrieval_results.csv``, rows in open_clip's retrieval-results layout
(its ``docs/openclip_retrieval_results.csv``: the same header, in its order).

A row per model (``name`` = architecture, ``pretrained`` = weights tag), filled from its results on the sets
that table has: Flickr30k and COCO, Karpathy's test splits (hnbench's ``karpathy-test`` protocols, those
CLIP_benchmark scores). ``<Set> image retr. R@K`` is text→image (hnbench's t2i), ``text retr.`` image→text (i2t);
values are fractions with 4 decimals, as open_clip writes them. ``params (M)`` is the model's parameter count in
millions and ``FLOPs (B)`` the GFLOPs of one image plus one caption at the model's context (up to 2 decimals), both
from the result's ``throughput`` record (:mod:`hnbench.evaluation.throughput`: counted as open_clip's
``docs/model_profile.csv`` counts ``mparams`` and ``gflops``, FLOPs = 2 per multiply-add); a result written before
it was recorded leaves them empty (the manifest lists them with the reason). The WinoGAViL columns stay empty
(hnbench has no WinoGAViL), and so does ``Average score``, open_clip's mean over all 19 metric columns. Any other benchmark or protocol, and a
zero-shot result, has no column: listed as not exported.
"""

from __future__ import annotations

import csv
import io
from typing import Any

from hnbench.evaluation.throughput import open_clip_numbers
from hnbench.io import csv_cell
from hnbench.publish.options import ExportSettings
from hnbench.publish.sources import Built, Skip, Source, Value, fraction, number, recall_ks

__all__ = ["FILE", "HEADER", "SETS", "build"]

FILE = "openclip_retrieval_results.csv"
#: (hnbench benchmark, protocol) → open_clip's set name in the column headings
SETS = {("flickr30k", "karpathy-test"): "Flickr", ("coco", "karpathy-test"): "MSCOCO"}
KS = (1, 5, 10)
_DIRECTIONS = {"t2i": "image", "i2t": "text"}
WINOGAVIL = ["WinoGAViL avg jaccard score", "WinoGAViL jaccard score 10", "WinoGAViL jaccard score 10-12",
             "WinoGAViL jaccard score 12", "WinoGAViL jaccard score 5", "WinoGAViL jaccard score 5-6",
             "WinoGAViL jaccard score 6"]
#: open_clip's docs/openclip_retrieval_results.csv header
HEADER = ["name", "pretrained", "params (M)", "FLOPs (B)", "Average score",
          *[f"{s} {d} retr. R@{k}" for s in ("Flickr", "MSCOCO") for d in ("image", "text") for k in KS], *WINOGAVIL]


def _short(x: float) -> str:
    """Up to 2 decimals, trailing zeros dropped, as open_clip writes ``params (M)`` and ``FLOPs (B)``."""
    return f"{x:.2f}".rstrip("0").rstrip(".")


def build(sources: list[Source], settings: ExportSettings) -> Built:
    """One CSV of every model with a Flickr30k or COCO Karpathy-test retrieval result."""
    built = Built()
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    owner: dict[tuple[str, str], tuple[str, str, str, str]] = {}
    traces: dict[tuple[str, str], list[tuple[str, int, str]]] = {}
    for s in sources:
        d = s.data
        if not {"t2i", "i2t"} <= set(s.result.task_spec().groups):  # image and text retrieval, both ways
            built.skipped.append(Skip(s.path, "the whole result", f"open_clip's retrieval table holds retrieval "
                                      f"results only, not {s.result.task}"))
            continue
        where = SETS.get((d.name, d.protocol))
        if where is None:
            why = (f"open_clip's {'Flickr' if d.name == 'flickr30k' else 'MSCOCO'} columns are Karpathy's test split "
                   f"(protocol karpathy-test), not {d.protocol}") if d.name in ("flickr30k", "coco") else \
                  f"open_clip's retrieval table has columns for Flickr30k and COCO (Karpathy test) only, not {d.name}"
            built.skipped.append(Skip(s.path, "the whole result", why))
            continue
        row_key = (s.model.arch, s.model.tag)
        if owner.setdefault(row_key, s.model.key) != s.model.key:
            built.skipped.append(Skip(s.path, "the whole result", f"another model is also named {row_key[0]} "
                                      f"({row_key[1]}): a row is a name and a weights tag; name one with --model-name"))
            continue
        row = rows.setdefault(row_key, {"name": s.model.arch, "pretrained": s.model.tag})
        trace = traces.setdefault(row_key, [])
        mparams, gflops, why = open_clip_numbers(s.result.throughput)
        if mparams is not None and "params (M)" not in row:
            row["params (M)"] = _short(mparams)
            trace.append(("params (M)", s.index, "throughput.params.total"))
        if gflops is not None and "FLOPs (B)" not in row:
            row["FLOPs (B)"] = _short(gflops)
            trace.append(("FLOPs (B)", s.index, "throughput.gflops"))  # its image + text
        for column, value in (("params (M)", mparams), ("FLOPs (B)", gflops)):
            if value is None:
                built.skipped.append(Skip(s.path, column, why))
        for group, direction in _DIRECTIONS.items():
            m = s.result.metrics.get(group) or {}
            for k in recall_ks(m):
                if k not in KS:
                    built.skipped.append(Skip(s.path, f"{group} R@{k}", "open_clip's table has R@1, R@5 and R@10 "
                                              "only"))
                    continue
                value = number(m.get(f"R@{k}"))
                if value is None:
                    built.skipped.append(Skip(s.path, f"{group} R@{k}", "not a number in the result (NaN: missing)"))
                    continue
                column = f"{where} {direction} retr. R@{k}"
                row[column] = f"{fraction(value):.4f}"
                trace.append((column, s.index, f"metrics.{group}.R@{k}"))
    if not rows:
        return built
    if any("FLOPs (B)" not in row or "params (M)" not in row for row in rows.values()):
        built.note("params (M) and FLOPs (B) are empty where no result of the model records a throughput record "
                   "with them (results written before hnbench recorded one: re-run the evaluation)")
    built.note("Average score and the WinoGAViL columns are empty: hnbench has no WinoGAViL, and open_clip's "
               "average is over all 19 metric columns")
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(HEADER)
    for i, key in enumerate(sorted(rows), start=1):
        row = rows[key]
        writer.writerow([csv_cell(row.get(c, "")) for c in HEADER])
        built.values += [Value(FILE, f"row {i} {column}", index, field, row[column])
                         for column, index, field in traces[key]]
    built.files[FILE] = buf.getvalue().encode()
    return built
