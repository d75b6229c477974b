"""ARO read from a replica of its data root (vg/, coco/, flickr30k/): VG-Relation's macro accuracy without the
symmetric relations, VG-Attribution's over pairs with ≥ 25 items (a pair at exactly 25 kept, one at 24 left out),
the Order tasks from their materialised options (a perturbation equal to the true caption: a tie, counted right),
each checked against the authors' evaluate_scores and notebook on the same scores; MTEB's variants; and each
refusal of the spec one line, exit 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from choice_fixtures import choice_eval, metric, picture, stored, use_item_counts
from conftest import assert_one_line_error

from hnbench.cli import main
from hnbench.data.benchmarks import aro
from hnbench.data.benchmarks.aro import ORDER_FILE, SYMMETRIC_RELATIONS, pre_caption
from hnbench.io import sha256_file

IMAGES = ["2315375.jpg", "2317468.jpg", "2339212.jpg", "2400017.jpg"]
SIZE = (64, 48)
# relation → (items, symmetric in the authors' list); "on"'s third item ties (its captions differ only in case)
RELATIONS = {"on": 3, "sitting on": 2, "near": 2, "next to": 1}
PAIRS = {"white_wooden": 25, "red_blue": 24, "big_small": 3}  # ≥ 25 kept: exactly 25 is in, 24 is out


def _box(k: int) -> dict:
    return {"bbox_x": k % 7, "bbox_y": (3 * k) % 5, "bbox_w": 30 + k % 11, "bbox_h": 24 + k % 9}


def build_vg(root: Path) -> Path:
    for i, name in enumerate(IMAGES):
        picture(root / "vg" / "images" / name, i, SIZE)
    rel, k = [], 0
    for relation, n in RELATIONS.items():
        for j in range(n):
            a, b = f"thing{j}", f"object{k}"
            true, false = f"the {a} is {relation} the {b}", f"the {b} is {relation} the {a}"
            if relation == "on" and j == 2:
                true, false = "the cup is on the table", "The Cup is on the table"
            rel.append({"image_path": IMAGES[k % 4], **_box(k), "relation_name": relation, "true_caption": true,
                        "false_caption": false, "image_id": k})  # an unknown key: ignored
            k += 1
    att = []
    for pair, n in PAIRS.items():
        a0, a1 = pair.split("_")
        for j in range(n):
            att.append({"image_path": IMAGES[(k + j) % 4], **_box(k + j), "attributes": [a0, a1],
                        "true_caption": f"the {a0} plate and the {a1} table {j}",
                        "false_caption": f"the {a1} plate and the {a0} table {j}"})
        k += n
    (root / "vg" / "visual_genome_relation.json").write_text(json.dumps(rel))
    (root / "vg" / "visual_genome_attribution.json").write_text(json.dumps(att))
    return root


KARPATHY = {
    "coco": ("coco_karpathy_test.json", [
        ("val2014/COCO_val2014_000000391895.jpg", ["A man riding a bike down a dirt road.", "Someone (on a bike): rides!"]),
        ("val2014/COCO_val2014_000000522418.jpg", ["A woman cutting a large white sheet cake.", "a cake being cut"]),
        ("val2014/COCO_val2014_000000184613.jpg", ["A child holding a flowered umbrella and petting a yak."]),
    ]),
    "flickr30k": ("flickr30k_test.json", [
        ("flickr30k-images/1007129816.jpg", ["The man with pierced ears is wearing glasses.", "A man in an orange hat"]),
        ("flickr30k-images/1009434119.jpg", ["A black and white dog is running in a grassy garden surrounded by a fence."]),
    ]),
}


def _hard(text: str, k: int) -> str:
    """A stand-in perturbation (the authors' need spaCy / nltk): the words rotated by k."""
    w = text.split(" ")
    return " ".join(w[k % len(w):] + w[:k % len(w)])


def build_order(root: Path, folder: str) -> Path:
    """Karpathy test annotations, images (one COCO image only in val2017/, renamed as 2017 names it) and the
    materialised options; the first case's hard texts all equal its correct caption, the second's hard_text_3 (ties)."""
    name, entries = KARPATHY[folder]
    base = root / folder
    base.mkdir(parents=True, exist_ok=True)
    (base / name).write_text(json.dumps([{"image": img, "caption": caps} for img, caps in entries]))
    lines = []
    for i, (img, caps) in enumerate(entries):
        if folder == "coco" and i == 2:
            picture(base / "val2017" / img.rsplit("_", 1)[1], 10 + i)
        else:
            picture(base / img, 10 + i)
        for c in caps:
            correct = pre_caption(c)
            hard = [_hard(correct, k) for k in (1, 2, 3, 4)]
            if not lines:  # every perturbation left it unchanged (a short caption can): all five tie
                hard = [correct] * 4
            elif len(lines) == 1:
                hard[2] = correct
            lines.append({"image": img, "correct_caption": correct,
                          **{f"hard_text_{k + 1}": h for k, h in enumerate(hard)}})
    (base / ORDER_FILE).write_text("".join(json.dumps(x) + "\n" for x in lines))
    return root


@pytest.fixture
def root(tmp_path, monkeypatch) -> Path:
    relation, attribution = sum(RELATIONS.values()), sum(PAIRS.values())
    use_item_counts(monkeypatch, "aro", vg_relation={"visual_genome_relation.json": relation},
                    vg_relation_mteb={"visual_genome_relation.json": relation},
                    vg_attribution={"visual_genome_attribution.json": attribution},
                    vg_attribution_mteb={"visual_genome_attribution.json": attribution},
                    coco_order={ORDER_FILE: 5}, flickr30k_order={ORDER_FILE: 3})
    base = build_vg(tmp_path / "aro")
    build_order(base, "coco")
    return build_order(base, "flickr30k")


def _scores(result, order: tuple[str, ...]) -> np.ndarray:
    """The stored scores as the authors' N × 1 × K array, options in ``order`` (item order: the file's)."""
    return np.asarray([[[item["s"][r] for r in order]] for item in stored(result).values()])  # the file's order


def test_vg_relation_is_the_notebooks_macro_accuracy_without_the_symmetric_relations(root, micro_config, tmp_path):
    assert {"near", "next to"} <= set(SYMMETRIC_RELATIONS) and not {"on", "sitting on"} & set(SYMMETRIC_RELATIONS)
    result = choice_eval(micro_config, "aro", root, "vg-relation", tmp_path / "out")
    vgr_scores = _scores(result, ("false_caption", "true_caption"))  # "first caption is the perturbed one"
    all_relations = np.array([r["relation_name"] for r in json.loads(
        (root / "vg" / "visual_genome_relation.json").read_text())])
    # VG_Relation.evaluate_scores
    preds = np.argmax(np.squeeze(vgr_scores, axis=1), axis=-1)
    correct_mask = preds == 1
    result_records = [{"Relation": relation, "Accuracy": correct_mask[all_relations == relation].mean(),
                       "Count": (all_relations == relation).sum()} for relation in np.unique(all_relations)]
    # the notebook's macro accuracy
    df = pd.DataFrame(result_records)
    df = df[~df.Relation.isin(SYMMETRIC_RELATIONS)]
    m = result.metrics["choice"]
    assert m["accuracy"] == pytest.approx(100 * df.Accuracy.mean(), abs=1e-9)
    assert m["micro"] == pytest.approx(100 * np.mean(correct_mask), abs=1e-9)  # evaluate_scores' "Accuracy"
    assert (m["n_groups"], m["n_groups_left_out"]) == (2, 2) and m["n_tied"] == 1
    by = m["by"]["relation_name"]
    assert by["near"]["kept"] is False and by["near"]["why"] == "excluded" and by["on"]["n"] == 3
    assert not correct_mask[2]  # the tie: argmax over [false, true] picks false
    mteb = choice_eval(micro_config, "aro", root, "vg-relation-mteb", tmp_path / "out")
    mteb_scores = _scores(mteb, ("true_caption", "false_caption"))
    mteb_right = np.argmax(np.squeeze(mteb_scores, axis=1), axis=-1) == 0
    assert metric(mteb) == pytest.approx(100 * mteb_right.mean(), abs=1e-9) and mteb_right[2]  # ties right in MTEB's
    assert "micro" not in mteb.metrics["choice"]


def test_vg_images_are_cropped_to_the_box_as_the_authors_loader_crops_them(root, micro_config, tmp_path):
    import torch
    from PIL import Image

    from hnbench.models import load_model

    cropped = stored(choice_eval(micro_config, "aro", root, "vg-relation", tmp_path / "a"))
    whole = stored(choice_eval(micro_config, "aro", root, "vg-relation-mteb", tmp_path / "b"))
    rec = json.loads((root / "vg" / "visual_genome_relation.json").read_text())[4]
    enc = load_model("hnb-micro", model_config=str(micro_config))
    image = Image.open(root / "vg" / "images" / rec["image_path"]).convert("RGB")
    image = image.crop((rec["bbox_x"], rec["bbox_y"], rec["bbox_x"] + rec["bbox_w"], rec["bbox_y"] + rec["bbox_h"]))
    with torch.no_grad():
        iv = enc.encode_images(enc.image_transform(image)[None])[0]
        tv = enc.encode_texts(enc.tokenize([rec["true_caption"], rec["false_caption"]]).tokens)
    assert cropped["visual_genome_relation/4"]["m"][0] == pytest.approx((tv @ iv).numpy(), abs=1e-5)
    assert not np.allclose(whole["visual_genome_relation/4"]["m"], cropped["visual_genome_relation/4"]["m"])
    assert whole["visual_genome_relation/4"]["images"] == [f"vg/images/{rec['image_path']}"]
    assert cropped["visual_genome_relation/4"]["images"][0].startswith(f"vg/images/{rec['image_path']}#4,")


def test_vg_attribution_keeps_the_pairs_with_at_least_25_items(root, micro_config, tmp_path):
    result = choice_eval(micro_config, "aro", root, "vg-attribution", tmp_path / "out")
    vga_scores = _scores(result, ("false_caption", "true_caption"))
    all_attributes = np.array([f"{r['attributes'][0]}_{r['attributes'][1]}" for r in json.loads(
        (root / "vg" / "visual_genome_attribution.json").read_text())])
    # VG_Attribution.evaluate_scores and the notebook's mean
    preds = np.argmax(np.squeeze(vga_scores, axis=1), axis=-1)
    correct_mask = preds == 1
    result_records = []
    for attr in np.unique(all_attributes):
        attr_mask = all_attributes == attr
        if attr_mask.sum() < 25:
            continue
        result_records.append({"Attributes": attr, "Accuracy": correct_mask[attr_mask].mean(), "Count": attr_mask.sum()})
    assert [r["Attributes"] for r in result_records] == ["white_wooden"]  # 25 kept; 24 and 3 left out
    m = result.metrics["choice"]
    assert m["accuracy"] == pytest.approx(100 * pd.DataFrame(result_records).Accuracy.mean(), abs=1e-9)
    assert m["n_groups"] == 1 and m["by"]["attributes"]["red_blue"]["why"] == "fewer than 25 items"
    assert result.ci95_method["choice"]["accuracy"] == "bootstrap"
    assert result.ci95_method["choice"]["micro"] == "clopper-pearson"
    mteb = choice_eval(micro_config, "aro", root, "vg-attribution-mteb", tmp_path / "out")
    right = np.argmax(np.squeeze(_scores(mteb, ("true_caption", "false_caption")), axis=1), axis=-1) == 0
    assert metric(mteb) == pytest.approx(100 * right.mean(), abs=1e-9)


@pytest.mark.parametrize("protocol, folder", [("coco-order", "coco"), ("flickr30k-order", "flickr30k")])
def test_order_is_precision_at_1_with_ties_to_the_true_caption_right(root, micro_config, tmp_path, protocol, folder):
    result = choice_eval(micro_config, "aro", root, protocol, tmp_path / "out")
    s = stored(result)
    rows = [json.loads(x) for x in (root / folder / ORDER_FILE).read_text().splitlines()]
    seen: dict[str, int] = {}
    scores = []
    for r in rows:
        k = seen[r["image"]] = seen.get(r["image"], -1) + 1
        scores.append([[s[f"{r['image']}#{k}"]["s"][role] for role in aro.ORDER_ROLES]])
    # COCO_Order.evaluate_scores: Precision@1
    preds = np.argmax(np.squeeze(np.asarray(scores), axis=1), axis=-1)
    correct_mask = preds == 0
    assert metric(result) == pytest.approx(100 * np.mean(correct_mask), abs=1e-9)
    assert correct_mask[0] and result.metrics["choice"]["n_tied"] >= 1  # a tie with the true caption: right
    files = result.dataset["meta"]["files"]
    assert files[0]["file"] == ORDER_FILE and files[0]["sha256"] == sha256_file(root / folder / ORDER_FILE)
    assert files[0]["expected_sha256"] is None and files[0]["verified"] is None  # not pinned yet: recorded


def test_a_pinned_order_file_is_verified_and_another_copy_refused(root, micro_config, tmp_path, monkeypatch, capsys):
    digest = sha256_file(root / "coco" / ORDER_FILE)
    monkeypatch.setitem(aro.ORDER_SHA256, "coco", digest)
    result = choice_eval(micro_config, "aro", root, "coco-order", tmp_path / "out")
    assert result.dataset["meta"]["files"][0]["verified"] is True
    monkeypatch.setitem(aro.ORDER_SHA256, "coco", "0" * 64)
    assert _run(micro_config, root, "coco-order", tmp_path / "out2") == 2
    assert_one_line_error(capsys.readouterr().err, "not the pinned", "another benchmark")


def test_pre_caption_is_the_authors():
    assert pre_caption("Someone (on a bike): rides!") == "someone on a bike rides"
    assert pre_caption("A  dog.\n") == "a dog"
    assert pre_caption(" ".join(f"w{i}" for i in range(40))) == " ".join(f"w{i}" for i in range(30))


def _run(micro_config, root, protocol, out, *extra) -> int:
    return main(["-q", "eval", "--task", "choice", "--dataset", "aro", "--data-root", str(root), "--protocol", protocol,
                 "--model", "hnb-micro", "--model-config", str(micro_config), "--output", str(out), "--num-workers",
                 "0", "--no-ci", *extra])


def _edit_vg(root: Path, name: str, k: int, change) -> None:
    path = root / "vg" / name
    data = json.loads(path.read_text())
    change(data, k)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("case, protocol, words", [
    ("count", "vg-relation", ["7 items, published 8"]),
    ("empty bbox", "vg-relation", ["width 0", "--skip-invalid"]),
    ("bbox outside", "vg-relation", ["outside the 64×48 image"]),
    ("missing image", "vg-relation", ["not found at"]),
    ("true equals false", "vg-relation", ["true_caption equals false_caption"]),
    ("attributes not a pair", "vg-attribution", ["is not a list of two attributes"]),
    ("order count", "coco-order", ["4 items, published 5"]),
    ("order lacks a hard text", "coco-order", ["'hard_text_4'", "4 hard texts"]),
    ("karpathy val split", "coco-order", ["coco_karpathy_val.json is the Karpathy val split"]),
    ("image of another split", "coco-order", ["is not in coco_karpathy_test.json"]),
    ("no options file", "flickr30k-order", ["never regenerates"]),
])
def test_an_aro_release_the_spec_refuses_is_one_line(root, micro_config, tmp_path, capsys, case, protocol, words):
    rel, att = "visual_genome_relation.json", "visual_genome_attribution.json"
    options = root / "coco" / ORDER_FILE
    if case == "count":
        _edit_vg(root, rel, 0, lambda d, k: d.pop(k))
    elif case == "empty bbox":
        _edit_vg(root, rel, 1, lambda d, k: d[k].update(bbox_w=0))
    elif case == "bbox outside":
        _edit_vg(root, rel, 1, lambda d, k: d[k].update(bbox_x=50, bbox_w=30))
    elif case == "missing image":
        (root / "vg" / "images" / IMAGES[3]).unlink()
    elif case == "true equals false":
        _edit_vg(root, rel, 1, lambda d, k: d[k].update(false_caption=d[k]["true_caption"]))
    elif case == "attributes not a pair":
        _edit_vg(root, att, 3, lambda d, k: d[k].update(attributes=["white"]))
    elif case == "order count":
        options.write_text("".join(options.read_text().splitlines(keepends=True)[:4]))
    elif case == "order lacks a hard text":
        lines = [json.loads(x) for x in options.read_text().splitlines()]
        lines[1].pop("hard_text_4")
        options.write_text("".join(json.dumps(x) + "\n" for x in lines))
    elif case == "karpathy val split":
        shutil.move(root / "coco" / "coco_karpathy_test.json", root / "coco" / "coco_karpathy_val.json")
    elif case == "image of another split":
        lines = [json.loads(x) for x in options.read_text().splitlines()]
        lines[1]["image"] = "val2014/COCO_val2014_000000000999.jpg"
        options.write_text("".join(json.dumps(x) + "\n" for x in lines))
    else:
        (root / "flickr30k" / ORDER_FILE).unlink()
    assert _run(micro_config, root, protocol, tmp_path / "out") == 2
    assert_one_line_error(capsys.readouterr().err, *words)
