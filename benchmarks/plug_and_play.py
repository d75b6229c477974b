"""The HN-CLIP paper's plug-and-play claim on synthdense: each fine-tuning framework with InfoNCE and with L_HN.

A *framework* is a training objective (``hnbench train --objective``) with a CPU-sized recipe
``tiny-synthdense-<name>`` (``clip``: the recipe ``tiny-synthdense-hn``). For each framework, each
global loss (``--loss infonce`` / ``--loss hn``) and each seed, the study fine-tunes the bundled
``hnbench-tiny``/``synthdense`` model with the framework's published recipe through hnbench's own
trainer (:func:`hnbench.train.trainer.train`, what ``hnbench train --recipe R --loss L --seed S`` runs),
scores the final checkpoint on synthdense test with :func:`hnbench.evaluation.evaluate.evaluate` (what
``hnbench eval`` runs) into the results folder, and compares L_HN with InfoNCE on the same seeds with
:func:`hnbench.results.compare.compare` (``hnbench compare``: paired bootstrap interval, exact McNemar).
Each checkpoint is also scored on synthdense's compositional protocol (``hnbench eval --task choice --dataset
synthdense --protocol compositional``: a true and a near-twin false caption per test image and kind: swapped
attributes, a swapped relation, a replaced object, reordered words; the macro accuracy over the kinds), compared
the same way: per seed the accuracy Δ and the exact McNemar on the items one loss chose right and the other wrong,
over seeds the mean Δ with its Student-t interval and the McNemar of the discordant items pooled over seeds.

    python benchmarks/plug_and_play.py --output runs/plug-and-play                  # every framework, 3 seeds
    python benchmarks/plug_and_play.py --output runs/plug-and-play --frameworks goal,structxlip
    python benchmarks/plug_and_play.py --output runs/plug-and-play --report-only    # re-tabulate, train nothing

A run is (framework, loss, seed), named ``<framework>__<loss>__s<seed>``. It is *finished* when the
results folder holds the result file ``hnbench eval`` wrote for its checkpoint (the JSON is written
last, and its per-query file must match it); a finished run is never redone, even without its training
folder, so a rerun (another machine, more frameworks, more seeds) does only the missing runs. A finished run
without its compositional result has its checkpoint scored on it where the checkpoint is still in
``OUT/runs/<name>/`` (nothing is trained); without the checkpoint it is listed as not scored. A run
without a result continues from what hnbench wrote in ``OUT/runs/<name>/``: a finished training
(``train_config.json``) is only scored, a resumable state (``last/``) resumes, anything else the run
wrote is replaced (``--overwrite`` removes only what the run's manifest lists). A framework whose
recipe or objective does not exist (yet), or whose run hnbench refuses before training (a side input it
lacks, say), is reported and skipped; the others still run.

The table (framework rows × T2I / I2T R@1 for InfoNCE, L_HN and Δ, like the paper's Table 2, and the
compositional accuracy's InfoNCE, L_HN and Δ beside it, with Δ per kind) is computed from the stored results only and written between markers into ``benchmarks/README.md``
(rewritten on every run), with ``summary.json`` and ``table.md`` in ``benchmarks/plug_and_play/``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hn_study import pooled_mcnemar, t_interval  # noqa: E402  (the study's statistics, declared once there)

from hnbench.errors import ConfigError, HnbenchError  # noqa: E402
from hnbench.settings import check_declared, option  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DIRECTIONS = ("t2i", "i2t")
LOSSES = ("infonce", "hn")  # the baseline first: every comparison is hn against infonce of the same seed
# The paper's four frameworks, in its table's order: the objective name → its tiny synthdense recipe.
FRAMEWORKS = {"clip": "tiny-synthdense-hn", "finelip": "tiny-synthdense-finelip", "goal": "tiny-synthdense-goal",
              "structxlip": "tiny-synthdense-structxlip"}
BEGIN = "<!-- plug-and-play table: written by benchmarks/plug_and_play.py from the stored results; do not edit -->"
END = "<!-- end of the plug-and-play table -->"
START = "start"  # the run name of the start model's result (the recipes' weights, not fine-tuned)
# The compositional column: synthdense's compositional protocol scored by the option-choice task (hnbench eval
# --task choice --dataset synthdense --protocol compositional); its per-kind accuracies are the ``by kind`` groups.
COMPOSITIONAL = {"dataset": "synthdense", "protocol": "compositional", "task": "choice"}


def recipe_of(framework: str) -> str:
    return FRAMEWORKS.get(framework, f"tiny-synthdense-{framework}")


@dataclass(frozen=True)
class StudySettings:
    """What the study's flags set (each one flag, made from its field)."""

    output: str = option(help="working folder: the training runs (OUT/runs/NAME/) and the comparisons (OUT/compare/)")
    frameworks: list[str] = option(default_factory=lambda: list(FRAMEWORKS), sep=",", metavar="F1,F2",
                                   help=f"frameworks (objectives with a tiny-synthdense recipe), comma-separated "
                                        f"(default: {','.join(FRAMEWORKS)}; one without a recipe yet is skipped)")
    seeds: int = option(3, minimum=1, help="seeds 0..N-1 per framework and loss (default 3)")
    epochs: int | None = option(None, minimum=1, help="epochs of every run (default: each recipe's own)")
    train_families: int | None = option(None, minimum=1,
                                        help="synthdense train families of every run (default: each recipe's own)")
    test_families: int | None = option(None, minimum=1,
                                       help="synthdense test families scored, also by the recipes' per-epoch "
                                            "evaluations (default: synthdense's own test split, 100 = 500 pairs)")
    results: str = option("leaderboards/results/synthdense-plug-and-play",
                          help="where every result file goes (hnbench eval's files; default "
                               "leaderboards/results/synthdense-plug-and-play)")
    report: str = option("benchmarks/plug_and_play", help="where summary.json, table.md and each run's "
                                                          "train_config.json copy go (default benchmarks/plug_and_play)")
    readme: str = option("benchmarks/README.md", help="the Markdown file whose marked block gets the table "
                                                      "(default benchmarks/README.md)")
    report_only: bool = option(False, help="tabulate the stored results; train and score nothing")
    quiet: bool = option(False, help="no progress bars")

    def identity(self) -> dict[str, Any]:
        """What changes the numbers beyond (framework, loss, seed): results made otherwise are another study."""
        return {"epochs": self.epochs, "train_families": self.train_families, "test_families": self.test_families}


