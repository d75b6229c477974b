"""Shipped pairs lists: a protocol's (image file name, caption sha256) pairs in order, to check a built set against.

A release that users assemble themselves (ShareGPT4V: the head of a 1.4 GB caption file, or LoTLIP's
re-saved copy, plus SA-1B images from 51 tars) can silently give other pairs. A protocol that names a
pairs list (``Protocol.pairs_list``: a file in ``hnbench/assets/pairs/``, or a path) is compared with
it on every load: the first differing pairs are named in one line, and the comparison is recorded in
``meta.pairs_check``. :func:`write_pairs_list` makes such a list from a set built from the real release.

The file: a header line ``image<TAB>caption_sha256``, then one line per caption in the set's order: the
image's file name and the sha256 of the caption's UTF-8 bytes after the protocol's caption rule.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

from hnbench.data.base import ImageTextDataset
from hnbench.errors import DataError
from hnbench.io import atomic_write_bytes, read_text_utf8

logger = logging.getLogger(__name__)

PAIRS_DIR = Path(__file__).resolve().parents[2] / "assets" / "pairs"
HEADER = "image\tcaption_sha256"
MAX_SHOWN = 5


def dataset_pairs(ds: ImageTextDataset) -> list[tuple[str, str]]:
    """``(image file name, sha256 of the caption)`` for each caption of ``ds``, in order."""
    paths = getattr(ds.images, "paths", ds.images.ids)
    return [(Path(paths[int(i)]).name, hashlib.sha256(text.encode("utf-8")).hexdigest())
            for text, i in zip(ds.captions, ds.caption_image)]


def write_pairs_list(ds: ImageTextDataset, path: str | Path) -> Path:
    """Write ``ds``'s pairs as a pairs list (atomically) — what ships in ``hnbench/assets/pairs/``."""
    lines = [HEADER, *(f"{image}\t{digest}" for image, digest in dataset_pairs(ds))]
    atomic_write_bytes(path, ("\n".join(lines) + "\n").encode())
    return Path(path)


def list_path(name: str) -> Path:
    path = Path(name)
    return path if path.is_absolute() else PAIRS_DIR / name


def read_pairs_list(path: Path) -> list[tuple[str, str]]:
    lines = read_text_utf8(path).splitlines()
    if not lines or lines[0] != HEADER:
        raise DataError(f"{path}: not a pairs list (expected the header {HEADER!r})")
    pairs = []
    for n, line in enumerate(lines[1:], start=2):
        fields = line.split("\t")
        if len(fields) != 2 or len(fields[1]) != 64:
            raise DataError(f"{path}:{n}: not an 'image<TAB>caption_sha256' line")
        pairs.append((fields[0], fields[1]))
    return pairs


def check_pairs(ds: ImageTextDataset, name: str | None, allow_mismatch: bool) -> dict[str, Any]:
    """Compare ``ds`` with the pairs list ``name``: an error naming the first differing pairs unless allowed.

    Status ``unverified (no shipped list)`` when the protocol names none or the named file is not shipped yet."""
    if name is None or not list_path(name).is_file():
        return {"status": "unverified (no shipped list)", "list": name}
    path = list_path(name)
    shipped, built = read_pairs_list(path), dataset_pairs(ds)
    differ, none = [], ("", "")
    for k in range(max(len(shipped), len(built))):
        have, want = (built[k] if k < len(built) else none), (shipped[k] if k < len(shipped) else none)
        if have == want:
            continue
        if have == none:
            differ.append(f"#{k} {want[0]}: missing from this set")
        elif want == none:
            differ.append(f"#{k} {have[0]}: not in the list")
        elif have[0] != want[0]:
            differ.append(f"#{k} image {have[0]}, the list has {want[0]}")
        else:
            differ.append(f"#{k} {have[0]}: caption differs")
    check: dict[str, Any] = {"list": str(path), "n_listed": len(shipped), "n_built": len(built),
                             "n_differing": len(differ), "differing": differ[:1000]}
    if not differ:
        return {**check, "status": "ok"}
    shown = "; ".join(differ[:MAX_SHOWN]) + (f"; and {len(differ) - MAX_SHOWN} more" if len(differ) > MAX_SHOWN else "")
    summary = (f"{ds.name}/{ds.protocol}: {len(differ)} of {len(shipped)} pairs differ from the shipped list {path.name}: "
               f"{shown}")
    if not allow_mismatch:
        raise DataError(f"{summary}; these are not the published pairs (another caption file, or other images). "
                        f"Pass --allow-count-mismatch to run anyway (recorded in the result)")
    logger.warning("%s; continuing because the mismatch is allowed", summary)
    return {**check, "status": "mismatch allowed"}
