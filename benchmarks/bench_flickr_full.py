"""Issue 23: hnbench end to end vs the minimal forward loop at Flickr30k-full size, side by side.

Data: ``hnbench.data.synthdense.generate_flickr30k`` writes N synthdense scenes (default 31,783, Flickr30k's
full set) in Flickr30k's release layout (``flickr30k-images/*.jpg`` at the bundled model's 64 px and
``results_20130124.token``, 5 captions an image), once, into a cache folder reused by later runs; both
sides read it through hnbench's real ``flickr30k`` benchmark, protocol ``full``.
Model: the bundled ``hnbench-tiny`` with its ``synthdense`` weights (d = 128).

Sides, each run in its own child process (so its peak RSS is its own), interleaved, ``--repeats`` each:

a. *minimal*: bench_eval.py's minimal loop (``minimal_encode``: decode, transform, tokenize, encode), then
   the similarity and R@1/5/10 both ways in blocks of captions (``blocked_recall``): bench_eval's
   ``minimal_recall`` builds one N×M matrix, 20 GB in fp32 at 31,783 × 158,915, so here it is blocked
   (each block's t2i ranks, and a running top-10 per image for i2t; the same numbers).
b. *evaluate*: ``hnbench.evaluation.evaluate`` with the embedding cache off (cold): everything a result needs (exact
   ranks with ties both ways, MRR, bootstrap CIs, token statistics, per-query parquet, result JSON).
c. *warm* (``--warm``): ``evaluate`` with the cache on, a fresh cache filled by one untimed run, then timed.

``--random-embeddings`` times only what follows the encoders (the part that grows with N×M), on seeded random
unit vectors of the same sizes: (a) ``blocked_recall`` vs (b) ``hnbench.tasks.retrieval.score_embeddings`` (exact
search both ways, metrics, bootstrap CIs) and the per-query table written as parquet (into memory).

Each child loads the model and the data and warms up on 64 items before its clock starts; the clock covers
the side's work only. Per repeat the load average is printed; the table gives min and median wall time,
median CPU time (the child's own, its workers included), peak RSS over the child's baseline (VmHWM after
``clear_refs``, the RSS just before the clock) next to (N+M)·d·4 bytes, and R@1 both ways (the two sides
must agree). The script fails if an hnbench side's peak over baseline reaches the memory bound (see ``--mem-factor``;
the minimal loop's peak is shown beside it, not checked)
at sizes where an N×M matrix would exceed it.

Usage:
    python benchmarks/bench_flickr_full.py                   # 31,783 images, 158,915 captions, 2 repeats
    python benchmarks/bench_flickr_full.py --images 2000 --warm
    python benchmarks/bench_flickr_full.py --random-embeddings    # scoring only, at the full N and M
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from bench_eval import cpu_seconds, minimal_encode, recalls  # noqa: E402

from hnbench.data.benchmarks import load  # noqa: E402
from hnbench.data.synthdense import generate_flickr30k  # noqa: E402
from hnbench.evaluation.evaluate import evaluate  # noqa: E402
from hnbench.models import load_model  # noqa: E402
from hnbench.search import calibration as search_calibration  # noqa: E402
from hnbench.search.exact import AUTO_MIN_WORK, _measure_costs  # noqa: E402
from hnbench.tasks.retrieval import per_query_frame, score_embeddings  # noqa: E402

FULL = 31783
BLOCK_BYTES = 256 * 2**20  # the minimal loop's score block, as hnbench's torch search budgets its chunks
SIDES = ("minimal", "evaluate")


def data_root(args: argparse.Namespace) -> Path:
    return Path(args.data_root or Path(tempfile.gettempdir()) / f"hnbench-flickr30k-synthdense-{args.images}")


def load_flickr(args: argparse.Namespace):
    counts = None if args.images == FULL else {"n_images": args.images, "n_captions": 5 * args.images}
    return load("flickr30k", data_root=data_root(args), protocol="full", expected_counts=counts)


@torch.inference_mode()
def blocked_recall(img: torch.Tensor, txt: torch.Tensor, caption_image) -> tuple[list[float], list[float]]:
    """bench_eval's ``minimal_recall`` without the N×M matrix: caption blocks of (block, N) scores, each giving
    its t2i ranks and merged into a running top-10 of captions per image for i2t."""
    owner, n, m = torch.as_tensor(caption_image), img.shape[0], txt.shape[0]
    block = max(1, BLOCK_BYTES // (4 * n))
    t2i_rank = torch.empty(m, dtype=torch.int64)
    top_v, top_i = torch.full((n, 10), -torch.inf), torch.zeros((n, 10), dtype=torch.int64)
    for s in range(0, m, block):
        sims = txt[s:s + block] @ img.T
        b = sims.shape[0]
        t2i_rank[s:s + b] = (sims > sims[torch.arange(b), owner[s:s + b]][:, None]).sum(1)
        v, i = sims.T.topk(min(10, b), dim=1)
        top_v, o = torch.cat([top_v, v], 1).topk(10, dim=1)
        top_i = torch.cat([top_i, i + s], 1).gather(1, o)
    return recalls(t2i_rank, top_i, owner)


def random_embeddings(caption_image, d: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded unit vectors in place of the encoders' (``--random-embeddings``): each caption its image's vector
    plus noise (about half the captions find their image first at 31,783 images)."""
    g = torch.Generator().manual_seed(0)
    img = torch.nn.functional.normalize(torch.randn(int(max(caption_image)) + 1, d, generator=g), dim=1)
    owner = torch.as_tensor(caption_image)
    return img, torch.nn.functional.normalize(img[owner] + 0.25 * torch.randn(len(owner), d, generator=g), dim=1)


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def child(args: argparse.Namespace) -> None:
    """One side, once: load, warm up, reset the peak RSS, run on the clock; one JSON line on stdout."""
    encoder = load_model("hnbench-tiny", "synthdense")
    ds = load_flickr(args)
    small = ds.drop_images(range(64, ds.n_images))
    with tempfile.TemporaryDirectory() as tmp:
        stages: dict[str, float] = {}

        def run_evaluate(cache: bool, out: str) -> tuple[list[float], list[float]]:
            r = evaluate(encoder, ds if out else small, output_dir=out or None, batch_size=args.batch_size,
                         progress=False, use_cache=cache, cache_dir=os.path.join(tmp, "cache"))
            stages.update(r.timings)
            return [r.metrics["t2i"][f"R@{k}"] / 100 for k in (1, 5, 10)], \
                [r.metrics["i2t"][f"R@{k}"] / 100 for k in (1, 5, 10)]

        if args.random_embeddings:
            img, txt = random_embeddings(ds.caption_image, 128)
            owner = ds.caption_image

            def work() -> tuple[list[float], list[float]]:
                if args.child == "minimal":
                    return blocked_recall(img, txt, owner)
                metrics, _, outs = score_embeddings(img.numpy(), txt.numpy(), owner)
                per_query_frame(ds, outs).to_parquet(io.BytesIO(), index=False)
                return [metrics["t2i"][f"R@{k}"] / 100 for k in (1, 5, 10)], \
                    [metrics["i2t"][f"R@{k}"] / 100 for k in (1, 5, 10)]
        elif args.child == "minimal":
            blocked_recall(*minimal_encode(encoder, small, args.batch_size), small.caption_image)

            def work() -> tuple[list[float], list[float]]:
                return blocked_recall(*minimal_encode(encoder, ds, args.batch_size), ds.caption_image)
        else:
            run_evaluate(False, "")  # warm-up (on `small`)
            if args.child == "warm":
                run_evaluate(True, os.path.join(tmp, "fill"))  # fills the cache: not timed
            out = os.path.join(tmp, "out")

            def work() -> tuple[list[float], list[float]]:
                return run_evaluate(args.child == "warm", out)
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
        base_kb, c, s = _status_kb("VmRSS"), cpu_seconds(), time.perf_counter()
        t2i, i2t = work()
        wall, cpu = time.perf_counter() - s, cpu_seconds() - c
        peak_kb = _status_kb("VmHWM")
    print(json.dumps({"wall": wall, "cpu": cpu, "base_mb": base_kb / 1024, "peak_mb": peak_kb / 1024,
                      "t2i": t2i, "i2t": i2t, "stages": stages}))


