"""The segment sidecar: per image, boxes paired with sentences of its long caption (GOAL's LISM pairs).

One declared JSON schema (:data:`FORMAT`, version :data:`VERSION`), GOAL's training-JSON fields plus what
GOAL's pooling needs and its files lack (the sentence's character span in the long caption, the image
size)::

    {"format": "hnbench-segments", "version": 1,
     "writer": "synthdense" | "grid-clip" | "goal-import", "parameters": {...},   # how it was made
     "dataset": {"name": ..., "protocol": ..., "fingerprint": ...},
     "images": [{"id": "<image id in the data>", "width": W, "height": H,
                 "original_caption": "<one of the image's captions>",
                 "segment": [{"caption": "<sentence>", "char_span": [start, end],
                              "similarity_score": s, "bbox_coordinates": {"x1":, "y1":, "x2":, "y2":},
                              "object": "obj2" | null}, ...]}, ...]}

Boxes are in the pixels of the image as stored (``0 <= x1 < x2 <= W``), ``char_span`` is ``[start, end)`` in
``original_caption`` and ``original_caption[start:end]`` is the sentence. A sidecar is read like any
release annotation (:func:`read_segments`: a bounded regular-file read, every field checked, every id in
the data, every box inside its image, every span inside its caption; one line naming the first problem).
Segments of an image are sorted by ``similarity_score``, best first (GOAL trains on the first).

Writers: :func:`synthdense_segments` (exact: each object's box from the render geometry and its own
sentence), :func:`import_goal` (GOAL's released JSON files), and ``hnbench segments`` for any other data
(:mod:`hnbench.sidecars.grid`: multi-scale grid boxes scored by a frozen CLIP, no SAM).

Token spans are tokenizer-specific and so not stored: :func:`token_span` maps a character span to the
token positions of the caption tokenised by a given ``encode`` (open_clip's SimpleTokenizer has no
offsets; it, like CLIP's BPE, never joins across whitespace, so the tokens of a prefix and a sentence add up).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from hnbench.errors import DataError
from hnbench.io import atomic_write_bytes, read_json_untrusted, read_rows
from hnbench.sidecars import SEGMENT_GEOMETRY

if TYPE_CHECKING:
    from PIL import Image

    from hnbench.data.base import ImageSource, ImageTextDataset

FORMAT, VERSION = "hnbench-segments", 1
WRITERS = ("synthdense", "grid-clip", "goal-import")
SIDECAR = "segments.json"  # its name beside a synthdense split's metadata.jsonl
Box = tuple[float, float, float, float]


@dataclass(frozen=True)
class Segment:
    """A box of the image with the sentence of its caption it shows."""

    box: Box  # (x1, y1, x2, y2) in image pixels
    sentence: str
    char_span: tuple[int, int]  # [start, end) in the image's caption
    similarity: float
    object: str | None = None  # synthdense: the object's id


@dataclass(frozen=True)
class ImageSegments:
    """One image's entry: its size, the caption the spans index, and its segments (best first)."""

    id: str
    width: int
    height: int
    caption: str
    segments: tuple[Segment, ...]


@dataclass
class SegmentSidecar:
    """A validated segment sidecar; :meth:`per_image` lines it up with a dataset's image positions."""

    writer: str
    parameters: dict[str, Any]
    images: dict[str, ImageSegments]
    dataset: dict[str, Any] = field(default_factory=dict)

    def per_image(self, dataset: ImageTextDataset) -> list[ImageSegments | None]:
        """For each image position of ``dataset``, its entry (None where the sidecar has none)."""
        return [self.images.get(i) for i in dataset.image_ids]

    def spans(self, dataset: ImageTextDataset, encode: Callable[[str], Sequence[int]], *,
              context_length: int | None = None) -> list[list[tuple[Box, tuple[int, int], tuple[int, int] | None]]]:
        """For each image position of ``dataset``: its segments (best first) as (box, char span, token span)
        for the tokenizer ``encode`` (:func:`token_span`; None where truncation cuts the sentence off)."""
        return [[] if e is None else [(s.box, s.char_span, token_span(e.caption, s.char_span, encode,
                                                                      context_length=context_length))
                                      for s in e.segments] for e in self.per_image(dataset)]

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "writer": self.writer, "parameters": self.parameters,
                "dataset": self.dataset, "images": [
                    {"id": e.id, "width": e.width, "height": e.height, "original_caption": e.caption,
                     "segment": [{"caption": s.sentence, "char_span": list(s.char_span),
                                  "similarity_score": s.similarity,
                                  "bbox_coordinates": dict(zip(("x1", "y1", "x2", "y2"), s.box)),
                                  "object": s.object} for s in e.segments]}
                    for e in self.images.values()]}

    def write(self, path: str | Path) -> Path:
        """Write the sidecar atomically (a temporary file renamed into place)."""
        import json

        path = Path(path)
        atomic_write_bytes(path, (json.dumps(self.to_json(), indent=1) + "\n").encode())
        return path


