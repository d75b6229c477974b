"""``hnbench train-report RUN_DIR [RUN_DIR …]``: a run's diagnostics as a table and one PNG.

Reads ``log.jsonl``, ``diagnostics.jsonl`` and ``train_config.json`` of each run; several runs (e.g.
InfoNCE vs HN-CLIP from the same start) are overlaid in one figure and listed side by side. Each
held-out R@1 comes with its 95% interval (:func:`hnbench.metrics.recall_ci` on the evaluation's stored
per-query ranks), in the table and as a band in the figure; :func:`r1_summary` is the start → end line
the trainer prints when a run ends.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hnbench.errors import ConfigError, HnbenchError
from hnbench.io import read_json_untrusted, read_rows
from hnbench.metrics import recall_ci
from hnbench.plots import PALETTE
from hnbench.registry import LOSSES
from hnbench.results.record import read_per_query, read_result

__all__ = ["COLUMN_LEGEND", "epoch_table", "r1_summary", "read_run", "render_table", "report_figure", "stopped_at",
           "term_table", "train_report"]

logger = logging.getLogger(__name__)

COLUMNS = [("epoch", "epoch"), ("share_active_infonce", "active InfoNCE"), ("share_active_hn", "active HN"),
           ("share_active_train", "active (train loss)"), ("share_infonce_grad_zero", "InfoNCE grad = 0"),
           ("share_infonce_zero_fp16", "… if fp16 logits"),
           ("median_grad_ratio", "median ‖∇HN‖/‖∇NCE‖"), ("mean_grad_cos", "mean cos"),
           ("mean_sat_rows_infonce", "sat. rows NCE"), ("t2i_R@1", "t2i R@1"), ("i2t_R@1", "i2t R@1")]
COLUMN_LEGEND = {
    "epoch": "after that many epochs (0: the starting model)",
    "active InfoNCE": "share of the epoch's diagnosed batches whose InfoNCE loss is at least active_threshold",
    "active HN": "the same for the HN-CLIP loss",
    "active (train loss)": "share of the epoch's steps whose training loss is at least active_threshold",
    "InfoNCE grad = 0": "share of diagnosed batches whose InfoNCE gradient is exactly 0 in every element",
    "… if fp16 logits": "share whose InfoNCE gradient would be exactly 0 with the logits in fp16",
    "median ‖∇HN‖/‖∇NCE‖": "median ratio of the two full-parameter gradient norms on the same batch",
    "mean cos": "mean cosine between the two gradients",
    "sat. rows NCE": "mean share of softmax rows whose positive has probability exactly 1 (InfoNCE)",
    "t2i R@1": "held-out text-to-image R@1 (%) after the epoch [95% interval over the queries]",
    "i2t R@1": "held-out image-to-text R@1 (%) after the epoch [95% interval over the queries]",
}
MARKERS = ("o", "s", "^", "D", "v", "P")


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return read_rows(path)[0] if path.is_file() else []


def read_run(run_dir: str | Path) -> dict[str, Any]:
    """All records of one run directory."""
    d = Path(run_dir)
    if not (d / "log.jsonl").is_file() and not (d / "diagnostics.jsonl").is_file():
        raise ConfigError(f"{d}: not a training run directory (no log.jsonl / diagnostics.jsonl)")
    diag = _jsonl(d / "diagnostics.jsonl")
    meta = read_json_untrusted(d / "train_config.json", "training config", error=ConfigError) \
        if (d / "train_config.json").is_file() else {}
    if not isinstance(meta, dict) or not isinstance(meta.get("config", {}), dict):
        raise ConfigError(f"{d / 'train_config.json'}: not a training config (an object with a config object)")
    cfg = meta.get("config", {})
    framework = f"{cfg['objective']}, " if cfg.get("objective", "clip") != "clip" else ""
    loss = cfg.get("loss")
    uses_g = isinstance(loss, str) and loss in LOSSES and LOSSES.entry(loss).uses_g  # γ weighs its Ḡ
    name = f"{d.name} ({framework}{cfg.get('loss', '?')}{', γ=' + str(cfg.get('gamma')) if uses_g else ''})"
    evals = [r for r in diag if r.get("kind") == "eval"]
    for ev in evals:
        ev.update({f"{direction}_R@1_ci95": ci for direction, ci in _r1_intervals(d, ev).items()})
    return {"name": name, "dir": str(d), "log": _jsonl(d / "log.jsonl"), "meta": meta,
            "steps": [r for r in diag if r.get("kind") == "step"],
            "epochs": [r for r in diag if r.get("kind") == "epoch"], "evals": evals}


def _r1_intervals(run_dir: Path, ev: dict[str, Any]) -> dict[str, list[float]]:
    """The 95% interval of each direction's R@1 of one evaluation record: the result's ``ci95`` where it has one,
    else :func:`~hnbench.metrics.recall_ci` on its per-query ranks; {} when the result cannot be read."""
    if not ev.get("path"):
        return {}
    path = Path(ev["path"])
    if not path.is_file():  # the run folder moved: the result sits in its eval/epoch-NNN/
        path = run_dir / "eval" / f"epoch-{int(ev.get('epoch', 0)):03d}" / path.name
    try:
        result = read_result(path)
        if all("R@1" in ((result.ci95 or {}).get(d) or {}) for d in ("t2i", "i2t")):
            return {d: list(result.ci95[d]["R@1"]) for d in ("t2i", "i2t")}
        frame = read_per_query(result)
    except HnbenchError as e:
        logger.info("no R@1 interval for %s: %s", path, e)
        return {}
    out = {}
    for d in ("t2i", "i2t"):
        ranks = frame.loc[frame["direction"] == d, "rank"].to_numpy()
        if ranks.size:
            out[d] = list(recall_ci(ranks, (1,))["R@1"])
    return out


def stopped_at(run: dict[str, Any]) -> str | None:
    """``"stopped at step 62 of 186"`` for a run that ended before its last step (``"stopped early at step 62"``
    when its record predates the total being written); None for a run that finished."""
    meta = run["meta"]
    if not meta.get("stopped_early"):
        return None
    total = meta.get("total_steps")
    return f"stopped at step {meta.get('steps')} of {total}" if total else f"stopped early at step {meta.get('steps')}"


def epoch_table(run: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per epoch: diagnostics summary joined with the evaluation after that epoch."""
    evals = {r["epoch"]: r for r in run["evals"]}
    rows = []
    keys = ("t2i_R@1", "i2t_R@1", "t2i_R@1_ci95", "i2t_R@1_ci95")
    if 0 in evals:
        rows.append({"epoch": 0, **{k: evals[0].get(k) for k in keys}})
    for e in run["epochs"]:
        ev = evals.get(e["epoch"] + 1, {})
        rows.append({**e, "epoch": e["epoch"] + 1, **{k: ev.get(k) for k in keys}})
    if not run["epochs"]:
        rows += [{"epoch": k, **{key: r.get(key) for key in keys}} for k, r in sorted(evals.items()) if k != 0]
    return rows


