"""Which data and which model a run uses: :class:`DataSpec` and :class:`ModelSpec`, declared once.

Each field is a :func:`hnbench.settings.option`: the CLI generates the flags of ``eval``, ``demo``,
``hardness``, ``train``, ``datasets info`` and ``browse`` from them, the Python API (``evaluate``,
``hardness``, ``TrainConfig``) maps its keywords onto them, and a result records the data spec
(``result.dataset["spec"]``) so ``browse`` rebuilds the same spec from the record (flags only override).

A data field names the dataset kinds that read it (``reads=``, see :func:`data_kind`); a field set for a
kind that does not read it is refused in one line before anything loads (:meth:`DataSpec.validate`;
:func:`hnbench.data.load_spec` checks, then loads). This module stays light (no torch, numpy or argparse).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hnbench.errors import ConfigError, did_you_mean
from hnbench.registry import BENCHMARK_SPECS, DATASETS, MODELS, TASKS
from hnbench.settings import EvalSettings, check_declared, from_options, option, same_as
from hnbench.validate import check_model_config_name

__all__ = ["DATA_KINDS", "DataSpec", "ModelSpec", "check_data", "data_keywords", "data_kind", "split_keywords"]

# What a dataset argument can be (in load_dataset's resolution order): each DataSpec field names those that read it.
DATA_KINDS = ("benchmark", "generated", "manifest", "imagefolder", "hf")
_REGISTERED = ("benchmark", "generated")
_FILES = ("manifest", "imagefolder")
_COLUMNS = ("manifest", "imagefolder", "hf")


def data_kind(dataset: str) -> str | None:
    """The kind of ``dataset`` (one of :data:`DATA_KINDS`) without reading it; None: not found (loading it
    fails with its own message)."""
    if dataset.lower() in DATASETS:
        return "benchmark" if dataset.lower() in BENCHMARK_SPECS else "generated"
    p = Path(dataset)
    if p.is_file() and p.suffix in (".jsonl", ".csv"):
        return "manifest"
    if p.is_dir() and ((p / "metadata.jsonl").is_file() or (p / "metadata.csv").is_file()):
        return "imagefolder"
    if p.exists() or dataset.startswith("hf:") or ("/" in dataset and not dataset.startswith((".", "/"))):
        return "hf"
    return None


@dataclass
class DataSpec:
    """Which data a run reads: every option a loader takes, with the kinds of data that read it."""

    dataset: str | None = option(None, group="data", reads=DATA_KINDS, registry=DATASETS,
                                 help="registered name ({names}) or a path: JSONL/CSV manifest, "
                                      "image folder with metadata.jsonl, HF dataset dir/parquet, hf:ORG/NAME")
    data_root: str | None = option(None, group="data", reads=_REGISTERED,
                                   help="where a registered benchmark's files are (default: the download location)")
    protocol: str | None = option(None, group="data", reads=_REGISTERED,
                                  help="benchmark protocol / split (default: the benchmark's default)")
    split: str | None = option(None, group="data", reads=("hf",), help="split of an HF dataset")
    image_column: str | None = option(None, group="data", reads=_COLUMNS, help="image column of a manifest / HF dataset")
    caption_column: str | None = option(None, group="data", reads=_COLUMNS,
                                        help="caption column of a manifest / HF dataset (hardness: also of a "
                                             "--captions CSV/JSONL)")
    name: str | None = option(None, group="data", reads=_COLUMNS,
                              help="the data set's name in results and tables (default: the file or folder name, "
                                   "or the folder above a generic one such as captions.jsonl or metadata.csv); a "
                                   "label only: leaderboards group an unregistered set's results by its content")
    split_file: tuple[str, ...] = option((), group="data", reads=("benchmark",), action="append", metavar="PATH",
                                         help="a protocol's split list (e.g. GOAL's DCI_test.json) or a folder "
                                              "holding it; its sha256 is checked against the published one (a "
                                              "mismatch warns) and recorded; repeatable")
    skip_invalid: bool = same_as(EvalSettings, "skip_invalid", reads=DATA_KINDS)
    allow_count_mismatch: bool = option(False, group="data", reads=("benchmark",),
                                        help="run even if a benchmark's loaded counts (after skipping) differ from "
                                             "the published ones (recorded)")
    allow_outside_paths: bool = option(False, group="data", reads=("benchmark", *_FILES),
                                       help="let a manifest or a benchmark's annotations name images outside its "
                                            "folder (../, absolute paths), and a benchmark's search by file name "
                                            "follow symlinks out of its data root; refused by default since "
                                            "downloaded files could read any file")

    def __post_init__(self) -> None:
        if isinstance(self.split_file, (str, os.PathLike)):
            self.split_file = (os.fspath(self.split_file),)
        elif isinstance(self.split_file, (list, tuple)):
            self.split_file = tuple(os.fspath(p) if isinstance(p, os.PathLike) else p for p in self.split_file)
        else:
            self.split_file = (self.split_file,)  # refused by validate()
        for name in ("dataset", "data_root"):
            if isinstance(getattr(self, name), os.PathLike):
                setattr(self, name, os.fspath(getattr(self, name)))

    @classmethod
    def of(cls, dataset: str | os.PathLike[str] | None = None, options: Mapping[str, Any] | None = None,
           **fields: Any) -> tuple[DataSpec, dict[str, Any]]:
        """The spec of ``dataset`` with ``fields`` (None: not given) and the DataSpec fields among ``options``
        (a loader's ``dataset_options``); returns it and the options that are not DataSpec fields."""
        known = {f.name for f in dataclasses.fields(cls)}
        rest = {k: v for k, v in (options or {}).items() if k not in known}
        given = {k: v for k, v in [*(options or {}).items(), *fields.items()] if k in known and v is not None}
        return from_options(cls, None, {**given, "dataset": dataset}), rest

    @classmethod
    def reads(cls, name: str) -> tuple[str, ...]:
        """The kinds of data that read field ``name``."""
        return tuple(next(f for f in dataclasses.fields(cls) if f.name == name).metadata["reads"])

    @classmethod
    def read_by(cls, *kinds: str) -> set[str]:
        """The fields that some of these kinds of data read."""
        return {f.name for f in dataclasses.fields(cls) if set(kinds) & set(f.metadata["reads"])}

    def set_fields(self) -> dict[str, Any]:
        """The fields that differ from their defaults (what a run says about its data), tuples as lists."""
        return {f.name: list(v) if isinstance(v, tuple) else v for f in dataclasses.fields(self)
                if (v := getattr(self, f.name)) != f.default}

    def kind(self) -> str | None:
        """:func:`data_kind` of the dataset (None: none given, or not a name; validate() says which)."""
        return data_kind(self.dataset) if isinstance(self.dataset, str) else None

    def validate(self) -> None:
        """The declared types, and no field set that this kind of data does not read (before anything loads)."""
        check_declared(self)
        if not all(isinstance(p, str) for p in self.split_file):  # a list field (a result's record may say anything)
            raise ConfigError(f"--split-file must be paths, got {list(self.split_file)!r}")
        if self.dataset is None:
            raise ConfigError("--dataset is required")
        kind = self.kind()
        if kind is None:
            return  # not found: loading says so
        for f in dataclasses.fields(self):
            if getattr(self, f.name) != f.default and kind not in f.metadata["reads"]:
                readers = " / ".join(f.metadata["reads"])
                raise ConfigError(f"{_flag(f)} is not read by {self.dataset!r} (a {_KIND_TEXT[kind]}); it applies "
                                  f"to {readers} data: leave it out")

    def loader_options(self) -> dict[str, Any]:
        """The fields set, but the dataset: the keywords of :func:`hnbench.data.load_dataset`."""
        return {k: v for k, v in self.set_fields().items() if k != "dataset"}

    def recorded(self) -> dict[str, Any]:
        """What a result records: the fields set, with paths made absolute (so it reloads from anywhere)."""
        out = self.set_fields()
        for key in ("dataset", "data_root"):
            if key in out and Path(out[key]).exists():
                out[key] = str(Path(out[key]).resolve())
        if "split_file" in out:
            out["split_file"] = [str(Path(p).resolve()) for p in out["split_file"]]
        return out

    @classmethod
    def from_record(cls, dataset: Mapping[str, Any]) -> DataSpec:
        """The spec a result's ``dataset`` record was loaded with; a result written before specs were
        recorded: its registered name or source, its protocol, and skip-invalid where it skipped items."""
        spec = dataset.get("spec")
        if isinstance(spec, Mapping):
            known = {f.name for f in dataclasses.fields(cls)}
            return cls(**{k: v for k, v in spec.items() if k in known})
        name = dataset.get("name")
        registered = isinstance(name, str) and name.lower() in DATASETS
        skip = any(int(v or 0) for v in (dataset.get("skipped") or {}).values())
        return cls(dataset=name if registered else dataset.get("source"),
                   protocol=dataset.get("protocol") if registered else None, skip_invalid=skip)

    def override(self, **flags: Any) -> DataSpec:
        """This spec with the flags given (not None) replacing its fields; where ``dataset`` is given, the
        recorded fields that its kind does not read are dropped (the flags given are checked as they are)."""
        given = {k: v for k, v in flags.items() if v is not None and v != ()}
        out = dataclasses.replace(self, **given)
        kind = out.kind()
        if "dataset" in given and kind is not None:
            defaults: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(out)
                                        if f.name not in given and kind not in f.metadata["reads"]}
            out = dataclasses.replace(out, **defaults)
        return out


