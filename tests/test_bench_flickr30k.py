"""Flickr30k — the full token file and Karpathy's test / val splits, on replicas of the real files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from benchmark_fixtures import eval_argv, jpeg, use_counts
from conftest import assert_one_line_error, snapshot

from hnbench.cli import main
from hnbench.data.benchmarks import load
from hnbench.errors import DataError

IMAGES = ["1000092795.jpg", "10002456.jpg", "1000268201.jpg"]


def token_caption(name: str, k: int) -> str:
    if (name, k) == ("10002456.jpg", 2):
        return "Workers look down from up above on a piece of equipment #2 ."  # a '#' inside the caption
    return f"Caption {k} of {name.removesuffix('.jpg')} ."


def build_token_file(root: Path) -> Path:
    """results_20130124.token: ``NAME.jpg#k<TAB>caption``, 5 consecutive lines an image, a final line break."""
    lines = [f"{name}#{k}\t{token_caption(name, k)}" for name in IMAGES for k in range(5)]
    root.mkdir(parents=True, exist_ok=True)
    (root / "results_20130124.token").write_text("\n".join(lines) + "\n")
    for i, name in enumerate(IMAGES):
        jpeg(root / "flickr30k-images" / name, i)
    return root


def karpathy_entry(split: str, name: str) -> dict:
    return {"sentids": list(range(5)), "imgid": 0, "filename": name, "split": split,
            "sentences": [{"tokens": ["a"], "raw": f"{split} sentence {k} of {name}.", "imgid": 0, "sentid": k}
                          for k in range(5)]}


def build_karpathy_flickr(root: Path) -> Path:
    entries = [karpathy_entry("train", IMAGES[0]), karpathy_entry("test", IMAGES[1]), karpathy_entry("val", IMAGES[2])]
    (root / "dataset_flickr30k.json").write_text(json.dumps({"images": entries, "dataset": "flickr30k"}))
    return root


def test_flickr30k_full_reads_the_token_file_as_longclip_does(tmp_path):
    build_token_file(tmp_path)
    ds = load("flickr30k", data_root=tmp_path, expected_counts={"n_images": 3, "n_captions": 15})
    assert ds.protocol == "full" and ds.image_ids == ["1000092795", "10002456", "1000268201"]  # file order
    assert ds.captions == [token_caption(n, k) for n in IMAGES for k in range(5)]  # line break dropped
    assert ds.captions[7] == "Workers look down from up above on a piece of equipment #2 ."  # '#' is caption text
    assert [Path(ds.images.paths[i]).name for i in ds.caption_image[::5]] == IMAGES
    assert ds.meta["captions_per_image"] == {"5": 3} and ds.meta["protocol_families"] == ["longclip-splits", "tulip-splits"]


def test_flickr30k_karpathy_test_and_val_come_from_karpathys_split_file(tmp_path):
    build_token_file(tmp_path)
    build_karpathy_flickr(tmp_path)
    test = load("flickr30k", data_root=tmp_path, protocol="karpathy-test",
                expected_counts={"n_images": 1, "n_captions": 5})
    assert test.image_ids == ["10002456"] and test.captions[0] == "test sentence 0 of 10002456.jpg."
    assert Path(test.images.paths[0]).parent.name == "flickr30k-images"
    val = load("flickr30k", data_root=tmp_path, protocol="karpathy-val", expected_counts={"n_images": 1, "n_captions": 5})
    assert val.image_ids == ["1000268201"] and val.meta["karpathy_splits"] == {"test": 1, "train": 1, "val": 1}
    assert val.meta["protocol_families"] == ["flair-splits"]


def test_flickr30k_wrong_counts_and_malformed_token_lines_are_refused(tmp_path):
    build_token_file(tmp_path)
    with pytest.raises(DataError, match=r"loaded 3 images / 15 captions, expected 31783 / 158915"):
        load("flickr30k", data_root=tmp_path)
    build_karpathy_flickr(tmp_path)
    with pytest.raises(DataError, match=r"expected 1000 / 5000"):
        load("flickr30k", data_root=tmp_path, protocol="karpathy-test")
    with pytest.raises(DataError, match=r"expected 1014 / 5070"):
        load("flickr30k", data_root=tmp_path, protocol="karpathy-val")
    path = tmp_path / "results_20130124.token"
    path.write_text(path.read_text() + "10002456.jpg no tab here\n")
    with pytest.raises(DataError, match=r"results_20130124.token:16: malformed line"):
        load("flickr30k", data_root=tmp_path, allow_count_mismatch=True)


def test_flickr30k_missing_files_are_one_line(micro_config, tmp_path, capsys, monkeypatch):
    build_token_file(tmp_path / "f")
    use_counts(monkeypatch, "flickr30k", full=(3, 15), karpathy_test=(1, 5))
    argv = eval_argv(micro_config, "flickr30k", tmp_path / "f", tmp_path / "out")
    before = snapshot(tmp_path)
    assert main([*argv, "--protocol", "karpathy-test"]) == 2
    assert_one_line_error(capsys.readouterr().err, "flickr30k/karpathy-test needs dataset_flickr30k.json",
                          "caption_datasets.zip")
    assert snapshot(tmp_path) == before  # nothing written
    (tmp_path / "f" / "flickr30k-images" / IMAGES[2]).unlink()
    before = snapshot(tmp_path)
    assert main(argv) == 2
    assert_one_line_error(capsys.readouterr().err, "1 of 3 images not found", IMAGES[2], "flickr30k-images.tar")
    assert snapshot(tmp_path) == before
    (tmp_path / "f" / "results_20130124.token").unlink()
    assert main(argv) == 2
    assert_one_line_error(capsys.readouterr().err, "flickr30k/full needs results_20130124.token", "flickr30k.tar.gz",
                          "shannon.cs.illinois.edu/DenotationGraph")


def test_flickr30k_full_eval_queries_every_caption_and_image(micro_config, tmp_path, monkeypatch):
    build_token_file(tmp_path / "f")
    use_counts(monkeypatch, "flickr30k", full=(3, 15))
    out = tmp_path / "out"
    assert main(eval_argv(micro_config, "flickr30k", tmp_path / "f", out)) == 0
    res = json.loads(next(out.glob("*.json")).read_text())
    assert (res["dataset"]["protocol"], res["dataset"]["n_images"], res["dataset"]["n_captions"]) == ("full", 3, 15)
    assert (res["metrics"]["t2i"]["n_queries"], res["metrics"]["i2t"]["n_queries"]) == (15, 3)
