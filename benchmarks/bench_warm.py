"""Warm vs cold ``hnbench eval`` through the CLI, as wall time of the whole process, interleaved.

cold: an empty cache directory (every image and caption encoded, the model built);
warm: the same command again on the cache the cold run filled (every embedding a hit: the model is
not built, its fingerprint is remembered, open_clip is not imported).

Usage:
    python benchmarks/bench_warm.py                                    # bundled tiny model, synthdense test
    python benchmarks/bench_warm.py --model ViT-B-32 --random-init-checkpoint /tmp/vitb32.safetensors
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def make_checkpoint(model: str, path: Path, seed: int = 0) -> None:
    """A seeded random-init checkpoint (no real weights offline): the warm path treats it like any file."""
    import torch
    from safetensors.torch import save_file

    from hnbench.models import load_model

    torch.manual_seed(seed)
    enc = load_model(model)
    save_file({k: v.contiguous() for k, v in enc.model.state_dict().items()}, str(path))


def run(args: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "hnbench", "-q", *args], check=True, env=env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="hnbench-tiny")
    ap.add_argument("--pretrained", default=None, help="default: 'synthdense' for hnbench-tiny")
    ap.add_argument("--random-init-checkpoint", type=Path, help="write a seeded random-init checkpoint here "
                    "(if missing) and evaluate it as --pretrained")
    ap.add_argument("--dataset", default="synthdense")
    ap.add_argument("--protocol", default="test")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    pretrained = args.pretrained or ("synthdense" if args.model == "hnbench-tiny" else None)
    if args.random_init_checkpoint:
        if not args.random_init_checkpoint.exists():
            args.random_init_checkpoint.parent.mkdir(parents=True, exist_ok=True)
            make_checkpoint(args.model, args.random_init_checkpoint)
        pretrained = str(args.random_init_checkpoint)
    cold, warm = [], []
    for _ in range(args.repeats):  # interleaved: the shared machine's load hits both alike
        with tempfile.TemporaryDirectory() as tmp:
            cmd = ["eval", "--model", args.model, "--dataset", args.dataset, "--protocol", args.protocol,
                   "--cache-dir", f"{tmp}/cache", "--output", f"{tmp}/out"]
            cmd += ["--pretrained", pretrained] if pretrained else []
            cold.append(run(cmd))
            warm.append(run(cmd))
    c, w = float(np.median(cold)), float(np.median(warm))
    print(f"{args.model} on {args.dataset}/{args.protocol}: cold {' '.join(f'{x:.2f}' for x in cold)} s, "
          f"warm {' '.join(f'{x:.2f}' for x in warm)} s; median warm/cold = {100 * w / c:.1f}%")


if __name__ == "__main__":
    main()
