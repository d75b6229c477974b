"""Generic local formats: manifests (JSONL/CSV), image folders, HF datasets; bad input."""

from __future__ import annotations

import csv

import numpy as np
import pytest
from conftest import make_pairs, write_jsonl

from hnbench.data import load_dataset
from hnbench.data.base import ImageTextDataset
from hnbench.errors import DataError


def test_jsonl_manifest_single_and_multi_caption(tmp_path):
    pairs = make_pairs(tmp_path, n=4)
    rows = [{"image": p, "caption": c} for p, c in pairs[:3]]
    rows.append({"image": pairs[3][0], "caption": [pairs[3][1], "another caption of the last image"]})
    ds = load_dataset(str(write_jsonl(tmp_path / "m.jsonl", rows)))
    assert (ds.n_images, ds.n_captions) == (4, 5)
    assert ds.image_ids[0] == pairs[0][0]
    assert ds.caption_image.tolist() == [0, 1, 2, 3, 3]
    assert ds.caption_ids[3:] == [f"{pairs[3][0]}#0", f"{pairs[3][0]}#1"]
    assert ds.images.open(2).size == (48, 48)
    assert [len(x) for x in ds.image_captions()] == [1, 1, 1, 2]


def test_csv_manifest_repeated_rows_merge_and_ids(tmp_path):
    pairs = make_pairs(tmp_path, n=3)
    with open(tmp_path / "m.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "image", "caption"])
        for k, (p, c) in enumerate(pairs):
            w.writerow([f"im{k}", p, c])
        w.writerow(["im0", pairs[0][0], "second caption for im0"])
    ds = load_dataset(str(tmp_path / "m.csv"))
    assert ds.image_ids == ["im0", "im1", "im2"]
    assert ds.captions[1] == "second caption for im0"
    assert ds.caption_image.tolist() == [0, 0, 1, 2]


def test_imagefolder_metadata(tmp_path):
    pairs = make_pairs(tmp_path, n=5)
    write_jsonl(tmp_path / "metadata.jsonl", [{"file_name": p, "text": c} for p, c in pairs])
    ds = load_dataset(str(tmp_path))
    assert ds.n_images == 5 and ds.captions[4] == pairs[4][1] and ds.meta["format"] == "imagefolder"


def test_hf_parquet_and_save_to_disk(tmp_path):
    import datasets

    pairs = make_pairs(tmp_path, n=6)
    data = {"img": [str(tmp_path / p) for p, _ in pairs], "desc": [c for _, c in pairs],
            "id": [f"x{i}" for i in range(6)]}
    hf = datasets.Dataset.from_dict(data).cast_column("img", datasets.Image())
    hf.to_parquet(str(tmp_path / "shard.parquet"))
    hf.save_to_disk(str(tmp_path / "saved"))
    for path in (tmp_path / "shard.parquet", tmp_path / "saved"):
        ds = load_dataset(str(path), image_column="img", caption_column="desc")
        assert ds.image_ids == data["id"] and ds.captions == data["desc"]
        arr = np.asarray(ds.images.open(3))
        assert arr.shape == (48, 48, 3)
    with pytest.raises(DataError, match="no caption column 'nope'"):
        load_dataset(str(tmp_path / "saved"), image_column="img", caption_column="nope")


def test_mismatched_columns_name_the_columns(tmp_path):
    pairs = make_pairs(tmp_path, n=2)
    write_jsonl(tmp_path / "m.jsonl", [{"picture": p, "caption": c} for p, c in pairs])
    with pytest.raises(DataError, match=r"no image column.*--image-column"):
        load_dataset(str(tmp_path / "m.jsonl"))
    ds = load_dataset(str(tmp_path / "m.jsonl"), image_column="picture")
    assert ds.n_images == 2
    (tmp_path / "bad.csv").write_text("image,caption\nimages/img_000.png,a,b\n")
    with pytest.raises(DataError, match="different number of fields"):
        load_dataset(str(tmp_path / "bad.csv"))
    (tmp_path / "bad.jsonl").write_text('{"image": "x.png", "caption": "a"}\n{oops\n')
    with pytest.raises(DataError, match=r"bad.jsonl:2: not valid JSON"):
        load_dataset(str(tmp_path / "bad.jsonl"))


def test_missing_image_and_empty_caption_error_or_skip(tmp_path):
    pairs = make_pairs(tmp_path, n=4)
    rows = [{"image": p, "caption": c} for p, c in pairs]
    rows[1]["image"] = "images/does_not_exist.png"
    rows[2]["caption"] = "   "
    m = write_jsonl(tmp_path / "m.jsonl", rows)
    with pytest.raises(DataError, match="empty caption for image 'images/img_002.png'"):
        load_dataset(str(m))
    rows[2]["caption"] = "fine"
    write_jsonl(m, rows)
    with pytest.raises(DataError, match="'images/does_not_exist.png' not found"):
        load_dataset(str(m))
    rows[2]["caption"] = ""
    write_jsonl(m, rows)
    ds = load_dataset(str(m), skip_invalid=True)
    assert ds.n_images == 2 and ds.skipped == {"empty caption": ["images/img_002.png"],
                                               "missing image": ["images/does_not_exist.png"]}


def test_dataset_invariants_and_drop_images(tmp_path):
    pairs = make_pairs(tmp_path, n=3)
    ds = load_dataset(str(write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": [c, c + "!"]}
                                                             for p, c in pairs])))
    fp = ds.fingerprint()
    assert fp == load_dataset(str(tmp_path / "m.jsonl")).fingerprint()
    smaller = ds.drop_images([1])
    assert smaller.n_images == 2 and smaller.n_captions == 4
    assert smaller.caption_image.tolist() == [0, 0, 1, 1] and smaller.skipped == {"unreadable image": [pairs[1][0]]}
    assert smaller.fingerprint() != fp
    with pytest.raises(DataError, match="has no caption"):
        ImageTextDataset("x", ds.images, ["a"], ["a"], np.array([0]))


def test_unknown_dataset_name_suggests(tmp_path):
    from hnbench.errors import ConfigError

    with pytest.raises(ConfigError, match="did you mean 'synthdense'"):
        load_dataset("synthdens")
    with pytest.raises(DataError, match="not found"):
        load_dataset(str(tmp_path / "nope.jsonl"))
