"""Time and peak memory of hnbench.hardness.analyze on pre-computed caption embeddings.

Two synthetic sets of N unit vectors in d dimensions:
- random:     isotropic Gaussian directions (pairwise cosine ~ 0, no near-duplicates);
- structured: dense-caption-like families, x = a·c + b·u_family + e·w_item (c shared by all, u one per
              family of --family-size, w one per item; a² = 0.85, b² = 0.10, e² = 0.05), so pairwise
              cosine ~ 0.85 and within-family ~ 0.95, as measured on DOCCI-like benchmarks.
Hardest negatives are always exact (blocked pass, O(block · N) memory); pairwise statistics are exact
up to --exact-max items and sampled beyond. Memory: peak RSS of the process, and on CUDA the peak
allocated device memory; "data" is the size of the embeddings themselves, "rss_mb_before" the
process before the analysis (imports + data), "peak_rss_mb_during" the peak while analysing.

Usage:
    python benchmarks/bench_hardness.py --n 100000 --dim 512                     # CPU, both sets
    python benchmarks/bench_hardness.py --n 1000000 --dim 512 --device cuda      # GPU, 1M
    python benchmarks/bench_hardness.py --n 20000 --exact-max 20000 --kinds structured
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import numpy as np
import torch

from hnbench.hardness import analyze


def make_vectors(kind: str, n: int, dim: int, family_size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(n, dim) float32 unit vectors and each one's family label (the item itself for ``random``)."""
    rng = np.random.default_rng(seed)
    x = np.empty((n, dim), np.float32)
    fam = np.arange(n) // family_size
    if kind == "structured":
        common = rng.standard_normal(dim, dtype=np.float32)
        common /= np.linalg.norm(common)
        fams = rng.standard_normal((int(fam[-1]) + 1, dim), dtype=np.float32)
        fams /= np.linalg.norm(fams, axis=1, keepdims=True)
    for s in range(0, n, 8192):  # chunks keep the float temporaries small
        w = rng.standard_normal((min(n, s + 8192) - s, dim), dtype=np.float32)
        w /= np.linalg.norm(w, axis=1, keepdims=True)
        if kind == "structured":
            w = np.sqrt(0.85) * common + np.sqrt(0.10) * fams[fam[s:s + len(w)]] + np.sqrt(0.05) * w
            w /= np.linalg.norm(w, axis=1, keepdims=True)
        x[s:s + len(w)] = w
    return x, fam if kind == "structured" else np.arange(n)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _status_mb(key: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def reset_peak_rss() -> float:
    """Reset the kernel's peak-RSS mark (Linux >= 4.0) so the next peak is the analysis' own; current RSS."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    return _status_mb("VmRSS")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--kinds", nargs="+", default=["random", "structured"], choices=["random", "structured"])
    ap.add_argument("--family-size", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--exact-max", type=int, default=20_000, help="exact all-pairs statistics up to this N")
    ap.add_argument("--sample-pairs", type=int, default=1_000_000)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--n-batches", type=int, default=200)
    ap.add_argument("--block-mb", type=int, help="score block budget (default: 64 MiB CPU, 1 GiB CUDA)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write the measurements here")
    args = ap.parse_args()
    torch.set_num_threads(torch.get_num_threads())
    rows = []
    for kind in args.kinds:
        t = time.perf_counter()
        x, fam = make_vectors(kind, args.n, args.dim, args.family_size, args.seed)
        gen = time.perf_counter() - t
        rss_data = reset_peak_rss()
        if args.device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
        t = time.perf_counter()
        r = analyze(x, labels=fam.astype(str), label_field="family" if kind == "structured" else "item",
                    batch_size=args.batch_size, n_batches=args.n_batches, exact_max=args.exact_max,
                    n_sample_pairs=args.sample_pairs, seed=args.seed, device=args.device,
                    block_bytes=args.block_mb * 2**20 if args.block_mb else None)
        total = time.perf_counter() - t
        row = {"kind": kind, "n": args.n, "dim": args.dim, "device": args.device, "generate_s": round(gen, 2),
               "analyze_s": round(total, 2), "stages_s": r.timings, "data_mb": round(x.nbytes / 2**20, 1),
               "rss_mb_before": round(rss_data, 1), "peak_rss_mb_during": round(_status_mb("VmHWM"), 1),
               "peak_rss_mb_process": round(peak_rss_mb(), 1),
               "pairwise_mean": r.text.pairwise.mean, "pairwise_stderr": r.text.pairwise.stderr,
               "pairwise_method": r.text.pairwise.method, "hardest_mean": r.text.nearest.mean,
               "bucket_shares": dict(zip(r.text.buckets.labels, [round(s, 4) for s in r.text.buckets.shares]))}
        if args.device.startswith("cuda"):
            row["peak_cuda_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
        s = r.structure.get("text")
        if kind == "structured" and s is not None:
            row.update(within_mean=s.within.mean, between_mean=s.between.mean, nearest_same_family=s.nearest_same_label)
        rows.append(row)
        print(json.dumps(row, indent=1), flush=True)
        del x, r
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
