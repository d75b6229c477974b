"""The documentation as the tests read it: README.md and docs/**/*.md, each page with its generated parts made (by
docs/hooks.py, as the site build makes them), and the fenced code blocks of a page with what marks them."""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
# an HTML comment right before a fence: <!-- not-run: why --> or <!-- file: NAME --> (the block is that file)
MARK = re.compile(r"<!--\s*(not-run|file):\s*(.*?)\s*-->\s*\n\s*$")
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w+-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)
SNIPPET = re.compile(r'^[ \t]*--8<--\s+"([^"]+)"[ \t]*$', re.M)


@cache
def hooks() -> ModuleType:
    """docs/hooks.py, the module the site build runs (it imports nothing of MkDocs at module level)."""
    spec = importlib.util.spec_from_file_location("hnbench_docs_hooks", DOCS / "hooks.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def page(path: str) -> str:
    """``docs/PATH`` as the site shows it: its generated tables and references made now."""
    text: str = hooks().page(path)
    return text


def section(text: str, start: str, end: str | None = None) -> str:
    """The text from ``start`` up to ``end`` (the next heading of ``start``'s level when None)."""
    body = text[text.index(start):]
    if end is None:
        level = start.split(" ", 1)[0] if start.startswith("#") else "##"
        nxt = re.search(rf"^{re.escape(level)} ", body[len(start):], re.M)
        return body[:len(start) + nxt.start()] if nxt else body
    return body[:body.index(end, len(start))]


def pages() -> list[Path]:
    """Every page whose examples run: README.md and docs/**/*.md."""
    return [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]


@dataclass(frozen=True)
class Block:
    """A fenced block of a page: its language, its code (snippets included), and what the comment before it says."""

    path: Path
    line: int
    lang: str
    code: str
    not_run: str | None = None  # why it cannot run here
    file: str | None = None  # the block is this file (written into the example's folder, not run itself)

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def include_snippets(code: str) -> str:
    """``--8<-- "path"`` lines (pymdownx.snippets, paths from the repository root) replaced by the file's text."""
    return SNIPPET.sub(lambda m: (REPO / m.group(1)).read_text(encoding="utf-8").rstrip("\n"), code)


def blocks(path: Path) -> list[Block]:
    """The fenced code blocks of one page, in order."""
    text = path.read_text(encoding="utf-8")
    found = []
    for m in FENCE.finditer(text):
        before = text[:m.start()]
        mark = MARK.search(before)
        body = "".join(line[len(m.group("indent")):] for line in m.group("body").splitlines(keepends=True))
        found.append(Block(path, before.count("\n") + 1, m.group("lang"), include_snippets(body),
                           not_run=mark.group(2) if mark and mark.group(1) == "not-run" else None,
                           file=mark.group(2) if mark and mark.group(1) == "file" else None))
    return found
