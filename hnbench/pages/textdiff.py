"""Word-level difference between two captions: the one diff rule of the hardness report and ``browse``.

Words are runs of ``\\w[\\w'-]*``, compared case-insensitively; what lies between them (spaces,
punctuation) is never marked. ``difflib.SequenceMatcher`` (no junk heuristic) aligns the two word
sequences; a word is *changed* when it is not part of an ``equal`` block — replaced, deleted (only in
``a``) or inserted (only in ``b``). Shared words stay plain, so near-duplicates show only what differs.

Only near-duplicates are diffed: two captions whose word similarity (:func:`similarity`, difflib's
ratio ``2·M / (|a| + |b|)``, M the words in equal blocks) is below :data:`NEAR_DUPLICATE` are
unrelated — marking every word of a failure's unrelated caption tells a reader nothing — and
:func:`diff_words` returns them plain. :data:`RULE` says so in words for the pages that show a diff.

Only captions of at most :data:`MAX_WORDS` words each are aligned (:func:`diffable`): difflib's alignment
grows with the product of the two lengths (far worse where words repeat), so one caption of a million words
would stall a page or report for hours. A longer caption is shown plain; its similarity is None (not
computed), and it is never a near-duplicate here. Splitting a caption into words stays linear in its length.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence

_WORD = re.compile(r"(\w[\w'-]*)")

Segments = list[tuple[str, bool]]  # (text, changed) pieces that concatenate back to the caption

NEAR_DUPLICATE = 0.5  # the word similarity from which two captions are near-duplicates (and diffed)
MAX_WORDS = 2000  # the longest caption, in words, the diff aligns (a long dense caption has a few hundred)
MAX_CAPTION_CHARS = 20_000  # the characters of a caption the browse page shows (a longer one is cut, and said so)
RULE = (f"Words that differ are highlighted only between near-duplicate captions (word similarity ≥ "
        f"{NEAR_DUPLICATE:g}: twice the words shared in order over the words of both); captions below that are "
        f"unrelated and shown plain, and so is a caption of more than {MAX_WORDS:,} words (not compared).")


def _split(text: str) -> tuple[list[str], list[str]]:
    """``(pieces, words)``: pieces alternate separator, word, separator, …; words are the odd pieces."""
    pieces = _WORD.split(text)
    return pieces, pieces[1::2]


def words(text: str) -> list[str]:
    """The words of ``text`` as the diff sees them (punctuation and spacing dropped)."""
    return _split(text)[1]


def diffable(a: str, b: str) -> bool:
    """Whether both captions are short enough (:data:`MAX_WORDS`) to be aligned word by word."""
    return len(words(a)) <= MAX_WORDS and len(words(b)) <= MAX_WORDS


def opcodes(a: str, b: str) -> Sequence[tuple[str, int, int, int, int]]:
    """difflib opcodes over the (lower-cased) words of ``a`` and ``b``; ``ValueError`` for a caption over
    :data:`MAX_WORDS` words (:func:`diffable` says first)."""
    wa, wb = (_split(t)[1] for t in (a, b))
    if len(wa) > MAX_WORDS or len(wb) > MAX_WORDS:
        raise ValueError(f"a caption of {max(len(wa), len(wb)):,} words: the diff aligns at most {MAX_WORDS:,}")
    return difflib.SequenceMatcher(a=[w.lower() for w in wa], b=[w.lower() for w in wb],
                                   autojunk=False).get_opcodes()


def similarity(a: str, b: str) -> float | None:
    """Word similarity ``2·M / (|a| + |b|)`` in [0, 1] (M: words in equal blocks); 1.0 for two empty captions;
    None where a caption is over :data:`MAX_WORDS` words (not computed)."""
    if not diffable(a, b):
        return None
    return _similarity(opcodes(a, b), len(words(a)) + len(words(b)))


def _similarity(codes: Sequence[tuple[str, int, int, int, int]], n_words: int) -> float:
    matched = sum(i2 - i1 for tag, i1, i2, _, _ in codes if tag == "equal")
    return 2 * matched / n_words if n_words else 1.0


def near_duplicates(a: str, b: str) -> bool:
    """Whether two captions are similar enough (:data:`NEAR_DUPLICATE`) for their differing words to mean
    something (never for a caption over :data:`MAX_WORDS` words: not compared)."""
    sim = similarity(a, b)
    return sim is not None and sim >= NEAR_DUPLICATE


def diff_words(a: str, b: str) -> tuple[Segments, Segments]:
    """Both captions as ``(text, changed)`` segments: changed words are those outside equal blocks, between
    near-duplicates only (unrelated captions, and a caption over :data:`MAX_WORDS` words, come back with
    nothing changed)."""
    (pa, wa), (pb, wb) = _split(a), _split(b)
    changed_a, changed_b = [False] * len(wa), [False] * len(wb)
    codes = opcodes(a, b) if len(wa) <= MAX_WORDS and len(wb) <= MAX_WORDS else []
    if codes and _similarity(codes, len(wa) + len(wb)) >= NEAR_DUPLICATE:
        for tag, i1, i2, j1, j2 in codes:
            if tag != "equal":
                changed_a[i1:i2] = [True] * (i2 - i1)
                changed_b[j1:j2] = [True] * (j2 - j1)
    return _segments(pa, changed_a), _segments(pb, changed_b)


def _segments(pieces: list[str], changed: list[bool]) -> Segments:
    """Plain runs merged into one segment (joined once: linear in the caption's length), each changed word
    its own."""
    out: Segments = []
    run: list[str] = []
    for k, piece in enumerate(pieces):
        if not piece:
            continue
        if k % 2 and changed[k // 2]:
            if run:
                out.append(("".join(run), False))
                run = []
            out.append((piece, True))
        else:
            run.append(piece)
    if run:
        out.append(("".join(run), False))
    return out


def changed_words(a: str, b: str) -> tuple[list[str], list[str]]:
    """The changed words of each side, in order (what a renderer marks)."""
    sa, sb = diff_words(a, b)
    return [t for t, c in sa if c], [t for t, c in sb if c]


def render(segments: Segments, escape: Callable[[str], str], mark: Callable[[str], str]) -> str:
    """Join segments, escaping every piece and wrapping changed words with ``mark`` (e.g. ``<mark>``, ``**``)."""
    return "".join(mark(escape(t)) if c else escape(t) for t, c in segments)
