"""Option groups declared once: each field carries its type, default, help, CLI group and flags.

A field is declared with :func:`option`; its metadata is read by the CLI (``hnbench.cli`` builds the
flags), by the resume check (``resume_free``) and by the result record (``record``), so adding an option
is one edit. This module stays light (no torch, no argparse): the CLI, the trainer and the evaluator
import it.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from hnbench.errors import ConfigError, did_you_mean
from hnbench.registry import SCORERS, TASKS
from hnbench.validate import (
    BACKENDS,
    DEFAULT_KS,
    PRECISIONS,
    SEARCHES,
    check_at_least,
    check_device,
    check_edges,
    check_eval,
    check_number,
    check_output_dir,
)

__all__ = ["DEFAULT_EDGES", "EvalSettings", "HardnessSettings", "check_declared", "choices_of", "eval_identity_names", "flag_of", "fold_task_options", "flat_key", "from_options", "help_of", "identity_fields",
           "negated_help", "option", "option_help", "resume_free", "same_as", "take_task_options", "task_option_keys"]


class Listing(Protocol):
    """What an option's ``choices`` or ``registry`` may be beside a sequence: a registry, read when used."""

    def names(self) -> list[str]: ...

    def describe(self) -> str: ...


def option(default: Any = dataclasses.MISSING, *, help: str, group: str | None = None, flag: str | None = None,
           choices: Sequence[str] | Listing | None = None, cli: bool = True, record: bool | str = False,
           resume_free: bool = False, identity: bool = False, sep: str | None = None, minimum: float | None = None,
           above: float | None = None, maximum: float | None = None, below: float | None = None,
           reads: Sequence[str] | None = None, default_factory: Any = dataclasses.MISSING, off: str | None = None,
           renamed_from: str | None = None, odd: bool = False, not_above: str | None = None,
           registry: Listing | None = None, **argparse_extra: Any) -> Any:
    """A dataclass field with the metadata the CLI, resume check and result record read.

    ``flag`` defaults to ``--field-name`` (a bool whose default is True becomes ``--no-<flag>``);
    ``cli=False`` gives no flag; ``record`` is True (always written to the result's settings) or
    ``"if_set"`` (written when it differs from the default, so default results keep their bytes);
    ``resume_free`` marks a training option that may change when a run is resumed; ``identity`` one that
    changes the numbers, so it names the output (:func:`identity_fields`; a new one recorded ``"if_set"``
    keeps the names of the files written before it); ``sep`` parses a
    list flag from one separated string; ``minimum``: an integer field holds an integer at least this;
    a float field (always a finite number) lies within ``minimum``/``maximum`` (inclusive) and
    ``above``/``below`` (exclusive), where declared, an ``odd`` integer is 0 or odd, and a field declaring
    ``not_above`` (another field's name) is at most that field's value (all checked by :func:`check_minimums`,
    naming the flags of the class being checked: a field reused with :func:`same_as` under another name is
    named by its own flag); ``choices`` are
    the only values a field takes (checked by :func:`check_choices`, None allowed where it is the default): a
    sequence, or a registry (:class:`hnbench.registry.Registry`), whose names are read when they are checked or the
    flags are made, so a plugin's entries count (:func:`choices_of`); ``registry``: a registry the help lists
    without limiting the values to it (a data set: a registered name or a path); ``help`` may name the registry's
    entries as ``{choices}`` (each with its help) or ``{names}`` (the names alone), filled when shown
    (:func:`help_of`);
    ``reads``: the kinds of data that read a data field (:class:`hnbench.specs.DataSpec`); ``off``: for a bool
    that is on by default, what its ``--no-<flag>`` does (``help`` says what the option does when on; the
    flag's help is generated from both, :func:`negated_help`); ``renamed_from``: the flag's former spelling,
    still accepted with a deprecation line; other keywords (nargs, const, metavar) go to argparse as they are.
    """
    live: Listing | None = None if choices is None or isinstance(choices, Sequence) else choices  # read when used
    meta = {"help": help, "off": off, "renamed_from": renamed_from, "group": group, "flag": flag,
            "choices": live or (tuple(choices) if isinstance(choices, Sequence) and choices else None),
            "registry": live or registry,
            "cli": cli, "record": record, "resume_free": resume_free, "identity": identity, "sep": sep,
            "minimum": minimum, "above": above, "maximum": maximum, "below": below, "odd": odd,
            "not_above": not_above, "reads": tuple(reads) if reads else None, "argparse": argparse_extra}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def same_as(cls: type, name: str, default: Any = dataclasses.MISSING, **changes: Any) -> Any:
    """Field ``name`` of ``cls`` declared again in another class (its help, bounds and flag), with another
    ``default`` or metadata ``changes`` (e.g. ``group``, ``resume_free``): one declaration, reused."""
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    meta = {**f.metadata, **changes}
    if default is dataclasses.MISSING and f.default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=f.default_factory, metadata=meta)
    return dataclasses.field(default=f.default if default is dataclasses.MISSING else default, metadata=meta)