@dataclass(frozen=True)
class Run:
    framework: str
    loss: str
    seed: int

    @property
    def name(self) -> str:
        return f"{self.framework}__{self.loss}__s{self.seed}"


def parse_name(name: str) -> Run | None:
    """The run a folder name stands for (``clip__hn__s2``), or None."""
    parts = name.split("__")
    if len(parts) != 3 or parts[1] not in LOSSES or not parts[2].startswith("s") or not parts[2][1:].isdigit():
        return None
    return Run(parts[0], parts[1], int(parts[2][1:]))


def available(framework: str) -> str | None:
    """Why ``framework`` cannot run here (None: it can): its objective is not registered, or its recipe is
    neither a built-in one nor a file."""
    from hnbench.registry import OBJECTIVES, RECIPES

    if framework not in OBJECTIVES:
        return f"objective {framework!r} is not in this hnbench yet"
    if recipe_of(framework) not in RECIPES and not Path(recipe_of(framework)).is_file():
        return f"no recipe {recipe_of(framework)} yet"
    return None


def check(s: StudySettings) -> None:
    """Every refusal before anything is trained, loaded or written."""
    from hnbench.registry import OBJECTIVES

    check_declared(s)
    known = list(dict.fromkeys([*FRAMEWORKS, *OBJECTIVES.names()]))
    unknown = [f for f in s.frameworks if f not in known]
    if not s.frameworks:
        raise ConfigError(f"--frameworks: no framework given; known: {', '.join(known)}")
    if unknown:
        raise ConfigError(f"--frameworks: unknown framework(s) {', '.join(unknown)}; known: {', '.join(known)}")
    for flag, path in (("--results", s.results), ("--report", s.report), ("--output", s.output)):
        if Path(path).exists() and not Path(path).is_dir():
            raise ConfigError(f"{flag} {path}: is a file, not a folder")
    readme = Path(s.readme)
    text = readme.read_text(encoding="utf-8") if readme.is_file() else ""
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise ConfigError(f"--readme {readme}: needs the table's two marker lines, once each, in this order: "
                          f"{BEGIN!r} and {END!r}")
    plan = Path(s.report) / "plan.json"
    if plan.is_file():
        prior = json.loads(plan.read_text())
        if prior != s.identity():
            raise ConfigError(f"{plan}: the results there were made with {prior}, not {s.identity()}; use other "
                              "--results and --report folders for another study")


