"""``hnbench hardness``: how near-duplicate a caption set's negatives are (for a text encoder or a model), and
where a model fails on them. The encoders and the statistics load when the command runs."""

from __future__ import annotations

import argparse
from typing import Any

from hnbench.cli.flags import (
    Subparsers,
    add_model_list_args,
    add_settings_args,
    add_spec_args,
    settings_from_args,
    spec_from_args,
)
from hnbench.errors import ConfigError
from hnbench.registry import TEXT_ENCODERS
from hnbench.settings import HardnessSettings
from hnbench.specs import DataSpec

__all__ = ["add_hardness_parser"]


# --- hardness ------------------------------------------------------------------------------------
def add_hardness_parser(sub: Subparsers) -> None:
    p = sub.add_parser("hardness", help="how near-duplicate a caption set's negatives are (for an encoder), and "
                                        "where a model fails on them: JSON, PNG plots, Markdown report; on an "
                                        "option-choice set (a compositional benchmark), how close each negative is "
                                        "to its positive and a choice result's accuracy by that")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--dataset", action="append", help="registered name or path (as for eval); repeat to compare "
                                                        "(default: the data the first --results file records)")
    src.add_argument("--captions", action="append", metavar="FILE",
                     help="a caption list: .txt (one a line) or CSV/TSV/JSONL with a caption column; repeatable")
    p.add_argument("--label-field", default="auto",
                   help="per-image label in the manifest (or --captions column) whose structure to report, e.g. "
                        "family; default auto (synthdense's family when present); 'none' to skip")
    add_model_list_args(p.add_argument_group("model"),
                        f"a model as for eval, or a text-only encoder: {TEXT_ENCODERS.describe()}; repeat to compare",
                        "; several for one --model: each is measured")
    add_spec_args(p, required=False)  # --dataset, --model and --pretrained are the ones above (repeatable)
    p.add_argument("--output", required=True, help="directory for hardness.json, plots/, report.md")
    add_settings_args(p, HardnessSettings)
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
    from hnbench.hardness.choice import choice_task

    specs = [d if isinstance(d, DataSpec) else DataSpec.of(d, options, data_root=args.data_root, protocol=args.protocol)[0]
             for d in data if isinstance(d, (str, DataSpec))]
    if any(choice_task(sp) is not None for sp in specs):  # an option-choice set: its negatives beside its positives
        if len(data) * len(pairs) != 1:
            raise ConfigError("the hardness of an option-choice set takes one --dataset and one --model at a time")
        return _run_choice_hardness(args, data[0], pairs[0], options, settings)
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


def _run_choice_hardness(args: argparse.Namespace, data: Any, pair: tuple[Any, str | None], options: dict[str, Any],
                         settings: HardnessSettings) -> int:
    """``hnbench hardness`` on an option-choice set (:mod:`hnbench.hardness.choice`): the report and one line per
    subset and per result."""
    from hnbench.hardness.choice import choice_hardness

    r = choice_hardness(data, pair[0], pretrained=pair[1], model_config=args.model_config,
                        trust_remote_code=args.trust_remote_code, data_root=args.data_root, protocol=args.protocol,
                        dataset_options=options or None, output_dir=args.output, settings=settings)
    for sub in r.subsets:
        print(f"{sub.subset}: {sub.n_items} items, negative–positive similarity mean {sub.hardness.mean:.3f}, "
              f"{100 * sub.share_near_twins:.1f}% ≥ {settings.threshold:g}")
    for acc in r.accuracy:
        cells = ", ".join(f"{b.label} {b.accuracy:.1f}% (n={b.n})" for b in acc.overall if b.n)
        print(f"{acc.result}: {acc.metric} by hardness: {cells}")
    print(f"wrote {args.output}")
    return 0
