"""IIW (ImageInWords) — 612 (sentence re-join), 612-raw and FLAIR's fine-grained captions, with the release's
three image-key conventions, on a replica of google/imageinwords' datasets/ and FLAIR's JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from benchmark_fixtures import eval_argv, jpeg, use_counts
from conftest import assert_one_line_error, snapshot

from hnbench.cli import main
from hnbench.data.benchmarks import load
from hnbench.errors import DataError

# one row per file, each with its own key convention (as the release): DOCCI_Test `image` without a suffix,
# IIW-400 `image/key` without a suffix, DCI_Test `image` with .jpg
ROWS = {
    "DOCCI_Test": ({"DOCCI": "A white toilet.", "IIW": "A clean, modern white toilet.\nThe lid is closed</s>",
                    "image": "test_00731", "metrics/Hallucination": "Neutral"}, "docci", "test_00731.jpg"),
    "IIW-400": ({"IIW": "A close-up outdoor shot shows a thistle. Bees sit on it.", "IIW-P5B": "A bee.",
                 "image/key": "aar_test_04600", "objects": []}, "docci_aar", "aar_test_04600.jpg"),
    "DCI_Test": ({"IIW": "A residential street.\n\nCars are parked.", "ex_id": "113029-data.json",
                  "image": "sa_1545038.jpg"}, "dci", "sa_1545038.jpg"),
}


def build_iiw(root: Path, lotlip_layout: bool = True) -> Path:
    """google/imageinwords' ``datasets/<name>/data.jsonl`` (an extra README.md beside each) and the images in LoTLIP's
    docci/, docci_aar/, dci/ folders — or, with ``lotlip_layout=False``, where the releases unpack them."""
    elsewhere = {"docci": "docci/images", "docci_aar": "docci_aar/images", "dci": "densely_captioned_images/photos"}
    for k, (name, (row, folder, image)) in enumerate(ROWS.items()):
        (root / "datasets" / name).mkdir(parents=True, exist_ok=True)
        (root / "datasets" / name / "data.jsonl").write_text(json.dumps(row) + "\n")
        (root / "datasets" / name / "README.md").write_text(f"# {name}\n")
        jpeg(root / (folder if lotlip_layout else elsewhere[folder]) / image, k)
    return root


def build_flair_fine_grained(root: Path) -> Path:
    """FLAIR's datasets/imageinwords/test_annotations.json: sentence captions, several per image."""
    sentences = {"docci/test_00731.jpg": ["A clean, modern white toilet", "The lid is closed"],
                 "docci_aar/aar_test_04600.jpg": ["A close-up outdoor shot shows a thistle", "Bees sit on it",
                                                  "The background is blurred"],
                 "dci/sa_1545038.jpg": ["A residential street"]}
    anns, cap = [], 0
    for image_id, (image, caps) in enumerate(sentences.items()):
        for c in caps:
            anns.append({"image_id": image_id, "image": image, "caption": c, "caption_id": cap})
            cap += 1
    (root / "test_annotations.json").write_text(json.dumps({"annotations": anns}))
    return root


def test_iiw_612_keeps_lotlips_order_completes_image_keys_and_rejoins_sentences(tmp_path):
    build_iiw(tmp_path)
    ds = load("iiw", data_root=tmp_path, expected_counts={"n_images": 3, "n_captions": 3})
    assert ds.protocol == "612" and ds.image_ids == ["test_00731", "aar_test_04600", "sa_1545038"]  # LoTLIP's order
    # keys without .jpg get it (DOCCI_Test's `image`, IIW-400's `image/key`); the LoTLIP folder of each file
    assert [str(Path(p).relative_to(tmp_path)) for p in ds.images.paths] == [
        "docci/test_00731.jpg", "docci_aar/aar_test_04600.jpg", "dci/sa_1545038.jpg"]
    assert ds.captions == ["A clean, modern white toilet. The lid is closed",
                           "A close-up outdoor shot shows a thistle. Bees sit on it", "A residential street. Cars are parked"]
    assert ds.meta["subsets"] == {"DOCCI_Test": 1, "IIW-400": 1, "DCI_Test": 1}
    raw = load("iiw", data_root=tmp_path, protocol="612-raw", expected_counts={"n_images": 3, "n_captions": 3})
    assert raw.captions == [row["IIW"] for row, _, _ in ROWS.values()]


def test_iiw_images_found_where_the_releases_unpack(tmp_path):
    build_iiw(tmp_path, lotlip_layout=False)
    ds = load("iiw", data_root=tmp_path, expected_counts={"n_images": 3, "n_captions": 3})
    assert [str(Path(p).relative_to(tmp_path).parent) for p in ds.images.paths] == [
        "docci/images", "docci_aar/images", "densely_captioned_images/photos"]


