"""Nothing lost in data, evaluation input and model loading.

CLI cases assert the exact outcome: status 2, one ``hnbench: error:`` line
naming the offending item, no traceback, nothing written.
"""

from __future__ import annotations

import builtins
import json
from pathlib import Path

import pytest
from benchmark_fixtures import build_dci, build_docci, build_urban1k, dci_name, goal_list, jpeg
from conftest import assert_one_line_error, snapshot, write_jsonl
from PIL import Image

from hnbench.cli import main
from hnbench.data import load_dataset
from hnbench.evaluation.evaluate import evaluate
from hnbench.io import cache_dir
from hnbench.models import load_model
from hnbench.results.record import read_result

COLOURS = [(200, 30, 30), (30, 200, 30), (30, 30, 200), (220, 220, 40)]


def _same_size_set(root: Path, shift: int) -> Path:
    """A manifest ``m.jsonl`` with four 8x8 BMPs (a fixed file size whatever the pixels) coloured by ``shift``."""
    (root / "images").mkdir(parents=True)
    rows = []
    for i in range(len(COLOURS)):
        Image.new("RGB", (8, 8), COLOURS[(i + shift) % len(COLOURS)]).save(root / "images" / f"{i}.bmp")
        rows.append({"image": f"images/{i}.bmp", "caption": f"picture number {i}"})
    return write_jsonl(root / "m.jsonl", rows)


@pytest.fixture
def micro(micro_config):
    return load_model("hnb-micro", model_config=str(micro_config))


# --- the data fingerprint hashes the images' bytes ----------------------------------------------
def test_same_named_same_size_images_with_other_pixels_get_two_result_files(tmp_path, micro):
    a, b = _same_size_set(tmp_path / "a", 0), _same_size_set(tmp_path / "b", 1)
    assert [p.stat().st_size for p in sorted((tmp_path / "a/images").iterdir())] == \
        [p.stat().st_size for p in sorted((tmp_path / "b/images").iterdir())]
    out = tmp_path / "out"
    first = evaluate(micro, str(a), output_dir=out, num_workers=0, ci=False)
    kept = snapshot(out)
    second = evaluate(micro, str(b), output_dir=out, num_workers=0, ci=False)
    assert first.dataset["fingerprint"] != second.dataset["fingerprint"]
    after = snapshot(out)
    jsons = sorted(k for k in after if k.endswith(".json") and not k.startswith("."))
    assert len(jsons) == 2 and all(after[k] == v for k, v in kept.items())  # the first result is untouched
    assert {read_result(out / j).dataset["fingerprint"] for j in jsons} == {first.dataset["fingerprint"],
                                                                            second.dataset["fingerprint"]}


def test_a_warm_rerun_reads_no_image_bytes(tmp_path, micro, monkeypatch):
    manifest = _same_size_set(tmp_path / "a", 0)
    images = str(tmp_path / "a" / "images")
    first = evaluate(micro, str(manifest), output_dir=tmp_path / "out", num_workers=0, ci=False)
    reads: list[str] = []
    real_open = builtins.open

    def counting_open(file, *args, **kwargs):  # a spy: every open still happens
        if str(file).startswith(images):
            reads.append(str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting_open)
    again = evaluate(micro, str(manifest), output_dir=tmp_path / "out", num_workers=0, ci=False)
    monkeypatch.undo()
    assert reads == [] and again.dataset["fingerprint"] == first.dataset["fingerprint"]
    assert again.settings["encoding"]["cached"]["images"] == len(COLOURS)

    # a file rewritten with other pixels (same name, same size) is read again and changes the fingerprint
    Image.new("RGB", (8, 8), (1, 2, 3)).save(tmp_path / "a" / "images" / "0.bmp")
    changed = load_dataset(str(manifest)).fingerprint()
    assert changed != first.dataset["fingerprint"]


# --- every benchmark reader keeps image paths inside the data root -------------------------
def _hostile_docci(root: Path, outside: Path) -> tuple[str, list[str]]:
    rows = build_docci(root)
    rows[0]["image_file"] = "../../outside/x.jpg"
    (root / "docci_descriptions.jsonlines").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return "docci", []