def run_side(args: argparse.Namespace, side: str) -> dict:
    argv = [sys.executable, __file__, "--child", side, "--images", str(args.images), "--data-root", str(data_root(args)),
            "--batch-size", str(args.batch_size)] + (["--random-embeddings"] if args.random_embeddings else [])
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode:
        sys.exit(f"the {side} child failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def generate(args: argparse.Namespace) -> None:
    root = data_root(args)
    s = time.perf_counter()
    existed = root.is_dir()
    generate_flickr30k(root, args.images, progress=True)
    du = subprocess.run(["du", "-sh", str(root)], capture_output=True, text=True).stdout.split()[0]
    free = shutil.disk_usage(root).free / 2**30
    print(f"data: {root} ({'reused' if existed else f'generated in {time.perf_counter() - s:.1f} s'}), {du} on disk, "
          f"{free:.1f} GiB free")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=FULL, help="images (5 captions each); 31,783 is Flickr30k full")
    ap.add_argument("--data-root", default=None, help="where the data is generated once (default: the temp dir)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--warm", action="store_true", help="also time evaluate with a filled embedding cache")
    ap.add_argument("--mem-factor", type=float, default=4.0,
                    help="fail if a side's peak RSS over its baseline reaches this many (N+M)·d·4 bytes + 512 MiB")
    ap.add_argument("--random-embeddings", action="store_true",
                    help="time only what follows the encoders, on seeded random embeddings of the same sizes: the "
                         "minimal blocked recall vs hnbench's scoring (search both ways, metrics, CIs, per-query "
                         "table): the part that grows with N×M")
    ap.add_argument("--child", choices=(*SIDES, "warm"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    generate(args)
    s = time.perf_counter()
    ds = load_flickr(args)
    n, m = ds.n_images, ds.n_captions
    print(f"flickr30k/full read by hnbench in {time.perf_counter() - s:.2f} s: {n} images, {m} captions")
    for size in (n, m):  # search "auto"'s one-off calibration (stored in the cache): not timed
        if n * m >= AUTO_MIN_WORK:
            search_calibration.costs(size, _measure_costs)
    d = 128  # hnbench-tiny's embed_dim
    emb_mb, nm_mb = (n + m) * d * 4 / 2**20, n * m * 4 / 2**20
    bound_mb = args.mem_factor * emb_mb + 512
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} cores; (N+M)·d·4 = "
          f"{emb_mb:.0f} MiB, an fp32 N×M matrix {nm_mb:.0f} MiB, memory bound {bound_mb:.0f} MiB")
    sides = [*SIDES, "warm"] if args.warm and not args.random_embeddings else list(SIDES)
    runs: dict[str, list[dict]] = {k: [] for k in sides}
    for r in range(args.repeats):  # interleaved so machine noise hits every side alike
        load_avg = os.getloadavg()[0]
        for side in sides:
            runs[side].append(run_side(args, side))
            print(f"  {side}: {json.dumps(runs[side][-1])}", flush=True)
        print(f"repeat {r + 1}: load average {load_avg:.2f} -> {os.getloadavg()[0]:.2f}; "
              + ", ".join(f"{k} {v[-1]['wall']:.2f} s (CPU {v[-1]['cpu']:.2f} s)" for k, v in runs.items()), flush=True)

    def stat(side: str, key: str, f=np.median) -> float:
        return float(f([x[key] for x in runs[side]]))

    print(f"\n{'side':>9} {'min (s)':>9} {'median (s)':>11} {'CPU s (med)':>12} {'peak-base MiB':>14} "
          f"{'(N+M)d4 MiB':>12} {'t2i R@1':>8} {'i2t R@1':>8}")
    for side in sides:
        grow = max(x["peak_mb"] - x["base_mb"] for x in runs[side])
        print(f"{side:>9} {stat(side, 'wall', min):>9.2f} {stat(side, 'wall'):>11.2f} {stat(side, 'cpu'):>12.2f} "
              f"{grow:>14.0f} {emb_mb:>12.0f} {runs[side][-1]['t2i'][0]:>8.4f} {runs[side][-1]['i2t'][0]:>8.4f}")
    per = " ".join(f"{e['wall'] / mi['wall']:.3f}" for e, mi in zip(runs["evaluate"], runs["minimal"]))
    print(f"evaluate / minimal: min/min {stat('evaluate', 'wall', min) / stat('minimal', 'wall', min):.3f}, "
          f"median/median {stat('evaluate', 'wall') / stat('minimal', 'wall'):.3f}, CPU "
          f"{stat('evaluate', 'cpu') / stat('minimal', 'cpu'):.3f}, per repeat {per} (goal <= 1.03)")
    agree = all(np.allclose(runs[s][-1][k], runs["minimal"][-1][k], atol=1e-4) for s in sides for k in ("t2i", "i2t"))
    print(f"recalls agree across sides: {agree}")
    # the bound is hnbench's (its sides); the minimal loop is the reference: its peak is shown, not checked
    over = [s for s in sides if s != "minimal" and max(x["peak_mb"] - x["base_mb"] for x in runs[s]) >= bound_mb]
    if nm_mb > bound_mb:
        print(f"no N×M allocation in hnbench: {'FAILED for ' + ', '.join(over) if over else 'ok'} (every hnbench "
              f"peak under {bound_mb:.0f} MiB, an N×M matrix is {nm_mb:.0f} MiB)")
    else:
        print(f"(at this size an N×M matrix, {nm_mb:.0f} MiB, is under the bound: the memory check says nothing)")
    if over and nm_mb > bound_mb:
        sys.exit(1)


if __name__ == "__main__":
    main()
