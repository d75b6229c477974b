"""The same ``--model/--pretrained`` twice in ``hnbench suite`` is refused in one line before anything loads: both
would score into one result file, shown as two rows. Two spellings of one weights file are the same weights."""

from __future__ import annotations

import pytest
from conftest import assert_one_line_error, snapshot
from safetensors.torch import save_file

from hnbench.cli import main
from hnbench.errors import ConfigError
from hnbench.evaluation.suites import refuse_repeated_models
from hnbench.models import load_model


@pytest.mark.parametrize("argv", [
    ["--model", "hnbench-tiny", "--pretrained", "synthdense", "--model", "hnbench-tiny", "--pretrained", "synthdense"],
    ["--model", "hnbench-tiny", "--pretrained", "synthdense", "--pretrained", "none", "--pretrained", "synthdense"],
])
def test_the_same_model_and_weights_twice_is_one_line_and_nothing_written(tmp_path, capsys, argv):
    before = snapshot(tmp_path)
    assert main(["suite", "synthdense", *argv, "--output", str(tmp_path / "out")]) == 2
    assert_one_line_error(capsys.readouterr().err, "--model hnbench-tiny --pretrained synthdense is given twice",
                          "give each model once")
    assert snapshot(tmp_path) == before and not (tmp_path / "out").exists()


def test_two_spellings_of_one_weights_file_are_one_model(tmp_path, micro_config, monkeypatch, capsys):
    weights = tmp_path / "w.safetensors"
    enc = load_model("hnb-micro", model_config=str(micro_config))
    save_file({k: v.contiguous() for k, v in enc.model.state_dict().items()}, str(weights))
    (tmp_path / "link.safetensors").symlink_to(weights)
    monkeypatch.chdir(tmp_path)
    for other in ("./w.safetensors", str(weights), "link.safetensors"):
        assert main(["suite", "synthdense", "--model", "hnb-micro", "--model-config", str(micro_config),
                     "--pretrained", "w.safetensors", "--pretrained", other, "--output", str(tmp_path / "out")]) == 2
        assert_one_line_error(capsys.readouterr().err, "is given twice (models 1 and 2)")
    assert not (tmp_path / "out").exists()


def test_distinct_models_and_weights_pass(tmp_path):
    (tmp_path / "a.pt").write_bytes(b"a")
    (tmp_path / "b.pt").write_bytes(b"b")
    refuse_repeated_models([("m", str(tmp_path / "a.pt")), ("m", str(tmp_path / "b.pt")), ("m", None),
                            ("n", str(tmp_path / "a.pt"))])
    with pytest.raises(ConfigError, match="models 2 and 3"):
        refuse_repeated_models([("m", None), ("n", None), ("n", None)])
