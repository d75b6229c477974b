"""Training settings: :class:`TrainConfig` (every field a flag, a recipe key and a resume rule; the chosen
objective's options nested, as its registry entry declares them) and recipes; :func:`upgrade` reads the flat
shape of older recipes and stored ``train_config.json`` files."""

from __future__ import annotations

import dataclasses
import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from hnbench.errors import ConfigError, did_you_mean
from hnbench.io import read_text_utf8
from hnbench.registry import LOSSES, OBJECTIVES, RECIPES, TASKS
from hnbench.settings import (
    EvalSettings,
    check_declared,
    check_types,
    flat_key,
    from_options,
    option,
    same_as,
)
from hnbench.sidecars.options import EdgeSettings
from hnbench.specs import DataSpec, ModelSpec
from hnbench.validate import check_device_name


@dataclass
class TrainConfig:
    """Everything that decides a training run (a recipe file holds a subset of these fields, and the chosen
    objective's options in its table: ``objective_options``)."""

    # the model and the data: ModelSpec's and DataSpec's fields (their other data fields: dataset_options)
    model: str = same_as(ModelSpec, "model", "hnbench-tiny")
    pretrained: str | None = same_as(ModelSpec, "pretrained")
    model_config: str | None = same_as(ModelSpec, "model_config")
    trust_remote_code: bool = same_as(ModelSpec, "trust_remote_code")
    dataset: str = same_as(DataSpec, "dataset", "synthdense")
    protocol: str | None = same_as(DataSpec, "protocol", "train")
    data_root: str | None = same_as(DataSpec, "data_root")
    dataset_options: dict[str, Any] = option(default_factory=dict, cli=False,
                                             help="the dataset's other DataSpec fields and loader options (flags "
                                                  "--split-file, --caption-column, ...; recipe / --set)")
    objective: str = option("clip", group="objective", choices=OBJECTIVES,
                            help="the fine-tuning framework whose terms are trained (its global term: --loss)")
    loss: str = option("hn", group="objective", choices=LOSSES,
                       help="the objective's global term: HN-CLIP or the CLIP InfoNCE loss")
    gamma: float = option(0.5, minimum=0, group="objective", help="HN margin weight γ (paper: 0.5)")
    epochs: int = option(1, group="optimisation", help="passes over the training images")
    batch_size: int = option(64, group="optimisation", help="global micro-batch (split over processes)")
    lr: float = option(5e-4, above=0, group="optimisation", help="peak learning rate (after warm-up, cosine decay)")
    weight_decay: float = option(0.1, minimum=0, group="optimisation", help="AdamW weight decay")
    warmup_steps: int = option(10, minimum=0, group="optimisation", help="optimizer steps of linear warm-up")
    max_logit_scale: float = option(100.0, above=0, group="objective", help="clamp of the learned logit scale s")
    seed: int = option(0, group="optimisation", help="seed of the initialisation, data order and subsets")
    device: str = option("cpu", group="model", resume_free=True, help="cpu or cuda (default: cpu)")
    context_length: int | None = same_as(EvalSettings, "context_length")
    num_workers: int | None = option(None, group="optimisation", resume_free=True, minimum=0,
                                     help="data loading workers (default: as for eval — one per core, at most 8; on "
                                          "the CPU only the cores torch's threads leave free, usually 0)")
    log_every: int = option(10, group="run, diagnostics, evaluation", resume_free=True, minimum=1,
                            help="optimizer steps between log.jsonl lines")
    output: str = option("runs/train", group="run, diagnostics, evaluation", resume_free=True,
                         help="run directory (checkpoint, train_config.json, log.jsonl, diagnostics.jsonl)")
    # loss options
    label_smoothing: float = option(0.0, minimum=0, below=1, group="objective",
                                    help="label smoothing of the contrastive targets")
    mask_duplicates: bool = option(False, group="objective",
                                   help="mask same-image / identical-caption pairs inside a batch")
    g_source: str = option("current", group="objective", choices=("current", "frozen_init"),
                           help="Ḡ from the text encoder being trained (default) or a frozen copy of the initial one")
    token_loss_weight: float = option(0.0, minimum=0, group="objective",
                                      help="λ of the FILIP token-level term (open_clip)")
    # the chosen objective's own options (hnbench.registry.OptionsEntry.options: FineLIP's, GOAL's, StructXLIP's)
    objective_options: Any = option(default_factory=dict, cli=False,
                                    help="the chosen objective's options, the dataclass its OBJECTIVES entry "
                                         "names (flags --<objective>-<option>; recipe table [<objective>]; "
                                         "--set <objective>.<option>=VALUE); a mapping is read into it")

    # edge maps (StructXLIP): hnbench.sidecars.options.EdgeSettings's fields
    edges: str = same_as(EdgeSettings, "method", group="side inputs")
    canny_low: float = same_as(EdgeSettings, "canny_low", group="side inputs")
    canny_high: float = same_as(EdgeSettings, "canny_high", group="side inputs")
    edge_blur: int = same_as(EdgeSettings, "blur", group="side inputs")
    edge_line_width: int = same_as(EdgeSettings, "line_width", group="side inputs")
    # side inputs (segments: GOAL, StructXLIP's edge crops)
    segments: str | None = option(None, group="side inputs", metavar="SIDECAR.json",
                                  help="the segment sidecar (default: beside a synthdense split, written from its "
                                       "geometry on first use; else where `hnbench segments` writes it)")
    segment_choice: str = option("best", group="side inputs", choices=("best", "random"),
                                 help="each image's segment per epoch: best (highest similarity, GOAL's) or random "
                                      "(seeded by --seed, the epoch and the image)")
    crop_margin: float = option(0.0, minimum=0, group="side inputs",
                                help="grow a segment's crop by this fraction of its box on each side (GOAL: 0)")
    # optimisation
    accum_steps: int = option(1, group="optimisation", minimum=1, help="micro-batches per optimizer step")
    accum_mode: str = option("loss", group="optimisation", choices=("loss", "cached"),
                             help="loss: per-micro-batch loss (the paper's); cached: the whole effective batch as "
                                  "negatives")
    grad_clip: float | None = option(None, above=0, group="optimisation", help="clip the gradient norm")
    amp: bool = option(False, group="optimisation", help="autocast on CUDA (bf16/fp16; CPU: bf16); the losses "
                                                          "stay fp32")
    amp_dtype: str = option("bf16", group="optimisation", choices=("bf16", "fp16"), help="autocast dtype")
    lock_image: bool = option(False, group="optimisation", help="freeze the image tower")
    lock_text: bool = option(False, group="optimisation", help="freeze the text tower")
    init_logit_scale: float | None = option(None, above=0, group="objective",
                                            help="set s (not its log) before training")
    train_logit_scale: bool = option(True, group="objective",
                                     help="train the logit scale", off="freeze the logit scale")
    data_fraction: float = option(1.0, above=0, maximum=1, group="optimisation",
                                  help="train on this seeded fraction of the images (paper: 0.2)")
    last_batch: str = option("keep", group="optimisation", choices=("keep", "drop"),
                             help="the images past an epoch's last full batch: keep (every image every epoch: a "
                                  "smaller last batch, a lone left-over pair joins the one before; under torchrun "
                                  "cut to a multiple of the processes) or drop (drop_last: every loss sees "
                                  "--batch-size pairs)")
    group_by: str | None = option(None, group="optimisation",
                                  help="regex on image ids: batches made of whole groups, e.g. \"^(.*)-v\\d+$\" "
                                       "(synthdense families)")
    # Long-CLIP and PEFT
    stretch_context: int | None = option(None, minimum=1, group="PEFT and Long-CLIP",
                                         help="stretch the text positions the Long-CLIP way (77 → 248)")
    position_table: str = option("trainable", group="PEFT and Long-CLIP", choices=("trainable", "frozen-20"),
                                 help="the text position table: trainable (every row, GOAL's and StructXLIP's 248-row "
                                      "table) or frozen-20 (Long-CLIP's: the first 20 rows keep their weights)")
    peft: str | None = option(None, group="PEFT and Long-CLIP", choices=("lora", "dora"), help="LoRA or DoRA adapters")
    lora_r: int = option(16, minimum=1, group="PEFT and Long-CLIP", help="adapter rank")
    lora_alpha: float = option(32.0, above=0, group="PEFT and Long-CLIP", help="adapter scale α")
    lora_dropout: float = option(0.0, minimum=0, below=1, group="PEFT and Long-CLIP", help="adapter dropout")
    lora_targets: list[str] | None = option(None, group="PEFT and Long-CLIP", sep=",",
                                            help="comma-separated module names (open_clip default: c_fc,c_proj; "
                                                 "HF: q_proj,k_proj,v_proj,out_proj)")
    peft_save: str = option("both", group="PEFT and Long-CLIP", choices=("merged", "adapter", "both"),
                            help="what a PEFT run writes: the merged checkpoint, the adapter, or both")
    # checkpoints, diagnostics, evaluation
    save_every: int = option(0, minimum=0, group="run, diagnostics, evaluation", resume_free=True,
                             help="optimizer steps between resumable states (also saved at every epoch end)")
    resume: str | None = option(None, group="run, diagnostics, evaluation", resume_free=True, nargs="?", const="",
                                metavar="RUN_DIR", help="continue an interrupted run (default: the --output directory)")
    overwrite: bool = option(False, group="run, diagnostics, evaluation", resume_free=True,
                             help="start afresh in a non-empty --output (its earlier run's outputs are removed); "
                                  "without it a non-empty run directory is refused")
    stop_at_step: int | None = option(None, minimum=1, group="run, diagnostics, evaluation", resume_free=True,
                                      help="stop resumably after this many optimizer steps (the schedule is unchanged)")
    diag_every: int = option(0, minimum=0, group="run, diagnostics, evaluation", resume_free=True,
                             help="optimizer steps between saturation diagnostics (0: off)")
    active_threshold: float = option(1e-3, minimum=0, group="run, diagnostics, evaluation", resume_free=True,
                                     help="a batch is active if its loss is at least this (1e-3)")
    eval_dataset: str | None = option(None, group="run, diagnostics, evaluation", resume_free=True,
                                      help="evaluate on this dataset after every --eval-every epochs")
    eval_task: str = same_as(EvalSettings, "task", group="run, diagnostics, evaluation", resume_free=True,
                             flag="--eval-task", record=False, identity=False,
                             help="the task of the --eval-dataset evaluations (default: retrieval; zeroshot: a "
                                  "labelled image set, the forgetting check)")
    eval_protocol: str | None = option(None, group="run, diagnostics, evaluation", resume_free=True,
                                       help="protocol of --eval-dataset")
    eval_data_root: str | None = option(None, group="run, diagnostics, evaluation", resume_free=True,
                                        help="data root of --eval-dataset")
    eval_dataset_options: dict[str, Any] = option(default_factory=dict, cli=False, resume_free=True,
                                                  help="options for the eval dataset's loader (recipe / --set only)")
    eval_every: int = option(1, minimum=1, group="run, diagnostics, evaluation", resume_free=True,
                             help="epochs between evaluations")
    eval_at_start: bool = option(True, group="run, diagnostics, evaluation", resume_free=True,
                                 help="evaluate before training too", off="evaluate only after training epochs")
    eval_batch_size: int = option(64, minimum=1, group="run, diagnostics, evaluation", resume_free=True,
                                  help="encoder batch of the evaluations")

    def __post_init__(self) -> None:
        if isinstance(self.objective_options, Mapping) and self.objective in OBJECTIVES:  # else: validate() says
            self.objective_options = from_options(options_class(self.objective), None, dict(self.objective_options))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TrainConfig:
        """The checked config of a recipe, ``--set`` keys or a stored config, in any shape (:func:`upgrade`)."""
        d = upgrade(d)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            spellings = sorted(known | set(objective_option_keys()))
            hints = {u: did_you_mean(u, spellings, n=1) for u in unknown}
            hint = "; ".join(f"{u} ({h})" for u, h in hints.items() if h)
            raise ConfigError(f"unknown training options {unknown}{'; ' + hint if hint else ''}; "
                              f"known: {sorted(known)}")
        cfg = cls(**d)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        try:  # a recipe or --set value of the wrong type: before the checks below compare it
            check_types(self, with_key=True)
        except ConfigError as e:
            raise ConfigError(f"invalid training options: {e}") from None
        problems: list[str] = []
        checks = [
            (bool(self.output.strip()), f"output must name a run directory, got {self.output!r} (an unset variable?)"),
            (not (self.lock_image and self.lock_text), "lock_image and lock_text together leave nothing to train"),
            (self.epochs >= 1, f"epochs must be >= 1, got {self.epochs}: a run that trains nothing would still "
                               "write a checkpoint"),
            (self.batch_size >= 2, f"batch_size must be >= 2, got {self.batch_size}: with one pair per batch there "
                                   "are no in-batch negatives and the contrastive loss is constant"),
            (not _finite(self.gamma, self.max_logit_scale) or self.gamma * self.max_logit_scale < GAMMA_SCALE_LIMIT,
             f"gamma {self.gamma:g} is too large for max_logit_scale {self.max_logit_scale:g}: γ·s must stay below "
             f"2^24 (here {self.gamma * self.max_logit_scale:.3g}), past which one fp32 rounding step of a caption "
             "similarity Ḡ moves the HN logit s·(S + γ·Ḡ) by a whole unit, so rounding, not the images, decides "
             "the loss (the paper's γ: 0.5)" if _finite(self.gamma, self.max_logit_scale) else ""),
        ]
        try:  # declared bounds and choices (compared exactly: the loss is dispatched on its exact name)
            check_declared(self, with_key=True)
            self._check_objective_options()
            check_device_name(self.device)
            self.data_spec().validate()
            if self.eval_dataset is not None:  # the evaluation data's options: the same rule
                spec, rest = self.eval_spec()
                spec.validate()
                task = TASKS.get(self.eval_task)
                own = task.check_options(rest, (TASKS.get(n) for n in TASKS.names()))
                task.check(spec, **own)  # the task's own checks (a zero-shot class folder): before training
        except ConfigError as e:
            problems.append(str(e))
        problems += [msg for ok, msg in checks if not ok]
        if problems:
            raise ConfigError("invalid training options: " + "; ".join(problems))


    def _check_objective_options(self) -> None:
        """``objective_options`` are the chosen objective's (its options class), within their declared bounds."""
        entry, cls = OBJECTIVES.entry(self.objective), options_class(self.objective)
        if not isinstance(self.objective_options, cls):
            raise ConfigError(f"objective_options must be --objective {entry.name}'s options ({cls.__name__}), got "
                              f"{type(self.objective_options).__name__}")
        check_declared(self.objective_options, with_key=True, prefix=entry.prefix, section=entry.name)

    def eval_spec(self) -> tuple[DataSpec, dict[str, Any]]:
        """The evaluation data as a :class:`DataSpec` (``eval_dataset`` with its options) and the options of
        ``eval_dataset_options`` that are not DataSpec fields (a task's own, e.g. zeroshot's class_names)."""
        return DataSpec.of(self.eval_dataset, self.eval_dataset_options, protocol=self.eval_protocol,
                           data_root=self.eval_data_root)

    def edge_settings(self) -> EdgeSettings:
        """The run's edge-map detector settings."""
        return EdgeSettings(method=self.edges, canny_low=self.canny_low, canny_high=self.canny_high,
                            blur=self.edge_blur, line_width=self.edge_line_width)

    def data_spec(self) -> DataSpec:
        """The run's training data as a :class:`DataSpec` (its fields here and in ``dataset_options``); the
        default protocol ``train`` only for data that has protocols."""
        protocol = self.protocol
        kind = DataSpec(dataset=self.dataset).kind()
        if protocol == "train" and kind not in DataSpec.reads("protocol"):
            protocol = None
        return DataSpec.of(self.dataset, self.dataset_options, protocol=protocol, data_root=self.data_root)[0]


