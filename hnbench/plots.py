"""Every figure hnbench draws: PNGs through matplotlib's Agg canvas (no pyplot state, no display needed)."""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
DPI = 120


def _figure(width: float = 7.0, height: float = 4.2) -> tuple[Any, Any]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    return fig, fig.subplots()


def _save(fig: Any, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, format="png")
    return path


def _grid(h: Any) -> tuple[int, np.ndarray]:
    """(offset on the fixed grid, counts) of a trimmed :class:`~hnbench.hardness.stats.Histogram`."""
    return int(round((h.start + 1.0) / h.width)), np.asarray(h.counts, dtype=np.float64)


def rebin(hists: Sequence[Any], target_bins: int = 60) -> tuple[np.ndarray, list[np.ndarray]]:
    """Common coarse edges over the occupied range of several fixed-grid histograms, and each one's
    share of its values per coarse bin."""
    grids = [_grid(h) for h in hists if len(h.counts)]
    if not grids:
        return np.array([0.0, 1.0]), [np.zeros(1) for _ in hists]
    width = hists[0].width
    lo = min(o for o, _ in grids)
    hi = max(o + c.size for o, c in grids)
    factor = max(1, math.ceil((hi - lo) / target_bins))
    lo = (lo // factor) * factor
    n = math.ceil((hi - lo) / factor)
    edges = -1.0 + width * (lo + factor * np.arange(n + 1))
    out = []
    for h in hists:
        full = np.zeros(n * factor)
        if len(h.counts):
            o, c = _grid(h)
            full[o - lo:o - lo + c.size] = c
        coarse = full.reshape(n, factor).sum(1)
        out.append(coarse / coarse.sum() if coarse.sum() else coarse)
    return edges, out


def plot_histograms(path: str | Path, series: Sequence[tuple[str, Any, float]], *, title: str,
                    xlabel: str = "cosine similarity", markers: Sequence[tuple[str, float]] = ()) -> Path:
    """Overlaid histograms (share of values per bin) with each series' mean as a dashed line."""
    fig, ax = _figure()
    edges, shares = rebin([h for _, h, _ in series])
    for k, ((label, _, mean), y) in enumerate(zip(series, shares)):
        colour = PALETTE[k % len(PALETTE)]
        ax.stairs(y, edges, fill=True, alpha=0.35, color=colour)
        ax.stairs(y, edges, color=colour, linewidth=1.2, label=f"{label} (mean {mean:.3f})")
        if np.isfinite(mean):
            ax.axvline(mean, color=colour, linestyle="--", linewidth=1.2)
    for label, x in markers:
        ax.axvline(x, color="black", linestyle=":", linewidth=1)
        ax.annotate(label, (x, 1), xycoords=("data", "axes fraction"), xytext=(3, -12),
                    textcoords="offset points", fontsize=8)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("share per bin")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(alpha=0.3)
    return _save(fig, path)


def plot_buckets(path: str | Path, labels: Sequence[str], series: Sequence[tuple[str, Sequence[float],
                 Sequence[float]]], *, title: str, ylabel: str = "share of in-batch negatives (%)") -> Path:
    """:func:`buckets_figure` written to ``path``."""
    return _save(buckets_figure(labels, series, title=title, ylabel=ylabel), path)


def buckets_figure(labels: Sequence[str], series: Sequence[tuple[str, Sequence[float], Sequence[float]]], *,
                   title: str, ylabel: str = "share of in-batch negatives (%)") -> Any:
    """Grouped bars of bucket shares (in %) with standard-error whiskers, one group per bucket; a series whose
    standard error is undefined (NaN: one batch) gets no whiskers rather than zero-width ones."""
    fig, ax = _figure()
    x = np.arange(len(labels))
    width = 0.8 / max(len(series), 1)
    for k, (name, shares, err) in enumerate(series):
        pos = x - 0.4 + width * (k + 0.5)
        y = 100 * np.asarray(shares, dtype=np.float64)
        e = 100 * np.asarray(err, dtype=np.float64)
        bars = ax.bar(pos, y, width, yerr=e if np.isfinite(e).all() else None, capsize=3,
                      color=PALETTE[k % len(PALETTE)], label=name)
        ax.bar_label(bars, labels=[f"{v:.1f}" for v in y], fontsize=7, padding=5)
    ax.set_xticks(x, labels)
    ax.set_xlabel("caption similarity bucket")
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, 105)
    ax.set_title(title)
    if len(series) > 1:
        ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return fig


