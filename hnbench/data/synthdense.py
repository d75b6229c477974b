"""synthdense: a built-in, deterministic, synthetic dense-caption retrieval benchmark.

Each image is a flat rendered scene of 3-5 geometric objects (shape, saturated colour, size, solid or
outlined fill) in distinct cells of a 3x3 grid on a plain background. Each caption is long (100+ words):
it describes the background, every object with all its attributes, the empty cells, pairwise spatial and
size relations, and ends with a summary. Scenes come in *families*: one base scene plus variants that
change 1..``max_changes`` attributes (an object's colour, shape, size, cell or fill, or the background),
so captions within a family are near-duplicates, as in DOCCI/DCI. Everything is a pure function of the
config (seed, split and family index seed each family's RNG), and the objects are large and saturated
enough to be learnable by a tiny CLIP at 64 px. It is the offline default for demos and tests.

On-disk format (Hugging Face "imagefolder" with ``metadata.jsonl``, one folder per split)::

    out_dir/
      synthdense.json          {"config": {...}, "fingerprint": "...", "splits": {"train": n, ...}, "version": 1}
      <split>/metadata.jsonl   one row per image, sorted by id:
                               {"file_name": "images/<id>.png", "id": "<split>-f00012-v3", "caption": "...",
                                "family": "<split>-f00012", "variant": 3, "changes": ["obj2.colour"],
                                "scene": {"background": ..., "objects": [...], "style": ...}}
      <split>/images/<id>.png  RGB, image_size x image_size
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import operator
import os
import secrets
import shutil
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw
from tqdm import tqdm

from hnbench.errors import DataError

logger = logging.getLogger(__name__)

VERSION = 1
MANIFEST = "synthdense.json"
FAMILY_PATTERN = r"^(.*)-v\d+$"  # item ids are "<family>-v<variant>": the group_by regex of whole-family batches
SHAPES = ("circle", "square", "triangle", "star", "hexagon", "diamond", "cross")
COLOURS = {
    "red": (220, 30, 30), "green": (30, 170, 40), "blue": (30, 70, 230), "yellow": (250, 220, 20),
    "orange": (250, 130, 0), "purple": (130, 40, 180), "cyan": (0, 200, 220), "magenta": (230, 30, 190),
    "white": (250, 250, 250), "black": (10, 10, 10),
}
# background name -> (RGB, object colours too close to it to be used on it)
BACKGROUNDS = {
    "light grey": ((195, 195, 195), frozenset({"white"})),
    "dark grey": ((60, 60, 60), frozenset({"black"})),
    "beige": ((235, 222, 190), frozenset({"white", "yellow"})),
    "navy": ((20, 24, 60), frozenset({"black", "blue", "purple"})),
}
SIZES = {"small": 0.16, "medium": 0.22, "large": 0.29}  # diameter as a fraction of the image side
CELLS = ("top-left", "top-center", "top-right", "middle-left", "center", "middle-right",
         "bottom-left", "bottom-center", "bottom-right")
FILLS = ("solid", "outlined")
ATTRS = ("colour", "shape", "size", "position", "fill")
OUTLINED_P = 0.3
OUTLINABLE = frozenset(SHAPES) - {"star", "cross"}  # thin arms: an outline would be illegible at 64 px


class SynthDenseError(DataError, ValueError):
    """Bad synthdense config, or an out_dir that holds something else."""


class _Counts(Mapping[str, int]):
    """Immutable, hashable ``{split: n_families}`` mapping (keeps the config frozen and hashable)."""

    def __init__(self, items: Mapping[str, int] | Any):
        self._items = tuple((str(k), operator.index(v)) for k, v in dict(items).items())

    def __getitem__(self, key: str) -> int:
        return dict(self._items)[key]

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(frozenset(self._items))

    def __repr__(self) -> str:
        return repr(dict(self._items))


@dataclass(frozen=True)
class SynthDenseConfig:
    """All knobs of the benchmark; ``n_families`` maps split name -> number of families."""

    seed: int = 0
    n_families: Mapping[str, int] = field(default_factory=lambda: {"train": 400, "test": 100})
    family_size: int = 5
    min_objects: int = 3
    max_objects: int = 5
    image_size: int = 128
    max_changes: int = 2

    def __post_init__(self) -> None:
        problems = []
        for f in fields(self):  # accept numpy ints etc., reject floats; keeps to_dict() JSON-able
            try:
                value = getattr(self, f.name)
                value = _Counts(value) if f.name == "n_families" else operator.index(value)
                object.__setattr__(self, f.name, value)
            except (TypeError, ValueError):
                raise SynthDenseError(f"invalid SynthDenseConfig.{f.name}: {value!r}") from None
        if self.seed < 0:
            problems.append(f"seed must be >= 0, got {self.seed}")
        for split, n in self.n_families.items():
            if not split or not split.replace("_", "").replace("-", "").isalnum() or n < 0:
                problems.append(f"bad split {split!r}: {n} (need an alphanumeric name and n >= 0)")
        if self.family_size < 1 or self.max_changes < 1:
            problems.append("family_size and max_changes must be >= 1")
        if not 1 <= self.min_objects <= self.max_objects <= 8:
            problems.append(f"need 1 <= min_objects <= max_objects <= 8, got {self.min_objects}..{self.max_objects}")
        if self.image_size < 16:
            problems.append(f"image_size must be >= 16, got {self.image_size}")
        if problems:
            raise SynthDenseError("invalid SynthDenseConfig: " + "; ".join(problems))

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON view of all fields."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["n_families"] = dict(self.n_families)
        return d

    def fingerprint(self) -> str:
        """Short stable hex hash of all fields and the format version (a cache key)."""
        blob = json.dumps({"config": self.to_dict(), "version": VERSION}, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


# ----------------------------------------------------------------------------------------- scenes
def _pick(rng: np.random.Generator, options: list[str] | tuple[str, ...]) -> str:
    return options[int(rng.integers(len(options)))]


def _family_rng(seed: int, split: str, index: int) -> np.random.Generator:
    split_key = int.from_bytes(hashlib.sha256(split.encode()).digest()[:8], "little")
    return np.random.default_rng([seed, split_key, index])


def _allowed_colours(background: str) -> list[str]:
    return [c for c in COLOURS if c not in BACKGROUNDS[background][1]]


def _base_scene(rng: np.random.Generator, cfg: SynthDenseConfig) -> dict[str, Any]:
    background = _pick(rng, list(BACKGROUNDS))
    n = int(rng.integers(cfg.min_objects, cfg.max_objects + 1))
    objects, used = [], set()
    for i, cell in enumerate(rng.choice(len(CELLS), size=n, replace=False)):
        while (pair := (_pick(rng, _allowed_colours(background)), _pick(rng, SHAPES))) in used:
            pass
        used.add(pair)
        objects.append({
            "id": f"obj{i}", "colour": pair[0], "shape": pair[1], "size": _pick(rng, list(SIZES)),
            "position": CELLS[int(cell)],
            "fill": "outlined" if rng.random() < OUTLINED_P and pair[1] in OUTLINABLE else "solid",
            "jitter": [round(float(x), 3) for x in rng.uniform(-1, 1, size=2)],
        })
    return {"background": background, "objects": objects, "style": int(rng.integers(2**31))}


def _apply_change(rng: np.random.Generator, scene: dict[str, Any], key: str) -> bool:
    """Change attribute ``key`` ("background" or "objK.attr") to a new valid value; False if impossible."""
    objs = scene["objects"]
    if key == "background":
        colours = {o["colour"] for o in objs}
        options = [b for b in BACKGROUNDS if b != scene["background"] and not BACKGROUNDS[b][1] & colours]
        if options:
            scene["background"] = _pick(rng, options)
        return bool(options)
    name, attr = key.split(".")
    obj = objs[int(name[3:])]
    taken = {(o["colour"], o["shape"]) for o in objs if o is not obj}
    options = {
        "colour": [c for c in _allowed_colours(scene["background"]) if (c, obj["shape"]) not in taken],
        "shape": [s for s in SHAPES if (obj["colour"], s) not in taken
                  and (obj["fill"] == "solid" or s in OUTLINABLE)],
        "size": list(SIZES),
        "fill": list(FILLS) if obj["shape"] in OUTLINABLE else [],
        "position": [c for c in CELLS if c not in {o["position"] for o in objs}],
    }[attr]
    options = [v for v in options if v != obj[attr]]
    if options:
        obj[attr] = _pick(rng, options)
    return bool(options)


def _variant(rng: np.random.Generator, base: dict[str, Any], cfg: SynthDenseConfig,
             seen: set[str]) -> tuple[dict[str, Any], list[str]]:
    keys = [f"obj{i}.{a}" for i in range(len(base["objects"])) for a in ATTRS] + ["background"]
    for _ in range(200):
        scene = copy.deepcopy(base)
        changes: list[str] = []
        k = int(rng.integers(1, cfg.max_changes + 1))
        for j in rng.permutation(len(keys)):
            if len(changes) == k:
                break
            if _apply_change(rng, scene, keys[j]):
                changes.append(keys[j])
        key = json.dumps(scene, sort_keys=True)
        if key not in seen:
            seen.add(key)
            return scene, sorted(changes)
    raise RuntimeError("could not draw a distinct variant")  # unreachable for sane configs


# --------------------------------------------------------------------------------------- captions
_NUM = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
_ORD = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth")
_POS = dict(zip(CELLS, (
    "the top left corner", "the top center", "the top right corner", "the center left", "the center",
    "the center right", "the bottom left corner", "the bottom center", "the bottom right corner")))
_CELL = {c: p.removeprefix("the ").removesuffix(" corner") for c, p in _POS.items()}  # "top left", "center"
_SIZE_ADJ = {"small": "small", "medium": "medium-sized", "large": "large"}
_FILL_LONG = {"solid": "filled with solid colour", "outlined": "drawn as a hollow outline"}
_OPEN = (
    "This image shows {n} simple geometric objects on a plain {bg} background, laid out on a three by three grid.",
    "A plain {bg} background fills the picture, and {n} flat shapes sit in separate cells of a three by three grid.",
    "A simple synthetic scene with a {bg} background and exactly {n} objects, each in its own cell of a 3x3 layout.",
)
_OBJ = (
    "In {pos} there is {a_size} {colour} {shape}, {fill_long}.",
    "{pos} contains {a_fill} {colour} {shape} of {size} size.",
    "The {ordinal} object, in {pos}, is {a_size} {colour} {shape} {fill_long}.",
    "We can see {a_size}, {fill} {colour} {shape} in {pos}.",
)
_REL = (
    "The {a} is {rel} the {b} and {srel} that {b_shape}.",
    "Relative to the {b}, the {a} is {rel} it and {srel} it.",
    "Comparing the two, the {a} lies {rel} the {b} and is {srel} it.",
)
_EMPTY = (
    "The {cells} {cw} {verb} left empty, showing only the background.",
    "Nothing is placed in the {cells} {cw}, where only the {bg} background is visible.",
    "The background shows through in the {cells} {cw}, which {verb2} no objects at all.",
)
_SUM = (
    "Overall, the scene contains {items} on a {bg} background.",
    "In summary, there are {n} objects in total: {items}.",
    "To sum up, the image shows only {items}.",
)
_FILLER = (
    "The shapes are drawn flat, without shadows, texture or perspective, and their edges are crisp.",
    "No object overlaps another, and every shape is fully visible inside the frame of the picture.",
    "There is no text, no border and no other decoration anywhere in the image besides these shapes.",
)


def _a(phrase: str) -> str:
    return ("an " if phrase[0] in "aeiou" else "a ") + phrase


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _cap(sentence: str) -> str:
    return sentence[0].upper() + sentence[1:]


def _relation(a: dict[str, Any], b: dict[str, Any]) -> tuple[str, str]:
    (ra, ca), (rb, cb) = divmod(CELLS.index(a["position"]), 3), divmod(CELLS.index(b["position"]), 3)
    parts = (["above"] if ra < rb else ["below"] if ra > rb else []) + (
        ["to the left of"] if ca < cb else ["to the right of"] if ca > cb else [])
    sa, sb = list(SIZES).index(a["size"]), list(SIZES).index(b["size"])
    srel = "larger than" if sa > sb else "smaller than" if sa < sb else "the same size as"
    return " and ".join(parts), srel


@dataclass(frozen=True)
class CaptionSentence:
    """One sentence of a scene's caption: its text, the object it describes (its id, e.g. ``"obj2"``; None for
    a sentence about the whole scene: the opening, empty cells, relations, summary, fillers) and its
    character span ``[start, end)`` in :func:`scene_caption`'s text."""

    text: str
    object: str | None
    span: tuple[int, int]


