"""Batched encoding of images and captions into L2-normalised fp32 embeddings, through the cache.

Images are decoded and transformed in DataLoader workers (on the CPU only as many as the cores torch's
forward leaves free, usually none: see :func:`default_num_workers`); the model runs under ``inference_mode``
with autocast only on CUDA and only when asked. A decoding failure is raised naming the image, or —
with ``skip_bad`` — recorded and the image left out later by the caller.

With an :class:`~hnbench.evaluation.cache.EmbeddingCache`, items whose content is cached are read back and only
the rest go through the model, in the same batches a run without cache would use (so a cold cached
run and an uncached run give bit-identical vectors, unless the data repeats an image or a caption:
each content is encoded once); finished batches are written to the cache in shards as they
complete, so an interrupted run resumes where it stopped.

On CUDA, batches come from pinned memory and are copied with ``non_blocking``; a batch's features
are copied back only after the next batch is queued, so the GPU does not wait on the host.

Captions are tokenized in DataLoader workers too (a long caption takes ~2 ms in Python). For an
encoder that pads each batch only to its longest caption (``dynamic_padding = True``: the MiniLM
sentence encoder, HF CLIP) or whose family runs each batch trimmed to its longest caption
(``trims_text_batches``: open_clip's causal text towers, :func:`hnbench.models.openclip.trimmed_text_tower`),
captions are encoded longest first so that a batch holds captions of similar length, and put back in
their original order.

Batch size rule: on CPU keep the default 64 — ViT-B/32 throughput rises only slowly with the batch
(3.8 → 4.7 → 5.1 images/s at 16 / 64 / 128 on the 2-core dev box, benchmarks/README.md). On a GPU
use a large power of two, 256 to start and up while it fits (``bench_cache.py --device cuda
--batch-sizes ...`` measures it; not yet measured here). Texts use ``max(batch_size, 64)``.
The batch size changes results only by float rounding (~1e-7); the cache therefore resumes on
the batch boundaries a fresh run would use.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing.queues
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor
from tqdm.auto import tqdm

from hnbench.data.base import ImageSource
from hnbench.distributed import default_num_workers
from hnbench.errors import CheckpointError, ImageLoadError, WorkerError
from hnbench.evaluation.cache import KEY_DTYPE, EmbeddingCache, image_keys, text_keys
from hnbench.models.base import Encoder, ModelInfo, TokenizedTexts
from hnbench.models.family import family_of
from hnbench.models.scorers import PairScorer
from hnbench.search.pairwise import States

logger = logging.getLogger(__name__)


@dataclass
class ImageEmbeddings:
    vectors: np.ndarray  # (n, d) float32; rows of bad images are NaN
    bad: dict[int, str] = field(default_factory=dict)  # position -> reason
    seconds: float = 0.0
    n_encoded: int = 0  # images run through the model in this call
    n_cached: int = 0  # images read from the embedding cache


@dataclass
class TextEmbeddings:
    vectors: np.ndarray  # (n, d) float32
    lengths: np.ndarray  # (n,) tokens incl. start/end, before truncation
    context_length: int = 77
    seconds: float = 0.0
    n_encoded: int = 0
    n_cached: int = 0

    @property
    def n_truncated(self) -> int:
        return int((self.lengths > self.context_length).sum())


class _ImageItems(torch.utils.data.Dataset[tuple[int, "torch.Tensor | None", "str | None"]]):
    """Position → (position, pixels | None, error | None); never raises, so workers survive bad files."""

    def __init__(self, source: ImageSource, transform: Any, positions: Sequence[int]):
        self.source, self.transform, self.positions = source, transform, list(positions)

    def __len__(self) -> int:
        return len(self.positions)

    def __getitem__(self, k: int) -> tuple[int, torch.Tensor | None, str | None]:
        i = self.positions[k]
        try:
            return i, self.transform(self.source.open(i)), None
        except ImageLoadError as e:
            return i, None, e.reason
        except Exception as e:  # a transform failing on an odd image is the image's fault too
            return i, None, f"{type(e).__name__}: {e}"


class _TextBatches(torch.utils.data.Dataset[tuple[torch.Tensor, np.ndarray]]):
    """Batch number → (tokens, lengths) of that batch of captions, tokenized in a worker."""

    def __init__(self, tokenize: Any, texts: Sequence[str], batch_size: int):
        self.tokenize, self.texts, self.batch_size = tokenize, texts, batch_size

    def __len__(self) -> int:
        return -(-len(self.texts) // self.batch_size)

    def __getitem__(self, b: int) -> tuple[torch.Tensor, np.ndarray]:
        tok = self.tokenize(self.texts[b * self.batch_size:(b + 1) * self.batch_size])
        return tok.tokens, np.asarray(tok.lengths, dtype=np.int64)


def _collate(batch: list[tuple[int, torch.Tensor | None, str | None]],
             ) -> tuple[list[int], torch.Tensor | None, list[tuple[int, str]]]:
    good = [(i, x) for i, x, err in batch if err is None and x is not None]  # (an item has one or the other)
    bad = [(i, err) for i, _, err in batch if err is not None]
    pixels = torch.stack([x for _, x in good]) if good else None
    return [i for i, _ in good], pixels, bad


def _check_finite(encoder: Encoder, feats: np.ndarray, kind: str, first: int) -> None:
    """Embeddings that are NaN or infinite (weights holding NaN/inf, an fp16 overflow) are an error naming
    the model, raised on the first such batch, before anything is cached or scored."""
    finite = np.isfinite(feats).all(axis=1)
    if not finite.all():
        info = encoder.info
        weights = f", weights {info.pretrained}" if info.pretrained else ""
        raise CheckpointError(f"model {info.arch}{weights} gives non-finite (NaN/inf) {kind} embeddings "
                              f"({int((~finite).sum())} of the {len(feats)} in the batch from item {first}); "
                              f"its weights hold NaN/inf values or overflow at precision "
                              f"{info.extra.get('precision', 'fp32')}")


# A batch that takes longer than this to decode means a worker is stuck (the main process would
# otherwise wait forever); a dead worker is noticed at once, through SIGCHLD, well before.
WORKER_TIMEOUT_S = 300.0
_WORKER_EXIT = 75  # a worker whose result could not be sent (see _die_on_send_error)
_WORKER_FAILURES = ("DataLoader worker", "DataLoader timed out", "shared memory", "shm", "ancdata",
                    "unable to write to file", "unable to mmap", "unable to open shared memory")


def _die_on_send_error(e: BaseException, obj: object) -> None:
    """Worker side: a batch that cannot be put in shared memory (full /dev/shm, ``ulimit -f``) is lost
    by multiprocessing's feeder thread, and the main process would wait for it forever; exit instead,
    so that the main process sees the worker die."""
    print(f"hnbench worker: cannot send a batch to the main process ({type(e).__name__}: {e})", file=sys.stderr)
    os._exit(_WORKER_EXIT)


def _worker_init(_: int) -> None:
    # a private hook of CPython's multiprocessing.queues.Queue (not in typeshed); see _die_on_send_error
    multiprocessing.queues.Queue._on_queue_feeder_error = staticmethod(_die_on_send_error)  # type: ignore[attr-defined]


def _loader(dataset: torch.utils.data.Dataset[Any], num_workers: int, **kwargs: Any) -> torch.utils.data.DataLoader[Any]:
    """A DataLoader whose workers cannot hang the run: they exit on a failed send, and a batch times out."""
    extra: dict[str, Any] = {"timeout": WORKER_TIMEOUT_S, "worker_init_fn": _worker_init} if num_workers > 0 else {}
    return torch.utils.data.DataLoader(dataset, num_workers=num_workers, **extra, **kwargs)


@contextlib.contextmanager
def _worker_errors() -> Iterator[None]:
    """A dead or stuck DataLoader worker becomes one :class:`WorkerError` naming the cause and the fix."""
    try:
        yield
    except RuntimeError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        # "Caught X in DataLoader worker process N": the item's own error, re-raised by torch as is
        if str(e).startswith("Caught ") or not any(marker in str(e) for marker in _WORKER_FAILURES):
            raise
        raise WorkerError(f"a data-loading worker failed ({first.rstrip('.')}). The usual cause is shared memory "
                          f"(/dev/shm) running out, or a file-size limit (ulimit -f); rerun with --num-workers 0, "
                          f"or in Docker give the container more with --shm-size (e.g. --shm-size 2g)") from None


def _autocast(device: torch.device, amp: bool) -> contextlib.AbstractContextManager[Any]:
    """bf16/fp16 autocast on CUDA when asked; otherwise true fp32 (TF32 off for matmuls and convolutions)."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    if amp:
        return torch.autocast("cuda", dtype=torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16)
    return _strict_fp32()