def dataset_record(dataset: ImageTextDataset) -> dict[str, Any]:
    """What a sidecar records of the data it was made for."""
    return {"name": dataset.name, "protocol": dataset.protocol, "fingerprint": dataset.fingerprint()}


def crop_box(image: Image.Image, box: Box, margin: float = 0.0) -> Image.Image:
    """The crop of ``image`` (a picture or its edge map) at ``box`` grown by ``margin`` of its size on each
    side, whole pixels outward, kept inside the image: GOAL's segment crop is the box of the original."""
    x1, y1, x2, y2 = box
    dx, dy = margin * (x2 - x1), margin * (y2 - y1)
    w, h = image.size
    return image.crop((max(0, math.floor(x1 - dx)), max(0, math.floor(y1 - dy)), min(w, math.ceil(x2 + dx)),
                       min(h, math.ceil(y2 + dy))))


# --- sentences and token spans ------------------------------------------------------------------------
_SENTENCE = re.compile(r"[^.!?]*[.!?]+|[^.!?]+$")


def split_sentences(caption: str) -> list[tuple[int, int]]:
    """Character spans of the caption's sentences (split after '.', '!' or '?', as GOAL splits on '.'), each
    stripped of surrounding whitespace; pieces without a letter or digit are dropped."""
    spans = []
    for m in _SENTENCE.finditer(caption):
        text = m.group()
        start = m.start() + len(text) - len(text.lstrip())
        end = m.end() - (len(text) - len(text.rstrip()))
        if any(c.isalnum() for c in caption[start:end]):
            spans.append((start, end))
    return spans


def token_span(caption: str, char_span: tuple[int, int], encode: Callable[[str], Sequence[int]], *,
               start_token: bool = True, context_length: int | None = None) -> tuple[int, int] | None:
    """Token positions ``[a, b)`` of ``caption[start:end]`` in the caption's token sequence.

    ``encode`` tokenises text without special tokens (open_clip: ``SimpleTokenizer().encode``; HF:
    ``tok(text, add_special_tokens=False).input_ids``). The prefix and the sentence are tokenised apart,
    which for a span that starts and ends at whitespace (or the caption's ends) counts the tokens of the
    whole caption exactly. ``start_token``: position 0 holds the start-of-text token. With
    ``context_length``, a span cut by truncation ends at the last kept text token (the end token keeps
    its place), and a span entirely cut off is None.
    """
    start, end = char_span
    if not 0 <= start < end <= len(caption):
        raise DataError(f"span [{start}, {end}) lies outside its {len(caption)}-character caption")
    a = len(encode(caption[:start])) + int(start_token)
    b = a + len(encode(caption[start:end]))
    if context_length is not None:
        b = min(b, context_length - 1)
        if b <= a:
            return None
    return a, b


# --- reading and checking ------------------------------------------------------------------------------
def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _kind(value: Any) -> str:
    """What an untrusted value is, for an error line: a short number or string itself, else its JSON type
    (never a whole list or table)."""
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "a list"
    text = repr(value)  # JSON leaves None, a bool, a number or a string
    return text if len(text) <= 30 else f"a {len(text)}-character {type(value).__name__}"


_Bad = Callable[[str], DataError]  # a message → the DataError naming the sidecar


