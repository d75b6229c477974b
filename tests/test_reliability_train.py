"""Training: a finished run is never replaced by accident, pointless runs are refused, the last resumable
state is the run's end, and a folder the user owns, a run in use or a full disk loses nothing."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
from conftest import assert_one_line_error, make_pairs, snapshot, write_jsonl

from hnbench.cli import main
from hnbench.train.rundir import LOCK, MANIFEST


@pytest.fixture
def train_argv(micro_config, tmp_path) -> list[str]:
    pairs = make_pairs(tmp_path, n=8)
    data = write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    return ["-q", "train", "--model", "hnb-micro", "--model-config", str(micro_config), "--dataset", str(data),
            "--epochs", "2", "--batch-size", "4", "--num-workers", "0", "--lr", "1e-3", "--warmup-steps", "1"]


def test_finished_run_is_not_replaced_without_resume_or_overwrite(train_argv, tmp_path, capsys):
    run = tmp_path / "run"
    assert main([*train_argv, "--output", str(run)]) == 0
    finished = snapshot(run)
    assert "checkpoint.safetensors" in finished and "last/trainer_state.pt" in finished
    capsys.readouterr()
    assert main([*train_argv, "--output", str(run)]) == 2
    assert_one_line_error(capsys.readouterr().err, str(run), "not empty", "--resume", "--overwrite")
    assert snapshot(run) == finished  # nothing written, nothing overwritten
    # --overwrite starts afresh: the earlier run's outputs are replaced, a user's own file is left alone
    (run / "notes.txt").write_text("mine")
    assert main([*train_argv, "--output", str(run), "--overwrite", "--seed", "1"]) == 0
    now = snapshot(run)
    assert now["notes.txt"] == b"mine" and now["checkpoint.safetensors"] != finished["checkpoint.safetensors"]
    assert json.loads(now["train_config.json"])["config"]["seed"] == 1


@pytest.mark.parametrize("flag", ["--dataset", "--eval-dataset"])  # fails loading, or at the first evaluation
def test_failed_start_leaves_no_run_directory(train_argv, tmp_path, capsys, flag):
    run = tmp_path / "new" / "run"
    argv = [*train_argv, "--output", str(run)]
    if flag in argv:
        argv[argv.index(flag) + 1] = str(tmp_path / "missing.jsonl")
    else:
        argv += [flag, str(tmp_path / "missing.jsonl")]
    assert main(argv) == 2
    assert_one_line_error(capsys.readouterr().err, "missing.jsonl")
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize(("flag", "value", "reason"), [
    ("--epochs", "0", "epochs must be >= 1"),
    ("--batch-size", "1", "no in-batch negatives"),
])
def test_pointless_runs_are_refused_before_loading(train_argv, tmp_path, capsys, flag, value, reason):
    argv = [*train_argv, "--output", str(tmp_path / "run")]
    argv[argv.index(flag) + 1] = value
    argv[argv.index("--model") + 1] = "no-such-model"  # validated first: neither model nor data is loaded
    argv[argv.index("--dataset") + 1] = str(tmp_path / "missing.jsonl")
    assert main(argv) == 2
    assert_one_line_error(capsys.readouterr().err, reason)
    assert not (tmp_path / "run").exists()


def test_last_resumable_state_is_the_end_of_the_run(train_argv, tmp_path):
    run = tmp_path / "run"
    assert main([*train_argv, "--output", str(run)]) == 0
    meta = json.loads((run / "train_config.json").read_text())
    saved = torch.load(run / "last" / "trainer_state.pt", map_location="cpu", weights_only=True)
    assert meta["steps"] == 4 and (saved["step"], saved["epoch"], saved["batch_in_epoch"]) == (4, 2, 0)


def test_data_flags_reach_the_training_loader(micro_config, tmp_path, capsys):
    """train shares eval's data flags (--caption-column, --skip-invalid, …); each one is honoured and recorded."""
    pairs = make_pairs(tmp_path, n=8)
    rows = [{"image": p, "long_text": c} for p, c in pairs] + [{"image": "images/missing.png", "long_text": "gone"}]
    data = write_jsonl(tmp_path / "m.jsonl", rows)
    argv = ["-q", "train", "--model", "hnb-micro", "--model-config", str(micro_config), "--dataset", str(data),
            "--epochs", "1", "--batch-size", "4", "--num-workers", "0", "--output", str(tmp_path / "run")]
    assert main(argv) == 2  # no "caption" column: the flag is needed, and without it nothing runs
    assert_one_line_error(capsys.readouterr().err, "caption")
    assert not (tmp_path / "run").exists()
    assert main([*argv, "--caption-column", "long_text"]) == 2  # the missing image is an error…
    assert_one_line_error(capsys.readouterr().err, "missing.png")
    assert main([*argv, "--caption-column", "long_text", "--skip-invalid"]) == 0  # …unless skipped
    meta = json.loads((tmp_path / "run" / "train_config.json").read_text())
    assert meta["config"]["dataset_options"] == {"caption_column": "long_text", "skip_invalid": True}
    assert meta["steps"] == 2  # 8 valid pairs, batch 4


