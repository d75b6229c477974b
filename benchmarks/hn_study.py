"""Does HN-CLIP beat InfoNCE, and when? A seeded multi-arm fine-tuning study on synthdense.

Every arm fine-tunes the bundled ``hnbench-tiny``/``synthdense`` model (InfoNCE pre-trained on
synthdense) on a seeded fraction of synthdense train, once per seed, and scores the final checkpoint
on synthdense test through ``hnbench.evaluation.evaluate`` (a stored result file + per-query parquet per run).
The arms are declared once in :data:`ARMS`; a run is (arm, seed) and lives in ``OUT/runs/<arm>__s<seed>/``
(training directory, its ``checkpoint.safetensors``) and ``OUT/results/`` (its result file). The
study is resumable: a run with a result file is skipped, a run with a resumable state continues.

    python benchmarks/hn_study.py --output runs/hn-study                      # the whole grid (5 seeds)
    python benchmarks/hn_study.py --output runs/hn-study --arms infonce hn-g0.5 --seeds 2   # a slice
    python benchmarks/hn_study.py --output runs/hn-study --report-only         # re-aggregate, no training

Reported per arm: R@1 both ways, mean over seeds with a 95% Student-t interval across seeds; the
paired comparison of each HN arm against InfoNCE on the same seeds (per seed with ``hnbench compare``'s
paired bootstrap and exact McNemar, and pooled over seeds); the share of diagnostics measurements
with an exactly-zero InfoNCE gradient and of inactive batches over training; and, from the InfoNCE
checkpoints' real features, where the saturation regime starts as a function of s·gap and the
precision of the logits. Writes ``study.json``, ``study.md`` and PNG figures into ``OUT``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from hnbench.data.synthdense import FAMILY_PATTERN

DIRECTIONS = ("t2i", "i2t")


@dataclass(frozen=True)
class Arm:
    """One training setting of the study; everything else is shared (see :class:`StudySizes`)."""

    name: str
    loss: str  # "infonce" | "hn"
    gamma: float = 0.0  # γ of the HN term (ignored for InfoNCE)
    precision: str = "fp32"  # "fp32" | "bf16" (autocast; the losses themselves always run in fp32)
    batching: str = "random"  # "random" | "family": batches of whole synthdense families (hardest negatives)
    scale: str = "fixed100"  # "fixed100": s = 100 frozen (Long-CLIP-L's) | "learned": the model's own s, trained
    data_fraction: float = 0.2  # the paper's 20% runs
    doc: str = ""

    def describe(self) -> str:
        loss = "InfoNCE" if self.loss == "infonce" else f"HN γ={self.gamma:g}"
        return f"{loss}, {self.precision}, {self.batching} batches, s {'= 100 fixed' if self.scale == 'fixed100' else 'learned'}"


def _arms() -> tuple[Arm, ...]:
    main = (Arm("infonce", "infonce", doc="the baseline"),
            *(Arm(f"hn-g{g:g}", "hn", gamma=g, doc="main arm: γ sweep") for g in (0.25, 0.5, 1.0)))
    # Ablations: each changes one factor of the main setting, for InfoNCE and for HN at the paper's γ = 0.5
    # (fixed in advance, not picked after seeing the γ sweep, so the ablations are not tuned on test).
    ablations = []
    for base in (main[0], main[2]):
        ablations += [replace(base, name=f"{base.name}-bf16", precision="bf16", doc="ablation: bf16 autocast"),
                      replace(base, name=f"{base.name}-family", batching="family", doc="ablation: family batches"),
                      replace(base, name=f"{base.name}-learned", scale="learned", doc="ablation: learned scale")]
    return (*main, *ablations)


ARMS: dict[str, Arm] = {a.name: a for a in _arms()}
BASELINE = "infonce"


@dataclass(frozen=True)
class StudySizes:
    """What every arm shares. Defaults sized for 2 CPU cores (see benchmarks/README.md)."""

    epochs: int = 3
    batch_size: int = 16  # the paper's micro-batch
    lr: float = 1e-4
    warmup_steps: int = 10
    diag_every: int = 3
    train_families: int = 400  # synthdense train: × 5 images; × data_fraction of them are used
    test_families: int = 100  # synthdense test: 500 pairs (the default split)
    probe_batches: int = 32  # batches of the saturation probe per InfoNCE checkpoint

    def dataset_options(self) -> dict[str, Any]:
        return {"n_families": {"train": self.train_families, "test": self.test_families}}


@dataclass(frozen=True)
class Run:
    arm: Arm
    seed: int

    @property
    def name(self) -> str:
        return f"{self.arm.name}__s{self.seed}"


def plan(arms: Iterable[str], seeds: int | Sequence[int]) -> list[Run]:
    """All (arm, seed) runs, seed-major so an interrupted study has whole seeds of every arm first."""
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        raise SystemExit(f"unknown arm(s) {unknown}; known: {sorted(ARMS)}")
    seed_list = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    return [Run(ARMS[a], s) for s in seed_list for a in arms]


def train_config(run: Run, sizes: StudySizes, out: Path, init: str) -> Any:
    """The :class:`~hnbench.train.trainer.TrainConfig` of one run."""
    from hnbench.train.trainer import TrainConfig

    a = run.arm
    return TrainConfig(
        model="hnbench-tiny", pretrained=init, dataset="synthdense", protocol="train",
        dataset_options=sizes.dataset_options(), loss=a.loss, gamma=a.gamma if a.loss == "hn" else 0.5,  # InfoNCE ignores γ (the default 0.5)
        epochs=sizes.epochs, batch_size=sizes.batch_size, lr=sizes.lr, weight_decay=0.1,
        warmup_steps=sizes.warmup_steps, seed=run.seed, data_fraction=a.data_fraction,
        amp=a.precision != "fp32", amp_dtype="bf16",
        init_logit_scale=100.0 if a.scale == "fixed100" else None, train_logit_scale=a.scale == "learned",
        group_by=FAMILY_PATTERN if a.batching == "family" else None, diag_every=sizes.diag_every,
        log_every=5, num_workers=0, output=str(out / "runs" / run.name))


# -- statistics ---------------------------------------------------------------------------------------

def t_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """Mean and Student-t interval across seeds: x̄ ± t_{(1+level)/2, n−1} · s/√n (s: sample sd).

    One value gives (x, nan, nan): no spread can be estimated from one seed."""
    from scipy import stats

    n = len(values)
    mean = statistics.fmean(values)
    if n < 2:
        return mean, math.nan, math.nan
    half = stats.t.ppf((1 + level) / 2, n - 1) * statistics.stdev(values) / math.sqrt(n)
    return mean, mean - half, mean + half


def pooled_mcnemar(discordant: Sequence[tuple[int, int]]) -> dict[str, Any]:
    """Exact McNemar over (seed, query) pairs pooled across seeds: b = Σ arm-right-baseline-wrong, c = Σ the
    reverse, p from :func:`hnbench.results.significance.mcnemar_exact` (1.0 when there is no discordant pair)."""
    from hnbench.results.significance import mcnemar_exact

    b = sum(x for x, _ in discordant)
    c = sum(y for _, y in discordant)
    return {"a_only": b, "b_only": c, "p_value": mcnemar_exact(b, c)}


def aggregate(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per arm: seeds, R@1 both ways (mean and 95% t-interval), saturation shares (means over seeds)."""
    by_arm: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_arm.setdefault(r["arm"], []).append(r)
    out = []
    for arm in [a for a in ARMS if a in by_arm] + sorted(set(by_arm) - set(ARMS)):
        rs = sorted(by_arm[arm], key=lambda r: r["seed"])
        rec: dict[str, Any] = {"arm": arm, "seeds": [r["seed"] for r in rs]}
        for d in DIRECTIONS:
            mean, lo, hi = t_interval([r[f"{d}_R@1"] for r in rs])
            rec[f"{d}_R@1"] = {"mean": mean, "ci95": [lo, hi], "per_seed": [r[f"{d}_R@1"] for r in rs]}
        for key in ("share_infonce_grad_zero", "share_infonce_zero_bf16", "share_infonce_zero_fp16",
                    "share_inactive_infonce", "share_inactive_train"):
            vals = [r[key] for r in rs if r.get(key) is not None]
            rec[key] = statistics.fmean(vals) if vals else None
        out.append(rec)
    return out


