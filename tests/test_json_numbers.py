"""A number too long for Python to read (past its 4,300-digit integer limit) in any JSON hnbench reads — a result,
a training run's config, an adapter's base file, a ``--set`` value — is bad input: one line, never a traceback."""

from __future__ import annotations

import json

import pytest
from conftest import make_pairs, write_jsonl

from hnbench.cli import main
from hnbench.errors import DataError, HnbenchError
from hnbench.io import loads_json, read_json_untrusted
from hnbench.results.record import read_result

HUGE = "9" * 5000


def _cli(capsys, *argv: str) -> tuple[int, list[str]]:
    try:
        rc = main(["-q", *argv])
    except SystemExit as e:
        rc = e.code
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    return rc, err


def test_loads_json_reports_a_number_past_the_digit_limit_as_a_decode_error():
    with pytest.raises(json.JSONDecodeError, match="number too long"):
        loads_json(f'{{"n_images": {HUGE}}}')
    assert loads_json('{"n": 12}') == {"n": 12}  # an ordinary document reads as before


def test_a_result_or_untrusted_file_with_a_huge_number_is_one_line(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(f'{{"schema_version": 2, "metrics": {{"t2i": {{"R@1": {HUGE}}}}}}}')
    with pytest.raises(DataError, match="number too long"):
        read_json_untrusted(path, "result file")
    with pytest.raises(HnbenchError, match="5000 digits"):
        read_result(path)


def test_train_report_of_a_run_whose_config_is_not_json_is_one_line(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "log.jsonl").write_text(json.dumps({"step": 1, "epoch": 0, "loss": 1.0}) + "\n")
    (run / "train_config.json").write_text(f'{{"config": {{"gamma": {HUGE}}}}}')
    rc, err = _cli(capsys, "train-report", str(run), "--output", str(tmp_path / "out"))
    assert rc == 2 and len(err) == 1 and "train_config.json" in err[0] and "Traceback" not in err[0], err
    (run / "train_config.json").write_text('["not", "a", "config"]')
    rc, err = _cli(capsys, "train-report", str(run), "--output", str(tmp_path / "out"))
    assert rc == 2 and len(err) == 1 and "not a training config" in err[0], err


def test_a_set_value_too_long_for_a_number_is_read_as_text_and_refused_in_one_line(tmp_path, capsys):
    pairs = make_pairs(tmp_path, n=4)
    manifest = write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    rc, err = _cli(capsys, "train", "--model", "hnbench-tiny", "--dataset", str(manifest),
                   "--output", str(tmp_path / "run"), "--set", f"gamma={HUGE}")
    assert rc == 2 and len(err) == 1 and "gamma" in err[0] and "Traceback" not in err[0], err
    assert not (tmp_path / "run").exists()