def _hostile_dci_annotation(root: Path, outside: Path) -> Path:
    base = build_dci(root)
    path = base / "annotations" / dci_name(1)
    ann = json.loads(path.read_text())
    ann["image"] = "../../../outside/sa_1001.jpg"
    path.write_text(json.dumps(ann))
    return base


def _hostile_dci(root: Path, outside: Path) -> tuple[str, list[str]]:
    _hostile_dci_annotation(root, outside)
    return "dci", []


def _hostile_dci_goal(root: Path, outside: Path) -> tuple[str, list[str]]:
    _hostile_dci_annotation(root, outside)
    lst = goal_list(root / "goal" / "DCI_test.json", [0, 1, 2])
    return "dci", ["--protocol", "goal", "--split-file", str(lst)]


def _hostile_long_dci_rebuilt(root: Path, outside: Path) -> tuple[str, list[str]]:
    _hostile_dci_annotation(root, outside)
    return "long-dci", []


def _hostile_long_dci_csv(root: Path, outside: Path) -> tuple[str, list[str]]:
    build_dci(root)
    (root / "dci_long.csv").write_text(f"filepath\ttitle\nsa_1000.jpg\tfirst\n{outside / 'x.jpg'}\tsecond\n")
    return "long-dci", []


HOSTILE = {"docci": _hostile_docci, "dci-full": _hostile_dci, "dci-goal": _hostile_dci_goal,
           "long-dci-rebuilt": _hostile_long_dci_rebuilt, "long-dci-csv": _hostile_long_dci_csv}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_every_benchmark_reader_refuses_image_paths_outside_the_data_root(tmp_path, capsys, case):
    outside, root = tmp_path / "outside", tmp_path / "root"
    for name in ("x.jpg", "sa_1001.jpg"):
        jpeg(outside / name, 3)
    name, extra = HOSTILE[case](root, outside)
    before = snapshot(tmp_path)
    capsys.readouterr()
    rc = main(["-q", "datasets", "info", name, "--data-root", str(root), *extra])
    err = capsys.readouterr().err
    assert rc == 2
    assert_one_line_error(err, "points outside", str(root), "--allow-outside-paths")
    assert snapshot(tmp_path) == before
    # trusted with the flag: the outside image is part of the set (counts differ from the published ones)
    options = {"protocol": "goal", "split_file": extra[-1]} if "--protocol" in extra else {}
    ds = load_dataset(name, data_root=str(root), allow_outside_paths=True, allow_count_mismatch=True, **options)
    assert any(Path(p).resolve().parent == outside.resolve() for p in ds.images.paths)


# --- tracebacks where one line and exit 2 are due -------------------------------------------------
def _manifest(root: Path, captions: list[str] | None = None) -> Path:
    """A JSONL manifest over four 8x8 images; ``captions`` replace the default ones (written as raw UTF-8)."""
    (root / "images").mkdir(parents=True, exist_ok=True)
    texts = captions or [f"picture number {i}" for i in range(len(COLOURS))]
    rows = []
    for i, text in enumerate(texts):
        Image.new("RGB", (8, 8), COLOURS[i % len(COLOURS)]).save(root / "images" / f"{i}.png")
        rows.append(json.dumps({"image": f"images/{i}.png", "caption": text}, ensure_ascii=False))
    path = root / "m.jsonl"
    path.write_text("".join(r + "\n" for r in rows), encoding="utf-8")
    return path


