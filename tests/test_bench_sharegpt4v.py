"""ShareGPT4V-1k / -10k — the head of the caption JSON, three caption rules, SA-1B images found by name,
missing images named, index ground truth, and the shipped pairs-list check, on a replica."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import replace
from pathlib import Path

import pytest
from benchmark_fixtures import eval_argv, jpeg
from conftest import assert_one_line_error, snapshot

from hnbench.cli import main
from hnbench.data.benchmarks import BENCHMARKS, get_benchmark, load
from hnbench.data.benchmarks.pairs import write_pairs_list
from hnbench.data.benchmarks.readers_suite import json_list_head
from hnbench.data.benchmarks.sharegpt4v import FULL_JSON
from hnbench.errors import DataError
from hnbench.registry import BENCHMARK_SPECS

CAPTIONS = ["The image shows a city street.\nA red bus waits at the light.</s>",
            "A wooden bench in a park. Leaves lie on the ground",
            "Two dogs run on a beach.\n\nThe sky is clear.",
            "A kitchen with a steel oven."]
# where SA-1B images end up: ShareGPT4V's sam/images/, an unpacked tar folder, a tar folder with images/
FOLDERS = ["sam/images", "sa_000000", "sa_000001/images", "flat"]


def record(i: int, image: str | None = None) -> dict:
    name = image or f"sa_{545504 + i}.jpg"
    return {"id": Path(name).stem, "image": f"sam/images/{name}",
            "conversations": [{"from": "human", "value": "<image>\nWhat do you see happening in this image?"},
                              {"from": "gpt", "value": CAPTIONS[i % len(CAPTIONS)]}]}


def build_sharegpt4v(root: Path, n: int = 4, images: dict[int, str] | None = None) -> Path:
    """The caption JSON in its real shape (indented, as released) with ``n`` records, then one malformed record
    that a head-of-file reader never parses; each image in another folder layout."""
    recs = [record(i, (images or {}).get(i)) for i in range(n)]
    text = json.dumps(recs, indent=4)
    (root / FULL_JSON).parent.mkdir(parents=True, exist_ok=True)
    (root / FULL_JSON).write_text(text[:-2] + ',\n    {"image": 5, "conversations": "not read"}\n]')
    for i, rec in enumerate(recs):
        jpeg(root / FOLDERS[i % len(FOLDERS)] / Path(rec["image"]).name, i)
    return root


@pytest.fixture
def small(monkeypatch):
    """ShareGPT4V's spec with every protocol reading the first ``n`` records (and expecting n pairs)."""
    def apply(n: int = 4, pairs_list: str | None = None) -> None:
        spec = get_benchmark("sharegpt4v")
        protos = tuple(replace(p, n_images=n, n_captions=n, options={**p.options, "n": n},
                               pairs_list=pairs_list or p.pairs_list) for p in spec.protocols)
        monkeypatch.setitem(BENCHMARKS, "sharegpt4v", replace(spec, protocols=protos))
    return apply


def test_sharegpt4v_1k_caption_rules_and_images_found_anywhere_by_name(tmp_path, small):
    build_sharegpt4v(tmp_path)
    real = BENCHMARK_SPECS.get("sharegpt4v")
    small()
    ds = load("sharegpt4v", data_root=tmp_path)
    assert ds.protocol == "1k" and ds.image_ids == [f"sa_{545504 + i}" for i in range(4)]
    assert ds.captions[0] == "The image shows a city street. A red bus waits at the light.</s>"  # \n → space only
    assert ds.captions[2] == "Two dogs run on a beach.  The sky is clear."
    assert [str(Path(p).relative_to(tmp_path).parent) for p in ds.images.paths] == FOLDERS  # found by file name
    assert ds.meta["records_read"] == 4 and ds.meta["repeated_images"] == {}
    assert ds.meta["pairs_check"]["status"] == "unverified (no shipped list)"
    raw = load("sharegpt4v", data_root=tmp_path, protocol="1k-raw")
    assert raw.captions == CAPTIONS  # TULIP: as stored
    sent = load("sharegpt4v", data_root=tmp_path, protocol="1k-sentences")
    assert sent.captions[0] == "The image shows a city street. A red bus waits at the light"  # LoTLIP / FLAIR
    assert sent.captions[2] == "Two dogs run on a beach. The sky is clear"
    assert real.protocol("10k-sentences").options["n"] == 10000  # the real spec: replaced for the test, not changed


def test_sharegpt4v_malformed_records_and_wrong_counts_are_refused(tmp_path):
    build_sharegpt4v(tmp_path, n=3)
    # the real spec reads 1,000 records: it reaches the replica's malformed 4th one, named by index
    with pytest.raises(DataError, match=r"malformed release file: expected record 3 an object with an 'image'"):
        load("sharegpt4v", data_root=tmp_path)
    (tmp_path / FULL_JSON).write_text(json.dumps([record(i) for i in range(3)]))
    with pytest.raises(DataError, match=r"loaded 3 images / 3 captions, expected 1000 / 1000"):
        load("sharegpt4v", data_root=tmp_path)
    (tmp_path / FULL_JSON).write_text('[{"image": "sam/images/sa_1.jpg", "conversations": [')
    with pytest.raises(DataError, match=r"not readable as a JSON list"):
        load("sharegpt4v", data_root=tmp_path)


