"""``hnbench`` command line: each subcommand maps its flags onto one API function, nothing else."""

from __future__ import annotations

import argparse
import dataclasses
import errno
import json
import logging
import os
import pathlib
import sys
import typing
from collections.abc import Callable, Collection, Sequence
from dataclasses import fields
from typing import Any, TypeAlias, TypeVar

from tabulate import tabulate

from hnbench._version import __version__
from hnbench.errors import ConfigError, HnbenchError
from hnbench.evaluation.suites import SuiteSettings
from hnbench.io import human_bytes, loads_json
from hnbench.pages.textdiff import MAX_CAPTION_CHARS, MAX_WORDS
from hnbench.publish.command import add_parser as _add_export_parser
from hnbench.registry import MODELS, OBJECTIVES, RECIPES, SUITES, TASKS, TEXT_ENCODERS
from hnbench.settings import (
    BrowseSettings,
    CompareSettings,
    EvalSettings,
    HardnessSettings,
    field_types,
    flag_of,
    flat_key,
    negated_help,
)
from hnbench.sidecars.options import SegmentsSettings
from hnbench.specs import DataSpec, ModelSpec
from hnbench.train.config import (
    DATA_SPEC_FIELDS,
    TrainConfig,
    load_recipe,
    nest_options,
    options_class,
    replace_data_spec,
    set_option,
)
from hnbench.train.report import epoch_table, read_run, train_report

# The in-function imports below are of modules that import numpy, pandas or torch: the CLI parses its
# arguments (and answers --help or bad input) without loading them.

_Subparsers: TypeAlias = "argparse._SubParsersAction[_Parser]"
_S = TypeVar("_S", EvalSettings, HardnessSettings)
_T = TypeVar("_T", DataSpec, ModelSpec)

logger = logging.getLogger("hnbench")

# what `hnbench demo` scores
DEMO_MODEL, DEMO_DATA = ModelSpec(model="hnbench-tiny", pretrained="synthdense"), DataSpec("synthdense", protocol="test")


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: the usage block would bury the message (``--help`` shows it)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help){_renamed_note(self)}\n")


NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)  # disk full, quota, the process's file-size limit
RENAMED = "_renamed_flags"  # where a former spelling's use is noted (the parser and the namespace)


def _renamed_note(holder: object) -> str:
    """The deprecation of the former spellings used, folded into an error's one line ("" if none)."""
    said = getattr(holder, RENAMED, [])
    return f"; {'; '.join(said)}" if said else ""


def _add_spec_args(p: argparse.ArgumentParser, *, sparse: bool = False, required: bool = True) -> None:
    """The model and data flags, generated from :class:`ModelSpec` and :class:`DataSpec` (``--model`` and
    ``--dataset`` required unless ``sparse`` or not ``required``)."""
    must = {"model", "dataset"} if required and not sparse else set()
    _add_settings_args(p, ModelSpec, sparse=sparse, required=must)
    _add_settings_args(p, DataSpec, sparse=sparse, required=must)


