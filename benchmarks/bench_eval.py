"""Harness overhead: pure model forward and a minimal loop vs the whole ``hnbench.evaluation.evaluate``, side by side.

0. *minimal loop*: what one writes by hand (open_clip encoders): decode + preprocess each batch of
   images in the main process, tokenize each batch of captions with open_clip's tokenizer, encode,
   one N×M similarity matrix, R@1/5/10 both ways (t2i from the positive's rank, i2t from a top-10).
   No cache, no ties, no CIs, no per-query file, no result JSON.
1. *forward*: images decoded and transformed beforehand (not timed), captions tokenized beforehand;
   only ``encode_image``/``encode_text`` over the same batches are timed.
2. *evaluate*: the whole pipeline with the embedding cache off (a cold run) — decode and tokenize
   (in DataLoader workers only where the default gives some: on the CPU the cores torch leaves free),
   encode, exact search both ways, metrics with bootstrap CIs, per-query parquet and result JSON.
   ``--compare-workers N`` adds the same evaluate with N workers (2 was the default on 2 cores before).
   (Warm-cache runs are measured by bench_warm.py and bench_cache.py.)
3. Optionally the two search backends at the given sizes (``--search-sizes``; see bench_search.py).

Usage:
    python benchmarks/bench_eval.py                                   # hnbench-tiny on synthdense test
    python benchmarks/bench_eval.py --model ViT-B-32 --limit 200      # a real-size encoder, random init
    python benchmarks/bench_eval.py --search-sizes 5000 50000
    python benchmarks/bench_eval.py --items 10000 --no-forward       # a larger synthdense (generated once)

Each variant runs once per repeat, interleaved; the load average is printed with every repeat, and
the table gives the minimum (least disturbed by other jobs) and the median of the repeats, and the
CPU time each used (this process and its finished DataLoader workers; less sensitive to other jobs).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from hnbench.data import load_dataset
from hnbench.evaluation.evaluate import evaluate
from hnbench.models import load_model
from hnbench.search import calibration as search_calibration
from hnbench.search.exact import AUTO_MIN_WORK, _measure_costs, retrieve


def forward_seconds(encoder, dataset, batch_size: int) -> float:
    """Time only the model: pixels and tokens are prepared before the clock starts."""
    pixels = torch.stack([encoder.image_transform(dataset.images.open(i)) for i in range(dataset.n_images)])
    tokens = encoder.tokenize(dataset.captions).tokens
    start = time.perf_counter()
    for s in range(0, len(pixels), batch_size):
        encoder.encode_images(pixels[s:s + batch_size])
    for s in range(0, len(tokens), max(batch_size, 64)):
        encoder.encode_texts(tokens[s:s + max(batch_size, 64)])
    return time.perf_counter() - start


@torch.inference_mode()
def minimal_encode(encoder, dataset, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The minimal loop's encoding: decode + preprocess + encode each batch of images, tokenize + encode each
    batch of captions (open_clip's own calls); the (n_images, d) and (n_captions, d) normalised embeddings."""
    img = []
    for s in range(0, dataset.n_images, batch_size):
        px = torch.stack([encoder.image_transform(dataset.images.open(i))
                          for i in range(s, min(dataset.n_images, s + batch_size))])
        img.append(encoder.model.encode_image(px, normalize=True))
    txt = []
    tb = max(batch_size, 64)
    for s in range(0, dataset.n_captions, tb):
        tokens = encoder.tokenizer(dataset.captions[s:s + tb])
        txt.append(encoder.model.encode_text(tokens, normalize=True))
    return torch.cat(img), torch.cat(txt)


@torch.inference_mode()
def minimal_recall(img: torch.Tensor, txt: torch.Tensor, caption_image) -> tuple[list[float], list[float]]:
    """One N×M similarity matrix; t2i R@1/5/10 from the positive's rank, i2t from a top-10."""
    sims = txt @ img.T
    owner = torch.as_tensor(caption_image)
    t2i_rank = (sims > sims[torch.arange(len(owner)), owner][:, None]).sum(1)
    return recalls(t2i_rank, sims.T.topk(10, dim=1).indices, owner)


def recalls(t2i_rank: torch.Tensor, i2t_top10: torch.Tensor, owner: torch.Tensor) -> tuple[list[float], list[float]]:
    """R@1/5/10: t2i from each caption's 0-based rank, i2t from each image's top-10 captions (any of its own)."""
    hit = torch.zeros(i2t_top10.shape[0], 3, dtype=torch.bool)
    for j, k in enumerate((1, 5, 10)):
        hit[:, j] = (owner[i2t_top10[:, :k]] == torch.arange(i2t_top10.shape[0])[:, None]).any(1)
    return [float((t2i_rank < k).float().mean()) for k in (1, 5, 10)], hit.float().mean(0).tolist()


def minimal_loop_seconds(encoder, dataset, batch_size: int) -> float:
    """A hand-written evaluation loop (decode, preprocess, tokenize, encode, full matrix, recall)."""
    start = time.perf_counter()
    minimal_recall(*minimal_encode(encoder, dataset, batch_size), dataset.caption_image)
    return time.perf_counter() - start


def search_rows(sizes: list[int], dim: int) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_search import make_data

    print(f"\nexact search, d={dim}, k=10 (seconds, median of 3)")
    print(f"{'size':>7} {'torch':>8} {'faiss':>8} {'faiss/torch':>11}")
    for size in sizes:
        q, g = make_data(size, dim, 4.0, 0)
        ptr, idx = np.arange(size + 1, dtype=np.int64), np.arange(size, dtype=np.int64)
        t = {}
        for backend in ("torch", "faiss"):
            retrieve(q[:256], g, ptr[:257], idx[:256], backend=backend)  # warm-up
            runs = []
            for _ in range(3):
                s = time.perf_counter()
                retrieve(q, g, ptr, idx, backend=backend)
                runs.append(time.perf_counter() - s)
            t[backend] = float(np.median(runs))
        print(f"{size:>7} {t['torch']:>8.3f} {t['faiss']:>8.3f} {t['faiss'] / t['torch']:>11.2f}", flush=True)


