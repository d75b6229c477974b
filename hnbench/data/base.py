"""The image–caption set every stage works on, and the image sources behind it.

An :class:`ImageTextDataset` holds ``n_images`` images with stable ids and ``n_captions`` captions,
each caption pointing at exactly one image (``caption_image``); an image may have several captions.
Images are opened lazily through an :class:`ImageSource`, which is picklable so DataLoader workers
can decode in parallel.
"""

from __future__ import annotations

import hashlib
import html
import io
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from PIL import Image

from hnbench.errors import DataError, ImageLoadError
from hnbench.io import Problems, cache_dir, content_digest, file_digests

logger = logging.getLogger(__name__)


FILE_DIGESTS = "file-digests"  # the digest memo's folder under the hnbench cache


class ImageSource:
    """A sequence of images addressed by position; ``open(i)`` returns an RGB PIL image."""

    ids: list[str]
    # content_bytes(i) reads one file per image (FileImages digests files through hnbench.io.file_digests)
    file_backed: ClassVar[bool] = False

    def __len__(self) -> int:
        return len(self.ids)

    def open(self, i: int) -> Image.Image:  # pragma: no cover - interface
        raise NotImplementedError

    def content_bytes(self, i: int) -> bytes:
        """The bytes that define image ``i``'s content (the embedding cache's key hashes them).

        Here: the decoded pixels (``"{mode}:{size}:"`` + raw bytes); sources that hold the encoded file say so.
        """
        im = self.open(i)
        return f"{im.mode}:{im.size}:".encode() + im.tobytes()

    def content_digests(self, positions: Sequence[int]) -> list[bytes | None]:
        """:func:`~hnbench.io.content_digest` of :meth:`content_bytes` for each position; None where the
        image cannot be read. The embedding cache's image keys and the dataset fingerprint are these: each
        position is read and hashed once per source object (remembered here; a source's content is fixed)."""
        memo: dict[int, bytes | None] = self.__dict__.setdefault("_digest_memo", {})
        for i in positions:
            if i in memo:
                continue
            try:
                memo[i] = content_digest(self.content_bytes(i))
            except Exception as e:  # unreadable: no digest; the encoder reports it properly
                logger.debug("no content digest for image %s: %s", self.describe(i), e)
                memo[i] = None
        return [memo[i] for i in positions]

    def describe(self, i: int) -> str:
        """Where image ``i`` comes from (a path or a dataset row), for error messages."""
        return self.ids[i]

    def subset(self, keep: Sequence[int]) -> ImageSource:  # pragma: no cover - interface
        raise NotImplementedError


def _decode(data: bytes | str, item_id: str, where: str) -> Image.Image:
    try:
        with Image.open(io.BytesIO(data) if isinstance(data, bytes) else data) as im:
            im.load()
            rgb: Image.Image = im.convert("RGB")
            return rgb
    except FileNotFoundError as e:
        raise ImageLoadError(item_id, where, "file not found") from e
    except OSError as e:  # PIL raises OSError / UnidentifiedImageError for corrupt data
        raise ImageLoadError(item_id, where, f"cannot decode image ({e})") from e


class FileImages(ImageSource):
    """Images stored as files on disk."""

    file_backed = True

    def __init__(self, paths: Sequence[str], ids: Sequence[str]):
        if len(paths) != len(ids):
            raise ValueError("paths and ids differ in length")
        self.paths, self.ids = list(paths), list(ids)

    def open(self, i: int) -> Image.Image:
        return _decode(self.paths[i], self.ids[i], self.paths[i])

    def content_bytes(self, i: int) -> bytes:
        """The image file's bytes (not its path or name: a renamed copy is the same content)."""
        with open(self.paths[i], "rb") as f:
            return f.read()

    def content_digests(self, positions: Sequence[int]) -> list[bytes | None]:
        """The files' digests through the stat-keyed memo under ``<hnbench cache>/file-digests``: a file
        unchanged since it was last hashed is not read again."""
        return file_digests([self.paths[i] for i in positions], cache_dir() / FILE_DIGESTS)

    def describe(self, i: int) -> str:
        return self.paths[i]

    def missing(self) -> list[int]:
        """Positions whose file does not exist (a cheap stat, no decoding)."""
        return [i for i, p in enumerate(self.paths) if not os.path.isfile(p)]

    def subset(self, keep: Sequence[int]) -> FileImages:
        return FileImages([self.paths[i] for i in keep], [self.ids[i] for i in keep])