# γ·s must stay below this (see TrainConfig.validate): Ḡ near 1 is stored in fp32 to 2^-24, so at γ·s = 2^24 one
# rounding step of a caption similarity moves its logit s·γ·Ḡ by 1 — and the margins, saturation and the loss
# follow rounding noise, while the image-text part s·S (|S| <= 1) is all but lost beside it.
GAMMA_SCALE_LIMIT = 2.0 ** 24


def _finite(*values: Any) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values)


# A recipe's data specs: a --dataset / --eval-dataset naming other data replaces the recipe's whole spec.
DATA_SPEC_FIELDS = {"dataset": ("dataset", "protocol", "data_root", "dataset_options"),
                    "eval_dataset": ("eval_dataset", "eval_protocol", "eval_data_root", "eval_dataset_options")}


def replace_data_spec(recipe: dict[str, Any], key: str, value: str, recipe_name: str) -> str | None:
    """Where ``value`` (a ``--dataset`` / ``--eval-dataset`` given on the command line) names other data than
    ``recipe``'s ``key``, remove the recipe's whole data spec of it (the data, its protocol, data root and loader
    options belong to the recipe's data) and return the line saying so; None where nothing was replaced."""
    fields_ = DATA_SPEC_FIELDS[key]
    if value == recipe.get(key, getattr(TrainConfig, key)):  # a recipe without the key: the default's spec
        return None
    dropped = {f: recipe.pop(f) for f in fields_ if f in recipe}
    if not dropped:
        return None
    said = ", ".join(f"{f} {', '.join(v) if isinstance(v, dict) else repr(v)}" for f, v in dropped.items())
    flag = "--" + key.replace("_", "-")
    return (f"{flag} {value} replaces recipe {recipe_name}'s {'evaluation ' if key != 'dataset' else ''}data "
            f"({said}); give its protocol and options on the command line if it needs them")


