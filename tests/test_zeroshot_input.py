"""Zero-shot input read right or refused in one line: label columns (class indices, whole-number floats, class
names; a fraction, None or an unknown word never cast to a class), prompt templates (only ``{}`` places the class
name; parsed, never passed to ``str.format``), and an accuracy's interval (retrieval's rule, printed as
retrieval prints it; results written before the rule still read)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from conftest import COLOURS, assert_one_line_error, snapshot
from PIL import Image

from hnbench.cli import main
from hnbench.errors import ConfigError
from hnbench.evaluation.evaluate import evaluate
from hnbench.metrics import ci_methods, clopper_pearson, recall_ci, summarize
from hnbench.models import load_model
from hnbench.results.leaderboard import leaderboard
from hnbench.results.record import EvalResult, read_result
from hnbench.tasks.zeroshot import class_ranks, prompts

CLASSES = ["blue", "green", "red", "yellow"]  # sorted: the class index of a class folder
PER_CLASS = 3


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """``colours/<colour>/<k>.png``: a noisy square of the class colour on a dark background."""
    root = tmp_path_factory.mktemp("zsi") / "colours"
    rng = np.random.default_rng(3)
    for name in CLASSES:
        (root / name).mkdir(parents=True)
        for k in range(PER_CLASS):
            a = np.full((32, 32, 3), 20, dtype=np.uint8)
            x, y = rng.integers(0, 16, size=2)
            a[y:y + 16, x:x + 16] = COLOURS[name]
            a = np.clip(a + rng.integers(0, 30, size=a.shape), 0, 255).astype(np.uint8)
            Image.fromarray(a).save(root / name / f"{k}.png")
    return root


@pytest.fixture(scope="module")
def tpl_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tpl") / "templates.txt"
    path.write_text("a photo of a {} square.\na {} thing.\n")
    return path


@pytest.fixture(scope="module")
def encoder(micro_config):
    return load_model("hnb-micro", model_config=str(micro_config))


def _images(folder: Path) -> list[Path]:
    """The images in the order the class-folder reader lists them (class index, then file name)."""
    return [p for name in CLASSES for p in sorted((folder / name).iterdir())]


def _hf(root: Path, folder: Path, labels: list[Any], feature: Any, column: str = "y") -> Path:
    """An HF ``save_to_disk`` folder of the folder's images with ``labels`` in ``column`` (of ``feature``)."""
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({"img": [str(p) for p in _images(folder)], column: labels},
                                    features=datasets.Features({"img": datasets.Image(), column: feature}))
    ds.save_to_disk(str(root))
    return root


def _names(tmp_path: Path, names: list[str] = CLASSES) -> Path:
    path = tmp_path / "names.txt"
    path.write_text("".join(f"{n}\n" for n in names))
    return path


