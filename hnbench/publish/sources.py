"""The result files an export reads, as every format sees them, and what a format hands back.

Each file is read once (:func:`hnbench.results.read_result`, its per-query parquet checked against it where it
is there) and known by the sha256 of its bytes. Its model gets the name the targets print (:class:`Model`: never a
local path: a checkpoint file or model folder needs ``--model-name``), its data the benchmark and protocol it
was scored on (:class:`Data`). What no target can hold is refused here, for every format, with the reason
(:class:`Skip`): a caption-length monotonicity result, a ``--limit`` subset, an approximate search. Of a model
scored twice on the same benchmark, protocol and task (a rerun, other settings), the newest ``created`` is
exported and the others are listed as superseded, as the leaderboard keeps them.

A format's writer (``build(sources, settings)``) returns a :class:`Built`: the files' bytes by path, every
value it wrote traced to its result and field (:class:`Value`), what it could not hold (:class:`Skip`) and the
notes said once (a column left empty, a name used for want of a Hub id).
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hnbench.errors import ConfigError
from hnbench.io import is_record, read_untrusted
from hnbench.registry import BENCHMARK_SPECS, DATASETS
from hnbench.results.record import EvalResult, ResultFormatError, per_query_path, read_per_query, read_result

if TYPE_CHECKING:
    from hnbench.data.benchmarks.spec import BenchmarkSpec
    from hnbench.publish.options import ExportSettings

__all__ = ["Built", "Data", "Inputs", "Model", "Skip", "Source", "Value", "fraction", "hub_revision", "interval",
           "is_local", "model_folders", "number", "read_sources", "recall_ks", "slug", "top_ks"]

NO_WEIGHTS = "random-init"  # the weights tag of a model scored without weights
_WEIGHT_SUFFIXES = (".pt", ".pth", ".bin", ".safetensors", ".ckpt", ".npz", ".json")


@dataclass(frozen=True)
class Model:
    """A model as the targets name it: ``arch`` and ``tag`` (CLIP_benchmark's and open_clip's model and
    pretrained), ``name`` (a model card's, an MTEB folder's); ``key`` tells models apart (architecture, weights,
    fingerprint, scorer)."""

    key: tuple[str, str, str, str]
    arch: str
    tag: str
    name: str
    mteb_name: str
    fingerprint: str
    given: bool  # named by --model-name


@dataclass(frozen=True)
class Data:
    """What a result was scored on: a registered benchmark (``spec``), hnbench's own set, or the user's data
    (known by its name and content fingerprint)."""

    name: str
    protocol: str
    title: str
    fingerprint: str
    registered: bool
    spec: BenchmarkSpec | None = None


@dataclass(frozen=True)
class Source:
    """One result file read for an export: its position among the inputs, path, sha256, record, model, data."""

    index: int
    path: str
    sha256: str
    result: EvalResult
    model: Model
    data: Data
    per_query: str  # "checked" (its parquet agrees with it), "absent" (named, not there), "none" (none named)

    def record(self) -> dict[str, Any]:
        """What the manifest says of this input."""
        return {"index": self.index, "path": self.path, "sha256": self.sha256, "per_query": self.per_query,
                "model": self.model.name, "task": self.result.task, "benchmark": self.data.name,
                "protocol": self.data.protocol}


@dataclass(frozen=True)
class Skip:
    """A result (``what``: all of it, or one direction, metric or column) an export does not hold, and why."""

    path: str
    what: str
    reason: str

    def record(self) -> dict[str, str]:
        return {"result": self.path, "what": self.what, "reason": self.reason}


@dataclass(frozen=True)
class Value:
    """One value an export wrote: the file and the place in it, and the result field it comes from."""

    file: str
    where: str
    source: int
    field: str
    value: Any

    def record(self) -> dict[str, Any]:
        return {"file": self.file, "where": self.where, "result": self.source, "field": self.field,
                "value": self.value}


@dataclass
class Built:
    """What a format's writer made: file bytes by path under the output folder (``/``-separated), the values in
    them, what it could not hold and the notes said once; ``card``: the model card to update in place, with its
    new bytes (``--card``)."""

    files: dict[str, bytes] = field(default_factory=dict)
    values: list[Value] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    card: tuple[Path, bytes] | None = None

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)


def slug(text: str) -> str:
    """``text`` as a file-name part: runs of other characters than letters, digits, ``.``, ``_``, ``-`` and ``@``
    become ``-``; never ``.``/``..`` nor empty."""
    out = re.sub(r"[^A-Za-z0-9._@-]+", "-", text).strip("-")
    return out if out.strip(".") else "x"


def number(value: Any) -> float | None:
    """A metric as a finite float; None where it is missing, NaN or not a number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    x = float(value)
    return x if math.isfinite(x) else None


def fraction(percent: float) -> float:
    """A percentage as the fraction CLIP_benchmark, MTEB and open_clip store."""
    return percent / 100


