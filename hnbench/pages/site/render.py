"""The site's own markup: its navigation, the index, a model's page and a hardness report's page, in the look of
the leaderboard's HTML board (:func:`hnbench.pages.board.page`: its stylesheet and column sorter inlined).

Every text that comes from a result folder (a model's name, a benchmark's, a path, a record's value) is escaped
here with :func:`html.escape`; every href is a relative path the builder made from hashes and slugs
(:func:`slug`), never a name read from a file.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from hnbench.io import NO_VALUE
from hnbench.pages.board import page as board_page

E = html.escape

SITE_CSS = """
nav.site{margin:-.6em 0 1em;padding:.4em 0;border-bottom:1px solid #dde1e8;font-size:13px}
nav.site a{margin-right:1.1em;text-decoration:none}nav.site b{margin-right:1.4em}
figure{margin:.6em 0 1.2em}figure img{max-width:100%;height:auto;border:1px solid #dde1e8}
figcaption{font-size:12px;color:#556}
table.kv td:first-child{font-weight:600;white-space:nowrap}
.muted{color:#667}td .muted{display:inline-block;white-space:normal;min-width:14em;max-width:24em;font-size:12px}
"""

# a failure browser within the site: its wide query table scrolls sideways inside the page (the page itself stays
# as wide as the window), captions a little narrower
BROWSE_CSS = """
#queries{display:block;overflow-x:auto;max-width:100%}.cap{max-width:26em}
"""


def slug(text: str, key: object) -> str:
    """A file name for ``text`` that no text can turn into a path: its letters and digits (at most 40) and a
    short hash of ``key`` (what tells two alike names apart)."""
    base = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40].strip("-") or "x"
    return f"{base}-{hashlib.sha256(repr(key).encode()).hexdigest()[:8]}"


def nav(depth: int) -> str:
    """The navigation every page opens with; ``depth``: how many folders the page lies below the site's root."""
    up = "../" * depth
    return (f'<nav class="site"><b>hnbench results</b><a href="{up}index.html">Index</a>'
            f'<a href="{up}index.html#benchmarks">Benchmarks</a><a href="{up}index.html#models">Models</a>'
            f'<a href="{up}index.html#hardness">Hardness</a><a href="{up}index.html#skipped">Skipped files</a></nav>')


def document(body: str, title: str, depth: int) -> str:
    """A whole page: the navigation, then ``body`` (rendered, escaped HTML); ``title`` is plain text."""
    return board_page(nav(depth) + "\n" + body, E(title), css=SITE_CSS)


def link(text: str, href: str) -> str:
    """An anchor: ``text`` escaped, ``href`` one the builder made (relative, its characters safe)."""
    return f'<a href="{E(href)}">{E(text)}</a>'


def table(heads: Sequence[str], rows: Iterable[Sequence[str]], cls: str = "") -> str:
    """A sortable table of already rendered cells (``heads`` plain text)."""
    head = "".join(f"<th>{E(h)}</th>" for h in heads)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table{f" class={chr(34)}{cls}{chr(34)}" if cls else ""}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def flat(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    """A record's nested mapping as ``(dotted key, text)`` pairs (lists and scalars as JSON text)."""
    if isinstance(value, Mapping):
        out: list[tuple[str, str]] = []
        for k, v in value.items():
            out += flat(v, f"{prefix}.{k}" if prefix else str(k))
        return out
    if isinstance(value, float):
        return [(prefix, f"{value:.6g}")]
    return [(prefix, value if isinstance(value, str) else json.dumps(value, default=str))]


def key_values(value: Mapping[str, Any]) -> str:
    """A small two-column table of a mapping (flattened, escaped)."""
    return table(["field", "value"], ([E(k), E(v)] for k, v in flat(value)), cls="kv")


def number(value: Any, ci: Sequence[Any] | None = None) -> str:
    """``12.34 [10.10, 14.50]``: a value with its interval where recorded; a dash where missing."""
    if not isinstance(value, (int, float)) or value != value:
        return NO_VALUE
    text = f"{value:.2f}"
    if isinstance(ci, Sequence) and len(ci) == 2 and all(isinstance(x, (int, float)) for x in ci):
        text += f" [{ci[0]:.2f}, {ci[1]:.2f}]"
    return text
