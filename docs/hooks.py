"""MkDocs hooks: the pages' generated parts, made at build time from their one declaration in hnbench.

A page holds a marker, an HTML comment such as ``<!-- hnbench:zoo-table -->`` (invisible where the Markdown is read
raw), and :func:`render` replaces it with what the package declares now: the model zoo table
(``hnbench.models.zoo.zoo_table``), the suite table (``hnbench.registry.SUITES``), the registries and their entries, the benchmark table (every
``BENCHMARK_SPECS`` entry, linked to its card) and each command's flags (the parser ``hnbench.cli.build_parser``
builds). The benchmark cards are ``datasets/*.md``, added to the site as ``cards/NAME.md`` (never copied into
``docs/``). The tests render pages through this module too (tests/test_docs_site.py and the tests that check what
a page states).
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CARDS = ROOT / "datasets"
MARKER = re.compile(r"<!-- hnbench:([a-z-]+) -->")
CLI_WIDTH = 100  # the help text's line width, fixed so the page does not depend on the terminal that builds it


def zoo_table() -> str:
    from hnbench.models.zoo import zoo_table

    return zoo_table()


def suite_table() -> str:
    """Each registered suite and what it runs, in the order they were declared (``hnbench suite --list``'s)."""
    from hnbench.registry import SUITES

    return "\n".join(["| suite | what it runs |", "|---|---|",
                      *(f"| `{name}` | {SUITES.help(name)} |" for name in SUITES.declared())])


def _count(n: int | None) -> str:
    return f"{n:,}" if n else "?"


def benchmark_table(card_prefix: str = "../cards/") -> str:
    """Every registered benchmark: its protocols with their sizes, its default protocol and caption rule, and its
    card (``datasets/NAME.md``) where it has one."""
    from hnbench.registry import BENCHMARK_SPECS

    rows = ["| benchmark | protocols (images / captions, or items) | default (caption rule) | card |", "|---|---|---|---|"]
    for name in BENCHMARK_SPECS.declared():
        spec = BENCHMARK_SPECS.get(name)
        protocols = []
        for p in spec.protocols:
            items = getattr(p, "n_items", None)
            size = f"{_count(items)} items" if items else f"{_count(p.n_images)} / {_count(p.n_captions)}"
            protocols.append(f"`{p.name}` ({size})")
        default = spec.protocol(None)
        card = f"[{name}]({card_prefix}{name}.md)" if (CARDS / f"{name}.md").is_file() else "—"
        rows.append(f"| `{name}` | {' · '.join(protocols)} | `{default.name}` (`{default.caption}`) | {card} |")
    return "\n".join(rows)


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def cli_reference() -> str:
    """``hnbench --help`` and every subcommand's ``--help`` (sub-subcommands too), as the parser prints them."""
    from hnbench.cli import build_parser

    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(CLI_WIDTH)
    try:
        parser = build_parser()
        sections = ["## `hnbench`", "", "```text", parser.format_help().rstrip(), "```"]

        def walk(prefix: str, sub: dict[str, argparse.ArgumentParser]) -> None:
            for name, child in sub.items():
                command = f"{prefix} {name}"
                sections.extend(["", f"## `{command}`", "", "```text", child.format_help().rstrip(), "```"])
                walk(command, _subparsers(child))

        walk("hnbench", _subparsers(parser))
    finally:
        if before is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = before
    return "\n".join(sections)


def registry_table() -> str:
    """Each registry of ``hnbench.registry`` (its name there, what it holds) and the entries registered now."""
    from hnbench import registry

    rows = ["| registry | holds | entries |", "|---|---|---|"]
    for name, value in vars(registry).items():
        if isinstance(value, registry.Registry):
            entries = ", ".join(f"`{n}`" for n in value.names())
            rows.append(f"| `{name}` | {value.kind} | {entries} |")
    return "\n".join(rows)


GENERATORS: dict[str, Callable[[], str]] = {
    "registry-table": registry_table,
    "zoo-table": zoo_table,
    "suite-table": suite_table,
    "benchmark-table": benchmark_table,
    "cli-reference": cli_reference,
}


def render(markdown: str) -> str:
    """``markdown`` with each ``<!-- hnbench:NAME -->`` marker replaced by what its generator makes now; an unknown
    name is an error (a typo would otherwise leave a page silently without its table)."""

    def one(match: re.Match[str]) -> str:
        if match.group(1) not in GENERATORS:
            raise ValueError(f"unknown generated section {match.group(1)!r}; known: {', '.join(GENERATORS)}")
        return GENERATORS[match.group(1)]()

    return MARKER.sub(one, markdown)


def page(path: str) -> str:
    """A page of ``docs/`` as the site shows it (its generated parts made): what the tests read."""
    return render((ROOT / "docs" / path).read_text(encoding="utf-8"))


# --- MkDocs events -------------------------------------------------------------------------------------------------
def on_config(config: Any) -> Any:
    """The benchmark cards' section of the navigation, one entry per ``datasets/*.md``."""
    cards = [{_card_title(p): f"cards/{p.name}"} for p in sorted(CARDS.glob("*.md"))]
    config["nav"].append({"Benchmark cards": cards})  # last: the guides, contributing and reference stay in view
    return config


def _card_title(path: Path) -> str:
    first = path.read_text(encoding="utf-8").splitlines()[0]
    return first.lstrip("# ").split(" — ")[0].strip() or path.stem


def on_files(files: Any, config: Any) -> Any:
    """Each benchmark card, ``datasets/NAME.md``, as the page ``cards/NAME.md``."""
    from mkdocs.structure.files import File

    for path in sorted(CARDS.glob("*.md")):
        files.append(File.generated(config, f"cards/{path.name}", content=path.read_text(encoding="utf-8")))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    return render(markdown)
