"""``hnbench train-report RUN_DIR [RUN_DIR …]``: a run's diagnostics as a table and one PNG.

Reads ``log.jsonl``, ``diagnostics.jsonl`` and ``train_config.json`` of each run; several runs (e.g.
InfoNCE vs HN-CLIP from the same start) are overlaid in one figure and listed side by side.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hnbench.errors import ConfigError
from hnbench.io import read_rows

__all__ = ["epoch_table", "read_run", "render_table", "term_table", "train_report"]

COLUMNS = [("epoch", "epoch"), ("share_active_infonce", "active InfoNCE"), ("share_active_hn", "active HN"),
           ("share_active_train", "active (train loss)"), ("share_infonce_grad_zero", "InfoNCE grad = 0"),
           ("share_infonce_zero_fp16", "… if fp16 logits"),
           ("median_grad_ratio", "median ‖∇HN‖/‖∇NCE‖"), ("mean_grad_cos", "mean cos"),
           ("mean_sat_rows_infonce", "sat. rows NCE"), ("t2i_R@1", "t2i R@1"), ("i2t_R@1", "i2t R@1")]


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return read_rows(path)[0] if path.is_file() else []


def read_run(run_dir: str | Path) -> dict[str, Any]:
    """All records of one run directory."""
    d = Path(run_dir)
    if not (d / "log.jsonl").is_file() and not (d / "diagnostics.jsonl").is_file():
        raise ConfigError(f"{d}: not a training run directory (no log.jsonl / diagnostics.jsonl)")
    diag = _jsonl(d / "diagnostics.jsonl")
    meta = json.loads((d / "train_config.json").read_text()) if (d / "train_config.json").is_file() else {}
    cfg = meta.get("config", {})
    framework = f"{cfg['objective']}, " if cfg.get("objective", "clip") != "clip" else ""
    name = f"{d.name} ({framework}{cfg.get('loss', '?')}{', γ=' + str(cfg.get('gamma')) if cfg.get('loss') == 'hn' else ''})"
    return {"name": name, "dir": str(d), "log": _jsonl(d / "log.jsonl"), "meta": meta,
            "steps": [r for r in diag if r.get("kind") == "step"],
            "epochs": [r for r in diag if r.get("kind") == "epoch"],
            "evals": [r for r in diag if r.get("kind") == "eval"]}


def epoch_table(run: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per epoch: diagnostics summary joined with the evaluation after that epoch."""
    evals = {r["epoch"]: r for r in run["evals"]}
    rows = []
    if 0 in evals:
        rows.append({"epoch": 0, **{k: evals[0].get(k) for k in ("t2i_R@1", "i2t_R@1")}})
    for e in run["epochs"]:
        ev = evals.get(e["epoch"] + 1, {})
        rows.append({**e, "epoch": e["epoch"] + 1, "t2i_R@1": ev.get("t2i_R@1"), "i2t_R@1": ev.get("i2t_R@1")})
    if not run["epochs"]:
        rows += [{"epoch": k, "t2i_R@1": r.get("t2i_R@1"), "i2t_R@1": r.get("i2t_R@1")}
                 for k, r in sorted(evals.items()) if k != 0]
    return rows


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
            lines.append(f"| {run['name']} | " + " | ".join(_fmt(row.get(k)) for k, _ in COLUMNS) + " |")
    rows = [(Path(run["dir"]).name, row) for run in runs for row in term_table(run)]  # its folder: short
    names = sorted({k for _, row in rows for k in row if k != "epoch"})
    if names:
        lines += ["", "| run folder | epoch | " + " | ".join(f"term {n}" for n in names) + " |",
                  "|---" * (len(names) + 2) + "|"]
        lines += [f"| {name} | {row['epoch']} | " + " | ".join(_fmt(row.get(n)) for n in names) + " |"
                  for name, row in rows]
    return "\n".join(lines) + "\n"


