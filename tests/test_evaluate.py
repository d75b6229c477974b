"""End to end: a micro open_clip model scored on generated data in each generic format."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import make_pairs, write_jsonl
from PIL import Image

from hnbench.cli import main
from hnbench.data import load_dataset
from hnbench.errors import ImageLoadError
from hnbench.evaluation.evaluate import evaluate
from hnbench.metrics import ranks_from_scores
from hnbench.models import load_model
from hnbench.results.record import read_result
from hnbench.tasks.retrieval import score_embeddings

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def micro_encoder(micro_config):
    import torch

    torch.manual_seed(0)
    return load_model("hnb-micro", model_config=str(micro_config))


def _formats(tmp_path):
    pairs = make_pairs(tmp_path, n=10)
    write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    with open(tmp_path / "m.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["image", "caption"])
        w.writerows(pairs)
    folder = tmp_path / "folder"
    make_pairs(folder, n=10)
    write_jsonl(folder / "metadata.jsonl", [{"file_name": p, "caption": c} for p, c in pairs])
    import datasets

    hf = datasets.Dataset.from_dict({"image": [str(tmp_path / p) for p, _ in pairs],
                                     "caption": [c for _, c in pairs]}).cast_column("image", datasets.Image())
    hf.save_to_disk(str(tmp_path / "hf"))
    return {"jsonl": tmp_path / "m.jsonl", "csv": tmp_path / "m.csv", "imagefolder": folder,
            "hf": tmp_path / "hf"}


def test_evaluate_each_generic_format(micro_encoder, tmp_path):
    results = {}
    for fmt, path in _formats(tmp_path).items():
        r = evaluate(micro_encoder, str(path), output_dir=tmp_path / "out" / fmt, progress=False, num_workers=0)
        assert r.dataset["n_images"] == 10 and r.dataset["n_captions"] == 10
        for direction in ("t2i", "i2t"):
            m = r.metrics[direction]
            assert 0 <= m["R@1"] <= m["R@5"] <= m["R@10"] == 100.0
            assert m["n_queries"] == 10
        results[fmt] = r
    # same images and captions in every format → identical scores
    ref = results["jsonl"].metrics
    for r in results.values():
        assert r.metrics == ref


def test_result_file_and_per_query_agree_with_brute_force(micro_encoder, tmp_path):
    pairs = make_pairs(tmp_path, n=9)
    rows = [{"image": p, "caption": [c, c.upper()] if i % 3 == 0 else c} for i, (p, c) in enumerate(pairs)]
    path = write_jsonl(tmp_path / "m.jsonl", rows)
    r = evaluate(micro_encoder, str(path), output_dir=tmp_path / "out", progress=False, num_workers=0)
    on_disk = read_result(r.path)
    assert on_disk.metrics == r.metrics and on_disk.model["fingerprint"] == micro_encoder.info.fingerprint
    d = json.loads(open(r.path).read())
    for key in ("schema_version", "hnbench_version", "created", "model", "dataset", "metrics", "ci95", "tokens",
                "settings", "timings", "per_query"):
        assert key in d
    assert set(d["model"]) >= {"arch", "pretrained", "fingerprint", "context_length", "n_params"}
    assert set(d["dataset"]) >= {"name", "protocol", "fingerprint", "n_images", "n_captions"}
    assert d["dataset"]["n_captions"] == 12
    # brute force over the full score matrix
    ds = load_dataset(str(path))
    from hnbench.evaluation.encode import encode_images, encode_texts

    v = encode_images(micro_encoder, ds.images, progress=False, num_workers=0).vectors
    t = encode_texts(micro_encoder, ds.captions, progress=False).vectors
    S = t @ v.T
    ranks_t2i, _ = ranks_from_scores(S, np.arange(len(t) + 1), ds.caption_image)
    order = np.argsort(ds.caption_image, kind="stable")
    ptr = np.searchsorted(ds.caption_image[order], np.arange(ds.n_images + 1))
    ranks_i2t, _ = ranks_from_scores(S.T, ptr, order)
    pq = pd.read_parquet(tmp_path / "out" / d["per_query"])
    assert pq[pq.direction == "t2i"]["rank"].tolist() == ranks_t2i.tolist()
    assert pq[pq.direction == "i2t"]["rank"].tolist() == ranks_i2t.tolist()
    assert r.metrics["t2i"]["R@1"] == pytest.approx(100 * np.mean(ranks_t2i <= 1))
    assert r.metrics["i2t"]["R@5"] == pytest.approx(100 * np.mean(ranks_i2t <= 5))
    row = pq[pq.direction == "t2i"].iloc[0]
    assert row.gt_id == ds.image_ids[0] and row.best_wrong_id != row.gt_id


def test_truncation_is_counted(micro_encoder, tmp_path):
    pairs = make_pairs(tmp_path, n=4)
    rows = [{"image": p, "caption": c + " and more words" * (20 if i < 3 else 0)} for i, (p, c) in enumerate(pairs)]
    r = evaluate(micro_encoder, str(write_jsonl(tmp_path / "m.jsonl", rows)), progress=False, num_workers=0)
    assert r.tokens["context_length"] == 32 and r.tokens["n_truncated"] == 3
    assert r.tokens["share_truncated"] == pytest.approx(0.75)


def test_corrupt_image_errors_or_is_skipped(micro_encoder, tmp_path):
    pairs = make_pairs(tmp_path, n=6)
    (tmp_path / pairs[2][0]).write_bytes(b"not a png at all")
    path = write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    out = tmp_path / "out"
    with pytest.raises(ImageLoadError, match="images/img_002.png"):
        evaluate(micro_encoder, str(path), output_dir=out, progress=False, num_workers=0)
    assert not out.exists() or not list(out.glob("*.json"))  # nothing half-written
    r = evaluate(micro_encoder, str(path), output_dir=out, progress=False, num_workers=2, skip_invalid=True,
                 batch_size=2)
    assert r.dataset["n_images"] == 5 and r.dataset["skipped"] == {"unreadable image": 1}


def test_score_embeddings_perfect_and_multi_caption():
    rng = np.random.default_rng(0)
    v = rng.normal(size=(5, 8)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    caption_image = np.array([0, 1, 2, 3, 4, 4])
    metrics, ci95, _ = score_embeddings(v, v[caption_image], caption_image, ks=(1, 5))
    assert metrics["t2i"]["R@1"] == 100.0 and metrics["i2t"]["R@1"] == 100.0
    assert metrics["t2i"]["n_queries"] == 6 and metrics["i2t"]["n_queries"] == 5
    assert ci95["t2i"]["R@1"] == pytest.approx([100 * 0.025 ** (1 / 6), 100.0])  # 6 of 6: exact, not [100, 100]


def test_cli_eval_prints_table_and_writes(micro_config, tmp_path, capsys):
    pairs = make_pairs(tmp_path, n=5)
    path = write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    rc = main(["-q", "eval", "--model", "hnb-micro", "--model-config", str(micro_config), "--dataset", str(path),
               "--output", str(tmp_path / "out"), "--num-workers", "0"])
    out = capsys.readouterr().out
    assert rc == 0 and "| t2i" in out and "R@1" in out and "wrote" in out
    written = out.strip().splitlines()[-1].removeprefix("wrote ")
    assert read_result(written).dataset["n_images"] == 5
    rc = main(["-q", "eval", "--model", "hnb-micro", "--model-config", str(micro_config), "--dataset",
               str(tmp_path / "missing.jsonl"), "--output", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("hnbench: error:") and "missing.jsonl" in err and len(err.splitlines()) == 1


def test_image_load_error_names_item(tmp_path):
    from hnbench.data.base import FileImages

    Image.new("RGB", (4, 4)).save(tmp_path / "ok.png")
    src = FileImages([str(tmp_path / "ok.png"), str(tmp_path / "gone.png")], ["ok", "gone"])
    assert src.open(0).size == (4, 4)
    with pytest.raises(ImageLoadError, match="'gone'.*file not found"):
        src.open(1)


def test_fp32_encoding_turns_tf32_off_and_restores_it():
    import torch

    from hnbench.evaluation.encode import _strict_fp32

    before = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    with _strict_fp32():
        assert not torch.backends.cudnn.allow_tf32 and not torch.backends.cuda.matmul.allow_tf32
    assert (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32) == before


def test_a_new_result_changing_setting_renames_the_result_file(micro_encoder, tmp_path):
    """Which settings name a result file is derived from ``option(identity=True)``: a field added to
    EvalSettings (here in a subclass made in the test, nothing else edited) changes the file name when it is
    set, and leaves it as it was at its default (recorded "if_set")."""
    import dataclasses

    from hnbench.evaluation.evaluate import run_evaluation
    from hnbench.settings import EvalSettings, option

    data = load_dataset(str(write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c}
                                                                for p, c in make_pairs(tmp_path, n=6)])))
    extended = dataclasses.make_dataclass(
        "ExtendedSettings", [("temperature_scale", float, option(1.0, record="if_set", identity=True,
                                                                 help="a result-changing knob (test only)"))],
        bases=(EvalSettings,))
    plain = run_evaluation(micro_encoder, data, EvalSettings(progress=False, num_workers=0, ci=False), tmp_path / "a")
    same = run_evaluation(micro_encoder, data, extended(progress=False, num_workers=0, ci=False), tmp_path / "b")
    changed = run_evaluation(micro_encoder, data, extended(progress=False, num_workers=0, ci=False,
                                                           temperature_scale=2.0), tmp_path / "c")
    names = [Path(r.path).name for r in (plain, same, changed)]
    assert names[0] == names[1] != names[2]
    assert changed.settings["temperature_scale"] == 2.0 and "temperature_scale" in changed.settings["identity"]
    assert read_result(changed.path).stem() == Path(changed.path).stem  # the record re-derives its own name
    # a setting that does not change the numbers (batch size) does not rename the file
    other = run_evaluation(micro_encoder, data, EvalSettings(progress=False, num_workers=0, ci=False, batch_size=3),
                           tmp_path / "d")
    assert Path(other.path).name == names[0]


def test_stored_results_keep_their_file_names():
    """The identity settings are derived now; every stored result (written before) re-derives its own stem."""
    stored = sorted((REPO / "leaderboards" / "results").rglob("*.json"))
    assert len(stored) > 50
    for path in stored:
        assert read_result(path).stem() == path.stem, path