# -- the stored results -----------------------------------------------------------------------------

def stored(results: Path, compositional: bool = False) -> dict[str, Path]:
    """Run name → result file in ``results`` (the newest per run): a run's result names its checkpoint
    ``…/<run name>/checkpoint.safetensors``; the start model's names no file. ``compositional``: the
    option-choice results (their task stores per-item outcomes), else the retrieval ones. A result whose JSON does
    not read or does not match the file beside it is refused (:class:`~hnbench.errors.HnbenchError`)."""
    from hnbench.io import is_record
    from hnbench.results.record import read_beside, read_result

    found: dict[str, tuple[str, Path]] = {}
    for path in sorted(results.glob("*.json")) if results.is_dir() else []:
        if is_record(path):
            continue
        # evaluate writes the JSON last (a killed one leaves no JSON): one that does not read, or does not match
        # its per-query file, was damaged or edited after the fact, and is refused (one line) rather than redone
        res = read_result(path)
        read_beside(res)
        if res.task_spec().per_item != compositional:
            continue
        weights = str(res.model.get("pretrained") or "")
        name = Path(weights).parent.name if weights.endswith("checkpoint.safetensors") else START
        if name != START and parse_name(name) is None:
            continue
        created = str(getattr(res, "created", "") or "")
        if name not in found or created >= found[name][0]:
            found[name] = (created, path)
    return {k: v for k, (_, v) in found.items()}


# -- running ----------------------------------------------------------------------------------------

def eval_options(s: StudySettings) -> dict[str, Any]:
    """synthdense's loader options for the test split the study scores (none: its own default)."""
    if s.test_families is None and s.train_families is None:
        return {}
    return {"n_families": {"train": s.train_families or 0, "test": s.test_families or 100}}


def train_config(run: Run, s: StudySettings) -> Any:
    """The run's :class:`~hnbench.train.trainer.TrainConfig`: the framework's recipe with ``--loss``, ``--seed``
    and the study's overrides, built as ``hnbench train --recipe`` builds it."""
    from hnbench.train.config import TrainConfig, load_recipe

    cfg = load_recipe(recipe_of(run.framework))
    cfg.update(loss=run.loss, seed=run.seed, output=str(Path(s.output) / "runs" / run.name))
    if s.epochs is not None:
        cfg["epochs"] = s.epochs
    if s.train_families is not None:
        cfg["dataset_options"] = {**cfg.get("dataset_options", {}), **eval_options(s)}
    if s.test_families is not None and cfg.get("eval_dataset") == "synthdense":
        cfg["eval_dataset_options"] = {**cfg.get("eval_dataset_options", {}), **eval_options(s)}
    return TrainConfig.from_dict(cfg)


def training_done(run_dir: Path) -> Path | None:
    """The checkpoint of a finished training in ``run_dir`` (hnbench writes ``train_config.json`` last and
    lists it in the run manifest), else None."""
    from hnbench.train.rundir import recorded

    meta = run_dir / "train_config.json"
    if "train_config.json" not in recorded(run_dir) or not meta.is_file():
        return None
    try:
        info = json.loads(meta.read_text())
    except ValueError:
        return None
    ckpt = run_dir / str(info.get("checkpoint", ""))
    return ckpt if ckpt.is_file() and not info.get("stopped_early") else None


def execute(run: Run, s: StudySettings, log: Any) -> Path:
    """Train (or resume, or only score) one unfinished run; returns its result file."""
    from dataclasses import replace

    from hnbench.evaluation.evaluate import evaluate
    from hnbench.io import atomic_write_bytes
    from hnbench.train import train

    cfg = train_config(run, s)
    run_dir = Path(cfg.output)
    ckpt = training_done(run_dir)
    if ckpt is None:
        if (run_dir / "last").is_dir():
            how, cfg = "resuming", replace(cfg, resume=str(run_dir))
        elif run_dir.is_dir() and any(run_dir.iterdir()):
            how, cfg = "restarting (no resumable state)", replace(cfg, overwrite=True)
        else:
            how = "training"
        log(f"{run.name}: {how} ({recipe_of(run.framework)}, --loss {run.loss}, --seed {run.seed})")
        ckpt = train(cfg, progress=not s.quiet)
    log(f"{run.name}: scoring {ckpt}")
    runs_copy = Path(s.report) / "runs" / f"{run.name}.json"  # before the result: the result marks the run done
    runs_copy.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(runs_copy, (run_dir / "train_config.json").read_bytes())
    res = evaluate("hnbench-tiny", "synthdense", pretrained=str(ckpt), protocol="test",
                   dataset_options=eval_options(s), output_dir=s.results, progress=not s.quiet)
    assert res.path is not None
    score_compositional("hnbench-tiny", str(ckpt), s)
    return Path(res.path)


