"""Static checks as part of the test command: ruff over the code and mypy --strict over the package.

Both read their configuration from ``pyproject.toml`` (``[tool.ruff]``, ``[tool.mypy]``) and run from the
repository root, so ``python -m pytest`` checks exactly what ``ruff check`` and ``mypy`` would. Both tools
are in the ``dev`` extra; a test skips (and says so) only where its tool is not installed.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run_tool(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -m <module> <args>`` from the repository root, skipping when the tool is missing."""
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (it is in the dev extra: pip install -e '.[dev]')")
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True, check=False
    )


def test_ruff_clean() -> None:
    """``ruff check`` finds nothing in the package, the tests or the benchmark scripts."""
    proc = _run_tool("ruff", "check", "hnbench", "tests", "benchmarks")
    assert proc.returncode == 0, f"ruff check failed:\n{proc.stdout}{proc.stderr}"


@pytest.mark.slow
def test_mypy_strict_clean() -> None:
    """mypy, strict as configured in pyproject.toml, finds no type error in the package."""
    # The cache lives under the repository's (git-ignored) .mypy_cache, so a second run is incremental.
    proc = _run_tool("mypy", "--cache-dir", str(ROOT / ".mypy_cache"))
    assert proc.returncode == 0, f"mypy failed:\n{proc.stdout}{proc.stderr}"
    assert "Success" in proc.stdout, proc.stdout
