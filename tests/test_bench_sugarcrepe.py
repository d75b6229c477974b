"""SugarCrepe and SugarCrepe++ read from replicas of their released layouts (``data/<subset>.json`` + COCO val2017
images), every protocol's numbers checked against the official scripts' rules written out here on the same scores,
and each refusal of the spec one line, exit 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from choice_fixtures import choice_eval, metric, picture, stored, use_item_counts
from conftest import assert_one_line_error

from hnbench.cli import main
from hnbench.data.benchmarks.sugarcrepe import SUGARCREPE_FILES, SUGARCREPE_PP_FILES

SUBSETS = list(SUGARCREPE_FILES)
PP_SUBSETS = list(SUGARCREPE_PP_FILES)
SWAP_OBJ_KEYS = ["106", "107", "109"]  # the release's swap_obj has no "108": records are iterated, never range(n)
TIE = ("A red cup on a wooden table.", "a red cup on a wooden table.")  # one token sequence: the same embedding


def _name(i: int) -> str:
    return f"{397133 + i:012d}.jpg"


def build_sugarcrepe(root: Path) -> Path:
    """Seven subset files of 3 records each (swap_obj keyed 106, 107, 109), images shared across records, and one
    add_att record whose caption and negative differ only in case (they tie: one token sequence)."""
    for i in range(5):
        picture(root / "val2017" / _name(i), i)
    for s, subset in enumerate(SUBSETS):
        keys = SWAP_OBJ_KEYS if subset == "swap_obj" else ["0", "1", "2"]
        data = {k: {"filename": _name((s + j) % 5), "caption": f"a {subset} photo {j} of a dog on a sofa",
                    "negative_caption": f"a {subset} photo {j} of a sofa on a dog"} for j, k in enumerate(keys)}
        if subset == "add_att":
            data["1"].update(caption=TIE[0], negative_caption=TIE[1])
        (root / "data").mkdir(parents=True, exist_ok=True)
        (root / "data" / f"{subset}.json").write_text(json.dumps(data))
    return root


def build_sugarcrepe_pp(root: Path) -> Path:
    """Five subset lists of 3 records, images flat in images/, and a swap_obj record whose caption equals its
    negative (kept, as released: wrong on ITT whatever the model)."""
    for i in range(4):
        picture(root / "images" / _name(i), i)
    for s, subset in enumerate(PP_SUBSETS):
        rows = [{"id": j, "filename": _name((s + j) % 4), "caption": f"{subset} {j}: a cat on a bed",
                 "caption2": f"{subset} {j}: on the bed lies a cat", "negative_caption": f"{subset} {j}: a bed on a cat"}
                for j in range(3)]
        if subset == "swap_obj":
            rows[2]["negative_caption"] = rows[2]["caption"]
        (root / "data").mkdir(parents=True, exist_ok=True)
        (root / "data" / f"{subset}.json").write_text(json.dumps(rows))
    return root


@pytest.fixture
def sc_root(tmp_path, monkeypatch) -> Path:
    use_item_counts(monkeypatch, "sugarcrepe", **{s: {s: 3} for s in SUBSETS}, mteb={s: 3 for s in SUBSETS})
    return build_sugarcrepe(tmp_path / "sc")


@pytest.fixture
def pp_root(tmp_path, monkeypatch) -> Path:
    use_item_counts(monkeypatch, "sugarcrepe-pp", **{s: {s: 3} for s in PP_SUBSETS})
    return build_sugarcrepe_pp(tmp_path / "scpp")


def official_sugarcrepe(root: Path, scores: dict[str, dict]) -> dict[str, float]:
    """main_eval.py's evaluate(): per subset, iterate the file's records, 1 if pos_score > neg_score else 0."""
    metrics = {}
    for c in SUBSETS:
        data_dict = json.loads((root / "data" / f"{c}.json").read_text())
        correct_cnt = 0
        for i, _data in data_dict.items():
            s = scores[f"{c}/{i}"]["s"]
            correct_cnt += 1 if s["caption"] > s["negative_caption"] else 0
        metrics[c] = correct_cnt / len(data_dict)
    return metrics


def mteb_sugarcrepe(root: Path, scores: dict[str, dict]) -> float:
    """MTEB's text_acc on the pooled set: argmax over [caption, negative_caption] == 0 (numpy: first of ties)."""
    right = []
    for c in SUBSETS:
        for i in json.loads((root / "data" / f"{c}.json").read_text()):
            s = scores[f"{c}/{i}"]["s"]
            right.append(int(np.argmax([s["caption"], s["negative_caption"]])) == 0)
    return float(np.mean(right))


