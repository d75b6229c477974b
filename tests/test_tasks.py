"""The task layer. A task declares its inputs, metrics and main score; retrieval is the first (today's
pipeline); results record ``task`` and ``main_score``; a result written before tasks still loads, ranks and
compares; the leaderboard keeps each task in its own section."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import make_pairs, snapshot, write_jsonl

from hnbench.cli import main
from hnbench.errors import ConfigError
from hnbench.evaluation.evaluate import evaluate
from hnbench.registry import TASKS
from hnbench.results.compare import compare
from hnbench.results.leaderboard import collect, leaderboard
from hnbench.results.record import SCHEMA_VERSION, read_result, upgrade_record
from hnbench.settings import EvalSettings
from hnbench.tasks import Task

REPO = Path(__file__).resolve().parents[1]
STORED = REPO / "leaderboards" / "results" / "synthdense"


def _stored_copy(tmp_path: Path) -> Path:
    """A copy of the results stored in leaderboards/results/synthdense (schema 1, written before tasks)."""
    dest = tmp_path / "stored"
    shutil.copytree(STORED, dest)
    return dest


def test_retrieval_task_declares_inputs_metrics_and_main_score():
    task = TASKS.get("retrieval")
    assert isinstance(task, Task) and "retrieval" in TASKS.names()
    assert task.groups == ("t2i", "i2t") and task.main_score == "mean R@1"
    assert task.main_value({"t2i": {"R@1": 40.0}, "i2t": {"R@1": 30.0}}) == 35.0
    assert task.bound("R@5") == (0.0, 100.0) and task.bound("MRR") == (0.0, 1.0) and task.bound("n_queries") is None
    # its steps are its own (load, run); its capabilities declared: what other modules ask instead of its name
    assert type(task).load is not Task.load and type(task).run is not Task.run
    assert task.per_query and task.limit and task.distributed and task.scorers and task.pre_task_layout
    assert not task.named_files and task.board_columns()[-1] == "mean R@1" == task.main_column()
    # --task is an EvalSettings option: its choices are the registry's, and it names the result only when set
    assert EvalSettings().task == "retrieval" and "task" not in EvalSettings().recorded()
    with pytest.raises(ConfigError, match="--task must be one of"):
        EvalSettings(task="nope").validate()


def test_pre_task_result_loads_ranks_and_compares(tmp_path, capsys):
    stored = _stored_copy(tmp_path)
    files = sorted(stored.glob("*.json"))
    raw = json.loads(files[0].read_text())
    assert raw["schema_version"] == 1 and "task" not in raw  # as today's main wrote it
    r = read_result(files[0])
    assert r.task == "retrieval" and r.schema_version == 1
    mean = (raw["metrics"]["t2i"]["R@1"] + raw["metrics"]["i2t"]["R@1"]) / 2
    assert r.main_score == {"name": "mean R@1", "value": mean}
    assert upgrade_record(raw)["task"] == "retrieval" and "task" not in raw  # a copy; the record is kept
    # its file name is the one it always had (task retrieval is not part of it)
    assert r.stem() == files[0].stem
    # it ranks: the board of the copies lists every file, none skipped, under no task heading
    frame, skipped = collect([stored])
    assert not skipped and len(frame) == len(files) and set(frame["task"]) == {"retrieval"}
    board = leaderboard([stored])
    assert "## synthdense · test" in board and "## Retrieval" not in board
    # it compares: paired tests against another stored result
    out = tmp_path / "cmp"
    comparison = compare([str(files[0]), str(files[1])], output_dir=out)
    assert comparison.rows and (out / "compare.md").is_file()
    capsys.readouterr()


def test_new_result_records_task_and_main_score(micro_config, tmp_path):
    pairs = make_pairs(tmp_path, n=6)
    manifest = write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    r = evaluate("hnb-micro", manifest, model_config=micro_config, output_dir=tmp_path / "out", ci=False,
                 num_workers=0, progress=False)
    d = json.loads(Path(r.path).read_text())
    assert d["schema_version"] == SCHEMA_VERSION == 2 and d["task"] == "retrieval"
    assert d["main_score"] == {"name": "mean R@1",
                               "value": (d["metrics"]["t2i"]["R@1"] + d["metrics"]["i2t"]["R@1"]) / 2}
    assert "task" not in d["settings"]  # retrieval, the default, is not recorded: its file names are kept
    assert read_result(r.path) == r


def test_unknown_task_in_a_file_is_skipped_by_name(tmp_path):
    stored = _stored_copy(tmp_path)
    f = sorted(stored.glob("*.json"))[0]
    d = json.loads(f.read_text())
    d.update(schema_version=2, task="segmentation", main_score={"name": "mIoU", "value": 1.0})
    (stored / "odd.json").write_text(json.dumps(d))
    frame, skipped = collect([stored])
    assert [Path(p).name for p, _ in skipped] == ["odd.json"] and "unknown task 'segmentation'" in skipped[0][1]


def test_cli_task_flag_is_generated_and_checked_before_loading(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    assert "--task" in capsys.readouterr().out
    before = snapshot(tmp_path)
    with pytest.raises(SystemExit) as e:  # argparse's choices, one line naming the known tasks
        main(["eval", "--model", "hnbench-tiny", "--dataset", "synthdense", "--task", "clasification",
              "--output", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1 and "--task" in err and "retrieval" in err
    assert snapshot(tmp_path) == before
