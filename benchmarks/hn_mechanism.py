"""Reproduce the HN-CLIP mechanism on synthdense: does InfoNCE go silent where HN-CLIP keeps learning?

Starts from hnbench's tiny model pre-trained on synthdense with InfoNCE (the bundled
``hnbench-tiny``/``synthdense`` weights; with ``--pretrain-epochs N`` or when they are missing, a
short InfoNCE pre-training run first), then fine-tunes it twice with the same seed, data, batches and
steps — once with InfoNCE, once with HN-CLIP — measuring both losses and both full-parameter
gradients on the current batch every ``--diag-every`` steps, and evaluating on the synthdense test
split after every epoch. Prints the side-by-side table, writes ``summary.json`` / ``summary.md`` and
one plot (``mechanism.png``), and measures the HN term's training-step overhead over InfoNCE.

    python benchmarks/hn_mechanism.py --output runs/mechanism                 # the base setting
    python benchmarks/hn_mechanism.py --output runs/mech-s100 --logit-scale 100 --freeze-logit-scale
    python benchmarks/hn_mechanism.py --output runs/mech-family --group-families
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from hnbench.data.synthdense import FAMILY_PATTERN
from hnbench.train import train
from hnbench.train.config import TrainConfig
from hnbench.train.report import epoch_table, read_run, render_table, train_report


def _dataset_options(args: argparse.Namespace) -> dict:
    return {"n_families": {"train": args.train_families, "test": 100}}


def pretrain(args: argparse.Namespace) -> str:
    """A short InfoNCE pre-training of hnbench-tiny on synthdense (the recipe's data, fewer epochs)."""
    out = Path(args.output) / "pretrain"
    cfg = TrainConfig(model="hnbench-tiny", dataset="synthdense", protocol="train", loss="infonce",
                      epochs=args.pretrain_epochs, batch_size=64, lr=1e-3, warmup_steps=50, seed=args.seed,
                      dataset_options={"n_families": {"train": 800, "test": 100}}, output=str(out), log_every=25,
                      overwrite=True)  # this script owns its run directories: a rerun regenerates them
    return str(train(cfg, progress=not args.quiet))


def finetune(args: argparse.Namespace, init: str, loss: str) -> Path:
    out = Path(args.output) / loss
    cfg = TrainConfig(
        model="hnbench-tiny", pretrained=init, dataset="synthdense", protocol="train",
        dataset_options=_dataset_options(args), loss=loss, gamma=args.gamma, epochs=args.epochs,
        batch_size=args.batch_size, lr=args.lr, weight_decay=0.1, warmup_steps=args.warmup_steps, seed=args.seed,
        log_every=5, diag_every=args.diag_every, active_threshold=args.active_threshold,
        init_logit_scale=args.logit_scale, train_logit_scale=not args.freeze_logit_scale,
        group_by=FAMILY_PATTERN if args.group_families else None, num_workers=args.num_workers,
        eval_dataset="synthdense", eval_protocol="test", eval_dataset_options=_dataset_options(args),
        output=str(out), overwrite=True)  # this script owns its run directories: a rerun regenerates them
    train(cfg, progress=not args.quiet)
    return out


def step_overhead(init: str, args: argparse.Namespace, steps: int) -> dict:
    """Wall time of one full training step (forward, loss, backward, AdamW) with each loss, interleaved
    pairwise on the same batches in one process (alternating which goes first): the median of the
    per-pair ratios. Also the loss alone (forward + backward from fixed features), in blocks of 200."""
    from hnbench.data import load_dataset
    from hnbench.models import load_model
    from hnbench.models.towers import CLIPTowers
    from hnbench.train.losses import hn_clip_loss, info_nce_loss

    enc = load_model("hnbench-tiny", init)
    ds = load_dataset("synthdense", protocol="train", **_dataset_options(args))
    tokens = enc.tokenize(ds.captions).tokens
    b = args.batch_size
    batches = [(torch.stack([enc.image_transform(ds.images.open(i)) for i in range(k * b, (k + 1) * b)]),
                tokens[k * b:(k + 1) * b]) for k in range(4)]
    runs = {}
    for name in ("infonce", "hn"):
        towers = CLIPTowers(copy.deepcopy(enc.model).train(), "open_clip")
        runs[name] = (towers, torch.optim.AdamW(towers.parameters(), lr=1e-6))
    fns = {"infonce": lambda v, t, s: info_nce_loss(v, t, s), "hn": lambda v, t, s: hn_clip_loss(v, t, s, 0.5)}
    times: dict[str, list[float]] = {"infonce": [], "hn": []}
    loss_times: dict[str, list[float]] = {"infonce": [], "hn": []}
    features = None
    for k in range(steps + 2):
        for name in (("infonce", "hn") if k % 2 == 0 else ("hn", "infonce")):
            towers, opt = runs[name]
            pixels, toks = batches[k % len(batches)]
            t0 = time.perf_counter()
            out = towers(pixels, toks)
            loss = fns[name](out["image"], out["text"], out["scale"])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if k >= 2:  # the first two pairs warm up
                times[name].append(time.perf_counter() - t0)
            features = (out["image"].detach(), out["text"].detach(), out["scale"].detach())
    v0, t0_, s0 = features
    for k in range(10):
        for name in (("infonce", "hn") if k % 2 == 0 else ("hn", "infonce")):
            v, t = v0.clone().requires_grad_(), t0_.clone().requires_grad_()
            start = time.perf_counter()
            for _ in range(200):
                fns[name](v, t, s0).backward()
            loss_times[name].append((time.perf_counter() - start) / 200)
    ratios = [h / n for h, n in zip(times["hn"], times["infonce"])]
    med = {k: statistics.median(v) for k, v in times.items()}
    med_loss = {k: statistics.median(v) for k, v in loss_times.items()}
    return {"batch_size": b, "steps": steps, "step_seconds": med, "step_ratio": statistics.median(ratios),
            "step_ratio_iqr": [statistics.quantiles(ratios, n=4)[0], statistics.quantiles(ratios, n=4)[2]],
            "loss_seconds": med_loss, "loss_ratio": med_loss["hn"] / med_loss["infonce"],
            "hn_term_share_of_step": (med_loss["hn"] - med_loss["infonce"]) / med["infonce"]}


def probe(init: str, args: argparse.Namespace, reps: int) -> list[dict]:
    """No training: the start model's saturation on random vs whole-family batches, B ∈ {16, 64},
    at its own logit scale and at s = 100 (Long-CLIP-L's), ``reps`` batches each."""
    import numpy as np

    from hnbench.data import load_dataset
    from hnbench.models import load_model
    from hnbench.models.towers import CLIPTowers
    from hnbench.train.diagnostics import measure

    enc = load_model("hnbench-tiny", init)
    ds = load_dataset("synthdense", protocol="train", **_dataset_options(args))
    tokens = enc.tokenize(ds.captions).tokens
    first_caption = [int(c[0]) for c in ds.image_captions()]
    towers = CLIPTowers(enc.model.train(), "open_clip")
    own = float(enc.model.logit_scale.exp())
    rng = np.random.default_rng(args.seed)
    rows = []
    for batching in ("random", "family"):
        for b in (16, 64):
            batches = []
            for _ in range(reps):
                if batching == "random":
                    idx = rng.choice(ds.n_images, b, replace=False)
                else:  # synthdense ids sort by family: 5 consecutive images per family
                    fams = rng.choice(ds.n_images // 5, -(-b // 5), replace=False)
                    idx = np.concatenate([np.arange(5 * f, 5 * f + 5) for f in fams])[:b]
                pixels = torch.stack([enc.image_transform(ds.images.open(int(i))) for i in idx])
                batches.append((pixels, tokens[[first_caption[int(i)] for i in idx]]))
            for s in (own, 100.0):
                with torch.no_grad():
                    enc.model.logit_scale.fill_(float(np.log(s)))
                recs = [measure(towers, px, tk, gamma=args.gamma, active_threshold=args.active_threshold)
                        for px, tk in batches]
                with torch.no_grad():
                    gs = []
                    for _, tk in batches:
                        t = F.normalize(towers.encode_text(tk), dim=-1)
                        gs.append((t @ t.T).fill_diagonal_(float("nan")))
                    g = torch.stack(gs)
                rows.append({
                    "batching": batching, "batch_size": b, "logit_scale": round(s, 1),
                    "mean_caption_cos": float(g.nanmean()),
                    "mean_hardest_caption_cos": float(g.nan_to_num(-2.0).amax(dim=2).mean()),
                    "loss_infonce": statistics.median(r["loss_infonce"] for r in recs),
                    "loss_hn": statistics.median(r["loss_hn"] for r in recs),
                    "share_active_infonce": sum(r["active_infonce"] for r in recs) / reps,
                    "share_infonce_grad_zero": sum(r["infonce_grad_zero"] for r in recs) / reps,
                    "share_infonce_zero_fp16": sum(r["infonce_zero_fp16"] for r in recs) / reps,
                    "share_infonce_zero_bf16": sum(r["infonce_zero_bf16"] for r in recs) / reps,
                    "sat_rows_infonce": statistics.mean(r["sat_rows_infonce"] for r in recs),
                    "sat_rows_hn": statistics.mean(r["sat_rows_hn"] for r in recs),
                    "median_grad_ratio": statistics.median(r["grad_ratio"] for r in recs if r["grad_ratio"])})
            with torch.no_grad():
                enc.model.logit_scale.fill_(float(np.log(own)))
    return rows


def render_probe(rows: list[dict]) -> str:
    lines = ["| batches | B | s | caption cos: mean / hardest | InfoNCE loss | HN loss | active (NCE) | ∇NCE = 0 | "
             "∇NCE = 0 (fp16 logits) | rows sat. NCE | rows sat. HN | median ratio |", "|" + "---|" * 12]
    for r in rows:
        lines.append(f"| {r['batching']} | {r['batch_size']} | {r['logit_scale']} | {r['mean_caption_cos']:.2f} / {r['mean_hardest_caption_cos']:.2f} | "
                     f"{r['loss_infonce']:.2g} | {r['loss_hn']:.3g} | {_pct(r['share_active_infonce'])} | "
                     f"{_pct(r['share_infonce_grad_zero'])} | {_pct(r['share_infonce_zero_fp16'])} | "
                     f"{_pct(r['sat_rows_infonce'])} | "
                     f"{_pct(r['sat_rows_hn'])} | {r['median_grad_ratio']:.3g} |")
    return "\n".join(lines) + "\n"


def side_by_side(runs: dict[str, dict]) -> list[dict]:
    """Per epoch: the numbers the issue asks for, InfoNCE run next to HN run."""
    tables = {k: {r["epoch"]: r for r in epoch_table(v)} for k, v in runs.items()}
    rows = []
    for e in sorted(tables["infonce"]):
        row = {"epoch": e}
        for k in ("infonce", "hn"):
            r = tables[k].get(e, {})
            for key in ("share_infonce_grad_zero", "share_infonce_zero_fp16", "share_active_infonce", "share_active_hn", "share_active_train",
                        "median_grad_ratio", "mean_grad_cos", "mean_sat_rows_infonce", "t2i_R@1", "i2t_R@1"):
                row[f"{k}:{key}"] = r.get(key)
        rows.append(row)
    return rows


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.0f}%"


def _num(x: float | None, fmt: str = "{:.3g}") -> str:
    return "–" if x is None else fmt.format(x)


def render(rows: list[dict], steps: dict[str, list[dict]], overhead: dict | None) -> str:
    head = ("| epoch | run | ∇InfoNCE exactly 0 | (if fp16 logits) | active (InfoNCE loss ≥ thr) | "
            "active (own train loss) | median ‖∇HN‖/‖∇NCE‖ | mean cos | rows saturated (NCE) | t2i R@1 | i2t R@1 |")
    lines = [head, "|" + "---|" * 11]
    for row in rows:
        for k in ("infonce", "hn"):
            g = {key.split(":", 1)[1]: v for key, v in row.items() if key.startswith(k + ":")}.get
            lines.append(f"| {row['epoch']} | {k} | {_pct(g('share_infonce_grad_zero'))} | "
                         f"{_pct(g('share_infonce_zero_fp16'))} | "
                         f"{_pct(g('share_active_infonce'))} | {_pct(g('share_active_train'))} | "
                         f"{_num(g('median_grad_ratio'))} | {_num(g('mean_grad_cos'), '{:.2f}')} | "
                         f"{_pct(g('mean_sat_rows_infonce'))} | {_num(g('t2i_R@1'), '{:.1f}')} | "
                         f"{_num(g('i2t_R@1'), '{:.1f}')} |")
    text = "\n".join(lines) + "\n"
    for k, st in steps.items():
        if st:
            zero = sum(r["infonce_grad_zero"] for r in st) / len(st)
            ratios = [r["grad_ratio"] for r in st if r["grad_ratio"] is not None]
            cos = [r["grad_cos"] for r in st if r["grad_cos"] is not None]
            text += (f"\n{k} run, all {len(st)} measurements: ∇InfoNCE exactly zero in {100 * zero:.1f}%, "
                     f"median grad ratio {statistics.median(ratios) if ratios else float('nan'):.3g}, "
                     f"cosine mean {statistics.mean(cos) if cos else float('nan'):.2f} "
                     f"(positive in {100 * sum(c > 0 for c in cos) / max(1, len(cos)):.0f}%), "
                     f"logit scale {st[0]['logit_scale']:.1f} → {st[-1]['logit_scale']:.1f}")
    if overhead:
        lo, hi = overhead["step_ratio_iqr"]
        text += (f"\n\nStep overhead (batch {overhead['batch_size']}, {overhead['steps']} interleaved step pairs): "
                 f"HN {overhead['step_seconds']['hn'] * 1e3:.1f} ms vs InfoNCE "
                 f"{overhead['step_seconds']['infonce'] * 1e3:.1f} ms (medians); median per-pair ratio "
                 f"{overhead['step_ratio']:.3f} (IQR {lo:.3f}–{hi:.3f}). Loss alone (fwd+bwd from features): "
                 f"HN {overhead['loss_seconds']['hn'] * 1e6:.0f} µs vs InfoNCE "
                 f"{overhead['loss_seconds']['infonce'] * 1e6:.0f} µs ({overhead['loss_ratio']:.2f}×): the HN "
                 f"term adds {100 * overhead['hn_term_share_of_step']:.3f}% of an InfoNCE step.\n")
    return text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output", default="runs/hn-mechanism")
    p.add_argument("--init", help="start checkpoint (default: the bundled hnbench-tiny/synthdense weights)")
    p.add_argument("--pretrain-epochs", type=int, default=0, help="pre-train with InfoNCE first (0: use --init)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=16, help="the paper's micro-batch is 16")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--warmup-steps", type=int, default=10)
    p.add_argument("--gamma", type=float, default=0.5)
    p.add_argument("--train-families", type=int, default=200, help="synthdense train families (×5 images)")
    p.add_argument("--diag-every", type=int, default=2)
    p.add_argument("--active-threshold", type=float, default=1e-3)
    p.add_argument("--logit-scale", type=float, help="set s before fine-tuning (Long-CLIP-L sits at 100)")
    p.add_argument("--freeze-logit-scale", action="store_true")
    p.add_argument("--group-families", action="store_true", help="batches of whole families (hard negatives)")
    p.add_argument("--overhead-steps", type=int, default=30, help="0: skip the overhead measurement")
    p.add_argument("--probe-reps", type=int, default=0,
                   help="before training, probe the start model's saturation (random/family batches, B 16/64, "
                        "own s and s = 100) on this many batches each; 0: skip")
    p.add_argument("--only", choices=["probe", "overhead"], help="run just this part (no fine-tuning)")
    p.add_argument("--num-workers", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    torch.set_num_threads(max(1, min(torch.get_num_threads(), 4)))
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    from hnbench.models.openclip import ASSET_DIR, BUILTIN_WEIGHTS

    bundled = ASSET_DIR / BUILTIN_WEIGHTS[("hnbench-tiny", "synthdense")]
    init = args.init or ("synthdense" if bundled.is_file() and not args.pretrain_epochs else None)
    if init is None:
        args.pretrain_epochs = args.pretrain_epochs or 2
        init = pretrain(args)
    probe_rows = probe(init, args, args.probe_reps or 4) if args.probe_reps or args.only == "probe" else None
    if probe_rows:
        (out / "probe.json").write_text(json.dumps(probe_rows, indent=2) + "\n")
        print(render_probe(probe_rows))
    if args.only == "overhead":
        overhead = step_overhead(init, args, args.overhead_steps or 30)
        (out / "overhead.json").write_text(json.dumps(overhead, indent=2) + "\n")
        print(render([], {}, overhead))
    if args.only:
        return 0
    t0 = time.perf_counter()
    dirs = {loss: finetune(args, init, loss) for loss in ("infonce", "hn")}
    runs = {k: read_run(d) for k, d in dirs.items()}
    rows = side_by_side(runs)
    overhead = step_overhead(init, args, args.overhead_steps) if args.overhead_steps else None
    png, _ = train_report([dirs["infonce"], dirs["hn"]], out / "mechanism.png")
    text = render(rows, {k: v["steps"] for k, v in runs.items()}, overhead)
    settings = {k: v for k, v in vars(args).items() if k not in ("quiet",)}
    from hnbench.models import load_model

    init_fp = load_model("hnbench-tiny", init).info.fingerprint
    summary = {"settings": {**settings, "init": init, "init_fingerprint": init_fp}, "rows": rows,
               "probe": probe_rows, "overhead": overhead,
               "seconds": round(time.perf_counter() - t0, 1), "plot": str(png),
               "report_table": render_table(list(runs.values()))}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "summary.md").write_text(f"settings: {json.dumps(summary['settings'])}\n\n{text}")
    print(text)
    print(f"wrote {out / 'summary.json'}, {out / 'summary.md'} and {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
