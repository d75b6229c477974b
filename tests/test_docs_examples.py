"""Every example of the documentation runs: each ```python and ```bash block of README.md and docs/**/*.md, page by
page in a fresh folder (a page's blocks in order, so a later block reads what an earlier one wrote), python blocks as
scripts and shell blocks with ``bash -e`` (``hnbench`` is ``python -m hnbench`` of this checkout, ``REPO`` the
repository), offline. A block is left out only when an HTML comment right before it says why it cannot run here
(``<!-- not-run: needs the Hub -->``); a block marked ``<!-- file: NAME -->`` is a file the page's later blocks use."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from docs_pages import REPO, Block, blocks, pages

RUNNABLE = {"python", "bash", "shell"}
KNOWN = RUNNABLE | {"text", "toml", "json", "yaml", "csv", ""}
SHELL_PRELUDE = 'set -o pipefail\nhnbench() { python -m hnbench "$@"; }\n'


def _runnable_pages() -> list[Path]:
    return [p for p in pages() if any(b.lang in RUNNABLE and not b.not_run for b in blocks(p))]


def _env(cache: Path) -> dict[str, str]:
    """This checkout first on the path, its interpreter first on PATH, one shared embedding cache, no network."""
    env = {k: v for k, v in os.environ.items() if k not in ("HNBENCH_PLUGINS", "COLUMNS")}
    env.update(PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")])),
               PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
               REPO=str(REPO), HNBENCH_CACHE=str(cache), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               MPLBACKEND="Agg", TOKENIZERS_PARALLELISM="false")
    return env


def _run(block: Block, n: int, cwd: Path, env: dict[str, str]) -> None:
    if block.file:
        target = cwd / block.file
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(block.code)
        return
    if block.lang == "python":
        script = cwd / f"_example_{n}.py"
        script.write_text(block.code)
        argv = [sys.executable, str(script)]
    else:
        argv = ["bash", "-e", "-c", SHELL_PRELUDE + block.code]
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (f"{block.where} ({block.lang}) exited {done.returncode}:\n"
                                  f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}")


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory) -> Path:
    """One hnbench cache for every page: synthdense is generated once, embeddings encoded once."""
    return tmp_path_factory.mktemp("docs-cache")


@pytest.mark.slow
@pytest.mark.parametrize("page", _runnable_pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_runnable_example_of_the_page_runs(page, tmp_path, shared_cache):
    env = _env(shared_cache)
    ran = 0
    for n, block in enumerate(blocks(page)):
        if block.lang in RUNNABLE and not block.not_run:
            _run(block, n, tmp_path, env)
            ran += 1
    assert ran


def test_every_code_block_runs_or_says_why_it_cannot():
    """Each python/bash block is run by the test above unless marked, and a mark gives its reason; no block is in a
    language this test would silently pass over (``sh``, ``console``)."""
    marked = []
    for page in pages():
        for block in blocks(page):
            assert block.lang in KNOWN, f"{block.where}: a ```{block.lang} block (runnable ones are python or bash)"
            if block.not_run is not None:
                assert len(block.not_run.split()) >= 2, f"{block.where}: not-run without a reason"
                assert block.lang in RUNNABLE, f"{block.where}: a not-run mark on a ```{block.lang} block"
                marked.append(block)
            if block.file:
                assert block.lang in RUNNABLE and not Path(block.file).is_absolute() and ".." not in block.file
    runnable = [b for p in pages() for b in blocks(p) if b.lang in RUNNABLE and not b.not_run and not b.file]
    assert len(runnable) > len(marked), (len(runnable), [b.where for b in marked])  # the marked stay the few


def test_the_readme_test_command_is_the_one_ci_runs():
    """The README's set-up + tests block cannot run inside the tests: it is, verbatim, a line of .ci/run."""
    readme = [b for b in blocks(REPO / "README.md") if b.lang == "bash"]
    setup_tests = [b for b in readme if "pytest" in b.code]
    assert len(setup_tests) == 1 and setup_tests[0].not_run
    command = setup_tests[0].code.strip()
    assert command in (REPO / ".ci" / "run").read_text().splitlines()
    demo = [b for b in readme if b.code.strip().endswith("hnbench demo")]
    assert len(demo) == 1 and demo[0].code.replace(".venv/bin/hnbench demo", "").strip() == \
        command.replace('-e ".[dev]"', "-e .").replace(".venv/bin/python -m pytest", "").strip()


def test_snippet_includes_name_files_of_the_repository():
    """A page shows the example plugin's files by including them (``--8<--``), so it shows the code its tests run."""
    included = set()
    for page in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        for path in re.findall(r'^[ \t]*--8<--\s+"([^"]+)"', page.read_text(encoding="utf-8"), re.M):
            assert (REPO / path).is_file(), f"{page.relative_to(REPO)} includes {path}, which does not exist"
            included.add(path)
    plugin = {f"tests/plugins/example/hnbench_example/{name}.py" for name in ("task", "family", "benchmark", "objective")}
    assert plugin <= included
