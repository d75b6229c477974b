"""The side inputs met as untrusted or unbounded input: GOAL imports known by their content, cached edge maps
checked before use, wrong shapes in a GOAL JSON as one line, and ``--grids`` bounded and streamed."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import shutil
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from conftest import assert_one_line_error, make_pairs, snapshot, write_jsonl
from PIL import Image

from hnbench.cli import main
from hnbench.data import ImageTextDataset, load_dataset
from hnbench.data import synthdense as sd
from hnbench.data.synthdense import SynthDenseConfig
from hnbench.data.synthdense_loader import load_synthdense
from hnbench.errors import ConfigError
from hnbench.io import cache_dir
from hnbench.models import load_model
from hnbench.settings import option_help
from hnbench.sidecars.edges import (
    CHECKSUM,
    EDGES,
    QUARANTINE,
    CorruptEdgeMapError,
    EdgeImages,
    decode_edge_map,
    encode_edge_map,
    require_edges,
)
from hnbench.sidecars.grid import candidate_boxes, grid_segments
from hnbench.sidecars.options import MAX_GRID, EdgeSettings, SegmentsSettings
from hnbench.sidecars.segments import crop_box, read_segments, split_sentences, synthdense_scenes

CFG = SynthDenseConfig(seed=3, n_families={"train": 2, "test": 1}, family_size=2, image_size=64)


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


# --- cached edge maps are checked before use --------------------------------------------------------------
@pytest.fixture()
def synth(tmp_path: Path) -> ImageTextDataset:
    return load_synthdense(data_root=str(tmp_path / "sd"), protocol="train", config=CFG)


def _cached_path(edges: EdgeImages, i: int) -> Path:
    digest = edges.images.content_digests([i])[0]
    assert digest is not None
    return edges.cache / f"{digest.hex()}.png"


def _png(image: Image.Image, **text: str) -> bytes:
    from PIL.PngImagePlugin import PngInfo

    info = PngInfo()
    for k, v in text.items():
        info.add_text(k, v)
    buf = io.BytesIO()
    image.save(buf, format="PNG", pnginfo=info)
    return buf.getvalue()


def _flipped_pixels(good: bytes) -> bytes:
    """A PNG that decodes cleanly with the good map's checksum but one pixel changed."""
    im = Image.open(io.BytesIO(good))
    pixels = np.asarray(im).copy()
    pixels[0, 0] = 255 - pixels[0, 0]
    return _png(Image.fromarray(pixels), **{CHECKSUM: im.info[CHECKSUM]})