def r1_summary(run_dir: str | Path) -> str | None:
    """One line, start → end held-out R@1 of a run with its intervals, e.g.
    ``held-out R@1, epoch 0 → 3: t2i 8.40 [6.2, 11.1] → 12.60 [9.9, 15.8] (+4.20), i2t …``; None without
    two evaluations. Overlapping intervals are not a test: ``hnbench compare`` the two results for that."""
    table = [r for r in epoch_table(read_run(run_dir)) if r.get("t2i_R@1") is not None]
    if len(table) < 2:
        return None
    first, last = table[0], table[-1]
    parts = []
    for d in ("t2i", "i2t"):
        a, b = first.get(f"{d}_R@1"), last.get(f"{d}_R@1")
        if a is None or b is None:
            continue
        parts.append(f"{d} {_r1(first, d)} → {_r1(last, d)} ({b - a:+.2f})".replace("-", "\u2212"))
    return f"held-out R@1, epoch {first['epoch']} → {last['epoch']}: " + ", ".join(parts)


def _r1(row: dict[str, Any], direction: str) -> str:
    """``12.50`` or, with its interval, ``12.50 [2.7, 32.4]``."""
    ci = row.get(f"{direction}_R@1_ci95")
    return f"{row[f'{direction}_R@1']:.2f}" + (f" [{ci[0]:.1f}, {ci[1]:.1f}]" if ci else "")


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1 else f"{v:.2f}"
    return str(v)