def _eval_cli(capsys, *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(["-q", "eval", "--num-workers", "0", *argv])
    return rc, capsys.readouterr().err


def test_weights_with_nan_are_one_line_naming_the_model(tmp_path, capsys, micro_config, micro):
    from safetensors.torch import save_file

    weights = tmp_path / "nan.safetensors"
    save_file({k: (v * float("nan") if v.is_floating_point() else v).contiguous()
               for k, v in micro.model.state_dict().items()}, str(weights))
    manifest = _manifest(tmp_path / "data")
    rc, err = _eval_cli(capsys, "--model", "hnb-micro", "--model-config", str(micro_config), "--pretrained",
                        str(weights), "--dataset", str(manifest), "--output", str(tmp_path / "out"))
    assert rc == 2
    assert_one_line_error(err, "hnb-micro", str(weights), "non-finite")
    assert not (tmp_path / "out").exists() or snapshot(tmp_path / "out") == {}
    assert list((cache_dir() / "embeddings").glob("*/*/*.emb")) == []  # nothing cached either


def test_model_name_with_a_slash_and_a_model_config_is_one_line_before_loading(tmp_path, capsys, micro_config):
    # the dataset does not exist: the error naming the model proves it was checked first
    rc, err = _eval_cli(capsys, "--model", "team/arch", "--model-config", str(micro_config), "--dataset",
                        str(tmp_path / "missing.jsonl"), "--output", str(tmp_path / "out"))
    assert rc == 2
    assert_one_line_error(err, "team/arch", "--model-config", "team-arch")
    assert not (tmp_path / "out").exists()


def test_model_config_leaves_no_folder_in_the_temp_directory(tmp_path, micro_config, monkeypatch):
    import tempfile

    private = tmp_path / "tmp"
    private.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    enc = load_model("hnb-micro", model_config=str(micro_config))
    assert enc.info.arch == "hnb-micro" and list(private.iterdir()) == []
    assert load_model("hnb-micro").info.arch == "hnb-micro"  # the architecture stays registered without the file


def test_jsonl_line_nested_100000_deep_is_one_line(tmp_path, capsys, micro_config):
    manifest = _manifest(tmp_path / "data")
    with open(manifest, "a") as f:
        f.write("[" * 100_000 + "]" * 100_000 + "\n")
    rc, err = _eval_cli(capsys, "--model", "hnb-micro", "--model-config", str(micro_config), "--dataset",
                        str(manifest), "--output", str(tmp_path / "out"))
    assert rc == 2
    assert_one_line_error(err, f"{manifest}:5", "nested too deeply")
    assert not (tmp_path / "out").exists()


def test_csv_caption_over_131072_characters_is_read_truncated_and_counted(tmp_path, micro):
    root = tmp_path / "data"
    _manifest(root)
    long_caption = "a very long caption " * 7_000  # 140,000 characters
    with open(root / "m.csv", "w", newline="") as f:
        f.write("image,caption\n")
        f.write(f"images/0.png,{long_caption}\n")
        for i in range(1, len(COLOURS)):
            f.write(f"images/{i}.png,picture number {i}\n")
    ds = load_dataset(str(root / "m.csv"))
    assert len(long_caption) > 131_072 and ds.captions[0] == long_caption
    result = evaluate(micro, ds, num_workers=0, ci=False, use_cache=False)
    assert result.tokens["n_truncated"] == 1 and result.tokens["max"] == 4 * 7_000 + 2  # + start and end


# --- valid input refused, degenerate input accepted ------------------------------------------------
@pytest.mark.parametrize("separator", ["\u2028", "\u0085", "\u2029"], ids=["U+2028", "U+0085", "U+2029"])
def test_jsonl_caption_holding_a_unicode_line_separator_reads(tmp_path, separator):
    captions = [f"first line{separator}second line {i}" for i in range(len(COLOURS))]
    ds = load_dataset(str(_manifest(tmp_path, captions)))
    assert ds.captions == captions


def test_evaluate_accepts_paths_for_dataset_weights_and_model_config(tmp_path, micro_config, micro):
    from safetensors.torch import save_file

    weights = tmp_path / "w.safetensors"
    save_file({k: v.contiguous() for k, v in micro.model.state_dict().items()}, str(weights))
    result = evaluate("hnb-micro", _manifest(tmp_path / "data"), pretrained=weights, model_config=micro_config,
                      output_dir=tmp_path / "out", num_workers=0, ci=False)
    assert result.model["pretrained"] == str(weights) and result.dataset["n_images"] == len(COLOURS)
    assert read_result(result.path).model["pretrained"] == str(weights)
    build_urban1k(tmp_path / "urban", n=4, blank_first=())
    bench = evaluate(micro, "urban1k", data_root=tmp_path / "urban", dataset_options={"allow_count_mismatch": True},
                     ks=(1,), num_workers=0, ci=False, use_cache=False)
    assert bench.dataset["n_images"] == 4


def test_evaluate_refuses_a_dataset_of_another_type_before_loading_the_model(tmp_path):
    from hnbench.errors import ConfigError

    with pytest.raises(ConfigError, match="dataset must be a name, a path or the loaded data of the retrieval task, got int"):
        evaluate("no-such-model", 42, output_dir=tmp_path / "out")  # type: ignore[arg-type]
    assert not (tmp_path / "out").exists()


BLANK = {"nbsp": "&nbsp;", "bom": "\ufeff", "line-separator": "\u2028", "nul": "\x00", "nested-entity": "&amp;nbsp;"}


@pytest.mark.parametrize("name", sorted(BLANK))
def test_caption_that_tokenizes_to_nothing_is_refused_like_an_empty_one(tmp_path, capsys, name):
    captions = ["picture number 0", BLANK[name], "picture number 2", "picture number 3"]
    manifest = _manifest(tmp_path / "data", captions)
    before = snapshot(tmp_path)
    # the model does not exist: the data is checked before any model loads
    rc, err = _eval_cli(capsys, "--model", "no-such-model", "--dataset", str(manifest), "--output",
                        str(tmp_path / "out"))
    assert rc == 2
    assert_one_line_error(err, "empty caption", "'images/1.png'", "--skip-invalid")
    assert snapshot(tmp_path) == before
    ds = load_dataset(str(manifest), skip_invalid=True)
    assert ds.skipped == {"empty caption": ["images/1.png"]} and ds.n_captions == 3


def test_caption_that_tokenizes_to_nothing_is_kept_only_by_a_protocol_that_keeps_empty_queries(tmp_path):
    from hnbench.errors import DataError

    base = build_urban1k(tmp_path, n=4, blank_first=())
    (base / "caption" / "2.txt").write_text("&nbsp;\nThe rest of the caption.\n")
    with pytest.raises(DataError, match="empty caption .*'2'"):  # `test`: the first non-blank line is "&nbsp;"
        load_dataset("urban1k", data_root=str(tmp_path), allow_count_mismatch=True)
    kept = load_dataset("urban1k", data_root=str(tmp_path), protocol="longclip", allow_count_mismatch=True)
    assert kept.meta["empty_captions"] == ["2"] and kept.n_captions == 4  # as Long-CLIP's loader queries it


def test_k_at_least_the_gallery_size_warns(tmp_path, micro, caplog):
    import logging

    with caplog.at_level(logging.WARNING, logger="hnbench"):
        evaluate(micro, _manifest(tmp_path), ks=(1, 4, 10), num_workers=0, ci=False, use_cache=False)
    warned = [r.getMessage() for r in caplog.records if "by construction" in r.getMessage()]
    assert len(warned) == 1 and "R@4 text→image (4 images)" in warned[0] and "R@10 image→text" in warned[0]
    assert "R@1 " not in warned[0]


def test_the_data_fingerprint_is_the_content_not_the_file_name(tmp_path):
    a = load_dataset(str(_same_size_set(tmp_path / "a", 0)))
    (tmp_path / "a" / "m.jsonl").rename(tmp_path / "a" / "other.jsonl")
    renamed = load_dataset(str(tmp_path / "a" / "other.jsonl"))
    # the data fingerprint is the content alone (the name is a label)
    assert renamed.name != a.name and renamed.fingerprint() == a.fingerprint()
    assert renamed.content_fingerprint() == a.content_fingerprint()


def test_hardness_caption_files_use_the_same_blank_rule_and_line_split(tmp_path):
    """``hardness --captions``: a line that tokenizes to nothing is dropped like an empty one (the rule
    ``is_blank_caption`` gives every loader), and U+2028 inside a caption does not split it."""
    from hnbench.hardness.captions import load_captions

    txt = tmp_path / "c.txt"
    txt.write_text("a red square\n&nbsp;\n\ufeff\nleft\u2028right circle\n", encoding="utf-8")
    cs = load_captions(txt)
    assert cs.captions == ["a red square", "left\u2028right circle"] and cs.caption_ids == ["line1", "line4"]
    jl = write_jsonl(tmp_path / "c.jsonl", [{"caption": "a blue star"}, {"caption": "&nbsp;"}])
    assert load_captions(jl).captions == ["a blue star"]