@contextlib.contextmanager
def _strict_fp32() -> Iterator[None]:
    # cuDNN convolutions (the patch embedding) default to TF32 on Ampere+; "fp32" results must not.
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def _pads_to_longest(encoder: Encoder) -> bool:
    """Whether the encoder runs a batch only up to its longest caption: it pads to it (``dynamic_padding``), or its
    family trims padded batches (:attr:`~hnbench.models.family.ModelFamily.trims_text_batches`), not a fixed context."""
    return bool(encoder.dynamic_padding) or family_of(encoder.info.arch).trims_text_batches


def _open_cache(encoder: Encoder, cache: EmbeddingCache | bool | None, amp: bool) -> EmbeddingCache | None:
    if cache is True:
        return EmbeddingCache.for_encoder(encoder, amp=amp)
    return cache or None


def _first_of_each(todo: list[int], keys: np.ndarray, ok: np.ndarray) -> tuple[list[int], dict[int, int]]:
    """Positions to encode (the first of each content key) and {later duplicate: first}.

    Encoding a content once keeps a cold and a warm cached run bit-identical: the cache holds one
    vector per key, so a duplicate encoded in another batch would come back with that vector.
    """
    first: dict[bytes, int] = {}
    alias: dict[int, int] = {}
    keep = []
    for i in todo:
        if ok[i]:
            k = bytes(keys[i])
            if k in first:
                alias[i] = first[k]
                continue
            first[k] = i
        keep.append(i)
    return keep, alias