def parse_segments(doc: Any, where: str, dataset: ImageTextDataset | None = None, *,
                   image_sizes: Sequence[tuple[int, int] | None] | None = None) -> SegmentSidecar:
    """A sidecar document checked field by field (and, with ``dataset``, against the data: ids present,
    captions among the image's, sizes equal to ``image_sizes`` where known); the first problem is a
    :class:`DataError` naming ``where`` and the item."""
    def bad(msg: str) -> DataError:
        return DataError(f"{where}: {msg}")

    writer, params, images = _parse_header(doc, bad)
    data = _DataImages.of(dataset, image_sizes) if dataset is not None else None
    out: dict[str, ImageSegments] = {}
    for n, item in enumerate(images):
        if not isinstance(item, dict) or not isinstance(item.get("id"), str):
            raise bad(f"images[{n}] has no string id")
        if item["id"] in out:
            raise bad(f"image {item['id']!r} appears twice")
        entry = _parse_image(item, bad, data)
        out[entry.id] = entry
    record = doc.get("dataset", {})
    return SegmentSidecar(writer, params, out, record if isinstance(record, dict) else {})


def _parse_header(doc: Any, bad: _Bad) -> tuple[str, dict[str, Any], list[Any]]:
    """The document's format and version (this hnbench's), its writer, parameters table and images list."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise bad(f"not a segment sidecar (no \"format\": {FORMAT!r}); make one with `hnbench segments`")
    if doc.get("version") != VERSION:
        raise bad(f"segment sidecar version {doc.get('version')!r}; this hnbench reads version {VERSION}")
    writer, params, images = doc.get("writer"), doc.get("parameters", {}), doc.get("images")
    if writer not in WRITERS or not isinstance(params, dict) or not isinstance(images, list):
        raise bad(f"needs a writer ({', '.join(WRITERS)}), a parameters table and an images list")
    return writer, params, images


@dataclass(frozen=True)
class _DataImages:
    """What a sidecar's images are checked against: the data's image positions by id, each image's captions and,
    where known, its real size."""

    name: str
    n_images: int
    index: dict[str, int]
    captions: list[set[str]]
    sizes: Sequence[tuple[int, int] | None] | None

    @classmethod
    def of(cls, dataset: ImageTextDataset, sizes: Sequence[tuple[int, int] | None] | None) -> _DataImages:
        captions: list[set[str]] = [set() for _ in dataset.image_ids]
        for text, k in zip(dataset.captions, dataset.caption_image.tolist()):
            captions[k].add(text)
        return cls(dataset.name, dataset.n_images, {image_id: k for k, image_id in enumerate(dataset.image_ids)},
                   captions, sizes)

    def check(self, image_id: str, w: int, h: int, caption: str, what: str, bad: _Bad) -> None:
        """The image is in the data, its caption one of the image's, its size the image's where known."""
        if image_id not in self.index:
            raise bad(f"{what} is not in the data {self.name!r} ({self.n_images} images): a sidecar "
                      "of other data? make one for this data with `hnbench segments`")
        k = self.index[image_id]
        if caption not in self.captions[k]:
            raise bad(f"{what}: its original_caption is not one of the image's captions in {self.name!r}")
        size = self.sizes[k] if self.sizes is not None else None
        if size is not None and tuple(size) != (w, h):
            raise bad(f"{what}: recorded as {w}x{h} but the image is {size[0]}x{size[1]}")


def _parse_image(item: dict[str, Any], bad: _Bad, data: _DataImages | None) -> ImageSegments:
    """One image's entry (its string id checked): its size, its caption, the data's check, then its segments,
    best first."""
    image_id: str = item["id"]
    w: Any = item.get("width")
    h: Any = item.get("height")
    caption: Any = item.get("original_caption")
    what = f"image {image_id!r}"
    if not (_int(w) and _int(h) and w > 0 and h > 0):
        raise bad(f"{what}: width and height must be positive integers, got {w!r} x {h!r}")
    if not isinstance(caption, str) or not isinstance(item.get("segment"), list):
        raise bad(f"{what}: needs an original_caption string and a segment list")
    if data is not None:
        data.check(image_id, w, h, caption, what, bad)
    segs = [_parse_segment(s, f"{what} segment {j}", w, h, caption, bad) for j, s in enumerate(item["segment"])]
    segs.sort(key=lambda s: -s.similarity)
    return ImageSegments(image_id, w, h, caption, tuple(segs))


def _parse_segment(s: Any, at: str, w: int, h: int, caption: str, bad: _Bad) -> Segment:
    """One segment of a ``w`` x ``h`` image: its box inside the image, its sentence at its span of ``caption``,
    a finite similarity and an optional object id."""
    if not isinstance(s, dict):
        raise bad(f"{at} is not a table")
    box = _segment_box(s.get("bbox_coordinates"), at, w, h, bad)
    span, sim, sentence = s.get("char_span"), s.get("similarity_score"), s.get("caption")
    if not (isinstance(span, list) and len(span) == 2 and all(_int(v) for v in span)):
        raise bad(f"{at}: char_span must be [start, end] (integers)")
    if not 0 <= span[0] < span[1] <= len(caption):
        raise bad(f"{at}: span [{span[0]}, {span[1]}) lies outside its {len(caption)}-character caption")
    if not isinstance(sentence, str) or caption[span[0]:span[1]] != sentence:
        raise bad(f"{at}: its caption (sentence) is not the text at its char_span in the original_caption")
    if not _number(sim):  # sim: a finite number from here on
        raise bad(f"{at}: similarity_score must be a finite number, got {sim!r}")
    obj = s.get("object")
    if obj is not None and not isinstance(obj, str):
        raise bad(f"{at}: object must be a string or null")
    return Segment(box, sentence, (span[0], span[1]), float(cast(float, sim)), obj)


def _segment_box(box: Any, at: str, w: int, h: int, bad: _Bad) -> Box:
    """A segment's ``bbox_coordinates``: numbers x1, y1, x2, y2 of a non-empty box inside the ``w`` x ``h`` image."""
    coords: list[Any] = [box.get(k) for k in ("x1", "y1", "x2", "y2")] if isinstance(box, dict) else []
    if len(coords) != 4 or not all(_number(c) for c in coords):
        raise bad(f"{at}: bbox_coordinates needs numbers x1, y1, x2, y2")
    x1, y1, x2, y2 = (float(c) for c in coords)
    if not (0 <= x1 < x2 <= w and 0 <= y1 < y2 <= h):  # w, h: checked positive integers
        raise bad(f"{at}: box ({x1:g}, {y1:g}, {x2:g}, {y2:g}) lies outside its {w}x{h} image (or is empty)")
    return x1, y1, x2, y2


