"""``hnbench eval``, ``hnbench demo`` and ``hnbench suite``: scoring a model (or several, over a suite of
benchmarks) and printing the result. The evaluator loads when a command runs, not when its parser is built."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from typing import Any

from hnbench.cli.flags import (
    Subparsers,
    add_model_list_args,
    add_settings_args,
    add_spec_args,
    group,
    settings_from_args,
    spec_from_args,
)
from hnbench.evaluation.suites import SuiteSettings
from hnbench.registry import SUITES, TASKS
from hnbench.settings import EvalSettings, fold_task_options, task_option_keys
from hnbench.specs import DataSpec, ModelSpec

__all__ = ["DEMO_DATA", "DEMO_MODEL", "add_demo_parser", "add_eval_parser", "add_suite_parser", "eval_settings"]

# what `hnbench demo` scores
DEMO_MODEL, DEMO_DATA = ModelSpec(model="hnbench-tiny", pretrained="synthdense"), DataSpec("synthdense", protocol="test")


def add_eval_parser(sub: Subparsers) -> None:
    ev = sub.add_parser("eval", help="score a model on an image–caption set (R@K both directions)")
    add_spec_args(ev)
    for options in (TASKS.get(n).options for n in TASKS.names()):  # the data options of one task
        if options is not None:
            add_settings_args(ev, options)
    ev.add_argument("--output", required=True, help="directory for the result JSON and per-query parquet")
    _add_eval_options(ev)
    ev.set_defaults(handler=_run_eval_command)


def add_demo_parser(sub: Subparsers) -> None:
    demo = sub.add_parser("demo", help="the built-in default: hnbench's tiny model on synthdense test")
    demo.add_argument("--output", default="results/demo", help="result directory (default: results/demo)")
    _add_eval_options(demo)
    demo.set_defaults(handler=_run_demo)


def _add_eval_options(p: argparse.ArgumentParser) -> None:
    add_settings_args(p, EvalSettings)
    _add_task_options(p)
    group(p, "evaluation").add_argument(
        "--json", action="store_true", help="print the result record as JSON instead of a table")


def _add_task_options(p: argparse.ArgumentParser) -> None:
    """Each task's own options (its TASKS entry's options class), in a group named after the task; none defaults,
    so a flag given is told from one left out (another task's option given is refused)."""
    for entry in TASKS.entries():
        options = entry.options_class()
        if options is not None:
            add_settings_args(p, options, sparse=True, prefix=entry.prefix, title=f"--task {entry.name}")


def _task_options_given(args: argparse.Namespace) -> dict[str, Any]:
    """The task options given as flags, by flat key (``templates``)."""
    return {k: v for k in task_option_keys() if (v := getattr(args, k, None)) is not None}


def eval_settings(args: argparse.Namespace) -> EvalSettings:
    """The evaluation settings of parsed ``eval`` / ``demo`` flags: the task's own options among them (another
    task's option given is a one-line error)."""
    settings = settings_from_args(EvalSettings, args)
    options = _task_options_given(args)
    if not options:
        return settings
    fold_task_options(options, settings)
    return dataclasses.replace(settings, **options)


def _task_data_options(args: argparse.Namespace) -> dict[str, Any]:
    """The data options only one task reads (``--class-names``, …) that were given (the task checks them)."""
    names = {f for n in TASKS.names() for f in TASKS.get(n).option_names()}
    return {k: getattr(args, k) for k in sorted(names) if getattr(args, k, None) is not None}


def _run_eval_command(args: argparse.Namespace) -> int:
    """``hnbench eval``: the model and data its flags name."""
    return _run_eval(args, spec_from_args(ModelSpec, args), spec_from_args(DataSpec, args))


def _run_demo(args: argparse.Namespace) -> int:
    """``hnbench demo``: hnbench's tiny model on synthdense test."""
    return _run_eval(args, DEMO_MODEL, DEMO_DATA)


def _run_eval(args: argparse.Namespace, model: ModelSpec, data: DataSpec) -> int:
    from hnbench.evaluation.evaluate import evaluate
    from hnbench.evaluation.throughput import footer

    assert model.model is not None and data.dataset is not None  # required flags
    result = evaluate(model.model, data.dataset, pretrained=model.pretrained, model_config=model.model_config,
                      trust_remote_code=model.trust_remote_code, output_dir=args.output, settings=eval_settings(args),
                      dataset_options={**{k: v for k, v in data.set_fields().items() if k not in ("dataset", "skip_invalid")},
                                       **_task_data_options(args)})
    if int(os.environ.get("RANK", "0")) != 0:  # under torchrun only rank 0 reports
        return 0
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
        return 0
    ds, m = result.dataset, result.model
    print(f"{m['arch']} ({m['pretrained'] or 'random init'}, ctx {m['context_length']}) on "
          f"{ds['name']}/{ds['protocol'] or 'default'}: {ds['n_images']} images, "
          + (f"{ds['n_captions']} captions, " if "n_captions" in ds else f"{ds['n_items']} items, " if "n_items" in ds
             else f"{ds.get('n_classes')} classes, ")  # zeroshot; choice: its items
          + f"{result.tokens['n_truncated']} truncated")
    name_from = (ds.get("meta") or {}).get("name_from")  # a manifest or image folder named without --name
    if name_from in ("file", "folder"):
        what = f"file {os.path.basename(str(ds.get('source') or ''))}" if name_from == "file" else "folder"
        print(f"data set named {ds['name']!r} after its {what}; --name NAME names it otherwise")
    if result.scorer.get("name", "cosine") != "cosine":  # a pairwise scorer (--scorer): said above its numbers
        top = result.scorer.get("rerank_top")
        print(f"scored by {result.scorer['name']}" + (f", re-ranking the dual encoder's top {top}" if top else
                                                      ", every pair") + f": {result.scorer.get('description', '')}")
    print(result.table())
    speed = footer(result)  # rates, device, params and FLOPs
    if speed:
        print(speed)
    print(f"wrote {result.path}")
    return 0


# --- suite (a named set of benchmarks for every model) -----------------------------------------------------
class _ListSuites(argparse.Action):
    """``hnbench suite --list``: print the suites and exit, as --help does (no NAME, --model or --output needed)."""

    def __init__(self, option_strings: list[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        from hnbench.evaluation.suites import describe_suites

        print(describe_suites(), end="")
        parser.exit()


def add_suite_parser(sub: Subparsers) -> None:
    p = sub.add_parser("suite", help="run a named set of benchmarks for every model; one aggregated table")
    p.add_argument("name", metavar="NAME", help=f"the suite: {SUITES.describe()}; or a suite file FILE.toml / "
                   "FILE.json of entries (benchmark, protocol, task; or your own dataset and its data options)")
    p.add_argument("--list", action=_ListSuites, help="list the suites with their entries and exit")
    add_model_list_args(group(p, "model"), "a model as for eval; repeat for several")
    add_settings_args(p, ModelSpec)  # --model-config, --context-length (--model and --pretrained above)
    add_settings_args(p, SuiteSettings, required={"output"})
    add_settings_args(p, EvalSettings, skip={"task"})  # each entry has its own task
    _add_task_options(p)  # each applies to the entries of its task
    p.set_defaults(handler=_run_suite)


def _run_suite(args: argparse.Namespace) -> int:
    from hnbench.evaluation.suites import run_suite

    settings = settings_from_args(EvalSettings, args)
    run = run_suite(args.name, args.model, pretrained=args.pretrained, model_config=args.model_config,
                    trust_remote_code=args.trust_remote_code, data_root_map=args.data_root_map, output_dir=args.output,
                    allow_count_mismatch=args.allow_count_mismatch, settings=settings, **_task_options_given(args))
    print(run.table, end="")
    print(f"wrote {run.path}")
    for (model, entry), message in run.failures.items():
        print(f"hnbench: {model} on {entry} failed: {message}", file=sys.stderr)
    return 0 if run.ok else 1