def caption_sentences(scene: dict[str, Any]) -> list[CaptionSentence]:
    """The sentences of :func:`scene_caption`, in order, each with its object and character span (the caption is
    them joined by single spaces); a pure function of the scene (its ``style`` picks the templates)."""
    crng = np.random.default_rng(scene["style"])
    t_open, t_empty, t_sum = (int(x) for x in crng.integers(0, 3, size=3))
    t_obj, t_rel = crng.integers(0, len(_OBJ), size=9), crng.integers(0, len(_REL), size=9)
    bg, objs = scene["background"], scene["objects"]
    ordered = sorted(objs, key=lambda o: CELLS.index(o["position"]))
    n = _NUM[len(objs)]
    out: list[tuple[str, str | None]] = [(_OPEN[t_open].format(n=n, bg=bg), None)]
    for i, o in enumerate(ordered):
        out.append((_cap(_OBJ[t_obj[i]].format(
            pos=_POS[o["position"]], a_size=_a(_SIZE_ADJ[o["size"]]), a_fill=_a(o["fill"]), size=o["size"],
            colour=o["colour"], shape=o["shape"], fill=o["fill"], fill_long=_FILL_LONG[o["fill"]],
            ordinal=_ORD[i])), str(o["id"])))
    empty = [_CELL[c] for c in CELLS if c not in {o["position"] for o in objs}]
    if empty:
        one = len(empty) == 1
        out.append((_EMPTY[t_empty].format(cells=_join(empty), cw="cell" if one else "cells", bg=bg,
                                           verb="is" if one else "are", verb2="holds" if one else "hold"), None))
    # relations between objects in id order, so they stay put when an object moves in a variant
    n_pairs = min(len(objs) - 1, 3 if len(objs) <= 3 else 2)
    pairs = [(objs[i], objs[(i + 1) % len(objs)]) for i in range(n_pairs)]
    for i, (a, b) in enumerate(pairs):
        rel, srel = _relation(a, b)
        out.append((_REL[t_rel[i]].format(a=f"{a['colour']} {a['shape']}", b=f"{b['colour']} {b['shape']}",
                                          b_shape=b["shape"], rel=rel, srel=srel), None))
    items = [_a(f"{o['colour']} {o['shape']}") for o in ordered]
    out.append((_SUM[t_sum].format(items=_join(items), bg=bg, n=n), None))
    for filler in _FILLER:
        if sum(len(text.split()) for text, _ in out) >= 100:
            break
        out.append((filler, None))
    sentences, start = [], 0
    for text, obj in out:
        sentences.append(CaptionSentence(text, obj, (start, start + len(text))))
        start += len(text) + 1
    return sentences


