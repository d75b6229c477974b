"""The HTML leaderboard's page: :mod:`hnbench.results.leaderboard`'s blocks in the browse page's look.

One self-contained file (the stylesheet and the column sorter of :mod:`hnbench.pages.theme` inlined, no
font, script or stylesheet fetched). Every table sorts by a click on a column head; a score cell stays on
one line (value, delta and intervals of ``--ci --baseline`` side by side), and a table wider than the
window scrolls sideways instead of wrapping its cells.
"""

from __future__ import annotations

from hnbench.pages.theme import CSS, SORT_JS

_CSS = """
table{display:block;overflow-x:auto;max-width:100%;font-size:13px}
td{white-space:nowrap}
td:nth-child(2){white-space:normal;min-width:12em;max-width:24em}
td b{color:#0b3d91}
ul{padding-left:1.4em}li{margin:.15em 0}
"""

_JS = """
document.querySelectorAll('table').forEach(hnbSortable);
document.body.dataset.ready = '1';
"""


def page(body: str, title: str, *, css: str = "") -> str:
    """The whole board from its rendered (already escaped) HTML ``body`` and ``title``; ``css``: more rules (a
    site's navigation)."""
    return ("<!DOCTYPE html>\n" f'<html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
            f"<style>{CSS}{_CSS}{css}</style></head><body>\n{body}\n<script>{SORT_JS}{_JS}</script>\n</body></html>\n")