def spec_from_args(cls: type[_T], args: argparse.Namespace, **given: Any) -> _T:
    """The :class:`ModelSpec` / :class:`DataSpec` of parsed flags (flags not given keep the defaults)."""
    values = {f.name: getattr(args, f.name) for f in fields(cls) if getattr(args, f.name, None) is not None}
    return cls(**{**values, **given})


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="hnbench", description=__doc__)
    parser.add_argument("--version", action="version", version=f"hnbench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    ev = sub.add_parser("eval", help="score a model on an image–caption set (R@K both directions)")
    _add_spec_args(ev)
    for task in (TASKS.get(n) for n in TASKS.names() if TASKS.get(n).options):  # the data options of one task
        _add_settings_args(ev, task.target("options"))
    ev.add_argument("--output", required=True, help="directory for the result JSON and per-query parquet")
    _add_eval_options(ev)

    demo = sub.add_parser("demo", help="the built-in default: hnbench's tiny model on synthdense test")
    demo.add_argument("--output", default="results/demo", help="result directory (default: results/demo)")
    _add_eval_options(demo)

    tr = sub.add_parser("train", help="fine-tune an open_clip or HF CLIP model with HN-CLIP or InfoNCE "
                                      "(multi-GPU: torchrun --nproc-per-node N -m hnbench train ...)")
    tr.add_argument("--recipe", help=f"built-in recipe ({', '.join(RECIPES.names())}) or a TOML/YAML file; flags "
                                     "below override it")
    _add_spec_args(tr, sparse=True)
    _add_train_options(tr)

    _add_datasets_parser(sub)
    _add_leaderboard_parser(sub)
    _add_hardness_parser(sub)
    _add_cache_parser(sub)
    _add_train_report_parser(sub)
    _add_compare_parser(sub)
    _add_browse_parser(sub)
    _add_segments_parser(sub)
    _add_suite_parser(sub)
    _add_models_parser(sub)
    _add_export_parser(sub, _add_settings_args)
    _add_global_flags(parser)
    return parser


def _add_global_flags(p: argparse.ArgumentParser, *, top: bool = True) -> None:
    """-q / -v on ``p`` and on every subcommand below it, so ``hnbench -q eval`` and ``hnbench eval -q`` are one
    command (below the top the default is "not given", so a subcommand never resets a flag given before it)."""
    default: Any = False if top else argparse.SUPPRESS
    p.add_argument("-q", "--quiet", action="store_true", default=default, help="no progress bars, warnings only")
    p.add_argument("-v", "--verbose", action="store_true", default=default, help="debug logging")
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):  # an alias maps to the same parser
                _add_global_flags(child, top=False)


# --- datasets (benchmarks) -------------------------------------------------------------------------
def _add_datasets_parser(sub: _Subparsers) -> None:
    p = sub.add_parser("datasets", help="the registered benchmarks: list, describe, download")
    dsub = p.add_subparsers(dest="datasets_command", required=True)
    ls = dsub.add_parser("list", help="registered datasets with their protocols (* = default)")
    ls.add_argument("--json", action="store_true", help="print JSON (one object per dataset)")
    ls.set_defaults(handler=_run_datasets_list)
    info = dsub.add_parser("info", help="source, license, citation, protocols; with data: counts, caption "
                                        "lengths (words, CLIP tokens), fingerprint")
    info.add_argument("name")
    _add_settings_args(info, DataSpec, only=DataSpec.read_by("benchmark", "generated") - {"dataset"})
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


# --- leaderboard ---------------------------------------------------------------------------------
def _add_leaderboard_parser(sub: _Subparsers) -> None:
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


# --- hardness ------------------------------------------------------------------------------------
def _add_hardness_parser(sub: _Subparsers) -> None:
    p = sub.add_parser("hardness", help="how near-duplicate a caption set's negatives are (for an encoder), and "
                                        "where a model fails on them: JSON, PNG plots, Markdown report")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--dataset", action="append", help="registered name or path (as for eval); repeat to compare "
                                                        "(default: the data the first --results file records)")
    src.add_argument("--captions", action="append", metavar="FILE",
                     help="a caption list: .txt (one a line) or CSV/TSV/JSONL with a caption column; repeatable")
    p.add_argument("--label-field", default="auto",
                   help="per-image label in the manifest (or --captions column) whose structure to report, e.g. "
                        "family; default auto (synthdense's family when present); 'none' to skip")
    _add_model_list_args(p.add_argument_group("model"),
                         f"a model as for eval, or a text-only encoder: {TEXT_ENCODERS.describe()}; repeat to compare",
                         "; several for one --model: each is measured")
    _add_spec_args(p, required=False)  # --dataset, --model and --pretrained are the ones above (repeatable)
    p.add_argument("--output", required=True, help="directory for hardness.json, plots/, report.md")
    _add_settings_args(p, HardnessSettings)
    p.set_defaults(handler=_run_hardness)