def image_size(images: ImageSource, i: int) -> tuple[int, int] | None:
    """Image ``i``'s (width, height), read from its header where it is a file (no decoding), else opened;
    None where it cannot be read."""
    from PIL import Image

    from hnbench.data.base import FileImages

    try:
        if isinstance(images, FileImages):
            with Image.open(images.paths[i]) as im:
                size: tuple[int, int] = im.size
                return size
        return images.open(i).size
    except Exception:  # unreadable: the encoder reports it properly
        return None


def image_sizes(dataset: ImageTextDataset) -> list[tuple[int, int] | None]:
    """Each image's :func:`image_size`."""
    return [image_size(dataset.images, i) for i in range(dataset.n_images)]


def read_segments(path: str | Path, dataset: ImageTextDataset | None = None) -> SegmentSidecar:
    """Read and check a sidecar (see :func:`parse_segments`); with ``dataset``, against that data and its
    images' real sizes."""
    if Path(path).is_dir():  # (read_untrusted's fdopen raises IsADirectoryError before its own check)
        raise DataError(f"{path}: segment sidecar is a directory, not a regular file; refused")
    doc = read_json_untrusted(path, "segment sidecar")
    sizes = image_sizes(dataset) if dataset is not None else None
    return parse_segments(doc, str(path), dataset, image_sizes=sizes)


# --- where a sidecar lives, and the trainer's check -------------------------------------------------------
def default_sidecar_path(dataset: ImageTextDataset) -> Path:
    """Where a dataset's sidecar is looked for by default: beside the split's metadata of data that declares its
    segment geometry (:data:`~hnbench.sidecars.SEGMENT_GEOMETRY`: synthdense), else
    ``<hnbench cache>/segments/<data fingerprint>.json`` (``hnbench segments``' default output)."""
    if SEGMENT_GEOMETRY in dataset.side_inputs and dataset.meta.get("root") and dataset.protocol:
        return Path(dataset.meta["root"]) / dataset.protocol / SIDECAR
    from hnbench.io import cache_dir

    return cache_dir() / "segments" / f"{dataset.fingerprint()}.json"