# --- folders the user owns, runs in use, full disks ----------------------------------------------------------


def test_overwrite_removes_only_what_the_recorded_run_wrote(train_argv, tmp_path, capsys):
    """--overwrite in a folder that never held a run removes nothing of the user's: refused if it holds
    entries of a run's names, else the run writes beside the user's files; a run's manifest lists what it wrote."""
    folder = tmp_path / "mine"
    (folder / "eval").mkdir(parents=True)
    (folder / "eval" / "table.csv").write_text("my results")
    (folder / "adapter").write_text("my adapter notes")
    (folder / "notes.txt").write_text("mine")
    before = snapshot(folder)
    assert main([*train_argv, "--output", str(folder), "--overwrite"]) == 2
    assert_one_line_error(capsys.readouterr().err, str(folder), "--overwrite", "eval", "adapter", MANIFEST)
    assert snapshot(folder) == before  # nothing removed, nothing written (no lock file either)
    # a folder holding only the user's other files: the run writes beside them and records what it wrote
    (folder / "adapter").unlink()
    shutil.rmtree(folder / "eval")
    assert main([*train_argv, "--output", str(folder), "--overwrite"]) == 0
    written = json.loads((folder / MANIFEST).read_text())["outputs"]
    assert written == sorted(["checkpoint.safetensors", "diagnostics.jsonl", "last", "log.jsonl", "train_config.json"])
    assert (folder / "notes.txt").read_text() == "mine"
    # a rerun with --overwrite removes the recorded entries only: a file the user added is kept
    (folder / "plot.png").write_bytes(b"mine too")
    assert main([*train_argv, "--output", str(folder), "--overwrite", "--seed", "3"]) == 0
    assert (folder / "plot.png").read_bytes() == b"mine too" and (folder / "notes.txt").read_text() == "mine"
    assert json.loads((folder / "train_config.json").read_text())["config"]["seed"] == 3


def test_empty_output_is_refused(train_argv, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # "" would be the current folder
    before = snapshot(tmp_path)
    assert main([*train_argv, "--output", "", "--overwrite"]) == 2
    assert_one_line_error(capsys.readouterr().err, "output must name a run directory", "''")
    assert snapshot(tmp_path) == before


HOLD_LOCK = """
import sys, time
from pathlib import Path
from hnbench.train.rundir import locked
with locked(Path(sys.argv[1]), resume=False, overwrite=False):
    print("held", flush=True)
    time.sleep(600)
"""


def test_run_folder_in_use_is_refused_and_a_killed_run_leaves_no_stale_lock(train_argv, tmp_path, capsys):
    run = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(run)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        before = snapshot(run)
        for extra in ([], ["--overwrite"], ["--resume"]):
            assert main([*train_argv, "--output", str(run), *extra]) == 2
            assert_one_line_error(capsys.readouterr().err, str(run), "in use by another hnbench train")
            assert snapshot(run) == before
    finally:
        holder.kill()  # SIGKILL: the process cannot release anything itself
        holder.wait()
    assert (run / LOCK).exists()  # the lock file stays, but the OS released the dead process's lock
    assert main([*train_argv, "--output", str(run)]) == 0


@pytest.mark.parametrize(("flag", "value", "words"), [
    ("--lr", "nan", ("--lr (lr)", "finite number > 0", "nan")),
    ("--lr", "-1", ("--lr (lr)", "> 0", "-1")),
    ("--gamma", "nan", ("--gamma (gamma)", "finite number >= 0", "nan")),
    ("--data-fraction", "inf", ("--data-fraction (data_fraction)", "in (0, 1]", "inf")),
    ("--label-smoothing", "1", ("--label-smoothing (label_smoothing)", "in [0, 1)")),
    ("--set", "weight_decay=NaN", ("--weight-decay (weight_decay)", "finite number >= 0", "nan")),
])
def test_float_options_out_of_range_are_one_line_before_loading(train_argv, tmp_path, capsys, flag, value, words):
    argv = [*train_argv, "--output", str(tmp_path / "run"), flag, value]
    argv[argv.index("--model") + 1] = "no-such-model"  # checked first: neither model nor data is loaded
    assert main(argv) == 2
    assert_one_line_error(capsys.readouterr().err, *words)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("name", "text", "words"), [
    ("r.toml", 'lr = 1e-3\ngamma = \nepochs = 2\n', ("r.toml:2:", "not valid TOML")),
    ("r.yaml", "lr: 1.0e-3\ngamma: [1, 2\nepochs: 2\n", ("r.yaml:3:", "not valid YAML")),
])
def test_recipe_with_a_syntax_error_is_one_line_naming_file_and_line(train_argv, tmp_path, capsys, name, text, words):
    (tmp_path / name).write_text(text)
    assert main([*train_argv, "--recipe", str(tmp_path / name), "--output", str(tmp_path / "run")]) == 2
    assert_one_line_error(capsys.readouterr().err, *words)
    assert not (tmp_path / "run").exists()


class _Smuggled:  # any class: torch.load(weights_only=True) refuses to build it
    pass


