"""An empty or truncated weights file is one line, exit 2, through the real CLI: the error formatter quotes the first
line of the library's message, which for a 0-byte ``.pt`` (torch's ``EOFError()``) is empty."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_one_line_error, make_pairs, write_jsonl

from hnbench.cli import main
from hnbench.errors import first_line

TINY = Path(__file__).resolve().parents[1] / "hnbench" / "assets" / "hnbench-tiny-synthdense.safetensors"


@pytest.fixture
def manifest(tmp_path) -> Path:
    pairs = make_pairs(tmp_path / "data", n=4)
    return write_jsonl(tmp_path / "data" / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])


def _weights(tmp_path: Path, name: str, content: bytes) -> Path:
    path = tmp_path / "weights" / name
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(content)
    return path


@pytest.mark.parametrize("name", ["empty.pt", "empty.pth", "empty.bin", "empty.safetensors"])
def test_an_empty_weights_file_is_one_line_for_open_clip_and_hf(name, tmp_path, manifest, hf_clip_dir, capsys):
    weights = _weights(tmp_path, name, b"")
    for model in ("hnbench-tiny", str(hf_clip_dir)):
        rc = main(["eval", "--model", model, "--pretrained", str(weights), "--dataset", str(manifest),
                   "--output", str(tmp_path / "out"), "--num-workers", "0"])
        assert rc == 2, model
        assert_one_line_error(capsys.readouterr().err, str(weights), "empty (0 bytes)")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name,content,says", [
    ("cut.pt", b"PK\x03\x04abc", "not a readable torch checkpoint"),  # a zip header, then nothing
    ("cut.safetensors", TINY.read_bytes()[:40], "not a readable safetensors file"),
])
def test_a_truncated_weights_file_is_one_line(name, content, says, tmp_path, manifest, capsys):
    weights = _weights(tmp_path, name, content)
    rc = main(["eval", "--model", "hnbench-tiny", "--pretrained", str(weights), "--dataset", str(manifest),
               "--output", str(tmp_path / "out"), "--num-workers", "0"])
    assert rc == 2
    assert_one_line_error(capsys.readouterr().err, str(weights), says)


def test_first_line_of_an_exception_without_a_message_is_its_type():
    assert first_line(EOFError()) == "EOFError"
    assert first_line(RuntimeError("\n\n  second line first\nthird")) == "second line first"
    assert first_line(ValueError("x" * 300), 200) == "x" * 200