@dataclass(frozen=True)
class NoOptions:
    """The options of an objective that declares none (``clip``): recorded as ``{}``."""


def options_class(objective: str) -> type:
    """The options dataclass ``objective``'s :data:`~hnbench.registry.OBJECTIVES` entry names (:class:`NoOptions`
    where it names none); an unknown objective is the registry's one-line error."""
    return OBJECTIVES.entry(objective).options_class() or NoOptions


def objective_option_keys() -> dict[str, tuple[str, str]]:
    """Every registered objective's options by their flat key (``finelip_margin``, ``filter_colors``: the flag's
    spelling, :func:`~hnbench.settings.flat_key`) → (objective, option); a TrainConfig field's name is the field."""
    own = {f.name for f in fields(TrainConfig)}
    keys = {}
    for entry in OBJECTIVES.entries():
        for f in fields(options_class(entry.name)):
            if (key := flat_key(f, entry.prefix)) not in own:
                keys[key] = (entry.name, f.name)
    return keys


def _same_name(a: str, b: str) -> bool:
    """An objective's name as a ``--set`` key or recipe table may spell it: case and ``-`` / ``_`` aside."""
    return a.lower().replace("-", "_") == b.lower().replace("-", "_")


def _option_place(key: str, flat: Mapping[str, tuple[str, str]]) -> tuple[str, str] | None:
    """(objective, option) a recipe or ``--set`` key names: ``finelip.margin`` or the flat ``finelip_margin``;
    None for any other key (a TrainConfig field, or an unknown one ``from_dict`` reports)."""
    if key in flat:
        return flat[key]
    given, dot, name = key.partition(".")
    objective = next((o for o in OBJECTIVES.names() if _same_name(o, given)), None) if dot else None
    if objective is not None:
        known = [f.name for f in fields(options_class(objective))]
        if name not in known:
            hint = did_you_mean(name, known, n=1)
            raise ConfigError(f"unknown {objective} option {name!r}" + (f" ({hint})" if hint else "")
                              + f"; known: {known}")
        return objective, name
    return None