def choices_of(meta: Mapping[str, Any]) -> tuple[str, ...] | None:
    """A field's choices (``meta``: its metadata), a registry's read now: None where any value goes."""
    choices = meta.get("choices")
    if choices is None:
        return None
    return tuple(choices.names()) if callable(getattr(choices, "names", None)) else tuple(choices)


def help_of(meta: Mapping[str, Any]) -> str:
    """A field's help (``meta``: its metadata), with its registry's entries where it names them: ``{choices}``
    (``name (help), ...``) or ``{names}`` (``name, ...``), read now."""
    text: str = meta["help"]
    registry = meta.get("registry")
    if registry is not None:
        text = text.replace("{choices}", registry.describe()).replace("{names}", ", ".join(registry.names()))
    return text


def negated_help(meta: Mapping[str, Any]) -> str:
    """The help of a default-on bool's ``--no-<flag>`` (``meta``: its field's metadata): what that flag does
    (``off``), then what the option does when left on."""
    off = meta.get("off") or "turn this off"
    return f"{off} (without it: {help_of(meta)})"


def option_help(cls: type, name: str) -> str:
    """The help text declared for field ``name`` of ``cls`` (its registry's entries filled in)."""
    return help_of(next(f.metadata for f in dataclasses.fields(cls) if f.name == name))


def resume_free(cls: type) -> frozenset[str]:
    """Names of the fields of ``cls`` that may differ between an interrupted run and its continuation."""
    return frozenset(f.name for f in dataclasses.fields(cls) if f.metadata.get("resume_free"))


def identity_fields(cls: Any) -> list[str]:
    """Names of the fields of ``cls`` (a settings class or instance) that change the numbers (``identity``):
    a result file's name and an output's inputs record are derived from them."""
    return sorted(f.name for f in dataclasses.fields(cls) if f.metadata.get("identity"))


_BOUNDS = ("minimum", "above", "maximum", "below")  # option()'s bound keywords, as check_number takes them


def check_minimums(settings: Any, *, with_key: bool = False, prefix: str | None = None,
                   section: str | None = None) -> None:
    """The declared bounds: integer fields with ``minimum`` hold an integer at least that large, float fields a
    finite number within their bounds (None where None is the default).

    The message names the flag, and with ``with_key`` the field's name too (a recipe's key); ``prefix`` and
    ``section``: the settings are an objective's options, flagged ``--<prefix>-<name>`` and keyed
    ``<section>.<name>`` (:func:`flag_of`)."""
    types_ = field_types(type(settings))
    for f in dataclasses.fields(settings):
        value, bounds = getattr(settings, f.name), {k: f.metadata.get(k) for k in _BOUNDS}
        is_float, low = types_[f.name][0] is float, bounds["minimum"]
        if value is None and f.default is None:
            continue
        label = _bound_label(f, with_key, prefix, section)
        if is_float:
            check_number(label, value, **bounds)
        elif low is not None:
            check_at_least(label, value, int(low))
        if f.metadata.get("odd") and value and value % 2 == 0:
            raise ConfigError(f"{label} must be 0 or odd, got {value}")
    for f in dataclasses.fields(settings):  # relations between fields, once each field is within its own bounds
        value, other = getattr(settings, f.name), f.metadata.get("not_above")
        if other and value is not None and (limit := getattr(settings, other)) is not None and value > limit:
            g = next(g for g in dataclasses.fields(settings) if g.name == other)
            raise ConfigError(f"{_bound_label(f, with_key, prefix, section)} ({value:g}) is above "
                              f"{_bound_label(g, with_key, prefix, section)} ({limit:g})")