def score_compositional(model: str, pretrained: str | None, s: StudySettings) -> Path:
    """One checkpoint (or the start weights) on synthdense's compositional protocol, into the results folder."""
    from hnbench.evaluation.evaluate import evaluate

    res = evaluate(model, COMPOSITIONAL["dataset"], pretrained=pretrained, protocol=COMPOSITIONAL["protocol"],
                   task=COMPOSITIONAL["task"], dataset_options=eval_options(s), output_dir=s.results,
                   progress=not s.quiet)
    assert res.path is not None
    return Path(res.path)


def score_start(s: StudySettings, frameworks: Sequence[str], compositional_only: bool = False) -> Path:
    """The recipes' start weights, not fine-tuned, on the same test split and on the compositional protocol (its
    retrieval result file; ``compositional_only``: only the compositional result, the retrieval one is stored)."""
    from hnbench.evaluation.evaluate import evaluate
    from hnbench.train.config import load_recipe

    starts = {(r.get("model"), r.get("pretrained")) for r in (load_recipe(recipe_of(f)) for f in frameworks)}
    if len(starts) != 1:
        raise ConfigError(f"the recipes start from different weights {sorted(map(str, starts))}: one start row "
                          "cannot stand for them")
    model, pretrained = starts.pop()
    if not compositional_only:
        res = evaluate(str(model), "synthdense", pretrained=pretrained, protocol="test",
                       dataset_options=eval_options(s), output_dir=s.results, progress=not s.quiet)
    comp = score_compositional(str(model), pretrained, s)
    if compositional_only:
        return comp
    assert res.path is not None
    return Path(res.path)


# -- the comparison ---------------------------------------------------------------------------------

def paired(found: dict[str, Path], out: Path | None) -> list[dict[str, Any]]:
    """Per framework with both losses on some seed: ``hnbench compare`` of L_HN against InfoNCE per seed
    (R@1, paired bootstrap 95% interval, exact McNemar), then over the seeds: mean R@1 of each loss, the mean
    Δ with its 95% Student-t interval across seeds, and the exact McNemar of the discordant queries pooled
    over seeds."""
    from hnbench.results.compare import compare

    runs = {r: p for r, p in ((parse_name(n), p) for n, p in found.items()) if r is not None}
    order = [*FRAMEWORKS, *sorted({r.framework for r in runs} - set(FRAMEWORKS))]
    out_rows = []
    for fw in order:
        seeds = sorted({r.seed for r in runs if r.framework == fw and r.loss == LOSSES[1]
                        and Run(fw, LOSSES[0], r.seed) in runs})
        if not seeds:
            continue
        per_seed = []
        for seed in seeds:
            base, hn = runs[Run(fw, LOSSES[0], seed)], runs[Run(fw, LOSSES[1], seed)]
            # the study's own comparison folder: a rerun whose stored results changed (a run redone) replaces it
            cmp = compare([base, hn], ks=[1], seed=seed, output_dir=None if out is None else out / f"{fw}__s{seed}",
                          overwrite=True)
            per_seed.append({"seed": seed, "infonce": base.name, "hn": hn.name,
                             **{r["direction"]: {k: r[k] for k in ("r_baseline", "r_model", "delta", "ci95",
                                                                   "excludes_zero", "p_mcnemar", "n_baseline_only",
                                                                   "n_model_only", "n_queries")}
                                for r in cmp.rows}})
        rec: dict[str, Any] = {"framework": fw, "recipe": recipe_of(fw), "seeds": seeds, "per_seed": per_seed}
        for d in DIRECTIONS:
            rows = [p[d] for p in per_seed]
            mean, lo, hi = t_interval([r["delta"] for r in rows])
            rec[d] = {"infonce": statistics.fmean(r["r_baseline"] for r in rows),
                      "hn": statistics.fmean(r["r_model"] for r in rows), "delta": mean, "delta_ci95": [lo, hi],
                      **pooled_mcnemar([(r["n_model_only"], r["n_baseline_only"]) for r in rows])}
        out_rows.append(rec)
    return out_rows


