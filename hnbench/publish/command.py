"""``hnbench export``: its flags (generated from :class:`~hnbench.publish.options.ExportSettings`) and what it
prints. Light: the CLI imports it to build its parser; the exporters load when the command runs."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from typing import Any

from hnbench.publish.options import ExportSettings

__all__ = ["add_parser", "run"]

SHOWN = 10  # results not exported, named on the console (all of them: in the manifest)


def add_parser(subparsers: Any, add_settings_args: Callable[..., None]) -> None:
    """Register ``export`` on the CLI's ``subparsers``; ``add_settings_args`` is the CLI's flag generator
    (``hnbench.cli``), passed in so this package never imports the CLI."""
    p = subparsers.add_parser("export", help="publish stored results: a model card's model-index, the Hub's "
                                             ".eval_results, CLIP_benchmark JSON/CSV, the MTEB results layout or "
                                             "open_clip's retrieval CSV, each value traced to its result file")
    p.add_argument("results", nargs="+", metavar="RESULTS", help="result JSON files, or folders of them")
    add_settings_args(p, ExportSettings, required={"format", "output"})
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Export as the flags say and print what was written and what was not (the manifest holds everything)."""
    from hnbench.publish import export

    options = {f.name: getattr(args, f.name) for f in dataclasses.fields(ExportSettings)
               if f.name not in ("format", "output")}
    out = export(args.results, args.format, args.output, **options)
    print(f"exported {out.values} values from {out.results} result file{'s' if out.results != 1 else ''}: "
          f"{len(out.files)} file{'s' if len(out.files) != 1 else ''} in {out.output}"
          + (f", the model card {out.card}" if out.card else ""))
    for skip in out.not_exported[:SHOWN]:
        print(f"not exported: {skip.path}: {skip.what}: {skip.reason}")
    if len(out.not_exported) > SHOWN:
        print(f"not exported: {len(out.not_exported) - SHOWN} more (listed in {out.manifest})")
    for note in out.notes:
        print(f"note: {note}")
    print(f"wrote {out.manifest} (every value with its result file; it names local paths: not for upload)")
    return 0
