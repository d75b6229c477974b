"""Reading someone else's files allocates what the file holds, never the reader's limit: ``compare``,
``leaderboard`` and ``browse`` run under an address-space limit (``ulimit -v``, a container) far below the
4 GiB a per-query table may reach."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import make_pairs, write_jsonl

from hnbench.cli import main
from hnbench.errors import DataError
from hnbench.io import MAX_TABLE_BYTES, read_untrusted

# what the commands import (torch, pandas, pyarrow and hnbench's modules), and the address space that takes
_PROBE = ("import torch, pandas, pyarrow.parquet, hnbench.cli, hnbench.results.compare, hnbench.results.leaderboard, "
          "hnbench.pages.build\n"
          "print(next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmPeak:')) * 1024)")


def _env() -> dict[str, str]:
    """This tree's hnbench, and at most two malloc arenas: each thread's own arena reserves 64 MiB of address
    space, so the room the threads take would grow with the machine's cores rather than with the files."""
    tree = str(Path(__file__).resolve().parents[1])
    return {**os.environ, "PYTHONPATH": tree + os.pathsep + os.environ.get("PYTHONPATH", ""), "MALLOC_ARENA_MAX": "2"}


def _address_space_limit() -> int:
    """The address space the imports take plus 2 GiB: room for a run on a few small files (its threads, its
    frames), and well below what one ``read(MAX_TABLE_BYTES + 1)`` (4 GiB) on top of those imports asks for.
    (Not a bare 3 GiB: importing torch alone takes more on some machines.)"""
    probe = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, env=_env(), timeout=300)
    assert probe.returncode == 0, probe.stderr[-2000:]
    limit = int(probe.stdout.split()[-1]) + (2 << 30)
    assert limit < int(probe.stdout.split()[-1]) + MAX_TABLE_BYTES  # the old read could never fit in it
    return limit


def _run_limited(args: list[str], limit: int) -> subprocess.CompletedProcess[str]:
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return subprocess.run([sys.executable, "-m", "hnbench", *args], capture_output=True, text=True, env=_env(),
                          preexec_fn=cap, timeout=300)


@pytest.fixture(scope="module")
def two_results(tmp_path_factory, micro_config) -> tuple[Path, Path, Path]:
    """Two micro-model results (context 8 and 24) with their per-query files on a 9-image manifest; their folder."""
    root = tmp_path_factory.mktemp("bounded")
    data = write_jsonl(root / "m.jsonl", [{"image": p, "caption": c} for p, c in make_pairs(root, n=9)])
    paths = []
    for name, ctx in (("a", 8), ("b", 24)):
        assert main(["-q", "eval", "--model", "hnb-micro", "--model-config", str(micro_config), "--dataset",
                     str(data), "--output", str(root / "results" / name), "--num-workers", "0",
                     "--context-length", str(ctx), "--no-cache", "--k", "1", "5"]) == 0
        (path,) = (root / "results" / name).glob("*.json")
        paths.append(path)
    return paths[0], paths[1], root


@pytest.mark.slow
def test_compare_leaderboard_and_browse_run_under_an_address_space_limit(two_results):
    a, b, root = two_results
    limit = _address_space_limit()
    runs = {"compare": _run_limited(["-q", "compare", str(a), str(b), "--k", "1", "5"], limit),
            "leaderboard": _run_limited(["-q", "leaderboard", str(root / "results")], limit),
            "browse": _run_limited(["-q", "browse", str(a), "--compare", str(b), "--output", str(root / "page")],
                                   limit)}
    for command, run in runs.items():
        assert run.returncode == 0, (command, run.stderr[-2000:])
        assert "MemoryError" not in run.stderr and "Traceback" not in run.stderr, (command, run.stderr[-2000:])
    assert "Δ" in runs["compare"].stdout  # the paired table, from both per-query files
    board = runs["leaderboard"].stdout
    assert board.count("hnb-micro") >= 2 and "Skipped files" not in board  # both read, per-query files checked
    assert (root / "page" / "index.html").read_text().count('class="query"') == 18


def test_a_file_is_read_whole_whatever_its_stat_says(tmp_path):
    """A file whose size the stat does not give (``/proc``: 0 bytes) is read to its end; a file is read whole
    under the table limit, and one past a small limit is still refused."""
    status = read_untrusted("/proc/self/status", "a status file", limit=MAX_TABLE_BYTES)
    assert os.stat("/proc/self/status").st_size == 0 and status.startswith(b"Name:") and b"VmPeak:" in status
    big = tmp_path / "t.parquet"
    big.write_bytes(bytes(range(256)) * 4096 * 3)  # 3 MiB: more than one block of the reader
    assert read_untrusted(big, "a table", limit=MAX_TABLE_BYTES) == big.read_bytes()
    with pytest.raises(DataError, match="more than the 1,000"):
        read_untrusted(big, "a table", limit=1000)
    with pytest.raises(DataError, match="grew past the 100"):  # size 0 by its stat, more by its content
        read_untrusted("/proc/self/status", "a status file", limit=100)