CORRUPTIONS = {
    "truncated": lambda good, size: good[:len(good) // 2],
    "not a PNG": lambda good, size: b"\x89PNG\r\n\x1a\n" + os.urandom(200),
    "empty": lambda good, size: b"",
    "another size": lambda good, size: encode_edge_map(Image.new("L", (size // 2, size // 2), 255)),
    "colour": lambda good, size: _png(Image.new("RGB", (size, size))),
    "no checksum": lambda good, size: _png(Image.open(io.BytesIO(good))),
    "a pixel changed": lambda good, size: _flipped_pixels(good),
}


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_a_corrupt_or_wrong_size_cached_edge_map_is_quarantined_and_made_again(
        synth: ImageTextDataset, corruption: str, caplog: pytest.LogCaptureFixture) -> None:
    edges = require_edges(synth)  # synthdense: exact outlines, 64 x 64
    scenes, size = synthdense_scenes(synth)
    truth = np.asarray(sd.render_outlines(scenes[synth.image_ids[0]], size))
    edges.edge_map(0)
    path = _cached_path(edges, 0)
    good = path.read_bytes()
    bad = CORRUPTIONS[corruption](good, size)
    path.write_bytes(bad)
    with caplog.at_level(logging.WARNING, logger="hnbench.sidecars.edges"):
        got = require_edges(synth).edge_map(0)  # a new source: nothing remembered but the cache
    assert got.size == (64, 64) and np.array_equal(np.asarray(got), truth)
    assert sum("corrupt cached edge map" in r.message for r in caplog.records) == 1
    quarantined = list((cache_dir() / EDGES / QUARANTINE).iterdir())
    assert [p.read_bytes() for p in quarantined] == [bad]  # moved away, not deleted
    assert np.array_equal(np.asarray(decode_edge_map(path.read_bytes(), (64, 64))), truth)  # made again
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hnbench.sidecars.edges"):
        assert np.array_equal(np.asarray(require_edges(synth).edge_map(0)), truth)
    assert not caplog.records  # the remade map is used as it is


@pytest.mark.parametrize("corruption", ["truncated", "not a PNG", "colour", "a pixel changed"])
def test_decode_edge_map_refuses_what_is_not_the_map(synth: ImageTextDataset, corruption: str) -> None:
    good = encode_edge_map(sd.render_outlines(synthdense_scenes(synth)[0][synth.image_ids[0]], 64))
    assert decode_edge_map(good, (64, 64)).size == (64, 64)
    with pytest.raises(CorruptEdgeMapError):
        decode_edge_map(CORRUPTIONS[corruption](good, 64), (64, 64))
    with pytest.raises(CorruptEdgeMapError, match="not the 32x64"):
        decode_edge_map(good, (32, 64))  # the size is checked from the header, against the image's


def test_a_cached_canny_map_of_another_size_than_its_image_is_made_again(tmp_path: Path) -> None:
    pytest.importorskip("cv2")
    root = tmp_path / "squares"
    ds = load_dataset(write_jsonl(root / "m.jsonl", [{"image": p, "caption": c} for p, c in make_pairs(root, 2)]))
    edges = require_edges(ds, EdgeSettings(method="canny"))
    fresh = np.asarray(edges.edge_map(1))
    assert fresh.shape == (48, 48)
    path = _cached_path(edges, 1)
    path.write_bytes(encode_edge_map(Image.new("L", (32, 32), 255)))  # well formed, checksum right, wrong size
    got = require_edges(ds, EdgeSettings(method="canny")).edge_map(1)
    assert got.size == (48, 48) and np.array_equal(np.asarray(got), fresh)


def test_a_fifo_or_folder_in_place_of_a_cached_edge_map_is_moved_aside_without_blocking(
        synth: ImageTextDataset) -> None:
    edges = require_edges(synth)
    truth = np.asarray(edges.edge_map(0))
    for i, make in [(0, os.mkfifo), (1, os.mkdir)]:
        path = _cached_path(edges, i)
        if path.exists():
            path.unlink()
        make(path)
        got = np.asarray(require_edges(synth).edge_map(i))
        assert got.shape == (64, 64) and path.is_file()
        assert decode_edge_map(path.read_bytes(), (64, 64)).size == (64, 64)  # made again, in its place
    assert np.array_equal(np.asarray(require_edges(synth).edge_map(0)), truth)
    assert len(list((cache_dir() / EDGES / QUARANTINE).iterdir())) == 2


def test_an_unwritable_edge_cache_is_a_warning_and_the_maps_are_still_made(
        synth: ImageTextDataset, caplog: pytest.LogCaptureFixture) -> None:
    cache_dir().mkdir(parents=True, exist_ok=True)
    (cache_dir() / EDGES).write_text("not a folder")  # nothing can be written under it
    edges = require_edges(synth)
    with caplog.at_level(logging.WARNING, logger="hnbench.sidecars.edges"):
        maps = [np.asarray(edges.edge_map(i)) for i in range(synth.n_images)]
    assert all(m.shape == (64, 64) and m.any() for m in maps)
    assert sum("cannot write the edge-map cache" in r.message for r in caplog.records) == 1  # once
    assert (cache_dir() / EDGES).read_text() == "not a folder"


# --- --grids is bounded and its crops streamed ---------------------------------------------------------------
@pytest.mark.parametrize("grids", [[str(MAX_GRID + 1)], ["2", "1000000"]])
def test_grids_beyond_the_maximum_are_refused_before_anything_loads(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], grids: list[str]) -> None:
    before = snapshot(tmp_path)
    rc = main(["-q", "segments", "--dataset", str(tmp_path / "no-such-data.jsonl"), "--model", "no-such-model",
               "--output", str(tmp_path / "s.json"), "--grids", *grids])
    assert rc == 2  # the data and the model do not exist: neither was looked at
    assert_one_line_error(capsys.readouterr().err, "--grids", f"at most {MAX_GRID}")
    assert snapshot(tmp_path) == before
    assert f"N from 1 to {MAX_GRID}" in option_help(SegmentsSettings, "grids")  # the flag's help says so


@pytest.mark.parametrize("grids", [(MAX_GRID + 1,), (2.5,), (True,), (0,)])
def test_settings_with_grids_out_of_bounds_are_refused(grids: tuple[Any, ...]) -> None:
    with pytest.raises(ConfigError, match="--grids"):
        SegmentsSettings(grids=grids).validate()
    SegmentsSettings(grids=(1, MAX_GRID)).validate()  # the bounds themselves are fine


class CountingEncoder:
    """A real encoder whose crops are counted: how many its image transform made, how many are alive (not yet
    freed), the most alive at once, and how many had been made at each encoder batch."""

    def __init__(self, encoder: Any) -> None:
        self.encoder, self.made, self.alive, self.peak = encoder, 0, 0, 0
        self.made_at_batch: list[int] = []
        self.batch_sizes: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.encoder, name)

    @property
    def image_transform(self) -> Any:
        return self._transform

    def _transform(self, image: Image.Image) -> torch.Tensor:
        crop = self.encoder.image_transform(image)
        self.made += 1
        self.alive += 1
        self.peak = max(self.peak, self.alive)
        weakref.finalize(crop, self._freed)
        return crop

    def _freed(self) -> None:
        self.alive -= 1

    def encode_images(self, pixels: torch.Tensor) -> torch.Tensor:
        self.made_at_batch.append(self.made)
        self.batch_sizes.append(len(pixels))
        return self.encoder.encode_images(pixels)


@pytest.fixture()
def micro_encoder(micro_config: Path) -> Any:
    return load_model("hnb-micro", model_config=str(micro_config))


def _score(ds: ImageTextDataset, encoder: Any, settings: SegmentsSettings) -> Any:
    with torch.inference_mode():
        return grid_segments(ds, encoder, settings, settings.parameters(None))


def test_grid_crops_are_streamed_one_batch_alive_at_a_time(manifest: Path, micro_encoder: Any) -> None:
    ds = load_dataset(manifest)
    settings = SegmentsSettings(grids=(6,), centre=(), batch_size=5)
    counting = CountingEncoder(micro_encoder)
    side = _score(ds, counting, settings)
    total = ds.n_images * 36
    assert counting.made == total and sum(counting.batch_sizes) == total
    assert counting.peak <= settings.batch_size < total // ds.n_images  # never an image's 36 crops at once
    assert counting.made_at_batch[0] == settings.batch_size  # encoded as they are made, not all first
    assert max(counting.batch_sizes) == settings.batch_size
    assert counting.alive == 0
    assert all(e is not None and len(e.segments) == 3 for e in side.per_image(ds))


def test_streamed_best_boxes_are_each_sentences_argmax_whatever_the_batch_size(
        manifest: Path, micro_encoder: Any) -> None:
    ds = load_dataset(manifest)
    settings = SegmentsSettings(grids=(2, 3), centre=(0.5,))
    # what one argmax over every candidate of the image gives: (sentences, boxes) cosines, all crops at once
    direct = []
    with torch.inference_mode():
        for i in range(ds.n_images):
            image, caption = ds.images.open(i), ds.captions[i]
            boxes = candidate_boxes(*image.size, settings)
            feats = micro_encoder.encode_images(torch.stack([micro_encoder.image_transform(crop_box(image, b))
                                                             for b in boxes]))
            spans = split_sentences(caption)
            texts = micro_encoder.encode_texts(micro_encoder.tokenize([caption[a:b] for a, b in spans]).tokens)
            direct.append((boxes, spans, (texts @ feats.T).numpy()))
    for batch_size in (1, 7, 1000):  # batches within an image, across images, all of the data in one
        side = _score(ds, micro_encoder, SegmentsSettings(grids=(2, 3), centre=(0.5,), batch_size=batch_size))
        for entry, (boxes, spans, sims) in zip(side.per_image(ds), direct):
            assert entry is not None and sorted(s.char_span for s in entry.segments) == sorted(spans)
            for s in entry.segments:
                row = sims[spans.index(s.char_span)]
                # its box is the best one (blank background crops tie up to float noise of the batch's shape)
                assert row[boxes.index(s.box)] >= row.max() - 1e-5 and abs(s.similarity - row.max()) < 1e-5
            values = [s.similarity for s in entry.segments]
            assert values == sorted(values, reverse=True)