def flag_of(f: dataclasses.Field[Any], prefix: str | None = None) -> str:
    """The field's command-line flag: declared (``flag``), else ``--field-name``, or with an objective's
    ``prefix`` ``--prefix-field-name`` (``--finelip-margin``)."""
    return str(f.metadata.get("flag") or "--" + (f"{prefix}-" if prefix else "") + f.name.replace("_", "-"))


def flat_key(f: dataclasses.Field[Any], prefix: str | None = None) -> str:
    """The field's key in a flat recipe or ``--set``: its flag's spelling with underscores (``finelip_margin``,
    ``filter_colors``): what an objective's option was called before options were nested."""
    return flag_of(f, prefix)[2:].replace("-", "_")


def _key(f: dataclasses.Field[Any], section: str | None) -> str:
    return f"{section}.{f.name}" if section else f.name


def _bound_label(f: dataclasses.Field[Any], with_key: bool, prefix: str | None = None,
                 section: str | None = None) -> str:
    flag = flag_of(f, prefix)
    return f"{flag} ({_key(f, section)})" if with_key else flag


def _label(f: dataclasses.Field[Any], with_key: bool, prefix: str | None = None, section: str | None = None) -> str:
    return _key(f, section) if with_key or not f.metadata.get("cli", True) else flag_of(f, prefix)


def check_choices(settings: Any, *, with_key: bool = False, prefix: str | None = None,
                  section: str | None = None) -> None:
    """Fields declaring ``choices`` hold one of them, compared exactly (None where None is the default); the
    message names the flag, or with ``with_key`` the field (a recipe's key)."""
    for f in dataclasses.fields(settings):
        value, choices = getattr(settings, f.name), choices_of(f.metadata)
        if choices and value not in choices and not (value is None and f.default is None):
            raise ConfigError(f"{_label(f, with_key, prefix, section)} must be one of {', '.join(choices)}, "
                              f"got {value!r}")


def check_declared(settings: Any, *, with_key: bool = False, prefix: str | None = None,
                   section: str | None = None) -> None:
    """Everything a settings class declares on its fields: types, bounds and choices (one line each)."""
    check_types(settings, with_key=with_key, prefix=prefix, section=section)
    check_minimums(settings, with_key=with_key, prefix=prefix, section=section)
    check_choices(settings, with_key=with_key, prefix=prefix, section=section)


def field_types(cls: type) -> dict[str, tuple[Any, bool]]:
    """Each field's declared type (``X | None`` read as X) and whether None is allowed: what a flag parses
    and what a recipe or keyword value must be."""
    out = {}
    for name, kind in typing.get_type_hints(cls).items():
        optional = False
        if typing.get_origin(kind) in (typing.Union, types.UnionType):
            optional = type(None) in typing.get_args(kind)
            kind = next(t for t in typing.get_args(kind) if t is not type(None))
        out[name] = (kind, optional)
    return out


_IS = {bool: lambda v: isinstance(v, bool), int: lambda v: isinstance(v, int) and not isinstance(v, bool),
       float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), str: lambda v: isinstance(v, str),
       dict: lambda v: isinstance(v, dict)}


def check_types(settings: Any, *, with_key: bool = False, prefix: str | None = None,
                section: str | None = None) -> None:
    """Scalar and mapping fields hold a value of their declared type (a recipe or ``--set`` value may not)."""
    for name, (kind, optional) in field_types(type(settings)).items():
        value = getattr(settings, name)
        is_kind = _IS.get(typing.get_origin(kind) or kind)
        if is_kind is None or (value is None and optional) or is_kind(value):
            continue
        f = next(f for f in dataclasses.fields(settings) if f.name == name)
        label = _key(f, section) if not f.metadata.get("cli", True) else _bound_label(f, with_key, prefix, section)
        expected = {"bool": "true or false", "int": "an integer", "float": "a number", "str": "a string",
                    "dict": "a table of options"}[(typing.get_origin(kind) or kind).__name__]
        raise ConfigError(f"{label} must be {expected}, got {value!r}")