def plot_heatmap(path: str | Path, matrix: np.ndarray, *, title: str, mask_diagonal: bool = True) -> Path:
    """A square similarity matrix (e.g. one batch's Ḡ); the diagonal is masked so it does not set the scale."""
    m = np.array(matrix, dtype=np.float64)
    if mask_diagonal:
        np.fill_diagonal(m, np.nan)
    fig, ax = _figure(6.0, 5.2)
    finite = m[np.isfinite(m)]
    vmin = float(finite.min()) if finite.size else 0.0
    im = ax.imshow(np.ma.masked_invalid(m), cmap="viridis", vmin=vmin, vmax=1.0, interpolation="nearest")
    fig.colorbar(im, ax=ax, label="caption cosine similarity")
    ax.set_xlabel("caption in batch")
    ax.set_ylabel("caption in batch")
    ax.set_title(title)
    return _save(fig, path)


def plot_recall(path: str | Path, series: Sequence[tuple[str, Sequence[Any]]], *, title: str, value: str = "r_at_1",
                xlabel: str = "similarity of the query's hardest negative caption", ylabel: str = "R@1 (%)") -> Path:
    """A percentage per hardness bucket (bars: each bucket's attribute ``value``, R@1 by default), one series per
    direction/model/subset; n under each bar's value."""
    fig, ax = _figure()
    labels = [b.label for b in series[0][1]] if series else []
    x = np.arange(len(labels))
    width = 0.8 / max(len(series), 1)
    for k, (name, buckets) in enumerate(series):
        y = np.array([getattr(b, value) if b.n else 0.0 for b in buckets])
        bars = ax.bar(x - 0.4 + width * (k + 0.5), y, width, color=PALETTE[k % len(PALETTE)], label=name)
        ax.bar_label(bars, labels=[f"{getattr(b, value):.0f}\nn={b.n}" if b.n else "n=0" for b in buckets], fontsize=7)
    ax.set_xticks(x, labels)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, 118)
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)


def recall_bars_png(labels: Sequence[str], series: Sequence[tuple[str, Sequence[float], Sequence[Sequence[float]]]],
                    *, title: str) -> bytes:
    """Horizontal bars of R@1 per model (``labels``, top to bottom), one bar per series (a direction: ``(name,
    values, [lo, hi] per model)``) with its 95% interval as a whisker (none where an end is NaN), as PNG bytes.

    Texts are drawn as they are (no mathtext: a ``$`` in a model's name is a dollar sign); a long name is cut to
    48 characters with an ellipsis so the bars keep their room."""
    from matplotlib.figure import Figure

    def short(s: str) -> str:
        return s if len(s) <= 48 else s[:47] + "…"

    n = max(len(labels), 1)
    fig = Figure(figsize=(9.0, 1.3 + 0.36 * n * max(len(series), 1) ** 0.5), layout="constrained")
    ax = fig.subplots()
    y = np.arange(len(labels))
    height = 0.8 / max(len(series), 1)
    right = 0.0
    for k, (name, values, ci) in enumerate(series):
        v = np.array([x if x == x else 0.0 for x in values], dtype=float)
        lo = np.array([c[0] if c is not None and c[0] == c[0] else np.nan for c in ci], dtype=float)
        hi = np.array([c[1] if c is not None and c[1] == c[1] else np.nan for c in ci], dtype=float)
        pos = y - 0.4 + height * (k + 0.5)
        ax.barh(pos, v, height, color=PALETTE[k % len(PALETTE)], label=name)
        ok = np.isfinite(lo) & np.isfinite(hi)
        if ok.any():
            err = np.vstack([np.clip(v[ok] - lo[ok], 0, None), np.clip(hi[ok] - v[ok], 0, None)])
            ax.errorbar(v[ok], pos[ok], xerr=err, fmt="none", ecolor="#222", elinewidth=1, capsize=2.5)
        ends = np.fmax(v, np.nan_to_num(hi, nan=0.0))  # the label goes right of the whisker
        right = max(right, float(ends.max(initial=0.0)))
        for p, x, end, fine in zip(pos, v, ends, [c == c for c in values]):
            ax.text(end + 0.8, p, f"{x:.1f}" if fine else "—", va="center", fontsize=7, color="#333",
                    parse_math=False)
    ax.set_yticks(y, [short(s) for s in labels], fontsize=8, parse_math=False)
    ax.set_ylim(len(labels) - 0.5, -0.5)  # the first label (the best) on top, no empty margin
    ax.set_xlim(0, min(100.0, right) * 1.12 + 2)
    ax.set_xlabel("R@1 (%), whiskers: 95% interval", parse_math=False)
    ax.set_title(short(title) if len(title) > 90 else title, fontsize=10, parse_math=False)
    ax.grid(axis="x", alpha=0.3)
    fig.legend(fontsize=8, loc="outside upper right", ncols=len(series))
    buf = io.BytesIO()
    fig.savefig(buf, dpi=DPI, format="png", metadata={"Software": None})
    return buf.getvalue()