def recall_ks(metrics: dict[str, Any]) -> list[int]:
    """The K of every ``R@K`` in a direction's metrics, ascending."""
    return sorted(int(k[2:]) for k in metrics if isinstance(k, str) and k.startswith("R@") and k[2:].isdigit())


def top_ks(metrics: dict[str, Any]) -> list[int]:
    """The K of every ``top-K`` accuracy in zero-shot metrics, ascending."""
    return sorted(int(k[4:]) for k in metrics if isinstance(k, str) and k.startswith("top-") and k[4:].isdigit())


def interval(result: EvalResult, group: str, metric: str) -> tuple[tuple[float, float], str] | None:
    """A metric's recorded 95% interval (in the result's scale) and how it was made (``bootstrap`` where the
    file predates ``ci95_method``); None where it has none."""
    ci = ((result.ci95 or {}).get(group) or {}).get(metric) if isinstance((result.ci95 or {}).get(group), dict) \
        else None
    if not isinstance(ci, (list, tuple)) or len(ci) != 2:
        return None
    lo, hi = number(ci[0]), number(ci[1])
    if lo is None or hi is None:
        return None
    methods = (result.ci95_method or {}).get(group)
    method = methods.get(metric) if isinstance(methods, dict) else None
    return (lo, hi), str(method or "bootstrap")


def hub_revision(source: Source, repo: str | None) -> str | None:
    """The Git revision of Hub dataset ``repo`` the result's data was downloaded at (``hnbench datasets
    download`` records it), when that repository is where its spec fetches a file from; else None."""
    spec = source.data.spec
    if repo is None or spec is None:
        return None
    resources = (((source.result.dataset.get("meta") or {}).get("download") or {}).get("resources") or {})
    for r in spec.resources:
        entry = resources.get(r.filename) if isinstance(resources, dict) and r.hf_repo == repo else None
        revision = entry.get("revision") if isinstance(entry, dict) else None
        if isinstance(revision, str) and re.fullmatch(r"[0-9a-f]{40}", revision):
            return revision
    return None


def model_folders(sources: Iterable[Source]) -> dict[tuple[str, str, str, str], str]:
    """Where each model's files go in a per-model layout (a model card, a model repository's ``.eval_results``):
    ``""`` (the output folder itself) for an export of one model, else a folder named after the model (with its
    fingerprint where two names would share one)."""
    models = {s.model.key: s.model for s in sources}
    if len(models) <= 1:
        return {key: "" for key in models}
    names = [slug(m.name) for m in models.values()]
    return {key: slug(m.name) + (f"-{m.fingerprint[:8] or 'x'}" if names.count(slug(m.name)) > 1 else "") + "/"
            for key, m in models.items()}


def is_local(name: str, *, weights: bool) -> bool:
    """Whether a model's architecture (``weights=False``) or weights (``weights=True``) name is a local file or
    folder, which an export never writes: a path (absolute, relative, with a separator) or a file name; a Hub
    id ``ORG/NAME`` (``hf:``, ``hf-hub:``) and a weights tag (``openai``, a revision) are names."""
    if name.startswith("local-dir:"):
        return True
    bare = name.removeprefix("hf-hub:").removeprefix("hf:")
    if os.path.isabs(bare) or bare.startswith(("./", "../", "~")) or "\\" in bare or bare.endswith(_WEIGHT_SUFFIXES):
        return True
    if weights:  # a tag has no '/' and no '.' (the leaderboard's rule for a checkpoint path)
        return "/" in bare or os.sep in bare or "." in bare
    return bare.count("/") > 1


def _files(paths: Sequence[str | Path]) -> list[Path]:
    """The result JSON files named (a folder: every ``*.json`` below it but inputs records), each once."""
    files: dict[str, Path] = {}
    for p in map(Path, paths):
        if not p.exists():
            raise ConfigError(f"{p}: no such result file or folder")
        found = sorted(f for f in p.rglob("*.json") if f.is_file() and not is_record(f)) if p.is_dir() else [p]
        if p.is_dir() and not found:
            raise ConfigError(f"{p}: no result files (*.json) in this folder")
        for f in found:
            files.setdefault(os.path.realpath(f), f)
    if not files:
        raise ConfigError("export needs at least one result file or folder")
    return sorted(files.values(), key=str)


def _model(result: EvalResult, settings: ExportSettings, path: Path) -> Model:
    """The model of ``result`` as the targets name it (``--model-name``, else from its architecture and weights
    tag); a local file or folder without ``--model-name`` is refused (one line)."""
    m = result.model
    arch, pretrained = str(m.get("arch")), m.get("pretrained")
    scorer = str((result.scorer or {}).get("name") or "cosine")
    key = (arch, str(pretrained), str(m.get("fingerprint") or ""), scorer)
    local_arch, local_weights = is_local(arch, weights=False), bool(pretrained) and is_local(str(pretrained),
                                                                                          weights=True)
    given = settings.model_name
    if (local_arch or local_weights) and given is None:
        what = "architecture" if local_arch else "weights"
        raise ConfigError(f"{path}: the model's {what} are a local file or folder, whose path an export never "
                          "writes: name the model with --model-name NAME (export one model at a time)")
    public_arch = given if local_arch and given else arch
    tag = given if local_weights and given else str(pretrained) if pretrained else NO_WEIGHTS
    extra = "" if scorer == "cosine" else f" + {scorer}"
    name = given or f"{public_arch} ({tag}){extra}"
    hub = arch.removeprefix("hf-hub:").removeprefix("hf:")
    mteb = given or (hub if hub != arch and hub.count("/") == 1 else f"{public_arch}/{tag}") + extra.replace(" ", "")
    return Model(key, public_arch, tag, name, mteb, str(m.get("fingerprint") or ""), given is not None)