def _run_hardness(args: argparse.Namespace) -> int:
    from hnbench.hardness.captions import load_captions
    from hnbench.hardness.run import hardness, hardness_many
    from hnbench.models import model_pairs

    settings = settings_from_args(HardnessSettings, args)
    settings.validate(args.output)  # the flags first; several models: every (model, weights) pair before any loads
    pairs = model_pairs(args.model, args.pretrained, model_config=args.model_config, check=len(args.model) > 1,
                        trust_remote_code=args.trust_remote_code)
    label = None if args.label_field == "none" else args.label_field
    spec = spec_from_args(DataSpec, args, dataset=None)  # the data flags, for each --dataset
    options = {k: v for k, v in spec.set_fields().items() if k not in ("data_root", "protocol")}
    if args.captions:  # a caption file reads its column (below) and no other data flag
        unread = sorted(set(spec.set_fields()) - {"caption_column"})
        if unread:
            raise ConfigError(f"--{unread[0].replace('_', '-')} is not read by a --captions file; leave it out")
        options.pop("caption_column", None)
    data: list[Any] = args.dataset or [load_captions(c, column=args.caption_column,
                                                     label_field=None if label == "auto" else label)
                                       for c in args.captions or ()]
    if not data:  # the data the result was scored on, as it records it (the data flags override)
        if not args.results:
            raise ConfigError("give --dataset, --captions, or --results (whose recorded data is then measured)")
        from hnbench.results.record import read_result

        data = [DataSpec.from_record(read_result(args.results[0]).dataset).override(**spec.set_fields())]
    kw = dict(model_config=args.model_config, trust_remote_code=args.trust_remote_code, data_root=args.data_root,
              protocol=args.protocol,
              dataset_options=options or None, label_field=label, settings=settings)
    if len(data) * len(pairs) == 1:
        reports = [hardness(data[0], pairs[0][0], pretrained=pairs[0][1], output_dir=args.output, **kw)]
    else:
        reports = hardness_many(data, [m for m, _ in pairs], pretrained=[p for _, p in pairs], output_dir=args.output,
                                **kw)
    for r in reports:
        t = r.text
        assert t.buckets is not None  # the text statistics always carry the in-batch buckets
        shares = ", ".join(f"{lab} {100 * s:.1f}%" for lab, s in zip(t.buckets.labels, t.buckets.shares))
        print(f"{r.label}: pairwise mean {t.pairwise.mean:.3f} ({t.pairwise.method}), hardest negative mean "
              f"{t.nearest.mean:.3f}; in-batch (B={t.buckets.batch_size}): {shares}")
    print(f"wrote {args.output}")
    return 0


# --- cache ---------------------------------------------------------------------------------------
def _add_cache_parser(sub: _Subparsers) -> None:
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
    for c in (ls, du, clear):
        c.add_argument("--cache-dir", help="embedding cache directory (default: as for eval)")
        c.set_defaults(handler=_run_cache)


def _weights(row: dict[str, Any]) -> str:
    """The weights column of ``cache ls``: the pretrained tag or file, "random init" where the model had none."""
    return str(row["pretrained"]) if row["pretrained"] else "random init" if row["arch"] else "–"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _run_cache(args: argparse.Namespace) -> int:
    from hnbench.evaluation import cache

    if args.cache_dir is not None and not args.cache_dir.strip():
        raise ConfigError("--cache-dir is empty (an unset variable?): name the cache folder, or leave the flag out "
                          "for the default one")
    root = args.cache_dir or cache.default_root()
    generated = [] if args.cache_dir else cache.generated_data()  # in the hnbench cache folder, beside root
    if args.cache_command == "ls":
        rows = cache.list_models(root)
        print(tabulate([[r["key"], r["arch"], _weights(r), (r["fingerprint"] or "")[:16], r["precision"],
                         r["context_length"], r["image_items"], r["text_items"], human_bytes(r["bytes"])] for r in rows],
                       headers=["key", "arch", "weights", "fingerprint", "precision", "ctx", "images", "texts",
                                "size"]) if rows else f"no cached embeddings in {root}")
        for g in generated:
            print(f"generated data {g['name']}: {g['images']:,} images, {human_bytes(g['bytes'])} in {g['path']} "
                  "(not embeddings: cache clear keeps it)")
    elif args.cache_command == "du":
        for name, size in cache.disk_usage(root).items():
            print(f"{human_bytes(size):>10}  {name}")
        print(f"({root})")
        for g in generated:
            print(f"{human_bytes(g['bytes']):>10}  generated data {g['name']} ({g['images']:,} images; "
                  f"cache clear keeps it)")
    else:
        plan = cache.plan_clear(root, models=args.model, kind=args.kind)
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
        freed = cache.clear(root, models=args.model, kind=args.kind)
        print(f"freed {human_bytes(freed)} in {root}")
    return 0


