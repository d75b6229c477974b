"""Embedding cache and encoding overhead, measured side by side in one run.

1. *forward*: pixels decoded and transformed and captions tokenized before the clock starts; only
   the model's ``encode_image``/``encode_text`` over the same batches are timed.
2. *harness encode*: ``encode_images`` + ``encode_texts`` without cache (decoding in DataLoader
   workers, tokenizing, copying back) — target: forward / harness >= 90%.
3. *cold evaluate*: the whole ``hnbench.evaluation.evaluate`` with an empty cache directory (encode, write shards,
   search, metrics, result files).
4. *warm evaluate*: the same call again: hash the images and captions, read the shards, search —
   target: warm / cold <= 5%. Zero items may be encoded.

Usage:
    python benchmarks/bench_cache.py                                   # ViT-B-32 (random init) on synthdense test
    python benchmarks/bench_cache.py --model hnbench-tiny --limit 500
    python benchmarks/bench_cache.py --batch-sizes 8 16 32 64 128      # + image forward throughput per batch size
    python benchmarks/bench_cache.py --device cuda --batch-size 256 --amp   # the GPU run
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

from hnbench.data import load_dataset
from hnbench.evaluation.encode import _autocast, encode_images, encode_texts
from hnbench.evaluation.evaluate import evaluate
from hnbench.models import load_model


def forward_seconds(encoder, pixels: torch.Tensor, tokens: torch.Tensor, batch_size: int, text_batch_size: int,
                    amp: bool) -> tuple[float, float]:
    """Seconds of the model alone on prepared inputs: (images, texts)."""
    def run(x: torch.Tensor, bs: int, fn) -> float:
        start = time.perf_counter()
        for s in range(0, len(x), bs):
            with _autocast(encoder.device, amp):
                fn(x[s:s + bs]).float().cpu()
        return time.perf_counter() - start

    return (run(pixels, batch_size, encoder.encode_images), run(tokens, text_batch_size, encoder.encode_texts))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="ViT-B-32")
    ap.add_argument("--pretrained")
    ap.add_argument("--dataset", default="synthdense")
    ap.add_argument("--limit", type=int, help="first N images (and their captions) only")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--num-workers", type=int)
    ap.add_argument("--amp", action="store_true")
    ap.add_argument("--batch-sizes", type=int, nargs="*", default=[], help="image forward throughput sweep")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved repeats; medians are reported")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)

    ds = load_dataset(args.dataset)
    if args.limit and args.limit < ds.n_images:
        ds = ds.drop_images(range(args.limit, ds.n_images), reason="--limit")
    torch.manual_seed(0)
    enc = load_model(args.model, args.pretrained, device=args.device)
    tbs = max(args.batch_size, 64)
    print(f"torch {torch.__version__} threads={torch.get_num_threads()} load average {os.getloadavg()[0]:.1f} "
          f"device={args.device} model={args.model} "
          f"dataset={ds.name}/{ds.protocol} images={ds.n_images} captions={ds.n_captions} "
          f"batch={args.batch_size}/{tbs} amp={args.amp}")

    pixels = torch.stack([enc.image_transform(ds.images.open(i)) for i in range(ds.n_images)])
    tokens = enc.tokenize(ds.captions).tokens
    if enc.device.type == "cuda":
        pixels, tokens = pixels.pin_memory(), tokens.pin_memory()
    forward_seconds(enc, pixels[: args.batch_size], tokens[:tbs], args.batch_size, tbs, args.amp)  # warm-up
    # Interleaved repeats, medians: on a shared machine the load drifts between measurements.
    runs: dict[str, list[float]] = {"f_img": [], "f_txt": [], "h_img": [], "h_txt": []}
    for _ in range(args.repeats):
        f_img, f_txt = forward_seconds(enc, pixels, tokens, args.batch_size, tbs, args.amp)
        t = time.perf_counter()
        encode_images(enc, ds.images, batch_size=args.batch_size, num_workers=args.num_workers, amp=args.amp,
                      progress=False)
        runs["h_img"].append(time.perf_counter() - t)
        t = time.perf_counter()
        encode_texts(enc, ds.captions, batch_size=tbs, amp=args.amp, progress=False, num_workers=args.num_workers)
        runs["h_txt"].append(time.perf_counter() - t)
        runs["f_img"].append(f_img)
        runs["f_txt"].append(f_txt)
    f_img, f_txt, h_img, h_txt = (statistics.median(runs[k]) for k in ("f_img", "f_txt", "h_img", "h_txt"))

    with tempfile.TemporaryDirectory() as tmp:
        kw = dict(device=args.device, batch_size=args.batch_size, num_workers=args.num_workers, amp=args.amp,
                  progress=False, cache_dir=Path(tmp) / "emb")
        t = time.perf_counter()
        cold = evaluate(enc, ds, output_dir=Path(tmp) / "cold", **kw)
        cold_s = time.perf_counter() - t
        warm_runs = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            warm = evaluate(enc, ds, output_dir=Path(tmp) / "warm", **kw)
            warm_runs.append(time.perf_counter() - t)
        warm_s = statistics.median(warm_runs)
    assert warm.metrics == cold.metrics, "warm run changed the scores"

    print(f"\n{'stage (median of ' + str(args.repeats) + ')':<28} {'seconds':>9} {'items/s':>9}")
    n_items = ds.n_images + ds.n_captions
    rows = [("forward: images", f_img, ds.n_images), ("forward: texts", f_txt, ds.n_captions),
            ("harness encode: images", h_img, ds.n_images), ("harness encode: texts", h_txt, ds.n_captions),
            ("evaluate, cold cache", cold_s, n_items), ("evaluate, warm cache", warm_s, n_items)]
    for name, secs, n in rows:
        print(f"{name:<28} {secs:>9.2f} {n / secs:>9.1f}")
    print(f"\nencode throughput vs pure forward: images {100 * f_img / h_img:.1f}%, texts {100 * f_txt / h_txt:.1f}%, "
          f"both {100 * (f_img + f_txt) / (h_img + h_txt):.1f}%   (target >= 90%)")
    print(f"warm / cold evaluate: {100 * warm_s / cold_s:.1f}%   (target <= 5%)")
    print(f"cold encoded {cold.settings['encoding']['encoded']}, warm encoded {warm.settings['encoding']['encoded']}"
          f", warm cached {warm.settings['encoding']['cached']}")
    print(f"warm timings: {warm.timings}; load average now {os.getloadavg()[0]:.1f}")

    if args.batch_sizes:
        print(f"\nimage forward throughput by batch size ({min(len(pixels), 256)} images)")
        sub = pixels[:256]
        for bs in args.batch_sizes:
            forward_seconds(enc, sub[:bs], tokens[:1], bs, 1, args.amp)
            secs = forward_seconds(enc, sub, tokens[:1], bs, 1, args.amp)[0]
            print(f"  batch {bs:>4}: {len(sub) / secs:8.1f} images/s")


if __name__ == "__main__":
    main()
