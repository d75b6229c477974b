"""Option-choice item sets (``--task choice``): per item one or two images and K texts, scored by a declared rule.

A :class:`ChoiceSet` holds each distinct image and text once (an item points at them by index, so identical
captions get one embedding and score identically, and an image shared by items is encoded once), the texts' and
images' *roles* (``caption``, ``negative_caption``; ``image_0``, ``image_1``: how the release names them), each
item's metadata fields (subset, relation, attribute pair, tag) and the :class:`~hnbench.metrics.choice.Scoring` of
its protocol.

The benchmarks (SugarCrepe, SugarCrepe++, Winoground, ARO) are :class:`~hnbench.data.benchmarks.BenchmarkSpec`\\ s
whose protocols are :class:`ChoiceProtocol`\\ s (``task = "choice"``): a reader (``"module:function"``) fills a
:class:`ChoiceBuilder` from the release under ``--data-root``, :func:`load_choice_benchmark` checks the loaded
item counts against the published ones per file (``--allow-count-mismatch`` as for the other benchmarks) and
records each annotation file's sha256 against the one pinned in the spec. ``synthdense``'s compositional
protocols (:mod:`hnbench.data.synthdense_choice`) are generated with known ground truth, offline.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from hnbench.data.base import FileImages, ImageSource, check_inside, is_blank_caption
from hnbench.data.benchmarks.protocol import LoadContext, Protocol
from hnbench.errors import ConfigError, DataError
from hnbench.io import Problems, content_digest, loads_json, read_text_utf8, sha256_file
from hnbench.metrics.choice import Scoring

logger = logging.getLogger(__name__)

__all__ = ["ChoiceBuilder", "ChoiceProtocol", "ChoiceSet", "CroppedImages", "JoinedImages", "load_choice_benchmark",
           "read_json_file"]



@dataclass(frozen=True)
class ChoiceProtocol(Protocol):
    """A protocol of an option-choice benchmark: ``reader`` is a ``"module:function"`` reading the release into a
    :class:`ChoiceBuilder`; ``scoring`` its rule; ``counts`` the published item count of each part it reads (a
    file, a subset: ``{}`` when unpublished); ``breakdown`` the item fields whose groups are reported one by one;
    ``crop``: the images are cropped to each item's box first (ARO's VG-*); ``official``: the release's own rule
    (False: a variant to compare with another harness's published numbers, MTEB's: left out of the
    ``compositional`` suite, :func:`hnbench.evaluation.suites.official_choice`)."""

    scoring: Scoring = field(default_factory=lambda: Scoring("option", ("positive", "negative"), "positive"))
    counts: Mapping[str, int] = field(default_factory=dict)
    breakdown: tuple[str, ...] = ()
    crop: bool = False
    official: bool = True

    @property
    def n_items(self) -> int | None:
        """The published number of items (None when a part has none)."""
        return sum(self.counts.values()) if self.counts else None


def choice_protocol(name: str, reader: str, scoring: Scoring, counts: Mapping[str, int], description: str,
                    **fields: Any) -> ChoiceProtocol:
    """A :class:`ChoiceProtocol` (no image / caption counts, no protocol family: its counts are items)."""
    return ChoiceProtocol(name, (), None, None, reader, "raw", description, scoring=scoring, counts=dict(counts),
                          **fields)


# --- image sources ------------------------------------------------------------------------------------
class CroppedImages(FileImages):
    """Image files, each cropped to its box ``(x, y, w, h)`` first (None: whole): ``Image.open(path).convert("RGB")
    .crop((x, y, x + w, y + h))``, as ARO's VG loaders do. The box is part of the content (the embedding cache's
    key): two crops of one file are two images."""

    def __init__(self, paths: Sequence[str], ids: Sequence[str], boxes: Sequence[tuple[float, ...] | None]):
        super().__init__(paths, ids)
        if len(boxes) != len(self.paths):
            raise ValueError("paths and boxes differ in length")
        self.boxes = list(boxes)

    def open(self, i: int) -> Image.Image:
        im = super().open(i)
        box = self.boxes[i]
        if box is None:
            return im
        x, y, w, h = box
        return im.crop((x, y, x + w, y + h))

    def _box_bytes(self, i: int) -> bytes:
        box = self.boxes[i]
        return b"" if box is None else ("\0crop:" + ",".join(repr(v) for v in box)).encode()

    def content_bytes(self, i: int) -> bytes:
        return super().content_bytes(i) + self._box_bytes(i)

    def content_digests(self, positions: Sequence[int]) -> list[bytes | None]:
        """The file's digest (through the file-digest memo) combined with the box."""
        files = super().content_digests(positions)
        return [None if d is None else d if self.boxes[i] is None else content_digest(d + self._box_bytes(i))
                for i, d in zip(positions, files)]

    def subset(self, keep: Sequence[int]) -> CroppedImages:
        return CroppedImages([self.paths[i] for i in keep], [self.ids[i] for i in keep], [self.boxes[i] for i in keep])


