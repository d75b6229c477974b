"""The by-name image search of a benchmark's data root never leaves it unless asked (--allow-outside-paths).

Real Flickr30k-layout replicas (``results_20130124.token``) whose images are not where the reference code
looks (``flickr30k-images/``), so the loader searches the data root by file name; real symlinks on disk.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from benchmark_fixtures import jpeg
from conftest import assert_one_line_error, snapshot

from hnbench.cli import main
from hnbench.data.benchmarks import load
from hnbench.errors import DataError

NAMES = ["1000092795.jpg", "10002456.jpg"]
COUNTS = {"n_images": 2, "n_captions": 2}


def token_file(root: Path) -> Path:
    """The release file naming NAMES, one caption each; no image under ``flickr30k-images/``."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "results_20130124.token").write_text("".join(f"{n}#0\tA caption of {n} .\n" for n in NAMES))
    return root


def images(folder: Path, offset: int = 0) -> Path:
    for i, name in enumerate(NAMES):
        jpeg(folder / name, i + offset)
    return folder


def test_a_symlink_out_of_the_data_root_is_not_searched_and_the_error_says_how_to_allow_it(tmp_path, capsys):
    root = token_file(tmp_path / "root")
    elsewhere = images(tmp_path / "elsewhere")  # the images the release names, outside the data root
    (root / "mnt").symlink_to(elsewhere, target_is_directory=True)
    (root / "everything").symlink_to("/", target_is_directory=True)  # the whole machine: never walked
    with pytest.raises(DataError) as e:
        load("flickr30k", data_root=root, expected_counts=COUNTS)
    message = str(e.value)
    assert "2 of 2 images not found" in message and all(n in message for n in NAMES)
    assert "2 symlinks below" in message and "--allow-outside-paths" in message and "everything" in message
    before = snapshot(tmp_path / "root")
    assert main(["-q", "datasets", "info", "flickr30k", "--data-root", str(root)]) == 2
    assert_one_line_error(capsys.readouterr().err, "not found", "lead out of it", "everything -> /", "--allow-outside-paths")
    assert snapshot(tmp_path / "root") == before


def test_allow_outside_paths_follows_the_symlink_out_as_asked(tmp_path):
    root = token_file(tmp_path / "root")
    elsewhere = images(tmp_path / "elsewhere")
    (root / "mnt").symlink_to(elsewhere, target_is_directory=True)
    ds = load("flickr30k", data_root=root, expected_counts=COUNTS, allow_outside_paths=True)
    assert [Path(p).resolve() for p in ds.images.paths] == [(elsewhere / n).resolve() for n in NAMES]
    assert "links_out_of_root_not_searched" not in ds.meta


def test_images_inside_the_root_are_used_and_a_same_named_file_behind_a_link_out_is_not(tmp_path, caplog):
    root = token_file(tmp_path / "root")
    inside = images(root / "copy")
    images(tmp_path / "elsewhere", offset=5)  # other pixels under the same names, outside
    (root / "a-link").symlink_to(tmp_path / "elsewhere", target_is_directory=True)  # sorts before copy/
    (root / "a-file.jpg").symlink_to(tmp_path / "elsewhere" / NAMES[0])  # a file link out is not used either
    with caplog.at_level("WARNING"):
        ds = load("flickr30k", data_root=root, expected_counts=COUNTS)
    assert [Path(p) for p in ds.images.paths] == [inside / n for n in NAMES]
    assert sorted(ds.meta["links_out_of_root_not_searched"]) == ["a-file.jpg", "a-link"]
    assert "image_names_in_several_folders" not in ds.meta  # the outside copies were never indexed
    assert any("lead out of it and were not searched" in r.getMessage() for r in caplog.records)


def test_symlinks_that_stay_inside_the_data_root_are_followed(tmp_path):
    root = token_file(tmp_path / "root")
    store = images(root / "store" / "deep")
    (root / "flat").symlink_to(store, target_is_directory=True)  # resolves inside the root
    (root / "store" / "loop").symlink_to(root, target_is_directory=True)  # a loop: each real folder walked once
    (root / "flat-file.jpg").symlink_to(store / NAMES[0])
    ds = load("flickr30k", data_root=root, expected_counts=COUNTS)
    assert [Path(os.path.realpath(p)) for p in ds.images.paths] == [(store / n).resolve() for n in NAMES]
    assert "links_out_of_root_not_searched" not in ds.meta


def test_a_data_root_that_is_itself_a_symlink_is_searched_below_its_target(tmp_path):
    real = token_file(tmp_path / "real")
    images(real / "sa_000000")
    (tmp_path / "root").symlink_to(real, target_is_directory=True)  # --data-root data/flickr -> /mnt/flickr
    ds = load("flickr30k", data_root=tmp_path / "root", expected_counts=COUNTS)
    assert [Path(p).name for p in ds.images.paths] == NAMES and "links_out_of_root_not_searched" not in ds.meta
