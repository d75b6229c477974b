"""``hnbench leaderboard``, ``hnbench compare``, ``hnbench browse`` and ``hnbench site``: what stored results say, as
a board, as paired significance tests, as a page of failures and as a static site of all of them. The readers load
when a command runs."""

from __future__ import annotations

import argparse
import os
from dataclasses import fields

from hnbench.cli.flags import Subparsers, add_settings_args, group
from hnbench.pages.site.options import SiteSettings
from hnbench.pages.textdiff import MAX_CAPTION_CHARS, MAX_WORDS
from hnbench.settings import BrowseSettings, CompareSettings
from hnbench.specs import DataSpec

__all__ = ["add_browse_parser", "add_compare_parser", "add_leaderboard_parser", "add_site_parser"]


# --- leaderboard ---------------------------------------------------------------------------------
def add_leaderboard_parser(sub: Subparsers) -> None:
    lb = sub.add_parser("leaderboard", help="tables of stored results (and published numbers): one per "
                                            "benchmark, protocol and data set")
    lb.add_argument("results", nargs="*", metavar="RESULTS_DIR", help="result directories or JSON files")
    lb.add_argument("--output", help="write the board here (links to result files are relative to it); "
                                     "default: print it")
    lb.add_argument("--baseline", help="model label (or glob) to show deltas against, e.g. 'ViT-B-32 (openai)'")
    lb.add_argument("--benchmark", action="append", help="only this benchmark (repeatable)")
    lb.add_argument("--protocol", action="append", help="only this protocol (repeatable)")
    lb.add_argument("--context-length", action="append", type=int, help="only this text context length (repeatable)")
    lb.add_argument("--model", help="only models whose label, arch or weights match this glob")
    lb.add_argument("--sort", default="mean R@1", help="rank and sort by: mean R@1 (default), t2i R@1|5|10, i2t R@1|5|10, "
                                                     "or model (alphabetical; ranks stay by mean R@1)")
    lb.add_argument("--format", default="markdown", choices=["markdown", "csv", "html"],
                    help="the board's format (default: markdown)")
    lb.add_argument("--ci", action="store_true", help="show 95%% bootstrap confidence intervals")
    lb.add_argument("--reported", action="store_true", help="add the published numbers as marked reference rows")
    lb.add_argument("--title", default="Leaderboard", help="the board's heading")
    lb.add_argument("--overwrite", action="store_true",
                    help="replace an --output made from other inputs, or not written by hnbench (a rerun from the "
                         "same inputs replaces its own)")
    lb.set_defaults(handler=_run_leaderboard)


def _run_leaderboard(args: argparse.Namespace) -> int:
    from hnbench.results.leaderboard import leaderboard

    text = leaderboard(args.results, args.output, baseline=args.baseline, benchmarks=args.benchmark,
                       protocols=args.protocol, model_glob=args.model, sort=args.sort, fmt=args.format,
                       ci=args.ci, reported=args.reported, title=args.title, overwrite=args.overwrite,
                       context_lengths=args.context_length)
    print(f"wrote {args.output}" if args.output else text, end="\n" if args.output else "")
    return 0


# --- compare, browse --------------------------------------------------------------------------------
def add_compare_parser(sub: Subparsers) -> None:
    p = sub.add_parser("compare", help="paired significance of R@K differences between stored results "
                                       "(bootstrap interval, exact McNemar, Holm against the first)")
    p.add_argument("results", nargs="+", metavar="RESULT.json", help="result files; the first is the baseline")
    add_settings_args(p, CompareSettings)
    p.set_defaults(handler=_run_compare)


def _run_compare(args: argparse.Namespace) -> int:
    from hnbench.results.compare import compare

    out = compare(args.results, ks=args.ks, output_dir=args.output, seed=args.seed, n_boot=args.n_boot,
                  overwrite=args.overwrite)
    print(out.markdown(), end="")
    if args.output:
        print(f"wrote {os.path.join(args.output, 'compare.md')} and compare.json")
    return 0


def add_browse_parser(sub: Subparsers) -> None:
    p = sub.add_parser("browse", help="a static HTML page of a result's failures: worst queries with thumbnails "
                                      "and word diffs, recall by hardness, disagreements with another model "
                                      f"(captions shown up to {MAX_CAPTION_CHARS:,} characters, diffed up to "
                                      f"{MAX_WORDS:,} words)")
    p.add_argument("result", metavar="RESULT.json")
    add_settings_args(p, BrowseSettings, required={"output"})
    group(p, "data").description = ("the result's data, as recorded in it; a flag given replaces that field "
                                    "(e.g. --dataset or --data-root where the data is now)")
    add_settings_args(p, DataSpec, sparse=True)
    p.set_defaults(handler=_run_browse)


def _run_browse(args: argparse.Namespace) -> int:
    from hnbench.pages.build import browse

    data = {f.name: getattr(args, f.name) for f in fields(DataSpec) if getattr(args, f.name) is not None}
    assert args.output is not None  # a required flag
    path = browse(args.result, args.output, compare=args.compare, hardness=args.hardness, limit=args.limit,
                  top=args.top, progress=not args.quiet, overwrite=args.overwrite, **data)
    print(f"wrote {path}")
    return 0


# --- site ------------------------------------------------------------------------------------------------
def add_site_parser(sub: Subparsers) -> None:
    p = sub.add_parser("site", help="one static, self-contained results site: an index of benchmarks, suites and "
                                    "models, a sortable board per benchmark and suite with R@1 charts, a page per "
                                    "model, each result's failure browser and the hardness reports; every link "
                                    "relative, rebuilt incrementally")
    p.add_argument("results", nargs="+", metavar="RESULTS", help="result folders (searched recursively) or files")
    add_settings_args(p, SiteSettings, required={"output"})
    p.set_defaults(handler=_run_site)


def _run_site(args: argparse.Namespace) -> int:
    from hnbench.pages.site.build import build_site

    options = {f.name: getattr(args, f.name) for f in fields(SiteSettings)}
    built = build_site(args.results, progress=not args.quiet, **options)
    for path, reason in built.skipped:
        print(f"skipped {path}: {reason}")
    print(f"wrote {len(built.written)} files, kept {len(built.kept)} unchanged"
          + (f", removed {len(built.removed)}" if built.removed else "")
          + f" ({built.browsers} failure browsers): {built.output / 'index.html'}")
    return 0
