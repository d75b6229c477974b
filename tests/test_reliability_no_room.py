"""A full disk (or quota, or the process's file-size limit) is the machine's state, not a bug: one line naming the
file, exit 1, and what an earlier run wrote stays whole (files are replaced whole or not at all)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import make_pairs, write_jsonl

from hnbench.io import append_line

REPO = Path(__file__).resolve().parent.parent

# the second run's writes exceed RLIMIT_FSIZE: the kernel refuses them with EFBIG (SIGXFSZ ignored)
SCRIPT = """
import resource, signal, sys
from hnbench.cli import main
limit, argv = int(sys.argv[1]), sys.argv[2:]
if limit:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
sys.exit(main(argv))
"""


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.mark.slow  # two CLI runs in child processes (~14 s)
def test_no_room_for_a_result_is_one_line_and_the_earlier_result_stays_whole(tmp_path, micro_config):
    pairs = make_pairs(tmp_path, n=8)
    manifest = write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    out = tmp_path / "out"
    argv = ["-q", "eval", "--model", "hnb-micro", "--model-config", str(micro_config), "--dataset", str(manifest),
            "--output", str(out), "--num-workers", "0", "--no-cache", "--no-ci", "--k", "1", "5"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def run(limit: int) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", SCRIPT, str(limit), *argv], capture_output=True, text=True,
                              env=env, timeout=300)

    first = run(0)
    assert first.returncode == 0, first.stderr
    before = _snapshot(out)
    assert any(n.endswith(".json") for n in before) and any(n.endswith(".parquet") for n in before)
    again = run(1024)  # the same run again (it would replace its own files), with no room for them
    assert again.returncode == 1 and "Traceback" not in again.stderr, again.stderr
    assert again.stderr.count("\n") == 1 and again.stderr.startswith("hnbench: error: File too large writing "), \
        again.stderr
    assert str(out) in again.stderr and "ulimit -f" in again.stderr
    assert _snapshot(out) == before  # old files whole, no temporary left beside them


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_log_line_that_cannot_be_written_names_its_file():
    with pytest.raises(OSError) as e:
        append_line("/dev/full", '{"step": 0}')
    assert e.value.errno == errno.ENOSPC and e.value.filename == "/dev/full"
