"""Zero-shot classification (``--task zeroshot``) on class folders, ImageNet's layouts and an HF dataset with
a label column; top-1 checked against a hand computation from the embeddings."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import COLOURS, assert_one_line_error, make_pairs, snapshot, write_jsonl
from PIL import Image

from hnbench.cli import main
from hnbench.data.classes import class_layout
from hnbench.errors import ConfigError
from hnbench.evaluation.evaluate import evaluate
from hnbench.models import load_model
from hnbench.results.leaderboard import leaderboard
from hnbench.results.record import read_result
from hnbench.tasks.zeroshot import prompts, templates
from hnbench.train import train
from hnbench.train.config import TrainConfig

CLASSES = ["red", "green", "blue", "yellow"]


def _class_folder(root: Path, per_class: int = 3, seed: int = 0) -> Path:
    """``root/<colour>/<k>.png``: a noisy square of the class colour on a dark background."""
    rng = np.random.default_rng(seed)
    for name in CLASSES:
        (root / name).mkdir(parents=True)
        for k in range(per_class):
            a = np.full((32, 32, 3), 20, dtype=np.uint8)
            x, y = rng.integers(0, 16, size=2)
            a[y:y + 16, x:x + 16] = COLOURS[name]
            a = np.clip(a + rng.integers(0, 30, size=a.shape), 0, 255).astype(np.uint8)
            Image.fromarray(a).save(root / name / f"{k}.png")
    return root


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return _class_folder(tmp_path_factory.mktemp("zs") / "colours")


@pytest.fixture(scope="module")
def tpl_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tpl") / "templates.txt"
    path.write_text("a photo of a {} square.\na {} thing.\n")
    return path


@pytest.fixture(scope="module")
def encoder(micro_config):
    return load_model("hnb-micro", model_config=str(micro_config))


def _hand_top1(encoder, folder: Path, tpls: list[str]) -> tuple[float, np.ndarray]:
    """top-1 from the encoder's embeddings with numpy: argmax over normalise(mean of normalised prompts)."""
    files = [(c, p) for c, name in enumerate(CLASSES) for p in sorted((folder / name).iterdir())]
    # class index = sorted folder order
    order = sorted(CLASSES)
    with torch.no_grad():
        pixels = torch.stack([encoder.image_transform(Image.open(p).convert("RGB")) for _, p in files])
        img = encoder.encode_images(pixels).numpy()
        texts = [t.format(c) for c in order for t in tpls]
        txt = encoder.encode_texts(encoder.tokenize(texts).tokens).numpy()
    img /= np.linalg.norm(img, axis=1, keepdims=True)
    txt /= np.linalg.norm(txt, axis=1, keepdims=True)
    w = txt.reshape(len(order), len(tpls), -1).mean(axis=1)
    w /= np.linalg.norm(w, axis=1, keepdims=True)
    labels = np.array([order.index(CLASSES[c]) for c, _ in files])
    pred = (img @ w.T).argmax(axis=1)
    return 100.0 * float(np.mean(pred == labels)), pred


def test_zeroshot_top1_equals_hand_computation(encoder, folder, tpl_file, tmp_path):
    r = evaluate(encoder, folder, task="zeroshot", templates=str(tpl_file), output_dir=tmp_path / "out",
                 num_workers=0, progress=False, seed=1)
    hand, _ = _hand_top1(encoder, folder, tpl_file.read_text().split("\n")[:2])
    m = r.metrics["classification"]
    assert m["top-1"] == pytest.approx(hand, abs=1e-9) and m["top-5"] == 100.0  # 4 classes: always in the top 5
    assert m["n_queries"] == 12 and m["n_classes"] == 4 and r.dataset["meta"]["format"] == "class-folders"
    lo, hi = r.ci95["classification"]["top-1"]
    assert lo <= m["top-1"] <= hi
    assert r.task == "zeroshot" and r.main_score == {"name": "top-1", "value": m["top-1"]}
    stored = read_result(r.path)
    assert stored.task == "zeroshot" and "zeroshot" in Path(r.path).name and stored.settings["task"] == "zeroshot"
    assert stored.settings["n_templates"] == 2
    # the text classifier is cached like any embedding: a second run encodes no prompt and no image
    again = evaluate(encoder, folder, task="zeroshot", templates=str(tpl_file), num_workers=0, progress=False, seed=1)
    assert again.settings["encoding"]["encoded"] == {"images": 0, "texts": 0}
    assert again.metrics == r.metrics


def test_zeroshot_empty_class_is_one_line_before_any_model_loads(tmp_path, capsys):
    root = _class_folder(tmp_path / "data", per_class=1)
    (root / "violet").mkdir()
    (root / "violet" / "notes.txt").write_text("no image here")
    before = snapshot(tmp_path)
    # the model does not exist: had it been loaded first, the error would name it
    code = main(["eval", "--task", "zeroshot", "--model", "no-such-model-xyz", "--dataset", str(root),
                 "--output", str(tmp_path / "out")])
    assert code == 2
    assert_one_line_error(capsys.readouterr().err, "empty class folder", "violet")
    # a zero-shot data option given to another task is refused too, not ignored
    code = main(["eval", "--model", "no-such-model-xyz", "--dataset", str(root), "--class-names",
                 str(root / "violet" / "notes.txt"), "--output", str(tmp_path / "out")])
    assert code == 2
    assert_one_line_error(capsys.readouterr().err, "--class-names", "--task zeroshot only")
    assert snapshot(tmp_path) == before


