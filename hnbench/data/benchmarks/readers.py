"""Readers for the benchmarks' published file formats, shared by every spec that uses them.

Each reader takes the data root, a :class:`~hnbench.data.benchmarks.protocol.Protocol` and a
:class:`~hnbench.data.benchmarks.protocol.LoadContext`, and returns ``(image_id, image_path, [caption])``
records in the order the reference code uses. Caption text is made by the protocol's named rule in
:data:`hnbench.registry.CAPTION_RULES`, so the rule that ran is recorded with the result.
"""

from __future__ import annotations

import csv
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tqdm import tqdm

from hnbench.data.benchmarks.protocol import LoadContext, Protocol
from hnbench.errors import DataError
from hnbench.io import allow_long_csv_fields, loads_json, sha256_file
from hnbench.registry import CAPTION_RULES

logger = logging.getLogger(__name__)

Record = tuple[str, str, list[str]]
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp")
DCI_RELEASE = "DCI's dci.tar.gz (`hnbench datasets download dci`)"
DCI_PHOTOS = ("DCI's photos are SA-1B archive sa_000138.tar (accept SA-1B's terms at "
              "https://ai.meta.com/datasets/segment-anything-downloads/), unpacked into "
              "densely_captioned_images/photos/ (`hnbench datasets download dci --local sa_000138.tar`)")


def _description(row: dict[str, Any]) -> str:
    """DOCCI's ``description`` field, raw (no cleaning, as in the reference code)."""
    text: str = row["description"]
    return text


def _first_nonempty_line(text: str) -> str:
    """The caption file's first line that is not blank, without surrounding whitespace (as GOAL's list has it)."""
    return next((line.strip() for line in text.split("\n") if line.strip()), "")


def _longclip_first_line(text: str) -> str:
    """``open(f).readlines()[0]`` verbatim, line break included (Long-CLIP's and TULIP's Urban-1K loaders):
    a file whose first line is blank gives an empty query."""
    end = text.find("\n")
    return text if end < 0 else text[: end + 1]


def _longclip_first_line_sentences(text: str) -> str:
    """``readlines()[0]``, its sentences split and re-joined with ". " (LoTLIP's Urban-1K loader,
    ``dataloaders/urban1k.py``): the blank first line of a file gives an empty query, as Long-CLIP's."""
    return rejoin_sentences(_longclip_first_line(text))


def _short_extra(ann: dict[str, Any]) -> str:
    """DCI ``short_caption + "\\n" + extra_caption`` (DCI's "extended" caption)."""
    return f"{ann['short_caption']}\n{ann['extra_caption']}"


def rejoin_sentences(text: str) -> str:
    """``text`` split on newlines / "</s>" / "." and re-joined with ". ", empty pieces dropped (LoTLIP, FLAIR)."""
    parts = re.split(r"\n|</s>|[.]", text)
    return ". ".join(p.strip() for p in parts if p.strip())


def _sentences(ann: dict[str, Any]) -> str:
    """DCI short + "\\n" + extra, split on newlines / "</s>" / "." and re-joined with ". " (LoTLIP, FLAIR)."""
    return rejoin_sentences(_short_extra(ann))


def _extra(ann: dict[str, Any]) -> str:
    """DCI ``extra_caption`` alone, raw (GOAL, TULIP's Long-DCI)."""
    text: str = ann["extra_caption"]
    return text


def _raw(text: str) -> str:
    """The caption string exactly as the release has it (no cleaning)."""
    return text


def _newline_space(text: str) -> str:
    """Every "\\n" replaced by a space, nothing else changed (Long-CLIP's ``caption.replace("\\n", " ")``)."""
    return text.replace("\n", " ")




def find_dir(root: Path, candidates: tuple[str, ...], marker: str, what: str) -> Path:
    """The first ``root/candidate`` holding ``marker``; an error saying what was expected otherwise."""
    for c in candidates:
        if (root / c / marker).exists():
            return root / c
    looked = ", ".join(str(root / c / marker) for c in candidates)
    raise DataError(f"{what} not found under {root} (looked for {looked})")


def require_dir(path: Path, name: str, how: str) -> Path:
    if not path.is_dir():
        raise DataError(f"{name}: {path} not found; {how}")
    return path