def test_every_sugarcrepe_protocol_equals_main_evals_rule_and_mtebs_pooled_argmax(sc_root, micro_config, tmp_path):
    results = {s: choice_eval(micro_config, "sugarcrepe", sc_root, s.replace("_", "-"), tmp_path / "out") for s in SUBSETS}
    scores = {k: v for r in results.values() for k, v in stored(r).items()}
    official = official_sugarcrepe(sc_root, scores)
    for subset, result in results.items():
        assert metric(result) == pytest.approx(100 * official[subset], abs=1e-9), subset
        assert result.metrics["choice"]["n_queries"] == 3 and result.dataset["meta"]["count_check"]["status"] == "ok"
    swap_obj = stored(results["swap_obj"])
    assert sorted(swap_obj) == [f"swap_obj/{k}" for k in SWAP_OBJ_KEYS]  # the missing "108" is no error
    tie = scores["add_att/1"]["s"]
    assert tie["caption"] == tie["negative_caption"]  # one token sequence, one embedding: an exact tie ...
    assert results["add_att"].metrics["choice"]["n_tied"] == 1
    mteb = choice_eval(micro_config, "sugarcrepe", sc_root, "mteb", tmp_path / "out")
    assert metric(mteb) == pytest.approx(100 * mteb_sugarcrepe(sc_root, stored(mteb)), abs=1e-9)
    by = mteb.metrics["choice"]["by"]["subset"]
    assert by["add_att"]["accuracy"] == pytest.approx(100 * official["add_att"] + 100 / 3)  # ... wrong, right in mteb
    assert {k: v["n"] for k, v in by.items()} == {s: 3 for s in SUBSETS}
    assert results["add_att"].settings["scoring"]["tie_rule"] == "strict_gt"
    assert mteb.settings["scoring"]["tie_rule"] == "argmax_first"


def test_sugarcrepe_scores_are_the_cosines_of_the_images_and_captions_encoded_alone(sc_root, micro_config, tmp_path):
    """The stored score of a record is the cosine of its image and caption embedded one at a time, as main_eval.py
    embeds them (each distinct image and text is encoded once: swap_obj's three records show two images)."""
    import torch

    from hnbench.models import load_model

    result = choice_eval(micro_config, "sugarcrepe", sc_root, "swap-obj", tmp_path / "out")
    assert result.dataset["n_images"] == 3 and result.dataset["n_texts"] == 6
    enc = load_model("hnb-micro", model_config=str(micro_config))
    from PIL import Image

    data = json.loads((sc_root / "data" / "swap_obj.json").read_text())
    for key, rec in data.items():
        with torch.no_grad():
            image = enc.encode_images(enc.image_transform(Image.open(sc_root / "val2017" / rec["filename"]))[None])
            texts = enc.encode_texts(enc.tokenize([rec["caption"], rec["negative_caption"]]).tokens)
        direct = (texts @ image[0]).numpy()
        assert stored(result)[f"swap_obj/{key}"]["m"][0] == pytest.approx(direct, abs=1e-5)


def official_sugarcrepe_pp(root: Path, scores: dict[str, dict]) -> dict[str, dict[str, float]]:
    """test_Variants_CLIP.py's loop: ITT, Image-P1-Neg, Image-P2-Neg and TOT per file, strict >."""
    out = {}
    for fname in PP_SUBSETS:
        total = correct_full = correct_img_p1 = correct_img_p2 = correct_text = 0
        for line in json.loads((root / "data" / f"{fname}.json").read_text()):
            s, tt = scores[f"{fname}/{line['id']}"]["s"], scores[f"{fname}/{line['id']}"]["tt"]
            cos_p1, cos_p2, cos_neg = s["caption"], s["caption2"], s["negative_caption"]
            cos_p1p2, cos_p1_neg, cos_p2_neg = tt
            total += 1
            correct_full += cos_p1 > cos_neg and cos_p2 > cos_neg
            correct_img_p1 += cos_p1 > cos_neg
            correct_img_p2 += cos_p2 > cos_neg
            correct_text += cos_p1p2 > cos_p1_neg and cos_p1p2 > cos_p2_neg
        out[fname] = {"ITT": correct_full / total, "P1-Neg": correct_img_p1 / total, "P2-Neg": correct_img_p2 / total,
                      "TOT": correct_text / total}
    return out