class JoinedImages(ImageSource):
    """Several image sources end to end (Winoground's ``image_0`` and ``image_1`` columns)."""

    def __init__(self, parts: Sequence[tuple[ImageSource, int]]):
        self.parts = list(parts)  # (source, position in it) of each image
        self.ids = [src.ids[i] for src, i in self.parts]

    def open(self, i: int) -> Image.Image:
        src, j = self.parts[i]
        return src.open(j)

    def content_bytes(self, i: int) -> bytes:
        src, j = self.parts[i]
        return src.content_bytes(j)

    def content_digests(self, positions: Sequence[int]) -> list[bytes | None]:
        """Each part's digests, asked of its source in one call per source."""
        out: dict[int, bytes | None] = {}
        by_source: dict[int, list[int]] = {}
        for i in positions:
            by_source.setdefault(id(self.parts[i][0]), []).append(i)
        for members in by_source.values():
            src = self.parts[members[0]][0]
            out.update(zip(members, src.content_digests([self.parts[i][1] for i in members])))
        return [out[i] for i in positions]

    def describe(self, i: int) -> str:
        src, j = self.parts[i]
        return src.describe(j)

    def subset(self, keep: Sequence[int]) -> JoinedImages:
        return JoinedImages([self.parts[i] for i in keep])


