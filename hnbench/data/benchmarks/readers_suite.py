"""Readers for the long-caption suite's other benchmarks: COCO, Flickr30k, ShareGPT4V and IIW.

Same contract as :mod:`hnbench.data.benchmarks.readers` (both registered in :data:`hnbench.registry.READERS`): each
returns ``(image_id, image_path, [caption])`` records in the order the reference code uses, captions made
by the protocol's named rule. A protocol's ``options`` name its release file (``file``), the folders
under the data root it may sit in (``dirs``) and where it comes from (``from``, written by the spec from
its :class:`~hnbench.data.benchmarks.spec.Resource`): a data root without it is one line naming all three.

Images are found by :class:`ImageFinder`: first where the reference code looks, then by file name in any
folder under the data root (SA-1B's ``sa_NNNNNN/`` tar folders, a flat copy, LoTLIP's ``docci_aar/``), never
through a symlink that leads out of it unless ``--allow-outside-paths``.
Images still missing are reported by name, with their count, in one line (with ``--skip-invalid``: dropped,
named in ``meta.missing_images``, and the count check then says the set is smaller than published).
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from hnbench.data.benchmarks.protocol import LoadContext, Protocol
from hnbench.data.benchmarks.readers import IMAGE_SUFFIXES, Record, jsonl_objects
from hnbench.errors import DataError
from hnbench.io import loads_json
from hnbench.registry import CAPTION_RULES

logger = logging.getLogger(__name__)

MAX_NAMED = 20  # missing images named in the one-line error; all of them go into meta.missing_images


class ImageFinder:
    """Image files under ``root``: at a path relative to it, else by file name anywhere below it.

    The by-name index is built once, on the first image not found where expected (a walk of the tree, each
    real folder once); a name found in several folders resolves to the first in sorted walk order, and the
    count of such names is kept in :attr:`ambiguous`. The walk never leaves the data root: a symlink below
    it (to a folder or a file) that resolves inside the root is followed, one that leads out of it is not
    (a link to ``/`` would make every image on the machine a candidate), and is listed in
    :attr:`links_out`, unless ``follow_out`` (``--allow-outside-paths``: the user asked). A path the
    annotations name (``find``'s candidates) is the owner's layout and is followed as it is; that it
    stays inside the root lexically is checked by the loader (:func:`hnbench.data.base.check_inside`)."""

    def __init__(self, root: Path, *, follow_out: bool = False):
        self.root = root
        self.follow_out = follow_out
        self._index: dict[str, Path] | None = None
        self.ambiguous = 0
        self.links_out: list[str] = []  # symlinks below root (relative to it) that lead out and were not followed

    def find(self, candidates: Sequence[str]) -> Path | None:
        """The first ``root/candidate`` that is a file, else the file named as the first candidate's name."""
        for rel in candidates:
            path = self.root / rel
            if path.is_file():
                return path
        return self.by_name().get(Path(candidates[0]).name)

    def by_name(self) -> dict[str, Path]:
        if self._index is None:
            self._index = {}
            for path in self._walk():
                if path.suffix.lower() in IMAGE_SUFFIXES:
                    if path.name in self._index:
                        self.ambiguous += 1
                    self._index.setdefault(path.name, path)
        return self._index

    def _walk(self) -> Iterator[Path]:
        """Every file below the root in sorted order; symlinks leading out of it left out (:attr:`links_out`)
        unless ``follow_out``; a folder reached twice (a symlink loop, a second link) walked once."""
        real_root = os.path.realpath(self.root)
        seen: set[tuple[int, int]] = set()

        def leaves(top: str, name: str) -> bool:
            path = os.path.join(top, name)
            if self.follow_out or not os.path.islink(path) or _inside(os.path.realpath(path), real_root):
                return False
            self.links_out.append(os.path.relpath(path, self.root))
            return True

        for top, dirs, files in os.walk(self.root, followlinks=True):
            st = os.stat(top)
            if (st.st_dev, st.st_ino) in seen:  # a symlink loop or a second link to a folder already walked
                dirs[:] = []
                continue
            seen.add((st.st_dev, st.st_ino))
            dirs[:] = sorted(d for d in dirs if not leaves(top, d))  # pruned before os.walk lists them
            for name in sorted(files):
                if not leaves(top, name):
                    yield Path(top) / name


def _inside(path: str, root: str) -> bool:
    """Whether ``path`` is ``root`` or below it (both already resolved: real paths)."""
    return os.path.commonpath([path, root]) == root


def _find_release_file(root: Path, protocol: Protocol, key: str = "file") -> Path | None:
    given = protocol.options[key]
    names: tuple[str, ...] = (given,) if isinstance(given, str) else tuple(given)
    dirs: tuple[str, ...] = protocol.options.get("dirs", ("",))
    for name in names:
        for d in dirs:
            path = root / d / name
            if path.is_file():
                return path
    return None


def _needs(root: Path, protocol: Protocol, key: str = "file") -> str:
    """``NAME (looked in …; it comes from …)`` of one release file a protocol (or one of its layouts) reads."""
    given = protocol.options[key]
    names = (given,) if isinstance(given, str) else tuple(given)
    looked = ", ".join(str(root / d) for d in protocol.options.get("dirs", ("",)))
    return f"{' or '.join(names)} (looked in {looked}; it comes from {protocol.options['from']})"


def release_file(root: Path, protocol: Protocol, ctx: LoadContext, key: str = "file") -> Path:
    """The protocol's release file ``options[key]`` in one of ``options["dirs"]`` under ``root``; a missing one is
    one line naming the file, where it was looked for and where it comes from."""
    path = _find_release_file(root, protocol, key)
    if path is None:
        raise DataError(f"{ctx.name}/{protocol.name} needs {_needs(root, protocol, key)}, which {root} lacks")
    return path


def release_layout(root: Path, protocol: Protocol, ctx: LoadContext) -> Protocol:
    """The protocol as read from the first of its release files present under ``root``: its primary file
    (``options["file"]``), else each of its :attr:`~Protocol.layouts` in order (another author's copy of the same
    set: CLIP_benchmark's, LLM2CLIP's, TULIP's), recorded in ``meta.release_file``. None present: one line naming
    every file that would do and where each comes from."""
    if not protocol.layouts:
        return protocol
    choices = [protocol, *(protocol.with_layout(layout) for layout in protocol.layouts)]
    for choice in choices:
        path = _find_release_file(root, choice)
        if path is not None:
            ctx.meta["release_file"] = {"file": path.name, "reader": choice.reader, "from": choice.options["from"]}
            return choice
    raise DataError(f"{ctx.name}/{protocol.name} needs " + "; or ".join(_needs(root, c) for c in choices)
                    + f", which {root} lacks")


def _read_json(path: Path, ctx: LoadContext) -> Any:
    try:
        return loads_json(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataError(f"{ctx.name}: {path}: not readable JSON ({e})") from None


def _malformed(path: Path, what: str) -> DataError:
    return DataError(f"{path}: malformed release file: expected {what}")


def located(root: Path, items: list[tuple[str, list[str], list[str]]], protocol: Protocol, ctx: LoadContext,
            how: str) -> list[Record]:
    """``(image_id, candidate paths, captions)`` → records with the image found by :class:`ImageFinder`. Missing
    images are one error naming them with their count (``how``: where the images come from), or with
    ``--skip-invalid`` dropped and listed in ``meta.missing_images``."""
    finder, records, missing = ImageFinder(root, follow_out=ctx.allow_outside_paths), [], []
    for image_id, candidates, captions in items:
        path = finder.find(candidates)
        if path is None:
            missing.append(Path(candidates[0]).name)
            continue
        records.append((image_id, str(path), captions))
    if finder.ambiguous:
        ctx.meta["image_names_in_several_folders"] = finder.ambiguous
    links = ""
    if finder.links_out:  # recorded, and said once: an image they hold may be what is missing
        ctx.meta["links_out_of_root_not_searched"] = finder.links_out
        out = finder.links_out
        named = ", ".join(f"{link} -> {os.path.realpath(root / link)}" for link in out[:3])
        links = (f"{len(out)} symlink{'s' * (len(out) > 1)} below {root} lead{'s' * (len(out) == 1)} out of it and "
                 f"{'were' if len(out) > 1 else 'was'} not searched by file name ({named}{', ...' * (len(out) > 3)}); "
                 "pass --allow-outside-paths to search them")
        if not missing:
            logger.warning("%s/%s: %s", ctx.name, protocol.name, links)
    if missing:
        unique = list(dict.fromkeys(missing))
        shown = ", ".join(unique[:MAX_NAMED]) + (f" and {len(unique) - MAX_NAMED} more" if len(unique) > MAX_NAMED else "")
        total = len({Path(c[0]).name for _, c, _ in items})
        msg = (f"{ctx.name}/{protocol.name}: {len(unique)} of {total} images not found under {root} (looked where the "
               f"reference code does, then by file name in every folder below it): {shown}; {how}"
               + (f"; {links}" if links else ""))
        if not ctx.skip_invalid:
            raise DataError(f"{msg} (pass --skip-invalid to drop them)")
        logger.warning("%s", msg)
        ctx.meta["missing_images"] = unique
        ctx.skipped.setdefault("missing image", []).extend(missing)
    return records


def _histogram(counts: Sequence[int]) -> dict[str, int]:
    return {str(k): v for k, v in sorted(Counter(counts).items())}


# --- COCO captions JSON (annotations/captions_val2017.json) ---------------------------------------------
def read_coco_captions(root: Path, protocol: Protocol, ctx: LoadContext) -> list[Record]:
    """COCO-format ``images[]`` / ``annotations[]``: images in ascending ``id`` order, each with its captions in
    annotation order (torchvision's ``CocoCaptions``, which Long-CLIP's ``coco.py`` reads), the first
    ``options["first_k"]`` of them when set (Long-CLIP's ``captions[0:5]``), all of them otherwise (FLAIR)."""
    path = release_file(root, protocol, ctx)
    data = _read_json(path, ctx)
    if not isinstance(data, dict) or not isinstance(data.get("images"), list) or not isinstance(
            data.get("annotations"), list):
        raise _malformed(path, "a JSON object with 'images' and 'annotations' lists")
    files: dict[int, str] = {}
    for im in data["images"]:
        if not isinstance(im, dict) or not isinstance(im.get("id"), int) or not isinstance(im.get("file_name"), str):
            raise _malformed(path, f"each image an object with an integer 'id' and a 'file_name' (got {str(im)[:80]})")
        files[im["id"]] = im["file_name"]
    caps: dict[int, list[str]] = {}
    for ann in data["annotations"]:
        if not isinstance(ann, dict) or not isinstance(ann.get("image_id"), int) or not isinstance(
                ann.get("caption"), str):
            raise _malformed(path, f"each annotation an object with an integer 'image_id' and a 'caption' string "
                                   f"(got {str(ann)[:80]})")
        caps.setdefault(ann["image_id"], []).append(ann["caption"])
    unknown = sorted(set(caps) - set(files))
    if unknown:
        raise _malformed(path, f"annotations of listed images only (image_id {unknown[0]} is in no 'images' entry)")
    first_k, rule = protocol.options.get("first_k"), CAPTION_RULES.get(protocol.caption)
    image_dirs = protocol.options["image_dirs"]
    items = [(Path(files[i]).stem, [f"{d}/{files[i]}" for d in image_dirs],
              [rule(c) for c in caps.get(i, [])[:first_k]]) for i in sorted(files)]
    ctx.meta.update(annotations_file=str(path), captions_per_image=_histogram([len(caps.get(i, [])) for i in files]),
                    captions_not_used=sum(len(c) for c in caps.values()) - sum(len(t) for _, _, t in items))
    return located(root, items, protocol, ctx, protocol.options["images_from"])


# --- Karpathy's split files (dataset_coco.json, dataset_flickr30k.json) -----------------------------------
def read_karpathy(root: Path, protocol: Protocol, ctx: LoadContext) -> list[Record]:
    """Karpathy's ``images[]`` whose ``split`` is ``options["split"]`` (``restval`` is a training split), in file
    order, each with every ``sentences[].raw`` in order; the image under ``filepath/filename`` (COCO) or one of
    ``options["image_dirs"]``, else found by name."""
    path = release_file(root, protocol, ctx)
    data = _read_json(path, ctx)
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        raise _malformed(path, "a JSON object with an 'images' list (Karpathy's dataset_*.json)")
    split, rule, items, splits = protocol.options["split"], CAPTION_RULES.get(protocol.caption), [], Counter[str]()
    for n, entry in enumerate(data["images"]):
        if not isinstance(entry, dict) or not isinstance(entry.get("filename"), str) or not isinstance(
                entry.get("split"), str) or not isinstance(entry.get("sentences"), list):
            raise _malformed(path, f"images[{n}] an object with 'filename', 'split' and 'sentences'")
        splits[entry["split"]] += 1
        if entry["split"] != split:
            continue
        raws = [s.get("raw") if isinstance(s, dict) else None for s in entry["sentences"]]
        if not all(isinstance(r, str) for r in raws):
            raise _malformed(path, f"images[{n}] ({entry['filename']}): every sentence an object with a 'raw' string")
        name, folder = entry["filename"], entry.get("filepath")
        candidates = ([f"{folder}/{name}"] if isinstance(folder, str) and folder else []) + [
            f"{d}/{name}" for d in protocol.options["image_dirs"]]
        items.append((Path(name).stem, candidates, [rule(r) for r in raws]))
    ctx.meta.update(annotations_file=str(path), karpathy_splits=dict(sorted(splits.items())),
                    captions_per_image=_histogram([len(t) for _, _, t in items]))
    return located(root, items, protocol, ctx, protocol.options["images_from"])


def _by_name(root: Path, path: Path, caps: dict[str, list[str]], protocol: Protocol, ctx: LoadContext) -> list[Record]:
    """Records of image file name → captions (in order of first appearance), each image in one of
    ``options["image_dirs"]`` or found by name; ``path``, the release file read, goes into the metadata."""
    items = [(Path(name).stem, [f"{d}/{name}" for d in protocol.options["image_dirs"]], texts)
             for name, texts in caps.items()]
    ctx.meta.update(annotations_file=str(path), captions_per_image=_histogram([len(c) for c in caps.values()]))
    return located(root, items, protocol, ctx, protocol.options["images_from"])


# --- Flickr30k's results_20130124.token ---------------------------------------------------------------
def read_flickr_token(root: Path, protocol: Protocol, ctx: LoadContext) -> list[Record]:
    """Lines ``NAME.jpg#k<TAB>caption``, as Long-CLIP's ``flickr30k.py`` reads them: the image is the first
    field less its last two characters (``#k``), the caption the second field (a ``#`` inside it is text),
    its line break dropped; images in order of first appearance, captions in file order."""
    path = release_file(root, protocol, ctx)
    rule, caps = CAPTION_RULES.get(protocol.caption), dict[str, list[str]]()
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            fields = line.rstrip("\r\n").split("\t")
            if len(fields) < 2 or not re.fullmatch(r".+#\d", fields[0]):
                ctx.invalid(f"{path}:{n}", "malformed line (expected NAME.jpg#k, a tab, the caption)", "malformed line")
                continue
            caps.setdefault(fields[0][:-2], []).append(rule(fields[1]))
    return _by_name(root, path, caps, protocol, ctx)


# --- Flickr30k's Kaggle results.csv (TULIP) ---------------------------------------------------------------
def read_flickr_kaggle_csv(root: Path, protocol: Protocol, ctx: LoadContext) -> list[Record]:
    """The Kaggle copy's ``results.csv`` as TULIP's ``eval/flickr30.py`` reads it (``pd.read_csv(sep='|')``): a
    header line, then ``NAME.jpg| k| caption`` lines; a line with no caption field (one real line has its
    caption run into the number field: ``2199200615.jpg| 4   A dog runs ...``) or an empty one is the NaN caption
    TULIP replaces by a space, kept as a query. The one space after each ``|`` is the file's separator (CLIP's
    tokenizer drops it anyway), so the other captions equal the token file's; images in order of first
    appearance, 5 lines each (TULIP takes every fifth line's image)."""
    path = release_file(root, protocol, ctx)
    rule, caps = CAPTION_RULES.get(protocol.caption), dict[str, list[str]]()
    nan = []
    with open(path, encoding="utf-8") as f:
        next(f, None)  # the header: image_name| comment_number| comment
        for n, line in enumerate(f, start=2):
            fields = line.rstrip("\r\n").split("|")
            if not fields[0].strip():
                ctx.invalid(f"{path}:{n}", "malformed line (expected NAME.jpg| k| caption)", "malformed line")
                continue
            text = "|".join(fields[2:])
            text = text[1:] if text.startswith(" ") else text
            if len(fields) < 3 or not "|".join(fields[2:]):
                text = " "  # pandas' NaN, as TULIP replaces it
                nan.append(f"{path.name}:{n}")
            caps.setdefault(fields[0], []).append(rule(text))
    ctx.meta["nan_captions"] = nan
    return _by_name(root, path, caps, protocol, ctx)


# --- CLIP_benchmark's flickr30k_test_karpathy.txt -------------------------------------------------------------
def read_clipbench_flickr_txt(root: Path, protocol: Protocol, ctx: LoadContext) -> list[Record]:
    """CLIP_benchmark's ``Flickr`` reader (``clip_benchmark/datasets/flickr.py``): a header line, then
    ``NAME.jpg,caption`` lines, stripped, blank ones skipped, split on ``.jpg,`` (a caption may hold commas);
    images in order of first appearance. A caption that itself holds ``.jpg,`` is split at the first one
    (CLIP_benchmark's two-way unpacking would fail on it)."""
    path = release_file(root, protocol, ctx)
    rule, caps = CAPTION_RULES.get(protocol.caption), dict[str, list[str]]()
    with open(path, encoding="utf-8") as f:
        next(f, None)  # the header: image,caption
        for n, line in enumerate(f, start=2):
            line = line.strip()
            if not line:
                continue
            if ".jpg," not in line:
                ctx.invalid(f"{path}:{n}", "malformed line (expected NAME.jpg,caption)", "malformed line")
                continue
            stem, caption = line.split(".jpg,", 1)
            caps.setdefault(stem + ".jpg", []).append(rule(caption))
    return _by_name(root, path, caps, protocol, ctx)


# --- a JSON list of {image, caption[]} (LLM2CLIP's / BLIP's flickr30k_test.json, coco_karpathy_test.json) -------
def read_caption_list_json(root: Path, protocol: Protocol, ctx: LoadContext) -> list[Record]:
    """A JSON list of ``{"image": "flickr30k-images/NAME.jpg", "caption": [...]}`` (the sfr bucket's files that
    LLM2CLIP's ``setup_eval_datasets.sh`` fetches), in file order, every caption of each entry; the image at
    ``image`` under the data root, in one of ``options["image_dirs"]``, else by name."""
    path = release_file(root, protocol, ctx)
    data = _read_json(path, ctx)
    if not isinstance(data, list):
        raise _malformed(path, "a JSON list of {image, caption} objects")
    rule, items = CAPTION_RULES.get(protocol.caption), []
    for n, entry in enumerate(data):
        caption = entry.get("caption") if isinstance(entry, dict) else None
        captions = [caption] if isinstance(caption, str) else caption
        if (not isinstance(entry, dict) or not isinstance(entry.get("image"), str) or not isinstance(captions, list)
                or not all(isinstance(c, str) for c in captions)):
            raise _malformed(path, f"[{n}] an object with an 'image' string and a 'caption' list of strings")
        image = entry["image"]
        name = Path(image).name
        items.append((Path(name).stem, [image, *(f"{d}/{name}" for d in protocol.options["image_dirs"])],
                      [rule(c) for c in captions]))
    ctx.meta.update(annotations_file=str(path), captions_per_image=_histogram([len(t) for _, _, t in items]))
    return located(root, items, protocol, ctx, protocol.options["images_from"])


# --- ShareGPT4V's caption JSON (the first N records) -------------------------------------------------------
def json_list_head(path: Path, n: int, chunk: int = 1 << 20) -> list[Any]:
    """The first ``n`` elements of the JSON list in ``path``, decoded incrementally: the 1.4 GB ShareGPT4V file is
    not read whole (Long-CLIP's ``json.load(...)[:1000]`` gives the same elements)."""
    decoder, buf, pos = json.JSONDecoder(), "", 0
    out: list[Any] = []
    with open(path, encoding="utf-8") as f:
        def more() -> bool:
            nonlocal buf, pos
            block = f.read(chunk)
            buf, pos = buf[pos:] + block, 0
            return bool(block)

        def skip(chars: str) -> None:
            nonlocal pos
            while True:
                while pos < len(buf) and buf[pos] in chars:
                    pos += 1
                if pos < len(buf) or not more():
                    return

        skip(" \t\r\n\ufeff")
        if buf[pos:pos + 1] != "[":
            raise json.JSONDecodeError("expected a JSON list", buf, pos)
        pos += 1
        while len(out) < n:
            skip(" \t\r\n")
            if buf[pos:pos + 1] == "]":
                break
            while True:
                try:
                    value, end = decoder.raw_decode(buf, pos)
                    break
                except json.JSONDecodeError:
                    if not more():
                        raise
            out.append(value)
            pos = end
            skip(" \t\r\n")
            if buf[pos:pos + 1] == ",":
                pos += 1
            elif buf[pos:pos + 1] != "]":
                raise json.JSONDecodeError("expected ',' or ']'", buf, pos)
    return out


def read_sharegpt4v(root: Path, protocol: Protocol, ctx: LoadContext) -> list[Record]:
    """The first ``options["n"]`` records of the caption JSON; caption = ``conversations[1]["value"]`` under the
    protocol's rule; the image at ``image`` (``sam/images/sa_N.jpg``), FLAIR's ``image`` less ``/images``, or by
    file name anywhere under the data root. Ground truth is by record index, as every paper's code: a file name
    that two records share stays two gallery items (ids ``NAME@index``), listed in ``meta.repeated_images``."""
    path = release_file(root, protocol, ctx)
    n, rule = protocol.options["n"], CAPTION_RULES.get(protocol.caption)
    try:
        head = json_list_head(path, n)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataError(f"{ctx.name}: {path}: not readable as a JSON list ({e})") from None
    seen: dict[str, list[int]] = {}
    for i, rec in enumerate(head):
        conv = rec.get("conversations") if isinstance(rec, dict) else None
        if (not isinstance(rec, dict) or not isinstance(rec.get("image"), str) or not isinstance(conv, list)
                or len(conv) < 2 or not isinstance(conv[1], dict) or not isinstance(conv[1].get("value"), str)):
            raise _malformed(path, f"record {i} an object with an 'image' string and a 'conversations' list whose "
                                   f"second turn has a 'value' string")
        seen.setdefault(Path(rec["image"]).name, []).append(i)
    repeated = {name: idx for name, idx in seen.items() if len(idx) > 1}
    if repeated:
        logger.warning("%s/%s: %d image files appear in more than one record (e.g. %s at records %s); each record "
                       "stays its own gallery item with its own caption as the only positive (index ground truth, as "
                       "the papers' code)", ctx.name, protocol.name, len(repeated), *next(iter(repeated.items())))
    items = []
    for i, rec in enumerate(head):
        name = Path(rec["image"]).name
        image_id = Path(name).stem + (f"@{i}" if name in repeated else "")
        items.append((image_id, [rec["image"], rec["image"].replace("/images", "")],
                      [rule(rec["conversations"][1]["value"])]))
    ctx.meta.update(caption_file=str(path), caption_file_bytes=path.stat().st_size, records_read=len(head),
                    repeated_images=repeated)
    return located(root, items, protocol, ctx, protocol.options["images_from"])


# --- IIW (ImageInWords) ---------------------------------------------------------------------------------
def read_iiw(root: Path, protocol: Protocol, ctx: LoadContext) -> list[Record]:
    """LoTLIP's ``iiw_retrieval.py`` (and FLAIR's): ``DOCCI_Test``, ``IIW-400``, ``DCI_Test`` (``data.jsonl`` each)
    in that order, one pair a row; the image key is ``image`` or else ``image/key``, with ``.jpg`` added when it
    has none, looked for in LoTLIP's ``docci/``, ``docci_aar/``, ``dci/`` and then by name; caption ``IIW``."""
    rule, items, counts = CAPTION_RULES.get(protocol.caption), [], {}
    for subset, folder in protocol.options["subsets"]:
        path = release_file(root, protocol, ctx, key=subset)
        rows = 0
        for where, row in jsonl_objects(path, ctx):
            key = row.get("image", row.get("image/key"))
            if not isinstance(key, str) or not isinstance(row.get("IIW"), str):
                ctx.invalid(where, "malformed annotation line: no 'image' (or 'image/key') and 'IIW' strings",
                            "malformed annotation")
                continue
            name = key if ".jpg" in key else f"{key}.jpg"
            items.append((Path(name).stem, [f"{folder}/{name}"], [rule(row["IIW"])]))
            rows += 1
        counts[subset] = rows
    ctx.meta["subsets"] = counts
    return located(root, items, protocol, ctx, protocol.options["images_from"])


def read_iiw_fine_grained(root: Path, protocol: Protocol, ctx: LoadContext) -> list[Record]:
    """FLAIR's ``test_annotations.json`` (``{"annotations": [{image_id, image, caption, caption_id}]}``): every
    sentence caption, grouped by ``image`` (``docci/test_00731.jpg``) in file order; the image at that path
    under the data root, else by name."""
    path = release_file(root, protocol, ctx)
    data = _read_json(path, ctx)
    anns = data.get("annotations") if isinstance(data, dict) else None
    if not isinstance(anns, list):
        raise _malformed(path, "a JSON object with an 'annotations' list (FLAIR's test_annotations.json)")
    rule = CAPTION_RULES.get(protocol.caption)
    caps: dict[str, list[str]] = {}
    for n, ann in enumerate(anns):
        if not isinstance(ann, dict) or not isinstance(ann.get("image"), str) or not isinstance(ann.get("caption"), str):
            raise _malformed(path, f"annotations[{n}] an object with 'image' and 'caption' strings")
        caps.setdefault(ann["image"], []).append(rule(ann["caption"]))
    items = [(Path(image).stem, [image], texts) for image, texts in caps.items()]
    ctx.meta.update(annotations_file=str(path), captions_per_image=_histogram([len(t) for t in caps.values()]))
    return located(root, items, protocol, ctx, protocol.options["images_from"])