def baseline_of(arm: Arm) -> str | None:
    """The InfoNCE arm with the same precision, batching, scale and data: what an HN arm is paired with."""
    if arm.loss == "infonce":
        return None
    key = (arm.precision, arm.batching, arm.scale, arm.data_fraction)
    match = [a.name for a in ARMS.values() if a.loss == "infonce" and (a.precision, a.batching, a.scale, a.data_fraction) == key]
    return match[0] if match else None


def paired_vs_baseline(per_seed: dict[str, dict[int, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each HN arm against its InfoNCE twin (:func:`baseline_of`) over the seeds both have: the seed-level
    paired R@1 difference (mean, 95% t-interval over seeds) and the pooled exact McNemar, per direction.

    ``per_seed[arm][seed][direction]`` = {"R@1": %, "a_only": n, "b_only": n, "p": p} where a = the arm and
    b = its baseline, from the per-seed comparison of the two result files."""
    out = []
    for arm, seeds in per_seed.items():
        baseline = baseline_of(ARMS[arm]) if arm in ARMS else None
        if baseline is None or baseline not in per_seed:
            continue
        common = sorted(set(seeds) & set(per_seed[baseline]))
        if not common:
            continue
        rec: dict[str, Any] = {"arm": arm, "baseline": baseline, "seeds": common}
        for d in DIRECTIONS:
            diffs = [seeds[s][d]["R@1"] - per_seed[baseline][s][d]["R@1"] for s in common]
            mean, lo, hi = t_interval(diffs)
            rec[d] = {"diff_mean": mean, "diff_ci95": [lo, hi], "per_seed_diff": diffs,
                      "per_seed_p": " ".join(f"{seeds[s][d]['p']:.2g}" for s in common if "p" in seeds[s][d]),
                      **pooled_mcnemar([(seeds[s][d]["a_only"], seeds[s][d]["b_only"]) for s in common])}
        out.append(rec)
    return out


# -- running ------------------------------------------------------------------------------------------

def result_dir(out: Path, run: Run) -> Path:
    return out / "results" / run.name


def execute(run: Run, sizes: StudySizes, out: Path, init: str, *, progress: bool) -> Path:
    """Train (or resume, or skip) one run and score its checkpoint; returns the result file."""
    from hnbench.evaluation.evaluate import evaluate
    from hnbench.train import train

    done = sorted(result_dir(out, run).glob("*.json"))
    if done:
        return done[0]
    cfg = train_config(run, sizes, out, init)
    run_dir = Path(cfg.output)
    ckpt = run_dir / "checkpoint.safetensors"
    if not ckpt.is_file():
        if (run_dir / "last").is_dir():
            cfg = replace(cfg, resume=str(run_dir))
        elif run_dir.is_dir() and any(run_dir.iterdir()):  # this study's own run, killed before its first state
            cfg = replace(cfg, overwrite=True)
        train(cfg, progress=progress)
    res = evaluate("hnbench-tiny", "synthdense", pretrained=str(ckpt), protocol="test",
                   dataset_options=sizes.dataset_options(),
                   output_dir=result_dir(out, run), progress=progress)
    return Path(res.path)


def run_record(run: Run, out: Path, result_path: Path) -> dict[str, Any]:
    """One row per run: final R@1 both ways and the run's saturation shares over all of training."""
    from hnbench.results.record import read_result
    from hnbench.train.report import read_run

    res = read_result(result_path)
    tr = read_run(out / "runs" / run.name)
    steps, epochs = tr["steps"], tr["epochs"]

    def share(key: str, negate: bool = False) -> float | None:
        vals = [bool(r[key]) != negate for r in steps if key in r]
        return sum(vals) / len(vals) if vals else None

    n_batches = sum(e.get("n_batches") or 0 for e in epochs)
    inactive_train = (sum((1 - (e.get("share_active_train") or 0)) * (e.get("n_batches") or 0) for e in epochs)
                      / n_batches) if n_batches else None
    return {"arm": run.arm.name, "seed": run.seed, "result": str(result_path),
            "t2i_R@1": res.metrics["t2i"]["R@1"], "i2t_R@1": res.metrics["i2t"]["R@1"],
            "n_measurements": len(steps), "share_infonce_grad_zero": share("infonce_grad_zero"),
            "share_infonce_zero_bf16": share("infonce_zero_bf16"), "share_infonce_zero_fp16": share("infonce_zero_fp16"),
            "share_inactive_infonce": share("active_infonce", negate=True), "share_inactive_train": inactive_train,
            "logit_scale_end": steps[-1]["logit_scale"] if steps else None}


def compare_runs(finished: dict[Run, Path], out: Path | None = None) -> dict[str, dict[int, dict[str, Any]]]:
    """``hnbench compare`` of every HN run against its InfoNCE twin of the same seed (R@1, paired bootstrap,
    exact McNemar), as ``per_seed[arm][seed][direction]`` for :func:`paired_vs_baseline`; the comparisons'
    markdown/JSON go to ``OUT/compare/<arm>__s<seed>/``. Baselines appear with their own R@1."""
    from hnbench.results.compare import compare

    by_key = {(r.arm.name, r.seed): p for r, p in finished.items()}
    per_seed: dict[str, dict[int, dict[str, Any]]] = {}
    for run, path in finished.items():
        base = baseline_of(run.arm)
        if base is None:
            from hnbench.results.record import read_result

            m = read_result(path).metrics
            per_seed.setdefault(run.arm.name, {})[run.seed] = {d: {"R@1": m[d]["R@1"]} for d in DIRECTIONS}
            continue
        if (base, run.seed) not in by_key:
            continue
        cmp = compare([by_key[(base, run.seed)], path], ks=[1], seed=run.seed,
                      output_dir=None if out is None else out / "compare" / run.name)
        per_seed.setdefault(run.arm.name, {})[run.seed] = {
            r["direction"]: {"R@1": r["r_model"], "a_only": r["n_model_only"], "b_only": r["n_baseline_only"],
                             "p": r["p_mcnemar"]} for r in cmp.rows}
    return per_seed


# -- where saturation starts --------------------------------------------------------------------------

PROBE_DTYPES = ("fp32", "bf16", "fp16")
PROBE_SCALES = (10.0, 20.0, 30.0, 50.0, 70.0, 100.0, 150.0, 200.0, 300.0, 500.0)


def batch_gap(v: Any, t: Any) -> float:
    """The smallest margin of the batch, in cosine units: min over both directions' rows of
    (positive similarity − hardest negative similarity). InfoNCE's gradient can only vanish when
    every row is saturated, so s·gap of this row decides it."""
    import torch

    sim = v @ t.T
    off = sim - torch.diag(torch.full((sim.shape[0],), float("inf")))
    gaps = torch.cat([sim.diagonal() - off.amax(dim=1), sim.diagonal() - off.amax(dim=0)])
    return float(gaps.min())


def saturation_probe(checkpoint: str, sizes: StudySizes, seed: int, *, progress: bool = False) -> list[dict[str, Any]]:
    """On ``probe_batches`` random train batches of the model's real (fp32) features: the batch's gap,
    and for each scale s and logits precision whether ∇InfoNCE is exactly zero (as the trainer's
    diagnostics define it, :func:`hnbench.train.diagnostics.infonce_zero_in`)."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    from tqdm.auto import tqdm

    from hnbench.data import load_dataset
    from hnbench.models import load_model
    from hnbench.train.diagnostics import infonce_zero_in

    enc = load_model("hnbench-tiny", checkpoint)
    ds = load_dataset("synthdense", protocol="train", **sizes.dataset_options())
    tokens = enc.tokenize(ds.captions).tokens
    first_caption = [int(c[0]) for c in ds.image_captions()]
    rng = np.random.default_rng([seed, 16])
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    rows = []
    enc.model.eval()
    for b in tqdm(range(sizes.probe_batches), desc="saturation probe", disable=not progress):
        idx = rng.choice(ds.n_images, sizes.batch_size, replace=False)
        pixels = torch.stack([enc.image_transform(ds.images.open(int(i))) for i in idx])
        with torch.no_grad():
            v = F.normalize(enc.model.encode_image(pixels).float(), dim=-1)
            t = F.normalize(enc.model.encode_text(tokens[[first_caption[int(i)] for i in idx]]).float(), dim=-1)
        gap = batch_gap(v, t)
        for s in PROBE_SCALES:
            for name in PROBE_DTYPES:
                zero = infonce_zero_in(v, t, torch.tensor(s), dtypes[name])
                rows.append({"seed": seed, "batch": b, "gap": gap, "scale": s, "s_gap": s * gap,
                             "dtype": name, "grad_zero": bool(zero)})
    return rows


def saturation_onset(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per logits precision: the largest s·gap at which a measured ∇InfoNCE was non-zero and the smallest
    at which it was exactly zero — the regime starts between them (None where never/always seen)."""
    out = {}
    for name in PROBE_DTYPES:
        rs = [r for r in rows if r["dtype"] == name]
        zero = [r["s_gap"] for r in rs if r["grad_zero"]]
        live = [r["s_gap"] for r in rs if not r["grad_zero"]]
        out[name] = {"max_s_gap_nonzero": max(live) if live else None, "min_s_gap_zero": min(zero) if zero else None,
                     "share_zero": len(zero) / len(rs) if rs else None,
                     "share_zero_at_s100": _share_at(rs, 100.0)}
    return out


def _share_at(rows: Sequence[dict[str, Any]], scale: float) -> float | None:
    at = [r["grad_zero"] for r in rows if r["scale"] == scale]
    return sum(at) / len(at) if at else None


# -- report -------------------------------------------------------------------------------------------

def _fmt_ci(rec: dict[str, Any]) -> str:
    lo, hi = rec["ci95"]
    return f"{rec['mean']:.2f}" + ("" if math.isnan(lo) else f" [{lo:.2f}, {hi:.2f}]")


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def render(arms: Sequence[dict[str, Any]], paired: Sequence[dict[str, Any]], onset: dict[str, Any] | None,
           sizes: StudySizes, start: dict[str, float] | None = None) -> str:
    """The study's markdown: arms table, paired comparisons against InfoNCE, saturation onset, verdicts."""
    from tabulate import tabulate

    rows = [[a["arm"], ARMS[a["arm"]].describe() if a["arm"] in ARMS else "", len(a["seeds"]),
             _fmt_ci(a["t2i_R@1"]), _fmt_ci(a["i2t_R@1"]), _pct(a["share_infonce_grad_zero"]),
             _pct(a["share_infonce_zero_bf16"]), _pct(a["share_infonce_zero_fp16"]),
             _pct(a["share_inactive_infonce"]), _pct(a["share_inactive_train"])] for a in arms]
    if start:
        rows.append(["start", "the start model, not fine-tuned", "", f"{start['t2i_R@1']:.2f}", f"{start['i2t_R@1']:.2f}",
                     "", "", "", "", ""])
    text = ("### Arms\n\nR@1 in %: mean over seeds [95% Student-t interval across seeds]. Shares are over all "
            f"diagnostics measurements of training (every {sizes.diag_every} steps): ∇InfoNCE exactly 0 with fp32 "
            "logits (what the run trains with), and what-if with bf16 / fp16 logits; inactive = InfoNCE loss "
            "below the activity threshold on the measured batch, and share of all training batches whose own "
            "training loss was below it.\n\n")
    text += tabulate(rows, headers=["arm", "setting", "seeds", "t2i R@1", "i2t R@1", "∇NCE=0 fp32", "… bf16",
                                    "… fp16", "inactive (NCE)", "inactive (train)"], tablefmt="github") + "\n"
    if paired:
        prow = []
        for p in paired:
            for d in DIRECTIONS:
                r = p[d]
                lo, hi = r["diff_ci95"]
                prow.append([p["arm"], p["baseline"], d, len(p["seeds"]), f"{r['diff_mean']:+.2f}"
                             + ("" if math.isnan(lo) else f" [{lo:+.2f}, {hi:+.2f}]"),
                             " ".join(f"{x:+.1f}" for x in r["per_seed_diff"]), r["a_only"], r["b_only"],
                             f"{r['p_value']:.3g}", r.get("per_seed_p", "")])
        text += ("\n### Paired against InfoNCE, same seeds\n\nEach HN arm against the InfoNCE arm of the same "
                 "precision, batching and scale. Δ R@1 = arm − InfoNCE in points: mean over "
                 "seeds [95% t-interval across seeds]; per-seed Δ; discordant queries pooled over seeds (arm right "
                 "and InfoNCE wrong / the reverse) with the exact McNemar p-value of the pooled counts; per-seed "
                 "McNemar p-values from `hnbench compare`.\n\n")
        text += tabulate(prow, headers=["arm", "vs", "dir", "seeds", "Δ R@1", "per seed", "arm only", "InfoNCE only",
                                        "pooled p", "per-seed p"], tablefmt="github") + "\n"
    if onset:
        orow = [[d, _num(o["max_s_gap_nonzero"]), _num(o["min_s_gap_zero"]), _pct(o["share_zero"]),
                 _pct(o["share_zero_at_s100"])] for d, o in onset.items()]
        text += ("\n### Where InfoNCE saturates (real features of the InfoNCE checkpoints)\n\nEach probe batch at "
                 f"B = {sizes.batch_size}: its smallest margin (gap, cosine units) times s, swept over s ∈ "
                 f"{list(PROBE_SCALES)}; is ∇InfoNCE exactly 0 when the logits are in this precision?\n\n")
        text += tabulate(orow, headers=["logits", "largest s·gap with ∇ ≠ 0", "smallest s·gap with ∇ = 0",
                                        "∇ = 0 over the sweep", "∇ = 0 at s = 100"], tablefmt="github") + "\n"
    return text + "\n" + verdicts(arms, paired, onset, start)


def _diff(r: dict[str, Any]) -> str:
    """``+Δ [lo, hi] (excludes 0)`` of a paired record; one seed has no interval."""
    lo, hi = r["diff_ci95"]
    if math.isnan(lo):
        return f"{r['diff_mean']:+.2f} (one seed: no interval)"
    return f"{r['diff_mean']:+.2f} [{lo:+.2f}, {hi:+.2f}] ({'excludes' if lo > 0 or hi < 0 else 'includes'} 0)"


def _num(x: float | None) -> str:
    return "–" if x is None else f"{x:.1f}"


def verdicts(arms: Sequence[dict[str, Any]], paired: Sequence[dict[str, Any]], onset: dict[str, Any] | None,
             start: dict[str, float] | None = None) -> str:
    """Plain statements of which of the paper's claims hold here, computed from the numbers above."""
    by = {a["arm"]: a for a in arms}
    lines = ["### The paper's claims on synthdense"]
    base = by.get(BASELINE)
    if base and base["share_infonce_grad_zero"] is not None:
        z = base["share_infonce_grad_zero"]
        lines.append(f"- *InfoNCE's gradient is exactly zero on about half the batches at micro-batch 16*: measured "
                     f"{_pct(z)} of InfoNCE-run batches in fp32 ({_pct(base['share_infonce_zero_bf16'])} if the logits "
                     f"were bf16, {_pct(base['share_infonce_zero_fp16'])} if fp16) — "
                     + ("holds" if z >= 0.4 else "does not hold in fp32")
                     + ("; it holds only for fp16 logits." if z < 0.4 and (base["share_infonce_zero_fp16"] or 0) >= 0.4
                        else "."))
    twins = [(a, by.get(baseline_of(ARMS[a["arm"]]) or "")) for a in arms if a["arm"] in ARMS and ARMS[a["arm"]].loss == "hn"]
    twins = [(a, b) for a, b in twins if b and a["share_inactive_train"] is not None and b["share_inactive_train"] is not None]
    if twins:
        lines.append("- *The HN term keeps batches active*: share of training batches whose own training loss fell "
                     "below the activity threshold, HN arm vs its InfoNCE twin: "
                     + "; ".join(f"{a['arm']} {_pct(a['share_inactive_train'])} vs {b['arm']} {_pct(b['share_inactive_train'])}"
                                 for a, b in twins) + ".")
    main = [p for p in paired if p["arm"] in ("hn-g0.25", "hn-g0.5", "hn-g1")]
    if main:
        best = max(main, key=lambda p: p["t2i"]["diff_mean"] + p["i2t"]["diff_mean"])
        parts = []
        for d in DIRECTIONS:
            r = best[d]
            lo, hi = r["diff_ci95"]
            parts.append(f"{d} {_diff(r)} (pooled McNemar p = {r['p_value']:.3g})")
        lines.append(f"- *HN-CLIP gains +1 to +8 R@1*: the best main arm ({best['arm']}) vs InfoNCE on the same "
                     f"{len(best['seeds'])} seeds: " + "; ".join(parts) + ".")
    for p in paired:
        if p["arm"] in ("hn-g0.25", "hn-g0.5", "hn-g1"):
            continue
        r = {d: p[d] for d in DIRECTIONS}
        lines.append(f"- {ARMS[p['arm']].doc if p['arm'] in ARMS else p['arm']}: {p['arm']} vs {p['baseline']}: "
                     + "; ".join(f"{d} {_diff(r[d])} (pooled p = {r[d]['p_value']:.3g})" for d in DIRECTIONS) + ".")
    if start and base:
        best = max((a for a in arms if a["arm"] in ARMS and ARMS[a["arm"]].loss == "hn"),
                   key=lambda a: a["t2i_R@1"]["mean"] + a["i2t_R@1"]["mean"], default=None)
        lines.append(f"- *Against the start model* (t2i {start['t2i_R@1']:.2f}, i2t {start['i2t_R@1']:.2f}): InfoNCE "
                     + ", ".join(f"{d} {base[f'{d}_R@1']['mean'] - start[f'{d}_R@1']:+.2f}" for d in DIRECTIONS)
                     + (f"; the best HN arm ({best['arm']}) " + ", ".join(
                         f"{d} {best[f'{d}_R@1']['mean'] - start[f'{d}_R@1']:+.2f}" for d in DIRECTIONS) if best else "")
                     + " (means over seeds).")
    if onset:
        lines.append("- *Where saturation starts* (probe batches of the InfoNCE checkpoints): " + "; ".join(
            f"{d} logits: ∇ = 0 first seen at s·gap {_num(o['min_s_gap_zero'])}, ∇ ≠ 0 last seen at "
            f"{_num(o['max_s_gap_nonzero'])}, ∇ = 0 in {_pct(o['share_zero_at_s100'])} of batches at s = 100"
            for d, o in onset.items()) + " (–: never seen).")
    return "\n".join(lines) + "\n"


# -- figures ------------------------------------------------------------------------------------------

def plot_arms(arms: Sequence[dict[str, Any]], path: Path) -> Path:
    """R@1 per arm and direction: seeds as dots, mean with its 95% t-interval as a bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 0.45 * len(arms) + 1.6), sharey=True)
    for ax, d in zip(axes, DIRECTIONS):
        for y, a in enumerate(arms):
            r = a[f"{d}_R@1"]
            lo, hi = r["ci95"]
            if not math.isnan(lo):
                ax.plot([lo, hi], [y, y], color="tab:blue", lw=3, alpha=0.5)
            ax.plot(r["per_seed"], [y] * len(r["per_seed"]), "o", color="gray", ms=3)
            ax.plot([r["mean"]], [y], "|", color="black", ms=14, mew=2)
        ax.set_title(f"{d} R@1 (%): seeds, mean, 95% t-interval")
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(range(len(arms)), [a["arm"] for a in arms])
    axes[0].invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_saturation(rows: Sequence[dict[str, Any]], path: Path) -> Path:
    """Share of probe batches with ∇InfoNCE exactly 0 against s·gap, one line per logits precision."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(7, 4))
    s_gap = np.array([r["s_gap"] for r in rows])
    edges = np.quantile(s_gap, np.linspace(0, 1, 21)) if len(s_gap) else np.array([0, 1])
    edges = np.unique(edges)
    for name in PROBE_DTYPES:
        rs = [r for r in rows if r["dtype"] == name]
        x = np.array([r["s_gap"] for r in rs])
        z = np.array([r["grad_zero"] for r in rs], dtype=float)
        which = np.clip(np.digitize(x, edges[1:-1]), 0, len(edges) - 2)
        mids = [(edges[i] + edges[i + 1]) / 2 for i in range(len(edges) - 1) if (which == i).any()]
        share = [z[which == i].mean() for i in range(len(edges) - 1) if (which == i).any()]
        ax.plot(mids, share, "o-", label=f"{name} logits")
    ax.set_xlabel("s · gap (scale × the batch's smallest positive–hardest-negative margin)")
    ax.set_ylabel("share of batches with ∇InfoNCE = 0")
    ax.set_xscale("symlog")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# -- command ------------------------------------------------------------------------------------------

def _size_flags(p: argparse.ArgumentParser) -> None:
    """One flag per :class:`StudySizes` field (declared once there)."""
    from dataclasses import fields

    for f in fields(StudySizes):
        p.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=f.default,
                       help=f"(default {f.default})")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output", default="runs/hn-study")
    p.add_argument("--arms", nargs="+", default=list(ARMS), metavar="ARM", help=f"default: all of {list(ARMS)}")
    p.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1 per arm (default 5)")
    p.add_argument("--init", help="start checkpoint (default: the bundled hnbench-tiny/synthdense weights)")
    p.add_argument("--report-only", action="store_true", help="aggregate the finished runs; train nothing")
    p.add_argument("--no-probe", action="store_true", help="skip the saturation probe")
    p.add_argument("--quiet", action="store_true")
    _size_flags(p)
    args = p.parse_args(argv)
    from dataclasses import fields

    sizes = StudySizes(**{f.name: getattr(args, f.name) for f in fields(StudySizes)})
    runs = plan(args.arms, args.seeds)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    init = args.init or "synthdense"
    manifest = {"sizes": asdict(sizes), "arms": {a: asdict(ARMS[a]) for a in args.arms}, "seeds": args.seeds,
                "init": init}
    prior = out / "study_plan.json"
    if prior.is_file() and json.loads(prior.read_text())["sizes"] != manifest["sizes"]:
        raise SystemExit(f"{out} holds a study with other sizes ({prior}); use another --output")
    prior.write_text(json.dumps(manifest, indent=2) + "\n")
    t0 = time.perf_counter()
    finished: dict[Run, Path] = {}
    from tqdm.auto import tqdm

    for run in tqdm(runs, desc="study runs", disable=args.quiet):
        if args.report_only:
            found = sorted(result_dir(out, run).glob("*.json"))
            if found:
                finished[run] = found[0]
            continue
        finished[run] = execute(run, sizes, out, init, progress=not args.quiet)
    rows = [run_record(r, out, path) for r, path in finished.items()]
    start = score_start(init, sizes, out, progress=not args.quiet)
    arms = aggregate(rows)
    per_seed = compare_runs(finished, out)
    paired = paired_vs_baseline(per_seed)
    probe_rows: list[dict[str, Any]] = []
    if not args.no_probe:
        probe_rows = probe_all(finished, sizes, out, progress=not args.quiet)
    onset = saturation_onset(probe_rows) if probe_rows else None
    text = render(arms, paired, onset, sizes, start)
    figs = [plot_arms(arms, out / "study_r1.png")] if arms else []
    if probe_rows:
        figs.append(plot_saturation(probe_rows, out / "study_saturation.png"))
    summary = {"plan": manifest, "runs": rows, "arms": arms, "start": start, "paired": paired, "onset": onset,
               "seconds": round(time.perf_counter() - t0, 1), "figures": [str(f) for f in figs]}
    (out / "study.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "study.md").write_text(text)
    print(text)
    print(f"wrote {out / 'study.json'}, {out / 'study.md'}" + "".join(f", {f}" for f in figs))
    return 0


def score_start(init: str, sizes: StudySizes, out: Path, *, progress: bool) -> dict[str, float]:
    """R@1 both ways of the start model (no fine-tuning) on the same test split, a result file in ``OUT/results/start/``."""
    from hnbench.evaluation.evaluate import evaluate
    from hnbench.results.record import read_result

    found = sorted((out / "results" / "start").glob("*.json"))
    res = read_result(found[0]) if found else evaluate(
        "hnbench-tiny", "synthdense", pretrained=init, protocol="test", dataset_options=sizes.dataset_options(),
        output_dir=out / "results" / "start", progress=progress)
    return {f"{d}_R@1": res.metrics[d]["R@1"] for d in DIRECTIONS}


def probe_all(finished: dict[Run, Path], sizes: StudySizes, out: Path, *, progress: bool) -> list[dict[str, Any]]:
    """The saturation probe on each finished InfoNCE-baseline checkpoint, cached in ``OUT/probe/``."""
    rows = []
    for run in finished:
        if run.arm.name != BASELINE:
            continue
        cache = out / "probe" / f"{run.name}-{sizes.probe_batches}.json"
        if cache.is_file():
            rows += json.loads(cache.read_text())
            continue
        got = saturation_probe(str(out / "runs" / run.name / "checkpoint.safetensors"), sizes, run.seed,
                               progress=progress)
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(got) + "\n")
        rows += got
    return rows


if __name__ == "__main__":
    sys.exit(main())