class HFImages(ImageSource):
    """Images in a column of a Hugging Face ``datasets.Dataset`` (decoded lazily, per row)."""

    def __init__(self, dataset: Any, column: str, ids: Sequence[str], rows: Sequence[int] | None = None):
        from datasets import Image as HFImage  # heavy (pyarrow, fsspec): only HF-backed sets need it

        feature = dataset.features.get(column)
        if isinstance(feature, HFImage) and feature.decode:
            dataset = dataset.cast_column(column, HFImage(decode=False))
        self.dataset, self.column, self.ids = dataset, column, list(ids)
        self.rows = list(rows) if rows is not None else list(range(len(self.ids)))

    def _value(self, i: int) -> Any:
        return self.dataset[self.rows[i]][self.column]

    def open(self, i: int) -> Image.Image:
        value, where = self._value(i), self.describe(i)
        if isinstance(value, Image.Image):
            return value.convert("RGB")
        if isinstance(value, dict):
            if value.get("bytes"):
                return _decode(value["bytes"], self.ids[i], where)
            if value.get("path"):
                return _decode(value["path"], self.ids[i], value["path"])
        if isinstance(value, str):
            return _decode(value, self.ids[i], value)
        raise ImageLoadError(self.ids[i], where, f"unsupported image value of type {type(value).__name__}")

    def content_bytes(self, i: int) -> bytes:
        """The row's stored encoded bytes, else the bytes of the file it names, else its decoded pixels."""
        value = self._value(i)
        if isinstance(value, dict) and value.get("bytes"):
            return bytes(value["bytes"])
        path = value.get("path") if isinstance(value, dict) else value
        if isinstance(path, str):
            with open(path, "rb") as f:
                return f.read()
        return super().content_bytes(i)

    def describe(self, i: int) -> str:
        return f"row {self.rows[i]} of column {self.column!r}"

    def subset(self, keep: Sequence[int]) -> HFImages:
        return HFImages(self.dataset, self.column, [self.ids[i] for i in keep], [self.rows[i] for i in keep])