def nest_options(d: Mapping[str, Any]) -> dict[str, Any]:
    """``d`` (a recipe, a stored config) with every objective's options in its table: ``{"finelip": {"margin":
    0.2}}``, whichever spelling gave them (see :func:`upgrade`), the other keys as they are. The same option
    given twice, a table that is not one, or an option its objective does not declare is one line."""
    flat, objectives = objective_option_keys(), set(OBJECTIVES.names())
    own = {f.name for f in fields(TrainConfig)}
    out: dict[str, Any] = {}
    tables: dict[str, dict[str, Any]] = {}
    given: dict[tuple[str, str], str] = {}  # (objective, option) → the key that gave it

    def put(objective: str, name: str, value: Any, key: str) -> None:
        if (objective, name) in given:
            raise ConfigError(f"{given[objective, name]} and {key} are one option ({objective}.{name}): give it once")
        given[objective, name] = key
        tables.setdefault(objective, {})[name] = value

    objective = str(d.get("objective", TrainConfig.objective))
    for key, value in d.items():
        if key == "objective_options" and objective in objectives:  # this shape: the recorded objective's
            if dataclasses.is_dataclass(value) and not isinstance(value, type):  # the options themselves
                value = dataclasses.asdict(value)
            if not isinstance(value, Mapping):
                raise ConfigError(f"objective_options must be a table of options, got {value!r}")
            for name, v in value.items():
                put(*_table_place(objective, str(name), flat), v, f"objective_options.{name}")
        elif key in objectives and key not in own:  # an objective's table
            if not isinstance(value, Mapping):
                raise ConfigError(f"{key} must be a table of --objective {key}'s options, got {value!r}")
            for name, v in value.items():
                put(*_table_place(key, str(name), flat), v, f"{key}.{name}")
        elif key not in own and (place := _option_place(key, flat)) is not None:
            put(*place, value, key)
        else:  # a field (objective_options of an objective not registered: validate() names it), or unknown
            out[key] = value
    return {**out, **tables}


