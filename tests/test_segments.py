"""The segment sidecar (hnbench.sidecars.segments, hnbench.sidecars.grid, ``hnbench segments``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import assert_one_line_error, make_pairs, snapshot, write_jsonl

from hnbench.cli import main
from hnbench.data import load_dataset
from hnbench.data import synthdense as sd
from hnbench.data.synthdense import SynthDenseConfig
from hnbench.data.synthdense_loader import load_synthdense
from hnbench.errors import DataError
from hnbench.sidecars.grid import candidate_boxes
from hnbench.sidecars.options import SegmentsSettings
from hnbench.sidecars.segments import (
    crop_box,
    import_goal,
    parse_segments,
    read_segments,
    require_segments,
    split_sentences,
    synthdense_segments,
    token_span,
)

CFG = SynthDenseConfig(seed=1, n_families={"train": 3, "test": 2}, family_size=3, image_size=64)


@pytest.fixture()
def synth(tmp_path: Path):
    return load_synthdense(data_root=str(tmp_path / "sd"), protocol="train", config=CFG)


@pytest.fixture()
def manifest(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    pairs = make_pairs(root, 6)
    return write_jsonl(root / "m.jsonl", [{"image": p, "caption": f"{c}. It is bright. The end"} for p, c in pairs])


def _encode():
    from open_clip.tokenizer import SimpleTokenizer

    return SimpleTokenizer().encode


def test_split_sentences_by_hand() -> None:
    text = "A red box.  Then two cats!  Is it? tail without stop"
    assert [text[a:b] for a, b in split_sentences(text)] == ["A red box.", "Then two cats!", "Is it?",
                                                              "tail without stop"]
    assert split_sentences("... . !") == []


def test_synthdense_sidecar_is_the_render_geometry(synth) -> None:
    side = require_segments(synth)  # written beside the split on first use, then read and checked
    assert (Path(synth.meta["root"]) / "train" / "segments.json").is_file() and side.writer == "synthdense"
    scenes = {json.loads(line)["id"]: json.loads(line)["scene"]
              for line in (Path(synth.meta["root"]) / "train" / "metadata.jsonl").read_text().splitlines()}
    entries = side.per_image(synth)
    assert len(entries) == synth.n_images and all(e is not None for e in entries)
    for image_id, entry in zip(synth.image_ids, entries):
        assert entry is not None
        scene = scenes[image_id]
        assert (entry.width, entry.height) == (64, 64) and entry.caption == sd.scene_caption(scene)
        assert sorted(s.object for s in entry.segments) == sorted(o["id"] for o in scene["objects"])
        for s in entry.segments:
            assert s.box == sd.object_box(scene, s.object, 64)
            assert entry.caption[s.char_span[0]:s.char_span[1]] == s.sentence
    assert require_segments(synth).images == side.images  # the second call reads the file


def test_token_span_is_the_sentence_tokens(synth) -> None:
    encode = _encode()
    entry = synthdense_segments(synth).per_image(synth)[0]
    assert entry is not None
    full = [0] + list(encode(entry.caption))  # position 0: the start token
    for s in entry.segments:
        a, b = token_span(entry.caption, s.char_span, encode)
        assert full[a:b] == list(encode(s.sentence)) and b - a > 3
    # CLIP BPE never joins across a space: the counts of the words add up to the caption's
    assert sum(len(encode(w)) for w in entry.caption.split()) == len(full) - 1
    last = entry.segments[-1]
    a, b = token_span(entry.caption, last.char_span, encode)
    assert token_span(entry.caption, last.char_span, encode, context_length=a + 3) == (a, a + 2)
    assert token_span(entry.caption, last.char_span, encode, context_length=a + 1) is None
    with pytest.raises(DataError, match="outside its"):
        token_span("short", (2, 9), encode)
    # the trainer's view: per image position, (box, char span, token span), best first
    side = synthdense_segments(synth)
    spans = side.spans(synth, encode, context_length=77)
    assert len(spans) == synth.n_images
    assert [(box, cs) for box, cs, _ in spans[0]] == [(s.box, s.char_span) for s in entry.segments]
    assert all(ts is None or 1 <= ts[0] < ts[1] <= 76 for per in spans for _, _, ts in per)
    assert any(ts is None for per in spans for _, _, ts in per)  # 77 tokens cut some later sentences off


def _doc(synth) -> dict:
    return synthdense_segments(synth).to_json()


@pytest.mark.parametrize("edit, words", [
    (lambda d: d["images"][0].update(id="not-here"), ["'not-here'", "is not in the data"]),
    (lambda d: d["images"][0]["segment"][0]["bbox_coordinates"].update(x2=65), ["outside its 64x64 image"]),
    (lambda d: d["images"][0]["segment"][0]["bbox_coordinates"].update(y1=-1), ["outside its 64x64 image"]),
    (lambda d: d["images"][0]["segment"][0].update(char_span=[5, 100000]), ["span [5, 100000)", "outside"]),
    (lambda d: d["images"][0]["segment"][0].update(char_span=[0, 4]), ["not the text at its char_span"]),
    (lambda d: d["images"][0].update(original_caption="another caption"), ["not one of the image's captions"]),
    (lambda d: d["images"][0].update(width=32), ["recorded as 32x64"]),
    (lambda d: d["images"][0]["segment"][0].update(similarity_score=float("nan")), ["similarity_score"]),
    (lambda d: d.update(version=9), ["version 9"]),
    (lambda d: d.update(format="other"), ["not a segment sidecar"]),
    (lambda d: d["images"].append(dict(d["images"][0])), ["appears twice"]),
])
def test_a_bad_sidecar_is_refused_naming_the_item(synth, tmp_path: Path, edit, words) -> None:
    doc = _doc(synth)
    edit(doc)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(DataError) as e:
        require_segments(synth, path)
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg and all(w in msg for w in words), msg


def test_a_sidecar_is_read_bounded_and_regular_only(synth, tmp_path: Path) -> None:
    with pytest.raises(DataError, match="directory"):
        read_segments(tmp_path, synth)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(DataError, match="FIFO"):  # refused without blocking on it
        read_segments(tmp_path / "fifo", synth)
    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(DataError, match="not a readable segment sidecar"):
        read_segments(tmp_path / "x.json", synth)


def test_missing_sidecar_names_it_and_how_to_make_it(manifest: Path) -> None:
    ds = load_dataset(manifest)
    with pytest.raises(DataError) as e:
        require_segments(ds, needed_by="--objective goal")
    msg = str(e.value)
    assert "--objective goal needs a segment sidecar" in msg and "hnbench segments --dataset" in msg
    assert "--import-goal" in msg and "\n" not in msg


def _goal_json(manifest: Path, tmp_path: Path, **change) -> Path:
    ds = load_dataset(manifest)
    items = []
    for k, (image_id, caption) in enumerate(zip(ds.image_ids, ds.captions)):
        items.append({"original_filename": f"{Path(image_id).stem}.png", "original_caption": caption, "segment": [
            {"filename": f"crop_{k}.png", "caption": " It is bright.", "similarity_score": 28.5,
             "bbox_coordinates": {"x1": 4, "y1": 6, "x2": 20, "y2": 30, "width": 16, "height": 24}},
            {"filename": f"crop_{k}b.png", "caption": "The end", "similarity_score": 30.0,
             "bbox_coordinates": {"x1": 0, "y1": 0, "x2": 48, "y2": 48, "width": 48, "height": 48}}]})
    items[0].update(change)
    path = tmp_path / "goal.json"
    path.write_text(json.dumps(items))
    return path


def test_import_goal_json(manifest: Path, tmp_path: Path) -> None:
    ds = load_dataset(manifest)
    side = import_goal(_goal_json(manifest, tmp_path), ds)
    assert side.writer == "goal-import" and len(side.parameters["sha256"]) == 64
    entry = side.per_image(ds)[0]
    assert entry is not None and (entry.width, entry.height) == (48, 48)  # the real image's, not the crop's
    best, other = entry.segments  # best first
    assert best.sentence == "The end" and best.similarity == 30.0
    assert other.box == (4.0, 6.0, 20.0, 30.0) and entry.caption[slice(*other.char_span)] == "It is bright."
    # and it round-trips through the schema
    assert parse_segments(side.to_json(), "x", ds).images == side.images


def test_cli_segments_grid_clip_writes_a_checked_sidecar(manifest: Path, micro_config: Path, tmp_path: Path,
                                                        capsys) -> None:
    out = tmp_path / "seg.json"
    args = ["-q", "segments", "--dataset", str(manifest), "--model", "hnb-micro", "--model-config",
            str(micro_config), "--output", str(out), "--grids", "2", "--centre", "0.5"]
    assert main(args) == 0
    ds = load_dataset(manifest)
    side = read_segments(out, ds)
    assert side.writer == "grid-clip" and side.parameters["grids"] == [2] and side.parameters["model"] == "hnb-micro"
    candidates = set(candidate_boxes(48, 48, SegmentsSettings(grids=(2,), centre=(0.5,))))
    for entry in side.per_image(ds):
        assert entry is not None and len(entry.segments) == 3  # one per sentence, each its best box
        assert all(s.box in candidates for s in entry.segments)
        sims = [s.similarity for s in entry.segments]
        assert sims == sorted(sims, reverse=True) and all(-1 <= v <= 1 for v in sims)
    assert main(args) == 0  # a rerun replaces its own
    before = snapshot(tmp_path)
    capsys.readouterr()
    assert main([*args[:-4], "--grids", "3"]) == 2  # other parameters: another run's sidecar
    assert_one_line_error(capsys.readouterr().err, str(out), "--overwrite")
    assert snapshot(tmp_path) == before


def test_crop_box_by_hand() -> None:
    from PIL import Image

    image = Image.new("L", (40, 20))
    assert crop_box(image, (10.0, 5.0, 20.0, 15.0)).size == (10, 10)
    assert crop_box(image, (10.5, 5.2, 19.5, 14.9)).size == (10, 10)  # whole pixels outward
    assert crop_box(image, (10.0, 5.0, 20.0, 15.0), margin=0.1).size == (12, 12)
    assert crop_box(image, (0.0, 0.0, 40.0, 20.0), margin=0.5).size == (40, 20)  # kept inside the image


@pytest.mark.slow
def test_cli_segments_on_synthdense_is_its_geometry(tmp_path: Path, capsys) -> None:
    out = tmp_path / "sd.json"
    assert main(["-q", "segments", "--dataset", "synthdense", "--protocol", "test", "--output", str(out)]) == 0
    ds = load_synthdense(protocol="test")
    side = read_segments(out, ds)
    assert side.writer == "synthdense" and side.parameters["image_size"] == 128
    assert side.images == synthdense_segments(ds).images
    capsys.readouterr()
    assert main(["-q", "segments", "--dataset", "synthdense", "--protocol", "test", "--output", str(out),
                 "--import-goal", str(out)]) == 2  # another writer: another run's sidecar (and not GOAL's format)
    assert_one_line_error(capsys.readouterr().err, str(out))


def test_candidate_boxes() -> None:
    boxes = candidate_boxes(60, 30, SegmentsSettings())
    assert len(boxes) == 4 + 9 + 2
    assert (0.0, 0.0, 30.0, 15.0) in boxes and (15.0, 7.5, 45.0, 22.5) in boxes
    assert candidate_boxes(60, 30, SegmentsSettings(grids=(), centre=(), whole=True)) == [(0.0, 0.0, 60.0, 30.0)]


@pytest.mark.parametrize("change, words", [
    ({"original_filename": "nope.png"}, ["'nope.png'", "not in the data"]),
    ({"segment": [{"caption": "It is bright.", "similarity_score": 1,
                   "bbox_coordinates": {"x1": 0, "y1": 0, "x2": 60, "y2": 10}}]}, ["outside its 48x48 image"]),
    ({"segment": [{"caption": "absent words", "similarity_score": 1,
                   "bbox_coordinates": {"x1": 0, "y1": 0, "x2": 6, "y2": 10}}]}, ["not in the original_caption"]),
])
def test_cli_bad_goal_json_is_one_line_and_writes_nothing(manifest: Path, tmp_path: Path, capsys, change,
                                                          words) -> None:
    goal = _goal_json(manifest, tmp_path, **change)
    before = snapshot(tmp_path)
    rc = main(["-q", "segments", "--dataset", str(manifest), "--import-goal", str(goal), "--output",
               str(tmp_path / "seg.json")])
    assert rc == 2
    assert_one_line_error(capsys.readouterr().err, *words)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("extra, words", [
    ([], ["--model", "--import-goal"]),
    (["--import-goal", "missing.json"], ["missing.json", "no such file"]),
    (["--model", "hnbench-tiny", "--centre", "1.5"], ["--centre"]),
])
def test_cli_bad_input_before_any_model_loads(manifest: Path, tmp_path: Path, capsys, extra, words) -> None:
    before = snapshot(tmp_path)
    assert main(["-q", "segments", "--dataset", str(manifest), "--output", str(tmp_path / "s.json"), *extra]) == 2
    assert_one_line_error(capsys.readouterr().err, *words)
    assert snapshot(tmp_path) == before
