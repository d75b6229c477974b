"""Content-addressed embedding store: an item is never encoded twice by the same model.

Key of an embedding = (model key) × (content key):

- *model key*: sha256 over the weights fingerprint, framework, architecture, the image
  preprocessing (``repr`` of the eval transform, memory addresses stripped), text context length,
  embedding dim, weights precision and the autocast dtype actually used (amp only counts on CUDA).
  The device is deliberately not part of it: CPU and GPU embeddings of the same model agree to
  ~1e-6 and a cache filled on a GPU machine should serve analyses on a laptop.
- *content key*: blake2b-128 of the image file's bytes (not its path or name) / the caption's
  UTF-8 text. Images that cannot be read have no key: they are never cached, always retried.

Layout under the root (default ``<hnbench cache>/embeddings``, see :func:`default_root`)::

    <root>/<model key>/model.json          what the key was made of (for ``hnbench cache ls``)
    <root>/<model key>/image/<name>.emb    shards of image embeddings
    <root>/<model key>/text/<name>.emb     shards of text embeddings (+ token lengths)
    <root>/quarantine/<...>.emb            shards that failed their checksum
    <root>/.hnbench-cache                  the marker: ``hnbench cache clear`` refuses a folder without it
                                           (unless every entry is a model folder as above: a cache made
                                           before the marker, adopted) and removes only these files

A shard is written once, atomically (temporary file + ``os.replace``) and never modified::

    b"HNBEMB1\\n" | uint32 header length | JSON header {kind, model_key, n, dim, aux}
    | n × 16 content keys | n × dim float32 vectors | n int64 aux (text: token lengths)
    | sha256 of everything before it (32 bytes)

A shard whose size, header or checksum does not match is logged, moved to ``quarantine/`` and
its items count as missing, so they are encoded again: a corrupt file is never used.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hnbench.data.base import ImageSource
from hnbench.errors import CacheError
from hnbench.io import DIGEST_BYTES, atomic_write_bytes, cache_dir, content_digest

__all__ = ["MARKER", "CacheStats", "CorruptShardError", "EmbeddingCache", "ShardStore", "check_root", "clear",
           "default_root", "disk_usage", "generated_data", "list_models", "model_spec", "plan_clear"]

logger = logging.getLogger(__name__)

FORMAT = 1
MAGIC = b"HNBEMB1\n"
KEY_BYTES = DIGEST_BYTES
KEY_DTYPE = np.dtype(f"S{KEY_BYTES}")
SHARD_SUFFIX = ".emb"
KINDS = ("image", "text")


class CorruptShardError(Exception):
    """A shard file is truncated, malformed or fails its checksum."""


def default_root() -> Path:
    """``<hnbench cache dir>/embeddings`` (``$HNBENCH_CACHE``, ``$XDG_CACHE_HOME/hnbench`` or ``~/.cache/hnbench``)."""
    return cache_dir() / "embeddings"


@dataclass
class CacheStats:
    """What one run met in the cache that its result records (hits and encodes are counted by the encoder)."""

    corrupt_shards: int = 0


# --- keys ----------------------------------------------------------------------------------------
def _describe_transform(transform: Any) -> str:
    """A stable text form of an image transform: its repr without memory addresses."""
    text = re.sub(r" at 0x[0-9a-fA-F]+", "", repr(transform))
    processor = getattr(transform, "processor", None)  # transformers image processors carry their config
    if processor is not None and hasattr(processor, "to_dict"):
        text += json.dumps(processor.to_dict(), sort_keys=True, default=str)
    return text


def model_spec(info: Any, image_transform: Any, *, autocast: str | None = None,
               preprocess: str | None = None) -> dict[str, Any]:
    """What the model key is made of (``info`` is a :class:`~hnbench.models.base.ModelInfo`);
    ``preprocess`` is a remembered description of ``image_transform``, used instead of it."""
    return {
        "format": FORMAT, "framework": info.framework, "arch": info.arch, "fingerprint": info.fingerprint,
        "preprocess": preprocess if preprocess is not None else _describe_transform(image_transform), "context_length": int(info.context_length),
        "embed_dim": int(info.embed_dim), "precision": (info.extra or {}).get("precision", "fp32"),
        "autocast": autocast,
    }


def text_keys(texts: Sequence[str]) -> np.ndarray:
    """Content keys of captions: blake2b-128 of the UTF-8 text."""
    return np.array([content_digest(t.encode("utf-8")) for t in texts], dtype=KEY_DTYPE)


def image_keys(source: ImageSource, positions: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Content keys of images ``positions`` of ``source`` (:meth:`ImageSource.content_digests`: the file's
    bytes for files and HF rows, else pixels) and a mask of those that could be read."""
    found = source.content_digests(list(positions))
    ok = np.array([k is not None for k in found], dtype=bool)
    return np.array([k or b"" for k in found], dtype=KEY_DTYPE), ok


