"""``hnbench datasets`` (the registered benchmarks: list, info, download), ``hnbench segments`` (a segment sidecar
for GOAL-style objectives) and ``hnbench cache`` (the embedding cache: ls, du, clear). The data readers load when a
command runs, not when its parser is built."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

from hnbench.cli.flags import Subparsers, add_settings_args, spec_from_args
from hnbench.errors import ConfigError
from hnbench.io import human_bytes
from hnbench.sidecars.options import SegmentsSettings
from hnbench.specs import DataSpec, ModelSpec

__all__ = ["add_cache_parser", "add_datasets_parser", "add_segments_parser"]


# --- datasets (benchmarks) -------------------------------------------------------------------------
def add_datasets_parser(sub: Subparsers) -> None:
    p = sub.add_parser("datasets", help="the registered benchmarks: list, describe, download")
    dsub = p.add_subparsers(dest="datasets_command", required=True)
    ls = dsub.add_parser("list", help="registered datasets with their protocols (* = default)")
    ls.add_argument("--json", action="store_true", help="print JSON (one object per dataset)")
    ls.set_defaults(handler=_run_datasets_list)
    info = dsub.add_parser("info", help="source, license, citation, protocols; with data: counts, caption "
                                        "lengths (words, CLIP tokens), fingerprint")
    info.add_argument("name")
    add_settings_args(info, DataSpec, only=DataSpec.read_by("benchmark", "generated") - {"dataset"})
    info.add_argument("--json", action="store_true", help="print JSON (keys n_images, n_captions, ...)")
    info.set_defaults(handler=_run_datasets_info)
    dl = dsub.add_parser("download", help="fetch a benchmark from its official sources into DIR")
    dl.add_argument("name")
    dl.add_argument("--to", metavar="DIR", help="target directory, then the --data-root (default: the hnbench cache)")
    dl.add_argument("--local", action="append", default=[], metavar="FILE",
                    help="use this already-downloaded file (e.g. sa_000138.tar) instead of fetching it; repeatable")
    dl.add_argument("--revision", help="Hugging Face revision for hub-hosted files (default: main; the commit is recorded)")
    dl.set_defaults(handler=_run_datasets_download)


def _run_datasets_list(args: argparse.Namespace) -> int:
    from hnbench.data.benchmarks.stats import list_rows

    rows = list_rows()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for r in rows:
        print(f"{r['name']:<12} {r['title']}")
        if r["protocols"]:
            print(f"{'':<12} protocols: {', '.join(r['protocols'])}; license: {r['license']}")
    return 0


def _run_datasets_info(args: argparse.Namespace) -> int:
    from hnbench.data.benchmarks.stats import describe, render_info

    spec = spec_from_args(DataSpec, args, dataset=args.name, name=None)  # NAME: the benchmark, not --name
    spec.validate()
    info = describe(args.name, **{k: v for k, v in spec.set_fields().items() if k != "dataset"},
                    progress=not args.quiet)
    print(json.dumps(info, indent=2) if args.json else render_info(info))
    return 0


def _run_datasets_download(args: argparse.Namespace) -> int:
    from hnbench.data.benchmarks import get_benchmark
    from hnbench.data.benchmarks.download import download

    out = download(get_benchmark(args.name), args.to, local=args.local, revision=args.revision,
                   progress=not args.quiet)
    for name, entry in out["resources"].items():
        print(f"{name}: {entry.get('extracted_to') or 'saved'} (sha256 {entry['sha256'][:16]}…"
              f"{', revision ' + entry['revision'] if entry.get('revision') else ''})")
    for m in out["manual"]:
        print(f"still needed: {m['file']}: {m['how']}")
    print(f"data root: {out['to']}  (hnbench eval --dataset {args.name} --data-root {out['to']} ...)")
    return 0


# --- segments (a side input of GOAL-style objectives) ----------------------------------------------------
def add_segments_parser(sub: Subparsers) -> None:
    p = sub.add_parser("segments", help="a segment sidecar (image boxes paired with caption sentences) for GOAL-style "
                                        "objectives: synthdense's exact geometry, GOAL's released JSON, or grid boxes "
                                        "scored by a frozen CLIP (no SAM)")
    add_settings_args(p, ModelSpec)
    add_settings_args(p, DataSpec, required={"dataset"})
    add_settings_args(p, SegmentsSettings)
    p.set_defaults(handler=_run_segments)


def _run_segments(args: argparse.Namespace) -> int:
    from hnbench.sidecars.grid import make_segments

    settings = SegmentsSettings(**{f.name: getattr(args, f.name) for f in fields(SegmentsSettings)})
    path = make_segments(spec_from_args(DataSpec, args), spec_from_args(ModelSpec, args), settings,
                         progress=not args.quiet)
    print(f"wrote {path}")
    return 0


# --- cache ---------------------------------------------------------------------------------------
def add_cache_parser(sub: Subparsers) -> None:
    p = sub.add_parser("cache", help="the embedding cache: list, disk usage, clear")
    csub = p.add_subparsers(dest="cache_command", required=True)
    ls = csub.add_parser("ls", help="cached models: key, architecture, weights fingerprint, items, size")
    du = csub.add_parser("du", help="disk usage per cached model and in total")
    clear = csub.add_parser("clear", help="delete cached embeddings (all, or of some models)")
    clear.add_argument("--model", action="append", metavar="KEY|ARCH|FINGERPRINT",
                       help="only this model (cache key or fingerprint prefix, or architecture); repeatable")
    clear.add_argument("--kind", choices=["image", "text"], help="only image or only text embeddings")
    clear.add_argument("--yes", action="store_true",
                       help="remove without asking (needed when stdin is not a terminal)")
    ls.set_defaults(handler=_run_cache_ls)
    du.set_defaults(handler=_run_cache_du)
    clear.set_defaults(handler=_run_cache_clear)
    for c in (ls, du, clear):
        c.add_argument("--cache-dir", help="embedding cache directory (default: as for eval)")


def _weights(row: dict[str, Any]) -> str:
    """The weights column of ``cache ls``: the pretrained tag or file, "random init" where the model had none."""
    return str(row["pretrained"]) if row["pretrained"] else "random init" if row["arch"] else "–"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _cache_root(args: argparse.Namespace) -> str | Path:
    """The cache folder ``--cache-dir`` names (refused when empty), else the default one."""
    from hnbench.evaluation.cache import default_root

    if args.cache_dir is not None and not args.cache_dir.strip():
        raise ConfigError("--cache-dir is empty (an unset variable?): name the cache folder, or leave the flag out "
                          "for the default one")
    root: str | Path = args.cache_dir or default_root()  # as given: the lines below name it so
    return root


def _generated(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The data hnbench generated in its cache folder, beside the default embedding cache (none with --cache-dir)."""
    from hnbench.evaluation.cache import generated_data

    return [] if args.cache_dir else generated_data()


