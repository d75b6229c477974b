"""Tests for the built-in synthetic dense-caption benchmark (hnbench.data.synthdense)."""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from hnbench.data import synthdense as sd
from hnbench.data.synthdense import SynthDenseConfig, generate_synthdense

CFG = SynthDenseConfig(seed=3, n_families={"train": 8, "test": 4}, family_size=4, image_size=48)


def _rows(root: Path, split: str) -> list[dict]:
    return [json.loads(line) for line in (root / split / "metadata.jsonl").read_text().splitlines()]


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _jaccard(a: str, b: str) -> float:
    sa, sb = set(a.lower().split()), set(b.lower().split())
    return len(sa & sb) / len(sa | sb)


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate_synthdense(tmp_path_factory.mktemp("sd") / "bench", CFG)


def test_deterministic_bytes(bench: Path, tmp_path: Path) -> None:
    again = generate_synthdense(tmp_path / "again", CFG)
    assert _files(again) == _files(bench)
    other = generate_synthdense(tmp_path / "other", dataclasses.replace(CFG, seed=4))
    a, b = _files(bench), _files(other)
    assert a.keys() == b.keys()
    assert a["train/metadata.jsonl"] != b["train/metadata.jsonl"]
    assert sum(a[k] != b[k] for k in a if k.endswith(".png")) > 0.9 * sum(k.endswith(".png") for k in a)


def test_layout_counts_and_images(bench: Path) -> None:
    manifest = json.loads((bench / "synthdense.json").read_text())
    assert manifest["version"] == 1 and manifest["fingerprint"] == CFG.fingerprint()
    assert manifest["config"] == CFG.to_dict()
    all_ids = []
    for split, n_fam in CFG.n_families.items():
        rows = _rows(bench, split)
        assert len(rows) == n_fam * CFG.family_size == manifest["splits"][split]
        ids = [r["id"] for r in rows]
        assert ids == sorted(ids) and len(set(ids)) == len(ids)
        assert all(r["id"].startswith(f"{split}-f") and r["family"].startswith(f"{split}-f") for r in rows)
        assert {r["file_name"] for r in rows} == {f"images/{p.name}" for p in (bench / split / "images").iterdir()}
        for r in rows:
            assert r["file_name"] == f"images/{r['id']}.png" and r["id"] == f"{r['family']}-v{r['variant']}"
            with Image.open(bench / split / r["file_name"]) as im:
                assert im.format == "PNG" and im.mode == "RGB" and im.size == (CFG.image_size,) * 2
        all_ids += ids
        assert len({r["family"] for r in rows}) == n_fam
    # splits share no families (different seeds), so no scene appears in both
    scenes = {split: {json.dumps(r["scene"], sort_keys=True) for r in _rows(bench, split)} for split in ("train", "test")}
    assert not scenes["train"] & scenes["test"]


def test_captions_long_and_complete(bench: Path) -> None:
    for split in CFG.n_families:
        for r in _rows(bench, split):
            words = r["caption"].split()
            assert len(words) >= 100, r["id"]
            assert r["caption"] == sd.scene_caption(r["scene"])
            text = r["caption"].lower()
            assert r["scene"]["background"] in text
            for o in r["scene"]["objects"]:
                assert o["colour"] in text and o["shape"] in text, (r["id"], o)


def test_scene_constraints(bench: Path) -> None:
    for r in _rows(bench, "train"):
        scene = r["scene"]
        objs = scene["objects"]
        assert CFG.min_objects <= len(objs) <= CFG.max_objects
        assert len({o["position"] for o in objs}) == len(objs)
        assert len({(o["colour"], o["shape"]) for o in objs}) == len(objs)
        for o in objs:
            assert o["colour"] not in sd.BACKGROUNDS[scene["background"]][1]
            assert o["fill"] == "solid" or o["shape"] in sd.OUTLINABLE


def _diff(base: dict, var: dict) -> set[str]:
    out = {"background"} if base["background"] != var["background"] else set()
    assert base["style"] == var["style"] and len(base["objects"]) == len(var["objects"])
    for b, v in zip(base["objects"], var["objects"]):
        assert b["id"] == v["id"] and b["jitter"] == v["jitter"] and b.keys() == v.keys()
        out |= {f"{b['id']}.{a}" for a in sd.ATTRS if b[a] != v[a]}
    return out