def _choice_outcomes(path: Path) -> tuple[dict[str, Any], dict[str, bool]]:
    """A compositional result's metrics and each item's outcome of its headline (the per-item file, checked against
    the JSON), by item id."""
    from hnbench.results.record import read_per_item, read_result

    res = read_result(path)
    frame = read_per_item(res)
    m = res.metrics["choice"]
    column = f"right_{m.get('headline') or 'accuracy'}"
    return m, dict(zip(frame["item_id"].astype(str), frame[column].astype(bool)))


def paired_compositional(found: dict[str, Path]) -> list[dict[str, Any]]:
    """Per framework with both losses' compositional results on some seed: per seed the accuracy (the protocol's
    macro over kinds) of each loss, Δ = L_HN − InfoNCE, the items one chose right and the other wrong (paired by
    item id) and their exact McNemar p; over the seeds the mean of each, the mean Δ with its 95% Student-t interval,
    the McNemar of the discordant items pooled over seeds (as the R@1 columns), and the mean Δ per kind."""
    from hnbench.results.significance import mcnemar_exact

    runs = {r: p for r, p in ((parse_name(n), p) for n, p in found.items()) if r is not None}
    order = [*FRAMEWORKS, *sorted({r.framework for r in runs} - set(FRAMEWORKS))]
    out = []
    for fw in order:
        seeds = sorted({r.seed for r in runs if r.framework == fw and r.loss == LOSSES[1]
                        and Run(fw, LOSSES[0], r.seed) in runs})
        if not seeds:
            continue
        per_seed = []
        for seed in seeds:
            (mb, base), (mh, hn) = (_choice_outcomes(runs[Run(fw, loss, seed)]) for loss in LOSSES)
            if set(base) != set(hn):
                raise ConfigError(f"{runs[Run(fw, LOSSES[0], seed)].name} and {runs[Run(fw, LOSSES[1], seed)].name} "
                                  "score different compositional items: not a paired comparison")
            hn_only = sum(hn[i] and not base[i] for i in base)
            base_only = sum(base[i] and not hn[i] for i in base)
            kinds = {k: (mh["by"]["kind"][k]["accuracy"] - mb["by"]["kind"][k]["accuracy"])
                     for k in mb.get("by", {}).get("kind", {}) if k in mh.get("by", {}).get("kind", {})}
            per_seed.append({"seed": seed, "infonce": runs[Run(fw, LOSSES[0], seed)].name,
                             "hn": runs[Run(fw, LOSSES[1], seed)].name, "acc_infonce": mb["accuracy"],
                             "acc_hn": mh["accuracy"], "delta": mh["accuracy"] - mb["accuracy"],
                             "n_hn_only": hn_only, "n_infonce_only": base_only, "n_items": len(base),
                             "p_mcnemar": mcnemar_exact(hn_only, base_only), "kind_delta": kinds})
        mean, lo, hi = t_interval([p["delta"] for p in per_seed])
        kinds = list(dict.fromkeys(k for p in per_seed for k in p["kind_delta"]))
        out.append({"framework": fw, "recipe": recipe_of(fw), "seeds": seeds, "per_seed": per_seed,
                    "infonce": statistics.fmean(p["acc_infonce"] for p in per_seed),
                    "hn": statistics.fmean(p["acc_hn"] for p in per_seed), "delta": mean, "delta_ci95": [lo, hi],
                    "kind_delta": {k: statistics.fmean(p["kind_delta"][k] for p in per_seed if k in p["kind_delta"])
                                   for k in kinds},
                    **pooled_mcnemar([(p["n_hn_only"], p["n_infonce_only"]) for p in per_seed])})
    return out


def _delta(r: dict[str, Any]) -> str:
    lo, hi = r["delta_ci95"]
    return f"{r['delta']:+.2f}" + ("" if math.isnan(lo) else f" [{lo:+.2f}, {hi:+.2f}]")


