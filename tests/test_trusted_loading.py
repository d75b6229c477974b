"""No model's code runs without ``--trust-remote-code``: every transformers load says ``trust_remote_code``
explicitly, so transformers never asks on stdin ("Do you wish to run the custom code? [y/N]") and a ``y`` fed to
hnbench's stdin never runs a folder's Python.

The folders are real remote-code model folders (``tests/test_models_remote.py``'s layout: ``config.json`` with
``auto_map`` naming a modeling file beside it), whose modeling file writes a marker file when it is imported; the
commands run through the real CLI in a subprocess with ``y`` lines on stdin.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import assert_one_line_error, make_pairs, snapshot, write_jsonl

pytest.importorskip("transformers")

from test_models_remote import _write_remote  # noqa: E402  (the real remote-code layout, written by that test)

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "hnbench"
YES = "y\n" * 50  # what `yes | hnbench ...` feeds: transformers' prompt would take it as consent
COMMIT = "0123456789abcdef0123456789abcdef01234567"


# --- every from_pretrained call says trust_remote_code ------------------------------------------------------
# Receivers whose from_pretrained takes no trust_remote_code (and runs no code), with why.
NO_FLAG = {"PeftModel": "peft reads the adapter's adapter_config.json and weights; it imports nothing from the folder"}


def _from_pretrained_calls() -> list[tuple[str, int, str, ast.Call]]:
    """Every call of a ``from_pretrained`` attribute in the package: (file, line, receiver, call)."""
    calls = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr == "from_pretrained":
                receiver = node.func.value
                while isinstance(receiver, ast.Call):  # cast(Any, AutoImageProcessor).from_pretrained
                    receiver = receiver.args[-1] if receiver.args else receiver.func
                calls.append((str(path.relative_to(ROOT)), node.lineno, ast.unparse(receiver), node))
    return calls


def test_every_from_pretrained_call_in_the_package_passes_trust_remote_code_explicitly():
    calls = _from_pretrained_calls()
    files = {f for f, *_ in calls}
    assert {"hnbench/models/hf.py", "hnbench/models/remote.py", "hnbench/models/sentence.py",
            "hnbench/models/lotlip.py", "hnbench/models/peft_loading.py"} <= files and len(calls) >= 12, calls
    missing = [f"{f}:{line} {receiver}.from_pretrained" for f, line, receiver, call in calls
               if receiver not in NO_FLAG and not any(k.arg == "trust_remote_code" for k in call.keywords)]
    assert not missing, f"from_pretrained without an explicit trust_remote_code=: {missing}"
    # the flag is never a variable: code runs only where it says True, and that is the remote family's loader
    values = {(f, ast.unparse(k.value)) for f, _, receiver, call in calls for k in call.keywords
              if k.arg == "trust_remote_code"}
    assert {v for _, v in values} == {"False", "True"}
    assert {f for f, v in values if v == "True"} == {"hnbench/models/remote.py"}


def test_the_calls_without_the_flag_are_of_apis_that_take_none():
    import inspect

    from peft import PeftModel

    exempt = [(f, line) for f, line, receiver, _ in _from_pretrained_calls() if receiver in NO_FLAG]
    assert exempt  # the adapter merge (hnbench/models/peft_loading.py)
    assert "trust_remote_code" not in inspect.signature(PeftModel.from_pretrained).parameters
    assert "trust_remote_code" not in (inspect.getdoc(PeftModel.from_pretrained) or "")


# --- a local folder whose config names code: refused before anything loads ---------------------------------
@pytest.fixture
def code_folder(tmp_path) -> tuple[Path, Path]:
    """A remote-code model folder whose modeling file writes ``marker`` when imported (transformers copies it into
    its modules cache before importing it, so the marker's path is absolute); (folder, marker)."""
    folder = _write_remote(tmp_path / "model", ["a red square", "a blue circle"], "jina_clip")
    marker = tmp_path / "CODE-RAN"
    code = folder / "modeling_tiny.py"
    code.write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n" + code.read_text())
    return folder, marker


@pytest.fixture
def manifest(tmp_path) -> Path:
    pairs = make_pairs(tmp_path / "data", n=4)
    return write_jsonl(tmp_path / "data" / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])


def _hnbench(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m hnbench ARGS`` with ``y`` lines on stdin, this tree's package, offline, caches under ``tmp_path``."""
    environ = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "HNBENCH_CACHE": str(tmp_path / "cache"),
               "HF_HOME": str(tmp_path / "hf-home"), "HF_MODULES_CACHE": str(tmp_path / "hf-modules"), **env}
    return subprocess.run([sys.executable, "-m", "hnbench", *args], input=YES, capture_output=True, text=True,
                          env=environ, cwd=tmp_path, timeout=300)


def _command(name: str, manifest: Path, out: Path) -> list[str]:
    return {"eval": ["eval", "--dataset", str(manifest), "--output", str(out)],
            "hardness": ["hardness", "--dataset", str(manifest), "--output", str(out)],
            "segments": ["segments", "--dataset", str(manifest), "--output", str(out / "segments.json")]}[name]


