"""Issue 12, training: a finished run is never replaced by accident (2), pointless runs are refused (10),
and the last resumable state is the run's end."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import assert_one_line_error, make_pairs, snapshot, write_jsonl

from hnbench.cli import main


@pytest.fixture
def train_argv(micro_config, tmp_path) -> list[str]:
    pairs = make_pairs(tmp_path, n=8)
    data = write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    return ["-q", "train", "--model", "hnb-micro", "--model-config", str(micro_config), "--dataset", str(data),
            "--epochs", "2", "--batch-size", "4", "--num-workers", "0", "--lr", "1e-3", "--warmup-steps", "1"]


def test_item2_finished_run_is_not_replaced_without_resume_or_overwrite(train_argv, tmp_path, capsys):
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


def test_item2_failed_start_leaves_no_run_directory(train_argv, tmp_path, capsys):
    run = tmp_path / "new" / "run"
    argv = [*train_argv, "--output", str(run)]
    argv[argv.index("--dataset") + 1] = str(tmp_path / "missing.jsonl")
    assert main(argv) == 2
    assert_one_line_error(capsys.readouterr().err, "missing.jsonl")
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize(("flag", "value", "reason"), [
    ("--epochs", "0", "epochs must be >= 1"),
    ("--batch-size", "1", "no in-batch negatives"),
])
def test_item10_pointless_runs_are_refused_before_loading(train_argv, tmp_path, capsys, flag, value, reason):
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
