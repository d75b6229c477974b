"""The hardness summary: typed records, a schema version, atomic JSON IO.

Schema (version 1), ``hardness.json``::

    schema_version, kind ("hnbench.hardness"), hnbench_version, created
    dataset    {name, protocol, fingerprint, n_images, n_captions, source, kind ("dataset" | "captions")}
    encoder    {arch, pretrained, fingerprint, context_length, embed_dim, framework, ...}
    settings   {batch_size, n_batches, edges, threshold, image_threshold, exact_max, n_sample_pairs, seed,
                device, label_field, negatives}
    text       {n_items, pairwise: Distribution, nearest: Distribution, near_duplicates: PairList, buckets: Buckets}
    image      same shape as text (buckets null) or null when no images were encoded
    both       PairList of image pairs near-duplicate in both modalities (score = image cosine,
               other_score = best caption cosine), or null
    structure  {"text": Structure, "image": Structure} for a label field (e.g. synthdense's family), or {}
    recall     [RecallByHardness], one per joined evaluation result
    files      {name: path relative to the JSON}: plots, report, pair lists, per-item parquet
    digests    {name: sha256 of that file}: the JSON is written last and ties the set together; a reader
               of a file whose bytes differ (an interrupted rerun) refuses it (:func:`read_file`).
               Absent in files written before it was added.
    timings    {stage: seconds}

``Distribution`` = {n, mean, std, stderr, min, max, quantiles {p1..p99}, method ("exact" | "sampled"),
histogram {start, width, counts}, population}. Readers accept every version up to :data:`SCHEMA_VERSION`.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import types
import typing
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from hnbench._version import __version__
from hnbench.errors import HnbenchError
from hnbench.hardness.stats import Buckets, Distribution
from hnbench.hardness.structure import Structure
from hnbench.io import (
    MAX_TABLE_BYTES,
    atomic_write_bytes,
    file_beside,
    read_json_untrusted,
    read_untrusted,
    sha256_file,
)

if TYPE_CHECKING:  # pandas is imported where frames are built (it is slow to import); here only its type
    import pandas as pd

SCHEMA_VERSION = 1
KIND = "hnbench.hardness"

Indices = npt.NDArray[np.int64]
Scores = npt.NDArray[np.float32]


class HardnessFormatError(HnbenchError):
    """A hardness file is unreadable, not a hardness summary, or newer than this hnbench."""


@dataclass
class Pair:
    """Two items and their similarity (``other_score``: the other modality's, for cross-modal pairs)."""

    a_index: int
    b_index: int
    a: str
    b: str
    score: float
    a_text: str | None = None
    b_text: str | None = None
    other_score: float | None = None


@dataclass
class PairList:
    """Pairs at or above a threshold: counts, and the top ones (all of them in ``file``)."""

    threshold: float
    n_pairs: int
    n_items: int  # distinct items in at least one pair
    share_items: float
    top: list[Pair] = field(default_factory=list)
    file: str | None = None


@dataclass
class ModalityStats:
    """Geometry of one modality's embeddings."""

    n_items: int
    pairwise: Distribution
    nearest: Distribution
    near_duplicates: PairList
    buckets: Buckets | None = None


@dataclass
class RecallBucket:
    label: str
    n: int
    r_at_1: float  # % of the bucket's queries with rank 1


@dataclass
class WrongQuery:
    """A t2i query ranked below 1, with the image the model preferred and that image's caption."""

    query_id: str
    query_text: str
    rank: int
    hardness: float  # the query's hardest-negative caption similarity
    gt_id: str
    wrong_id: str
    wrong_text: str
    wrong_similarity: float  # caption similarity between the query and the wrong image's caption
    at_hardest_negative: bool  # the wrong image is the image of the query's hardest-negative caption


@dataclass
class RecallByHardness:
    """R@1 per bucket of the query's hardest negative, from a stored evaluation's per-query file."""

    result: str
    model: dict[str, Any]
    edges: list[float]
    t2i: list[RecallBucket]
    i2t: list[RecallBucket]
    n_matched: dict[str, int]
    n_errors: int
    errors_at_hardest_negative: float  # share of t2i errors whose wrong image is the hardest negative's
    wrong: list[WrongQuery] = field(default_factory=list)
    file: str | None = None


@dataclass
class HardnessArrays:
    """The per-item arrays behind one run's summary (not in the JSON: the pair CSVs, the per-caption parquet,
    the Ḡ plot and the error CSVs are written from them). Pair lists are ``(a, b, cosine)`` with ``a < b``,
    sorted by cosine, highest first; indices are positions in the caption (or image) list."""

    text_nearest_index: Indices  # (N,) each caption's hardest negative caption, -1 when none
    text_nearest_score: Scores  # (N,) its cosine, NaN when none
    text_pairs: tuple[Indices, Indices, Scores]  # caption near-duplicates at or above the threshold
    gbar: Scores  # (B, B) Ḡ of one example batch, diagonal 0
    gbar_items: Indices  # (B,) the caption positions of that batch
    # the image fields are None when no images were encoded
    image_nearest_index: Indices | None = None  # (M,) each image's nearest other image, -1 when none
    image_nearest_score: Scores | None = None  # (M,) its cosine
    image_pairs: tuple[Indices, Indices, Scores] | None = None  # image near-duplicates (image threshold)
    # image pairs near-duplicate in both modalities: (a, b, image cosine, best caption cosine), by the lower
    both_pairs: tuple[Indices, Indices, Scores, Scores] | None = None
    errors: list[pd.DataFrame] = field(default_factory=list)  # t2i errors, one frame per joined result


@dataclass
class HardnessReport:
    """Everything ``hnbench hardness`` measured on one (caption set, encoder)."""

    dataset: dict[str, Any]
    encoder: dict[str, Any]
    settings: dict[str, Any]
    text: ModalityStats
    image: ModalityStats | None = None
    both: PairList | None = None
    structure: dict[str, Structure] = field(default_factory=dict)
    recall: list[RecallByHardness] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    digests: dict[str, str] = field(default_factory=dict)  # sha256 of each file in ``files`` but the JSON itself
    timings: dict[str, float] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION
    kind: str = KIND
    hnbench_version: str = __version__
    created: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    path: str | None = field(default=None, compare=False, metadata={"json": False})
    arrays: HardnessArrays | None = field(default=None, compare=False, repr=False, metadata={"json": False})

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.metadata.get("json", True)}
        d = {k: _plain(v) for k, v in out.items()}
        head = ["schema_version", "kind", "hnbench_version", "created"]
        return {**{k: d[k] for k in head}, **{k: v for k, v in d.items() if k not in head}}

    def require_arrays(self) -> HardnessArrays:
        """The per-item arrays; only a report fresh from :func:`~hnbench.hardness.analyze` has them."""
        if self.arrays is None:
            raise ValueError("this hardness report has no per-item arrays (read back from JSON?): "
                             "rerun the analysis")
        return self.arrays

    @property
    def label(self) -> str:
        """``dataset/protocol · arch (weights)`` for tables."""
        ds = self.dataset.get("name", "?") + (f"/{self.dataset['protocol']}" if self.dataset.get("protocol") else "")
        enc = self.encoder.get("arch", "?") + f" ({self.encoder.get('pretrained') or 'random init'})"
        return f"{ds} · {enc}"


