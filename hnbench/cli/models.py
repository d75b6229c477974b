"""``hnbench models``: every model family, hnbench's built-in model, zoo entry and open_clip architecture
(:func:`hnbench.models.zoo.list_models`). The zoo and pandas load when the command runs: its parser reads the
formats from :mod:`hnbench.validate` and the families from the registry."""

from __future__ import annotations

import argparse

from hnbench.cli.flags import Subparsers
from hnbench.registry import MODELS
from hnbench.validate import MODEL_FORMATS

__all__ = ["add_models_parser"]


def add_models_parser(sub: Subparsers) -> None:
    p = sub.add_parser("models", help="every model family, hnbench's built-in model, zoo entry and open_clip "
                                      "architecture: family, context, text policy, weights source, whether the "
                                      "weights are on this machine, reference numbers")
    p.add_argument("--format", default="text", choices=MODEL_FORMATS,
                   help="text (default: sections that fit 100 columns), md (a Markdown table of every row), csv or "
                        "json (every column)")
    p.add_argument("--family", help=f"only this family's rows: {', '.join(MODELS.names())}")
    p.add_argument("--architectures", action="store_true",
                   help="only open_clip's architectures (and hnbench's built-in one), with their pretrained tags")
    p.set_defaults(handler=_run_models)


def _run_models(args: argparse.Namespace) -> int:
    from hnbench.models.zoo import list_models, render_models

    frame = list_models(args.family)
    if args.architectures:
        frame = frame[frame["kind"].isin(["builtin", "architecture"])].reset_index(drop=True)
    print(render_models(frame, args.format))
    return 0