def _load_json(path: Path, ctx: LoadContext, what: str) -> dict[str, Any] | None:
    try:
        data = loads_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        ctx.invalid(str(path), f"{what} not found", f"missing {what}")
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        ctx.invalid(str(path), f"malformed {what} ({e})", f"malformed {what}")
        return None
    if not isinstance(data, dict):
        ctx.invalid(str(path), f"malformed {what} (expected a JSON object)", f"malformed {what}")
        return None
    return data


def _fields_ok(obj: dict[str, Any], keys: tuple[str, ...], where: str, ctx: LoadContext, what: str) -> bool:
    bad = [k for k in keys if not isinstance(obj.get(k), str)]
    if bad:
        ctx.invalid(where, f"malformed {what}: no string field(s) {bad}", f"malformed {what}")
    return not bad


def jsonl_objects(path: Path, ctx: LoadContext) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each non-blank line of a JSON-lines file as ``(path:line, object)``; a line that is not a JSON object is a bad
    item (:meth:`LoadContext.invalid`: an error naming it, or a counted skip)."""
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = loads_json(line)
            except json.JSONDecodeError as e:
                ctx.invalid(f"{path}:{n}", f"malformed annotation line ({e.msg})", "malformed annotation")
                continue
            if not isinstance(row, dict):
                ctx.invalid(f"{path}:{n}", "malformed annotation line (not a JSON object)", "malformed annotation")
                continue
            yield f"{path}:{n}", row


# --- DOCCI ---------------------------------------------------------------------------------------
def read_docci(root: Path, protocol: Protocol, ctx: LoadContext) -> list[Record]:
    """``docci_descriptions.jsonlines`` rows whose ``split`` is in the protocol's splits, file order."""
    base = find_dir(root, ("", "docci"), "docci_descriptions.jsonlines", "DOCCI's docci_descriptions.jsonlines")
    path, splits = base / "docci_descriptions.jsonlines", set(protocol.options["splits"])
    rule = CAPTION_RULES.get(protocol.caption)
    require_dir(base / "images", ctx.name, "the images are docci_images.tar.gz (`hnbench datasets download docci`)")
    records = []
    for where, row in jsonl_objects(path, ctx):
        if not _fields_ok(row, ("example_id", "split", "image_file", "description"), where, ctx, "annotation line"):
            continue
        if row["split"] in splits:
            records.append((row["example_id"], str(base / "images" / row["image_file"]), [rule(row)]))
    ctx.meta["splits"] = sorted(splits)
    return records


# --- DCI -----------------------------------------------------------------------------------------
def dci_dir(root: Path) -> Path:
    return find_dir(root, ("densely_captioned_images", ""), "annotations", f"DCI annotations/ (from {DCI_RELEASE})")


def _dci_record(ann_path: Path, photos: Path, protocol: Protocol, ctx: LoadContext,
                ann: dict[str, Any] | None = None) -> Record | None:
    ann = ann if ann is not None else _load_json(ann_path, ctx, "annotation")
    keys = ("image", "short_caption", "extra_caption")
    if ann is None or not _fields_ok(ann, keys, str(ann_path), ctx, "annotation"):
        return None
    return Path(ann["image"]).stem, str(photos / ann["image"]), [CAPTION_RULES.get(protocol.caption)(ann)]


