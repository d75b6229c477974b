"""Every figure hnbench draws: PNGs through matplotlib's Agg canvas (no pyplot state, no display needed)."""

from __future__ import annotations

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
