"""``hnbench`` command line: each subcommand maps its flags onto one API function, nothing else."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence

from hnbench._version import __version__
from hnbench.errors import HnbenchError

logger = logging.getLogger("hnbench")

DEMO = {"model": "hnbench-tiny", "pretrained": "synthdense", "dataset": "synthdense", "protocol": "test"}


def _add_model_args(p: argparse.ArgumentParser, required: bool = True) -> None:
    g = p.add_argument_group("model")
    g.add_argument("--model", required=required,
                   help="open_clip architecture (ViT-B-32, hf-hub:ORG/NAME, local-dir:DIR), or hf:ORG/NAME "
                        "for transformers CLIP")
    g.add_argument("--pretrained", help="open_clip tag (needs the internet) or a local checkpoint "
                                        "(.safetensors / .pt / .bin)")
    g.add_argument("--model-config", help="JSON file registering a custom open_clip architecture")
    g.add_argument("--context-length", type=int, help="text context length (default: the model's)")
    g.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")


def _add_data_args(p: argparse.ArgumentParser, required: bool = True) -> None:
    g = p.add_argument_group("data")
    g.add_argument("--dataset", required=required, help="registered name (synthdense, …) or a path: "
                   "JSONL/CSV manifest, image folder with metadata.jsonl, HF dataset dir/parquet, hf:ORG/NAME")
    g.add_argument("--data-root", help="where a registered benchmark's files are")
    g.add_argument("--protocol", help="benchmark protocol / split (default: the benchmark's default)")
    g.add_argument("--split", help="split of an HF dataset")
    g.add_argument("--image-column", help="image column of a manifest / HF dataset")
    g.add_argument("--caption-column", help="caption column of a manifest / HF dataset")
    g.add_argument("--skip-invalid", action="store_true",
                   help="drop and count missing/corrupt images and empty captions instead of failing")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hnbench", description=__doc__)
    parser.add_argument("--version", action="version", version=f"hnbench {__version__}")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bars, warnings only")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    ev = sub.add_parser("eval", help="score a model on an image–caption set (R@K both directions)")
    _add_model_args(ev)
    _add_data_args(ev)
    ev.add_argument("--output", required=True, help="directory for the result JSON and per-query parquet")
    _add_eval_options(ev)

    demo = sub.add_parser("demo", help="the built-in default: hnbench's tiny model on synthdense test")
    demo.add_argument("--output", default="results/demo", help="result directory (default: results/demo)")
    demo.add_argument("--device", default="cpu")
    _add_eval_options(demo)

    tr = sub.add_parser("train", help="fine-tune an open_clip model with HN-CLIP or InfoNCE")
    tr.add_argument("--recipe", help="built-in recipe name or TOML file; flags below override it")
    _add_model_args(tr, required=False)
    _add_data_args(tr, required=False)
    tr.add_argument("--loss", choices=["hn", "infonce"])
    tr.add_argument("--gamma", type=float)
    tr.add_argument("--epochs", type=int)
    tr.add_argument("--batch-size", type=int)
    tr.add_argument("--lr", type=float)
    tr.add_argument("--seed", type=int)
    tr.add_argument("--num-workers", type=int)
    tr.add_argument("--output", help="run directory (checkpoint.safetensors, train_config.json, log.jsonl)")

    _add_datasets_parser(sub)
    _add_leaderboard_parser(sub)
    _add_hardness_parser(sub)
    return parser


# --- datasets (benchmarks) -------------------------------------------------------------------------
def _add_datasets_parser(sub: argparse._SubParsersAction) -> None:
    pass


# --- leaderboard ---------------------------------------------------------------------------------
def _add_leaderboard_parser(sub: argparse._SubParsersAction) -> None:
    pass


# --- hardness ------------------------------------------------------------------------------------
def _add_hardness_parser(sub: argparse._SubParsersAction) -> None:
    pass


def _add_eval_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("evaluation")
    g.add_argument("--batch-size", type=int, default=64)
    g.add_argument("--num-workers", type=int, help="image decoding workers (default: CPU count, at most 8)")
    g.add_argument("--backend", default="auto", choices=["auto", "torch", "faiss"], help="exact search backend")
    g.add_argument("--precision", default="fp32", help="model weights precision (fp32, fp16, bf16)")
    g.add_argument("--amp", action="store_true", help="autocast the encoders (CUDA only)")
    g.add_argument("--k", type=int, nargs="+", default=[1, 5, 10], help="recall cut-offs")
    g.add_argument("--no-ci", action="store_true", help="skip bootstrap confidence intervals")
    g.add_argument("--no-cache", action="store_true", help="do not read or write the embedding cache")
    g.add_argument("--json", action="store_true", help="print the result record as JSON instead of a table")


def _run_eval(args: argparse.Namespace, model: dict) -> int:
    from hnbench.evaluate import evaluate

    result = evaluate(
        model["model"], model["dataset"], pretrained=model.get("pretrained"),
        model_config=model.get("model_config"), data_root=model.get("data_root"), protocol=model.get("protocol"),
        split=model.get("split"), image_column=model.get("image_column"),
        caption_column=model.get("caption_column"), context_length=model.get("context_length"),
        output_dir=args.output, device=args.device, batch_size=args.batch_size, num_workers=args.num_workers,
        precision=args.precision, amp=args.amp, backend=args.backend, ks=tuple(args.k), ci=not args.no_ci,
        skip_invalid=model.get("skip_invalid", False), use_cache=not args.no_cache, progress=not args.quiet)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
        return 0
    ds, m = result.dataset, result.model
    print(f"{m['arch']} ({m['pretrained'] or 'random init'}, ctx {m['context_length']}) on "
          f"{ds['name']}/{ds['protocol']}: {ds['n_images']} images, {ds['n_captions']} captions, "
          f"{result.tokens['n_truncated']} truncated")
    print(result.table())
    print(f"wrote {result.path}")
    return 0


def _run_train(args: argparse.Namespace) -> int:
    from hnbench.train.trainer import TrainConfig, load_recipe, train

    cfg = load_recipe(args.recipe) if args.recipe else {}
    if args.dataset and args.dataset != cfg.get("dataset"):
        cfg.pop("dataset_options", None)  # the recipe's options belong to the recipe's dataset
    for key in ("model", "pretrained", "model_config", "dataset", "protocol", "data_root", "loss", "gamma",
                "epochs", "batch_size", "lr", "seed", "device", "context_length", "num_workers", "output"):
        value = getattr(args, key, None)
        if value is not None and not (key == "device" and value == "cpu" and "device" in cfg):
            cfg[key] = value
    ckpt = train(TrainConfig.from_dict(cfg), progress=not args.quiet)
    print(f"wrote {ckpt}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING if args.quiet else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "eval":
            return _run_eval(args, vars(args))
        if args.command == "demo":
            return _run_eval(args, dict(DEMO))
        if args.command == "train":
            return _run_train(args)
        if hasattr(args, "handler"):  # subcommands registered with set_defaults(handler=...)
            return args.handler(args)
    except HnbenchError as e:
        print(f"hnbench: error: {e}", file=sys.stderr)
        return 2
    return 1


if __name__ == "__main__":
    sys.exit(main())