def from_options(cls: type, base: Any | None, options: Mapping[str, Any]) -> Any:
    """``base`` (or the defaults) with ``options`` replaced; an unknown name is a TypeError with a suggestion."""
    known = [f.name for f in dataclasses.fields(cls)]
    for name in options:
        if name not in known:
            hint = did_you_mean(name, known, n=1)
            raise TypeError(f"unknown {cls.__name__} option {name!r}" + (f" ({hint})" if hint else ""))
    return dataclasses.replace(base, **options) if base is not None else cls(**options)


@dataclass
class EvalSettings:
    """How an evaluation runs and scores (everything but the model, the data and where results go).

    Fields marked ``record`` are written, in this order, to the result's ``settings``.
    """

    device: str = option("cpu", group="model", record=True, help="cpu, cuda, cuda:N or mps (default: cpu)")
    # recorded (and in the file name) only when not retrieval, so every retrieval result keeps its name
    task: str = option("retrieval", group="evaluation", record="if_set", identity=True, choices=TASKS,
                       help="what to measure (default: retrieval): {choices}")
    batch_size: int = option(64, group="evaluation", record=True, minimum=1, help="images per encoder batch (default 64)")
    precision: str = option("fp32", group="evaluation", record=True, identity=True, choices=PRECISIONS,
                            help="model weights precision; the images are cast to it (all three run on CPU and CUDA)")
    amp: bool = option(False, group="evaluation", record=True, identity=True, help="autocast the encoders (CUDA only)")
    backend: str = option("auto", group="evaluation", record=True, choices=BACKENDS, help="exact search backend")
    search: str = option("exact", group="evaluation", record=True, identity=True, choices=SEARCHES,
                         help="approximate: faiss HNSW for exploring large galleries; reports its recall against "
                              "exact search on a sample and is marked so leaderboards keep it apart")
    ks: tuple[int, ...] = option(DEFAULT_KS, group="evaluation", record=True, identity=True, flag="--k",
                                 help="recall cut-offs")
    ci: bool = option(True, group="evaluation", record=True, identity=True,
                      help="bootstrap confidence intervals of R@K", off="skip the confidence intervals")
    seed: int = option(0, group="evaluation", record="if_set", identity=True, minimum=0,
                       help="seed of the bootstrap resampling (default 0)")
    # the chosen task's own options (its TASKS entry's ``options`` class, hnbench.tasks.options for the built-in
    # ones; a mapping of them is read into it): recorded here, each under its flat key when set (``templates``)
    task_options: Any = option(default_factory=dict, cli=False,
                               help="the chosen task's own options: an instance of its options class, or a mapping "
                                    "of them (read into it)")
    limit: int | None = option(None, group="evaluation", record="if_set", identity=True, minimum=1, metavar="N",
                               help="score a seeded subset of N images (seed: --seed) and their captions, for a quick "
                                    "look: recorded in the result, which is never ranked with full runs")
    scorer: str = option("cosine", group="evaluation", record="if_set", identity=True, choices=SCORERS,
                         help="how a pair is scored (default: cosine): {choices}. A pairwise scorer "
                              "scores every (image, caption) pair exactly, in blocks (memory: the items' states, "
                              "never an N×M token tensor); only the model's family offers it; its states are never "
                              "cached")
    rerank_top: int | None = option(None, group="evaluation", record="if_set", identity=True, minimum=1, metavar="K",
                                    help="with a pairwise --scorer: re-score only the dual encoder's top K of each "
                                         "query and re-order them by it; a positive outside them keeps its "
                                         "dual-encoder rank (> K, below the K re-ranked); recorded in the result")
    text_batch_size: int | None = option(None, group="evaluation", minimum=1,
                                         help="captions per encoder batch (default: max(--batch-size, 64))")
    num_workers: int | None = option(None, group="evaluation", minimum=0,
                                     help="image decoding and tokenizing workers (default: one per core, at most 8; "
                                          "on the CPU only the cores torch's forward leaves free, usually 0); "
                                          "0 decodes in the main process and needs no shared memory")
    context_length: int | None = option(None, minimum=1, group="model", help="text context length (default: the model's)")
    skip_invalid: bool = option(False, group="data",
                                help="drop and count missing/corrupt images and empty captions instead of failing")
    use_cache: bool = option(True, group="evaluation", flag="--cache", help="read and write the embedding cache",
                             off="neither read nor write the embedding cache: encode everything")
    cache_dir: str | None = option(None, group="evaluation",
                                   help="embedding cache directory (default: $HNBENCH_CACHE/embeddings, else "
                                        "$XDG_CACHE_HOME/hnbench/embeddings, else ~/.cache/hnbench/embeddings)")
    overwrite: bool = option(False, group="evaluation",
                             help="replace an existing file of the same name that holds another result or is "
                                  "unreadable (a rerun of the same model, data and settings replaces its own file "
                                  "without it)")
    progress: bool = option(True, cli=False, help="progress bars (the CLI's -q turns them off)")
    distributed: bool | None = option(None, cli=False,
                                      help="share the encoding over torchrun ranks (default: when WORLD_SIZE > 1)")

    def __post_init__(self) -> None:
        if isinstance(self.ks, (list, tuple)):  # the CLI gives a list: one spelling, so settings compare equal
            self.ks = tuple(self.ks)
        if isinstance(self.cache_dir, Path):
            self.cache_dir = str(self.cache_dir)
        if isinstance(self.task_options, Mapping) and self.task in TASKS:  # else: validate() says what is wrong
            cls = TASKS.entry(self.task).options_class()
            if cls is not None and set(self.task_options) <= {f.name for f in dataclasses.fields(cls)}:
                self.task_options = cls(**self.task_options)

    def validate(self, output_dir: str | Path | None = None) -> None:
        """Every setting (and the output directory), before any model or data is loaded."""
        check_declared(self)
        self._check_task_options()
        check_eval(ks=self.ks, device=self.device, output_dir=output_dir, backend=self.backend)
        if self.scorer != "cosine" and not TASKS.get(self.task).scorers:
            raise ConfigError(f"--scorer {self.scorer} scores retrieval exactly: not with --task {self.task}")
        if self.scorer != "cosine" and self.search != "exact":
            raise ConfigError(f"--scorer {self.scorer} scores retrieval exactly: not with --search {self.search}")
        if self.rerank_top is not None and self.scorer == "cosine":
            raise ConfigError("--rerank-top K re-ranks the dual encoder's top K with a pairwise --scorer; pass --scorer "
                              f"NAME ({', '.join(n for n in SCORERS.names() if n != 'cosine')})")

    def _check_task_options(self) -> None:
        """``task_options`` are the chosen task's (its options class), within their declared bounds."""
        entry = TASKS.entry(self.task)
        cls, given = entry.options_class(), self.task_options
        if cls is None:
            if given:
                names = sorted(given) if isinstance(given, Mapping) else [type(given).__name__]
                raise ConfigError(f"--task {entry.name} has no options of its own, got {', '.join(map(str, names))}")
            return
        if isinstance(given, Mapping):  # a name the class does not declare (__post_init__ read the others)
            known = [f.name for f in dataclasses.fields(cls)]
            bad = next(str(k) for k in given if k not in known)
            hint = did_you_mean(bad, known, n=1)
            raise ConfigError(f"--task {entry.name} has no option {bad!r}" + (f" ({hint})" if hint else ""))
        if not isinstance(given, cls):
            raise ConfigError(f"task_options must be --task {entry.name}'s options ({cls.__name__}), got "
                              f"{type(given).__name__}")
        check_declared(given, prefix=entry.prefix)

    def recorded(self) -> dict[str, Any]:
        """The fields marked ``record``, as written to a result's ``settings`` (tuples as lists), the chosen
        task's options likewise under their flat keys (where ``task_options`` sits), and under ``identity`` the
        names of those that change the numbers (the result file's name hashes them: :func:`eval_identity_names`)."""
        out = {}
        for f in dataclasses.fields(self):
            if f.name == "task_options":  # the task's own options, in this field's place
                out.update(self._recorded_task_options())
            elif _is_recorded(f, value := getattr(self, f.name)):
                out[f.name] = _plain(value)
        return {**out, "identity": eval_identity_names(type(self))}

    def _recorded_task_options(self) -> dict[str, Any]:
        """The chosen task's options marked ``record``, each under its flat key (:func:`flat_key`)."""
        options = self.task_options
        if not dataclasses.is_dataclass(options) or self.task not in TASKS:
            return {}
        prefix = TASKS.entry(self.task).prefix
        return {flat_key(f, prefix): _plain(value) for f in dataclasses.fields(options)
                if _is_recorded(f, value := getattr(options, f.name))}