def scene_caption(scene: dict[str, Any]) -> str:
    """Long English caption of a scene: :func:`caption_sentences` joined by single spaces."""
    return " ".join(s.text for s in caption_sentences(scene))


# -------------------------------------------------------------------------------------- rendering
def _polygon(shape: str, cx: float, cy: float, r: float) -> list[tuple[float, float]]:
    def ring(radius: np.ndarray, start: float, k: int, dy: float = 0.0) -> list[tuple[float, float]]:
        ang = np.deg2rad(start + 360.0 * np.arange(k) / k)
        return [(cx + float(rr * np.cos(t)), cy + dy + float(rr * np.sin(t))) for rr, t in zip(radius, ang)]

    if shape == "square":
        h = 0.85 * r
        return [(cx - h, cy - h), (cx + h, cy - h), (cx + h, cy + h), (cx - h, cy + h)]
    if shape == "triangle":
        return ring(np.full(3, 1.15 * r), -90, 3, dy=0.29 * r)
    if shape == "star":
        return ring(np.tile([1.05 * r, 0.45 * r], 5), -90, 10, dy=0.05 * r)
    if shape == "hexagon":
        return ring(np.full(6, r), 0, 6)
    if shape == "diamond":
        return ring(np.full(4, r), -90, 4)
    if shape == "cross":
        w = 0.34 * r
        return [(cx - w, cy - r), (cx + w, cy - r), (cx + w, cy - w), (cx + r, cy - w), (cx + r, cy + w),
                (cx + w, cy + w), (cx + w, cy + r), (cx - w, cy + r), (cx - w, cy + w), (cx - r, cy + w),
                (cx - r, cy - w), (cx - w, cy - w)]
    raise ValueError(f"unknown shape {shape!r}")