def encode_images(
    encoder: Encoder,
    source: ImageSource,
    *,
    positions: Sequence[int] | None = None,
    batch_size: int = 64,
    num_workers: int | None = None,
    skip_bad: bool = False,
    amp: bool = False,
    progress: bool = True,
    cache: EmbeddingCache | bool | None = None,
) -> ImageEmbeddings:
    """Encode images (all, or ``positions``) of ``source``; raises :class:`ImageLoadError` on a bad image
    unless ``skip_bad``. With ``cache``, images whose content is cached are read from it and only the
    rest are encoded (and written to it in shards as they finish); ``cache=True`` is the encoder's
    cache in the default directory."""
    start = time.perf_counter()
    cache = _open_cache(encoder, cache, amp)
    positions = list(range(len(source))) if positions is None else list(positions)
    out: np.ndarray | None = None
    todo, n_cached = positions, 0
    alias: dict[int, int] = {}
    keys = ok = None
    if cache is not None:
        keys, ok = np.zeros(len(source), dtype=KEY_DTYPE), np.zeros(len(source), dtype=bool)
        keys[positions], ok[positions] = image_keys(source, positions)
        pos = np.asarray(positions, dtype=np.int64)[ok[positions]]
        hit, vectors, _ = cache.images.lookup(keys[pos])
        out = np.full((len(source), cache.images.dim), np.nan, dtype=np.float32)
        out[pos[hit]] = vectors[hit]
        cached = set(pos[hit].tolist())
        todo, n_cached = [i for i in positions if i not in cached], len(cached)
        todo, alias = _first_of_each(todo, keys, ok)
    bad: dict[int, str] = {}
    n_encoded = 0
    if todo:
        workers = default_num_workers(encoder.device) if num_workers is None else num_workers
        workers = min(workers, max(0, len(todo) // max(1, batch_size)))  # no pool for one batch
        loader = _loader(_ImageItems(source, encoder.image_transform, todo), workers, batch_size=batch_size,
                         shuffle=False, collate_fn=_collate, pin_memory=encoder.device.type == "cuda",
                         persistent_workers=False)
        writer = cache.image_writer() if cache is not None else None
        pending: tuple[list[int], torch.Tensor] | None = None

        def store(idx: list[int], feats_dev: torch.Tensor) -> None:
            nonlocal out, n_encoded
            feats = feats_dev.float().cpu().numpy()  # on CUDA this waits for that batch only
            _check_finite(encoder, feats, "image", idx[0])
            if out is None:
                out = np.full((len(source), feats.shape[1]), np.nan, dtype=np.float32)
            out[idx] = feats
            n_encoded += len(idx)
            if writer is not None and keys is not None and ok is not None:
                keep = ok[idx]
                writer.add(keys[idx][keep], feats[keep])

        with writer if writer is not None else contextlib.nullcontext(), _worker_errors(), tqdm(total=len(positions), initial=n_cached, desc="encode images",
                                            unit="img", disable=not progress) as bar:
            try:
                for idx, pixels, errors in loader:
                    for i, reason in errors:
                        if not skip_bad:
                            raise ImageLoadError(source.ids[i], source.describe(i), reason)
                        bad[i] = reason
                    if pixels is not None:
                        with _autocast(encoder.device, amp):
                            feats_dev = encoder.encode_images(pixels)
                        # Collect the previous batch only now: on CUDA its copy back overlaps this one.
                        if pending is not None:
                            done, pending = pending, None
                            store(*done)
                        pending = (idx, feats_dev)
                    bar.update(len(idx) + len(errors))
            finally:  # also on a failure: a batch already encoded is kept (and cached)
                if pending is not None:
                    store(*pending)
            for i, first in alias.items():  # same content as an earlier image: same vector
                if first in bad:
                    bad[i] = bad[first]
                elif out is not None:
                    out[i] = out[first]
            bar.update(len(alias))
    if out is None:
        out = np.full((len(source), encoder.info.embed_dim), np.nan, dtype=np.float32)
    if bad:
        logger.warning("%d unreadable images skipped, e.g. %s: %s", len(bad), source.ids[next(iter(bad))],
                       next(iter(bad.values())))
    return ImageEmbeddings(out, bad, time.perf_counter() - start, n_encoded=n_encoded, n_cached=n_cached)


def encode_texts(
    encoder: Encoder,
    texts: Sequence[str],
    *,
    batch_size: int = 256,
    amp: bool = False,
    progress: bool = True,
    cache: EmbeddingCache | bool | None = None,
    num_workers: int | None = None,
) -> TextEmbeddings:
    """Tokenize (truncating as the model's tokenizer does) and encode captions; with ``cache``, only the
    captions not cached are tokenized and encoded (their token lengths are cached with them).
    Batches are tokenized in ``num_workers`` DataLoader workers (long captions tokenize at ~2 ms
    each in Python, which would otherwise starve a GPU)."""
    start = time.perf_counter()
    cache = _open_cache(encoder, cache, amp)
    n, dim = len(texts), encoder.info.embed_dim
    vectors = np.full((n, dim), np.nan, dtype=np.float32)
    lengths = np.zeros(n, dtype=np.int64)
    todo = np.arange(n)
    keys = None
    if cache is not None:
        keys = text_keys(texts)
        hit, vectors, lengths = cache.texts.lookup(keys)
        missing = np.flatnonzero(~hit)
        # One encoding per distinct caption (see _first_of_each); duplicates copied afterwards.
        _, first, inverse = np.unique(keys[missing], return_index=True, return_inverse=True)
        todo = missing[np.sort(first)]
    if todo.size:
        if _pads_to_longest(encoder):
            # Longest first, as sentence-transformers does: each batch pads only to its own longest
            # caption (1.65x faster on DOCCI's long captions); rows below put vectors back in order.
            todo = todo[np.argsort([-len(texts[j]) for j in todo.tolist()], kind="stable")]
        todo_texts = [texts[j] for j in todo.tolist()] if todo.size < n or _pads_to_longest(encoder) else texts
        n_batches = -(-todo.size // batch_size)
        workers = default_num_workers(encoder.device) if num_workers is None else num_workers
        loader = _loader(_TextBatches(encoder.tokenize, todo_texts, batch_size), min(workers, n_batches - 1),
                         batch_size=None, shuffle=False, pin_memory=encoder.device.type == "cuda")
        writer = cache.text_writer() if cache is not None else None
        with writer if writer is not None else contextlib.nullcontext(), _worker_errors():
            for b, (tokens, batch_lengths) in enumerate(tqdm(loader, desc="encode texts", unit="batch",
                                                              disable=not progress)):
                with _autocast(encoder.device, amp):
                    feats = encoder.encode_texts(tokens).float().cpu().numpy()
                rows, batch_lengths = todo[b * batch_size:(b + 1) * batch_size], np.asarray(batch_lengths)
                _check_finite(encoder, feats, "text", int(rows[0]))
                vectors[rows], lengths[rows] = feats, batch_lengths
                if writer is not None and keys is not None:
                    writer.add(keys[rows], feats, batch_lengths)
    n_cached = n - todo.size
    if cache is not None and missing.size:
        source_rows = missing[first][inverse]
        vectors[missing], lengths[missing] = vectors[source_rows], lengths[source_rows]
        n_cached = n - missing.size
    return TextEmbeddings(vectors, lengths, encoder.info.context_length, time.perf_counter() - start,
                          n_encoded=int(todo.size), n_cached=int(n_cached))


# -- a pairwise scorer's states, encoded as embeddings are (the batching, workers, progress and errors above) -----
class _StateEncoder:
    """``encoder`` whose ``encode_images`` / ``encode_texts`` compute a scorer's states (kept here, on the CPU) and
    return each row's index into them, so whatever order and batches :mod:`hnbench.evaluation.encode` uses, the vectors it
    returns say which state row is which item."""

    def __init__(self, encoder: Encoder, scorer: PairScorer):
        self.inner, self.scorer = encoder, scorer
        self.info: ModelInfo = encoder.info
        self.device: torch.device = encoder.device
        self.images: list[States] = []
        self.texts: list[States] = []
        self._n = {"images": 0, "texts": 0}

    @property
    def dynamic_padding(self) -> bool:
        return bool(self.inner.dynamic_padding)

    @property
    def transform_description(self) -> str | None:
        return self.inner.transform_description

    @property
    def has_images(self) -> bool:
        return bool(self.inner.has_images)

    @property
    def image_transform(self) -> Callable[[Any], Tensor]:
        return self.inner.image_transform

    def tokenize(self, texts: Sequence[str]) -> TokenizedTexts:
        return self.inner.tokenize(texts)

    def _keep(self, kind: str, state: States) -> Tensor:
        rows = {int(v.shape[0]) for v in state.values()}
        if len(rows) != 1:
            raise ValueError(f"{self.scorer.name}: a {kind[:-1]} state's tensors are not batch-first alike: {rows}")
        n = rows.pop()
        getattr(self, kind).append({k: v.detach().float().cpu() for k, v in state.items()})
        start, self._n[kind] = self._n[kind], self._n[kind] + n
        return torch.arange(start, start + n, dtype=torch.float32)[:, None]

    def encode_images(self, pixels: Tensor) -> Tensor:
        return self._keep("images", self.scorer.image_state(pixels))

    def encode_texts(self, tokens: Tensor) -> Tensor:
        return self._keep("texts", self.scorer.text_state(tokens))

    def to(self, device: str | torch.device) -> _StateEncoder:
        self.inner.to(device)
        self.device = torch.device(device)
        return self

    def states(self, kind: str, rows: np.ndarray) -> States:
        """The states of the items whose returned indices are ``rows`` (in that order)."""
        parts: list[States] = getattr(self, kind)
        if not parts:
            return {}
        order = torch.from_numpy(rows.astype(np.int64))
        return {k: torch.cat([p[k] for p in parts])[order] for k in parts[0]}


def encode_states(encoder: Encoder, scorer: PairScorer, *, images: Any = None, texts: Sequence[str] | None = None,
                  skip_bad: bool = False, text_batch_size: int | None = None, **options: Any) -> tuple[States, Any]:
    """The states of ``images`` (an :class:`~hnbench.data.base.ImageSource`) or of the captions ``texts`` (one of
    the two), with what :func:`hnbench.evaluation.encode.encode_images` / ``encode_texts`` return, which encode them (their
    batches, workers and errors; never cached): (states, ``ImageEmbeddings`` | ``TextEmbeddings``). The states of
    unreadable images (``skip_bad``) are left out, as the evaluation leaves out their rows. ``options``:
    ``batch_size``, ``num_workers``, ``amp``, ``progress``."""
    proxy = _StateEncoder(encoder, scorer)
    if images is not None:
        img = encode_images(proxy, images, skip_bad=skip_bad, cache=None, **options)
        keep = np.array([i for i in range(len(images)) if i not in img.bad], dtype=np.int64)
        return (proxy.states("images", img.vectors[keep, 0]) if keep.size else {}), img
    batch_size = text_batch_size or max(int(options.pop("batch_size", 64)), 64)
    options.pop("batch_size", None)
    txt = encode_texts(proxy, list(texts or []), batch_size=batch_size, cache=None, **options)
    return proxy.states("texts", txt.vectors[:, 0]), txt
