"""The side inputs met as untrusted input: GOAL imports known by their content, wrong shapes in a GOAL JSON
as one line."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import assert_one_line_error, make_pairs, snapshot, write_jsonl

from hnbench.cli import main
from hnbench.data import ImageTextDataset, load_dataset
from hnbench.sidecars.segments import read_segments


@pytest.fixture()
def manifest(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    pairs = make_pairs(root, 6)
    return write_jsonl(root / "m.jsonl", [{"image": p, "caption": f"{c}. It is bright. The end"} for p, c in pairs])


def _goal_items(ds: ImageTextDataset, score: float = 30.0) -> list[dict[str, Any]]:
    """GOAL's released training JSON for ``ds``: two segments per image, the second scored ``score``."""
    return [{"original_filename": f"{Path(image_id).stem}.png", "original_caption": caption, "segment": [
        {"filename": f"crop_{k}.png", "caption": " It is bright.", "similarity_score": 28.5,
         "bbox_coordinates": {"x1": 4, "y1": 6, "x2": 20, "y2": 30, "width": 16, "height": 24}},
        {"filename": f"crop_{k}b.png", "caption": "The end", "similarity_score": score,
         "bbox_coordinates": {"x1": 0, "y1": 0, "x2": 48, "y2": 48, "width": 48, "height": 48}}]}
        for k, (image_id, caption) in enumerate(zip(ds.image_ids, ds.captions))]


def _write(path: Path, doc: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def _import(manifest: Path, goal: Path, out: Path, *extra: str) -> int:
    return main(["-q", "segments", "--dataset", str(manifest), "--import-goal", str(goal), "--output", str(out),
                 *extra])


# --- a GOAL import is known by its content ----------------------------------------------------------------
def test_another_goal_file_of_the_same_name_does_not_replace_an_import_without_overwrite(
        manifest: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ds = load_dataset(manifest)
    first = _write(tmp_path / "a" / "goal.json", _goal_items(ds))
    other = _write(tmp_path / "b" / "goal.json", _goal_items(ds, score=31.0))  # same base name, other content
    out = tmp_path / "seg.json"
    assert _import(manifest, first, out) == 0
    assert read_segments(out, ds).parameters["sha256"] == hashlib.sha256(first.read_bytes()).hexdigest()
    before = snapshot(tmp_path)
    capsys.readouterr()
    assert _import(manifest, other, out) == 2
    assert_one_line_error(capsys.readouterr().err, str(out), "--overwrite")
    assert snapshot(tmp_path) == before  # the first import is kept, its record too
    assert _import(manifest, other, out, "--overwrite") == 0
    side = read_segments(out, ds)
    assert side.parameters["sha256"] == hashlib.sha256(other.read_bytes()).hexdigest()
    entry = side.per_image(ds)[0]
    assert entry is not None and entry.segments[0].similarity == 31.0  # the second file's content


def test_the_same_goal_file_under_another_name_is_recognised_as_the_same_input(
        manifest: Path, tmp_path: Path) -> None:
    ds = load_dataset(manifest)
    first = _write(tmp_path / "a" / "goal.json", _goal_items(ds))
    copy = tmp_path / "elsewhere" / "renamed.json"
    copy.parent.mkdir()
    shutil.copyfile(first, copy)
    out = tmp_path / "seg.json"
    assert _import(manifest, first, out) == 0
    made = out.read_bytes()
    assert _import(manifest, copy, out) == 0  # same content: its own output, replaced without --overwrite
    assert read_segments(out, ds).parameters["sha256"] == hashlib.sha256(first.read_bytes()).hexdigest()
    assert json.loads(out.read_bytes())["images"] == json.loads(made)["images"]


# --- wrong shapes in a GOAL JSON ------------------------------------------------------------------------
def _bbox(value: Any):
    return lambda items: items[0]["segment"][0].update(bbox_coordinates=value)


@pytest.mark.parametrize("edit, words", [
    (_bbox([4, 6, 20, 30]), ["item 0 segment 0", "bbox_coordinates", "got a list"]),
    (_bbox("4,6,20,30"), ["item 0 segment 0", "bbox_coordinates", "'4,6,20,30'"]),
    (_bbox(7), ["item 0 segment 0", "bbox_coordinates", "got 7"]),
    (_bbox({"x1": "4", "y1": 6, "x2": 20, "y2": 30}), ["item 0 segment 0", "bbox_coordinates x1", "'4'"]),
    (_bbox({"x1": 4, "y1": 6, "x2": [20], "y2": 30}), ["item 0 segment 0", "bbox_coordinates x2", "a list"]),
    (_bbox({"x1": 4, "y1": 6, "x2": 20}), ["item 0 segment 0", "bbox_coordinates y2", "None"]),
    (lambda items: items[0].update(segment={"caption": "The end"}), ["item 0", "segment must be a list"]),
    (lambda items: items[0].update(segment=5), ["item 0", "segment must be a list", "got 5"]),
    (lambda items: items[0]["segment"].append(["The end"]), ["item 0 segment 2", "a table, got a list"]),
    (lambda items: items[0]["segment"][1].update(caption=["The end"]), ["item 0 segment 1", "caption", "a list"]),
    (lambda items: items[0]["segment"][1].update(similarity_score="high"), ["item 0 segment 1", "similarity"]),
    (lambda items: items[0]["segment"][1].update(similarity_score=[1]), ["item 0 segment 1", "similarity"]),
    (lambda items: items[0].update(original_caption=12), ["item 0", "original_caption", "got 12"]),
    (lambda items: items[0].update(original_caption=None, segment=[]), ["item 0", "original_caption"]),
])
def test_a_goal_json_of_the_wrong_shape_is_one_line_naming_the_file_and_the_item(
        manifest: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], edit, words: list[str]) -> None:
    items = _goal_items(load_dataset(manifest))
    edit(items)
    goal = _write(tmp_path / "goal.json", items)
    before = snapshot(tmp_path)
    assert _import(manifest, goal, tmp_path / "seg.json") == 2
    assert_one_line_error(capsys.readouterr().err, str(goal), *words)
    assert snapshot(tmp_path) == before