def _placement(o: dict[str, Any], side: int) -> tuple[float, float, float]:
    """Object ``o``'s centre and radius on a ``side`` x ``side`` canvas (the render geometry)."""
    row, col = divmod(CELLS.index(o["position"]), 3)
    cell = side / 3
    diameter = SIZES[o["size"]] * side
    room = 0.8 * (cell - diameter) / 2
    return (col + 0.5) * cell + o["jitter"][0] * room, (row + 0.5) * cell + o["jitter"][1] * room, diameter / 2


def _draw_shape(draw: ImageDraw.ImageDraw, o: dict[str, Any], side: int, fill: Any, outline: Any, width: int) -> None:
    cx, cy, r = _placement(o, side)
    if o["shape"] == "circle":
        draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=fill, outline=outline, width=width)
    else:
        draw.polygon(_polygon(o["shape"], cx, cy, r), fill=fill, outline=outline, width=width)


def render_scene(scene: dict[str, Any], image_size: int) -> Image.Image:
    """Render a scene as an RGB ``image_size`` x ``image_size`` image (drawn at 2x, then averaged down)."""
    side = 2 * image_size
    img = Image.new("RGB", (side, side), BACKGROUNDS[scene["background"]][0])
    draw = ImageDraw.Draw(img)
    for o in scene["objects"]:
        r, rgb = _placement(o, side)[2], COLOURS[o["colour"]]
        solid = o["fill"] == "solid"
        width = 1 if solid else round(max(0.32 * r, side / 32))
        fill, outline = (rgb, None) if solid else (None, rgb)
        _draw_shape(draw, o, side, fill, outline, width)
    return img.reduce(2)  # 2x2 box-filter supersampling: cheap anti-aliasing


