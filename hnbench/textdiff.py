"""Word-level difference between two captions: the one diff rule of the hardness report and ``browse``.

Words are runs of ``\\w[\\w'-]*``, compared case-insensitively; what lies between them (spaces,
punctuation) is never marked. ``difflib.SequenceMatcher`` (no junk heuristic) aligns the two word
sequences; a word is *changed* when it is not part of an ``equal`` block — replaced, deleted (only in
``a``) or inserted (only in ``b``). Shared words stay plain, so near-duplicates show only what differs.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence

_WORD = re.compile(r"(\w[\w'-]*)")

Segments = list[tuple[str, bool]]  # (text, changed) pieces that concatenate back to the caption


def _split(text: str) -> tuple[list[str], list[str]]:
    """``(pieces, words)``: pieces alternate separator, word, separator, …; words are the odd pieces."""
    pieces = _WORD.split(text)
    return pieces, pieces[1::2]


def words(text: str) -> list[str]:
    """The words of ``text`` as the diff sees them (punctuation and spacing dropped)."""
    return _split(text)[1]


def opcodes(a: str, b: str) -> Sequence[tuple[str, int, int, int, int]]:
    """difflib opcodes over the (lower-cased) words of ``a`` and ``b``."""
    wa, wb = (_split(t)[1] for t in (a, b))
    return difflib.SequenceMatcher(a=[w.lower() for w in wa], b=[w.lower() for w in wb],
                                   autojunk=False).get_opcodes()


def diff_words(a: str, b: str) -> tuple[Segments, Segments]:
    """Both captions as ``(text, changed)`` segments: changed words are those outside equal blocks."""
    (pa, wa), (pb, wb) = _split(a), _split(b)
    changed_a, changed_b = [False] * len(wa), [False] * len(wb)
    for tag, i1, i2, j1, j2 in opcodes(a, b):
        if tag != "equal":
            changed_a[i1:i2] = [True] * (i2 - i1)
            changed_b[j1:j2] = [True] * (j2 - j1)
    return _segments(pa, changed_a), _segments(pb, changed_b)


def _segments(pieces: list[str], changed: list[bool]) -> Segments:
    out: Segments = []
    for k, piece in enumerate(pieces):
        flag = bool(k % 2) and changed[k // 2]
        if not piece:
            continue
        if out and out[-1][1] == flag and not flag:
            out[-1] = (out[-1][0] + piece, flag)  # merge plain runs; changed words stay one per segment
        else:
            out.append((piece, flag))
    return out


def changed_words(a: str, b: str) -> tuple[list[str], list[str]]:
    """The changed words of each side, in order (what a renderer marks)."""
    sa, sb = diff_words(a, b)
    return [t for t, c in sa if c], [t for t, c in sb if c]


def render(segments: Segments, escape: Callable[[str], str], mark: Callable[[str], str]) -> str:
    """Join segments, escaping every piece and wrapping changed words with ``mark`` (e.g. ``<mark>``, ``**``)."""
    return "".join(mark(escape(t)) if c else escape(t) for t, c in segments)