def how_to_make(dataset: ImageTextDataset, path: Path) -> str:
    """The command lines that make a sidecar for ``dataset`` at ``path``."""
    source = dataset.source or dataset.name
    return (f"make one with `hnbench segments --dataset {source} --model hnbench-tiny --pretrained synthdense "
            f"--output {path}` (any hnbench model scores the boxes), or import GOAL's released JSON with "
            f"`hnbench segments --dataset {source} --import-goal FILE --output {path}`")


def require_segments(dataset: ImageTextDataset, path: str | Path | None = None, *,
                     needed_by: str = "this objective", every_image: bool = False) -> SegmentSidecar:
    """The checked sidecar of ``dataset`` (at ``path``, else :func:`default_sidecar_path`), for a trainer to
    call before any model loads. Data declaring its segment geometry (synthdense) has it written from that on
    first use; for other data a
    missing sidecar is a :class:`DataError` naming it and how to make it, and one that names images not in
    the data, boxes outside their image or spans outside their caption is refused; ``every_image``: so is
    one that leaves an image of the data without a segment (a trainer that needs one per image)."""
    where = Path(path) if path is not None else default_sidecar_path(dataset)
    if not where.exists() and path is None and SEGMENT_GEOMETRY in dataset.side_inputs:
        synthdense_segments(dataset).write(where)
    if not os.path.lexists(where):
        raise DataError(f"{needed_by} needs a segment sidecar for {dataset.name!r} and there is none at {where}; "
                        + how_to_make(dataset, where))
    sidecar = read_segments(where, dataset)
    if every_image:
        for image_id, entry in zip(dataset.image_ids, sidecar.per_image(dataset)):
            if entry is None or not entry.segments:
                raise DataError(f"{needed_by} needs a segment for every image and {where} has none for image "
                                f"{image_id!r} (a sidecar of part of the data?); " + how_to_make(dataset, where))
    return sidecar


# --- writers --------------------------------------------------------------------------------------------
def synthdense_segments(dataset: ImageTextDataset) -> SegmentSidecar:
    """The exact sidecar of a synthdense split: per image, each object's box from the render geometry with
    its own sentence (similarity 1; objects in caption order)."""
    from hnbench.data.synthdense import caption_sentences, object_box, scene_caption

    scenes, size = synthdense_scenes(dataset)
    images = {}
    for image_id in dataset.image_ids:
        scene = scenes[image_id]
        segs = tuple(Segment(object_box(scene, s.object, size), s.text, s.span, 1.0, s.object)
                     for s in caption_sentences(scene) if s.object is not None)
        images[image_id] = ImageSegments(image_id, size, size, scene_caption(scene), segs)
    return SegmentSidecar("synthdense", {"box": "render geometry: centre +- radius", "sentence": "the object's own",
                                         "image_size": size}, images, dataset_record(dataset))


def synthdense_scenes(dataset: ImageTextDataset,
                      capability: str = SEGMENT_GEOMETRY) -> tuple[dict[str, dict[str, Any]], int]:
    """The scene of each image of a synthdense split (read from its metadata.jsonl) and the image side: of data
    that declares ``capability`` (:data:`~hnbench.sidecars.SEGMENT_GEOMETRY` or ``OUTLINES``), what it reads."""
    from hnbench.data.synthdense import MANIFEST

    root, protocol = dataset.meta.get("root"), dataset.protocol
    if capability not in dataset.side_inputs or not root or not protocol:
        raise DataError(f"{dataset.name!r} is not a synthdense split: its geometry is unknown")
    manifest = read_json_untrusted(Path(root) / MANIFEST, "synthdense manifest")
    rows, _ = read_rows(Path(root) / protocol / "metadata.jsonl")
    scenes = {row["id"]: row["scene"] for row in rows}
    return scenes, int(manifest["config"]["image_size"])


