"""Time hnbench.search.exact.retrieve with the torch and faiss backends side by side.

Synthetic one-positive-per-query setup (N = M = size): gallery vectors are random unit vectors,
query i is gallery i plus Gaussian noise (re-normalised), its only positive is gallery i.
Usage: python benchmarks/bench_search.py --sizes 5000 50000 --dim 512 --k 10 --repeats 3
"""

from __future__ import annotations

import argparse
import logging
import resource
import statistics
import time

import numpy as np
import torch

from hnbench.search.exact import available_backends, retrieve


class _FallbackCounter(logging.Handler):
    """Counts queries the faiss backend handed to the exact torch path (from its log record)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.rows = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "not decidable" in record.msg:
            self.rows += int(record.args[1])


def make_data(size: int, dim: int, noise: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Unit gallery (size, dim) and queries = normalise(gallery + noise * N(0, 1/dim))."""
    rng = np.random.default_rng(seed)
    g = rng.standard_normal((size, dim), dtype=np.float32)
    g /= np.linalg.norm(g, axis=1, keepdims=True)
    q = g + noise * rng.standard_normal((size, dim), dtype=np.float32) / np.sqrt(dim, dtype=np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    return q, g


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far (ru_maxrss is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[5000, 50000])
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--noise", type=float, default=4.0, help="query noise; larger -> deeper ranks, more ties")
    ap.add_argument("--backends", nargs="+", default=["torch", "faiss"])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    counter = _FallbackCounter()
    logging.getLogger("hnbench.search.exact").addHandler(counter)
    logging.getLogger("hnbench.search.exact").setLevel(logging.INFO)
    print(f"torch {torch.__version__} threads={torch.get_num_threads()} device={args.device} "
          f"available={available_backends()} dim={args.dim} k={args.k} repeats={args.repeats} noise={args.noise}")
    header = f"{'size':>7} {'backend':>9} {'seconds':>9} {'queries/s':>10} {'faiss/torch':>11} " \
             f"{'R@1':>6} {'fallback':>8} {'peakRSS MB':>10}"
    print(header)
    print("-" * len(header))
    for size in args.sizes:
        q, g = make_data(size, args.dim, args.noise, args.seed)
        ptr, idx = np.arange(size + 1, dtype=np.int64), np.arange(size, dtype=np.int64)
        times: dict[str, float] = {}
        ranks = {}
        for backend in args.backends:
            # Warm-up on a slice: thread pools, BLAS and faiss index code paths initialised.
            w = min(size, 512)
            retrieve(q[:w], g, ptr[: w + 1], idx[:w], k=args.k, backend=backend, device=args.device)
            runs = []
            counter.rows = 0
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                out = retrieve(q, g, ptr, idx, k=args.k, backend=backend, device=args.device)
                runs.append(time.perf_counter() - t0)
            times[backend] = statistics.median(runs)
            ranks[backend] = out.rank
            ratio = times[backend] / times["torch"] if "torch" in times and backend != "torch" else float("nan")
            fallback = counter.rows // args.repeats if backend != "torch" else 0
            print(f"{size:>7} {out.backend:>9} {times[backend]:>9.3f} {size / times[backend]:>10.0f} "
                  f"{ratio:>11.2f} {100 * np.mean(out.rank == 1):>6.1f} {fallback:>8} {peak_rss_mb():>10.0f}",
                  flush=True)
        if len(ranks) > 1:
            base = next(iter(ranks.values()))
            n_diff = sum(int(np.sum(r != base)) for r in ranks.values())
            print(f"{'':>7} ranks differing between backends: {n_diff}")


if __name__ == "__main__":
    main()