def _add_settings_args(p: argparse.ArgumentParser, cls: type, *, sparse: bool = False, skip: Collection[str] = (),
                       only: Collection[str] | None = None, required: Collection[str] = (),
                       prefix: str | None = None) -> None:
    """One flag per field of the settings dataclass ``cls`` (see :func:`hnbench.settings.option`), in its group.

    ``sparse``: every default is None, so only the flags given override a recipe (or a result's record). A
    flag already on ``p`` (the shared model / data flags) is kept as it is; ``skip`` / ``only``: the fields
    left out / the only ones made flags; ``required``: fields whose flag must be given; ``prefix``: ``cls`` is an
    objective's options, flagged ``--<prefix>-<field>`` and stored under the flag's flat key (``finelip_margin``).
    """
    kinds = field_types(cls)
    for f in dataclasses.fields(cls):
        meta = f.metadata
        if not meta.get("cli", True) or f.name in skip or (only is not None and f.name not in only):
            continue
        flag = flag_of(f, prefix)
        if flag in p._option_string_actions:
            continue
        group = _group(p, meta.get("group") or prefix or "options")
        default = None if f.default is dataclasses.MISSING else f.default
        kw: dict[str, Any] = {"dest": f.name if prefix is None else flat_key(f, prefix),
                              "help": meta["help"].replace("%", "%%"), **meta.get("argparse", {})}
        kind = kinds[f.name][0]  # X | None → X
        origin = typing.get_origin(kind)
        if kind is bool and default is True:
            kw["help"] = negated_help(meta).replace("%", "%%")
            group.add_argument("--no-" + flag[2:], action="store_const", const=False,
                               default=None if sparse else True, **kw)
            continue
        if kind is bool:
            group.add_argument(flag, action="store_true", default=None if sparse else False, **kw)
            continue
        if origin in (list, tuple):
            item = typing.get_args(kind)[0]
            if meta.get("sep"):
                kw["type"] = lambda text, sep=meta["sep"]: [t for t in text.split(sep) if t]
            elif kw.get("action") == "append":  # repeated flag, one value each
                kw["type"] = item
            else:
                kw.update(type=item, nargs=kw.get("nargs", "+"))
            default = list(default) if isinstance(default, (list, tuple)) else default
        elif kind in (int, float, str):
            kw.setdefault("type", kind)
        if meta.get("choices"):
            kw["choices"] = list(meta["choices"])
        else:
            kw.setdefault("metavar", flag[2:].upper().replace("-", "_"))
        if f.name in required:
            kw["required"] = True
        group.add_argument(flag, default=None if sparse else default, **kw)
        if meta.get("renamed_from"):  # the former spelling: the same option, with a deprecation line
            group.add_argument(meta["renamed_from"], **{**kw, "help": argparse.SUPPRESS, "required": False,
                                                        "action": _renamed(flag)})


def _renamed(flag: str) -> type[argparse.Action]:
    """An argparse action storing a value given under a flag's former name, with a line saying its new one."""

    class Renamed(argparse.Action):
        """Noted, not printed: a run that goes on says it once at the end, an error folds it into its one line."""

        def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                     option_string: str | None = None) -> None:
            note = f"{option_string} is now {flag} here (the old spelling will go)"
            for holder in (parser, namespace):
                setattr(holder, RENAMED, [*getattr(holder, RENAMED, []), note])
            setattr(namespace, self.dest, values)

    return Renamed