def import_goal(path: str | Path, dataset: ImageTextDataset) -> SegmentSidecar:
    """A sidecar from one of GOAL's released training JSONs (a list of ``original_filename``,
    ``original_caption``, ``segment``: [{``caption``, ``similarity_score``, ``bbox_coordinates``}]).

    Images are matched to the data by id or by file name (without folders or extension); the image size is
    the real image's (GOAL's ``width``/``height`` are the crop's); each sentence's span is where it first
    occurs in the caption (GOAL asserts it occurs); boxes are checked against the real size. The crop PNGs
    GOAL names are not needed: a crop is the box of the original image."""
    doc = read_json_untrusted(path, "GOAL segment JSON")
    if not isinstance(doc, list):
        raise DataError(f"{path}: not a GOAL segment JSON (a list of items with original_filename, "
                        "original_caption and segment)")
    by_name: dict[str, str] = {}
    paths = getattr(dataset.images, "paths", None) or dataset.image_ids
    for image_id, ref in zip(dataset.image_ids, paths):
        by_name[image_id] = image_id
        by_name.setdefault(Path(str(ref)).stem, image_id)
    sizes = image_sizes(dataset)
    position = {image_id: k for k, image_id in enumerate(dataset.image_ids)}
    images = []
    for n, item in enumerate(doc):
        if not isinstance(item, dict) or not isinstance(item.get("original_filename"), str):
            raise DataError(f"{path}: item {n} has no original_filename")
        name = item["original_filename"]
        found = by_name.get(name) or by_name.get(Path(name).stem)
        if found is None:
            raise DataError(f"{path}: item {n}: image {name!r} is not in the data {dataset.name!r}")
        image_id = found
        size = sizes[position[image_id]]
        if size is None:
            raise DataError(f"{path}: item {n}: image {name!r} is unreadable, its size unknown")
        caption, entries = item.get("original_caption"), item.get("segment")
        at = f"{path}: item {n}"
        if not isinstance(caption, str):
            raise DataError(f"{at}: original_caption must be a string, got {_kind(caption)}")
        if entries is None:
            entries = []
        if not isinstance(entries, list):
            raise DataError(f"{at}: segment must be a list of segments, got {_kind(entries)}")
        segs = []
        for j, s in enumerate(entries):
            if not isinstance(s, dict):
                raise DataError(f"{at} segment {j}: a segment is a table, got {_kind(s)}")
            sentence, box, sim = s.get("caption"), s.get("bbox_coordinates"), s.get("similarity_score")
            if not isinstance(sentence, str):
                raise DataError(f"{at} segment {j}: caption must be a string, got {_kind(sentence)}")
            if not isinstance(box, dict):
                raise DataError(f"{at} segment {j}: bbox_coordinates must be a table of numbers x1, y1, x2, y2, "
                                f"got {_kind(box)}")
            coords = [box.get(k) for k in ("x1", "y1", "x2", "y2")]
            for k, c in zip(("x1", "y1", "x2", "y2"), coords):
                if not _number(c):
                    raise DataError(f"{at} segment {j}: bbox_coordinates {k} must be a finite number, got {_kind(c)}")
            if not _number(sim):
                raise DataError(f"{at} segment {j}: similarity_score must be a finite number, got {_kind(sim)}")
            sentence = sentence.strip()
            start = caption.find(sentence) if sentence else -1
            if start < 0:
                raise DataError(f"{at} segment {j}: its sentence is not in the original_caption")
            segs.append({"caption": sentence, "char_span": [start, start + len(sentence)], "similarity_score": sim,
                         "bbox_coordinates": dict(zip(("x1", "y1", "x2", "y2"), coords)), "object": None})
        images.append({"id": image_id, "width": size[0], "height": size[1], "original_caption": caption,
                       "segment": segs})
    from hnbench.io import sha256_file

    doc_out = {"format": FORMAT, "version": VERSION, "writer": "goal-import",
               "parameters": {"source": os.path.basename(str(path)), "sha256": sha256_file(path)},
               "dataset": dataset_record(dataset), "images": images}
    return parse_segments(doc_out, str(path), dataset, image_sizes=sizes)