def _plain(v: Any) -> Any:
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return asdict(v)
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def _build(tp: Any, value: Any) -> Any:
    """Rebuild a value of annotated type ``tp`` from its JSON form."""
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _build(args[0], value) if len(args) == 1 else value
    if origin is list:
        (arg,) = typing.get_args(tp)
        return [_build(arg, x) for x in value]
    if origin is dict:
        _, arg = typing.get_args(tp)
        return {k: _build(arg, x) for k, x in value.items()}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        names = {f.name for f in dataclasses.fields(tp) if f.init and f.metadata.get("json", True)}
        return tp(**{k: _build(hints[k], v) for k, v in value.items() if k in names})
    return value


def write_report(report: HardnessReport, output_dir: str | Path, name: str = "hardness.json") -> Path:
    """Write the summary atomically as indented JSON; returns its path."""
    path = Path(output_dir) / name
    atomic_write_bytes(path, (json.dumps(report.to_dict(), indent=2, allow_nan=True) + "\n").encode())
    report.path = str(path)
    return path


def read_report(path: str | Path) -> HardnessReport:
    """Read a hardness summary of any schema version up to the current one."""
    path = Path(path)
    if path.is_dir():
        path = path / "hardness.json"
    d = read_json_untrusted(path, "hardness file", error=HardnessFormatError)
    if not isinstance(d, dict) or d.get("kind") != KIND:
        kind = d.get("kind") if isinstance(d, dict) else type(d).__name__
        raise HardnessFormatError(f"{path}: not an hnbench hardness summary (kind {kind!r})")
    version = d.get("schema_version")
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise HardnessFormatError(f"{path}: schema version {version!r} is newer than this hnbench reads "
                                  f"({SCHEMA_VERSION}); upgrade hnbench")
    for key in ("files", "digests"):
        if not isinstance(d.get(key, {}), dict) or not all(isinstance(v, str) for v in d.get(key, {}).values()):
            raise HardnessFormatError(f"{path}: malformed {key!r} (an object of file names expected)")
    try:
        report: HardnessReport = _build(HardnessReport, d)
    except (TypeError, ValueError, AttributeError) as e:
        raise HardnessFormatError(f"{path}: malformed hardness summary ({type(e).__name__}: {e})") from None
    report.path = str(path)
    return report


def record_digests(report: HardnessReport, output_dir: str | Path) -> None:
    """The sha256 of every file of the set (``report.files`` but the JSON), for :func:`read_file` to check."""
    report.digests = {key: sha256_file(Path(output_dir) / name) for key, name in report.files.items()
                      if key != "summary"}


def read_file(report: HardnessReport, key: str, *, limit: int = MAX_TABLE_BYTES) -> bytes:
    """The bytes of the file ``report.files[key]`` (inside the JSON's folder, a regular file), refused in one line
    when they are not those the JSON recorded: the JSON and the file come from different runs."""
    where = report.path or "hardness.json"
    path = file_beside(where, report.files.get(key), f"{key} file", error=HardnessFormatError)
    data = read_untrusted(path, f"the {key} file of {where}", limit=limit, error=HardnessFormatError)
    want = report.digests.get(key)
    if want is not None and hashlib.sha256(data).hexdigest() != want:
        raise HardnessFormatError(f"{where}: its {key} file {report.files[key]} does not match it (sha256 differs: "
                                  "the two come from different runs, e.g. an interrupted rerun); rerun hnbench hardness")
    return data