def _run_cache_ls(args: argparse.Namespace) -> int:
    """``hnbench cache ls``: one row per cached model, then the generated data kept beside them."""
    from tabulate import tabulate

    from hnbench.evaluation.cache import list_models

    root = _cache_root(args)
    generated = _generated(args)
    rows = list_models(root)
    print(tabulate([[r["key"], r["arch"], _weights(r), (r["fingerprint"] or "")[:16], r["precision"],
                     r["context_length"], r["image_items"], r["text_items"], human_bytes(r["bytes"])] for r in rows],
                   headers=["key", "arch", "weights", "fingerprint", "precision", "ctx", "images", "texts",
                            "size"]) if rows else f"no cached embeddings in {root}")
    for g in generated:
        print(f"generated data {g['name']}: {g['images']:,} images, {human_bytes(g['bytes'])} in {g['path']} "
              "(not embeddings: cache clear keeps it)")
    return 0


def _run_cache_du(args: argparse.Namespace) -> int:
    """``hnbench cache du``: the bytes of each cached model and in total, then the generated data's."""
    from hnbench.evaluation.cache import disk_usage

    root = _cache_root(args)
    generated = _generated(args)
    for name, size in disk_usage(root).items():
        print(f"{human_bytes(size):>10}  {name}")
    print(f"({root})")
    for g in generated:
        print(f"{human_bytes(g['bytes']):>10}  generated data {g['name']} ({g['images']:,} images; "
              f"cache clear keeps it)")
    return 0


def _run_cache_clear(args: argparse.Namespace) -> int:
    """``hnbench cache clear``: what would go, then (confirmed by --yes or at the terminal) remove it."""
    from hnbench.evaluation.cache import clear, plan_clear

    root = _cache_root(args)
    plan = plan_clear(root, models=args.model, kind=args.kind)
    if not plan:
        print(f"nothing to clear in {root}")
        return 0
    sizes = {name: sum(f.stat().st_size for f in files) for name, files in plan.items()}
    n_files, total = sum(map(len, plan.values())), sum(sizes.values())
    print(f"cache clear removes from {root}:")
    for name, files in plan.items():
        print(f"{human_bytes(sizes[name]):>10}  {name} ({_count(len(files), 'file')})")
    print(f"{human_bytes(total):>10}  in all ({_count(n_files, 'file')})")
    if not args.yes:
        if not sys.stdin.isatty():
            raise ConfigError(f"cache clear would remove {_count(n_files, 'file')} ({human_bytes(total)}) from {root}: "
                              "pass --yes to confirm (stdin is not a terminal); nothing was removed")
        if input("remove them? [y/N] ").strip().lower() not in ("y", "yes"):
            print("nothing removed")
            return 0
    freed = clear(root, models=args.model, kind=args.kind)
    print(f"freed {human_bytes(freed)} in {root}")
    return 0