def render_outlines(scene: dict[str, Any], image_size: int, line_width: int = 2) -> Image.Image:
    """The scene's exact edge map: every object's outline (``line_width`` px at the 2x render scale, white on
    black), drawn with the render geometry and averaged down as :func:`render_scene` is; a greyscale image."""
    side = 2 * image_size
    img = Image.new("L", (side, side), 0)
    draw = ImageDraw.Draw(img)
    for o in scene["objects"]:
        _draw_shape(draw, o, side, None, 255, line_width)
    return img.reduce(2)


def object_box(scene: dict[str, Any], object_id: str, image_size: int) -> tuple[float, float, float, float]:
    """Object ``object_id``'s box ``(x1, y1, x2, y2)`` in the pixels of the ``image_size`` image: its centre
    plus and minus its radius (every shape lies inside that square), halved from the 2x render scale."""
    o = next((o for o in scene["objects"] if o["id"] == object_id), None)
    if o is None:
        raise SynthDenseError(f"scene has no object {object_id!r}")
    cx, cy, r = _placement(o, 2 * image_size)
    return (max(0.0, (cx - r) / 2), max(0.0, (cy - r) / 2), min(float(image_size), (cx + r) / 2),
            min(float(image_size), (cy + r) / 2))


# ------------------------------------------------------------------------------------- generation
def _existing_is_complete(out_dir: Path, fingerprint: str) -> bool:
    """True if out_dir already holds this exact benchmark; False if absent or an empty dir; else raise."""
    if not out_dir.exists() or (out_dir.is_dir() and not any(out_dir.iterdir())):
        return False
    try:
        meta = json.loads((out_dir / MANIFEST).read_text())
        splits = meta["splits"]
    except (OSError, ValueError, KeyError, TypeError):
        raise SynthDenseError(f"{out_dir} exists but is not a complete synthdense benchmark (no valid {MANIFEST}); "
                              "remove it or pass another out_dir") from None
    if meta.get("fingerprint") != fingerprint:
        raise SynthDenseError(f"{out_dir} holds a synthdense benchmark with fingerprint {meta.get('fingerprint')!r}, "
                              f"but this config's is {fingerprint!r}; remove it or pass another out_dir")
    missing = [s for s in splits if not (out_dir / s / "metadata.jsonl").is_file()]
    if missing:
        raise SynthDenseError(f"{out_dir} is an incomplete synthdense benchmark (missing splits {missing})")
    return True


