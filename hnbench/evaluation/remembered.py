"""Remembered model fingerprints: a run whose embeddings are all cached never builds the model.

The embedding cache key needs the weights fingerprint (sha256 of the state dict), which normally
means building the model. Instead, a record keyed by the load arguments (model, weights, config,
context length, precision, library versions) remembers the model's :class:`ModelInfo`, its image
preprocessing description and the files that define its weights, each with its
``(path, size, mtime_ns, inode)`` and a blake2b digest of its bytes:

- every file has the same stat → the record is used as is (nothing read);
- a stat differs → the file is hashed; same digest → the record is used (stat refreshed),
  else the model is built and the record rewritten.

The weights of a random-init model (no weights file) are a function of its ``init_seed`` (or, with
``init_seed=None``, of the CPU RNG state they are drawn from), so that seed (or the state's digest)
stands in for the file. Weights that cannot be pinned to local
files (an ``hf:``/``hf-hub:`` download, a tag whose file is not in the local HF cache, an adapter
directory) are never remembered: those models are always built.

:class:`RememberedEncoder` carries the remembered info and builds the real model on first use (a
cache miss); once built, it checks that the model matches the record. Records live in
``<embedding cache root>/.fingerprints/<load key>.json``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from hnbench._version import __version__, package_version
from hnbench.errors import CheckpointError
from hnbench.evaluation.cache import FINGERPRINTS, model_spec
from hnbench.io import atomic_write_bytes
from hnbench.models import load_model
from hnbench.models.base import Encoder, ModelInfo, TokenizedTexts
from hnbench.models.family import RANDOM_INIT, family_of
from hnbench.models.peft_loading import is_adapter_dir

__all__ = ["RememberedEncoder", "load_remembered"]

logger = logging.getLogger(__name__)

RECORD_DIR = FINGERPRINTS  # the cache root's folder of these records (declared in hnbench.evaluation.cache)
_RNG = RANDOM_INIT  # stands in for the weights file of a random-init model


def _digest_file(path: str) -> str:
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while chunk := f.read(1 << 23):
            h.update(chunk)
    return h.hexdigest()


def _stat(path: str) -> dict[str, int]:
    st = os.stat(path)
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino}


def weight_files(model: str, pretrained: str | None, model_config: str | Path | None) -> list[str] | None:
    """The local files that define the weights ``load_model`` would build (``[_RNG]`` for random init),
    or None when they cannot be pinned down locally: the family's adapter says
    (:meth:`~hnbench.models.family.ModelFamily.weight_files`); an adapter directory is never pinned."""
    if is_adapter_dir(pretrained):
        return None
    return family_of(model).weight_files(model, pretrained, model_config)


def _rng_digest() -> str:
    return hashlib.blake2b(torch.get_rng_state().numpy().tobytes(), digest_size=16).hexdigest()


def _load_key(model: str, pretrained: str | None, model_config: str | Path | None, context_length: int | None,
              precision: str, files: Sequence[str], init_seed: int | None) -> str:
    config = _digest_file(str(model_config)) if model_config else None
    family = family_of(model)
    # A random init depends on its seed (or, unseeded, the RNG state at build time): part of the key, not a file.
    random_init = list(files) == [_RNG]
    rng = (f"seed {init_seed}" if init_seed is not None else _rng_digest()) if random_init else None
    blob = {"model": model, "pretrained": pretrained, "model_config": config, "context_length": context_length,
            "precision": precision, "rng": rng, "files": list(files), "hnbench": __version__,
            **({"encoding_revision": family.encoding_revision} if family.encoding_revision != 1 else {}),
            **{p: package_version(p) for p in family.library_versions}}
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:24]


def _file_states(files: Sequence[str]) -> list[dict[str, Any]]:
    return [{"path": f, **_stat(f), "digest": _digest_file(f)} for f in files if f != _RNG]


def _still_valid(record: dict[str, Any]) -> tuple[bool, bool]:
    """(the record describes the files on disk now, its stats needed refreshing)."""
    refreshed = False
    for entry in record.get("files", []):
        try:
            now = _stat(entry["path"])
        except OSError:
            return False, False
        if all(entry.get(k) == v for k, v in now.items()):
            continue
        if _digest_file(entry["path"]) != entry.get("digest"):
            return False, False
        entry.update(now)  # same bytes, new stat (copied, touched): verified by content
        refreshed = True
    return True, refreshed


def _write(path: Path, record: dict[str, Any]) -> None:
    try:
        atomic_write_bytes(path, (json.dumps(record, indent=1) + "\n").encode())
    except OSError as e:  # an unwritable cache only costs the next run a model build
        logger.debug("cannot remember the model fingerprint at %s: %s", path, e)


@dataclass
class _Request:
    model: str
    pretrained: str | None
    model_config: str | Path | None
    context_length: int | None
    device: str
    precision: str
    init_seed: int | None
    trust_remote_code: bool = False

    def build(self, device: str | None = None) -> Encoder:
        return load_model(self.model, self.pretrained, model_config=self.model_config,
                          context_length=self.context_length, device=device or self.device,
                          precision=self.precision, init_seed=self.init_seed, trust_remote_code=self.trust_remote_code)


class RememberedEncoder:
    """An :class:`Encoder` whose info comes from a remembered record; the model is built on first use.

    ``transform_description`` is the cache's description of the image transform
    (:func:`hnbench.evaluation.cache.model_spec`), so the cache key is known without the transform.
    """

    def __init__(self, info: ModelInfo, transform_description: str, build: Callable[[str], Encoder],
                 device: str, on_mismatch: Callable[[], None], has_images: bool = True):
        self.info, self.has_images = info, has_images
        self.transform_description: str | None = transform_description
        self.device = torch.device(device)
        self._build, self._on_mismatch = build, on_mismatch
        self._encoder: Encoder | None = None

    @property
    def built(self) -> bool:
        return self._encoder is not None

    def real(self) -> Encoder:
        """The encoder itself, built (and checked against the record) on first use."""
        if self._encoder is None:
            enc = self._build(str(self.device))
            if model_spec(enc.info, enc.image_transform) != model_spec(self.info, None,
                                                                       preprocess=self.transform_description):
                self._on_mismatch()
                raise CheckpointError(f"the weights of {self.info.arch} changed while this run was starting; "
                                      "run again")
            self._encoder = enc
        return self._encoder

    @property
    def dynamic_padding(self) -> bool:
        return self.real().dynamic_padding

    @property
    def image_transform(self) -> Any:
        return self.real().image_transform

    def tokenize(self, texts: Sequence[str]) -> TokenizedTexts:
        return self.real().tokenize(texts)

    def encode_images(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.real().encode_images(pixels)

    def encode_texts(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.real().encode_texts(tokens)

    def to(self, device: str | torch.device) -> RememberedEncoder:
        self.device = torch.device(device)
        if self._encoder is not None:
            self._encoder.to(device)
        return self


def load_remembered(model: str, pretrained: str | None, *, root: str | Path, model_config: str | Path | None = None,
                    context_length: int | None = None, device: str = "cpu", precision: str = "fp32",
                    init_seed: int | None = 0, trust_remote_code: bool = False) -> Encoder:
    """``load_model`` that returns a :class:`RememberedEncoder` (no build) when a valid record exists
    under ``root``; otherwise builds the model and remembers it for the next run (a zoo name: resolved first, its
    weights fetched, the entry recorded with the encoder's info)."""
    from hnbench.models import zoo

    resolved = zoo.resolve(model, pretrained, download=True)
    if resolved.entry is not None:
        return zoo.mark(load_remembered(resolved.model, resolved.pretrained, root=root, model_config=model_config,
                                        context_length=context_length, device=device, precision=precision,
                                        init_seed=init_seed, trust_remote_code=trust_remote_code), resolved)
    req = _Request(model, pretrained, model_config, context_length, device, precision, init_seed, trust_remote_code)
    files = weight_files(model, pretrained, model_config)
    if files is None:
        return req.build()
    try:
        key = _load_key(model, pretrained, model_config, context_length, precision, files, init_seed)
    except OSError:  # an unreadable --model-config: load_model reports it in one line
        return req.build()
    path = Path(root) / RECORD_DIR / f"{key}.json"
    try:
        record = json.loads(path.read_text())
        valid, refreshed = _still_valid(record)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        record, valid, refreshed = None, False, False
    if record is not None and valid:
        if refreshed:
            _write(path, record)
        logger.debug("model %s: fingerprint %s remembered in %s", model, record["info"]["fingerprint"], path)
        return RememberedEncoder(ModelInfo(**record["info"]), record["preprocess"], req.build, device,
                                 on_mismatch=lambda: path.unlink(missing_ok=True),
                                 has_images=bool(record.get("has_images", True)))
    before = _file_states(files)  # stat and digest before the build: a change during it is not remembered
    encoder = req.build()
    if [_stat(e["path"]) for e in before] == [{k: e[k] for k in ("size", "mtime_ns", "inode")} for e in before]:
        _write(path, {"load": {"model": model, "pretrained": pretrained, "context_length": context_length,
                               "precision": precision}, "files": before, "info": encoder.info.to_dict(),
                      "preprocess": model_spec(encoder.info, encoder.image_transform)["preprocess"],
                      "has_images": encoder.has_images})
    return encoder