def _verdict(r: dict[str, Any]) -> str:
    lo, hi = r["delta_ci95"]
    if math.isnan(lo):
        return "one seed, no interval"
    if lo > 0 or hi < 0:
        return f"the seed interval excludes 0 ({'L_HN' if lo > 0 else 'InfoNCE'} higher; pooled McNemar p {r['p_value']:.3g})"
    return f"the seed interval includes 0 (pooled McNemar p {r['p_value']:.3g})"


def render(rows: Sequence[dict[str, Any]], start: dict[str, float] | None, skipped: dict[str, str],
           runs: dict[str, dict[str, Any]] | None = None, comp: Sequence[dict[str, Any]] = (),
           comp_start: dict[str, Any] | None = None, unscored: Sequence[str] = ()) -> str:
    """The Markdown block: the Table-2-shaped table, the compositional accuracy beside it (``comp``, the start
    model's ``comp_start``, the finished runs without a compositional result ``unscored``), the per-seed
    comparisons, the runs' training times (from their ``train_config.json`` copies in ``runs``), stored runs without
    their pair, what was not run."""
    from tabulate import tabulate

    from hnbench.io import markdown_text

    table = []
    for r in rows:
        table.append([f"{markdown_text(r['framework'])} (`{r['recipe']}`)", len(r["seeds"]),
                      *[x for d in DIRECTIONS for x in (f"{r[d]['infonce']:.2f}", f"{r[d]['hn']:.2f}", _delta(r[d]),
                                                         f"{r[d]['p_value']:.3g}")]])
    if start:
        table.append(["start model (not fine-tuned)", "", f"{start['t2i']:.2f}", "", "", "",
                      f"{start['i2t']:.2f}", "", "", ""])
    text = ("R@1 in % on synthdense test, mean over seeds; Δ = L_HN − InfoNCE in points, mean over seeds "
            "[95% Student-t interval across seeds]; p: exact McNemar on the discordant queries pooled over seeds.\n\n")
    text += tabulate(table, headers=["framework (recipe)", "seeds", "T2I InfoNCE", "T2I L_HN", "T2I Δ", "T2I p",
                                     "I2T InfoNCE", "I2T L_HN", "I2T Δ", "I2T p"], tablefmt="github", disable_numparse=True) + "\n"
    text += _render_compositional(comp, comp_start, unscored)
    if rows:
        seed_rows = [[r["framework"], p["seed"],
                      *[f"{p[d]['delta']:+.2f} [{p[d]['ci95'][0]:+.2f}, {p[d]['ci95'][1]:+.2f}], p {p[d]['p_mcnemar']:.3g}"
                        for d in DIRECTIONS]] for r in rows for p in r["per_seed"]]
        text += ("\nPer seed (`hnbench compare` of the L_HN result against the InfoNCE result of the same seed): Δ R@1 "
                 "[paired bootstrap 95% interval, 1000 draws], exact McNemar p.\n\n")
        text += tabulate(seed_rows, headers=["framework", "seed", "T2I Δ", "I2T Δ"], tablefmt="github", disable_numparse=True) + "\n"
        text += "\n" + "\n".join(
            f"- {markdown_text(r['framework'])}: " + "; ".join(f"{d.upper()} {_delta(r[d])}: {_verdict(r[d])}"
                                                               for d in DIRECTIONS)
            + ("" if not start else " (against the start model: InfoNCE " + ", ".join(
                f"{d.upper()} {r[d]['infonce'] - start[d]:+.2f}" for d in DIRECTIONS) + "; L_HN " + ", ".join(
                f"{d.upper()} {r[d]['hn'] - start[d]:+.2f}" for d in DIRECTIONS) + ")") for r in rows) + "\n"
    runs = runs or {}
    times = {}
    for name, info in runs.items():
        run = parse_name(name)
        if run is not None and isinstance(info.get("seconds"), (int, float)):
            times.setdefault(run.framework, []).append(float(info["seconds"]))
    if times:
        text += ("\nTraining time per run on this machine (the `seconds` hnbench's `train_config.json` records): "
                 + "; ".join(f"{markdown_text(f)} {statistics.fmean(t):.0f} s (mean of {len(t)})" for f, t in times.items())
                 + ".\n")
    in_table = {p[loss] for r in rows for p in r["per_seed"] for loss in LOSSES}
    alone = sorted(n for n, info in runs.items() if n != START and info.get("result") not in in_table)
    if alone:
        text += "\nStored without their pair (not in the table yet): " + ", ".join(markdown_text(n) for n in alone) + ".\n"
    if skipped:
        text += "\nNot run: " + "; ".join(f"{markdown_text(f)} ({markdown_text(why)})" for f, why in skipped.items()) + ".\n"
    return text