def term_table(run: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per epoch: the mean over the logged steps of each objective term (``log.jsonl``'s ``terms``)."""
    by_epoch: dict[int, dict[str, list[float]]] = {}
    for r in run["log"]:
        for name, value in (r.get("terms") or {}).items():
            by_epoch.setdefault(int(r["epoch"]), {}).setdefault(name, []).append(float(value))
    return [{"epoch": e + 1, **{n: sum(v) / len(v) for n, v in terms.items()}} for e, terms in sorted(by_epoch.items())]


def render_table(runs: Sequence[dict[str, Any]]) -> str:
    """Markdown: per run, one row per epoch (epoch n = after n epochs; 0 = the starting model); then, for runs
    that logged them, each objective term's mean per epoch."""
    lines = ["| run | " + " | ".join(h for _, h in COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    for run in runs:
        for row in epoch_table(run):
            cells = [_r1(row, k[:3]) if k.endswith("R@1") and row.get(k) is not None else _fmt(row.get(k))
                     for k, _ in COLUMNS]
            lines.append(f"| {run['name']} | " + " | ".join(cells) + " |")
    lines += ["", "Columns:", *(f"- **{h}**: {COLUMN_LEGEND[h]}" for _, h in COLUMNS)]
    lines += [f"\n{run['name']}: {stop}." for run in runs if (stop := stopped_at(run))]
    rows = [(Path(run["dir"]).name, row) for run in runs for row in term_table(run)]  # its folder: short
    names = sorted({k for _, row in rows for k in row if k != "epoch"})
    if names:
        lines += ["", "| run folder | epoch | " + " | ".join(f"term {n}" for n in names) + " |",
                  "|---" * (len(names) + 2) + "|"]
        lines += [f"| {name} | {row['epoch']} | " + " | ".join(_fmt(row.get(n)) for n in names) + " |"
                  for name, row in rows]
    return "\n".join(lines) + "\n"


def _smooth(y: Sequence[float]) -> list[float]:
    """Trailing moving mean over ``w = max(1, n // 10)`` logged steps (the first points average what exists)."""
    w, out, total = max(1, len(y) // 10), [], 0.0
    for i, v in enumerate(y):
        total += v - (y[i - w] if i >= w else 0.0)
        out.append(total / min(i + 1, w))
    return out


def _note_if_flat(ax: Any, what: str) -> None:
    """A panel whose every plotted value is 0 says so in words instead of a flat line on a ±0.04 axis."""
    values = [v for line in ax.get_lines() for v in line.get_ydata() if v == v]
    if values and all(v == 0 for v in values):
        for line in list(ax.get_lines()):
            line.remove()
        ax.text(0.5, 0.5, f"{what}: 0 at every measurement", ha="center", va="center", transform=ax.transAxes,
                fontsize=9, wrap=True)
        ax.set_yticks([])


@dataclass(frozen=True)
class _Panels:
    """The report's axes by what they show (``cos``: the gradient cosine, on the right axis of ``ratio``)."""

    train: Any
    lr: Any
    loss: Any
    norm: Any
    ratio: Any
    cos: Any
    sat: Any
    active: Any
    r1: Any


@dataclass(frozen=True)
class _Style:
    """How one run is drawn: its name, colour and marker, a line width that thins for later runs (drawn on top,
    so identical series stay visible), the sideways dodge of its per-epoch points and its place ``k``."""

    name: str
    colour: str
    lw: float
    marker: str
    dodge: float
    k: int


# each panel: its axes (a _Panels field), title, y label, log scale, x label
_PANELS = (("train", "training loss (faint: each logged step; solid: smoothed)", "loss", False, "optimizer step"),
           ("lr", "learning rate", "learning rate", False, "optimizer step"),
           ("loss", "loss on the same batch", "loss (log scale)", True, "optimizer step"),
           ("norm", "full-parameter gradient norm", "‖∇θ L‖₂ (log scale)", True, "optimizer step"),
           ("ratio", "‖∇HN‖/‖∇InfoNCE‖ (solid) and cosine (dotted)", "gradient-norm ratio (log scale)", True,
            "optimizer step"),
           ("sat", "rows with positive prob. exactly 1", "share of softmax rows", False, "optimizer step"),
           ("active", "per epoch: share active / exact-zero", "share of diagnosed batches", False, "epoch"),
           ("r1", "held-out R@1 after epoch (shaded: 95% interval)", "R@1 (%)", False, "epoch"))
_FLAT_NOTED = ("sat", "active")  # panels that say "0 at every measurement" rather than draw a flat line


def report_figure(runs: Sequence[dict[str, Any]]) -> Any:
    """The report's figure (a matplotlib ``Figure``, no pyplot state): 2 × 4 panels, one colour and marker per run.

    Per-step series: the training loss (raw, faint; smoothed, solid), the learning rate, and where diagnostics
    were logged both losses and both gradient norms on the same batch, their ratio and cosine, and saturated
    rows. Per epoch: active / exact-zero shares and held-out R@1 with its 95% interval as a band (the axis
    spans the bands, so a wobble inside them does not look like a trend). Per-epoch points of several runs are
    dodged sideways and later runs drawn thinner on top, so identical series stay visible."""
    fig, panels = _make_panels()
    spanned: list[float] = []  # every R@1 and interval end drawn: what the R@1 axis must hold
    for k, run in enumerate(runs):
        style = _run_style(run, k, len(runs))
        _plot_training_log(panels, run, style)
        if run["steps"]:
            _plot_step_diagnostics(panels, run["steps"], style)
        if run["epochs"]:
            _plot_epoch_shares(panels.active, run["epochs"], style)
        spanned += _plot_r1(panels.r1, run, style)
    if spanned:
        _fit_r1_axis(panels.r1, spanned)
    _finish_panels(panels)
    return fig


def _make_panels() -> tuple[Any, _Panels]:
    """A 2 × 4 figure and its axes, the gradient cosine on a right-hand axis of the ratio panel (-1 to 1)."""
    from matplotlib.figure import Figure  # heavy: only the report's figure needs it

    fig = Figure(figsize=(20, 8.5), layout="constrained")
    (train, lr, loss, norm), (ratio, sat, active, r1) = fig.subplots(2, 4)
    cos = ratio.twinx()
    cos.set_ylim(-1.05, 1.05)
    cos.set_ylabel("gradient cosine (dotted)", fontsize=8)
    return fig, _Panels(train, lr, loss, norm, ratio, cos, sat, active, r1)


def _run_style(run: dict[str, Any], k: int, n_runs: int) -> _Style:
    """The style of the ``k``-th of ``n_runs`` runs: later runs thinner, per-epoch points dodged about the epoch."""
    return _Style(run["name"], PALETTE[k % len(PALETTE)], max(2.4 - 0.8 * k, 0.9), MARKERS[k % len(MARKERS)],
                  0.08 * (k - (n_runs - 1) / 2), k)


def _plot_training_log(p: _Panels, run: dict[str, Any], s: _Style) -> None:
    """``log.jsonl``: the training loss (raw, faint; smoothed) and the learning rate per logged step; a run that
    stopped early gets a dotted line at its last step (named in the loss panel's legend)."""
    log = [r for r in run["log"] if r.get("loss") is not None]
    if log:
        lx, ly = [r["step"] for r in log], [r["loss"] for r in log]
        p.train.plot(lx, ly, color=s.colour, alpha=0.25, lw=0.8, label=f"{s.name}: raw")
        p.train.plot(lx, _smooth(ly), color=s.colour, lw=s.lw, label=f"{s.name}: smoothed")
        lr = [r for r in log if r.get("lr") is not None]
        p.lr.plot([r["step"] for r in lr], [r["lr"] for r in lr], color=s.colour, lw=s.lw, label=s.name)
    if stop := stopped_at(run):
        for ax in (p.train, p.lr):
            ax.axvline(run["meta"]["steps"], color=s.colour, ls=":", lw=1)
        p.train.plot([], [], color=s.colour, ls=":", label=f"{s.name}: {stop}")


def _plot_step_diagnostics(p: _Panels, st: Sequence[dict[str, Any]], s: _Style) -> None:
    """The diagnosed steps: both losses and both gradient norms on the same batch (an exactly-zero InfoNCE
    gradient marked with an x at the panel's floor), their ratio and cosine, and the saturated softmax rows."""
    x, c, lw = [r["step"] for r in st], s.colour, s.lw
    p.loss.plot(x, [max(r["loss_infonce"], 1e-12) for r in st], color=c, lw=lw, label=f"{s.name}: InfoNCE")
    p.loss.plot(x, [max(r["loss_hn"], 1e-12) for r in st], color=c, lw=lw, ls="--", label=f"{s.name}: HN")
    p.norm.plot(x, [r["gnorm_infonce"] or float("nan") for r in st], color=c, lw=lw, label=f"{s.name}: ‖∇InfoNCE‖")
    p.norm.plot(x, [r["gnorm_hn"] or float("nan") for r in st], color=c, lw=lw, ls="--", label=f"{s.name}: ‖∇HN‖")
    zeros = [r["step"] for r in st if r["infonce_grad_zero"]]
    if zeros:
        floor = min([r["gnorm_hn"] for r in st if r["gnorm_hn"]] or [1e-12])
        p.norm.scatter(zeros, [floor] * len(zeros), marker="x", color=c, label=f"{s.name}: ∇InfoNCE exactly 0")
    p.ratio.plot(x, [r["grad_ratio"] if r["grad_ratio"] is not None else float("nan") for r in st],
                 color=c, lw=lw, label=f"{s.name}: ratio")
    p.cos.plot(x, [r["grad_cos"] if r["grad_cos"] is not None else float("nan") for r in st],
               color=c, lw=lw, ls=":", label=f"{s.name}: cosine")
    p.sat.plot(x, [r["sat_rows_infonce"] for r in st], color=c, lw=lw, label=f"{s.name}: InfoNCE")
    p.sat.plot(x, [r["sat_rows_hn"] for r in st], color=c, lw=lw, ls="--", label=f"{s.name}: HN")


def _plot_epoch_shares(ax: Any, ep: Sequence[dict[str, Any]], s: _Style) -> None:
    """Per epoch: the share of diagnosed batches with an active InfoNCE loss, and with an exactly-zero gradient."""
    e = [r["epoch"] + 1 + s.dodge for r in ep]
    ax.plot(e, [r["share_active_infonce"] for r in ep], marker=s.marker, color=s.colour, lw=s.lw,
            label=f"{s.name}: active (InfoNCE)")
    ax.plot(e, [r["share_infonce_grad_zero"] for r in ep], marker=s.marker, ls=":", color=s.colour, lw=s.lw,
            mfc="none", label=f"{s.name}: ∇InfoNCE = 0")


def _plot_r1(ax: Any, run: dict[str, Any], s: _Style) -> list[float]:
    """Held-out R@1 per evaluated epoch, each direction with its 95% interval as a named band (kept out of the
    legend); returns every value and interval end drawn."""
    spanned: list[float] = []
    for direction, ls, fill in (("t2i", "-", s.colour), ("i2t", "--", "none")):
        ev = [r for r in epoch_table(run) if r.get(f"{direction}_R@1") is not None]
        if not ev:
            continue
        ex = [r["epoch"] + s.dodge for r in ev]
        ax.plot(ex, [r[f"{direction}_R@1"] for r in ev], marker=s.marker, ls=ls, color=s.colour, lw=s.lw, mfc=fill,
                label=f"{s.name}: {direction}", zorder=3 + s.k)
        ci = [(x_, *r[f"{direction}_R@1_ci95"]) for x_, r in zip(ex, ev) if r.get(f"{direction}_R@1_ci95")]
        if ci:
            cx, lo, hi = zip(*ci)
            band = ax.fill_between(cx, lo, hi, color=s.colour, alpha=0.12 if direction == "t2i" else 0.07, lw=0)
            band.set_gid(f"{s.name}: {direction} 95% interval")  # named, but kept out of the crowded legend
            spanned += [*lo, *hi]
        spanned += [r[f"{direction}_R@1"] for r in ev]
    return spanned


def _fit_r1_axis(ax: Any, spanned: Sequence[float]) -> None:
    """The R@1 axis: at least 10 points tall, within 0–100, and never cut inside an interval."""
    lo, hi = min(spanned), max(spanned)
    pad = max(1.0, (10.0 - (hi - lo)) / 2)
    ax.set_ylim(max(0.0, lo - pad), min(100.0, hi + pad))


def _finish_panels(p: _Panels) -> None:
    """Titles and axis labels; a panel of zeros said in words; log scales where there is data; legends where
    something is labelled; whole epochs on the epoch axes."""
    for name, title, ylabel, log_scale, xlabel in _PANELS:
        ax = getattr(p, name)
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(ylabel, fontsize=9)
        ax.set_xlabel(xlabel)
        if name in _FLAT_NOTED:
            _note_if_flat(ax, title)
        if log_scale and ax.has_data():
            ax.set_yscale("log")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
        if xlabel == "epoch":
            ax.xaxis.get_major_locator().set_params(integer=True)
    if p.cos.get_legend_handles_labels()[0]:
        p.cos.legend(fontsize=7, loc="lower right")


def _plot(runs: Sequence[dict[str, Any]], output: Path) -> Path:
    output.parent.mkdir(parents=True, exist_ok=True)
    report_figure(runs).savefig(output, dpi=110)
    return output


def train_report(run_dirs: Sequence[str | Path], output: str | Path | None = None) -> tuple[Path, str]:
    """Plot the runs to ``output`` (default ``RUN_DIR/report.png`` of the first) and return (png, table)."""
    if not run_dirs:
        raise ConfigError("train-report needs at least one run directory")
    runs = [read_run(d) for d in run_dirs]
    png = _plot(runs, Path(output) if output else Path(run_dirs[0]) / "report.png")
    return png, render_table(runs)