def _data(result: EvalResult) -> Data:
    """What ``result`` was scored on: its registered benchmark's spec (read at call time: tests swap specs),
    hnbench's own set, or the user's data by its name."""
    from hnbench.data.benchmarks import BENCHMARKS  # the specs (their modules import the data code)

    d = result.dataset
    name, protocol = str(d["name"]), str(d.get("protocol") or "default")
    spec = BENCHMARKS.get(name) if name in BENCHMARK_SPECS else None
    return Data(name, protocol, spec.title if spec else name, str(d.get("fingerprint") or ""),
                spec is not None or name in DATASETS, spec)


#: the metric groups the export targets hold: retrieval's directions and zero-shot classification
EXPORTED_GROUPS = frozenset({"t2i", "i2t", "classification"})


def _refusal(result: EvalResult) -> str | None:
    """Why no export target can hold ``result``; None when they can."""
    s = result.settings or {}
    groups = result.task_spec().groups
    if not set(groups) & EXPORTED_GROUPS:
        return (f"its task's metrics ({', '.join(groups)}: {result.task}) have no counterpart in any export target "
                "(model cards, CLIP_benchmark, MTEB, open_clip)")
    if s.get("limit"):
        return (f"a seeded {s['limit']}-image subset (--limit), not the benchmark's protocol: a published number "
                "must be of the whole set")
    if str(s.get("search", "exact")) != "exact":
        return f"{s.get('search')} search: its R@K are not exact, and no target can mark them so"
    return None


@dataclass
class Inputs:
    """The result files read (``all``, in path order), those an export goes on with (``kept``) and those no
    target holds (``skipped``)."""

    all: list[Source]
    kept: list[Source]
    skipped: list[Skip]


def read_sources(paths: Sequence[str | Path], settings: ExportSettings) -> Inputs:
    """Every result file under ``paths``, read and named, in path order; the results no target can hold, and
    the older of a model's results on the same benchmark, protocol and task, as :class:`Skip`.

    A file that is not a readable result, or whose per-query parquet disagrees with it, is one line (nothing
    is written); so is ``--model-name`` with several models, or a local model without it."""
    sources: list[Source] = []
    for i, path in enumerate(_files(paths)):
        data = read_untrusted(path, "result file", error=ResultFormatError)
        result = read_result(path)
        checked = "none"
        if result.per_query:
            checked = "checked" if os.path.lexists(per_query_path(result)) else "absent"
            if checked == "checked":
                read_per_query(result)  # its R@K must be those of its per-query ranks, else one line
        sources.append(Source(i, str(path), hashlib.sha256(data).hexdigest(), result,
                              _model(result, settings, path), _data(result), checked))
    models = sorted({s.model.key for s in sources})
    if settings.model_name is not None and len(models) > 1:
        raise ConfigError(f"--model-name names one model; the results hold {len(models)} "
                          f"({', '.join(dict.fromkeys(s.model.key[0] + ' ' + s.model.key[1] for s in sources))}): "
                          "export each model alone")
    skipped: list[Skip] = []
    kept: list[Source] = []
    for s in sources:
        reason = _refusal(s.result)
        if reason:
            skipped.append(Skip(s.path, "the whole result", reason))
        else:
            kept.append(s)
    return Inputs(sources, _newest(kept, skipped), skipped)


def _newest(sources: Iterable[Source], skipped: list[Skip]) -> list[Source]:
    """One result per model, task, benchmark and protocol (the user's data: and content): the newest ``created``
    (then the last path); the others are added to ``skipped`` as superseded."""
    groups: dict[tuple[Any, ...], list[Source]] = {}
    for s in sources:
        data = (s.data.name, s.data.protocol, "" if s.data.registered else s.data.fingerprint)
        groups.setdefault((s.model.key, s.result.task, *data), []).append(s)
    out = []
    for group in groups.values():
        group.sort(key=lambda s: (str(s.result.created), s.path))
        newest = group[-1]
        out.append(newest)
        for old in group[:-1]:
            skipped.append(Skip(old.path, "the whole result",
                                f"superseded by the newer {newest.path} ({newest.result.created}): the same model on "
                                f"{old.data.name}/{old.data.protocol} ({old.result.task}); a target holds one value "
                                "each"))
    return sorted(out, key=lambda s: s.index)