def test_imagenet_layouts_use_open_clips_class_names(tmp_path):
    from open_clip import IMAGENET_CLASSNAMES, SIMPLE_IMAGENET_TEMPLATES

    v2 = tmp_path / "imagenetv2-matched-frequency-format-val"
    for i in range(1000):
        (v2 / str(i)).mkdir(parents=True)
    layout, classes, names = class_layout(v2)
    assert layout == "imagenet-v2" and names == list(IMAGENET_CLASSNAMES)
    assert [f for f, _ in classes[:12]] == [str(i) for i in range(12)]  # numeric order: "10" after "9"
    val = tmp_path / "val"
    for i in range(1000):
        (val / f"n{i:08d}").mkdir(parents=True)
    layout, classes, names = class_layout(val)
    assert layout == "imagenet-1k" and names[0] == "tench" and classes[0][0] == "n00000000"
    for extra in list(val.iterdir())[3:]:
        extra.rmdir()
    with pytest.raises(ConfigError, match="3 WordNet-id folders.*--class-names"):
        class_layout(val)
    (tmp_path / "names.txt").write_text("a\nb\nc\n")
    assert class_layout(val, str(tmp_path / "names.txt"))[2] == ["a", "b", "c"]
    # open_clip's templates, as shipped
    assert len(templates("openai")) == 80
    assert prompts(["tench"], templates("simple")) == [t("tench") for t in SIMPLE_IMAGENET_TEMPLATES]
    assert prompts(["tench", "goldfish"], ["a {}.", "one {}"]) == ["a tench.", "one tench", "a goldfish.", "one goldfish"]


def test_hf_dataset_with_label_column_and_class_names_file_scores_as_its_class_folders(encoder, folder, tpl_file, tmp_path):
    datasets = pytest.importorskip("datasets")
    order = sorted(CLASSES)
    files = [(order.index(name), p) for name in order for p in sorted((folder / name).iterdir())]
    ds = datasets.Dataset.from_dict({"img": [str(p) for _, p in files], "y": [c for c, _ in files]},
                                    features=datasets.Features({"img": datasets.Image(),
                                                                "y": datasets.Value("int64")}))
    ds.save_to_disk(str(tmp_path / "hf"))
    (tmp_path / "names.txt").write_text("\n".join(order) + "\n")
    hf = evaluate(encoder, tmp_path / "hf", task="zeroshot", templates=str(tpl_file), image_column="img",
                  dataset_options={"label_column": "y", "class_names": str(tmp_path / "names.txt")},
                  num_workers=0, progress=False)
    direct = evaluate(encoder, folder, task="zeroshot", templates=str(tpl_file), num_workers=0, progress=False)
    assert hf.dataset["meta"]["format"] == "hf" and hf.metrics["classification"] == direct.metrics["classification"]


def test_leaderboard_keeps_zeroshot_in_its_own_section(encoder, folder, tpl_file, micro_config, tmp_path):
    pairs = make_pairs(tmp_path, n=6)
    manifest = write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    out = tmp_path / "results"
    evaluate(encoder, manifest, output_dir=out, num_workers=0, progress=False, ci=False)
    evaluate(encoder, folder, task="zeroshot", templates=str(tpl_file), output_dir=out, num_workers=0,
             progress=False)
    board = leaderboard([out])
    header, _, sections = board.partition("## Retrieval\n")
    retrieval, _, zeroshot = sections.partition("## Zero-shot classification\n")
    assert "its own section" in header and "t2i R@1" in retrieval and "top-1" not in retrieval
    assert "### colours · default" in zeroshot and "top-1" in zeroshot and "R@1" not in zeroshot
    csv = leaderboard([out], fmt="csv")
    header = csv.splitlines()[0].split(",")
    assert "task" in header and "top-1" in header


def test_cli_eval_task_zeroshot_prints_and_records_top1(micro_config, folder, tpl_file, tmp_path, capsys):
    code = main(["-q", "eval", "--task", "zeroshot", "--model", "hnb-micro", "--model-config", str(micro_config),
                 "--dataset", str(folder), "--templates", str(tpl_file), "--output", str(tmp_path),
                 "--num-workers", "0"])
    out = capsys.readouterr().out
    assert code == 0 and "12 images, 4 classes" in out and "top-1" in out and "classification" in out
    assert read_result(next(tmp_path.glob("*zeroshot*.json"))).metrics["classification"]["n_classes"] == 4


def test_train_eval_dataset_accepts_a_zeroshot_eval(micro_config, folder, tmp_path):
    pairs = make_pairs(tmp_path, n=8)
    data = write_jsonl(tmp_path / "train.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    cfg = TrainConfig.from_dict({"model": "hnb-micro", "model_config": str(micro_config), "dataset": str(data),
                                 "epochs": 1, "batch_size": 4, "lr": 1e-3, "warmup_steps": 1, "num_workers": 0,
                                 "eval_dataset": str(folder), "eval_task": "zeroshot", "output": str(tmp_path / "run")})
    train(cfg, progress=False)
    recs = [json.loads(x) for x in (tmp_path / "run" / "diagnostics.jsonl").read_text().splitlines()]
    ev = [r for r in recs if r["kind"] == "eval"]
    assert [r["epoch"] for r in ev] == [0, 1] and all(r["task"] == "zeroshot" for r in ev)
    assert all(0 <= r["classification_top-1"] <= 100 and r["main_score"] == r["classification_top-1"] for r in ev)
    result = read_result(ev[-1]["path"])
    assert result.task == "zeroshot" and result.metrics["classification"]["n_queries"] == 12
    # an empty class in the eval folder is refused before training starts (one line)
    (folder / "zz-empty").mkdir()
    try:
        with pytest.raises(ConfigError, match="empty class folder.*zz-empty"):
            TrainConfig.from_dict({**dataclasses.asdict(cfg), "output": str(tmp_path / "run2")})
    finally:
        (folder / "zz-empty").rmdir()