# --- the item set ---------------------------------------------------------------------------------------
@dataclass
class ChoiceSet:
    """Items of one or two images and K texts (see the module docstring); each image and text stored once."""

    name: str
    images: ImageSource
    texts: list[str]
    image_roles: tuple[str, ...]
    text_roles: tuple[str, ...]
    item_ids: list[str]
    item_images: np.ndarray  # (n_items, len(image_roles)) int64 indices into images
    item_texts: np.ndarray  # (n_items, len(text_roles)) int64 indices into texts
    fields: dict[str, list[str]]  # per-item metadata, one list per field
    scoring: Scoring
    protocol: str | None = None
    source: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    skipped: dict[str, list[str]] = field(default_factory=dict)
    breakdown: tuple[str, ...] = ()
    _content: str | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.item_images = np.asarray(self.item_images, dtype=np.int64).reshape(len(self.item_ids), -1)
        self.item_texts = np.asarray(self.item_texts, dtype=np.int64).reshape(len(self.item_ids), -1)
        n = len(self.item_ids)
        if not n:
            raise DataError(f"{self.name}: no items")
        if self.item_images.shape[1] != len(self.image_roles) or self.item_texts.shape[1] != len(self.text_roles):
            raise DataError(f"{self.name}: items must have {len(self.image_roles)} images and {len(self.text_roles)} "
                            "texts each")
        if len(set(self.item_ids)) != n:
            raise DataError(f"{self.name}: item id {_first_duplicate(self.item_ids)!r} appears more than once")
        for what, idx, size in (("image", self.item_images, len(self.images)), ("text", self.item_texts,
                                                                                 len(self.texts))):
            if idx.min() < 0 or idx.max() >= size:
                raise DataError(f"{self.name}: an item points at a {what} outside 0..{size - 1}")
        for name, values in self.fields.items():
            if len(values) != n:
                raise DataError(f"{self.name}: field {name!r} has {len(values)} values for {n} items")
        agg = self.scoring.aggregation
        if agg.field is not None and agg.field not in self.fields:
            raise DataError(f"{self.name}: the protocol aggregates by {agg.field!r}, which the items lack")
        if self.scoring.rule == "option":
            missing = [r for r in self.scoring.options if r not in self.text_roles]
            if missing:
                raise DataError(f"{self.name}: the protocol compares {missing[0]!r}, not one of {self.text_roles}")

    @property
    def n_items(self) -> int:
        return len(self.item_ids)

    @property
    def n_images(self) -> int:
        return len(self.images)

    @property
    def n_texts(self) -> int:
        return len(self.texts)

    @property
    def image_ids(self) -> list[str]:
        return self.images.ids

    @property
    def text_pairs(self) -> list[tuple[int, int]]:
        """The text roles ``(j, k), j < k`` whose text–text scores the rule reads (SugarCrepe++'s TOT); else none."""
        k = len(self.text_roles)
        return [(a, b) for a in range(k) for b in range(a + 1, k)] if self.scoring.rule == "sugarcrepe-pp" else []

    def fingerprint(self) -> str:
        """16 hex digits of sha256 over the content alone: image ids and digests, texts, each item's images,
        texts and fields (not the name, not the scoring: the protocol is recorded beside it)."""
        if self._content is None:
            h = hashlib.sha256()
            for image_id, digest in zip(self.images.ids, self.images.content_digests(range(self.n_images))):
                h.update(f"\0{image_id}\0{digest.hex() if digest is not None else 'unreadable'}".encode())
            for t in self.texts:
                h.update(f"\1{t}".encode())
            names = sorted(self.fields)
            for k, item_id in enumerate(self.item_ids):
                h.update(f"\2{item_id}\0{self.item_images[k].tolist()}\0{self.item_texts[k].tolist()}".encode())
                h.update("\0".join(f"{n}={self.fields[n][k]}" for n in names).encode())
            self._content = h.hexdigest()
        return self._content[:16]

    def drop_images(self, bad: Sequence[int], reason: str = "unreadable image") -> ChoiceSet:
        """A copy without the items showing one of the image positions ``bad`` (their ids recorded under ``reason``);
        the images and texts no item uses any more are dropped."""
        gone = set(int(i) for i in bad)
        keep = [k for k in range(self.n_items) if not gone & set(self.item_images[k].tolist())]
        if not keep:
            raise DataError(f"{self.name}: no item left once the unreadable images are dropped")
        skipped = {k: list(v) for k, v in self.skipped.items()}
        skipped.setdefault(reason, []).extend(self.item_ids[k] for k in range(self.n_items) if k not in set(keep))
        images = sorted(set(self.item_images[keep].ravel().tolist()))
        texts = sorted(set(self.item_texts[keep].ravel().tolist()))
        imap = {old: new for new, old in enumerate(images)}
        tmap = {old: new for new, old in enumerate(texts)}
        return ChoiceSet(
            self.name, self.images.subset(images), [self.texts[t] for t in texts], self.image_roles, self.text_roles,
            [self.item_ids[k] for k in keep],
            np.vectorize(imap.__getitem__, otypes=[np.int64])(self.item_images[keep]),
            np.vectorize(tmap.__getitem__, otypes=[np.int64])(self.item_texts[keep]),
            {n: [v[k] for k in keep] for n, v in self.fields.items()}, self.scoring, self.protocol, self.source,
            dict(self.meta), skipped, self.breakdown)

    def parts(self) -> dict[str, int]:
        """Items per part (the ``part`` field: a file or subset), in first-seen order."""
        out: dict[str, int] = {}
        for p in self.fields.get("part", []):
            out[p] = out.get(p, 0) + 1
        return out

    def __repr__(self) -> str:
        return (f"ChoiceSet({self.name!r}, protocol={self.protocol!r}, n_items={self.n_items}, "
                f"n_images={self.n_images}, n_texts={self.n_texts})")


def _first_duplicate(items: Sequence[str]) -> str:
    seen: set[str] = set()
    for x in items:
        if x in seen:
            return x
        seen.add(x)
    return ""


# --- building one from a release --------------------------------------------------------------------------
@dataclass(frozen=True)
class ImageRef:
    """An image file (absolute path), optionally cropped to ``box`` = (x, y, w, h); ``id``: how results name it."""

    path: str
    id: str
    box: tuple[float, ...] | None = None