def check_data(dataset: str, task: str, options: Mapping[str, Any] | None = None,
               **fields: Any) -> tuple[DataSpec, dict[str, Any]]:
    """The spec of ``dataset`` (``fields``: DataSpec fields, None: not given; ``options``: a loader's
    ``dataset_options``) for ``task``, checked as far as it can be before anything loads: the declared types,
    no option its kind of data does not read, no data option of another task, and the task's own check (a
    class folder without images). Returns the spec and the options that are not DataSpec fields (the loader's
    and the task's). ``evaluate`` and each suite entry check their data here."""
    spec, rest = DataSpec.of(dataset, options, **fields)
    spec.validate()
    t = TASKS.get(task)
    own = t.check_options(rest, (TASKS.get(n) for n in TASKS.names()))
    if t.options:  # the task's own data options hold their declared types (a suite file's may not)
        check_declared(from_options(t.options, None, own))
    t.check(spec, **own)
    return spec, rest


def data_keywords() -> list[str]:
    """The data options an API call (``evaluate``, ``hardness``) takes as keywords beside its settings: the
    fields of :class:`DataSpec` but ``dataset``, and every task's own data options (``class_names``, ...)."""
    tasks = [name for task in TASKS.names() for name in TASKS.get(task).option_names()]
    return list(dict.fromkeys([f.name for f in dataclasses.fields(DataSpec) if f.name != "dataset"] + tasks))