def cpu_seconds() -> float:
    """User + system CPU time of this process and of its finished children (DataLoader workers)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def synthdense_items(n: int, data_root: str | None):
    """The first ``n`` pairs of a synthdense train split with enough families (5 images each), generated once."""
    families = max(400, -(-n // 5))
    root = data_root or os.path.join(tempfile.gettempdir(), f"hnbench-synthdense-train{families}")
    ds = load_dataset("synthdense", protocol="train", data_root=root, n_families={"train": families, "test": 100})
    return ds.drop_images(range(n, ds.n_images), reason="--items") if n < ds.n_images else ds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="hnbench-tiny")
    ap.add_argument("--pretrained", default=None, help="default: 'synthdense' for hnbench-tiny, else random init")
    ap.add_argument("--dataset", default="synthdense")
    ap.add_argument("--protocol", default=None, help="e.g. synthdense 'train' (2,000 pairs) or 'test' (500)")
    ap.add_argument("--limit", type=int, default=None, help="use only the first N images")
    ap.add_argument("--items", type=int, default=None,
                    help="the first N pairs of a synthdense train split generated with N/5 families "
                         "(beyond the bundled 2,000; written once under --data-root)")
    ap.add_argument("--data-root", default=None, help="where --items generates (default: the temp dir)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-forward", action="store_true", help="skip the pure-forward timing (pre-decodes all pixels)")
    ap.add_argument("--compare-workers", type=int, default=None,
                    help="also run evaluate with this many DataLoader workers")
    ap.add_argument("--search-sizes", type=int, nargs="*", default=[])
    ap.add_argument("--dim", type=int, default=512)
    args = ap.parse_args()
    pretrained = args.pretrained or ("synthdense" if args.model == "hnbench-tiny" else None)

    ds = synthdense_items(args.items, args.data_root) if args.items else load_dataset(args.dataset,
                                                                                      protocol=args.protocol)
    if args.limit:
        ds = ds.drop_images(range(args.limit, ds.n_images), reason="--limit")
    encoder = load_model(args.model, pretrained)
    from hnbench.evaluation.encode import default_num_workers

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} cores, evaluate's "
          f"default workers {default_num_workers(encoder.device)}; {args.model} "
          f"({encoder.info.n_params / 1e6:.1f}M params) on {ds.name}: {ds.n_images} images, {ds.n_captions} captions")
    small = ds.drop_images(range(min(ds.n_images, 64), ds.n_images))
    if ds.n_images * ds.n_captions >= AUTO_MIN_WORK:  # search "auto"'s one-off calibration: not timed
        search_calibration.costs(ds.n_images, _measure_costs)
    forward_seconds(encoder, small, args.batch_size)  # warm-up
    minimal_loop_seconds(encoder, small, args.batch_size)

    def run_evaluate(workers: int | None) -> float:
        with tempfile.TemporaryDirectory() as out:
            s = time.perf_counter()
            r = evaluate(encoder, ds, output_dir=out, batch_size=args.batch_size, progress=False, use_cache=False,
                         num_workers=workers)
            parts.append(r.timings)
            return time.perf_counter() - s

    variants = {"minimal loop": lambda: minimal_loop_seconds(encoder, ds, args.batch_size),
                "evaluate": lambda: run_evaluate(None)}
    if args.compare_workers is not None:
        variants[f"evaluate, {args.compare_workers} workers"] = lambda: run_evaluate(args.compare_workers)
    if not args.no_forward:
        variants = {"pure forward": lambda: forward_seconds(encoder, ds, args.batch_size), **variants}
    runs: dict[str, list[float]] = {k: [] for k in variants}
    cpu: dict[str, list[float]] = {k: [] for k in variants}
    parts: list[dict[str, float]] = []
    for r in range(args.repeats):  # interleaved so machine noise hits every variant alike
        load = os.getloadavg()[0]
        for name, fn in variants.items():
            c = cpu_seconds()
            runs[name].append(fn())
            cpu[name].append(cpu_seconds() - c)
        print(f"repeat {r + 1}: load average {load:.2f} -> {os.getloadavg()[0]:.2f}; "
              + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in runs.items()), flush=True)
    mini = runs["minimal loop"]
    print(f"\n{'variant':>24} {'min (s)':>9} {'median (s)':>11} {'min/min':>8} {'med/med':>8} "
          f"{'CPU s (med)':>12} {'CPU/CPU':>8}  per-repeat ratios")
    cmini = float(np.median(cpu["minimal loop"]))
    for name, v in runs.items():
        per = " ".join(f"{a / b:.2f}" for a, b in zip(v, mini))
        c = float(np.median(cpu[name]))
        print(f"{name:>24} {min(v):>9.2f} {float(np.median(v)):>11.2f} {min(v) / min(mini):>8.2f} "
              f"{float(np.median(v)) / float(np.median(mini)):>8.2f} {c:>12.2f} {c / cmini:>8.2f}  {per}")
    print("evaluate stages (last run, s): " + ", ".join(f"{k} {v:.2f}" for k, v in parts[-1].items()))
    if args.search_sizes:
        search_rows(args.search_sizes, args.dim)


if __name__ == "__main__":
    main()