class ChoiceBuilder:
    """Collects items while a reader walks a release: each distinct image (by path and box) and text once, bad
    items reported together (:class:`hnbench.io.Problems`, one line) or, with ``skip_invalid``, dropped and counted;
    each file read hashed and recorded (``meta["files"]``)."""

    def __init__(self, name: str, image_roles: Sequence[str], text_roles: Sequence[str], ctx: LoadContext,
                 *, source: ImageSource | None = None):
        self.name, self.ctx = name, ctx
        self.image_roles, self.text_roles = tuple(image_roles), tuple(text_roles)
        self.problems = Problems(name)
        self.source = source  # a fixed image source (items then give positions in it, not ImageRefs)
        self._images: dict[tuple[str, tuple[float, ...] | None], int] = {}
        self._refs: list[ImageRef] = []
        self._texts: dict[str, int] = {}
        self.item_ids: list[str] = []
        self.item_images: list[list[int]] = []
        self.item_texts: list[list[int]] = []
        self.fields: dict[str, list[str]] = {}
        self.skipped: dict[str, list[str]] = {}
        self.files: list[dict[str, Any]] = []
        self.meta: dict[str, Any] = {}

    # problems
    def invalid(self, where: str, reason: str, kind: str) -> None:
        """A bad item: reported (``--skip-invalid`` would drop it), or with ``skip_invalid`` dropped and counted."""
        if self.ctx.skip_invalid:
            self.skipped.setdefault(kind, []).append(where)
        else:
            self.problems.add(where, reason, droppable=True)

    def refuse(self, where: str, reason: str) -> None:
        """A problem ``--skip-invalid`` does not excuse (the release is not the benchmark)."""
        self.problems.add(where, reason)

    # files
    def file(self, path: Path, published: str | None, where: str, *, strict: bool = False) -> str:
        """Hash ``path`` and record it against its ``published`` sha256 (``where``: the source pinned): a
        difference warns (``strict``: refuses, one line); unpinned (None) is recorded as such."""
        digest = sha256_file(path)
        verified = None if published is None else digest == published
        if published is not None and not verified:
            if strict:
                raise DataError(f"{self.name}: {path} has sha256 {digest[:16]}…, not the pinned {published[:16]}… "
                                f"({where}); another copy is another benchmark")
            logger.warning("%s: sha256 %s of %s differs from the published %s (%s); results may not be comparable",
                           self.name, digest[:12], path, published[:12], where)
        elif published is None and strict:
            logger.warning("%s: %s has no pinned sha256 yet (%s); its sha256 %s is recorded with the result",
                           self.name, path.name, where, digest[:12])
        self.files.append({"file": path.name, "path": str(path), "sha256": digest, "expected_sha256": published,
                           "verified": verified, "source": where})
        return digest

    # items
    def image(self, ref: ImageRef) -> int:
        key = (ref.path, ref.box)
        if key not in self._images:
            self._images[key] = len(self._refs)
            self._refs.append(ref)
        return self._images[key]

    def text(self, t: str) -> int:
        if t not in self._texts:
            self._texts[t] = len(self._texts)
        return self._texts[t]

    def add(self, item_id: str, images: Sequence[ImageRef | int], texts: Sequence[str], part: str,
            fields: Mapping[str, str] | None = None) -> None:
        """One item: its images (refs, or positions in the fixed source), texts in role order, part and fields."""
        if len(images) != len(self.image_roles) or len(texts) != len(self.text_roles):
            raise ValueError(f"{item_id}: {len(images)} images / {len(texts)} texts for roles "
                             f"{self.image_roles} / {self.text_roles}")
        values = {"part": part, **(fields or {})}
        if self.item_ids and set(values) != set(self.fields):
            raise ValueError(f"{item_id}: fields {sorted(values)} differ from the items' {sorted(self.fields)}")
        self.item_ids.append(item_id)
        self.item_images.append([im if isinstance(im, int) else self.image(im) for im in images])
        self.item_texts.append([self.text(t) for t in texts])
        for k, v in values.items():
            self.fields.setdefault(k, []).append(str(v))

    def check_text(self, where: str, record: Mapping[str, Any], key: str) -> str | None:
        """``record[key]`` if it is a usable text; else the item is invalid (None)."""
        value = record.get(key)
        if not isinstance(value, str):
            self.invalid(where, f"no {key!r} text" if value is None else f"{key!r} is {type(value).__name__}, "
                         "not text", "missing field")
            return None
        if is_blank_caption(value):
            self.invalid(where, f"empty {key!r}", "empty text")
            return None
        return value

    def build(self, protocol: ChoiceProtocol, root: Path) -> ChoiceSet:
        """The set: missing image files reported (or dropped and counted), every problem raised as one line."""
        if self.source is not None:
            source: ImageSource = self.source
        else:
            missing = {i for i, ref in enumerate(self._refs) if not os.path.isfile(ref.path)}
            if missing:
                rows = [k for k, ims in enumerate(self.item_images) if missing & set(ims)]
                for k in rows:
                    ref = self._refs[next(i for i in self.item_images[k] if i in missing)]
                    self.invalid(self.item_ids[k], f"image {ref.id!r} not found at {ref.path}", "missing image")
                self._drop(set(rows))
            source = CroppedImages([r.path for r in self._refs], [r.id for r in self._refs], [r.box for r in self._refs])
        self.problems.check()
        if not self.item_ids:
            raise DataError(f"{self.name}/{protocol.name}: no usable items under {root}")
        for kind, ids in self.skipped.items():
            logger.warning("%s: skipped %d items (%s), e.g. %s", self.name, len(ids), kind, ids[:2])
        used_images = sorted({i for ims in self.item_images for i in ims})
        if len(used_images) < len(source):  # images only dropped items showed
            keep = {old: new for new, old in enumerate(used_images)}
            source = source.subset(used_images)
            self.item_images = [[keep[i] for i in ims] for ims in self.item_images]
        texts = list(self._texts)
        return ChoiceSet(self.name, source, texts, self.image_roles, self.text_roles, self.item_ids,
                         np.asarray(self.item_images), np.asarray(self.item_texts), self.fields, protocol.scoring,
                         protocol.name, str(root.resolve()), {**self.meta, "files": self.files},
                         {k: list(v) for k, v in self.skipped.items()}, protocol.breakdown)

    def _drop(self, rows: set[int]) -> None:
        keep = [k for k in range(len(self.item_ids)) if k not in rows]
        self.item_ids = [self.item_ids[k] for k in keep]
        self.item_images = [self.item_images[k] for k in keep]
        self.item_texts = [self.item_texts[k] for k in keep]
        self.fields = {n: [v[k] for k in keep] for n, v in self.fields.items()}