def _group(p: argparse.ArgumentParser, title: str) -> argparse._ArgumentGroup:
    """The argument group of that title on ``p`` (made if missing): shared "model", "data", ... groups."""
    return next((g for g in p._action_groups if g.title == title), None) or p.add_argument_group(title)


def _add_eval_options(p: argparse.ArgumentParser) -> None:
    _add_settings_args(p, EvalSettings)
    _group(p, "evaluation").add_argument(
        "--json", action="store_true", help="print the result record as JSON instead of a table")


def settings_from_args(cls: type[_S], args: argparse.Namespace) -> _S:
    """The settings ``cls`` of parsed flags made by :func:`_add_settings_args` (the global -q turns progress off)."""
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls)
             if f.metadata["cli"] and hasattr(args, f.name)}  # a flag a command leaves out keeps its default
    return cls(**given, progress=not args.quiet)


def eval_settings(args: argparse.Namespace) -> EvalSettings:
    """The evaluation settings of parsed ``eval`` / ``demo`` flags."""
    return settings_from_args(EvalSettings, args)


def _task_data_options(args: argparse.Namespace) -> dict[str, Any]:
    """The data options only one task reads (``--class-names``, …) that were given (the task checks them)."""
    names = {f for n in TASKS.names() for f in TASKS.get(n).option_names()}
    return {k: getattr(args, k) for k in sorted(names) if getattr(args, k, None) is not None}


def _run_eval(args: argparse.Namespace, model: ModelSpec, data: DataSpec) -> int:
    from hnbench.evaluation.evaluate import evaluate

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
          + (f"{ds['n_captions']} captions, " if "n_captions" in ds else f"{ds.get('n_classes')} classes, ")  # zeroshot
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
    print(f"wrote {result.path}")
    return 0