def test_every_sugarcrepe_pp_protocol_equals_the_official_itt_and_tot(pp_root, micro_config, tmp_path):
    results = {s: choice_eval(micro_config, "sugarcrepe-pp", pp_root, s.replace("_", "-"), tmp_path / "out")
               for s in PP_SUBSETS}
    scores = {k: v for r in results.values() for k, v in stored(r).items()}
    official = official_sugarcrepe_pp(pp_root, scores)
    for subset, result in results.items():
        m = result.metrics["choice"]
        for name in ("ITT", "TOT", "P1-Neg", "P2-Neg"):
            assert m[name] == pytest.approx(100 * official[subset][name], abs=1e-9), (subset, name)
        assert m["accuracy"] == m["ITT"] and m["headline"] == "ITT"
    same = scores["swap_obj/2"]
    assert same["s"]["caption"] == same["s"]["negative_caption"]  # the text kept, stored once: it ties with itself
    swap = results["swap_obj"]
    assert swap.dataset["meta"]["caption_equals_negative"] == ["swap_obj/2"]
    frame_right = {k: v for k, v in stored(swap).items()}
    assert frame_right["swap_obj/2"]["tt"][0] == pytest.approx(frame_right["swap_obj/2"]["tt"][2])  # s(P1,P2) = s(P2,N)
    # TOT's text-only scores are cosines of the texts: s(P1, N) of a caption equal to its negative is 1
    assert frame_right["swap_obj/2"]["tt"][1] == pytest.approx(1.0, abs=1e-5)


def _run(micro_config, dataset, root, protocol, out, *extra) -> int:
    return main(["-q", "eval", "--task", "choice", "--dataset", dataset, "--data-root", str(root), "--protocol",
                 protocol, "--model", "hnb-micro", "--model-config", str(micro_config), "--output", str(out),
                 "--num-workers", "0", "--no-ci", *extra])