def test_sharegpt4v_json_head_equals_json_load(tmp_path):
    path = tmp_path / "x.json"
    items = [{"a": "x" * k, "b": [k, {"c": "]},["}]} for k in range(30)]
    path.write_text("\ufeff \n[\n" + ",\n  ".join(json.dumps(x) for x in items) + "\n]\n")
    for n in (0, 1, 7, 30, 31):
        for chunk in (3, 64, 1 << 20):  # records cut at every point of a block
            assert json_list_head(path, n, chunk=chunk) == items[:n]


def test_sharegpt4v_missing_images_are_named_with_their_count(micro_config, tmp_path, small, capsys):
    build_sharegpt4v(tmp_path / "sv")
    small()
    for i in (1, 3):
        next((tmp_path / "sv").rglob(f"sa_{545504 + i}.jpg")).unlink()
    argv = eval_argv(micro_config, "sharegpt4v", tmp_path / "sv", tmp_path / "out")
    before = snapshot(tmp_path)
    assert main(argv) == 2
    assert_one_line_error(capsys.readouterr().err, "sharegpt4v/1k: 2 of 4 images not found",
                          "sa_545505.jpg, sa_545507.jpg", "SA-1B", "--skip-invalid")
    assert snapshot(tmp_path) == before
    assert main([*argv, "--skip-invalid"]) == 2  # a smaller set is another benchmark
    assert_one_line_error(capsys.readouterr().err, "loaded 2 images / 2 captions after skipping 2 items (missing image)",
                          "--allow-count-mismatch")
    assert main([*argv, "--skip-invalid", "--allow-count-mismatch"]) == 0
    res = json.loads(next((tmp_path / "out").glob("*.json")).read_text())
    meta = res["dataset"]["meta"]
    assert meta["missing_images"] == ["sa_545505.jpg", "sa_545507.jpg"] and res["dataset"]["n_images"] == 2
    assert meta["count_check"]["status"] == "mismatch allowed" and res["dataset"]["skipped"] == {"missing image": 2}
    info = ["-q", "datasets", "info", "sharegpt4v", "--data-root", str(tmp_path / "sv"), "--skip-invalid",
            "--allow-count-mismatch"]
    assert main(info) == 0 and "missing images (2): sa_545505.jpg, sa_545507.jpg" in capsys.readouterr().out


def test_sharegpt4v_repeated_image_keeps_index_ground_truth(tmp_path, small, caplog):
    build_sharegpt4v(tmp_path, images={2: "sa_545504.jpg"})  # records 0 and 2 share one photo
    small()
    with caplog.at_level(logging.WARNING):
        ds = load("sharegpt4v", data_root=tmp_path, protocol="1k-raw")
    assert ds.image_ids == ["sa_545504@0", "sa_545505", "sa_545504@2", "sa_545507"]  # 4 gallery items, not 3
    assert ds.images.paths[0] == ds.images.paths[2] and list(ds.caption_image) == [0, 1, 2, 3]  # the diagonal
    assert ds.meta["repeated_images"] == {"sa_545504.jpg": [0, 2]} and "appear in more than one record" in caplog.text


def test_sharegpt4v_pairs_list_says_which_pairs_differ(micro_config, tmp_path, small, capsys):
    build_sharegpt4v(tmp_path / "sv")
    small()
    shipped = write_pairs_list(load("sharegpt4v", data_root=tmp_path / "sv"), tmp_path / "lists" / "sv-1k.tsv")
    assert shipped.read_text().splitlines()[:2] == [
        "image\tcaption_sha256", "sa_545504.jpg\t" + hashlib.sha256(
            b"The image shows a city street. A red bus waits at the light.</s>").hexdigest()]
    small(pairs_list=str(shipped))
    assert load("sharegpt4v", data_root=tmp_path / "sv").meta["pairs_check"]["status"] == "ok"
    path = tmp_path / "sv" / FULL_JSON  # another caption file: record 1's caption edited, record 3's image swapped
    path.write_text(path.read_text().replace("A wooden bench", "A metal bench").replace("sa_545507", "sa_545504"))
    argv = eval_argv(micro_config, "sharegpt4v", tmp_path / "sv", tmp_path / "out")
    assert main(argv) == 2
    assert_one_line_error(capsys.readouterr().err, "2 of 4 pairs differ from the shipped list sv-1k.tsv",
                          "#1 sa_545505.jpg: caption differs", "#3 image sa_545504.jpg, the list has sa_545507.jpg")
    ds = load("sharegpt4v", data_root=tmp_path / "sv", allow_count_mismatch=True)
    check = ds.meta["pairs_check"]
    assert (check["status"], check["n_differing"], check["n_listed"]) == ("mismatch allowed", 2, 4)
    assert main(["-q", "datasets", "info", "sharegpt4v", "--data-root", str(tmp_path / "sv"), "--allow-count-mismatch"]) == 0
    assert "pairs check: mismatch allowed; 2 of 4 pairs differ, e.g. #1 sa_545505.jpg: caption differs" in (
        capsys.readouterr().out)