def _plot(runs: Sequence[dict[str, Any]], output: Path) -> Path:
    import matplotlib  # heavy: only the report's figure needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5))
    (ax_loss, ax_norm, ax_ratio), (ax_sat, ax_active, ax_r1) = axes
    ax_cos = ax_ratio.twinx()
    ax_cos.set_ylim(-1.05, 1.05)
    ax_cos.set_ylabel("cosine (dotted)", fontsize=8)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, run in enumerate(runs):
        c, name, st = colours[k % len(colours)], run["name"], run["steps"]
        x = [r["step"] for r in st]
        if st:
            ax_loss.plot(x, [max(r["loss_infonce"], 1e-12) for r in st], color=c, label=f"{name}: InfoNCE")
            ax_loss.plot(x, [max(r["loss_hn"], 1e-12) for r in st], color=c, ls="--", label=f"{name}: HN")
            ax_norm.plot(x, [r["gnorm_infonce"] or float("nan") for r in st], color=c, label=f"{name}: ‖∇InfoNCE‖")
            ax_norm.plot(x, [r["gnorm_hn"] or float("nan") for r in st], color=c, ls="--", label=f"{name}: ‖∇HN‖")
            zeros = [r["step"] for r in st if r["infonce_grad_zero"]]
            if zeros:
                floor = min([r["gnorm_hn"] for r in st if r["gnorm_hn"]] or [1e-12])
                ax_norm.scatter(zeros, [floor] * len(zeros), marker="x", color=c, label=f"{name}: ∇InfoNCE exactly 0")
            ax_ratio.plot(x, [r["grad_ratio"] if r["grad_ratio"] is not None else float("nan") for r in st],
                          color=c, label=f"{name}: ratio")
            ax_cos.plot(x, [r["grad_cos"] if r["grad_cos"] is not None else float("nan") for r in st],
                        color=c, ls=":", label=f"{name}: cosine")
            ax_sat.plot(x, [r["sat_rows_infonce"] for r in st], color=c, label=f"{name}: InfoNCE")
            ax_sat.plot(x, [r["sat_rows_hn"] for r in st], color=c, ls="--", label=f"{name}: HN")
        elif run["log"]:
            ax_loss.plot([r["step"] for r in run["log"]], [r["loss"] for r in run["log"]], color=c,
                         label=f"{name}: training loss")
        ep = run["epochs"]
        if ep:
            e = [r["epoch"] + 1 for r in ep]
            ax_active.plot(e, [r["share_active_infonce"] for r in ep], "o-", color=c, label=f"{name}: active (InfoNCE)")
            ax_active.plot(e, [r["share_infonce_grad_zero"] for r in ep], "x:", color=c,
                           label=f"{name}: ∇InfoNCE = 0")
        table = epoch_table(run)
        ev = [r for r in table if r.get("t2i_R@1") is not None]
        if ev:
            ax_r1.plot([r["epoch"] for r in ev], [r["t2i_R@1"] for r in ev], "o-", color=c, label=f"{name}: t2i")
            ax_r1.plot([r["epoch"] for r in ev], [r["i2t_R@1"] for r in ev], "s--", color=c, label=f"{name}: i2t")
    for ax, title, log in ((ax_loss, "loss on the same batch", True), (ax_norm, "full-parameter gradient norm", True),
                           (ax_ratio, "‖∇HN‖/‖∇InfoNCE‖ (solid) and cosine (dotted)", True),
                           (ax_sat, "rows with positive prob. exactly 1", False),
                           (ax_active, "per epoch: share active / exact-zero", False),
                           (ax_r1, "held-out R@1 (%) after epoch", False)):
        ax.set_title(title, fontsize=10)
        if log and ax.has_data():
            ax.set_yscale("log")
        if ax.has_data():
            ax.legend(fontsize=7)
        ax.set_xlabel("epoch" if ax in (ax_active, ax_r1) else "optimizer step")
        if ax in (ax_active, ax_r1):
            ax.xaxis.get_major_locator().set_params(integer=True)
    if ax_cos.has_data():
        ax_cos.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=110)
    plt.close(fig)
    return output


def train_report(run_dirs: Sequence[str | Path], output: str | Path | None = None) -> tuple[Path, str]:
    """Plot the runs to ``output`` (default ``RUN_DIR/report.png`` of the first) and return (png, table)."""
    if not run_dirs:
        raise ConfigError("train-report needs at least one run directory")
    runs = [read_run(d) for d in run_dirs]
    png = _plot(runs, Path(output) if output else Path(run_dirs[0]) / "report.png")
    return png, render_table(runs)