def _edit(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("case, words", [
    ("missing file", ["swap_obj.json", "not found"]),
    ("missing key", ["negative_caption", "--skip-invalid"]),
    ("empty text", ["empty 'caption'"]),
    ("caption equals negative", ["caption equals negative_caption"]),
    ("bad filename", ["COCO 2017 val name"]),
    ("missing image", ["not found at"]),
    ("coco 2014 folder", ["COCO 2014", "val2017"]),
    ("count", ["published 3", "--allow-count-mismatch"]),
])
def test_a_sugarcrepe_release_the_spec_refuses_is_one_line_before_any_model_loads(sc_root, micro_config, tmp_path,
                                                                                  capsys, case, words):
    data, protocol = sc_root / "data", "swap-obj"
    if case == "missing file":
        (data / "swap_obj.json").unlink()
    elif case == "missing key":
        _edit(data / "swap_obj.json", lambda d: d["107"].pop("negative_caption"))
    elif case == "empty text":
        _edit(data / "swap_obj.json", lambda d: d["107"].update(caption="   "))
    elif case == "caption equals negative":
        _edit(data / "swap_obj.json", lambda d: d["107"].update(negative_caption=d["107"]["caption"]))
    elif case == "bad filename":
        _edit(data / "swap_obj.json", lambda d: d["107"].update(filename="COCO_val2014_000000397133.jpg"))
    elif case == "missing image":
        (sc_root / "val2017" / json.loads((data / "swap_obj.json").read_text())["107"]["filename"]).unlink()
    elif case == "coco 2014 folder":
        shutil.move(sc_root / "val2017", sc_root / "val2014")
    else:
        _edit(data / "swap_obj.json", lambda d: d.pop("106"))
    assert _run(micro_config, "sugarcrepe", sc_root, protocol, tmp_path / "out") == 2
    assert_one_line_error(capsys.readouterr().err, *words)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_smaller_sugarcrepe_runs_with_allow_count_mismatch_and_says_so(sc_root, micro_config, tmp_path):
    _edit(sc_root / "data" / "swap_obj.json", lambda d: d["107"].pop("negative_caption"))
    result = choice_eval(micro_config, "sugarcrepe", sc_root, "swap-obj", skip_invalid=True, allow_count_mismatch=True)
    check = result.dataset["meta"]["count_check"]
    assert check["status"] == "mismatch allowed" and check["loaded"] == {"swap_obj": 2} and check["n_skipped"] == 1
    assert result.dataset["skipped"] == {"missing field": 1}


@pytest.mark.parametrize("case, words", [
    ("count", ["published 3"]),
    ("missing key", ["caption2"]),
    ("id not position", ["id 5 is not its position 1"]),
    ("missing image", ["not found at"]),
])
def test_a_sugarcrepe_pp_release_the_spec_refuses_is_one_line(pp_root, micro_config, tmp_path, capsys, case, words):
    path = pp_root / "data" / "replace_rel.json"
    if case == "count":
        _edit(path, lambda d: d.pop())
    elif case == "missing key":
        _edit(path, lambda d: d[1].pop("caption2"))
    elif case == "id not position":
        _edit(path, lambda d: d[1].update(id=5))
    else:
        (pp_root / "images" / json.loads(path.read_text())[1]["filename"]).unlink()
    assert _run(micro_config, "sugarcrepe-pp", pp_root, "replace-rel", tmp_path / "out") == 2
    assert_one_line_error(capsys.readouterr().err, *words)


def test_the_published_files_pin_their_counts_and_hashes(sc_root, micro_config, tmp_path):
    """The specs hold the released counts (7,511 and 4,757 records) and sha256s; a replica's files differ from the
    pinned ones, which is recorded (and warned), not refused."""
    assert sum(n for n, _ in SUGARCREPE_FILES.values()) == 7511 and SUGARCREPE_FILES["swap_obj"][0] == 245
    assert sum(n for n, _ in SUGARCREPE_PP_FILES.values()) == 4757
    result = choice_eval(micro_config, "sugarcrepe", sc_root, "add-att", tmp_path / "out")
    files = result.dataset["meta"]["files"]
    assert [f["file"] for f in files] == ["add_att.json"] and files[0]["verified"] is False
    assert files[0]["expected_sha256"] == SUGARCREPE_FILES["add_att"][1]


def test_sugarcrepe_eval_end_to_end_writes_a_result_and_its_per_item_file(sc_root, micro_config, tmp_path, capsys):
    assert _run(micro_config, "sugarcrepe", sc_root, "add-att", tmp_path / "out") == 0
    out = capsys.readouterr().out
    assert "sugarcrepe/add-att: 3 images, 3 items" in out and "accuracy" in out.splitlines()[1]
    (json_path,) = (tmp_path / "out").glob("*.json")
    res = json.loads(json_path.read_text())
    assert res["task"] == "choice" and res["main_score"]["name"] == "accuracy"
    assert (tmp_path / "out" / res["per_query"]).is_file()


def test_an_undecodable_image_is_one_line_or_with_skip_invalid_its_records_are_dropped(sc_root, micro_config,
                                                                                       tmp_path, capsys):
    from benchmark_fixtures import truncate

    data = json.loads((sc_root / "data" / "swap_obj.json").read_text())
    truncate(sc_root / "val2017" / data["107"]["filename"])
    assert _run(micro_config, "sugarcrepe", sc_root, "swap-obj", tmp_path / "out") == 2
    assert_one_line_error(capsys.readouterr().err, data["107"]["filename"], "cannot decode")
    result = choice_eval(micro_config, "sugarcrepe", sc_root, "swap-obj", tmp_path / "out", skip_invalid=True,
                         allow_count_mismatch=True)
    shown = [k for k, rec in data.items() if rec["filename"] == data["107"]["filename"]]
    assert sorted(stored(result)) == sorted(f"swap_obj/{k}" for k in data if k not in shown)
    assert result.dataset["skipped"] == {"unreadable image": len(shown)}
    assert result.dataset["meta"]["count_check"]["status"] == "mismatch allowed"