def test_variants_differ_in_listed_attributes(bench: Path) -> None:
    n_changes = set()
    for split in CFG.n_families:
        rows = _rows(bench, split)
        for _, members in itertools.groupby(rows, key=lambda r: r["family"]):
            members = list(members)
            assert [m["variant"] for m in members] == list(range(CFG.family_size))
            base = members[0]
            assert base["changes"] == []
            for m in members[1:]:
                assert 1 <= len(m["changes"]) <= CFG.max_changes
                assert _diff(base["scene"], m["scene"]) == set(m["changes"])
                n_changes.add(len(m["changes"]))
            assert len({json.dumps(m["scene"], sort_keys=True) for m in members}) == len(members)
            assert len({(bench / split / m["file_name"]).read_bytes() for m in members}) == len(members)
    assert n_changes == set(range(1, CFG.max_changes + 1))


def test_near_duplicate_structure(bench: Path) -> None:
    rows = _rows(bench, "train") + _rows(bench, "test")
    fams: dict[str, list[str]] = {}
    for r in rows:
        fams.setdefault(r["family"], []).append(r["caption"])
    within = [_jaccard(a, b) for caps in fams.values() for a, b in itertools.combinations(caps, 2)]
    between = [_jaccard(a[0], b[1]) for a, b in itertools.combinations(fams.values(), 2)]
    assert np.mean(within) > 0.8
    assert np.mean(within) > np.mean(between) + 0.25


def test_solid_objects_are_drawn_in_their_colour() -> None:
    rng = np.random.default_rng(0)
    cfg = SynthDenseConfig(image_size=64)
    checked = 0
    for _ in range(20):
        scene = sd._base_scene(rng, cfg)
        img = np.asarray(sd.render_scene(scene, 64)).astype(int)
        assert img.shape == (64, 64, 3)
        assert np.abs(img[1, 1] - sd.BACKGROUNDS[scene["background"]][0]).max() <= 2
        for o in scene["objects"]:
            if o["fill"] != "solid":
                continue
            row, col = divmod(sd.CELLS.index(o["position"]), 3)
            room = 0.8 * (64 / 3 - sd.SIZES[o["size"]] * 64) / 2
            x = int((col + 0.5) * 64 / 3 + o["jitter"][0] * room)
            y = int((row + 0.5) * 64 / 3 + o["jitter"][1] * room)
            assert np.abs(img[y, x] - sd.COLOURS[o["colour"]]).max() <= 40, o
            checked += 1
    assert checked > 30


def test_fingerprint_and_config() -> None:
    fp = CFG.fingerprint()
    assert len(fp) == 16 and int(fp, 16) >= 0
    same = SynthDenseConfig(seed=3, n_families={"test": 4, "train": 8}, family_size=4, image_size=48)
    assert same == CFG and hash(same) == hash(CFG) and same.fingerprint() == fp
    assert CFG.n_families["train"] == 8 and dict(CFG.n_families) == {"train": 8, "test": 4}
    changes = dict(seed=4, n_families={"train": 9, "test": 4}, family_size=5, min_objects=2, max_objects=4,
                   image_size=64, max_changes=1)
    fps = {dataclasses.replace(CFG, **{k: v}).fingerprint() for k, v in changes.items()}
    assert len(fps) == len(changes) and fp not in fps
    assert SynthDenseConfig().fingerprint() == SynthDenseConfig().fingerprint()
    for bad in (dict(seed=-1), dict(min_objects=4, max_objects=3), dict(max_objects=9), dict(family_size=0),
                dict(n_families={"../x": 1}), dict(n_families={"train": -1}), dict(max_changes=0),
                dict(seed=1.5), dict(n_families={"train": 2.5}), dict(image_size=8)):
        with pytest.raises(ValueError):
            SynthDenseConfig(**bad)