# --- train ---------------------------------------------------------------------------------------
def _add_train_options(tr: argparse.ArgumentParser) -> None:
    """One flag per TrainConfig field and per option of each objective (none of them defaults: only the flags
    given override the recipe), in TrainConfig's order: the objectives' where their options sit in it."""
    for title in ("objective", "optimisation", "PEFT and Long-CLIP", "run, diagnostics, evaluation"):
        _group(tr, title)  # in this order in --help (fields name their group; field order is the recipe's)
    names = [f.name for f in fields(TrainConfig)]
    at = names.index("objective_options")
    _add_settings_args(tr, TrainConfig, sparse=True, only=names[:at])
    for entry in OBJECTIVES.entries():
        _add_settings_args(tr, options_class(entry.name), sparse=True, prefix=entry.prefix)
    _add_settings_args(tr, TrainConfig, sparse=True, only=names[at + 1:])
    _group(tr, "run, diagnostics, evaluation").add_argument(
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
        set_option(cfg, key.strip().replace("-", "_"), _parse_value(value))
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


def _add_train_report_parser(sub: _Subparsers) -> None:
    p = sub.add_parser("train-report", help="plot a training run's diagnostics (losses, gradient norms, "
                                            "exact-zero InfoNCE gradients, active batches, R@1) to PNG")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories (several are overlaid)")
    p.add_argument("--output", help="PNG path (default: RUN_DIR/report.png of the first run)")
    p.add_argument("--json", action="store_true", help="print the per-epoch rows as JSON")
    p.set_defaults(handler=_run_train_report)


def _run_train_report(args: argparse.Namespace) -> int:
    png, table = train_report(args.runs, args.output)
    if args.json:
        print(json.dumps({r: epoch_table(read_run(r)) for r in args.runs}, indent=2))
    else:
        print(table, end="")
    print(f"wrote {png}")
    return 0


# --- compare, browse --------------------------------------------------------------------------------
def _add_compare_parser(sub: _Subparsers) -> None:
    p = sub.add_parser("compare", help="paired significance of R@K differences between stored results "
                                       "(bootstrap interval, exact McNemar, Holm against the first)")
    p.add_argument("results", nargs="+", metavar="RESULT.json", help="result files; the first is the baseline")
    _add_settings_args(p, CompareSettings)
    p.set_defaults(handler=_run_compare)


def _run_compare(args: argparse.Namespace) -> int:
    from hnbench.results.compare import compare

    out = compare(args.results, ks=args.ks, output_dir=args.output, seed=args.seed, n_boot=args.n_boot,
                  overwrite=args.overwrite)
    print(out.markdown(), end="")
    if args.output:
        print(f"wrote {os.path.join(args.output, 'compare.md')} and compare.json")
    return 0


def _add_browse_parser(sub: _Subparsers) -> None:
    p = sub.add_parser("browse", help="a static HTML page of a result's failures: worst queries with thumbnails "
                                      "and word diffs, recall by hardness, disagreements with another model "
                                      f"(captions shown up to {MAX_CAPTION_CHARS:,} characters, diffed up to "
                                      f"{MAX_WORDS:,} words)")
    p.add_argument("result", metavar="RESULT.json")
    _add_settings_args(p, BrowseSettings, required={"output"})
    _group(p, "data").description = ("the result's data, as recorded in it; a flag given replaces that field "
                                     "(e.g. --dataset or --data-root where the data is now)")
    _add_settings_args(p, DataSpec, sparse=True)
    p.set_defaults(handler=_run_browse)


def _run_browse(args: argparse.Namespace) -> int:
    from hnbench.pages.build import browse

    data = {f.name: getattr(args, f.name) for f in fields(DataSpec) if getattr(args, f.name) is not None}
    assert args.output is not None  # a required flag
    path = browse(args.result, args.output, compare=args.compare, hardness=args.hardness, limit=args.limit,
                  top=args.top, progress=not args.quiet, overwrite=args.overwrite, **data)
    print(f"wrote {path}")
    return 0


# --- segments (a side input of GOAL-style objectives) ----------------------------------------------------
def _add_segments_parser(sub: _Subparsers) -> None:
    p = sub.add_parser("segments", help="a segment sidecar (image boxes paired with caption sentences) for GOAL-style "
                                        "objectives: synthdense's exact geometry, GOAL's released JSON, or grid boxes "
                                        "scored by a frozen CLIP (no SAM)")
    _add_settings_args(p, ModelSpec)
    _add_settings_args(p, DataSpec, required={"dataset"})
    _add_settings_args(p, SegmentsSettings)
    p.set_defaults(handler=_run_segments)


def _run_segments(args: argparse.Namespace) -> int:
    from hnbench.sidecars.grid import make_segments

    settings = SegmentsSettings(**{f.name: getattr(args, f.name) for f in fields(SegmentsSettings)})
    path = make_segments(spec_from_args(DataSpec, args), spec_from_args(ModelSpec, args), settings,
                         progress=not args.quiet)
    print(f"wrote {path}")
    return 0


# --- suite (a named set of benchmarks for every model) -----------------------------------------------------
def _add_model_list_args(g: argparse._ArgumentGroup, model_help: str, pretrained_more: str = "") -> None:
    """The repeatable --model / --pretrained pair of the commands that take several models (hardness, suite):
    the i-th --pretrained goes with the i-th --model, 'none' for a model without weights."""
    g.add_argument("--model", action="append", required=True, help=model_help)
    g.add_argument("--pretrained", action="append",
                   help="weights of each --model, in order ('none': that model has none)" + pretrained_more)


class _ListSuites(argparse.Action):
    """``hnbench suite --list``: print the suites and exit, as --help does (no NAME, --model or --output needed)."""

    def __init__(self, option_strings: list[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        from hnbench.evaluation.suites import describe_suites

        print(describe_suites(), end="")
        parser.exit()


def _add_suite_parser(sub: _Subparsers) -> None:
    p = sub.add_parser("suite", help="run a named set of benchmarks for every model; one aggregated table")
    p.add_argument("name", metavar="NAME", help=f"the suite: {SUITES.describe()}; or a suite file FILE.toml / "
                   "FILE.json of entries (benchmark, protocol, task; or your own dataset and its data options)")
    p.add_argument("--list", action=_ListSuites, help="list the suites with their entries and exit")
    _add_model_list_args(_group(p, "model"), "a model as for eval; repeat for several")
    _add_settings_args(p, ModelSpec)  # --model-config, --context-length (--model and --pretrained above)
    _add_settings_args(p, SuiteSettings, required={"output"})
    _add_settings_args(p, EvalSettings, skip={"task"})  # each entry has its own task
    p.set_defaults(handler=_run_suite)


def _run_suite(args: argparse.Namespace) -> int:
    from hnbench.evaluation.suites import run_suite

    settings = settings_from_args(EvalSettings, args)
    run = run_suite(args.name, args.model, pretrained=args.pretrained, model_config=args.model_config,
                    trust_remote_code=args.trust_remote_code, data_root_map=args.data_root_map, output_dir=args.output,
                    allow_count_mismatch=args.allow_count_mismatch, settings=settings)
    print(run.table, end="")
    print(f"wrote {run.path}")
    for (model, entry), message in run.failures.items():
        print(f"hnbench: {model} on {entry} failed: {message}", file=sys.stderr)
    return 0 if run.ok else 1


def _configure_logging(verbose: bool, quiet: bool) -> None:
    """hnbench's loggers at INFO (DEBUG with -v); other libraries (open_clip logs INFO on root) at WARNING."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logger.setLevel(logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO)
    if quiet:  # also the Hugging Face download / weight-loading bars (transformers reads this flag on import)
        os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
        from huggingface_hub.utils.tqdm import disable_progress_bars

        disable_progress_bars()
        if "transformers" in sys.modules:
            sys.modules["transformers"].utils.logging.disable_progress_bar()


# --- models: the families and the zoo (hnbench.list_models) -----------------------------------------
def _add_models_parser(sub: _Subparsers) -> None:
    from hnbench.models.zoo import MODEL_FORMATS

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


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _configure_logging(args.verbose, args.quiet)
    try:
        return _dispatch(args)
    finally:  # a former flag spelling: said once, last (an error's one line has said it already)
        for note in getattr(args, RENAMED, []):
            print(f"hnbench: warning: {note}", file=sys.stderr)


def _dispatch(args: argparse.Namespace) -> int:
    try:
        if args.command == "eval":
            return _run_eval(args, spec_from_args(ModelSpec, args), spec_from_args(DataSpec, args))
        if args.command == "demo":
            return _run_eval(args, DEMO_MODEL, DEMO_DATA)
        if args.command == "train":
            return _run_train(args)
        if hasattr(args, "handler"):  # subcommands registered with set_defaults(handler=...)
            handler: Callable[[argparse.Namespace], int] = args.handler
            return handler(args)
    except HnbenchError as e:
        print(f"hnbench: error: {e}{_renamed_note(args)}", file=sys.stderr)
        setattr(args, RENAMED, [])
        return 2
    except OSError as e:  # no room: the machine's state, not a bug: one line (files are replaced whole or not at all)
        if e.errno not in NO_ROOM:
            raise
        where = f" writing {e.filename}" if e.filename else ""
        fix = "raise the file-size limit (ulimit -f)" if e.errno == errno.EFBIG else "free some space"
        print(f"hnbench: error: {os.strerror(e.errno)}{where}; {fix} and run again{_renamed_note(args)}",
              file=sys.stderr)
        setattr(args, RENAMED, [])
        return 1
    except KeyboardInterrupt:  # the encoders' cache writers flush on the way out; rerun to resume
        cached = getattr(args, "use_cache", False)  # eval's / hardness's --cache/--no-cache
        encodes = args.command in ("eval", "demo", "hardness") and cached
        print("hnbench: interrupted" + ("; the embeddings encoded so far are cached: rerun to resume" if encodes
                                        else ""), file=sys.stderr)
        return 130
    return 1


if __name__ == "__main__":
    sys.exit(main())