def test_iiw_fine_grained_has_many_captions_per_image(tmp_path):
    build_iiw(tmp_path)
    build_flair_fine_grained(tmp_path)
    ds = load("iiw", data_root=tmp_path, protocol="fine-grained", expected_counts={"n_images": 3, "n_captions": 6})
    assert ds.image_ids == ["test_00731", "aar_test_04600", "sa_1545038"]
    assert [len(c) for c in ds.image_captions()] == [2, 3, 1] and ds.captions[2] == "A close-up outdoor shot shows a thistle"
    assert ds.meta["captions_per_image"] == {"1": 1, "2": 1, "3": 1}
    assert ds.meta["protocol_families"] == ["flair-splits"]


def test_iiw_wrong_counts_and_missing_files_are_refused(micro_config, tmp_path, capsys, monkeypatch):
    build_iiw(tmp_path / "iiw")
    with pytest.raises(DataError, match=r"loaded 3 images / 3 captions, expected 612 / 612"):
        load("iiw", data_root=tmp_path / "iiw")
    with pytest.raises(DataError, match=r"iiw/fine-grained needs test_annotations.json.*ExplainableML/flair"):
        load("iiw", data_root=tmp_path / "iiw", protocol="fine-grained")
    use_counts(monkeypatch, "iiw", **{"612": (3, 3)})
    argv = eval_argv(micro_config, "iiw", tmp_path / "iiw", tmp_path / "out")
    (tmp_path / "iiw" / "docci_aar" / "aar_test_04600.jpg").unlink()
    before = snapshot(tmp_path)
    assert main(argv) == 2
    assert_one_line_error(capsys.readouterr().err, "iiw/612: 1 of 3 images not found", "aar_test_04600.jpg",
                          "docci_images_aar.tar.gz")
    assert snapshot(tmp_path) == before
    (tmp_path / "iiw" / "datasets" / "IIW-400" / "data.jsonl").unlink()
    assert main(argv) == 2
    assert_one_line_error(capsys.readouterr().err, "iiw/612 needs IIW-400/data.jsonl", "google/imageinwords")
    build_iiw(tmp_path / "iiw")
    assert main(argv) == 0
    res = json.loads(next((tmp_path / "out").glob("*.json")).read_text())
    assert (res["dataset"]["protocol"], res["dataset"]["n_images"], res["metrics"]["t2i"]["n_queries"]) == ("612", 3, 3)


def test_iiw_malformed_row_is_named(tmp_path):
    build_iiw(tmp_path)
    path = tmp_path / "datasets" / "IIW-400" / "data.jsonl"
    path.write_text(path.read_text() + json.dumps({"image/key": "aar_test_04601"}) + "\n")  # no IIW description
    with pytest.raises(DataError, match=r"IIW-400/data.jsonl:2: malformed annotation line: no 'image' \(or "
                                        r"'image/key'\) and 'IIW' strings \(pass --skip-invalid"):
        load("iiw", data_root=tmp_path, allow_count_mismatch=True)
    ds = load("iiw", data_root=tmp_path, skip_invalid=True, expected_counts={"n_images": 3, "n_captions": 3})
    assert ds.skipped == {"malformed annotation": [f"{path}:2"]} and ds.meta["subsets"]["IIW-400"] == 1


def test_download_plans_name_each_release(tmp_path):
    from hnbench.data.benchmarks import download, get_benchmark

    def steps(name: str) -> dict:
        return {s.resource.filename: s for s in download.plan(get_benchmark(name), tmp_path)}

    coco = steps("coco")
    assert coco["annotations_trainval2017.zip"].source == ("http://images.cocodataset.org/annotations/"
                                                           "annotations_trainval2017.zip")
    assert coco["caption_datasets.zip"].resource.optional and coco["val2014.zip"].resource.optional
    flickr = steps("flickr30k")
    assert flickr["flickr30k.tar.gz"].action == "manual" and "DenotationGraph" in flickr["flickr30k.tar.gz"].source
    sv = steps("sharegpt4v")
    assert sv["share-captioner_coco_lcs_sam_1246k_1107.json"].source.startswith(
        "https://huggingface.co/datasets/Lin-Chen/ShareGPT4V") and sv["sa_000000.tar"].action == "manual"
    iiw = steps("iiw")
    assert iiw["test_annotations.json"].resource.sha256.startswith("e8d302f5")
    assert "google/imageinwords/archive/96d393777e25" in iiw["96d393777e2528becd8a7afa1389eb4b65084793.zip"].source
    assert iiw["sa_000138.tar"].action == "manual"
