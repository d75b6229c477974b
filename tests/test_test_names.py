"""Tests are named after the behaviour they check, never after an issue, item or defect number.

A name such as ``test_issue25_table_text_exact`` says where a test came from, not what it checks, and stops
saying anything once the issue is closed. This module reads every file under ``tests/`` (its name, and with
:mod:`ast` the names of its test functions, test classes and their methods) and fails on a name that carries
such a number again; the checker itself is tested on made-up names and a made-up test folder, so it cannot
pass by finding nothing.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

# an issue / item / defect number as a token of a snake_case or CamelCase name: issue25, item_7, Defect3
NUMBERED = re.compile(r"(?:^|_)(?:issue|item|defect)_?\d+(?=_|$)", re.IGNORECASE)


def _tokens(name: str) -> str:
    """``name`` in snake case, lower-cased: CamelCase words split (``TestIssue25Pages`` → ``test_issue25_pages``)."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def carries_a_number(name: str) -> bool:
    """Whether a test or file name holds an issue / item / defect number as one of its words."""
    return NUMBERED.search(_tokens(Path(name).stem)) is not None


def _test_names(path: Path) -> list[tuple[str, int]]:
    """The test functions, test classes and their methods defined anywhere in ``path``, with their lines."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            found.append((node.name, node.lineno))
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            found.append((node.name, node.lineno))
    return sorted(found, key=lambda found: found[1])


def numbered_names(root: Path) -> list[str]:
    """Every file under ``root`` whose name, and every test in a ``.py`` file there whose name, carries a number,
    as ``path`` or ``path:line name`` relative to ``root``."""
    offenders = []
    for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        where = path.relative_to(root)
        if carries_a_number(path.name):
            offenders.append(str(where))
        if path.suffix == ".py":
            offenders += [f"{where}:{line} {name}" for name, line in _test_names(path) if carries_a_number(name)]
    return offenders


@pytest.mark.parametrize("name", [
    "test_issue25_table_text_exact", "test_item7_every_public_name_works", "test_x_defect7_flags",
    "test_issue20_item5_leaderboard", "test_item_3_reader", "test_issue_25", "test_something_issue25",
    "TestIssue25Pages", "test_issue25_cli.py", "test_ISSUE25_upper",
])
def test_a_numbered_name_is_caught(name):
    assert carries_a_number(name)


@pytest.mark.parametrize("name", [
    "test_readme_encoder_protocol_example_scores_a_custom_model", "test_items_are_kept_in_order",
    "test_top_10_items", "test_issuer_name_is_recorded", "test_r1_at_k", "test_sha256_of_each_item",
    "test_at_most_40_hand_written_flags", "test_flickr30k_full", "TestRecallAt5", "test_small_sample_intervals.py",
    "test_item_list", "test_issues_are_listed",
])
def test_a_behaviour_name_is_not_caught(name):
    assert not carries_a_number(name)


def test_the_checker_finds_numbered_files_functions_classes_and_methods(tmp_path):
    """A made-up tests folder: each kind of offender is reported with its place, and nothing else is."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "test_issue12_old.py").write_text("def test_fine():\n    pass\n")
    (tmp_path / "test_good.py").write_text(
        "import pytest\n\n\n"
        "def test_item3_pair():\n    pass\n\n\n"
        "def _helper_issue4():  # not a test: its name is its own business\n    pass\n\n\n"
        "class TestDefect2Things:\n    def test_fine(self):\n        pass\n\n\n"
        "class TestFine:\n    async def test_issue9_inner(self):\n        pass\n\n\n"
        "def test_reads_item_numbers():\n    pass\n")
    (tmp_path / "sub" / "fixtures_item8.json").write_text("{}")
    assert numbered_names(tmp_path) == [
        "sub/fixtures_item8.json", "test_good.py:4 test_item3_pair", "test_good.py:12 TestDefect2Things",
        "test_good.py:18 test_issue9_inner", "test_issue12_old.py"]


def test_no_test_or_test_file_name_carries_an_issue_number():
    """Every file under tests/ and every test in it is named by what it checks (the checker sees them all)."""
    files = [p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts]
    assert len(files) > 90 and sum(len(_test_names(p)) for p in files) > 700  # it reads the real suite
    offenders = numbered_names(TESTS)
    assert offenders == [], "named after an issue number, not a behaviour: " + "; ".join(offenders)
