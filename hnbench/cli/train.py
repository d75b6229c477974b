"""``hnbench train`` (a recipe and flags onto :class:`~hnbench.train.config.TrainConfig`, then the trainer) and
``hnbench train-report`` (a run's diagnostics as a table and a PNG). The trainer and the report's plotting
load when a command runs, not when its parser is built."""

from __future__ import annotations

import argparse
import json
import logging
import pathlib
import sys
from dataclasses import fields

from hnbench.cli.flags import Subparsers, add_settings_args, add_spec_args, group
from hnbench.errors import ConfigError
from hnbench.io import loads_json
from hnbench.registry import OBJECTIVES, RECIPES
from hnbench.settings import field_types, flat_key
from hnbench.specs import DataSpec
from hnbench.train.config import (
    DATA_SPEC_FIELDS,
    TrainConfig,
    load_recipe,
    nest_options,
    options_class,
    replace_data_spec,
    set_option,
)

__all__ = ["add_train_parser", "add_train_report_parser"]

logger = logging.getLogger("hnbench")


def add_train_parser(sub: Subparsers) -> None:
    tr = sub.add_parser("train", help="fine-tune an open_clip or HF CLIP model with HN-CLIP or InfoNCE "
                                      "(multi-GPU: torchrun --nproc-per-node N -m hnbench train ...)")
    tr.add_argument("--recipe", help=f"built-in recipe ({', '.join(RECIPES.names())}) or a TOML/YAML file; flags "
                                     "below override it")
    add_spec_args(tr, sparse=True)
    _add_train_options(tr)
    tr.set_defaults(handler=_run_train)


def _add_train_options(tr: argparse.ArgumentParser) -> None:
    """One flag per TrainConfig field and per option of each objective (none of them defaults: only the flags
    given override the recipe), in TrainConfig's order: the objectives' where their options sit in it."""
    for title in ("objective", "optimisation", "PEFT and Long-CLIP", "run, diagnostics, evaluation"):
        group(tr, title)  # in this order in --help (fields name their group; field order is the recipe's)
    names = [f.name for f in fields(TrainConfig)]
    at = names.index("objective_options")
    add_settings_args(tr, TrainConfig, sparse=True, only=names[:at])
    for entry in OBJECTIVES.entries():
        add_settings_args(tr, options_class(entry.name), sparse=True, prefix=entry.prefix)
    add_settings_args(tr, TrainConfig, sparse=True, only=names[at + 1:])
    group(tr, "run, diagnostics, evaluation").add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="any other training option (value parsed as JSON when it can be), repeatable")


def _parse_value(text: str) -> object:
    try:
        return loads_json(text)
    except json.JSONDecodeError:
        return text


def train_config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The run's TrainConfig of parsed ``hnbench train`` flags: the recipe, then the flags given, then ``--set``
    (a field, an objective's ``finelip.margin`` or its flat ``finelip_margin``), each over the one before."""
    cfg = nest_options(load_recipe(args.recipe)) if args.recipe else {}
    for key in DATA_SPEC_FIELDS:  # other data than the recipe's: its protocol and options go with its data
        if args.recipe and getattr(args, key) and (note := replace_data_spec(cfg, key, getattr(args, key), args.recipe)):
            logger.warning("%s", note)
    optional = {name for name, (_, none_ok) in field_types(TrainConfig).items() if none_ok}
    train_fields = [f.name for f in fields(TrainConfig)]
    for key in train_fields:
        value = getattr(args, key, None)
        if value is not None and key != "resume":
            cfg[key] = None if value == "" and key in optional else value  # --protocol "": unset the recipe's
    for entry in OBJECTIVES.entries():  # each objective's flags, stored under their flat keys (a field's: its own)
        for f in fields(options_class(entry.name)):
            key = flat_key(f, entry.prefix)
            if key not in train_fields and (value := getattr(args, key, None)) is not None:
                set_option(cfg, f"{entry.name}.{f.name}", value)
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        section, dot, name = key.strip().rpartition(".")  # an objective's name keeps its spelling
        set_option(cfg, section + dot + name.replace("-", "_"), _parse_value(value))
    # DataSpec fields TrainConfig has not: loader options
    data_flags = {f.name: getattr(args, f.name) for f in fields(DataSpec)
                  if f.name not in train_fields and getattr(args, f.name)}
    if data_flags:  # the data flags eval shares reach train's loader through dataset_options
        cfg["dataset_options"] = {**cfg.get("dataset_options", {}), **data_flags}
    if args.resume is not None:
        cfg["resume"] = args.resume or cfg.get("output") or TrainConfig.output
    return TrainConfig.from_dict(cfg)


def _run_train(args: argparse.Namespace) -> int:
    from hnbench.train import train
    from hnbench.train.state import resume_hint

    config = train_config_from_args(args)
    try:
        ckpt = train(config, progress=not args.quiet)
    except KeyboardInterrupt:  # the one line says how to go on: the exact --resume, or why there is none
        print(f"hnbench: interrupted; {resume_hint(pathlib.Path(config.output))}", file=sys.stderr)
        return 130
    print(f"wrote {ckpt}")
    return 0


def add_train_report_parser(sub: Subparsers) -> None:
    p = sub.add_parser("train-report", help="plot a training run's diagnostics (losses, gradient norms, "
                                            "exact-zero InfoNCE gradients, active batches, R@1) to PNG")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories (several are overlaid)")
    p.add_argument("--output", help="PNG path (default: RUN_DIR/report.png of the first run)")
    p.add_argument("--json", action="store_true", help="print the per-epoch rows as JSON")
    p.set_defaults(handler=_run_train_report)


def _run_train_report(args: argparse.Namespace) -> int:
    from hnbench.train.report import epoch_table, read_run, train_report

    png, table = train_report(args.runs, args.output)
    if args.json:
        print(json.dumps({r: epoch_table(read_run(r)) for r in args.runs}, indent=2))
    else:
        print(table, end="")
    print(f"wrote {png}")
    return 0
