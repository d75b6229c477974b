"""Edge maps (hnbench.sidecars.edges): synthdense's exact outlines, Canny on real images, the cache."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from conftest import make_pairs, write_jsonl

from hnbench.data import ImageTextDataset, load_dataset
from hnbench.data import synthdense as sd
from hnbench.data.synthdense import SynthDenseConfig
from hnbench.data.synthdense_loader import load_synthdense
from hnbench.errors import ConfigError
from hnbench.io import cache_dir
from hnbench.sidecars.edges import require_edges
from hnbench.sidecars.options import EdgeSettings
from hnbench.sidecars.segments import synthdense_scenes

CFG = SynthDenseConfig(seed=2, n_families={"train": 2, "test": 1}, family_size=2, image_size=64)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[ImageTextDataset, ImageTextDataset]:
    """A synthdense split (outlines) and a manifest of four squares on a dark background (Canny)."""
    root = tmp_path_factory.mktemp("edges")
    rows = [{"image": p, "caption": c} for p, c in make_pairs(root / "squares", 4)]
    return (load_synthdense(data_root=str(root / "sd"), protocol="train", config=CFG),
            load_dataset(write_jsonl(root / "squares" / "m.jsonl", rows)))


def test_synthdense_outlines_are_exact_and_cached(data) -> None:
    synth = data[0]
    edges = require_edges(synth)  # auto: outline on synthdense
    assert edges.settings.recorded() == {"method": "outline", "line_width": 2, "polarity": "white on black"}
    scenes, size = synthdense_scenes(synth)
    folder = cache_dir() / "edges" / edges.settings.key()
    for i, image_id in enumerate(synth.image_ids):
        got = np.asarray(edges.edge_map(i))
        assert got.shape == (64, 64) and np.array_equal(got, np.asarray(sd.render_outlines(scenes[image_id], size)))
        on = got > 0
        inside = np.zeros_like(on)
        for o in scenes[image_id]["objects"]:  # every edge pixel lies in an object's box
            x1, y1, x2, y2 = sd.object_box(scenes[image_id], o["id"], size)
            inside[int(y1):int(np.ceil(y2)), int(x1):int(np.ceil(x2))] = True
        assert on.any() and not (on & ~inside).any()
        rgb = edges.open(i)
        assert rgb.mode == "RGB" and rgb.size == (64, 64)
        t = edges.tensor(i)
        assert t.shape == (1, 64, 64) and float(t.max()) <= 1.0 and np.allclose(t[0].numpy() * 255, got)
    cached = sorted(folder.glob("*.png"))
    assert len(cached) == synth.n_images  # keyed by image content: one file each
    digest = synth.images.content_digests([0])[0]
    assert digest is not None and (folder / f"{digest.hex()}.png").is_file()
    # another width is another cache folder, and thinner lines are fewer edge pixels
    thin = require_edges(synth, EdgeSettings(method="outline", line_width=1))
    assert thin.settings.key() != edges.settings.key()
    assert (np.asarray(thin.edge_map(0)) > 0).sum() < (np.asarray(edges.edge_map(0)) > 0).sum()


def test_canny_on_a_square_finds_its_outline(data) -> None:
    pytest.importorskip("cv2")
    ds = data[1]
    edges = require_edges(ds)  # auto: canny off synthdense
    rec = edges.settings.recorded()
    assert rec["method"] == "canny" and (rec["canny_low"], rec["canny_high"], rec["blur"]) == (100.0, 200.0, 3)
    image = np.asarray(ds.images.open(0).convert("L")).astype(int)
    got = np.asarray(edges.edge_map(0)) > 0
    bright = image > 40  # the one square (red: grey 86) on the dark (grey 20) background
    ys, xs = np.nonzero(bright)
    ey, ex = np.nonzero(got)
    assert got.any() and set(np.unique(np.asarray(edges.edge_map(0)))) <= {0, 255}
    # edges hug the square's border: within 2 px of it, none deep inside it or far outside
    assert ex.min() >= xs.min() - 2 and ex.max() <= xs.max() + 2
    assert ey.min() >= ys.min() - 2 and ey.max() <= ys.max() + 2
    assert not got[ys.min() + 4:ys.max() - 3, xs.min() + 4:xs.max() - 3].any()
    assert len(list((cache_dir() / "edges" / edges.settings.key()).glob("*.png"))) == 1


@pytest.mark.parametrize("settings, words", [
    (EdgeSettings(method="outline"), ["--edges outline", "use --edges canny"]),
    (EdgeSettings(method="canny", blur=4), ["--blur", "odd"]),
    (EdgeSettings(method="canny", canny_low=300), ["--canny-low", "above --canny-high"]),
    (EdgeSettings(method="sobel"), ["--edges must be one of"]),
])
def test_bad_edge_settings_are_one_line(data, settings: EdgeSettings, words: list[str]) -> None:
    with pytest.raises(ConfigError) as e:
        require_edges(data[1], settings)
    assert "\n" not in str(e.value) and all(w in str(e.value) for w in words), str(e.value)


def test_canny_without_opencv_names_the_extra(data, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cv2", None)  # `import cv2` now fails as it does where it is not installed
    with pytest.raises(ConfigError) as e:
        require_edges(data[1], needed_by="--objective structxlip")
    msg = str(e.value)
    assert "--objective structxlip needs edge maps" in msg and "pip install 'hnbench[edges]'" in msg
