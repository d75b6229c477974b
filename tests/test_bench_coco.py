"""COCO 5k — val2017 (first 5 captions / all) and Karpathy's test split, on replicas of the real files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from benchmark_fixtures import eval_argv, jpeg, use_counts
from conftest import assert_one_line_error, snapshot

from hnbench.cli import main
from hnbench.data.benchmarks import get_benchmark, load
from hnbench.errors import DataError
from hnbench.results.leaderboard import leaderboard
from hnbench.results.reported import reported_rows

# captions_val2017.json's shape: images[] (id, file_name, ...), annotations[] (image_id, id, caption), interleaved;
# image 139 has 6 captions (12 val2017 images do), 632 has 7 (one does), 285 has 5
COCO_IMAGES = [(632, 5), (139, 6), (285, 5)]  # listed out of id order, as the release does not sort them
COCO_CAPTIONS = {139: [f"A woman stands in the dining area number {k}. " if k == 0 else f"Caption {k} of image 139."
                       for k in range(6)],
                 285: [f"A big brown bear {k}." for k in range(5)],
                 632: [f"Bedroom with a bookshelf {k}.\n" for k in range(7)]}


def build_coco_val2017(root: Path) -> Path:
    images = [{"license": 1, "file_name": f"{i:012d}.jpg", "coco_url": f"http://images.cocodataset.org/val2017/"
               f"{i:012d}.jpg", "height": 32, "width": 32, "id": i} for i, _ in COCO_IMAGES]
    anns, ann_id = [], 1
    for k in range(7):  # round-robin over images: annotation order is not grouped by image
        for i in (285, 139, 632):
            if k < len(COCO_CAPTIONS[i]):
                anns.append({"image_id": i, "id": ann_id, "caption": COCO_CAPTIONS[i][k]})
                ann_id += 1
    (root / "annotations").mkdir(parents=True, exist_ok=True)
    (root / "annotations" / "captions_val2017.json").write_text(json.dumps(
        {"info": {"description": "COCO 2017 Dataset"}, "licenses": [], "images": images, "annotations": anns}))
    for i, color in COCO_IMAGES:
        jpeg(root / "val2017" / f"{i:012d}.jpg", color + i % 3)
    return root


def karpathy_entry(split: str, cocoid: int, n_sentences: int = 5) -> dict:
    folder = "train2014" if split == "train" else "val2014"
    return {"filepath": folder, "sentids": list(range(n_sentences)), "filename": f"COCO_{folder}_{cocoid:012d}.jpg",
            "imgid": cocoid, "split": split, "cocoid": cocoid,
            "sentences": [{"tokens": ["a", "dog"], "raw": f"A dog, picture {cocoid}, sentence {k}.", "imgid": cocoid,
                           "sentid": k} for k in range(n_sentences)]}


def build_karpathy_coco(root: Path) -> Path:
    """dataset_coco.json: two test entries (one with 6 sentences), one restval, one val, one train entry;
    the restval and val images are in val2014/ too, as in the real release."""
    entries = [karpathy_entry("train", 9), karpathy_entry("test", 391895, 6), karpathy_entry("restval", 522418),
               karpathy_entry("val", 184613), karpathy_entry("test", 60623)]
    (root / "dataset_coco.json").write_text(json.dumps({"images": entries, "dataset": "coco"}))
    for k, e in enumerate(entries):
        jpeg(root / e["filepath"] / e["filename"], k)
    return root


def _paths(ds) -> list[str]:
    return [Path(ds.images.paths[i]).name for i in ds.caption_image]


def test_coco_val2017_takes_the_first_five_captions_in_annotation_order(tmp_path):
    build_coco_val2017(tmp_path)
    ds = load("coco", data_root=tmp_path, expected_counts={"n_images": 3, "n_captions": 15})
    assert ds.protocol == "val2017" and ds.meta["caption_rule"] == "raw"
    assert ds.image_ids == ["000000000139", "000000000285", "000000000632"]  # ascending id, as CocoCaptions
    # the first 5 of each image's captions in annotation order: 139's 6th and 632's 6th and 7th are left out
    assert ds.captions == COCO_CAPTIONS[139][:5] + COCO_CAPTIONS[285] + COCO_CAPTIONS[632][:5]  # raw: spaces, \n kept
    assert _paths(ds) == [f"{i:012d}.jpg" for i in (139,) * 5 + (285,) * 5 + (632,) * 5]
    assert ds.meta["captions_per_image"] == {"5": 1, "6": 1, "7": 1} and ds.meta["captions_not_used"] == 3
    assert ds.meta["count_check"]["status"] == "ok" and ds.meta["protocol_families"] == ["longclip-splits", "tulip-splits"]
    assert [len(c) for c in ds.image_captions()] == [5, 5, 5]
    assert get_benchmark("coco").protocol("val2017-first5").name == "val2017"


def test_coco_val2017_all_keeps_every_caption(tmp_path):
    build_coco_val2017(tmp_path)
    ds = load("coco", data_root=tmp_path, protocol="val2017-all", expected_counts={"n_images": 3, "n_captions": 18})
    assert ds.captions == COCO_CAPTIONS[139] + COCO_CAPTIONS[285] + COCO_CAPTIONS[632]
    assert [len(c) for c in ds.image_captions()] == [6, 5, 7] and ds.meta["captions_not_used"] == 0
    assert ds.caption_ids[:2] == ["000000000139#0", "000000000139#1"]


def test_coco_karpathy_test_leaves_restval_out(tmp_path):
    build_karpathy_coco(tmp_path)
    ds = load("coco", data_root=tmp_path, protocol="karpathy-test", expected_counts={"n_images": 2, "n_captions": 11})
    assert ds.image_ids == ["COCO_val2014_000000391895", "COCO_val2014_000000060623"]  # file order, test only
    assert "COCO_val2014_000000522418" not in ds.image_ids  # restval: a training split, its image in val2014/ too
    assert ds.captions[:2] == ["A dog, picture 391895, sentence 0.", "A dog, picture 391895, sentence 1."]
    assert [len(c) for c in ds.image_captions()] == [6, 5]
    assert ds.meta["karpathy_splits"] == {"restval": 1, "test": 2, "train": 1, "val": 1}
    assert all(Path(p).parent.name == "val2014" for p in ds.images.paths)


def test_coco_real_counts_are_checked(tmp_path):
    build_coco_val2017(tmp_path)
    with pytest.raises(DataError, match=r"loaded 3 images / 15 captions, expected 5000 / 25000 \(coco spec, protocol "
                                        r"val2017\).*--allow-count-mismatch"):
        load("coco", data_root=tmp_path)
    with pytest.raises(DataError, match=r"expected 5000 / 25014"):
        load("coco", data_root=tmp_path, protocol="val2017-all")
    build_karpathy_coco(tmp_path)
    with pytest.raises(DataError, match=r"loaded 2 images / 11 captions, expected 5000 / 25010"):
        load("coco", data_root=tmp_path, protocol="karpathy-test")


def test_coco_missing_release_file_and_image_are_one_line(micro_config, tmp_path, capsys, monkeypatch):
    build_coco_val2017(tmp_path / "coco")
    use_counts(monkeypatch, "coco", karpathy_test=(2, 11), val2017=(3, 15))
    argv = eval_argv(micro_config, "coco", tmp_path / "coco", tmp_path / "out")
    before = snapshot(tmp_path)
    assert main([*argv, "--protocol", "karpathy-test"]) == 2
    assert_one_line_error(capsys.readouterr().err, "coco/karpathy-test needs dataset_coco.json", "caption_datasets.zip",
                          "https://cs.stanford.edu/people/karpathy/deepimagesent/caption_datasets.zip")
    assert snapshot(tmp_path) == before  # nothing written
    (tmp_path / "coco" / "val2017" / "000000000285.jpg").unlink()
    before = snapshot(tmp_path)
    assert main(argv) == 2
    assert_one_line_error(capsys.readouterr().err, "1 of 3 images not found", "000000000285.jpg", "val2017.zip")
    assert snapshot(tmp_path) == before  # nothing written
    (tmp_path / "coco" / "annotations" / "captions_val2017.json").unlink()
    assert main(argv) == 2
    assert_one_line_error(capsys.readouterr().err, "coco/val2017 needs captions_val2017.json",
                          "annotations_trainval2017.zip", "images.cocodataset.org/annotations")


def test_coco_val2017_eval_queries_every_caption_and_image(micro_config, tmp_path, monkeypatch):
    build_coco_val2017(tmp_path / "coco")
    use_counts(monkeypatch, "coco", val2017=(3, 15))
    out = tmp_path / "out"
    assert main(eval_argv(micro_config, "coco", tmp_path / "coco", out)) == 0
    res = json.loads(next(out.glob("*.json")).read_text())
    d = res["dataset"]
    assert (d["name"], d["protocol"], d["n_images"], d["n_captions"]) == ("coco", "val2017", 3, 15)
    assert d["meta"]["count_check"]["status"] == "ok" and d["meta"]["captions_not_used"] == 3
    assert (res["metrics"]["t2i"]["n_queries"], res["metrics"]["i2t"]["n_queries"]) == (15, 3)  # multi-positive


def test_the_documented_benchmark_table_names_every_protocol_its_counts_and_the_default():
    """The benchmarks guide as the site shows it: each long-caption benchmark's row names every protocol, its
    counts and the default protocol with its caption rule."""
    from docs_pages import page

    text = page("guides/benchmarks.md")
    for name in ("coco", "flickr30k", "sharegpt4v", "iiw"):
        row = next(line for line in text.splitlines() if line.startswith(f"| `{name}` |"))
        spec, cells = get_benchmark(name), row.split(" | ")
        for p in spec.protocols:
            assert f"`{p.name}`" in cells[1] and f"{p.n_images:,} / {p.n_captions:,}" in cells[1], (name, p.name)
        default = spec.protocol(None)
        assert cells[2].startswith(f"`{default.name}` (`{default.caption}`)"), row


def test_reported_numbers_sit_beside_the_same_protocol_only(micro_config, tmp_path, monkeypatch):
    """Long-CLIP's model-zoo numbers (val2017 first-5, the full Flickr30k) map onto those protocols only."""
    rows = reported_rows()
    zoo = rows[rows["source"] == "longclip-model-zoo"].set_index(["model", "arch", "benchmark"])
    assert zoo.loc[("LongCLIP-B/16", "ViT-B/16 248tok", "coco"), "protocol"] == "val2017"
    assert zoo.loc[("LongCLIP-L/14", "ViT-L/14 248tok", "flickr30k"), "protocol"] == "full"
    b16 = zoo.loc[("CLIP (derived)", "ViT-B/16", "flickr30k")]
    assert (b16["t2i R@1"], b16["i2t R@1"], b16["context_length"]) == (24.7, 44.1, 77)  # 33.1 − 8.4, 47.2 − 3.1
    build_coco_val2017(tmp_path / "coco")
    build_karpathy_coco(tmp_path / "coco")
    use_counts(monkeypatch, "coco", val2017=(3, 15), karpathy_test=(2, 11))
    for protocol in ("val2017", "karpathy-test"):
        assert main([*eval_argv(micro_config, "coco", tmp_path / "coco", tmp_path / "res"), "--protocol", protocol]) == 0
    md = leaderboard([tmp_path / "res"], reported=True)
    sections = {block.split("\n", 1)[0]: block for block in md.split("\n## ")[1:]}
    val2017 = sections["coco · val2017 (longclip-splits, tulip-splits) · 3 images"]
    assert "LongCLIP-L/14 †" in val2017 and "reported: longclip-model-zoo" in val2017 and "hnb-micro" in val2017
    karpathy = sections["coco · karpathy-test (karpathy-splits) · 2 images"]
    assert "LongCLIP" not in karpathy and "hnb-micro" in karpathy  # (CLIP_benchmark's Karpathy numbers are here)
    assert not any(title.startswith("flickr30k") for title in sections)  # not measured here: not shown