def read_json_file(path: Path, name: str, what: str) -> Any:
    """A release's JSON file (UTF-8, BOM allowed); missing or unreadable: one line naming it and ``what`` it is."""
    if not path.is_file():
        raise DataError(f"{name}: {path} not found ({what})")
    try:
        return loads_json(read_text_utf8(path))
    except json.JSONDecodeError as e:
        raise DataError(f"{name}: {path} is not readable JSON ({e})") from None


def image_ref(root: Path, folder: Path, name: str, where: str, ctx: LoadContext,
              box: tuple[float, ...] | None = None) -> ImageRef:
    """The image ``name`` an annotation gives, under ``folder``; a name that leaves the data root is refused unless
    ``--allow-outside-paths``."""
    path = os.path.normpath(os.path.join(folder, name))
    if not ctx.allow_outside_paths:
        check_inside(root, path, f"{ctx.name}: {where}", "these files")
    rel = os.path.relpath(path, root) if not os.path.isabs(name) else name
    ident = rel.replace(os.sep, "/") + ("" if box is None else "#" + ",".join(f"{v:g}" for v in box))
    return ImageRef(path, ident, box)


def image_size(path: str) -> tuple[int, int] | None:
    """``(width, height)`` from the image file's header; None when it cannot be read (reported when encoding)."""
    try:
        with Image.open(path) as im:
            width, height = im.size
            return int(width), int(height)
    except (OSError, ValueError):
        return None