def test_pickled_trainer_state_on_resume_is_one_line(train_argv, tmp_path, capsys):
    run = tmp_path / "run"
    assert main([*train_argv, "--output", str(run), "--stop-at-step", "1"]) == 0
    saved = torch.load(run / "last" / "trainer_state.pt", map_location="cpu", weights_only=True)
    torch.save({**saved, "payload": _Smuggled()}, run / "last" / "trainer_state.pt")
    capsys.readouterr()
    before = snapshot(run)
    assert main([*train_argv, "--output", str(run), "--resume"]) == 2
    assert_one_line_error(capsys.readouterr().err, "trainer_state.pt", "refused to unpickle")
    assert snapshot(run) == before


def test_lora_targets_offer_and_accept_only_layers_adapters_can_wrap(train_argv, tmp_path, capsys):
    pytest.importorskip("peft")
    argv = [*train_argv, "--output", str(tmp_path / "run"), "--peft", "lora", "--lora-targets", "nothing_like_it"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert_one_line_error(err, "adaptable layers", "c_fc")
    assert "gelu" not in err and "ln_1" not in err  # the hint offers only what can be targeted
    argv[-1] = "gelu"
    assert main(argv) == 2
    assert_one_line_error(capsys.readouterr().err, "gelu is a GELU", "cannot wrap", "c_fc")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("n_images", "extra", "words"), [
    (1, [], ("1 image:",)),
    (8, ["--data-fraction", "0.1"], ("1 image after --data-fraction",)),
])
def test_one_image_training_set_is_refused_like_batch_size_1(micro_config, tmp_path, capsys, n_images, extra,
                                                              words):
    pairs = make_pairs(tmp_path, n=n_images)
    data = write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    argv = ["-q", "train", "--model", "hnb-micro", "--model-config", str(micro_config), "--dataset", str(data),
            "--batch-size", "4", "--num-workers", "0", "--output", str(tmp_path / "run"), *extra]
    assert main(argv) == 2
    assert_one_line_error(capsys.readouterr().err, *words, "no in-batch negatives")
    assert not (tmp_path / "run").exists()


@contextlib.contextmanager
def small_disk(path, size: str):
    """A real disk of ``size`` (a tmpfs mounted on ``path``): writes past it fail with ENOSPC."""
    path.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                                           capture_output=True).returncode:
        pytest.skip("needs root to mount a small tmpfs")
    try:
        yield path
    finally:
        subprocess.run(["umount", "--lazy", str(path)], check=True)  # lazy: detached even if a file is open


def test_disk_full_while_saving_the_state_keeps_the_previous_one(train_argv, tmp_path, capsys):
    """A 30 MiB disk holds epoch 1's resumable state (~19 MiB) but not epoch 2's beside it."""
    with small_disk(tmp_path / "disk", "30m") as disk:
        run = disk / "run"
        assert main([*train_argv, "--output", str(run)]) == 2
        assert_one_line_error(capsys.readouterr().err, "cannot save the resumable state", str(run / "last"),
                              "free on its disk", "the previous state (step 2) is kept", "--resume")
        assert sorted(p.name for p in run.iterdir() if p.name.startswith(".last")) == []  # no partial state left
        saved = torch.load(run / "last" / "trainer_state.pt", map_location="cpu", weights_only=True)
        assert (saved["step"], saved["epoch"]) == (2, 1)
        shutil.copytree(run, tmp_path / "roomier")  # the space back: the kept state resumes
    assert main([*train_argv, "--output", str(tmp_path / "roomier"), "--resume"]) == 0
    assert json.loads((tmp_path / "roomier" / "train_config.json").read_text())["steps"] == 4


def test_disk_full_while_writing_the_checkpoint_keeps_the_final_state(train_argv, tmp_path, capsys):
    """A 22 MiB disk holds the final state (~19 MiB) but not the checkpoint (~6 MiB) beside it."""
    argv = [*train_argv, "--epochs", "1"]
    with small_disk(tmp_path / "disk", "22m") as disk:
        run = disk / "run"
        assert main([*argv, "--output", str(run)]) == 2
        assert_one_line_error(capsys.readouterr().err, "cannot save the checkpoint", "free on its disk",
                              f"final state is kept in {run / 'last'}", "--resume")
        assert not (run / ".checkpoint.safetensors.tmp").exists() and not (run / "checkpoint.safetensors").exists()
        shutil.copytree(run, tmp_path / "roomier")
    assert main([*argv, "--output", str(tmp_path / "roomier"), "--resume"]) == 0  # writes the checkpoint
    assert (tmp_path / "roomier" / "checkpoint.safetensors").is_file()
    assert json.loads((tmp_path / "roomier" / "train_config.json").read_text())["steps"] == 2


def test_hardness_float_options_are_finite_before_loading(tmp_path, capsys):
    argv = ["hardness", "--dataset", str(tmp_path / "missing.jsonl"), "--model", "no-such-model",
            "--output", str(tmp_path / "out"), "--threshold", "nan"]
    assert main(argv) == 2
    assert_one_line_error(capsys.readouterr().err, "--threshold must be a finite number", "nan")
    assert not (tmp_path / "out").exists()