@pytest.mark.parametrize("command", ["eval", "hardness", "segments"])
@pytest.mark.parametrize("spelling", ["DIR", "hf:DIR"])
def test_a_folder_whose_config_names_code_is_refused_before_loading_with_yes_on_stdin(command, spelling, tmp_path,
                                                                                       code_folder, manifest):
    folder, marker = code_folder
    model = str(folder) if spelling == "DIR" else f"hf:{folder}"
    before = snapshot(tmp_path)
    done = _hnbench([*_command(command, manifest, tmp_path / "out"), "--model", model], tmp_path)
    assert done.returncode == 2, done.stderr
    assert_one_line_error(done.stderr, model, "modeling_tiny.py", "--trust-remote-code")
    assert "custom code" not in done.stdout + done.stderr  # transformers' prompt never came up
    assert not marker.exists()  # the folder's code never ran
    assert snapshot(tmp_path) == before  # nothing read into a cache, nothing written (checked before the data)


def test_a_folder_whose_tokenizer_config_names_code_is_refused_too(tmp_path, hf_clip_dir, manifest, capsys):
    """A transformers CLIP folder whose tokenizer_config.json maps AutoTokenizer to a file beside it."""
    from hnbench.cli import main

    folder = tmp_path / "clip"
    shutil.copytree(hf_clip_dir, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["auto_map"] = {"AutoTokenizer": ["tokenization_evil.EvilTokenizer", None]}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    before = snapshot(tmp_path)
    assert main(["eval", "--model", str(folder), "--dataset", str(manifest), "--output", str(tmp_path / "out")]) == 2
    assert_one_line_error(capsys.readouterr().err, str(folder), "tokenization_evil.py", "--trust-remote-code")
    assert snapshot(tmp_path) == before


def test_a_trusted_folder_loads_as_its_remote_code_model_and_runs_its_code(tmp_path, code_folder, manifest):
    """The same folder with --trust-remote-code: its code runs (the marker is written: the refusals above stopped
    real code) and it is scored as remote:DIR is, its code files pinned and recorded."""
    folder, marker = code_folder
    out = tmp_path / "out"
    done = _hnbench(["-q", "eval", "--dataset", str(manifest), "--output", str(out), "--model", str(folder),
                     "--trust-remote-code", "--no-ci", "--num-workers", "0"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert marker.read_text() == "ran"
    model = json.loads(next(out.glob("*.json")).read_text())["model"]
    assert model["arch"] == f"remote:{folder}" and model["extra"]["trust_remote_code"] is True
    assert model["extra"]["code_files"] == ["modeling_tiny.py"] and model["pretrained"].startswith("sha256:")


def test_training_a_folder_whose_config_names_code_is_refused_trusted_or_not(tmp_path, code_folder, manifest, capsys):
    from hnbench.cli import main

    folder, marker = code_folder
    before = snapshot(tmp_path)
    for trust in ([], ["--trust-remote-code"]):
        rc = main(["train", "--model", str(folder), "--dataset", str(manifest), "--output", str(tmp_path / "run"),
                   *trust])
        assert rc == 2
        err = capsys.readouterr().err
        assert_one_line_error(err, str(folder), "scored, not fine-tuned" if trust else "modeling_tiny.py")
    assert not marker.exists() and snapshot(tmp_path) == before


def test_a_hub_model_whose_config_names_code_is_refused_in_one_line_without_a_prompt(tmp_path, code_folder,
                                                                                     manifest):
    """hf:ORG/NAME: its config is known only once fetched (here: from a local Hugging Face cache, offline);
    transformers, told trust_remote_code=False, refuses it, and hnbench says so in one line."""
    folder, marker = code_folder
    hub = tmp_path / "hub"
    repo = hub / "models--evil-org--evil-clip"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    shutil.copytree(folder, repo / "snapshots" / COMMIT)
    done = _hnbench(["eval", "--model", "hf:evil-org/evil-clip", "--dataset", str(manifest), "--output",
                     str(tmp_path / "out")], tmp_path, HF_HUB_CACHE=str(hub))
    assert done.returncode == 2, done.stderr
    assert_one_line_error(done.stderr, "hf:evil-org/evil-clip", "remote:evil-org/evil-clip", "--trust-remote-code")
    assert "custom code" not in done.stdout and not marker.exists() and not (tmp_path / "out").exists()


# --- hnbench suite passes --trust-remote-code through ---------------------------------------------------------
def test_suite_passes_trust_remote_code_to_every_model_load(tmp_path, code_folder, capsys):
    from benchmark_fixtures import build_urban1k

    from hnbench.cli import main

    folder, marker = code_folder
    build_urban1k(tmp_path / "urban")
    (tmp_path / "map.json").write_text(json.dumps({"urban1k": str(tmp_path / "urban")}))
    (tmp_path / "s.toml").write_text('name = "urban"\n[[entries]]\nbenchmark = "urban1k"\nprotocol = "test"\n')
    out = tmp_path / "out"
    args = ["-q", "suite", str(tmp_path / "s.toml"), "--model", str(folder), "--data-root-map",
            str(tmp_path / "map.json"), "--output", str(out), "--allow-count-mismatch", "--num-workers", "0", "--no-ci"]
    before = snapshot(tmp_path)
    assert main(args) == 2  # untrusted: refused before anything loads
    assert_one_line_error(capsys.readouterr().err, str(folder), "modeling_tiny.py", "--trust-remote-code")
    assert not marker.exists() and snapshot(tmp_path) == before
    assert main([*args, "--trust-remote-code"]) == 0, capsys.readouterr().err
    assert marker.exists()  # the flag reached the load: the folder's code ran
    (result,) = [json.loads(p.read_text()) for p in out.glob("*__urban1k-test__*.json") if not p.name.startswith(".")]
    assert result["model"]["extra"]["trust_remote_code"] is True and result["model"]["arch"] == f"remote:{folder}"
    assert "failed" not in (out / "suite-urban.md").read_text()