def _render_compositional(comp: Sequence[dict[str, Any]], start: dict[str, Any] | None, unscored: Sequence[str]) -> str:
    """The compositional column: per framework each loss's accuracy, Δ with its seed interval and pooled McNemar p,
    and Δ per kind; the per-seed comparisons."""
    from tabulate import tabulate

    from hnbench.io import markdown_text

    if not comp and not start and not unscored:
        return ""
    kinds = list(dict.fromkeys(k for r in comp for k in r["kind_delta"]))
    table = [[f"{markdown_text(r['framework'])} (`{r['recipe']}`)", len(r["seeds"]), f"{r['infonce']:.2f}",
              f"{r['hn']:.2f}", _delta(r), f"{r['p_value']:.3g}",
              *[f"{r['kind_delta'][k]:+.2f}" if k in r["kind_delta"] else "" for k in kinds]] for r in comp]
    if start:
        by = start.get("by", {}).get("kind", {})
        table.append(["start model (not fine-tuned)", "", f"{start['accuracy']:.2f}", "", "", "",
                      *[f"({by[k]['accuracy']:.2f})" if k in by else "" for k in kinds]])
    text = ("\nCompositional accuracy in % on synthdense's compositional protocol (`hnbench eval --task choice "
            "--dataset synthdense --protocol compositional`: per test image and kind a true caption and a near-twin "
            "false one, right iff s(I, true) > s(I, false); macro over the kinds), mean over seeds; Δ = L_HN − "
            "InfoNCE [95% Student-t interval across seeds]; p: exact McNemar on the items one loss chose right and "
            "the other wrong, pooled over seeds; Δ per kind: mean over seeds (the start model's row: its accuracy "
            "per kind, in brackets).\n\n")
    text += tabulate(table, headers=["framework (recipe)", "seeds", "comp. InfoNCE", "comp. L_HN", "comp. Δ",
                                     "comp. p", *[f"Δ {k}" for k in kinds]], tablefmt="github",
                     disable_numparse=True) + "\n"
    if comp:
        seed_rows = [[r["framework"], p["seed"], f"{p['acc_infonce']:.2f}", f"{p['acc_hn']:.2f}", f"{p['delta']:+.2f}",
                      f"{p['n_hn_only']} / {p['n_infonce_only']} of {p['n_items']}", f"{p['p_mcnemar']:.3g}"]
                     for r in comp for p in r["per_seed"]]
        text += ("\nCompositional, per seed: accuracy of each loss, Δ, the items only L_HN / only InfoNCE chose right, "
                 "exact McNemar p.\n\n")
        text += tabulate(seed_rows, headers=["framework", "seed", "InfoNCE", "L_HN", "Δ", "discordant", "p"],
                         tablefmt="github", disable_numparse=True) + "\n"
    if unscored:
        text += ("\nFinished runs without a compositional result (their checkpoint is no longer in the run folder: "
                 "retrain to score them): " + ", ".join(markdown_text(n) for n in unscored) + ".\n")
    return text


def write_block(readme: Path, block: str) -> None:
    """Replace what lies between the two marker lines of ``readme`` with ``block`` (atomically)."""
    from hnbench.io import atomic_write_bytes

    text = readme.read_text(encoding="utf-8")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    atomic_write_bytes(readme, (head + BEGIN + "\n" + block.rstrip("\n") + "\n" + END + tail).encode())


# -- command ----------------------------------------------------------------------------------------

