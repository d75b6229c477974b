"""ARO (Attribution, Relation, Order; Yuksekgonul et al., ICLR'23; code MIT): VG-Relation, VG-Attribution,
COCO-Order and Flickr30k-Order, read from one data root (``mertyg/vision-language-models-are-bows@81fdd20d``)::

    vg/visual_genome_relation.json  vg/visual_genome_attribution.json  vg/images/   (vgr_vga_images.zip)
    coco/coco_karpathy_test.json    coco/order_options_test.jsonl      coco/val2014/ (or val2017/ + train2017/)
    flickr30k/flickr30k_test.json   flickr30k/order_options_test.jsonl flickr30k/flickr30k-images/

**VG-*** (``dataset_zoo/aro_datasets.py``): each record's image is ``convert('RGB')``-ed and cropped to
``(x, y, x + w, y + h)`` first; the options are ``[false_caption, true_caption]`` and the pick is numpy's argmax, so
an item is right iff ``s(true) > s(false)`` (a tie is wrong). VG-Relation's number is the macro accuracy over
``relation_name`` without the authors' symmetric relations (:data:`SYMMETRIC_RELATIONS`, copied from their
notebook); VG-Attribution's over the attribute pairs ``f"{a0}_{a1}"`` with at least 25 items. The micro accuracy
is reported beside, never as the ARO number.

**Order**: the authors generate the five options of each (image, caption) case at load time from the Karpathy test
annotations with seeded spaCy / nltk / numpy perturbations, so they depend on the seed, the iteration order and
the library versions. hnbench never regenerates them: it reads ``order_options_test.jsonl``, the options
materialised once (one case a line: ``image``, ``correct_caption``, ``hard_text_1`` … ``hard_text_4``, MTEB's
field names), checks its sha256 against the pinned one and each case against the Karpathy test file (its image
is a test image, its correct caption one of that image's captions as the authors' :func:`pre_caption` gives them),
and records the hash as the set's fingerprint. The true caption is option 0 and the pick is argmax: a tie with the
true caption counts as right (Precision@1, micro).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hnbench.data.benchmarks.protocol import LoadContext
from hnbench.data.benchmarks.spec import BenchmarkSpec, Resource
from hnbench.data.choices import (
    ChoiceBuilder,
    ChoiceProtocol,
    ImageRef,
    choice_protocol,
    image_ref,
    image_size,
    read_json_file,
)
from hnbench.errors import DataError
from hnbench.io import Problems, read_rows
from hnbench.metrics.choice import Aggregation, Scoring

REPO, COMMIT = "mertyg/vision-language-models-are-bows", "81fdd20dc5b6f434aa5a4a971717bc80d1cedb0d"
NOTEBOOK = "notebooks/Replicate ARO! VG-Relation, VG-Attribution.ipynb"
SYMMETRIC_SOURCE = f"the authors' symmetric relations: {REPO}@{COMMIT[:8]}, {NOTEBOOK}"
# Copied as data from the notebook's `symmetric` list (its order kept): VG-Relation's macro accuracy leaves these out.
SYMMETRIC_RELATIONS = (
    "adjusting", "attached to", "between", "bigger than", "biting", "boarding", "brushing", "chewing", "cleaning",
    "climbing", "close to", "coming from", "coming out of", "contain", "crossing", "dragging", "draped over",
    "drinking", "drinking from", "driving", "driving down", "driving on", "eating from", "eating in", "enclosing",
    "exiting", "facing", "filled with", "floating in", "floating on", "flying", "flying above", "flying in",
    "flying over", "flying through", "full of", "going down", "going into", "going through", "grazing in",
    "growing in", "growing on", "guiding", "hanging from", "hanging in", "hanging off", "hanging over",
    "higher than", "holding onto", "hugging", "in between", "jumping off", "jumping on", "jumping over", "kept in",
    "larger than", "leading", "leaning over", "leaving", "licking", "longer than", "looking in", "looking into",
    "looking out", "looking over", "looking through", "lying next to", "lying on top of", "making", "mixed with",
    "mounted on", "moving", "on the back of", "on the edge of", "on the front of", "on the other side of", "opening",
    "painted on", "parked at", "parked beside", "parked by", "parked in", "parked in front of", "parked near",
    "parked next to", "perched on", "petting", "piled on", "playing", "playing in", "playing on", "playing with",
    "pouring", "reaching for", "reading", "reflected on", "riding on", "running in", "running on",
    "running through", "seen through", "sitting behind", "sitting beside", "sitting by", "sitting in front of",
    "sitting near", "sitting next to", "sitting under", "skiing down", "skiing on", "sleeping in", "sleeping on",
    "smiling at", "sniffing", "splashing", "sprinkled on", "stacked on", "standing against", "standing around",
    "standing behind", "standing beside", "standing in front of", "standing near", "standing next to", "staring at",
    "stuck in", "surrounding", "swimming in", "swinging", "talking to", "topped with", "touching", "traveling down",
    "traveling on", "tying", "typing on", "underneath", "wading in", "waiting for", "walking across", "walking by",
    "walking down", "walking next to", "walking through", "working in", "working on", "worn on", "wrapped around",
    "wrapped in", "by", "of", "near", "next to", "with", "beside", "on the side of", "around",
)
MIN_PAIR_ITEMS = 25  # VG-Attribution: attribute pairs with fewer items are left out (evaluate_scores)
VG_RELATION, VG_ATTRIBUTION = "visual_genome_relation.json", "visual_genome_attribution.json"
N_RELATION, N_ATTRIBUTION = 23937, 28748  # MTEB's descriptive statistics / its dataset cards
ORDER_FILE = "order_options_test.jsonl"
HARD = tuple(f"hard_text_{k}" for k in range(1, 5))
ORDER_ROLES = ("correct_caption", *HARD)
VG_ROLES = ("true_caption", "false_caption")
SFR = "https://storage.googleapis.com/sfr-vision-language-research/datasets"
# sha256 of each materialised options file (folder → hash): None until it is generated and published; an unpinned
# file is read, its hash recorded with the result and a warning given. A file whose hash differs from a pinned one
# is refused.
ORDER_SHA256: dict[str, str | None] = {"coco": None, "flickr30k": None}
ORDER_COUNTS = {"coco": 25010, "flickr30k": 5000}  # cases: 5,000 / 1,000 images (MTEB's descriptive statistics)
BOX = ("bbox_x", "bbox_y", "bbox_w", "bbox_h")
COCO2014 = re.compile(r"COCO_(?:val|train)2014_(\d{12})\.jpg")

_PRE_PUNCT = re.compile(r"([.!\"()*#:;~])")
_PRE_SPACES = re.compile(r"\s{2,}")


def pre_caption(caption: str, max_words: int = 30) -> str:
    """The authors' ``pre_caption`` (``dataset_zoo/retrieval.py``): lower-case, each of ``. ! " ( ) * # : ; ~`` a
    space, runs of whitespace one space, trailing newline and spaces stripped, the first ``max_words`` words."""
    caption = _PRE_PUNCT.sub(" ", caption.lower())
    caption = _PRE_SPACES.sub(" ", caption)
    caption = caption.rstrip("\n").strip(" ")
    words = caption.split(" ")
    return " ".join(words[:max_words]) if len(words) > max_words else caption


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def read_vg(root: Path, proto: ChoiceProtocol, ctx: LoadContext) -> ChoiceBuilder:
    """VG-Relation or VG-Attribution (``proto.options["file"]``): every record, its box checked against its image
    (``w, h > 0``, inside it), cropped to it where the protocol crops (see the module)."""
    folder = root / "vg"
    name = str(proto.options["file"])
    path = folder / name
    data = read_json_file(path, ctx.name, f"ARO's {name} (Google Drive, {REPO}'s dataset_zoo/aro_datasets.py)")
    if not isinstance(data, list):
        raise DataError(f"{ctx.name}: {path} is a JSON {type(data).__name__}, not ARO's list of test cases")
    images = folder / "images"
    if not images.is_dir():
        raise DataError(f"{ctx.name}: no vg/images/ under {root} (vgr_vga_images.zip unpacked, as "
                        "aro_datasets.py's download does)")
    b = ChoiceBuilder(ctx.name, ("image",), VG_ROLES, ctx)
    b.file(path, None, f"{REPO}, Google Drive file of dataset_zoo/aro_datasets.py")
    relation = proto.options["kind"] == "relation"
    sizes: dict[str, tuple[int, int] | None] = {}
    for i, rec in enumerate(data):
        where = f"{name}[{i}]"
        if not isinstance(rec, dict):
            b.invalid(where, f"a {type(rec).__name__}, not a test case", "malformed record")
            continue
        image = rec.get("image_path")
        raw: list[Any] = [rec.get(k) for k in BOX]
        texts = [b.check_text(where, rec, k) for k in VG_ROLES]
        if not isinstance(image, str) or not image:
            b.invalid(where, "no 'image_path'", "missing field")
            continue
        if not all(_number(v) for v in raw):
            b.invalid(where, f"bbox {dict(zip(BOX, raw))} is not four numbers", "bad bbox")
            continue
        box: tuple[float, ...] = tuple(raw)  # as given (ints in the release): PIL's crop reads them as they are
        x, y, w, h = (float(v) for v in box)
        if w <= 0 or h <= 0:
            b.invalid(where, f"bbox has width {w:g} and height {h:g} (both must be > 0)", "bad bbox")
            continue
        if relation:
            group = rec.get("relation_name")
            if not isinstance(group, str) or not group:
                b.invalid(where, "no 'relation_name'", "missing field")
                continue
        else:
            pair = rec.get("attributes")
            if not isinstance(pair, list) or len(pair) != 2 or not all(isinstance(a, str) for a in pair):
                b.invalid(where, f"attributes {pair!r} is not a list of two attributes", "bad attributes")
                continue
            group = f"{pair[0]}_{pair[1]}"
        if texts[0] is None or texts[1] is None:
            continue
        if texts[0] == texts[1]:
            b.invalid(where, "true_caption equals false_caption", "caption equals negative")
            continue
        ref = image_ref(root, images, image, where, ctx, box=box if proto.crop else None)
        if ref.path not in sizes:
            sizes[ref.path] = image_size(ref.path) if os.path.isfile(ref.path) else None
        size = sizes[ref.path]
        if size is not None and (x < 0 or y < 0 or x + w > size[0] or y + h > size[1]):
            b.invalid(where, f"bbox ({x:g}, {y:g}, {w:g}, {h:g}) lies outside the {size[0]}×{size[1]} image {image}",
                      "bad bbox")
            continue
        b.add(f"{path.stem}/{i}", [ref], [texts[0], texts[1]], name,
              {"relation_name" if relation else "attributes": group})
    return b


def _order_image(folder: Path, image: str, root: Path, where: str, ctx: LoadContext) -> ImageRef:
    """The case's image under ``folder``; a COCO 2014 name not there is looked up by id in ``val2017/`` and
    ``train2017/`` (the same images, renamed ``000000xxxxxx.jpg``)."""
    ref = image_ref(root, folder, image, where, ctx)
    m = COCO2014.fullmatch(os.path.basename(image))
    if os.path.isfile(ref.path) or m is None:
        return ref
    for sub in ("val2017", "train2017"):
        alt = folder / sub / f"{m.group(1)}.jpg"
        if alt.is_file():
            return ImageRef(str(alt), ref.id)
    return ref


def read_order(root: Path, proto: ChoiceProtocol, ctx: LoadContext) -> ChoiceBuilder:
    """COCO-Order or Flickr30k-Order from the materialised options file, each case checked against the Karpathy test
    annotations (see the module)."""
    opts: Mapping[str, Any] = proto.options
    folder = root / str(opts["folder"])
    karpathy, val = folder / str(opts["karpathy"]), folder / str(opts["karpathy_val"])
    if not karpathy.is_file():
        if val.is_file():
            raise DataError(f"{ctx.name}: {val} is the Karpathy val split; {proto.name} is scored on the test split, "
                            f"{karpathy.name} ({SFR}/{karpathy.name})")
        raise DataError(f"{ctx.name}: {karpathy} not found (the Karpathy test annotations, {SFR}/{karpathy.name})")
    ann = read_json_file(karpathy, ctx.name, "the Karpathy test annotations")
    if not isinstance(ann, list) or not all(isinstance(e, dict) and isinstance(e.get("image"), str)
                                            and isinstance(e.get("caption"), list) for e in ann):
        raise DataError(f"{ctx.name}: {karpathy} is not a list of {{image, caption: [...]}} entries (BLIP's Karpathy "
                        "file)")
    captions = {e["image"]: {pre_caption(c) for c in e["caption"] if isinstance(c, str)} for e in ann}
    options = folder / ORDER_FILE
    if not options.is_file():
        raise DataError(f"{ctx.name}: {options} not found: the five options of each case, materialised once with the "
                        f"authors' perturbations ({REPO}@{COMMIT[:8]}, dataset_zoo/perturbations.py, seed_all(1)); "
                        "hnbench never regenerates them on the fly")
    b = ChoiceBuilder(ctx.name, ("image",), ORDER_ROLES, ctx)
    b.file(options, ORDER_SHA256[str(opts["folder"])], f"hnbench's pinned {opts['folder']}/{ORDER_FILE}", strict=True)
    problems = Problems(str(options))
    rows, lines = read_rows(options, problems)
    problems.check()
    seen: dict[str, int] = {}
    for r, n in zip(rows, lines):
        where = f"{ORDER_FILE}:{n}"
        lacking = [k for k in ("image", *ORDER_ROLES) if not isinstance(r.get(k), str)]
        if lacking:
            b.refuse(where, f"no {', '.join(map(repr, lacking))} text (each case has an image, the correct caption "
                            "and 4 hard texts)")
            continue
        image = r["image"]
        if image not in captions:
            b.refuse(where, f"image {image!r} is not in {karpathy.name} (the options come from another split?)")
            continue
        if r["correct_caption"] not in captions[image]:
            b.refuse(where, f"correct_caption {r['correct_caption'][:60]!r} is none of the image's captions in "
                            f"{karpathy.name} (pre_caption'd)")
            continue
        k = seen[image] = seen.get(image, -1) + 1
        b.add(f"{image}#{k}", [_order_image(folder, image, root, where, ctx)], [r[role] for role in ORDER_ROLES],
              ORDER_FILE)
    return b


def _vg(name: str, kind: str, file: str, n: int, official: bool) -> ChoiceProtocol:
    """A VG protocol: official (options [false, true], argmax: ties wrong; macro; cropped) or MTEB's ([true, false],
    argmax: ties right; micro; not cropped)."""
    if official:
        agg = (Aggregation("relation_name", SYMMETRIC_RELATIONS, exclude_source=SYMMETRIC_SOURCE) if kind == "relation"
               else Aggregation("attributes", min_count=MIN_PAIR_ITEMS))
        scoring = Scoring("option", ("false_caption", "true_caption"), "true_caption", "argmax_first", agg)
        text = ("options [false_caption, true_caption], argmax (right iff s(true) > s(false): ties wrong), image "
                "cropped to the box; " + ("macro over relation_name without the authors' symmetric relations"
                                          if kind == "relation" else f"macro over attribute pairs with ≥ "
                                                                     f"{MIN_PAIR_ITEMS} items"))
    else:
        scoring = Scoring("option", ("true_caption", "false_caption"), "true_caption", "argmax_first")
        text = ("MTEB's: options [true_caption, false_caption], argmax (a tie counts as right), micro, no symmetric "
                "or ≥ 25 filter, the image not cropped (MTEB's evaluator does not crop)")
    field = "relation_name" if kind == "relation" else "attributes"
    return choice_protocol(name, "hnbench.data.benchmarks.aro:read_vg", scoring, {file: n}, text,
                           options={"file": file, "kind": kind}, crop=official, breakdown=(field,) if official else (),
                           official=official)


def _order(name: str, folder: str, karpathy: str, karpathy_val: str) -> ChoiceProtocol:
    return choice_protocol(
        name, "hnbench.data.benchmarks.aro:read_order",
        Scoring("option", ORDER_ROLES, "correct_caption", "argmax_first"), {ORDER_FILE: ORDER_COUNTS[folder]},
        f"{folder}/{ORDER_FILE}: Precision@1 = mean 1[argmax_k s(I, option_k) = 0] with the true caption first (a tie "
        "with it counts as right), micro",
        options={"folder": folder, "karpathy": karpathy, "karpathy_val": karpathy_val})


_DRIVE = "Google Drive id {}: gdown --id {} (dataset_zoo/aro_datasets.py), then pass --local FILE"

SPEC = BenchmarkSpec(
    name="aro",
    title="ARO: Attribution, Relation and Order (VG-Relation, VG-Attribution, COCO-Order, Flickr30k-Order)",
    publisher="Yuksekgonul, Bianchi, Kalluri, Jurafsky, Zou (Stanford)",
    homepage=f"https://github.com/{REPO}",
    license="MIT (code); Visual Genome / GQA images CC BY 4.0 (unverified for the zip); COCO and Flickr30k terms",
    # As the repository's README gives it.
    citation="""@inproceedings{
  yuksekgonul2023when,
  title={When and why Vision-Language Models behave like  Bags-of-Words, and what to do about it?},
  author={Mert Yuksekgonul and Federico Bianchi and Pratyusha   Kalluri and Dan Jurafsky and James Zou},
  booktitle={International Conference on Learning Representations},
  year={2023},
  url={https://openreview.net/forum?id=KRLUvxh8uaX}
}""",
    layout="vg/ (visual_genome_relation.json, visual_genome_attribution.json, images/), coco/ (coco_karpathy_test.json, "
           f"{ORDER_FILE}, val2014/) and flickr30k/ (flickr30k_test.json, {ORDER_FILE}, flickr30k-images/)",
    protocols=(
        _vg("vg-relation", "relation", VG_RELATION, N_RELATION, True),
        _vg("vg-attribution", "attribution", VG_ATTRIBUTION, N_ATTRIBUTION, True),
        _order("coco-order", "coco", "coco_karpathy_test.json", "coco_karpathy_val.json"),
        _order("flickr30k-order", "flickr30k", "flickr30k_test.json", "flickr30k_val.json"),
        _vg("vg-relation-mteb", "relation", VG_RELATION, N_RELATION, False),
        _vg("vg-attribution-mteb", "attribution", VG_ATTRIBUTION, N_ATTRIBUTION, False),
    ),
    default_protocol="vg-relation",
    resources=(
        Resource(VG_RELATION, manual=_DRIVE.format(*["1kX2iCHEv0CADL8dSO1nMdW-V0NqIAiP3"] * 2), into="vg"),
        Resource(VG_ATTRIBUTION, manual=_DRIVE.format(*["13tWvOrNOLHxl3Rm9cR3geAdHx2qR3-Tw"] * 2), into="vg"),
        Resource("vgr_vga_images.zip", manual=_DRIVE.format(*["1qaPlrwhGNMrR3a11iopZUT_GPP_LrgP9"] * 2), into="vg",
                 extract=True),
        Resource("coco_karpathy_test.json", url=f"{SFR}/coco_karpathy_test.json", into="coco"),
        Resource("flickr30k_test.json", url=f"{SFR}/flickr30k_test.json", into="flickr30k"),
        Resource(ORDER_FILE, manual="the materialised Order options (one per folder, coco/ and flickr30k/): not "
                                    "published by hnbench yet; see datasets/aro.md", into="coco", optional=True),
        Resource("val2014.zip", url="http://images.cocodataset.org/zips/val2014.zip", extract=True, into="coco",
                 optional=True),
    ),
    notes="The Order protocols read options materialised once (never regenerated); the VG protocols crop to the box. "
          "The -mteb protocols are MTEB's rules (micro, ties right, no crop), to compare with its published numbers.",
    task="choice",
)