def _write_split(root: Path, split: str, cfg: SynthDenseConfig, bar: tqdm[Any]) -> int:
    (root / split / "images").mkdir(parents=True)
    width = max(5, len(str(cfg.n_families[split] - 1)))
    rows: list[dict[str, Any]] = []
    for f in range(cfg.n_families[split]):
        rng = _family_rng(cfg.seed, split, f)
        base = _base_scene(rng, cfg)
        seen = {json.dumps(base, sort_keys=True)}
        members: list[tuple[dict[str, Any], list[str]]] = [(base, [])] + [_variant(rng, base, cfg, seen) for _ in range(cfg.family_size - 1)]
        family = f"{split}-f{f:0{width}d}"
        for v, (scene, changes) in enumerate(members):
            item_id = f"{family}-v{v}"
            render_scene(scene, cfg.image_size).save(root / split / "images" / f"{item_id}.png", format="PNG")
            rows.append({"file_name": f"images/{item_id}.png", "id": item_id, "caption": scene_caption(scene),
                         "family": family, "variant": v, "changes": changes, "scene": scene})
            bar.update(1)
    rows.sort(key=lambda r: r["id"])
    with open(root / split / "metadata.jsonl", "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)
    return len(rows)


def generate_synthdense(out_dir: str | Path, config: SynthDenseConfig = SynthDenseConfig(), *,
                        progress: bool = False) -> Path:
    """Write the benchmark to out_dir and return out_dir.

    Reuses an out_dir that already holds the same config (same fingerprint); raises SynthDenseError (a
    ValueError) if out_dir holds anything else. Writes into a hidden sibling directory and renames it into
    place at the end, so an interrupted run never leaves a complete-looking out_dir.
    """
    out_dir = Path(out_dir)
    fp = config.fingerprint()
    total = sum(config.n_families.values()) * config.family_size
    counts: dict[str, int] = {}

    def write(tmp: Path) -> None:
        with tqdm(total=total, desc="synthdense", unit="img", disable=not progress) as bar:
            counts.update({split: _write_split(tmp, split, config, bar) for split in config.n_families})
        manifest = {"config": config.to_dict(), "fingerprint": fp, "splits": counts, "version": VERSION}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")

    if _write_atomically(out_dir, fp, write):
        logger.info("generated synthdense %s at %s (%s images)", fp, out_dir, counts)
    return out_dir


def _write_atomically(out_dir: Path, fp: str, write: Callable[[Path], None]) -> bool:
    """Have ``write`` fill a hidden sibling of out_dir (ending with the manifest of fingerprint ``fp``) and rename
    it into place; False (nothing written) when out_dir already holds ``fp``. An interrupted run never leaves a
    complete-looking out_dir; a concurrent run that finished first wins."""
    if _existing_is_complete(out_dir, fp):
        logger.info("synthdense %s already present at %s", fp, out_dir)
        return False
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.parent / f".{out_dir.name}.partial-{os.getpid()}-{secrets.token_hex(4)}"
    tmp.mkdir()
    try:
        write(tmp)
        if out_dir.is_dir() and not any(out_dir.iterdir()):
            out_dir.rmdir()
        try:
            os.replace(tmp, out_dir)
        except OSError:
            if _existing_is_complete(out_dir, fp):  # a concurrent run finished first
                shutil.rmtree(tmp, ignore_errors=True)
                return False
            raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return True


# ---------------------------------------------------------------------- Flickr30k's layout (issue 23)
FLICKR_TOKEN = "results_20130124.token"
FLICKR_KARPATHY = "dataset_flickr30k.json"
FLICKR_LAYOUT = "flickr30k-full"
FLICKR_CAPTIONS = 5


def flickr_captions(scene: dict[str, Any]) -> list[str]:
    """Flickr30k's five captions of one scene: :func:`scene_caption`, then four with one sentence left out (the
    2nd, 3rd, 4th, 5th: an object or the empty cells), so each still describes the image and no two are equal."""
    texts = [s.text for s in caption_sentences(scene)]
    return [" ".join(texts)] + [" ".join(texts[:k] + texts[k + 1:]) for k in range(1, FLICKR_CAPTIONS)]


def generate_flickr30k(out_dir: str | Path, n_images: int = 31783, config: SynthDenseConfig = SynthDenseConfig(
        image_size=64), *, progress: bool = False) -> Path:
    """Write ``n_images`` synthdense scenes in Flickr30k's release layout and return out_dir.

    ``flickr30k-images/<name>.jpg`` (JPEG, ``config.image_size`` px), ``results_20130124.token``, five lines an
    image (``<name>.jpg#k<TAB>caption``, :func:`flickr_captions`), which the ``flickr30k`` benchmark's ``full``
    protocol reads, and Karpathy's ``dataset_flickr30k.json`` with the same captions (the first 1,000 images
    ``test``, the next 1,014 ``val``, the rest ``train``: the real counts at 31,783), which its ``karpathy-test``
    and ``karpathy-val`` protocols read. Scene ``i`` is an independent base scene (no families: Flickr30k has no near-duplicate sets)
    from ``config.seed``; the images are a pure function of (config, n_images). Reuses an out_dir that holds
    the same set, refuses one holding anything else, and writes atomically, as :func:`generate_synthdense`.
    """
    out_dir = Path(out_dir)
    if n_images < 1:
        raise SynthDenseError(f"n_images must be >= 1, got {n_images}")
    blob = json.dumps({"config": config.to_dict(), "files": [FLICKR_TOKEN, FLICKR_KARPATHY], "layout": FLICKR_LAYOUT,
                       "n_images": n_images, "version": VERSION}, sort_keys=True, separators=(",", ":"))
    fp = hashlib.sha256(blob.encode()).hexdigest()[:16]

    def write(tmp: Path) -> None:
        (tmp / "flickr30k-images").mkdir()
        lines, entries = [], []
        for i in tqdm(range(n_images), desc="flickr30k (synthdense)", unit="img", disable=not progress):
            scene, name = _base_scene(_family_rng(config.seed, FLICKR_LAYOUT, i), config), f"{1000000000 + i}.jpg"
            render_scene(scene, config.image_size).save(tmp / "flickr30k-images" / name, format="JPEG", quality=90)
            captions = flickr_captions(scene)
            lines += [f"{name}#{k}\t{c}\n" for k, c in enumerate(captions)]
            ids = range(FLICKR_CAPTIONS * i, FLICKR_CAPTIONS * (i + 1))
            entries.append({"filename": name, "imgid": i, "sentids": list(ids),
                            "split": "test" if i < 1000 else "val" if i < 2014 else "train",
                            "sentences": [{"imgid": i, "raw": c, "sentid": j, "tokens": c.lower().rstrip(".").split()}
                                          for j, c in zip(ids, captions)]})
        (tmp / FLICKR_TOKEN).write_text("".join(lines), encoding="utf-8")
        (tmp / FLICKR_KARPATHY).write_text(json.dumps({"dataset": "flickr30k", "images": entries}), encoding="utf-8")
        manifest = {"config": config.to_dict(), "fingerprint": fp, "layout": FLICKR_LAYOUT, "n_images": n_images,
                    "splits": {}, "version": VERSION}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")

    if _write_atomically(out_dir, fp, write):
        logger.info("generated %d flickr30k-layout synthdense images at %s", n_images, out_dir)
    return out_dir
