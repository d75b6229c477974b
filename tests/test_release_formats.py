"""The other release files of the same protocols (suite notes §1.4/1.5) — CLIP_benchmark's
``coco_test_karpathy.json`` and ``flickr30k_test_karpathy.txt``, TULIP's Kaggle ``results.csv``, LLM2CLIP's
``flickr30k_test.json`` / ``coco_karpathy_test.json`` — each read when it is the file under the data root
(declared as the protocol's :class:`~hnbench.data.benchmarks.protocol.Layout`), giving the primary file's
pairs."""

from __future__ import annotations

import json
from pathlib import Path

from benchmark_fixtures import eval_argv, use_counts
from conftest import assert_one_line_error, snapshot
from test_bench_coco import build_karpathy_coco
from test_bench_flickr30k import IMAGES, build_karpathy_flickr, build_token_file, token_caption

from hnbench.cli import main
from hnbench.data.benchmarks import BENCHMARKS, load


def _pairs(ds) -> list[tuple[str, str]]:
    """(image file name, caption) of each caption, in the set's order."""
    return [(Path(ds.images.paths[i]).name, c) for c, i in zip(ds.captions, ds.caption_image)]


def _karpathy_test(root: Path, name: str) -> list[dict]:
    return [e for e in json.loads((root / name).read_text())["images"] if e["split"] == "test"]


# --- COCO Karpathy test: CLIP_benchmark's COCO-format JSON, LLM2CLIP's list ------------------------------------
def write_clipbench_coco(root: Path) -> Path:
    """coco_test_karpathy.json (mehdidc/retrieval_annotations 1.0.0): COCO format, the test split's images and
    captions, annotations interleaved across images; CocoCaptions orders images by id."""
    test = _karpathy_test(root, "dataset_coco.json")
    images = [{"id": e["cocoid"], "file_name": e["filename"]} for e in test]
    anns, n = [], 0
    for k in range(max(len(e["sentences"]) for e in test)):
        for e in test:
            if k < len(e["sentences"]):
                n += 1
                anns.append({"image_id": e["cocoid"], "id": n, "caption": e["sentences"][k]["raw"]})
    path = root / "coco_test_karpathy.json"
    path.write_text(json.dumps({"images": images, "annotations": anns}))
    return path


def write_caption_list(root: Path, name: str, entries: list[dict], folder: str) -> Path:
    """LLM2CLIP's (BLIP's) list: ``[{"image": "FOLDER/NAME.jpg", "caption": [...]}]`` in the Karpathy file's order."""
    path = root / name
    path.write_text(json.dumps([{"image": f"{folder}/{e['filename']}", "caption": [s["raw"] for s in e["sentences"]]}
                                for e in entries]))
    return path


def test_coco_karpathy_test_from_each_release_file_gives_the_same_pairs(tmp_path, monkeypatch):
    (tmp_path / "coco").mkdir()
    root = build_karpathy_coco(tmp_path / "coco")
    use_counts(monkeypatch, "coco", karpathy_test=(2, 11))
    primary = load("coco", data_root=root, protocol="karpathy-test")
    assert "release_file" in primary.meta and primary.meta["release_file"]["file"] == "dataset_coco.json"
    clipbench = write_clipbench_coco(root)
    llm2clip = write_caption_list(root, "coco_karpathy_test.json", _karpathy_test(root, "dataset_coco.json"), "val2014")
    (root / "dataset_coco.json").rename(root / "dataset_coco.json.away")
    cb = load("coco", data_root=root, protocol="karpathy-test")
    assert cb.meta["release_file"]["reader"] == "coco-captions-json" and cb.protocol == "karpathy-test"
    assert cb.image_ids == ["COCO_val2014_000000060623", "COCO_val2014_000000391895"]  # by id, as CocoCaptions
    assert sorted(_pairs(cb)) == sorted(_pairs(primary)) and len(cb.captions) == 11  # the 6-caption image whole
    clipbench.unlink()
    ll = load("coco", data_root=root, protocol="karpathy-test")
    assert ll.meta["release_file"]["file"] == "coco_karpathy_test.json"
    assert _pairs(ll) == _pairs(primary) and ll.image_ids == primary.image_ids  # the Karpathy file's order
    llm2clip.unlink()
    assert ll.meta["count_check"]["status"] == "ok"