# --- shards --------------------------------------------------------------------------------------
@dataclass
class Shard:
    keys: np.ndarray  # (n,) S16
    vectors: np.ndarray  # (n, dim) float32
    aux: np.ndarray | None  # (n,) int64


def encode_shard(kind: str, model_key: str, keys: np.ndarray, vectors: np.ndarray,
                 aux: np.ndarray | None = None) -> bytes:
    """Serialise one shard (format in the module docstring)."""
    keys = np.ascontiguousarray(keys, dtype=KEY_DTYPE)
    vectors = np.ascontiguousarray(vectors, dtype="<f4")
    header = json.dumps({"format": FORMAT, "kind": kind, "model_key": model_key, "n": int(len(keys)),
                         "dim": int(vectors.shape[1]), "aux": None if aux is None else "int64"}).encode()
    parts = [MAGIC, struct.pack("<I", len(header)), header, keys.tobytes(), vectors.tobytes()]
    if aux is not None:
        parts.append(np.ascontiguousarray(aux, dtype="<i8").tobytes())
    body = b"".join(parts)
    return body + hashlib.sha256(body).digest()


def decode_shard(data: bytes, *, kind: str | None = None, model_key: str | None = None,
                 dim: int | None = None) -> Shard:
    """Parse and verify a shard; raise :class:`CorruptShardError` on any mismatch."""
    if len(data) < len(MAGIC) + 4 + 32 or not data.startswith(MAGIC):
        raise CorruptShardError("bad magic or truncated")
    if hashlib.sha256(data[:-32]).digest() != data[-32:]:
        raise CorruptShardError("checksum mismatch")
    (hlen,) = struct.unpack_from("<I", data, len(MAGIC))
    start = len(MAGIC) + 4
    try:
        h = json.loads(data[start:start + hlen])
        n, d = int(h["n"]), int(h["dim"])
    except (ValueError, KeyError, TypeError) as e:
        raise CorruptShardError(f"bad header ({e})") from e
    expect = {"kind": kind, "model_key": model_key, "dim": dim}
    for name, want in expect.items():
        if want is not None and h.get(name) != want:
            raise CorruptShardError(f"header {name}={h.get(name)!r}, expected {want!r}")
    off = start + hlen
    size = off + n * KEY_BYTES + 4 * n * d + (8 * n if h.get("aux") else 0) + 32
    if size != len(data):
        raise CorruptShardError(f"size {len(data)} != {size} from the header")
    keys = np.frombuffer(data, KEY_DTYPE, n, off)
    off += n * KEY_BYTES
    vectors = np.frombuffer(data, "<f4", n * d, off).reshape(n, d)
    off += 4 * n * d
    aux = np.frombuffer(data, "<i8", n, off) if h.get("aux") else None
    return Shard(keys, vectors, aux)


def read_header(path: Path) -> dict[str, Any]:
    """The JSON header of a shard, without verifying the body (for listings)."""
    with open(path, "rb") as f:
        head = f.read(len(MAGIC) + 4)
        if len(head) < len(MAGIC) + 4 or not head.startswith(MAGIC):
            raise CorruptShardError("bad magic or truncated")
        (hlen,) = struct.unpack_from("<I", head, len(MAGIC))
        try:
            header: dict[str, Any] = json.loads(f.read(hlen))
            return header
        except ValueError as e:
            raise CorruptShardError(f"bad header ({e})") from e


