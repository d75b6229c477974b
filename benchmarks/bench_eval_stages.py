"""Where a cold ``evaluate`` spends its time, stage by stage, against the same stage of a minimal loop.

Interleaved, once per repeat: the image stage (decode + transform + forward) of a hand-written loop and
of :func:`hnbench.evaluation.encode.encode_images` with 0 and 2 DataLoader workers; the same for captions
(tokenize + forward); and the whole :func:`hnbench.evaluation.evaluate.evaluate` (cache off, result files to a
temporary folder) with 0 and 2 workers. Prints the minimum and median of each.

Usage: python benchmarks/bench_eval_stages.py --protocol test --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable

import torch

from hnbench.data import load_dataset
from hnbench.evaluation.encode import encode_images, encode_texts
from hnbench.evaluation.evaluate import evaluate
from hnbench.models import load_model


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--protocol", default="test")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=64)
    args = ap.parse_args()
    ds = load_dataset("synthdense", protocol=args.protocol)
    enc = load_model("hnbench-tiny", "synthdense")
    bs = args.batch_size

    @torch.inference_mode()
    def mini_images() -> None:
        for s in range(0, ds.n_images, bs):
            px = torch.stack([enc.image_transform(ds.images.open(i)) for i in range(s, min(ds.n_images, s + bs))])
            enc.model.encode_image(px, normalize=True)

    @torch.inference_mode()
    def mini_texts() -> None:
        for s in range(0, ds.n_captions, max(bs, 64)):
            enc.model.encode_text(enc.tokenizer(ds.captions[s:s + max(bs, 64)]), normalize=True)

    def whole(workers: int) -> None:
        with tempfile.TemporaryDirectory() as out:
            evaluate(enc, ds, output_dir=out, batch_size=bs, progress=False, use_cache=False, num_workers=workers)

    stages: dict[str, Callable[[], object]] = {
        "images, minimal loop": mini_images,
        "images, hnbench 0 workers": lambda: encode_images(enc, ds.images, batch_size=bs, num_workers=0, progress=False),
        "images, hnbench 2 workers": lambda: encode_images(enc, ds.images, batch_size=bs, num_workers=2, progress=False),
        "texts, minimal loop": mini_texts,
        "texts, hnbench 0 workers": lambda: encode_texts(enc, ds.captions, batch_size=max(bs, 64), num_workers=0,
                                                         progress=False),
        "texts, hnbench 2 workers": lambda: encode_texts(enc, ds.captions, batch_size=max(bs, 64), num_workers=2,
                                                         progress=False),
        "evaluate, 0 workers": lambda: whole(0),
        "evaluate, 2 workers": lambda: whole(2),
    }
    mini_images()  # warm-up
    runs: dict[str, list[float]] = {k: [] for k in stages}
    for _ in range(args.repeats):
        for name, fn in stages.items():
            runs[name].append(timed(fn))
    for name, v in runs.items():
        print(f"{name:>28}: min {min(v):.3f} s, median {statistics.median(v):.3f} s  "
              + " ".join(f"{x:.3f}" for x in v))


if __name__ == "__main__":
    main()
