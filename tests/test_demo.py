"""README command 1: the bundled tiny model on synthdense test scores far above chance."""

from __future__ import annotations

from pathlib import Path

import pytest

from hnbench.cli import main
from hnbench.models.openclip import ASSET_DIR, BUILTIN_WEIGHTS
from hnbench.results.record import read_result


@pytest.mark.slow
def test_demo_scores_well_above_chance(tmp_path, capsys):
    assert (ASSET_DIR / BUILTIN_WEIGHTS[("hnbench-tiny", "synthdense")]).is_file()
    rc = main(["-q", "demo", "--output", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0 and "R@1" in out
    result = read_result(out.strip().splitlines()[-1].removeprefix("wrote "))
    n = result.dataset["n_images"]
    assert result.dataset["name"] == "synthdense" and result.dataset["protocol"] == "test" and n == 500
    assert result.model["pretrained"] == "synthdense" and result.tokens["n_truncated"] == 0
    chance_r1 = 100 / n
    for direction in ("t2i", "i2t"):
        assert result.metrics[direction]["R@1"] > 10 * chance_r1
        assert result.metrics[direction]["R@10"] > 10 * 10 * chance_r1


def test_readme_says_the_cpu_only_install_before_the_first_command_a_cpu_user_runs():
    """A CPU user reads the CPU-build install before the set-up commands (which would pull ~6 GB of CUDA)."""
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    quick = text[text.index("## Quick start"):]
    cpu = quick.index("--index-url https://download.pytorch.org/whl/cpu")
    first_command = quick.index(".venv/bin/hnbench demo")
    assert quick.index("**Without a GPU**") < cpu < first_command
    assert quick.index("```bash") < cpu  # the CPU install is itself the first command block
