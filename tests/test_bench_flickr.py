"""Generated Flickr30k-full data in the real layout (for the performance benchmark), and the benchmark's
blocked minimal loop."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch
from PIL import Image

from hnbench.data.benchmarks import load
from hnbench.data.synthdense import FLICKR_TOKEN, SynthDenseError, flickr_captions, generate_flickr30k

ROOT = Path(__file__).resolve().parent.parent


def test_generated_flickr30k_is_read_by_the_full_protocol(tmp_path):
    root = generate_flickr30k(tmp_path / "f", 7)
    lines = (root / FLICKR_TOKEN).read_text(encoding="utf-8").splitlines()
    assert len(lines) == 35 and lines[0].startswith("1000000000.jpg#0\t") and lines[9].startswith("1000000001.jpg#4\t")
    ds = load("flickr30k", data_root=root, protocol="full", expected_counts={"n_images": 7, "n_captions": 35})
    assert ds.meta["count_check"]["status"] == "ok" and ds.meta["captions_per_image"] == {"5": 7}
    assert ds.image_ids == [str(1000000000 + i) for i in range(7)]
    assert list(ds.caption_image) == [i for i in range(7) for _ in range(5)]
    assert ds.captions == [line.split("\t", 1)[1] for line in lines]
    for i in range(7):
        caps = ds.captions[5 * i:5 * i + 5]
        assert len(set(caps)) == 5 and all(len(c.split()) > 60 for c in caps)  # five distinct dense captions
        assert all(set(c.split(". ")) <= set(caps[0].split(". ")) for c in caps)  # each a part of the full one
    with Image.open(ds.images.paths[3]) as im:
        assert (im.format, im.size, im.mode) == ("JPEG", (64, 64), "RGB")
    assert Path(ds.images.paths[3]).parent.name == "flickr30k-images"


def test_generated_flickr30k_is_reused_and_never_overwrites(tmp_path):
    root = generate_flickr30k(tmp_path / "f", 3)
    token = root / FLICKR_TOKEN
    before = token.stat().st_mtime_ns
    assert generate_flickr30k(root, 3) == root and token.stat().st_mtime_ns == before  # same set: reused as is
    with pytest.raises(SynthDenseError, match="fingerprint"):
        generate_flickr30k(root, 4)  # another set in the same folder
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("not hnbench's")
    with pytest.raises(SynthDenseError, match="not a complete synthdense"):
        generate_flickr30k(other, 3)
    assert sorted(p.name for p in other.iterdir()) == ["notes.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f", "mine"]  # no partial folder left behind
    with pytest.raises(SynthDenseError, match="n_images"):
        generate_flickr30k(tmp_path / "none", 0)


def test_flickr_captions_are_a_pure_function_of_the_scene(tmp_path):
    a = generate_flickr30k(tmp_path / "a", 2)
    b = generate_flickr30k(tmp_path / "b", 2)
    assert (a / FLICKR_TOKEN).read_bytes() == (b / FLICKR_TOKEN).read_bytes()
    scene = {"background": "beige", "style": 5, "objects": [
        {"id": f"obj{i}", "colour": c, "shape": "circle", "size": "small", "position": p, "fill": "solid",
         "jitter": [0.0, 0.0]} for i, (c, p) in enumerate([("red", "center"), ("blue", "top-left"),
                                                           ("green", "bottom-right")])]}
    caps = flickr_captions(scene)
    assert len(caps) == 5 and caps == flickr_captions(scene) and len(set(caps)) == 5


def _bench(name: str):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_blocked_minimal_recall_equals_the_full_matrix(monkeypatch):
    bench, full = _bench("bench_flickr_full"), _bench("bench_eval")
    g = torch.Generator().manual_seed(0)
    img = torch.nn.functional.normalize(torch.randn(37, 8, generator=g), dim=1)
    owner = torch.arange(37).repeat_interleave(5)
    txt = torch.nn.functional.normalize(img[owner] + 0.9 * torch.randn(185, 8, generator=g), dim=1)
    monkeypatch.setattr(bench, "BLOCK_BYTES", 4 * 37 * 7)  # blocks of 7 captions: 27 blocks, the last one short
    blocked = bench.blocked_recall(img, txt, owner.numpy())
    assert blocked == full.minimal_recall(img, txt, owner.numpy())
    assert 0 < blocked[0][0] < blocked[0][2] < 1 and 0 < blocked[1][0] < blocked[1][2] <= 1


def test_generated_flickr30k_has_karpathys_splits(tmp_path):
    root = generate_flickr30k(tmp_path / "f", 1016)
    full = load("flickr30k", data_root=root, protocol="full", expected_counts={"n_images": 1016, "n_captions": 5080})
    test = load("flickr30k", data_root=root, protocol="karpathy-test")  # the published 1,000 / 5,000
    assert test.meta["count_check"]["status"] == "ok" and test.meta["karpathy_splits"] == {"test": 1000, "val": 16}
    assert test.image_ids == full.image_ids[:1000] and test.captions == full.captions[:5000]
    val = load("flickr30k", data_root=root, protocol="karpathy-val", expected_counts={"n_images": 16, "n_captions": 80})
    assert val.image_ids == full.image_ids[1000:] and val.captions == full.captions[5000:]
    assert val.images.paths == full.images.paths[1000:]