class ShardStore:
    """The shards of one kind (image or text) of one model."""

    def __init__(self, directory: Path, kind: str, model_key: str, dim: int, stats: CacheStats,
                 quarantine: Path):
        self.directory, self.kind, self.model_key, self.dim = Path(directory), kind, model_key, dim
        self.stats, self.quarantine = stats, quarantine
        self.unwritable = False

    def shards(self) -> list[Path]:
        return sorted(self.directory.glob(f"*{SHARD_SUFFIX}")) if self.directory.is_dir() else []

    def _read(self, path: Path) -> Shard | None:
        try:
            return decode_shard(path.read_bytes(), kind=self.kind, model_key=self.model_key, dim=self.dim)
        except FileNotFoundError:  # quarantined or cleared by another process meanwhile
            return None
        except OSError as e:  # not corrupt but unreadable: moving it away could lose a good shard
            raise CacheError(f"cache shard {path} is unreadable ({e.strerror or e}); fix its permissions, "
                             f"remove it, or run without the cache (--no-cache)") from e
        except CorruptShardError as e:
            self.stats.corrupt_shards += 1
            self.quarantine.mkdir(parents=True, exist_ok=True)
            dest = self.quarantine / f"{self.model_key}-{self.kind}-{path.name}"
            moved: Path | None = dest
            try:
                os.replace(path, dest)
            except OSError:
                moved = None
            logger.warning("corrupt %s cache shard %s (%s): moved to %s; its items will be encoded again",
                           self.kind, path, e, moved)
            return None

    def lookup(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(found mask, vectors, aux) for ``keys``; rows not found are NaN / -1."""
        keys = np.asarray(keys, dtype=KEY_DTYPE)
        n = len(keys)
        vectors = np.full((n, self.dim), np.nan, dtype=np.float32)
        aux = np.full(n, -1, dtype=np.int64)
        if n == 0:
            return np.zeros(0, bool), vectors, aux
        uniq, inverse = np.unique(keys, return_inverse=True)
        found = np.zeros(len(uniq), dtype=bool)
        u_vec = np.full((len(uniq), self.dim), np.nan, dtype=np.float32)
        u_aux = np.full(len(uniq), -1, dtype=np.int64)
        for path in self.shards():
            shard = self._read(path)
            if shard is None or not len(shard.keys):
                continue
            pos = np.searchsorted(uniq, shard.keys).clip(max=len(uniq) - 1)
            take = (uniq[pos] == shard.keys) & ~found[pos]
            pos = pos[take]
            u_vec[pos] = shard.vectors[take]
            if shard.aux is not None:
                u_aux[pos] = shard.aux[take]
            found[pos] = True
            if found.all():
                break
        hit = found[inverse]
        return hit, u_vec[inverse], u_aux[inverse]

    def write(self, keys: np.ndarray, vectors: np.ndarray, aux: np.ndarray | None = None) -> Path | None:
        """Write one shard atomically; its name is its checksum, so rewriting the same items is a no-op."""
        if not len(keys) or self.unwritable:
            return None
        data = encode_shard(self.kind, self.model_key, keys, vectors, aux)
        path = self.directory / f"{data[-32:].hex()[:24]}{SHARD_SUFFIX}"
        try:
            atomic_write_bytes(path, data)
        except OSError as e:  # read-only or full: the run goes on, only the reuse is lost
            self.unwritable = True
            logger.warning("cannot write the embedding cache at %s (%s); continuing without writing to it",
                           self.directory, e)
            return None
        return path

    def writer(self, shard_items: int, flush_seconds: float) -> ShardWriter:
        # Temporary files of writes killed half-way: invisible to readers, removed once clearly stale.
        for tmp in self.directory.glob(".*.tmp") if self.directory.is_dir() else []:
            with contextlib.suppress(OSError):
                if time.time() - tmp.stat().st_mtime > 3600:
                    tmp.unlink()
        return ShardWriter(self, shard_items, flush_seconds)


class ShardWriter:
    """Buffers freshly encoded items and writes a shard every ``shard_items`` items or ``flush_seconds``.

    Leaving the ``with`` block flushes what is buffered, also on an exception: what was encoded
    before a failure is kept, so the next run resumes after it.
    """

    def __init__(self, store: ShardStore, shard_items: int, flush_seconds: float):
        self.store, self.shard_items, self.flush_seconds = store, shard_items, flush_seconds
        self._keys: list[np.ndarray] = []
        self._vectors: list[np.ndarray] = []
        self._aux: list[np.ndarray] = []
        self._n, self._since = 0, time.monotonic()

    def add(self, keys: np.ndarray, vectors: np.ndarray, aux: np.ndarray | None = None) -> None:
        if vectors.ndim != 2 or vectors.shape[1] != self.store.dim:
            raise ValueError(f"embeddings of shape {vectors.shape} do not match the cache's dim {self.store.dim} "
                             "(model info embed_dim is wrong?)")
        self._keys.append(np.asarray(keys, dtype=KEY_DTYPE))
        self._vectors.append(np.asarray(vectors, dtype=np.float32))
        if aux is not None:
            self._aux.append(np.asarray(aux, dtype=np.int64))
        self._n += len(keys)
        if self._n >= self.shard_items or time.monotonic() - self._since >= self.flush_seconds:
            self.flush()

    def flush(self) -> None:
        if self._n:
            aux = np.concatenate(self._aux) if self._aux else None
            self.store.write(np.concatenate(self._keys), np.concatenate(self._vectors), aux)
        self._keys, self._vectors, self._aux, self._n = [], [], [], 0
        self._since = time.monotonic()

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.flush()


@dataclass
class EmbeddingCache:
    """One model's image and text stores under ``root/<model key>``."""

    root: Path
    spec: dict[str, Any]
    shard_items: int = 1024
    flush_seconds: float = 120.0
    stats: CacheStats = field(default_factory=CacheStats)
    pretrained: str | None = None  # shown by ``hnbench cache ls``; the weights enter the key via the fingerprint

    def __post_init__(self) -> None:
        self.root = Path(self.root).expanduser()
        blob = json.dumps(self.spec, sort_keys=True).encode()
        self.key = hashlib.sha256(blob).hexdigest()[:16]
        self.directory = self.root / self.key
        dim, quarantine = int(self.spec["embed_dim"]), self.root / "quarantine"
        self.images = ShardStore(self.directory / "image", "image", self.key, dim, self.stats, quarantine)
        self.texts = ShardStore(self.directory / "text", "text", self.key, dim, self.stats, quarantine)

    @classmethod
    def for_encoder(cls, encoder: Any, root: str | Path | None = None, *, amp: bool = False,
                    **kwargs: Any) -> EmbeddingCache:
        """The cache of ``encoder`` as it will run (``amp`` only changes the key on CUDA)."""
        autocast = None
        if amp and encoder.device.type == "cuda":
            import torch  # only here: `hnbench cache ls/du/clear` and the key helpers run without torch

            autocast = "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
        # A RememberedEncoder knows its transform's description without building the model.
        described = encoder.transform_description
        spec = model_spec(encoder.info, None if described is not None else encoder.image_transform,
                          autocast=autocast, preprocess=described)
        return cls(Path(root) if root is not None else default_root(), spec, pretrained=encoder.info.pretrained,
                   **kwargs)

    def write_metadata(self) -> None:
        """``model.json`` beside the shards, written once: what the key stands for (and the root's marker)."""
        _mark(self.root)
        path = self.directory / "model.json"
        if path.exists():
            return
        meta = {"key": self.key, "spec": self.spec, "pretrained": self.pretrained,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S")}
        with contextlib.suppress(OSError):  # an unwritable cache is reported once, by the shard writer
            atomic_write_bytes(path, (json.dumps(meta, indent=2) + "\n").encode())

    def image_writer(self) -> ShardWriter:
        self.write_metadata()
        return self.images.writer(self.shard_items, self.flush_seconds)

    def text_writer(self) -> ShardWriter:
        self.write_metadata()
        return self.texts.writer(self.shard_items, self.flush_seconds)


# --- ls / du / clear -----------------------------------------------------------------------------
MARKER = ".hnbench-cache"  # written into the root by the first cache write: "this folder is hnbench's cache"
_MODEL_DIR = re.compile(r"^[0-9a-f]{16}$")  # a model key (see EmbeddingCache)
QUARANTINE = "quarantine"
FINGERPRINTS = ".fingerprints"  # hnbench.evaluation.remembered's records of model fingerprints (declared here once)
_FLAT = {QUARANTINE: SHARD_SUFFIX, FINGERPRINTS: ".json"}  # folders of the root holding one kind of file


def _mark(root: Path) -> None:
    """Mark ``root`` as an embedding cache (once; an unwritable cache is reported by the shard writer)."""
    if not (root / MARKER).is_file():
        with contextlib.suppress(OSError):
            atomic_write_bytes(root / MARKER, (json.dumps({"format": FORMAT, "what": "hnbench embedding cache"})
                                               + "\n").encode())


def _plain_file(p: Path) -> bool:
    return p.is_file() and not p.is_symlink()


def _temporary(p: Path) -> bool:
    """A temporary file of an atomic write (``.<name>.<random>.tmp``)."""
    return p.name.startswith(".") and p.name.endswith(".tmp") and _plain_file(p)


def _shards_of(folder: Path, suffix: str = SHARD_SUFFIX) -> tuple[list[Path], bool]:
    """The shard (or other ``suffix``) files of ``folder``, temporary files included, and whether it holds
    nothing else."""
    entries = list(folder.iterdir())
    files = [p for p in entries if _plain_file(p) and p.suffix == suffix or _temporary(p)]
    return files, len(files) == len(entries)


def _owned(model_dir: Path, kind: str | None = None) -> tuple[list[Path], bool]:
    """The files hnbench wrote in a model's folder (with ``kind``: that kind's shards only) and whether
    the folder holds nothing else."""
    files, only = [], True
    for p in model_dir.iterdir():
        if p.name in KINDS and p.is_dir() and not p.is_symlink():
            shards, alone = _shards_of(p)
            files += shards if kind in (None, p.name) else []
            only = only and alone
        elif _plain_file(p) and (p.name == "model.json" or _temporary(p)):
            files += [p] if kind is None else []
        else:
            only = False
    return files, only


def _model_dirs(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if _MODEL_DIR.match(p.name) and p.is_dir() and not p.is_symlink()) \
        if root.is_dir() else []


def _foreign(root: Path) -> Path | None:
    """For a folder without the marker (a cache made before it existed, adopted): its first entry that is
    not a cached model's folder (``model.json`` and shards), the quarantine, the fingerprint records, an
    interrupted distributed run's ``.run-*`` (itself such a folder) or a temporary file."""
    models = _model_dirs(root)
    for p in sorted(root.iterdir()):
        folder = p.is_dir() and not p.is_symlink()
        if p in models and (p / "model.json").is_file() and _owned(p)[1] or _temporary(p) or \
                p.name == MARKER and _plain_file(p) or \
                folder and p.name in _FLAT and _shards_of(p, _FLAT[p.name])[1] or \
                folder and p.name.startswith(".run-") and _foreign(p) in (None, p):  # an interrupted run's
            continue
        return p
    return None if models else root


def check_root(root: str | Path) -> Path:
    """``root`` as a Path, if it is hnbench's embedding cache (or does not exist); else a one-line CacheError.

    A cache is a folder holding hnbench's marker (``.hnbench-cache``, written by the first cache write), or,
    made before the marker existed, one whose every entry is a cached model's folder (``model.json`` and
    shards), the quarantine or the fingerprint records; an empty folder holds nothing to list or clear."""
    root = Path(root).expanduser()
    if not root.exists() or root.is_dir() and ((root / MARKER).is_file() or not any(root.iterdir())):
        return root
    odd = _foreign(root) if root.is_dir() else root
    if odd is None:
        return root
    what = "it is not a folder" if odd == root and not root.is_dir() else "it holds no cached model" if odd == root \
        else f"{odd.name} is not hnbench's"
    raise CacheError(f"{root} is not an hnbench embedding cache (no {MARKER} marker, and {what}); nothing was "
                     f"changed (the default cache is {default_root()})")


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0


def list_models(root: str | Path | None = None) -> list[dict[str, Any]]:
    """One row per cached model: key, arch, fingerprint, pretrained, items and bytes per kind."""
    root = check_root(root if root is not None else default_root())
    rows = []
    for d in _model_dirs(root):
        try:
            meta = json.loads((d / "model.json").read_text())
        except (OSError, ValueError):
            meta = {}
        spec = meta.get("spec", {})
        row = {"key": d.name, "arch": spec.get("arch"), "pretrained": meta.get("pretrained"),
               "fingerprint": spec.get("fingerprint"), "precision": spec.get("precision"),
               "context_length": spec.get("context_length"), "bytes": sum(_size(p) for p in _owned(d)[0])}
        for kind in KINDS:
            shards = sorted((d / kind).glob(f"*{SHARD_SUFFIX}")) if (d / kind).is_dir() else []
            n = 0
            for s in shards:
                try:
                    n += int(read_header(s).get("n", 0))
                except (OSError, CorruptShardError, ValueError):
                    pass
            row[f"{kind}_items"], row[f"{kind}_shards"] = n, len(shards)
        rows.append(row)
    return rows


GENERATED = ("synthdense",)  # data sets hnbench generates into its cache folder, beside embeddings/


def generated_data(base: str | Path | None = None) -> list[dict[str, Any]]:
    """The data sets hnbench generated in its cache folder ``base`` (default :func:`hnbench.io.cache_dir`;
    ``<base>/synthdense/<fingerprint>``): name, path, images (the files of its splits' ``images/``) and bytes.
    They are not embeddings: ``hnbench cache clear`` leaves them."""
    folder = Path(base) if base is not None else cache_dir()
    rows = []
    for name in GENERATED:
        for d in sorted(p for p in (folder / name).glob("*") if p.is_dir() and not p.is_symlink()):
            images = sum(1 for p in d.glob("*/images/*") if _plain_file(p))
            rows.append({"name": f"{name}/{d.name}", "path": str(d), "images": images, "bytes": _size(d)})
    return rows


def disk_usage(root: str | Path | None = None) -> dict[str, int]:
    """Bytes hnbench wrote per model key, plus ``quarantine``, ``.fingerprints`` and ``total`` (the files
    :func:`clear` removes)."""
    out = {name: sum(_size(p) for p in files) for name, files in plan_clear(root).items()}
    out["total"] = sum(out.values())
    return out


def plan_clear(root: str | Path | None = None, *, models: Sequence[str] | None = None,
               kind: str | None = None) -> dict[str, list[Path]]:
    """What :func:`clear` removes, by entry (model key, ``quarantine``, ``.fingerprints``, an interrupted run's
    ``.run-*``): only files hnbench wrote (shards, ``model.json``, temporary files), never anything else."""
    root = check_root(root if root is not None else default_root())
    if kind is not None and kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    plan: dict[str, list[Path]] = {}
    for r in list_models(root):
        if not models or any(r["key"].startswith(m) or r["arch"] == m or (r["fingerprint"] or "").startswith(m)
                             for m in models):
            plan[r["key"]] = _owned(root / r["key"], kind)[0]
    if not models and kind is None:  # everything: quarantine, fingerprints, interrupted distributed runs
        for name, suffix in _FLAT.items():
            if (root / name).is_dir() and not (root / name).is_symlink():
                plan[name] = _shards_of(root / name, suffix)[0]
        for run in sorted(p for p in root.glob(".run-*") if p.is_dir() and not p.is_symlink()):
            plan[run.name] = [f for d in _model_dirs(run) for f in _owned(d)[0]] + \
                ([run / MARKER] if _plain_file(run / MARKER) else [])
    return {name: files for name, files in plan.items() if files}


def clear(root: str | Path | None = None, *, models: Sequence[str] | None = None,
          kind: str | None = None) -> int:
    """Delete cached embeddings (the files :func:`plan_clear` lists, and the folders they leave empty);
    returns bytes freed. A folder that is not hnbench's cache is refused (:func:`check_root`).

    ``models`` selects model keys, architectures or weight fingerprints (prefixes of keys and
    fingerprints work); without it everything goes, quarantine included. ``kind`` limits the
    deletion to ``image`` or ``text`` shards.
    """
    root = check_root(root if root is not None else default_root())
    freed, folders = 0, set[Path]()
    for files in plan_clear(root, models=models, kind=kind).values():
        for f in files:
            with contextlib.suppress(FileNotFoundError):
                size = f.stat().st_size
                f.unlink()
                freed += size
            folders.update(p for p in f.parents if root in p.parents)
    for folder in sorted(folders, key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(OSError):  # kept if anything else is in it
            folder.rmdir()
    return freed