@dataclass
class ImageTextDataset:
    """An image–caption set: images with ids, captions with ids, and which image each caption describes."""

    name: str
    images: ImageSource
    captions: list[str]
    caption_ids: list[str]
    caption_image: np.ndarray
    protocol: str | None = None
    source: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    skipped: dict[str, list[str]] = field(default_factory=dict)
    # the side inputs it can make beyond images and captions, as its loader declares them (hnbench.sidecars:
    # SEGMENT_GEOMETRY, OUTLINES): asked instead of its name; a subset of it keeps them
    side_inputs: frozenset[str] = frozenset()
    # content_fingerprint(), computed once per loaded set (evaluate, the cache check and the record ask for it)
    _content: str | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.caption_image = np.asarray(self.caption_image, dtype=np.int64)
        if not (len(self.captions) == len(self.caption_ids) == len(self.caption_image)):
            raise DataError(f"{self.name}: captions, caption ids and caption→image map differ in length")
        if len(set(self.images.ids)) != len(self.images.ids):
            dup = _first_duplicate(self.images.ids)
            raise DataError(f"{self.name}: image id {dup!r} appears more than once")
        if len(set(self.caption_ids)) != len(self.caption_ids):
            dup = _first_duplicate(self.caption_ids)
            raise DataError(f"{self.name}: caption id {dup!r} appears more than once")
        if len(self.caption_image) and (self.caption_image.min() < 0 or self.caption_image.max() >= self.n_images):
            raise DataError(f"{self.name}: a caption points at an image index outside 0..{self.n_images - 1}")
        without = np.setdiff1d(np.arange(self.n_images), self.caption_image)
        if len(without):
            raise DataError(f"{self.name}: image {self.image_ids[without[0]]!r} has no caption "
                            f"({len(without)} images without captions)")

    @property
    def image_ids(self) -> list[str]:
        return self.images.ids

    @property
    def n_images(self) -> int:
        return len(self.images)

    @property
    def n_captions(self) -> int:
        return len(self.captions)

    def image_captions(self) -> list[np.ndarray]:
        """For each image, the indices of its captions."""
        order = np.argsort(self.caption_image, kind="stable")
        bounds = np.searchsorted(self.caption_image[order], np.arange(self.n_images + 1))
        return [order[bounds[i]:bounds[i + 1]] for i in range(self.n_images)]

    def fingerprint(self) -> str:
        """The data's identity: the first 16 hex digits of :meth:`content_fingerprint`.

        The content alone, not the name (a label: the same manifest under another file name is the same
        data) nor the protocol (what a protocol selects shows in the content: its images, its captions; the
        protocol is still a field of its own wherever results are matched or ranked)."""
        return self.content_fingerprint()[:16]

    def content_fingerprint(self) -> str:
        """sha256 over the content alone: image ids with the digest of each image's bytes
        (:meth:`ImageSource.content_digests`: a warm run reads no image, the memo's stat suffices), caption
        ids, texts and the caption→image map. The same files under another name give the same value."""
        if self._content is not None:
            return self._content
        h = hashlib.sha256()
        digests = self.images.content_digests(range(self.n_images))
        for image_id, digest in zip(self.images.ids, digests):
            h.update(f"\0{image_id}\0{digest.hex() if digest is not None else 'unreadable'}".encode())
        for cid, text, img in zip(self.caption_ids, self.captions, self.caption_image.tolist()):
            h.update(f"\1{cid}\0{img}\0{text}".encode())
        self._content = h.hexdigest()
        return self._content

    def drop_images(self, bad: Sequence[int], reason: str = "unreadable image") -> ImageTextDataset:
        """A copy without the given image positions and their captions; the dropped ids are recorded."""
        bad_set = set(int(i) for i in bad)
        if not bad_set:
            return self
        skipped = {k: list(v) for k, v in self.skipped.items()}
        skipped.setdefault(reason, []).extend(self.image_ids[i] for i in sorted(bad_set))
        return self._keep_images([i for i in range(self.n_images) if i not in bad_set], dict(self.meta), skipped)

    def sample_images(self, n: int, seed: int) -> ImageTextDataset:
        """A seeded subset of ``n`` images (in their order) with their captions (``--limit``), described in
        ``meta["limit"]``; all of them where there are no more than ``n``."""
        if n >= self.n_images:
            return self
        keep = np.sort(np.random.default_rng(seed).choice(self.n_images, size=n, replace=False)).tolist()
        meta = {**self.meta, "limit": {"n_images": n, "seed": seed, "of_images": self.n_images,
                                       "of_captions": self.n_captions}}
        return self._keep_images(keep, meta, {k: list(v) for k, v in self.skipped.items()})

    def _keep_images(self, keep: Sequence[int], meta: dict[str, Any], skipped: dict[str, list[str]]) -> ImageTextDataset:
        """A copy with only the image positions ``keep`` (in that order) and their captions."""
        remap = -np.ones(self.n_images, dtype=np.int64)
        remap[list(keep)] = np.arange(len(keep))
        cap_keep = [j for j in range(self.n_captions) if remap[int(self.caption_image[j])] >= 0]
        return ImageTextDataset(
            name=self.name, images=self.images.subset(keep),
            captions=[self.captions[j] for j in cap_keep], caption_ids=[self.caption_ids[j] for j in cap_keep],
            caption_image=remap[self.caption_image[cap_keep]], protocol=self.protocol, source=self.source,
            meta=meta, skipped=skipped, side_inputs=self.side_inputs,
        )

    def n_skipped(self) -> int:
        return sum(len(v) for v in self.skipped.values())

    def __repr__(self) -> str:
        proto = f", protocol={self.protocol!r}" if self.protocol else ""
        return f"ImageTextDataset({self.name!r}{proto}, n_images={self.n_images}, n_captions={self.n_captions})"


def _first_duplicate(items: Sequence[str]) -> str:
    seen: set[str] = set()
    for x in items:
        if x in seen:
            return x
        seen.add(x)
    return ""


def check_inside(base: str | os.PathLike[str], ref: str, where: str, trusted: str) -> None:
    """Refuse an image path ``ref`` (relative to ``base``, or absolute) that leaves ``base``: lexically, ``..``
    and absolute paths elsewhere leave it; symlinks on a path the file names are the folder owner's choice and
    are followed (a benchmark's search by file name is not: it never follows one out of the data root,
    :class:`hnbench.data.benchmarks.readers_suite.ImageFinder`).

    Manifests and every benchmark reader go through it: their files are often downloaded, and a path
    could read any file (``browse`` would then embed it in a page that gets shared)."""
    root = os.path.abspath(base)
    joined = os.path.normpath(os.path.join(root, ref))
    if os.path.commonpath([joined, root]) != root:
        raise DataError(f"{where}: image path {ref!r} points outside {base}; pass --allow-outside-paths if you "
                        f"trust {trusted}")


def is_blank_caption(text: str) -> bool:
    """``text`` is empty after the text tokenizer's own cleaning (open_clip's ``basic_clean`` and
    ``whitespace_clean``: ftfy, HTML entities unescaped twice, whitespace collapsed), so a model would see
    no word of it: ``""``, ``"&nbsp;"``, a lone byte-order mark, ``"\\u2028"``, ``"\\x00"``."""
    unescaped = html.unescape(html.unescape(text))
    if any(c.isalnum() for c in unescaped):  # the fast path: ftfy never removes a letter or digit
        return False
    import ftfy  # open_clip's dependency; only for captions without a letter or digit

    return not "".join(html.unescape(html.unescape(ftfy.fix_text(text))).split())