def test_existing_dir_reused_or_rejected(bench: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = _files(bench)
    monkeypatch.setattr(sd, "render_scene", lambda *a, **k: pytest.fail("regenerated"))
    assert generate_synthdense(str(bench), CFG) == bench
    assert _files(bench) == before
    with pytest.raises(ValueError, match="fingerprint") as err:
        generate_synthdense(bench, dataclasses.replace(CFG, seed=99))
    assert str(bench) in str(err.value)
    assert _files(bench) == before

    user = tmp_path / "user"
    user.mkdir()
    (user / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not a complete synthdense") as err:
        generate_synthdense(user, CFG)
    assert str(user) in str(err.value) and (user / "notes.txt").read_text() == "mine"


def test_empty_existing_dir_is_filled(tmp_path: Path) -> None:
    cfg = dataclasses.replace(CFG, n_families={"test": 2})
    out = tmp_path / "empty"
    out.mkdir()
    generate_synthdense(out, cfg, progress=True)
    assert len(_rows(out, "test")) == 2 * cfg.family_size


def test_interrupted_generation_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real, calls = sd.render_scene, []

    def flaky(scene: dict, size: int) -> Image.Image:
        calls.append(1)
        if len(calls) > 5:
            raise RuntimeError("boom")
        return real(scene, size)

    monkeypatch.setattr(sd, "render_scene", flaky)
    out = tmp_path / "bench"
    with pytest.raises(RuntimeError, match="boom"):
        generate_synthdense(out, CFG)
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(sd, "render_scene", real)
    assert (generate_synthdense(out, CFG) / "synthdense.json").is_file()


# --- the caption's sentences and the render geometry (side inputs of GOAL/StructXLIP objectives) ------------
# sha256 over (path, bytes) of every file CFG generates, taken with the generator before caption_sentences /
# _placement were factored out of scene_caption / render_scene: the refactor changed no byte
PRE_REFACTOR_DIGEST = "429125e768945050d8f7c56d427830473f931a22f975f17d4ee7411e2c27f0a2"


def test_outputs_byte_identical_to_the_generator_before_the_refactor(bench: Path) -> None:
    import hashlib

    h = hashlib.sha256()
    for p in sorted(bench.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(bench)).encode() + b"\0" + p.read_bytes())
    assert h.hexdigest() == PRE_REFACTOR_DIGEST


def test_caption_sentences_carry_their_object_and_span(bench: Path) -> None:
    for row in _rows(bench, "train")[:12]:
        scene, caption = row["scene"], row["caption"]
        sentences = sd.caption_sentences(scene)
        assert " ".join(s.text for s in sentences) == caption == sd.scene_caption(scene)
        assert all(caption[s.span[0]:s.span[1]] == s.text for s in sentences)
        by_object = [s for s in sentences if s.object is not None]
        assert sorted(s.object for s in by_object) == sorted(o["id"] for o in scene["objects"])
        for s in by_object:  # the object's own sentence names its colour and shape
            o = next(o for o in scene["objects"] if o["id"] == s.object)
            assert f"{o['colour']} {o['shape']}" in s.text


def test_object_box_holds_the_drawn_object_and_outline() -> None:
    scene = sd._base_scene(sd._family_rng(0, "train", 7), CFG)
    size = 96
    for o in scene["objects"]:
        alone = {**scene, "objects": [o]}
        pixels = np.asarray(sd.render_scene(alone, size)).astype(int)
        drawn = np.abs(pixels - np.array(sd.BACKGROUNDS[scene["background"]][0])).sum(axis=2) > 0
        ys, xs = np.nonzero(drawn)
        x1, y1, x2, y2 = sd.object_box(scene, o["id"], size)
        assert 0 <= x1 < x2 <= size and 0 <= y1 < y2 <= size
        assert xs.min() >= int(x1) and xs.max() < np.ceil(x2) and ys.min() >= int(y1) and ys.max() < np.ceil(y2)
        # the box is tight: the object spans most of it (a circle or square reaches about every side)
        assert xs.max() - xs.min() + 1 >= 0.6 * (x2 - x1)
        edges = np.asarray(sd.render_outlines(alone, size)) > 0
        ey, ex = np.nonzero(edges)
        assert ex.min() >= int(x1) and ex.max() < np.ceil(x2) and ey.min() >= int(y1) and ey.max() < np.ceil(y2)
        assert edges.sum() < drawn.sum() or o["fill"] == "outlined"  # an outline, not the filled shape
    with pytest.raises(sd.SynthDenseError, match="obj9"):
        sd.object_box(scene, "obj9", size)
