"""The cache: ``hnbench cache clear`` removes only what hnbench wrote, in a folder hnbench marked as its
embedding cache, says what it removes and needs ``--yes`` when not interactive; ``ls``/``du`` do not misreport
a folder that is not a cache."""

from __future__ import annotations

import json
import os
import pty
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import assert_one_line_error, make_pairs, snapshot, write_jsonl

from hnbench.cli import main
from hnbench.evaluation import cache


@pytest.fixture
def filled(micro_config, tmp_path, capsys) -> Path:
    """A cache root hnbench filled with one model's embeddings, inside a folder of other things (what
    ``$HNBENCH_CACHE`` looks like: embeddings/ beside downloaded data)."""
    pairs = make_pairs(tmp_path, n=5)
    data = write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    home = tmp_path / "hnbench-cache"
    (home / "synthdense").mkdir(parents=True)
    (home / "synthdense" / "train.jsonl").write_text("{}\n")
    (home / "benchmarks" / "docci").mkdir(parents=True)
    (home / "benchmarks" / "docci" / "release.tar").write_bytes(b"downloaded")
    root = home / "embeddings"
    assert main(["-q", "eval", "--model", "hnb-micro", "--model-config", str(micro_config), "--dataset", str(data),
                 "--output", str(tmp_path / "out"), "--num-workers", "0", "--cache-dir", str(root)]) == 0
    capsys.readouterr()
    return root


def test_cache_clear_refuses_a_folder_that_is_not_a_cache(filled, capsys):
    home = filled.parent  # the easy mistake: the cache home instead of …/embeddings
    before = snapshot(home)
    for command in (["clear", "--yes"], ["ls"], ["du"]):
        assert main(["cache", *command, "--cache-dir", str(home)]) == 2
        assert_one_line_error(capsys.readouterr().err, str(home), "not an hnbench embedding cache")
    assert snapshot(home) == before  # synthdense/ and benchmarks/ are still there, and the embeddings
    with pytest.raises(cache.CacheError, match="not an hnbench embedding cache"):
        cache.clear(home)  # the Python API refuses it too


def test_cache_clear_lists_what_it_removes_needs_yes_and_removes_only_its_own_files(filled, capsys):
    (key,) = [r["key"] for r in cache.list_models(filled)]
    assert (filled / cache.MARKER).is_file()
    (filled / "notes.txt").write_text("mine")  # a user's files inside the cache are not hnbench's to delete
    (filled / key / "mine.txt").write_text("mine too")
    before = snapshot(filled)
    assert main(["cache", "clear", "--cache-dir", str(filled)]) == 2  # stdin is not a terminal here
    out, err = capsys.readouterr()
    assert_one_line_error(err, "--yes", "nothing was removed")
    n_files = sum(1 for p in (filled / key).rglob("*") if p.is_file()) - 1  # all but mine.txt
    assert f"{key} ({n_files} files)" in out and f"in all ({n_files + 1} files)" in out  # + a fingerprint record
    assert snapshot(filled) == before
    assert main(["cache", "clear", "--cache-dir", str(filled), "--yes"]) == 0
    assert "freed" in capsys.readouterr().out
    assert sorted(snapshot(filled)) == [cache.MARKER, f"{key}/mine.txt", "notes.txt"]
    assert not (filled / cache.FINGERPRINTS).exists()  # emptied folders hnbench made are removed


def test_cache_made_before_the_marker_is_adopted_only_if_it_holds_nothing_else(filled, capsys):
    (filled / cache.MARKER).unlink()  # a cache written before hnbench marked its caches
    (key,) = [r["key"] for r in cache.list_models(filled)]
    shutil.copytree(filled / key, filled / ".run-x1" / key)  # an interrupted distributed run's private cache
    assert main(["cache", "du", "--cache-dir", str(filled)]) == 0
    out = capsys.readouterr().out
    assert key in out and ".run-x1" in out
    (filled / "notes.txt").write_text("mine")  # …but a folder with anything else in it is not adopted
    before = snapshot(filled)
    assert main(["cache", "clear", "--cache-dir", str(filled), "--yes"]) == 2
    assert_one_line_error(capsys.readouterr().err, "not an hnbench embedding cache", "notes.txt")
    assert snapshot(filled) == before
    (filled / "notes.txt").unlink()
    assert main(["cache", "clear", "--cache-dir", str(filled), "--yes"]) == 0
    assert not filled.exists() or not any(filled.iterdir())


def test_cache_dir_that_is_empty_is_refused(filled, capsys, monkeypatch):
    monkeypatch.setenv("HNBENCH_CACHE", str(filled.parent))  # the default cache is this one: not touched
    before = snapshot(filled.parent)
    assert main(["cache", "clear", "--cache-dir", "", "--yes"]) == 2
    assert_one_line_error(capsys.readouterr().err, "--cache-dir is empty")
    assert snapshot(filled.parent) == before


def test_cache_clear_asks_at_a_terminal(filled):
    """At a terminal, clear lists what it removes and asks; anything but yes removes nothing."""
    before = snapshot(filled)
    for answer, removed in ((b"n\n", False), (b"y\n", True)):
        leader, follower = pty.openpty()
        proc = subprocess.Popen([sys.executable, "-m", "hnbench", "cache", "clear", "--cache-dir", str(filled)],
                                stdin=follower, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=os.environ)
        os.close(follower)
        os.write(leader, answer)
        out, err = proc.communicate(timeout=60)
        os.close(leader)
        assert proc.returncode == 0, err
        assert b"in all" in out and b"remove them? [y/N]" in out
        assert (snapshot(filled) == before) is not removed
    assert json.loads((filled / cache.MARKER).read_text())["what"] == "hnbench embedding cache"