def _table_place(objective: str, name: str, flat: Mapping[str, tuple[str, str]]) -> tuple[str, str]:
    place = _option_place(f"{objective}.{name}", flat)
    assert place is not None  # a registered objective's option, or _option_place's error
    return place


def set_option(d: dict[str, Any], key: str, value: Any) -> None:
    """Put ``value`` where ``key`` (a field, ``finelip.margin`` or the flat ``finelip_margin``) belongs in the
    nested shape of :func:`nest_options`, replacing what was there: a flag or ``--set`` over a recipe."""
    place = None if key in {f.name for f in fields(TrainConfig)} else _option_place(key, objective_option_keys())
    if place is None:
        d[key] = value
    else:
        d.setdefault(place[0], {})[place[1]] = value


def upgrade(d: Mapping[str, Any]) -> dict[str, Any]:
    """A recipe, ``--set`` keys or a stored ``train_config.json`` config in any shape hnbench has read or
    written → TrainConfig's: the chosen objective's options under ``objective_options``.

    An objective's option may be given as its flat key (``finelip_margin``, ``filter_colors``: every recipe and
    stored config before options were nested — a stored one holds every objective's), in the objective's
    table (``[finelip] margin = 0.2``), as a dotted key (``finelip.margin``, from ``--set``) or under
    ``objective_options`` (this shape, of the recorded objective). The options of other objectives than the
    chosen one are dropped, as they never changed a run (a recipe's tables stay behind when ``--objective``
    picks another). Keys that are none of these are left for :meth:`TrainConfig.from_dict` to report."""
    nested = nest_options(d)
    objective, own = nested.get("objective", TrainConfig.objective), {f.name for f in fields(TrainConfig)}
    out = {k: v for k, v in nested.items() if k in own or k not in OBJECTIVES.names()}
    if isinstance(objective, str) and objective in OBJECTIVES.names():
        out["objective_options"] = nested.get(objective, {})
    return out