# --- Flickr30k full: TULIP's Kaggle results.csv ------------------------------------------------------------
def write_kaggle_csv(root: Path, nan_at: tuple[str, int] | None = ("10002456.jpg", 4)) -> Path:
    """results.csv: ``image_name| comment_number| comment``; the real file's one broken line has its caption run
    into the number field (``2199200615.jpg| 4   A dog runs ...``), so pandas reads a NaN comment."""
    lines = ["image_name| comment_number| comment"]
    for name in IMAGES:
        for k in range(5):
            lines.append(f"{name}| {k}   {token_caption(name, k)}" if (name, k) == nan_at
                         else f"{name}| {k}| {token_caption(name, k)}")
    path = root / "flickr30k_images" / "results.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def test_flickr30k_full_from_tulips_kaggle_csv_gives_the_same_pairs(tmp_path):
    root = build_token_file(tmp_path / "f")
    primary = load("flickr30k", data_root=root, expected_counts={"n_images": 3, "n_captions": 15})
    write_kaggle_csv(root)
    (root / "results_20130124.token").unlink()
    ds = load("flickr30k", data_root=root, expected_counts={"n_images": 3, "n_captions": 15})
    assert ds.meta["release_file"]["reader"] == "flickr-kaggle-csv" and ds.protocol == "full"
    nan = 5 + 4  # 10002456.jpg's 5th caption: TULIP's " ", kept as a query
    assert ds.captions[nan] == " " and ds.meta["nan_captions"] == ["results.csv:11"]
    assert ds.meta["empty_captions"] == ["10002456"]
    assert _pairs(ds)[:nan] + _pairs(ds)[nan + 1:] == _pairs(primary)[:nan] + _pairs(primary)[nan + 1:]
    assert ds.captions[7] == "Workers look down from up above on a piece of equipment #2 ."  # no separator space
    # a file without the broken line gives the token file's pairs exactly
    write_kaggle_csv(root, nan_at=None)
    assert _pairs(load("flickr30k", data_root=root, expected_counts={"n_images": 3, "n_captions": 15})) == _pairs(primary)


# --- Flickr30k Karpathy test: CLIP_benchmark's txt, LLM2CLIP's list --------------------------------------------
def test_flickr30k_karpathy_test_from_clipbench_txt_and_llm2clip_json_gives_the_same_pairs(tmp_path, monkeypatch):
    root = build_karpathy_flickr(build_token_file(tmp_path / "f"))
    use_counts(monkeypatch, "flickr30k", karpathy_test=(1, 5))
    primary = load("flickr30k", data_root=root, protocol="karpathy-test")
    test = _karpathy_test(root, "dataset_flickr30k.json")
    # CLIP_benchmark's CSV: header, NAME.jpg,caption; a caption with a comma, one with '.jpg,' inside
    test[0]["sentences"][1]["raw"] = "A man, a dog, and a ball."
    test[0]["sentences"][3]["raw"] = "A sign reads photo.jpg, then nothing."
    rows = [["image", "caption"]] + [[e["filename"], s["raw"]] for e in test for s in e["sentences"]]
    txt = root / "flickr30k-images" / "flickr30k_test_karpathy.txt"
    txt.write_text("".join(f"{a},{b}\n" for a, b in rows) + "\n")  # as the release: unquoted, a trailing blank line
    data = json.loads((root / "dataset_flickr30k.json").read_text())
    data["images"][1] = {**data["images"][1], "sentences": test[0]["sentences"]}
    (root / "dataset_flickr30k.json").write_text(json.dumps(data))
    primary = load("flickr30k", data_root=root, protocol="karpathy-test")
    (root / "dataset_flickr30k.json").rename(root / "dataset_flickr30k.json.away")
    cb = load("flickr30k", data_root=root, protocol="karpathy-test")
    assert cb.meta["release_file"]["reader"] == "clipbench-flickr-txt"
    assert _pairs(cb) == _pairs(primary)
    assert cb.captions[1] == "A man, a dog, and a ball." and cb.captions[3] == "A sign reads photo.jpg, then nothing."
    txt.unlink()
    (root / "flickr30k").mkdir()
    write_caption_list(root / "flickr30k", "flickr30k_test.json", test, "flickr30k-images")
    ll = load("flickr30k", data_root=root, protocol="karpathy-test")
    assert ll.meta["release_file"]["file"] == "flickr30k_test.json" and _pairs(ll) == _pairs(primary)


def test_missing_release_file_names_every_layout_and_its_source(micro_config, tmp_path, capsys, monkeypatch):
    """No file of any layout: one line, exit 2, nothing written, naming each file that would do and where it
    comes from (before any model loads)."""
    root = tmp_path / "empty"
    root.mkdir()
    for bench, protocol, words in (
            ("coco", "karpathy-test", ("dataset_coco.json", "caption_datasets.zip", "coco_test_karpathy.json",
                                       "mehdidc/retrieval_annotations", "coco_karpathy_test.json",
                                       "sfr-vision-language-research")),
            ("flickr30k", "full", ("results_20130124.token", "DenotationGraph", "results.csv",
                                   "hsankesara/flickr-image-dataset")),
            ("flickr30k", "karpathy-test", ("dataset_flickr30k.json", "flickr30k_test_karpathy.txt",
                                            "flickr30k_test.json", "LLM2CLIP"))):
        before = snapshot(tmp_path)
        assert main([*eval_argv(micro_config, bench, root, tmp_path / "out"), "--protocol", protocol]) == 2
        assert_one_line_error(capsys.readouterr().err, f"{bench}/{protocol} needs", *words)
        assert snapshot(tmp_path) == before
    assert BENCHMARKS["flickr30k"].protocol("full").layouts[0].keep_empty is True
