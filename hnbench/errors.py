"""Exceptions hnbench raises for bad input. Each message names the offending item."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class HnbenchError(Exception):
    """Base class: the CLI prints these as one line and exits with status 2."""


class DataError(HnbenchError):
    """A dataset, manifest, image or caption is missing, malformed or inconsistent."""


class ImageLoadError(DataError):
    """An image file is missing or cannot be decoded."""

    def __init__(self, item_id: str, source: str, reason: str):
        self.item_id, self.source, self.reason = item_id, source, reason
        super().__init__(f"image {item_id!r} ({source}): {reason}")


class CheckpointError(HnbenchError):
    """A checkpoint is unreadable, unsafe, or does not match the architecture."""


class ConfigError(HnbenchError):
    """An unknown name or inconsistent option."""


class CacheError(HnbenchError):
    """An embedding cache file cannot be read (permissions, a directory in its place, I/O error)."""


class WorkerError(HnbenchError):
    """A DataLoader worker died or stopped answering (most often: shared memory ran out)."""


def first_line(error: BaseException, limit: int | None = None) -> str:
    """The first non-empty line of ``error``'s message (at most ``limit`` characters), else its type's name: what a
    one-line error quotes of a library's exception, whose message may be empty (``EOFError()`` of an empty file)
    or span many lines."""
    line = next((x.strip() for x in str(error).splitlines() if x.strip()), "") or type(error).__name__
    return line if limit is None else line[:limit]


def did_you_mean(name: str, choices: Iterable[str], n: int = 3) -> str:
    """``"did you mean 'a', 'b'?"`` for the ``choices`` closest to ``name`` (case-insensitive), or ``""``."""
    by_lower = {str(c).lower(): str(c) for c in choices}
    close = difflib.get_close_matches(name.lower(), by_lower, n=n)
    return f"did you mean {', '.join(repr(by_lower[c]) for c in close)}?" if close else ""


def unknown_name(kind: str, name: str, known: Iterable[str], n: int = 3) -> ConfigError:
    """The one-line error for an unknown name: ``unknown KIND 'x'; did you mean 'y'? (known: ...)``."""
    known = list(known)
    hint = did_you_mean(name, known, n)
    return ConfigError(f"unknown {kind} {name!r}{'; ' + hint if hint else ''} (known: {', '.join(known)})")