# --- counts ---------------------------------------------------------------------------------------------
def check_item_counts(ds: ChoiceSet, protocol: ChoiceProtocol, allow_mismatch: bool,
                      expected: Mapping[str, int] | None = None) -> dict[str, Any]:
    """Compare the items loaded per part *after skipping* with the published counts (``expected`` replaces them):
    any difference is an error naming the part unless ``allow_mismatch`` (then recorded, ``status`` "mismatch
    allowed"). A smaller set than the published one is another benchmark, as for the retrieval benchmarks."""
    want = dict(expected if expected is not None else protocol.counts)
    got = ds.parts()
    n_skipped = sum(len(v) for v in ds.skipped.values())
    check: dict[str, Any] = {"expected": want or None, "expected_from": "given by the caller" if expected is not None
                             else f"{ds.name} spec, protocol {protocol.name}", "loaded": got, "n_skipped": n_skipped,
                             "allow_mismatch": allow_mismatch}
    if not want:
        check["status"] = "unverified (no published count)"
        return check
    wrong = [(p, got.get(p, 0), n) for p, n in want.items() if got.get(p, 0) != n]
    if not wrong:
        check["status"] = "ok"
        return check
    skipped = f" after skipping {n_skipped} items ({', '.join(sorted(ds.skipped))})" if n_skipped else ""
    listed = ", ".join(f"{p}: {g:,} items, published {n:,}" for p, g, n in wrong[:4])
    summary = f"{ds.name}/{ds.protocol}: loaded {listed}{skipped}"
    if not allow_mismatch:
        why = ("a smaller set than the published one is another benchmark" if n_skipped else
               f"the files under {ds.source} look incomplete or from another release")
        raise DataError(f"{summary}; {why}. Pass --allow-count-mismatch to run anyway (recorded in the result)")
    logger.warning("%s; continuing because the mismatch is allowed", summary)
    check["status"] = "mismatch allowed"
    return check


def recheck_item_counts(ds: ChoiceSet) -> ChoiceSet:
    """Repeat the count check of a set that lost items after loading (unreadable images dropped)."""
    check = ds.meta.get("count_check")
    if check and check.get("expected"):
        proto = ChoiceProtocol(str(ds.protocol), (), None, None, "", "raw", scoring=ds.scoring,
                               counts=check["expected"])
        ds.meta["count_check"] = check_item_counts(ds, proto, bool(check.get("allow_mismatch")))
    return ds


# --- loading ---------------------------------------------------------------------------------------------
def load_choice_benchmark(spec: Any, *, data_root: str | Path | None = None, protocol: str | None = None,
                          split: str | None = None, skip_invalid: bool = False, allow_count_mismatch: bool = False,
                          expected_counts: Mapping[str, int] | None = None, progress: bool = False,
                          allow_outside_paths: bool = False, split_file: Sequence[str] = (),
                          **unknown: Any) -> ChoiceSet:
    """Load ``spec`` (a choice benchmark's :class:`~hnbench.data.benchmarks.BenchmarkSpec`) under ``protocol`` from
    ``data_root`` (default ``<cache>/benchmarks/NAME``), then check its counts (``expected_counts``: part → items,
    replacing the published ones)."""
    from hnbench.data.benchmarks.spec import DOWNLOAD_RECORD, read_record

    if unknown:
        raise ConfigError(f"{spec.name}: unknown option(s) {sorted(unknown)}")
    if split_file:
        raise ConfigError(f"{spec.name} uses no split list (--split-file)")
    proto = spec.protocol(protocol or split)
    if not isinstance(proto, ChoiceProtocol):
        raise ConfigError(f"{spec.name}/{proto.name} is not an option-choice protocol")
    if data_root is None and not spec.default_root().is_dir():
        raise DataError(f"{spec.name}: no data: pass --data-root DIR pointing at the release ({spec.layout})")
    root = Path(data_root) if data_root is not None else spec.default_root()
    if not root.is_dir():
        raise DataError(f"{spec.name}: data root not found: {root}")
    ctx = LoadContext(name=spec.name, skip_invalid=skip_invalid, progress=progress,
                      allow_outside_paths=allow_outside_paths)
    module, _, attr = proto.reader.partition(":")
    builder: ChoiceBuilder = getattr(importlib.import_module(module), attr)(root, proto, ctx)
    ds = builder.build(proto, root)
    ds.meta.update(benchmark=spec.name, crop=proto.crop)  # the scoring: in the result's settings
    if (root / DOWNLOAD_RECORD).is_file():
        ds.meta["download"] = read_record(root)
    ds.meta["count_check"] = check_item_counts(ds, proto, allow_count_mismatch, expected_counts)
    return ds
