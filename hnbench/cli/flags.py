"""The CLI's generated flags: one flag per field of a settings dataclass (:func:`hnbench.settings.option`), the
model and data flags of :class:`~hnbench.specs.ModelSpec` / :class:`~hnbench.specs.DataSpec`, a flag's former
spelling still accepted with a deprecation line, the shared argument groups, the global ``-q`` / ``-v``, and the
parser whose errors are one line.

Light (argparse, the settings and the specs): every subcommand module builds its parser from it, so
``hnbench --help`` answers without loading torch.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from collections.abc import Collection
from typing import Any, TypeAlias, TypeVar

from hnbench.settings import (
    EvalSettings,
    HardnessSettings,
    choices_of,
    field_types,
    flag_of,
    flat_key,
    help_of,
    negated_help,
)
from hnbench.specs import DataSpec, ModelSpec

__all__ = ["RENAMED", "Parser", "Subparsers", "add_global_flags", "add_model_list_args", "add_settings_args",
           "add_spec_args", "group", "renamed_note", "settings_from_args", "spec_from_args"]

_S = TypeVar("_S", EvalSettings, HardnessSettings)
_T = TypeVar("_T", DataSpec, ModelSpec)

RENAMED = "_renamed_flags"  # where a former spelling's use is noted (the parser and the namespace)


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: the usage block would bury the message (``--help`` shows it)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help){renamed_note(self)}\n")


Subparsers: TypeAlias = "argparse._SubParsersAction[Parser]"


def renamed_note(holder: object) -> str:
    """The deprecation of the former spellings used, folded into an error's one line ("" if none)."""
    said = getattr(holder, RENAMED, [])
    return f"; {'; '.join(said)}" if said else ""


def add_spec_args(p: argparse.ArgumentParser, *, sparse: bool = False, required: bool = True) -> None:
    """The model and data flags, generated from :class:`ModelSpec` and :class:`DataSpec` (``--model`` and
    ``--dataset`` required unless ``sparse`` or not ``required``)."""
    must = {"model", "dataset"} if required and not sparse else set()
    add_settings_args(p, ModelSpec, sparse=sparse, required=must)
    add_settings_args(p, DataSpec, sparse=sparse, required=must)


def spec_from_args(cls: type[_T], args: argparse.Namespace, **given: Any) -> _T:
    """The :class:`ModelSpec` / :class:`DataSpec` of parsed flags (flags not given keep the defaults)."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls)
              if getattr(args, f.name, None) is not None}
    return cls(**{**values, **given})


def add_settings_args(p: argparse.ArgumentParser, cls: type, *, sparse: bool = False, skip: Collection[str] = (),
                      only: Collection[str] | None = None, required: Collection[str] = (),
                      prefix: str | None = None, title: str | None = None) -> None:
    """One flag per field of the settings dataclass ``cls`` (see :func:`hnbench.settings.option`), in its group.

    ``sparse``: every default is None, so only the flags given override a recipe (or a result's record). A
    flag already on ``p`` (the shared model / data flags) is kept as it is; ``skip`` / ``only``: the fields
    left out / the only ones made flags; ``required``: fields whose flag must be given; ``prefix``: ``cls`` is an
    objective's or a task's options, flagged ``--<prefix>-<field>`` (a field's declared ``flag`` kept) and stored
    under the flag's flat key (``finelip_margin``, ``templates``); ``title``: the help group of fields that name
    none (default: ``prefix``).
    """
    kinds = field_types(cls)
    for f in dataclasses.fields(cls):
        meta = f.metadata
        if not meta.get("cli", True) or f.name in skip or (only is not None and f.name not in only):
            continue
        flag = flag_of(f, prefix)
        if flag in p._option_string_actions:
            continue
        into = group(p, meta.get("group") or title or prefix or "options")
        default = None if f.default is dataclasses.MISSING else f.default
        kw: dict[str, Any] = {"dest": f.name if prefix is None else flat_key(f, prefix),
                              "help": help_of(meta).replace("%", "%%"), **meta.get("argparse", {})}
        kind = kinds[f.name][0]  # X | None → X
        origin = typing.get_origin(kind)
        if kind is bool and default is True:
            kw["help"] = negated_help(meta).replace("%", "%%")
            into.add_argument("--no-" + flag[2:], action="store_const", const=False,
                              default=None if sparse else True, **kw)
            continue
        if kind is bool:
            into.add_argument(flag, action="store_true", default=None if sparse else False, **kw)
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
        choices = choices_of(meta)  # a registry's, read now: a plugin's entries are choices too
        if choices:
            kw["choices"] = list(choices)
        else:
            kw.setdefault("metavar", flag[2:].upper().replace("-", "_"))
        if f.name in required:
            kw["required"] = True
        into.add_argument(flag, default=None if sparse else default, **kw)
        if meta.get("renamed_from"):  # the former spelling: the same option, with a deprecation line
            into.add_argument(meta["renamed_from"], **{**kw, "help": argparse.SUPPRESS, "required": False,
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


def group(p: argparse.ArgumentParser, title: str) -> argparse._ArgumentGroup:
    """The argument group of that title on ``p`` (made if missing): shared "model", "data", ... groups."""
    return next((g for g in p._action_groups if g.title == title), None) or p.add_argument_group(title)


def settings_from_args(cls: type[_S], args: argparse.Namespace) -> _S:
    """The settings ``cls`` of parsed flags made by :func:`add_settings_args` (the global -q turns progress off)."""
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls)
             if f.metadata["cli"] and hasattr(args, f.name)}  # a flag a command leaves out keeps its default
    return cls(**given, progress=not args.quiet)


def add_model_list_args(g: argparse._ArgumentGroup, model_help: str, pretrained_more: str = "") -> None:
    """The repeatable --model / --pretrained pair of the commands that take several models (hardness, suite):
    the i-th --pretrained goes with the i-th --model, 'none' for a model without weights."""
    g.add_argument("--model", action="append", required=True, help=model_help)
    g.add_argument("--pretrained", action="append",
                   help="weights of each --model, in order ('none': that model has none)" + pretrained_more)


def add_global_flags(p: argparse.ArgumentParser, *, top: bool = True) -> None:
    """-q / -v on ``p`` and on every subcommand below it, so ``hnbench -q eval`` and ``hnbench eval -q`` are one
    command (below the top the default is "not given", so a subcommand never resets a flag given before it)."""
    default: Any = False if top else argparse.SUPPRESS
    p.add_argument("-q", "--quiet", action="store_true", default=default, help="no progress bars, warnings only")
    p.add_argument("-v", "--verbose", action="store_true", default=default, help="debug logging")
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):  # an alias maps to the same parser
                add_global_flags(child, top=False)
