"""The command line answers ``--help`` and ``--version`` without loading the heavy libraries (torch, open_clip,
transformers, faiss, pandas, matplotlib): its parser is built from light declarations only, and each subcommand
names its own runner, which imports what it uses when it runs."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import hnbench
from hnbench.cli import build_parser, main
from hnbench.registry import Target

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "torchvision", "open_clip", "transformers", "faiss", "pandas", "matplotlib", "pyarrow", "datasets")

# Runs each command line in one fresh interpreter, noting after each which heavy modules are loaded; then, as a
# control that the probe sees an import at all, imports the model package (which imports torch).
_PROBE = """
import contextlib, io, json, sys
from hnbench.cli import main
heavy, out = {heavy}, []
for argv in json.loads(sys.argv[1]):
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code
    out.append({{"argv": argv, "code": code, "stdout": text.getvalue(),
                "loaded": [m for m in heavy if m in sys.modules]}})
import hnbench.models
out.append({{"control": [m for m in heavy if m in sys.modules]}})
print(json.dumps(out))
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _subcommands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The words of every subcommand, nested ones too (``("datasets", "info")``), each once."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.append((*path, name))
                found += _subcommands(sub, (*path, name))
    return found


def _leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """The subcommands that run something (no subcommands below them), with their parsers."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return [(path, parser)]
    return [leaf for a in subs for name, sub in a.choices.items() for leaf in _leaves(sub, (*path, name))]


def test_help_version_and_every_subcommand_help_load_no_torch_nor_other_heavy_library():
    """``hnbench --help``, ``--version``, ``eval --help`` and every other subcommand's ``--help`` answer (exit 0,
    their text on stdout) in an interpreter that has not imported torch, open_clip, transformers, faiss, pandas
    or matplotlib after any of them."""
    commands = [["--help"], ["--version"], ["eval", "--help"]]
    commands += [[*words, "--help"] for words in _subcommands(build_parser()) if words != ("eval",)]
    assert len(commands) > 20  # every subcommand, nested ones (datasets info, cache clear, ...) too
    done = subprocess.run([sys.executable, "-c", _PROBE.format(heavy=HEAVY), json.dumps(commands)],
                          capture_output=True, text=True, env=_env(), timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    *runs, control = json.loads(done.stdout)
    for run in runs:
        assert run["code"] == 0, run
        assert run["loaded"] == [], (run["argv"], run["loaded"])
    helps = {" ".join(r["argv"]): r["stdout"] for r in runs}
    assert helps["--version"] == f"hnbench {hnbench.__version__}\n"
    assert helps["--help"].startswith("usage: hnbench ") and "export" in helps["--help"]
    assert helps["eval --help"].startswith("usage: hnbench eval ") and "--class-names" in helps["eval --help"]
    assert helps["datasets info --help"].startswith("usage: hnbench datasets info ")
    assert "torch" in control["control"]  # the probe does see an import of torch


def test_version_answers_through_python_m_and_the_console_script_target():
    """``python -m hnbench --version`` prints ``hnbench VERSION`` and exits 0; the console script named in
    pyproject.toml resolves to the same ``main``."""
    done = subprocess.run([sys.executable, "-m", "hnbench", "--version"], capture_output=True, text=True,
                          env=_env(), timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"hnbench {hnbench.__version__}\n", "")
    script = next(line for line in (REPO / "pyproject.toml").read_text().splitlines() if line.startswith("hnbench ="))
    assert Target(script.split("=", 1)[1].strip().strip('"')).resolve() is main


def test_every_subcommand_runs_the_runner_its_module_registered():
    """Each runnable subcommand names its runner (``set_defaults(handler=...)``) in the CLI module of its family
    (export: hnbench.publish.command), so dispatch needs no list of command names."""
    family = {"eval": "evaluate", "demo": "evaluate", "suite": "evaluate", "train": "train", "train-report": "train",
              "leaderboard": "results", "compare": "results", "browse": "results", "site": "results",
              "datasets": "data", "segments": "data", "cache": "data", "models": "models", "hardness": "hardness"}
    leaves = _leaves(build_parser())
    assert {words[0] for words, _ in leaves} == {*family, "export"}
    for words, parser in leaves:
        handler = parser._defaults.get("handler")
        assert callable(handler), words
        module = "hnbench.publish.command" if words[0] == "export" else f"hnbench.cli.{family[words[0]]}"
        assert handler.__module__ == module, (words, handler.__module__)
    args = build_parser().parse_args(["cache", "du", "--cache-dir", "x"])
    assert args.handler is dict(leaves)[("cache", "du")]._defaults["handler"]


@pytest.mark.parametrize("given", ["{}", "{}/"])
def test_cache_commands_name_the_cache_folder_as_it_was_given(tmp_path, capsys, given):
    """``cache ls`` / ``du`` / ``clear`` each run their own runner and name the --cache-dir as typed (an empty
    cache: nothing listed, nothing to clear)."""
    folder = given.format(tmp_path / "cache")
    assert main(["cache", "ls", "--cache-dir", folder]) == 0
    assert capsys.readouterr().out == f"no cached embeddings in {folder}\n"
    assert main(["cache", "du", "--cache-dir", folder]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"({folder})"
    assert main(["cache", "clear", "--cache-dir", folder]) == 0
    assert capsys.readouterr().out == f"nothing to clear in {folder}\n"


def test_reading_a_results_throughput_and_its_open_clip_row_imports_no_torch():
    """The throughput module counts FLOPs with torch inside its counting functions only: the modules that read a
    result's throughput (the eval footer, the open_clip CSV export) import without torch."""
    probe = ("import sys\nimport hnbench.evaluation.throughput, hnbench.publish.open_clip_csv\n"
             "print('torch' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=_env(), timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "False"