def _caption_problem(text: object) -> str | None:
    """Why ``text`` is not a usable caption, or None. A number is not text (a wrong column, most often)."""
    if isinstance(text, str):
        if not text.strip():
            return "empty caption"
        if is_blank_caption(text):
            return f"empty caption (no text once markup, control and invisible characters are removed: {text[:20]!r})"
        return None
    if text is None:
        return "empty caption"
    return f"non-text caption ({type(text).__name__} {str(text)[:40]!r}; captions must be strings)"


def build_dataset(
    name: str,
    records: Sequence[tuple[str, str, list[str]]],
    *,
    make_source: Any,
    skip_invalid: bool = False,
    protocol: str | None = None,
    source: str | None = None,
    meta: dict[str, Any] | None = None,
    keep_empty: bool = False,
    where: Sequence[str] | None = None,
    problems: Problems | None = None,
) -> ImageTextDataset:
    """Group ``(image_id, image_ref, captions)`` records into a dataset, validating as it goes.

    Records with the same image id are merged (their captions concatenated, in order). An empty or
    non-text (e.g. numeric) caption or a missing image file is an error naming the item, or — with
    ``skip_invalid`` — the item is dropped and counted once in ``dataset.skipped``; ``keep_empty``
    keeps empty captions (a benchmark protocol whose reference loader queries with them). Every such error
    is reported together (:class:`hnbench.io.Problems`; ``problems``: the caller's, holding what it found
    first), each at its record's ``where`` (``path:line``) where given. ``make_source(refs, ids)`` builds the
    :class:`ImageSource` for the surviving images.
    """
    problems = problems if problems is not None else Problems(name)
    order: list[str] = []
    refs: dict[str, str] = {}
    caps: dict[str, list[str]] = {}
    at: dict[str, str | None] = {}  # image id → where its first record is
    reported: set[str] = set()  # images with a caption problem already reported
    skipped: dict[str, list[str]] = {}
    for k, (image_id, ref, texts) in enumerate(records):
        here = where[k] if where is not None else None
        if image_id in refs and refs[image_id] != ref:
            problems.add(here, f"image id {image_id!r} refers to two files: {refs[image_id]!r} and {ref!r}")
            continue
        if image_id not in refs:
            order.append(image_id)
            refs[image_id], caps[image_id], at[image_id] = ref, [], here
        for text in texts:
            problem = _caption_problem(text)
            if problem and problem.startswith("empty caption") and keep_empty and isinstance(text, str):
                problem = None
            if problem:
                if skip_invalid:
                    skipped.setdefault(problem.split(" (")[0], []).append(image_id)
                    continue
                problems.add(here, f"{problem} for image {image_id!r}", droppable=True)
                reported.add(image_id)
                continue
            caps[image_id].append(text)
    counted = {i for ids in skipped.values() for i in ids}
    kept = []
    for image_id in order:
        if not caps[image_id]:
            if image_id in counted:  # its only captions were dropped and counted above: count it once
                continue
            if skip_invalid:
                skipped.setdefault("image without caption", []).append(image_id)
                continue
            if image_id not in reported:
                problems.add(at[image_id], f"image {image_id!r} has no caption", droppable=True)
            continue
        kept.append(image_id)
    src = make_source([refs[i] for i in kept], kept)
    if isinstance(src, FileImages):
        missing = src.missing()
        if missing and not skip_invalid:
            for i in missing:
                problems.add(at[src.ids[i]], f"image {src.ids[i]!r} not found at {src.paths[i]}", droppable=True)
        problems.check()  # before the missing files are counted as skipped: they were reported
        if missing:
            skipped.setdefault("missing image", []).extend(src.ids[i] for i in missing)
            gone = set(missing)
            kept = [x for k, x in enumerate(kept) if k not in gone]
            src = src.subset([k for k in range(len(src)) if k not in gone])
    problems.check()
    captions, caption_ids, caption_image = [], [], []
    for k, image_id in enumerate(kept):
        many = len(caps[image_id]) > 1
        for j, text in enumerate(caps[image_id]):
            captions.append(text)
            caption_ids.append(f"{image_id}#{j}" if many else image_id)
            caption_image.append(k)
    if not captions:
        raise DataError(f"{name}: no usable image–caption pairs")
    for reason, ids in skipped.items():
        logger.warning("%s: skipped %d items (%s), e.g. %s", name, len(ids), reason, ids[:3])
    return ImageTextDataset(name=name, images=src, captions=captions, caption_ids=caption_ids,
                            caption_image=np.asarray(caption_image), protocol=protocol, source=source,
                            meta=meta or {}, skipped=skipped)
