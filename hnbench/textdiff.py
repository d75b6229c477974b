"""Word-level difference between two captions: the one diff rule of the hardness report and ``browse``.

Words are runs of ``\\w[\\w'-]*``, compared case-insensitively; what lies between them (spaces,
punctuation) is never marked. ``difflib.SequenceMatcher`` (no junk heuristic) aligns the two word
sequences; a word is *changed* when it is not part of an ``equal`` block — replaced, deleted (only in
``a``) or inserted (only in ``b``). Shared words stay plain, so near-duplicates show only what differs.

Only near-duplicates are diffed: two captions whose word similarity (:func:`similarity`, difflib's
ratio ``2·M / (|a| + |b|)``, M the words in equal blocks) is below :data:`NEAR_DUPLICATE` are
unrelated — marking every word of a failure's unrelated caption tells a reader nothing — and
:func:`diff_words` returns them plain. :data:`RULE` says so in words for the pages that show a diff.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence

_WORD = re.compile(r"(\w[\w'-]*)")

Segments = list[tuple[str, bool]]  # (text, changed) pieces that concatenate back to the caption

NEAR_DUPLICATE = 0.5  # the word similarity from which two captions are near-duplicates (and diffed)
RULE = (f"Words that differ are highlighted only between near-duplicate captions (word similarity ≥ "
        f"{NEAR_DUPLICATE:g}: twice the words shared in order over the words of both); captions below that are "
        "unrelated and shown plain.")


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


def similarity(a: str, b: str) -> float:
    """Word similarity ``2·M / (|a| + |b|)`` in [0, 1] (M: words in equal blocks); 1.0 for two empty captions."""
    return _similarity(opcodes(a, b), len(words(a)) + len(words(b)))


def _similarity(codes: Sequence[tuple[str, int, int, int, int]], n_words: int) -> float:
    matched = sum(i2 - i1 for tag, i1, i2, _, _ in codes if tag == "equal")
    return 2 * matched / n_words if n_words else 1.0


def near_duplicates(a: str, b: str) -> bool:
    """Whether two captions are similar enough (:data:`NEAR_DUPLICATE`) for their differing words to mean something."""
    return similarity(a, b) >= NEAR_DUPLICATE


def diff_words(a: str, b: str) -> tuple[Segments, Segments]:
    """Both captions as ``(text, changed)`` segments: changed words are those outside equal blocks, between
    near-duplicates only (unrelated captions come back with nothing changed)."""
    (pa, wa), (pb, wb) = _split(a), _split(b)
    changed_a, changed_b = [False] * len(wa), [False] * len(wb)
    codes = opcodes(a, b)
    if _similarity(codes, len(wa) + len(wb)) >= NEAR_DUPLICATE:
        for tag, i1, i2, j1, j2 in codes:
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
