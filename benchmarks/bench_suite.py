"""Issue 23: the suite runner's overhead over the sum of its single evaluations.

A suite of three generated entries — synthdense test (500 / 500), and Flickr30k ``karpathy-test`` (1,000 /
5,000) and ``karpathy-val`` (1,014 / 5,070) on ``generate_flickr30k``'s data (``--images`` scenes in
Flickr30k's layout, generated once; its Karpathy file has the published split counts) — registered here
under ``bench-suite-overhead`` and run with ``hnbench.run_suite`` (the data-root map written by this script), vs the
same three ``hnbench.evaluation.evaluate`` calls one after another. Both sides: ``hnbench-tiny`` / ``synthdense``,
embedding cache off (cold), result files into a fresh folder, each run in its own child process (after a
64-item warm-up ``evaluate`` there), interleaved. Prints wall and CPU time per repeat with the load average,
min and median, and the overhead of the suite in % (goal <= 2%).

Whole-run times of two child processes differ by several % from run to run on this machine (the same side
swings ±5%), more than the effect sought, so each child also times its own ``evaluate`` calls (a timing wrapper
around ``EVALUATE.evaluate``, which ``run_suite`` calls): the time a side spends outside them is its own
overhead, measured within one process, and the suite's overhead is its own time minus the singles loop's, over the
time its evaluations took. Both sides' result files must record the same settings (checked), so the evaluations
are the same work.

``--limit N`` runs both sides on the suite's seeded N-image subsets (``limit``, as ``hnbench suite --limit``).

Usage: python benchmarks/bench_suite.py --repeats 3
       python benchmarks/bench_suite.py --repeats 2 --limit 200
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bench_eval import cpu_seconds  # noqa: E402

from hnbench.data import load_dataset  # noqa: E402
from hnbench.data.synthdense import generate_flickr30k  # noqa: E402
from hnbench.evaluation.suites import run_suite  # noqa: E402
from hnbench.registry import SUITES  # noqa: E402

EVALUATE = importlib.import_module("hnbench.evaluation.evaluate")  # the module (``hnbench.evaluation.evaluate`` is also the function)
SUITE = "bench-suite-overhead"
ENTRIES = (("synthdense", "test", "retrieval"), ("flickr30k", "karpathy-test", "retrieval"),
           ("flickr30k", "karpathy-val", "retrieval"))
SUITES.register(SUITE, "hnbench.evaluation.suites:fixed", help="the suite runner overhead benchmark: the suite vs one evaluate call per entry", entries=ENTRIES)
MODEL, WEIGHTS = "hnbench-tiny", "synthdense"
OPTIONS = {"use_cache": False, "progress": False}


def timed_evaluate(inside: list[tuple[float, float]]):
    """``EVALUATE.evaluate`` that adds each call's (wall, CPU) seconds to ``inside``."""
    real = EVALUATE.evaluate

    def evaluate(*args, **kwargs):
        c, s = cpu_seconds(), time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            inside.append((time.perf_counter() - s, cpu_seconds() - c))
    return evaluate