def load_recipe(name_or_path: str) -> dict[str, Any]:
    """Read a recipe (TOML, or YAML with pyyaml): a built-in name from ``hnbench/train/recipes/`` or a path."""
    path = Path(name_or_path)
    if not path.is_file():
        if name_or_path not in RECIPES:
            hint = did_you_mean(name_or_path, RECIPES.names())
            raise ConfigError(f"no recipe {name_or_path!r}{'; ' + hint if hint else ''} (built-in: {RECIPES.names()})")
        path = RECIPES.get(name_or_path)
    text = read_text_utf8(path)
    if path.suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError as e:
            raise ConfigError("YAML recipes need pyyaml: pip install 'hnbench[train]'") from e
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as e:  # one line: the file, the line and what the parser expected
            mark = getattr(e, "problem_mark", None)
            where = f":{mark.line + 1}" if mark is not None else ""
            problem = getattr(e, "problem", None) or str(e).splitlines()[0]
            raise ConfigError(f"recipe {path}{where}: not valid YAML ({problem})") from None
    else:
        if sys.version_info >= (3, 11):
            import tomllib
        else:
            import tomli as tomllib
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:  # its message ends "(at line N, column M)"
            found = re.search(r"^(.*?)\s*\(at line (\d+), column \d+\)$", str(e))
            where, problem = (f":{found[2]}", found[1]) if found else ("", str(e))
            raise ConfigError(f"recipe {path}{where}: not valid TOML ({problem})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"recipe {path}: expected a table of options")
    return data
