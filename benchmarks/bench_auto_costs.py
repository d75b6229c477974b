"""The per-query costs ``--backend auto`` calibrates on (faiss list, full-row count, torch path), at any
gallery size, in interleaved rounds: do faiss and torch keep their order beyond the calibrated sizes?

Uses :func:`hnbench.search.exact._measure_costs`, the function the one-off calibration calls (synthetic unit
vectors, d = 512, each query near its own gallery item), so the numbers compare with the stored
``search-calibration.json``.

Usage: python benchmarks/bench_auto_costs.py --sizes 32000:4096 1000000:1024 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import time

from hnbench.search.exact import _measure_costs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", default=["32000:4096", "1000000:1024"],
                    help="GALLERY:QUERIES pairs, measured in this order in every round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dim", type=int, default=512)
    args = ap.parse_args()
    sizes = [tuple(int(x) for x in s.split(":")) for s in args.sizes]
    for r in range(args.rounds):
        for m, nq in sizes:
            t = time.perf_counter()
            c = _measure_costs(m, nq, args.dim, seed=r)
            print(f"round {r} load {os.getloadavg()[0]:.2f} M={m:>8} queries={nq}: "
                  + ", ".join(f"{k} {v * 1e6:.0f} us" for k, v in c.items())
                  + f"  faiss/torch {c['faiss'] / c['torch']:.2f}  ({time.perf_counter() - t:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