def _refused(capsys, argv: list[str], *words: str) -> str:
    """Run ``hnbench eval --task zeroshot`` with a model that does not exist: exit 2, one line naming ``words``
    (had the model been loaded first, the line would name it)."""
    capsys.readouterr()  # what making the data printed (datasets' progress bars)
    code = main(["eval", "--task", "zeroshot", "--model", "no-such-model-xyz", "--num-workers", "0", *argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert_one_line_error(err, *words)
    return err


def test_fractional_labels_are_refused_in_one_line_not_cast_to_a_class(folder, tmp_path, capsys):
    """``[0.0, 0.9, 1.2, 1.7]`` used to be scored as classes ``[0, 0, 1, 1]``: the first fraction is named."""
    datasets = pytest.importorskip("datasets")
    labels = [0.0, 0.9, 1.2, 1.7] + [float(i // PER_CLASS) for i in range(4, len(CLASSES) * PER_CLASS)]
    data, names = _hf(tmp_path / "hf", folder, labels, datasets.Value("float64")), _names(tmp_path)
    before = snapshot(tmp_path)
    err = _refused(capsys, ["--dataset", str(data), "--image-column", "img", "--label-column", "y",
                            "--class-names", str(names), "--output", str(tmp_path / "out")],
                   "label column 'y'", "row 1", "0.9", "neither a class index")
    assert "row 2" not in err and snapshot(tmp_path) == before  # nothing written


def test_whole_number_floats_and_class_names_read_as_the_class_indices(encoder, folder, tpl_file, tmp_path):
    datasets = pytest.importorskip("datasets")
    index = [i // PER_CLASS for i in range(len(CLASSES) * PER_CLASS)]
    names = _names(tmp_path)
    runs = {}
    for kind, labels, feature in (("int", index, datasets.Value("int64")),
                                  ("float", [float(c) for c in index], datasets.Value("float64")),
                                  ("name", [CLASSES[c] for c in index], datasets.Value("string"))):
        data = _hf(tmp_path / kind, folder, labels, feature)
        runs[kind] = evaluate(encoder, data, task="zeroshot", templates=str(tpl_file), image_column="img",
                              dataset_options={"label_column": "y", "class_names": str(names)},
                              num_workers=0, progress=False)
    direct = evaluate(encoder, folder, task="zeroshot", templates=str(tpl_file), num_workers=0, progress=False)
    # the same labels, so the same data fingerprint (it hashes the class indices) and the same scores
    assert len({r.dataset["fingerprint"] for r in runs.values()}) == 1
    for r in runs.values():
        assert r.metrics["classification"] == direct.metrics["classification"]
        assert r.metrics["classification"]["n_queries"] == len(index)


@pytest.mark.parametrize("case", ["none", "unknown word", "words without class names", "missing label",
                                  "boolean", "digits as text", "no label column", "empty class-names file"])
def test_a_label_column_that_is_neither_class_indices_nor_class_names_is_one_line(case, folder, tmp_path, capsys):
    datasets = pytest.importorskip("datasets")
    n = len(CLASSES) * PER_CLASS
    index = [i // PER_CLASS for i in range(n)]
    names: Path | None = _names(tmp_path)
    column = "y"
    if case == "none":  # an int64 column with a hole in it
        labels, feature, words = [0, None, *index[2:]], datasets.Value("int64"), ("row 1", "no label (None)")
    elif case == "unknown word":
        labels = [CLASSES[c] for c in index]
        labels[4] = "grene"
        feature, words = datasets.Value("string"), ("row 4", "'grene'", "not one of the 4 class names", "'green'")
    elif case == "words without class names":  # text labels, and nothing says which class each index is
        labels, feature, names = [CLASSES[c] for c in index], datasets.Value("string"), None
        words = ("column 'y'", "carries no class names", "--class-names")
    elif case == "missing label":  # HF's ClassLabel marks a missing label -1
        labels, feature = [*index[:5], -1, *index[6:]], datasets.ClassLabel(names=CLASSES)
        names, words = None, ("row 5", "label -1 lies outside 0..3", "missing label")
    elif case == "boolean":
        labels, feature, words = [i % 2 == 0 for i in range(n)], datasets.Value("bool"), ("row 0", "True")
    elif case == "digits as text":  # text that looks like indices is not a class name
        labels = [str(c) if i < 6 else CLASSES[c] for i, c in enumerate(index)]
        feature, words = datasets.Value("string"), ("row 0", "'0'", "not one of the 4 class names")
    elif case == "no label column":
        labels, feature, column = index, datasets.Value("int64"), "kind"
        words = ("no label column", "--label-column")
    else:
        labels, feature, words = index, datasets.Value("int64"), ("--class-names", "no class name in it")
        names = tmp_path / "empty.txt"
        names.write_text("\n \n")
    data = _hf(tmp_path / "hf", folder, labels, feature, column=column)
    flags = ["--label-column", "y"] * (case != "no label column") + ["--class-names", str(names)] * (names is not None)
    _refused(capsys, ["--dataset", str(data), "--image-column", "img", *flags, "--output", str(tmp_path / "out")],
             *words)
    assert not (tmp_path / "out").exists()


def test_a_template_that_places_no_class_name_is_refused_before_anything_loads(tmp_path, capsys):
    """``{{}}`` is a literal ``{}``: every class would get the same prompt and still an accuracy be written."""
    tpl = tmp_path / "templates.txt"
    tpl.write_text("a photo of a {}.\na photo of a {{}}\n")
    # no such data either: the template is checked before the data (and the model) are looked at
    _refused(capsys, ["--dataset", str(tmp_path / "missing"), "--templates", str(tpl),
                      "--output", str(tmp_path / "out")],
             f"--templates {tpl}: line 2", "'a photo of a {{}}'", "places no class name", "same prompt")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("template", "named"), [("a photo of a {x}", "{x}"), ("{.__class__}", "{.__class__}"),
                                                 ("a { {}", "unexpected '{'"), ("a } {}", "Single '}'"),
                                                 ("photo {0}", "{0}"), ("{!r} photo", "{!r}"),
                                                 ("{0.__class__.__init__.__globals__}", "__globals__")])
def test_a_template_with_another_field_or_a_stray_brace_is_one_line_naming_it(template, named, tmp_path, capsys):
    tpl = tmp_path / "templates.txt"
    tpl.write_text("a photo of a {}.\n\n" + template + "\n")
    err = _refused(capsys, ["--dataset", str(tmp_path / "missing"), "--templates", str(tpl), "--output", str(tmp_path)],
                   f"--templates {tpl}: line 3", repr(template), named)
    assert "<class" not in err and "<slot wrapper" not in err  # nothing was evaluated
    with pytest.raises(ConfigError, match="template"):  # the API refuses it the same way, evaluating nothing
        prompts(["cat", "dog"], [template])


def test_literal_braces_and_repeated_places_each_get_the_class_name():
    assert prompts(["cat", "dog"], ["a {{{}}} and a {}", "{{}} {}"]) == [
        "a {cat} and a cat", "{} cat", "a {dog} and a dog", "{} dog"]
    # open_clip's own templates (callables) are filled as before
    from open_clip import SIMPLE_IMAGENET_TEMPLATES

    assert prompts(["cat"], list(SIMPLE_IMAGENET_TEMPLATES)) == [t("cat") for t in SIMPLE_IMAGENET_TEMPLATES]


def _hand_ranks(encoder, folder: Path, tpls: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Each image's rank and tie from the encoder's embeddings with numpy (open_clip's classifier)."""
    files = _images(folder)
    with torch.no_grad():
        pixels = torch.stack([encoder.image_transform(Image.open(p).convert("RGB")) for p in files])
        img = encoder.encode_images(pixels).numpy()
        txt = encoder.encode_texts(encoder.tokenize([t.format(c) for c in CLASSES for t in tpls]).tokens).numpy()
    img /= np.linalg.norm(img, axis=1, keepdims=True)
    txt /= np.linalg.norm(txt, axis=1, keepdims=True)
    w = txt.reshape(len(CLASSES), len(tpls), -1).mean(axis=1)
    w /= np.linalg.norm(w, axis=1, keepdims=True)
    return class_ranks(img, w, np.repeat(np.arange(len(CLASSES)), PER_CLASS))


def test_zero_shot_intervals_follow_retrievals_rule_and_are_printed_as_retrieval_prints_them(
        encoder, micro_config, folder, tpl_file, tmp_path, capsys):
    assert main(["-q", "eval", "--task", "zeroshot", "--model", "hnb-micro", "--model-config", str(micro_config),
                 "--dataset", str(folder), "--templates", str(tpl_file), "--output", str(tmp_path / "out"),
                 "--num-workers", "0", "--no-cache"]) == 0
    out = capsys.readouterr().out
    path = out.strip().splitlines()[-1].removeprefix("wrote ")
    stored = json.loads(Path(path).read_text())
    ranks, tied = _hand_ranks(encoder, folder, tpl_file.read_text().splitlines())
    m = stored["metrics"]["classification"]
    assert m["top-1"] == pytest.approx(100.0 * np.mean(ranks <= 1), abs=1e-9)
    # retrieval's own summary of the same ranks gives the same intervals, and its rule the same methods
    retrieval = summarize(ranks, tied, ks=(1, 5))["ci95"]
    assert stored["ci95"]["classification"] == {f"top-{k}": retrieval[f"R@{k}"] for k in (1, 5)}
    assert stored["ci95"]["classification"] == {f"top-{k}": list(v) for k, v in
                                                zip((1, 5), recall_ci(ranks, (1, 5)).values())}
    assert stored["ci95_method"]["classification"] == {f"top-{k}": v for k, v in
                                                       zip((1, 5), ci_methods(ranks, (1, 5)).values())}
    # 4 classes: every image's class is in its top 5, 0 misses: exact, not a zero-width bootstrap [100, 100]
    n = len(ranks)
    assert m["top-5"] == 100.0 and stored["ci95_method"]["classification"]["top-5"] == "clopper-pearson"
    assert stored["ci95"]["classification"]["top-5"] == list(clopper_pearson(n, n))
    assert stored["ci95"]["classification"]["top-5"][0] < 80
    for k in ("top-1", "top-5"):
        lo, hi = stored["ci95"]["classification"][k]
        mark = "†" if stored["ci95_method"]["classification"][k] == "clopper-pearson" else ""
        assert f"{m[k]:.2f} [{lo:.1f}, {hi:.1f}]{mark}" in out
    assert ("top-1, top-5 [95% interval over the queries]: percentile bootstrap; † exact binomial "
            "(Clopper–Pearson), used where hits or misses are fewer than 5") in out
    assert read_result(path).table() in out


def test_a_zero_shot_result_written_before_the_rule_still_reads_ranks_and_prints(
        encoder, folder, tpl_file, tmp_path):
    """Older zero-shot files have bootstrap intervals (top-5 at 100%: [100, 100]) and no ``ci95_method``."""
    r = evaluate(encoder, folder, task="zeroshot", templates=str(tpl_file), output_dir=tmp_path / "new",
                 num_workers=0, progress=False)
    old = json.loads(Path(str(r.path)).read_text())
    del old["ci95_method"]
    old["ci95"]["classification"]["top-5"] = [100.0, 100.0]
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / Path(str(r.path)).name).write_text(json.dumps(old, indent=2))
    stored = read_result(tmp_path / "old" / Path(str(r.path)).name)
    assert stored.ci95_method == {} and stored.metrics == r.metrics and stored.stem() == r.stem()
    table = stored.table()
    assert "100.00 [100.0, 100.0] |" in table and "†" not in table
    assert table.endswith("top-1, top-5 [95% interval over the queries]: percentile bootstrap.")
    board = leaderboard([tmp_path / "old"], ci=True)
    assert "Zero-shot classification" in board and "100.00 [100.00, 100.00]" in board


def test_another_tasks_interval_is_printed_on_its_own_scale():
    """An interval that is not a percentage (HiMo@K, a correlation) is shown beside its value, unmarked."""
    result = EvalResult(model={"arch": "m"}, dataset={"name": "d"}, task="monotonicity",
                        metrics={"monotonicity": {"HiMo@K": 0.1234, "n_queries": 40}},
                        ci95={"monotonicity": {"HiMo@K": [0.101, 0.145]}})
    table = result.table()
    assert "0.1234 [0.101, 0.145]" in table and "†" not in table
    assert table.endswith("HiMo@K [95% interval over the queries]: percentile bootstrap.")
    # a record without intervals (--no-ci) prints the value alone and no line about intervals
    bare = EvalResult(model={"arch": "m"}, dataset={"name": "d"}, task="monotonicity",
                      metrics={"monotonicity": {"HiMo@K": 0.1234, "n_queries": 40}})
    assert "interval" not in bare.table() and "[" not in bare.table()