def child(side: str, root_map: str, limit: int | None) -> None:
    options = {**OPTIONS, "limit": limit}
    roots = json.loads(Path(root_map).read_text())
    small = load_dataset("synthdense", protocol="test")
    EVALUATE.evaluate(MODEL, small.drop_images(range(64, small.n_images)), pretrained=WEIGHTS,
                              **OPTIONS)  # warm-up
    inside: list[tuple[float, float]] = []
    EVALUATE.evaluate = timed_evaluate(inside)  # run_suite imports it from there at each call
    with tempfile.TemporaryDirectory() as out:
        c, s = cpu_seconds(), time.perf_counter()
        if side == "suite":
            run = run_suite(SUITE, [MODEL], pretrained=[WEIGHTS], data_root_map=root_map, output_dir=out, **options)
            assert run.ok, run.failures
            paths = {label: p for (_, label), p in run.results.items()}
        else:
            paths = {}
            for benchmark, protocol, _ in ENTRIES:
                kw = {"data_root": roots[benchmark]} if benchmark in roots else {}
                r = EVALUATE.evaluate(MODEL, benchmark, pretrained=WEIGHTS, protocol=protocol, output_dir=out,
                                              **kw, **options)
                paths[f"{benchmark}/{protocol}"] = str(r.path)
        wall, cpu = time.perf_counter() - s, cpu_seconds() - c
        results = {label: json.loads(Path(p).read_text()) for label, p in paths.items()}
    assert len(inside) == len(ENTRIES), inside
    print(json.dumps({"wall": wall, "cpu": cpu, "calls": [round(w, 3) for w, _ in inside],
                      "inside_wall": sum(w for w, _ in inside),
                      "inside_cpu": sum(c for _, c in inside),
                      "t2i_r1": {k: r["metrics"]["t2i"]["R@1"] for k, r in results.items()},
                      "settings": {k: r["settings"] for k, r in results.items()}}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=2014, help="generated Flickr30k-layout scenes (>= 2,014)")
    ap.add_argument("--data-root", default=None, help="where they are generated once (default: the temp dir)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--limit", type=int, default=None,
                    help="score a seeded N-image subset of each entry on both sides (the suite's --limit)")
    ap.add_argument("--child", choices=("suite", "singles"), help=argparse.SUPPRESS)
    ap.add_argument("--root-map", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.root_map, args.limit)
        return
    root = Path(args.data_root or Path(tempfile.gettempdir()) / f"hnbench-flickr30k-synthdense-{args.images}")
    generate_flickr30k(root, args.images, progress=True)
    with tempfile.TemporaryDirectory() as tmp:
        root_map = Path(tmp) / "roots.json"
        root_map.write_text(json.dumps({"flickr30k": str(root)}))
        runs: dict[str, list[dict]] = {"singles": [], "suite": []}
        for r in range(args.repeats):  # interleaved; the order alternates so neither side always goes first
            load_avg = os.getloadavg()[0]
            for side in (runs if r % 2 == 0 else reversed(list(runs))):
                argv = [sys.executable, __file__, "--child", side, "--root-map", str(root_map)] + (
                    ["--limit", str(args.limit)] if args.limit else [])
                proc = subprocess.run(argv, capture_output=True, text=True, check=False)
                if proc.returncode:
                    sys.exit(f"the {side} child failed:\n{proc.stderr[-3000:]}")
                runs[side].append(json.loads(proc.stdout.strip().splitlines()[-1]))
                print(f"  {side}: " + json.dumps({k: v for k, v in runs[side][-1].items() if k != "settings"}),
                      flush=True)
            print(f"repeat {r + 1}: load average {load_avg:.2f} -> {os.getloadavg()[0]:.2f}; " + ", ".join(
                f"{k} {v[-1]['wall']:.2f} s (CPU {v[-1]['cpu']:.2f} s)" for k, v in runs.items()), flush=True)

    def stat(side: str, key: str, f=np.median) -> float:
        return float(f([x[key] for x in runs[side]]))

    print(f"\n{'side':>8} {'min (s)':>9} {'median (s)':>11} {'CPU s (min)':>12} {'CPU s (med)':>12}")
    for side in runs:
        print(f"{side:>8} {stat(side, 'wall', min):>9.2f} {stat(side, 'wall'):>11.2f} {stat(side, 'cpu', min):>12.2f} "
              f"{stat(side, 'cpu'):>12.2f}")
    per = " ".join(f"{100 * (a['wall'] / b['wall'] - 1):+.1f}%" for a, b in zip(runs["suite"], runs["singles"]))
    print(f"suite overhead over the sum of its evaluations: min {100 * (stat('suite', 'wall', min) / stat('singles', 'wall', min) - 1):+.1f}%, "
          f"median {100 * (stat('suite', 'wall') / stat('singles', 'wall') - 1):+.1f}%, CPU (median) "
          f"{100 * (stat('suite', 'cpu') / stat('singles', 'cpu') - 1):+.1f}%, per repeat {per} (goal <= 2%)")
    print(f"same R@1 on both sides: {runs['suite'][-1]['t2i_r1'] == runs['singles'][-1]['t2i_r1']}; "
          f"same recorded settings: {all(x['settings'] == runs['singles'][0]['settings'] for v in runs.values() for x in v)}")

    def own(side: str, key: str) -> list[float]:  # a side's time outside its evaluate calls, per repeat
        return [x[key] - x[f"inside_{key}"] for x in runs[side]]

    print("\nwithin each child: time outside the evaluate calls (the runner's own work)")
    for key in ("wall", "cpu"):
        extra = [100 * (a - b) / x[f"inside_{key}"]
                 for a, b, x in zip(own("suite", key), own("singles", key), runs["suite"])]
        print(f"  {key}: suite {' '.join(f'{v:.3f}' for v in own('suite', key))} s, singles "
              f"{' '.join(f'{v:.3f}' for v in own('singles', key))} s; the suite's own work over its evaluations: "
              f"median {np.median(extra):+.2f}%, max {max(extra):+.2f}% (goal <= 2%)")
    for side in runs:
        inside = " ".join(f"{x['inside_wall']:.2f}" for x in runs[side])
        print(f"  {side}: time inside evaluate (wall) {inside} s")


if __name__ == "__main__":
    main()