def _is_recorded(f: dataclasses.Field[Any], value: Any) -> bool:
    """Whether field ``f`` holding ``value`` is written to a result (``record``; ``"if_set"``: not its default)."""
    mode = f.metadata.get("record")
    return mode is True or (mode == "if_set" and value != f.default)


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _task_option_fields() -> dict[str, tuple[str, dataclasses.Field[Any], str]]:
    """Every registered task's options by flat key → (task, field, flag)."""
    out = {}
    for entry in TASKS.entries():
        cls = entry.options_class()
        for f in dataclasses.fields(cls) if cls is not None else ():
            out[flat_key(f, entry.prefix)] = (entry.name, f, flag_of(f, entry.prefix))
    return out


def task_option_keys() -> dict[str, tuple[str, str]]:
    """Every registered task's options by their flat key (``templates``, ``prefixes``: the flag's spelling,
    :func:`flat_key`) → (task, option)."""
    return {key: (task, f.name) for key, (task, f, _) in _task_option_fields().items()}


def eval_identity_names(cls: type | None = None) -> list[str]:
    """The names a result records under ``settings.identity``: the fields of ``cls`` (default
    :class:`EvalSettings`) and every registered task's options (by flat key) that change the numbers. The result
    file's name hashes those of them its settings hold (:meth:`hnbench.results.record.EvalResult.settings_hash`), so
    a name listed but unset changes no name."""
    tasks = {key for key, (_, f, _) in _task_option_fields().items() if f.metadata.get("identity")}
    return sorted(set(identity_fields(cls or EvalSettings)) | tasks)