def split_keywords(options: Mapping[str, Any], settings: type,
                   dataset_options: Mapping[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """An API call's keywords → (the fields of the ``settings`` class, ``dataset_options`` with the data
    keywords among them added). The one place that decides which keyword goes where, from the dataclasses'
    fields: a field of ``settings`` is a setting (``skip_invalid``, which both declare: the settings pass it
    on to the data), one of :func:`data_keywords` a data option (given in ``dataset_options`` too, with
    another value: refused); any other is a TypeError naming the closest keyword and where a loader's own
    options go."""
    own = {f.name for f in dataclasses.fields(settings)}
    data = data_keywords()
    unknown = [k for k in options if k not in own and k not in data]
    if unknown:
        hint = did_you_mean(unknown[0], [*sorted(own), *data], n=1)
        raise TypeError(f"unknown {settings.__name__} option {unknown[0]!r}" + (f" ({hint})" if hint else "")
                        + f"; the data options are keywords too ({', '.join(data)}); other options of a data "
                          "set's loader go in dataset_options={...}")
    given = {k: v for k, v in options.items() if k not in own}
    twice = [k for k, v in given.items() if k in (dataset_options or {}) and (dataset_options or {})[k] != v]
    if twice:
        raise ConfigError(f"{twice[0]} is given twice, as a keyword and in dataset_options, with different values; "
                          "give it once")
    merged = {**(dataset_options or {}), **given} if given else dataset_options
    return {k: v for k, v in options.items() if k in own}, None if merged is None else dict(merged)


_KIND_TEXT = {"benchmark": "registered benchmark", "generated": "generated data set", "manifest": "manifest",
              "imagefolder": "image folder", "hf": "Hugging Face dataset"}


def _flag(f: dataclasses.Field[Any]) -> str:
    return str(f.metadata.get("flag") or "--" + f.name.replace("_", "-"))


@dataclass
class ModelSpec:
    """Which model a run uses."""

    model: str | None = option(None, group="model", registry=MODELS,
                               help="model name, by family: {choices}; or a model-zoo name (hnbench models: "
                                    "longclip-l14, ...)")
    pretrained: str | None = option(None, group="model", help="open_clip tag (needs the internet), an hf: model's hub "
                                                              "revision, or a local checkpoint (.safetensors / .pt / "
                                                              ".pth / .bin)")
    model_config: str | None = option(None, group="model", help="JSON file registering a custom open_clip architecture")
    context_length: int | None = same_as(EvalSettings, "context_length")
    trust_remote_code: bool = option(False, group="model",
                                     help="let a remote: model, or a local transformers folder whose config names code "
                                          "(auto_map), run the code its release ships; refused without it, naming "
                                          "the files; recorded with the model")

    def __post_init__(self) -> None:
        for name in ("model", "pretrained", "model_config"):
            if isinstance(getattr(self, name), os.PathLike):
                setattr(self, name, os.fspath(getattr(self, name)))

    def validate(self) -> None:
        """The declared types and bounds, and a --model-config's architecture name (before anything loads)."""
        check_declared(self)
        check_model_config_name(self.model, self.model_config)