def read_dci_splits(root: Path, protocol: Protocol, ctx: LoadContext) -> list[Record]:
    """Every annotation named in ``splits.json`` (train, valid, test, in the file's order), as LoTLIP does;
    annotation files in no split are not read."""
    base = dci_dir(root)
    require_dir(base / "photos", ctx.name, DCI_PHOTOS)
    splits_path = base / "splits.json"
    if not splits_path.is_file():
        raise DataError(f"dci: {splits_path} not found; it ships in {DCI_RELEASE}")
    try:
        splits = loads_json(splits_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataError(f"dci: {splits_path}: malformed ({e})") from e
    if not isinstance(splits, dict) or not all(isinstance(v, list) for v in splits.values()):
        raise DataError(f"dci: {splits_path}: expected {{split: [annotation file, ...]}}")
    names = [name for names in splits.values() for name in names]
    records = [_dci_record(base / "annotations" / name, base / "photos", protocol, ctx)
               for name in tqdm(names, desc=f"{ctx.name}: annotations", unit="file", disable=not ctx.progress)]
    ctx.meta["splits"] = {k: len(v) for k, v in splits.items()}
    return [r for r in records if r is not None]


def _annotations(annotations: Path, ctx: LoadContext) -> Iterator[tuple[Path, dict[str, Any] | str]]:
    """Each ``annotations/*.json`` in sorted file-name order (TULIP's order) with its parsed object, or why not."""
    files = sorted(annotations.glob("*.json"))
    for path in tqdm(files, desc=f"{ctx.name}: annotations", unit="file", disable=not ctx.progress):
        try:
            ann = loads_json(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            yield path, f"malformed annotation ({e})"
            continue
        yield path, ann if isinstance(ann, dict) else "malformed annotation (expected a JSON object)"


def read_dci_lists(root: Path, protocol: Protocol, ctx: LoadContext) -> list[Record]:
    """The images of the protocol's split lists (GOAL), matched to DCI annotations on the photo's file name.

    DCI names an annotation after its crowdsourcing unit (``<unit id>-data.json``), not after its photo,
    so the annotations are indexed once by their ``image`` field."""
    base = dci_dir(root)
    annotations, photos = base / "annotations", require_dir(base / "photos", ctx.name, DCI_PHOTOS)
    index: dict[str, tuple[Path, dict[str, Any]]] = {}
    unreadable: list[str] = []
    for path, ann in _annotations(annotations, ctx):
        if isinstance(ann, str) or not isinstance(ann.get("image"), str):
            unreadable.append(path.name)
            continue
        keep = {k: ann.get(k) for k in ("image", "short_caption", "extra_caption")}  # not the masks: memory
        index.setdefault(Path(ann["image"]).name, (path, keep))
    unread = f"; {len(unreadable)} annotation files have no readable 'image', e.g. {unreadable[0]}" if unreadable else ""
    records, seen, differs = [], set(), 0
    for lst in protocol.lists:
        for entry in ctx.lists[lst.filename]:
            photo = Path(entry["filename"]).name  # the list's leading path is the authors' machine
            if photo in seen:
                ctx.meta["duplicate_list_entries"] = ctx.meta.get("duplicate_list_entries", 0) + 1
                continue
            seen.add(photo)
            if photo not in index:
                ctx.invalid(f"{lst.filename}: {entry['filename']}",
                            f"no DCI annotation in {annotations} has image {photo!r}{unread}", "not in the release")
                continue
            ann_path, ann = index[photo]
            rec = _dci_record(ann_path, photos, protocol, ctx, ann)
            if rec is not None:
                records.append(rec)
                differs += isinstance(entry.get("caption"), str) and entry["caption"].strip() != rec[2][0].strip()
    if differs:
        logger.warning("%s: %d captions in the split lists differ from the release's (the release's are used)",
                       ctx.name, differs)
    ctx.meta["list_captions_differing"] = differs
    return records


# --- Long-DCI ------------------------------------------------------------------------------------
def read_long_dci(root: Path, protocol: Protocol, ctx: LoadContext) -> list[Record]:
    """TULIP's ``dci_long.csv`` (``filepath``, ``title``), or — absent — its construction rebuilt from DCI:
    every ``annotations/*.json`` in sorted file order, caption ``extra_caption``; only a zero-length
    ``extra_caption`` is dropped (TULIP's ``len(...) == 0``: whitespace-only ones stay)."""
    csv_path = root / "dci_long.csv"
    if not csv_path.is_file():
        return _rebuild_long_dci(root, protocol, ctx)
    photo_dirs = [d for d in (root / "densely_captioned_images" / "photos", root / "photos") if d.is_dir()] + [root]
    if len(photo_dirs) == 1 and not any(root.glob("*.jpg")):
        raise DataError(f"long-dci: no photos beside {csv_path} (looked in densely_captioned_images/photos/, "
                        f"photos/); {DCI_PHOTOS}")
    records, dropped = [], 0
    allow_long_csv_fields()
    with open(csv_path, encoding="utf-8", newline="") as f:
        delimiter = "\t" if "\t" in f.readline() else ","
        f.seek(0)
        reader = csv.DictReader(f, delimiter=delimiter, strict=True)
        if not {"filepath", "title"} <= set(reader.fieldnames or ()):
            raise DataError(f"long-dci: {csv_path}: expected columns 'filepath' and 'title', got {reader.fieldnames}")
        try:
            for row in reader:
                where = f"{csv_path}:{reader.line_num}"
                if None in row or row["filepath"] is None or row["title"] is None:
                    ctx.invalid(where, "row has a different number of fields than the header", "malformed row")
                    continue
                if len(row["title"]) == 0:  # absent from TULIP's CSV by construction; pandas would read NaN
                    dropped += 1
                    continue
                name = Path(row["filepath"]).name
                path = next((d / name for d in photo_dirs if (d / name).is_file()), root / row["filepath"])
                records.append((Path(name).stem, str(path), [row["title"]]))
        except csv.Error as e:
            raise DataError(f"long-dci: {csv_path}:{reader.line_num}: malformed CSV ({e})") from e
    ctx.meta.update(list_source={"file": str(csv_path), "sha256": sha256_file(csv_path)}, dropped_empty=dropped)
    return records


def _rebuild_long_dci(root: Path, protocol: Protocol, ctx: LoadContext) -> list[Record]:
    try:
        base = dci_dir(root)
    except DataError as e:
        raise DataError(f"long-dci: neither {root / 'dci_long.csv'} (Hugging Face mderakhshani/Long-DCI) nor the DCI "
                        f"release to rebuild it from: {e}") from None
    require_dir(base / "photos", ctx.name, DCI_PHOTOS)
    records, dropped = [], 0
    for path, ann in _annotations(base / "annotations", ctx):
        if isinstance(ann, str):
            ctx.invalid(str(path), ann, "malformed annotation")
            continue
        if not _fields_ok(ann, ("image", "extra_caption"), str(path), ctx, "annotation"):
            continue
        if len(ann["extra_caption"]) == 0:
            dropped += 1
            continue
        caption = CAPTION_RULES.get(protocol.caption)(ann)
        records.append((Path(ann["image"]).stem, str(base / "photos" / ann["image"]), [caption]))
    ctx.meta.update(list_source="rebuilt from DCI annotations (TULIP's construction)", dropped_empty=dropped)
    return records


# --- Urban-1K ------------------------------------------------------------------------------------
def _stem_key(stem: str) -> tuple[int, int, str]:
    return (0, int(stem), "") if stem.isdigit() else (1, 0, stem)


def read_urban1k(root: Path, protocol: Protocol, ctx: LoadContext) -> list[Record]:
    """``image/<k>.jpg`` paired with ``caption/<k>.txt`` by stem, in numeric order of ``k``; the caption is the
    protocol's rule applied to the file (``592.txt`` of the release starts with a blank line: recorded in
    ``meta.first_line_blank``)."""
    base = find_dir(root, ("Urban1k", ""), "caption", "Urban-1K's caption/ folder")
    if not (base / "image").is_dir():
        raise DataError(f"urban1k: {base / 'image'} not found (Urban1k.zip has image/ beside caption/)")
    captions = {p.stem: p for p in (base / "caption").glob("*.txt")}
    images = {p.stem: p for p in (base / "image").iterdir() if p.suffix.lower() in IMAGE_SUFFIXES}
    rule, records, blank_first = CAPTION_RULES.get(protocol.caption), [], []
    for stem in sorted(captions.keys() | images.keys(), key=_stem_key):
        if stem not in images:
            ctx.invalid(str(captions[stem]), f"caption without an image (no image/{stem}.jpg)",
                        "caption without image")
            continue
        if stem not in captions:
            ctx.invalid(str(images[stem]), f"image without a caption (no caption/{stem}.txt)",
                        "image without caption")
            continue
        try:
            raw = captions[stem].read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            ctx.invalid(str(captions[stem]), f"unreadable caption file ({e})", "malformed caption file")
            continue
        if not raw.strip():  # no rule finds a caption in it; an empty file has no first line at all
            ctx.invalid(str(captions[stem]), "caption file has no text", "empty caption")
            continue
        if not raw.split("\n", 1)[0].strip():
            blank_first.append(stem)
        records.append((stem, str(images[stem]), [rule(raw)]))
    ctx.meta["first_line_blank"] = blank_first
    return records