def fold_task_options(options: dict[str, Any], base: EvalSettings | None) -> None:
    """Keyword ``options`` of one evaluation (over ``base``): the run's task's options given by flat key
    (``templates="simple"``) folded into ``options["task_options"]``, over those given there or held by ``base``
    for the same task; another task's option is a one-line error (:func:`take_task_options`)."""
    task = str(options.get("task") or (base.task if base is not None else TASKS.default))
    name = TASKS.entry(task).name if task in TASKS else task  # an unknown task: validate() says so
    given = take_task_options(options, [name]).get(name)
    if not given:
        return
    held = base.task_options if base is not None and base.task == task else {}
    current = options.get("task_options", held)
    if dataclasses.is_dataclass(current) and not isinstance(current, type):
        current = dataclasses.asdict(current)
    options["task_options"] = {**dict(current), **given}


def take_task_options(options: dict[str, Any], tasks: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Remove the task options among keyword ``options`` (a task's option by its flat key, ``templates="simple"``)
    and return them by task → {option: value}; one given for none of ``tasks`` (the task run, or a suite's
    entries' tasks) is a one-line error naming the task it belongs to."""
    keys, own = _task_option_fields(), {f.name for f in dataclasses.fields(EvalSettings)}
    out: dict[str, dict[str, Any]] = {}
    for key in [k for k in options if k in keys and k not in own]:
        task, f, flag = keys[key]
        if task not in tasks:
            raise ConfigError(f"{flag} is an option of --task {task}, not of --task {', '.join(dict.fromkeys(tasks))}")
        out.setdefault(task, {})[f.name] = options.pop(key)
    return out


# In-batch similarity bucket edges of hardness (``hnbench.hardness.stats.DEFAULT_EDGES``).
DEFAULT_EDGES = (0.0, 0.5, 0.7, 0.8, 0.9, 1.0)


@dataclass
class HardnessSettings:
    """How hardness measures a caption set (everything but the data, the model and where the report goes)."""

    device: str = option("cpu", group="model", help="cpu or cuda (default: cpu)")
    context_length: int | None = same_as(EvalSettings, "context_length", identity=True)
    batch_size: int = option(128, group="statistics", identity=True, minimum=1, flag="--in-batch-size",
                             renamed_from="--batch-size", help="B of the in-batch negative buckets (default 128)")
    n_batches: int = option(200, group="statistics", identity=True, minimum=1, help="random batches to average (default 200)")
    edges: tuple[float, ...] = option(DEFAULT_EDGES, group="statistics", identity=True,
                                      help="similarity bucket edges (default 0 0.5 0.7 0.8 0.9 1)")
    threshold: float = option(0.95, group="statistics", identity=True, help="near-duplicate caption similarity (default 0.95)")
    image_threshold: float | None = option(None, group="statistics", identity=True,
                                           help="near-duplicate image similarity (default: --threshold)")
    exact_max: int = option(20_000, minimum=0, group="statistics", identity=True,
                            help="exact all-pairs statistics up to this many items, sampled beyond (default 20000)")
    n_sample_pairs: int = option(1_000_000, minimum=1, group="statistics", identity=True, flag="--sample-pairs",
                                 help="pairs sampled beyond --exact-max")
    seed: int = option(0, group="statistics", identity=True, help="seed of the sampled pairs and batches (default 0)")
    images: bool = option(True, group="statistics", identity=True,
                          help="measure the image side too where images exist",
                          off="measure the text side only")
    results: tuple[str, ...] = option((), group="statistics", identity=True, action="append", metavar="FILE",
                                      help="an eval result JSON of this dataset: R@1 by hardness and the model's "
                                           "confusions; repeatable")
    n_show: int = option(10, group="statistics", identity=True, flag="--show",
                         help="pairs / wrong queries listed in the report (default 10)")
    encode_batch_size: int = option(64, minimum=1, help="images per encoder batch (captions: at least 64)")
    num_workers: int | None = option(None, minimum=0, help="image decoding workers")
    use_cache: bool = same_as(EvalSettings, "use_cache", group=None)
    overwrite: bool = option(False, help="replace a report made from other data, model or statistics settings "
                                          "(a rerun from the same inputs replaces its own)")
    progress: bool = option(True, cli=False, help="progress bars (the CLI's -q turns them off)")

    def __post_init__(self) -> None:
        for name in ("edges", "results"):  # the CLI gives lists: one spelling, so settings compare equal
            if isinstance(getattr(self, name), (list, tuple)):
                setattr(self, name, tuple(getattr(self, name)))

    def validate(self, output_dir: str | Path | None = None) -> None:
        """Every setting (and the output directory), before anything is loaded (one line each)."""
        check_declared(self)
        try:
            check_edges(self.edges)
        except ValueError as e:
            raise ConfigError(f"--edges: {e}") from None
        for flag, value in (("--threshold", self.threshold), ("--image-threshold", self.image_threshold)):
            if value is not None and not -1 <= value <= 1:
                raise ConfigError(f"{flag} is a cosine similarity, between -1 and 1; got {value}")
        check_device(self.device)
        check_output_dir(output_dir)


@dataclass
class CompareSettings:
    """``hnbench compare``'s options (the arguments of :func:`hnbench.results.compare.compare`)."""

    ks: tuple[int, ...] = same_as(EvalSettings, "ks", group=None)
    output: str | None = option(None, help="directory for compare.md and compare.json (default: print Markdown)")
    seed: int = option(0, help="bootstrap seed (recorded)")
    n_boot: int = option(1000, help="bootstrap draws (recorded)")
    overwrite: bool = option(False, help="replace a compare.md/compare.json made from other inputs (a rerun from the "
                                         "same inputs replaces its own)")


@dataclass
class BrowseSettings:
    """``hnbench browse``'s page options (the data it reloads: :class:`hnbench.specs.DataSpec`)."""

    compare: str | None = option(None, metavar="BASELINE.json",
                                 help="the baseline: another result on the same data to compare RESULT with (the "
                                      "first result of hnbench compare); every query right at K=1 for only one of "
                                      "them is listed, as 'model only' (RESULT) or 'baseline only'")
    hardness: str | None = option(None, metavar="HARDNESS.json", help="a hardness run of this dataset: recall by hardness")
    output: str | None = option(None, help="directory for index.html")
    limit: int = option(200, help="worst queries shown per direction (0: all)")
    top: int = option(5, help="retrieved items shown per query (at most 10)")
    overwrite: bool = option(False, help="replace an index.html made from other inputs (a rerun from the same inputs "
                                         "replaces its own)")
