"""``--backend auto`` vs torch vs faiss vs raw faiss ``IndexFlatIP`` top-k, interleaved, as ratios.

Raw faiss is the floor: a plain top-k search with no ranks, ties or best-wrong. The hnbench backends
return exact ranks with pessimistic ties for every query. Data as in bench_search.py (query i =
gallery i + noise); ``--noise`` sets how deep the positives rank (4: R@10 ~ 0.99, 10: ~0.2).
``--old-search FILE`` also times another version of hnbench/search/exact.py (e.g. the main checkout's) for
a before/after row. The first ``auto`` call on a new machine calibrates (~30 s, once; not timed
here: a warm-up call runs first).

Usage: python benchmarks/bench_backends.py --sizes 1000 10000 30000 --noise 4 10 --repeats 2
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bench_search import make_data  # noqa: E402

from hnbench.search.exact import retrieve  # noqa: E402


def raw_faiss(q: np.ndarray, g: np.ndarray, k: int) -> None:
    import faiss

    index = faiss.IndexFlatIP(g.shape[1])
    index.add(g)
    index.search(q, k)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 30000])
    ap.add_argument("--noise", type=float, nargs="+", default=[4.0, 10.0])
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--old-search", type=Path, help="another hnbench/search/exact.py to time as 'faiss (old)'")
    args = ap.parse_args()
    runs = {"raw faiss": lambda q, g, p, i: raw_faiss(q, g, args.k)}
    for name in ("auto", "torch", "faiss"):
        runs[name] = lambda q, g, p, i, b=name: retrieve(q, g, p, i, k=args.k, backend=b, device="cpu")
    if args.old_search:
        spec = importlib.util.spec_from_file_location("old_search", args.old_search)
        old = sys.modules["old_search"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(old)
        for b in ("torch", "faiss"):
            runs[f"{b} (old)"] = lambda q, g, p, i, b=b: old.retrieve(q, g, p, i, k=args.k, backend=b, device="cpu")
    retrieve(*make_data(4000, args.dim, 4.0, 1), np.arange(4001), np.arange(4000), backend="auto")  # calibrate
    print(f"d={args.dim}, k={args.k}, N=M=size; median of {args.repeats} interleaved repeats; seconds (÷ raw faiss)")
    print("| size | noise | R@10 | " + " | ".join(runs) + " | auto ran |")
    print("|---:|---:|---:|" + "---:|" * len(runs) + "---|")
    for size in args.sizes:
        for noise in args.noise:
            q, g = make_data(size, args.dim, noise, 0)
            ptr, idx = np.arange(size + 1, dtype=np.int64), np.arange(size, dtype=np.int64)
            times: dict[str, list[float]] = {n: [] for n in runs}
            for _ in range(args.repeats):
                for name, fn in runs.items():
                    start = time.perf_counter()
                    fn(q, g, ptr, idx)
                    times[name].append(time.perf_counter() - start)
            ref = retrieve(q, g, ptr, idx, k=args.k, backend="torch")
            auto = retrieve(q, g, ptr, idx, k=args.k, backend="auto")
            assert np.array_equal(auto.rank, ref.rank) and np.array_equal(auto.tied, ref.tied)
            med = {n: float(np.median(t)) for n, t in times.items()}
            cells = [f"{med[n]:.2f} ({med[n] / med['raw faiss']:.2f}×)" for n in runs]
            print(f"| {size:,} | {noise:g} | {np.mean(ref.rank <= 10):.2f} | " + " | ".join(cells)
                  + f" | {auto.backend} |", flush=True)


if __name__ == "__main__":
    main()
