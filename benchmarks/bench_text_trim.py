"""Trimmed open_clip text batches vs padded ones, side by side in one run (issue 24, Performance).

1. *text encoding*, the bundled ``hnbench-tiny`` (context 256) on synthdense captions (148–226 tokens): the
   same length-sorted batches run padded to the context (what every open_clip batch did before) and trimmed to
   their longest caption (:func:`hnbench.models.openclip.encode_text_trimmed`), (a) the forward alone on
   pre-tokenized batches, (b) the whole ``hnbench.evaluation.encode.encode_texts`` (tokenizing included, no cache, no
   workers). Goal: trimmed ≤ 0.8× padded (CPU time).
2. *end to end* at context 248: ``hnbench.evaluation.evaluate`` cold (cache off) against bench_eval.py's minimal loop
   (imported from there, which pads every caption to the context), on a random-init model of hnbench-tiny's
   shape built at 77 positions and stretched the Long-CLIP way to 248 (``ModelFamily.stretch``); the same
   evaluate with the batches padded is shown too. Goal: evaluate ≤ 0.9× the minimal loop.

Every variant runs once per repeat, interleaved; the load average is printed with each repeat; the table gives
the minimum and median wall time, the median CPU time (this process and finished children) and the ratios.

Usage: python benchmarks/bench_text_trim.py --repeats 5 [--protocol test] [--batch-size 64] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from bench_eval import cpu_seconds, minimal_loop_seconds  # noqa: E402  (the minimal loop: imported, not copied)

from hnbench.data import load_dataset  # noqa: E402
from hnbench.evaluation.encode import encode_texts  # noqa: E402
from hnbench.evaluation.evaluate import evaluate  # noqa: E402
from hnbench.models import load_model  # noqa: E402
from hnbench.models.family import family_of  # noqa: E402
from hnbench.models.openclip import CONFIG_DIR, OpenCLIPEncoder  # noqa: E402


class PaddedEncoder(OpenCLIPEncoder):
    """The same model, every text batch run padded to the context (open_clip's ``encode_text``, as before)."""

    @torch.inference_mode()
    def encode_texts(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model.encode_text(tokens.to(self.device), normalize=True).float()


def padded(encoder: OpenCLIPEncoder) -> PaddedEncoder:
    return PaddedEncoder(encoder.model, encoder.tokenizer, encoder.image_transform, encoder.info)


def run_interleaved(variants: dict[str, Callable[[], object]], repeats: int) -> tuple[dict[str, list[float]],
                                                                                      dict[str, list[float]]]:
    wall: dict[str, list[float]] = {k: [] for k in variants}
    cpu: dict[str, list[float]] = {k: [] for k in variants}
    for r in range(repeats):
        load = os.getloadavg()[0]
        for name, fn in variants.items():
            c, s = cpu_seconds(), time.perf_counter()
            fn()
            wall[name].append(time.perf_counter() - s)
            cpu[name].append(cpu_seconds() - c)
        print(f"  repeat {r + 1}: load average {load:.2f} -> {os.getloadavg()[0]:.2f}; "
              + ", ".join(f"{k} {v[-1]:.3f} s" for k, v in wall.items()), flush=True)
    return wall, cpu


def table(wall: dict[str, list[float]], cpu: dict[str, list[float]], base: str) -> None:
    bw, bc = float(np.median(wall[base])), float(np.median(cpu[base]))
    print(f"  {'variant':>34} {'min (s)':>8} {'median (s)':>10} {'CPU s (med)':>11} {'wall/' + base[:8]:>14} "
          f"{'CPU/' + base[:8]:>13}  per-repeat wall ratios")
    for name in wall:
        w, c = float(np.median(wall[name])), float(np.median(cpu[name]))
        per = " ".join(f"{a / b:.2f}" for a, b in zip(wall[name], wall[base]))
        print(f"  {name:>34} {min(wall[name]):>8.3f} {w:>10.3f} {c:>11.3f} {w / bw:>14.2f} {c / bc:>13.2f}  {per}")


def text_encoding(args: argparse.Namespace) -> None:
    captions = load_dataset("synthdense", protocol=args.protocol).captions
    trimmed = load_model("hnbench-tiny", "synthdense")
    pad = padded(trimmed)
    lengths = trimmed.tokenize(captions).lengths
    order = sorted(captions, key=len, reverse=True)  # the batches encode_texts makes
    batches = [trimmed.tokenize(order[s:s + args.text_batch_size]).tokens
               for s in range(0, len(order), args.text_batch_size)]
    cut = [int(b.argmax(dim=-1).max()) + 1 for b in batches]
    print(f"\n1. text encoding: hnbench-tiny (context {trimmed.info.context_length}), {len(captions)} synthdense/"
          f"{args.protocol} captions of {lengths.min()}–{lengths.max()} tokens (median {np.median(lengths):.0f}); "
          f"{len(batches)} batches of {args.text_batch_size}, trimmed to {min(cut)}–{max(cut)} tokens "
          f"(mean {np.mean(cut):.0f}); {torch.get_num_threads()} torch threads")

    def forward(encoder: OpenCLIPEncoder) -> list[torch.Tensor]:
        return [encoder.encode_texts(b) for b in batches]

    a, b = torch.cat(forward(trimmed)), torch.cat(forward(pad))  # warm-up, and the difference
    print(f"  max |trimmed - padded| over the embeddings: {float((a - b).abs().max()):.1e}")

    def whole(encoder: OpenCLIPEncoder) -> np.ndarray:
        return encode_texts(encoder, captions, batch_size=args.text_batch_size, progress=False, num_workers=0).vectors

    print("  (a) the forward alone, pre-tokenized length-sorted batches")
    table(*run_interleaved({"padded": lambda: forward(pad), "trimmed": lambda: forward(trimmed)}, args.repeats),
          base="padded")
    print("  (b) encode_texts (tokenize + forward, no cache, no workers)")
    table(*run_interleaved({"padded": lambda: whole(pad), "trimmed": lambda: whole(trimmed)}, args.repeats),
          base="padded")


def end_to_end(args: argparse.Namespace) -> None:
    cfg = json.loads((CONFIG_DIR / "hnbench-tiny.json").read_text())
    cfg["text_cfg"]["context_length"] = 77
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "hnbench-tiny-77.json"
        path.write_text(json.dumps(cfg))
        base = load_model("hnbench-tiny-77", model_config=str(path))
    encoder = family_of("hnbench-tiny-77").stretch(base, 248)
    pad = padded(encoder)
    ds = load_dataset("synthdense", protocol=args.protocol)
    print(f"\n2. end to end: hnbench-tiny's shape, random init (seed 0) at 77 positions stretched to "
          f"{encoder.info.context_length} ({encoder.info.n_params / 1e6:.1f}M params), synthdense/{args.protocol}: "
          f"{ds.n_images} images, {ds.n_captions} captions, batch {args.batch_size}")

    def run_evaluate(enc: OpenCLIPEncoder) -> None:
        with tempfile.TemporaryDirectory() as out:
            evaluate(enc, ds, output_dir=out, batch_size=args.batch_size, progress=False, use_cache=False,
                     num_workers=args.num_workers)

    small = ds.drop_images(range(min(ds.n_images, 64), ds.n_images))
    minimal_loop_seconds(encoder, small, args.batch_size)  # warm-up (and pyarrow's import, for evaluate)
    run_evaluate(encoder)
    variants = {"minimal loop (padded)": lambda: minimal_loop_seconds(encoder, ds, args.batch_size),
                "evaluate (trimmed)": lambda: run_evaluate(encoder),
                "evaluate, batches padded": lambda: run_evaluate(pad)}
    table(*run_interleaved(variants, args.repeats), base="minimal loop (padded)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--protocol", default="test", help="synthdense 'test' (500 pairs) or 'train' (2,000)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--text-batch-size", type=int, default=64, help="evaluate's text batches: max(batch size, 64)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--skip", choices=["text", "end-to-end"], default=None)
    ap.add_argument("--threads", type=int, default=None,
                    help="torch's intra-op threads (default: torch's own); 1 keeps CPU time free of the spin-waits "
                         "that a loaded machine adds to a multi-threaded forward")
    ap.add_argument("--num-workers", type=int, default=None,
                    help="evaluate's DataLoader workers (default: evaluate's, the cores torch's threads leave free; "
                         "with --threads 1 on 2 cores that is 1, where the minimal loop decodes in-process: pass 0)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {os.cpu_count()} cores, load average {os.getloadavg()}")
    if args.skip != "text":
        text_encoding(args)
    if args.skip != "end-to-end":
        end_to_end(args)


if __name__ == "__main__":
    main()