def parse(argv: list[str] | None) -> StudySettings:
    from hnbench.cli.flags import add_settings_args

    p = argparse.ArgumentParser(prog="plug_and_play.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_settings_args(p, StudySettings, required={"output"})
    args = p.parse_args(argv)
    # a flag not given is None: the field's own default then (a list field's default comes from its factory)
    return StudySettings(**{f.name: getattr(args, f.name) for f in fields(StudySettings)
                            if getattr(args, f.name) is not None})


def study(s: StudySettings) -> dict[str, Any]:
    """Run what is missing, then tabulate everything stored; returns the summary."""
    from tqdm.auto import tqdm

    from hnbench.io import atomic_write_bytes

    check(s)
    t0 = time.perf_counter()
    results, report = Path(s.results), Path(s.report)

    def log(msg: str) -> None:
        tqdm.write(f"plug-and-play: {msg}", file=sys.stderr)

    skipped = {f: why for f in s.frameworks if (why := available(f))}
    for f, why in skipped.items():
        log(f"skipping {f}: {why}")
    frameworks = [f for f in s.frameworks if f not in skipped]
    plan = [Run(f, loss, seed) for seed in range(s.seeds) for f in frameworks for loss in LOSSES]  # seed-major
    done = stored(results)
    todo = [r for r in plan if r.name not in done]
    comp_done = stored(results, compositional=True)
    comp_todo = [r for r in plan if r.name in done and r.name not in comp_done]  # finished before the column
    log(f"{len(plan)} runs planned, {len(plan) - len(todo)} finished, {len(todo)} to do"
        + (" (--report-only: none done now)" if s.report_only else ""))
    if not s.report_only:
        report.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(report / "plan.json", (json.dumps(s.identity(), indent=1) + "\n").encode())
        for run in tqdm(todo, desc="plug-and-play runs", disable=s.quiet):
            if run.framework in skipped:
                continue
            try:
                execute(run, s, log)
            except ConfigError as e:  # hnbench refused the run before training (e.g. a side input it lacks)
                skipped[run.framework] = f"hnbench refused {run.name}: {e}"
                log(f"skipping {run.framework}: {skipped[run.framework]}")
        for run in comp_todo:  # scored from the checkpoint where it is still there; never retrained
            ckpt = training_done(Path(s.output) / "runs" / run.name)
            if ckpt is not None:
                log(f"{run.name}: scoring {ckpt} on the compositional protocol")
                score_compositional("hnbench-tiny", str(ckpt), s)
        ran = [f for f in frameworks if f not in skipped]
        if ran and START not in done:
            score_start(s, ran)
        elif ran and START not in comp_done:
            score_start(s, ran, compositional_only=True)
    found = stored(results)
    comp_found = stored(results, compositional=True)
    unscored = sorted(n for n in found if n not in comp_found and n != START)
    rows = paired(found, Path(s.output) / "compare")
    comp = paired_compositional(comp_found)
    start = None
    if START in found:
        from hnbench.results.record import read_result

        m = read_result(found[START]).metrics
        start = {d: m[d]["R@1"] for d in DIRECTIONS}
    comp_start = None
    if START in comp_found:
        from hnbench.results.record import read_result

        comp_start = read_result(comp_found[START]).metrics["choice"]
    runs = {}
    for name in sorted(found):
        meta = report / "runs" / f"{name}.json"
        if meta.is_file():
            info = json.loads(meta.read_text())
            runs[name] = {"result": found[name].name, "steps": info.get("steps"), "seconds": info.get("seconds"),
                          "config_sha256": hashlib.sha256(json.dumps(info.get("config"), sort_keys=True)
                                                          .encode()).hexdigest()[:16]}
        else:
            runs[name] = {"result": found[name].name}
    block = render(rows, start, skipped, runs, comp, comp_start, unscored)
    summary = {"settings": {k: v for k, v in asdict(s).items() if k not in ("report_only", "quiet")},
               "study": s.identity(), "frameworks": rows, "start": start, "skipped": skipped, "runs": runs,
               "compositional": {"protocol": COMPOSITIONAL, "frameworks": comp,
                                 "start": None if comp_start is None else {
                                     "accuracy": comp_start["accuracy"],
                                     "by_kind": {k: v["accuracy"] for k, v in comp_start.get("by", {}).get("kind", {}).items()}},
                                 "unscored": unscored, "results": {n: p.name for n, p in sorted(comp_found.items())}},
               "seconds": round(time.perf_counter() - t0, 1)}
    report.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(report / "summary.json", (json.dumps(summary, indent=2) + "\n").encode())
    atomic_write_bytes(report / "table.md", block.encode())
    write_block(Path(s.readme), block)
    print(block)
    print(f"wrote {s.readme} (the marked block), {report / 'summary.json'}, {report / 'table.md'}")
    return summary


def main(argv: list[str] | None = None) -> int:
    try:
        s = parse(argv)
        study(s)
    except HnbenchError as e:
        print(f"hnbench: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
