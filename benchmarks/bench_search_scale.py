"""Exact search at 10k / 100k / 1M gallery items: time, throughput and memory per backend, side by side.

Gallery: M random unit vectors of dimension d; queries: N noisy copies of random gallery items (each
one's own item is its only positive). On CPU, N is capped by ``--max-queries`` (an exact M x M search
at d=768 is 1.5e15 flops for M = 1M: hours on a CPU) and the full-size time is extrapolated from the
measured queries/s — the per-query cost of an exact search does not depend on N. The peak RSS column
shows the memory stays O((N + M) d) + one score block; the N x M column what a full matrix would take.

Usage:
    python benchmarks/bench_search_scale.py                                     # CPU: 10k 100k 1M, d=768
    python benchmarks/bench_search_scale.py --sizes 200000 --dim 32 --max-queries 200000   # 200k x 200k
    python benchmarks/bench_search_scale.py --device cuda --max-queries 0       # the GPU script: all queries
    python benchmarks/bench_search_scale.py --device cuda --approximate         # + faiss HNSW recall vs exact
    python benchmarks/bench_search_scale.py --sizes 100000 1000000 --dim 512 --max-queries 4096 \
        --backends raw-faiss auto torch faiss                  # issue 14: auto vs the fastest exact backend

``raw-faiss`` is a plain ``IndexFlatIP`` top-k (no ranks, ties or best wrong: the floor); ``auto``
prints the backend it ran in the "ran" column.
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np
import torch

from hnbench.search import calibration as search_calibration
from hnbench.search.approximate import retrieve_approximate
from hnbench.search.exact import available_backends, retrieve


def unit_rows(x: np.ndarray, block: int = 65536) -> np.ndarray:
    """Normalise rows in place, in blocks (no full-size temporary)."""
    for s in range(0, len(x), block):
        x[s:s + block] /= np.linalg.norm(x[s:s + block], axis=1, keepdims=True)
    return x


def make_data(m: int, n: int, dim: int, noise: float, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    g = np.empty((m, dim), dtype=np.float32)
    for s in range(0, m, 65536):
        g[s:s + 65536] = rng.standard_normal((min(m, s + 65536) - s, dim), dtype=np.float32)
    unit_rows(g)
    owner = np.sort(rng.choice(m, n, replace=False)) if n < m else np.arange(m)
    q = g[owner] + noise * rng.standard_normal((n, dim), dtype=np.float32) / np.sqrt(dim, dtype=np.float32)
    return unit_rows(q), g, owner


def raw_faiss(q: np.ndarray, g: np.ndarray, k: int) -> None:
    import faiss

    index = faiss.IndexFlatIP(g.shape[1])
    index.add(g)
    index.search(q, k)


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--max-queries", type=int, default=2048, help="queries searched per size (0: all)")
    ap.add_argument("--noise", type=float, default=4.0)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--backends", nargs="+", help="default: torch and faiss (CPU) / torch and faiss-gpu (CUDA)")
    ap.add_argument("--approximate", action="store_true", help="also faiss HNSW, with its recall vs exact")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    on_cuda = torch.device(args.device).type == "cuda"
    backends = args.backends or (["torch", "faiss-gpu"] if on_cuda else ["torch", "faiss"])
    backends = [b for b in backends if b in [*available_backends(), "auto"]
                or (b == "raw-faiss" and "faiss" in available_backends())]
    if "auto" in backends and not on_cuda:  # the one-off calibration (stored in the cache), not timed
        from hnbench.search.exact import _measure_costs

        search_calibration.costs(args.sizes[0], _measure_costs)
    gpus = torch.cuda.device_count() if on_cuda else 0
    print(f"torch {torch.__version__} threads={torch.get_num_threads()} device={args.device} gpus={gpus} "
          f"available={available_backends()} dim={args.dim} k={args.k} noise={args.noise}")
    header = (f"{'gallery':>9} {'queries':>8} {'backend':>10} {'ran':>9} {'seconds':>9} {'queries/s':>10} {'full N=M (s)':>12} "
              f"{'peakRSS GiB':>11} {'GPU GiB':>8} {'inputs GiB':>10} {'NxM GiB':>9}")
    print(header)
    print("-" * len(header))
    for m in args.sizes:
        n = m if args.max_queries <= 0 else min(m, args.max_queries)
        q, g, owner = make_data(m, n, args.dim, args.noise, args.seed)
        ptr = np.arange(n + 1)
        inputs = (q.nbytes + g.nbytes) / 2**30
        ranks = {}
        for backend in backends:
            if backend == "raw-faiss":
                raw_faiss(q[:256], g[:1000], args.k)
                t = time.perf_counter()
                raw_faiss(q, g, args.k)
                secs = time.perf_counter() - t
                print(f"{m:>9} {n:>8} {backend:>10} {'':>9} {secs:>9.2f} {n / secs:>10.0f} {m / (n / secs):>12.0f} "
                      f"{peak_rss_gib():>11.2f}", flush=True)
                continue
            w = min(n, 256)  # warm-up: thread pools, CUDA context, faiss code paths
            retrieve(q[:w], g, ptr[: w + 1], owner[:w], k=args.k, backend=backend, device=args.device)
            if on_cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            t = time.perf_counter()
            out = retrieve(q, g, ptr, owner, k=args.k, backend=backend, device=args.device)
            secs = time.perf_counter() - t
            # torch's allocator only: faiss-gpu allocates on its own, so its rows show nan
            gpu_gib = torch.cuda.max_memory_allocated() / 2**30 if on_cuda and out.backend == "torch" else float("nan")
            ranks[backend] = out.rank
            print(f"{m:>9} {n:>8} {backend:>10} {out.backend:>9} {secs:>9.2f} {n / secs:>10.0f} {m / (n / secs):>12.0f} "
                  f"{peak_rss_gib():>11.2f} {gpu_gib:>8.2f} {inputs:>10.2f} {n * m * 4 / 2**30:>9.1f}", flush=True)
            del out
        if len(ranks) > 1:
            base = next(iter(ranks.values()))
            print(f"{'':>9} ranks differing between backends: {sum(int((r != base).sum()) for r in ranks.values())}")
        if args.approximate:
            t = time.perf_counter()
            out = retrieve_approximate(q, g, ptr, owner, k=args.k, index="hnsw", sample=min(n, 1000))
            secs = time.perf_counter() - t
            print(f"{m:>9} {n:>8} {'hnsw':>10} {secs:>9.2f} {n / secs:>10.0f} {'(incl. build)':>12} "
                  f"{peak_rss_gib():>11.2f}   recall@{args.k} vs exact {out.recall_vs_exact['recall@k']:.4f}, "
                  f"equal ranks {out.recall_vs_exact['rank_agreement']:.4f}", flush=True)
        del q, g


if __name__ == "__main__":
    main()
