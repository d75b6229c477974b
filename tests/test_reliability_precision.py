"""Every precision ``--help`` offers runs (pixels are cast to the weights' dtype); others are refused."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import make_pairs, write_jsonl

from hnbench.cli import build_parser, main
from hnbench.errors import ConfigError
from hnbench.evaluation.encode import encode_images, encode_texts
from hnbench.evaluation.evaluate import evaluate
from hnbench.models import load_model
from hnbench.validate import PRECISIONS

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def _offered() -> tuple[str, ...]:
    ev = next(a for a in build_parser()._subparsers._group_actions[0].choices["eval"]._actions
              if a.dest == "precision")
    return tuple(ev.choices)


def test_help_offers_exactly_the_supported_precisions():
    assert _offered() == PRECISIONS == ("fp32", "fp16", "bf16")


@pytest.fixture
def manifest(tmp_path):
    pairs = make_pairs(tmp_path, n=6)
    return write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])


def _embeddings(encoder, manifest):
    from hnbench.data import load_dataset

    ds = load_dataset(str(manifest))
    img = encode_images(encoder, ds.images, batch_size=4, num_workers=0, progress=False)
    txt = encode_texts(encoder, ds.captions, batch_size=4, num_workers=0, progress=False)
    return img.vectors, txt.vectors


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_open_clip_low_precision_runs_and_agrees_with_fp32(manifest, micro_config, precision, device):
    ref = _embeddings(load_model("hnb-micro", model_config=str(micro_config), device=device), manifest)
    low = load_model("hnb-micro", model_config=str(micro_config), precision=precision, device=device)
    assert low.model.visual.conv1.weight.dtype == {"fp16": torch.float16, "bf16": torch.bfloat16}[precision]
    for a, b in zip(ref, _embeddings(low, manifest)):
        assert a.dtype == b.dtype == np.float32 and np.isfinite(b).all()
        cos = (a * b).sum(1)  # both L2-normalised
        assert cos.min() > 0.98, cos


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_hf_clip_low_precision_runs_and_is_recorded(manifest, hf_clip_dir, precision, device):
    ref = _embeddings(load_model(str(hf_clip_dir), device=device), manifest)
    low = load_model(str(hf_clip_dir), precision=precision, device=device)
    assert low.model.dtype == {"fp16": torch.float16, "bf16": torch.bfloat16}[precision]
    assert low.info.extra["precision"] == precision  # so the cache keeps fp16 and fp32 embeddings apart
    for a, b in zip(ref, _embeddings(low, manifest)):
        assert np.isfinite(b).all() and (a * b).sum(1).min() > 0.98


@pytest.mark.parametrize("precision", PRECISIONS)
def test_cli_eval_runs_every_offered_precision(capsys, tmp_path, manifest, micro_config, precision):
    rc = main(["-q", "eval", "--model", "hnb-micro", "--model-config", str(micro_config), "--dataset", str(manifest),
               "--output", str(tmp_path / "out"), "--num-workers", "0", "--precision", precision, "--json"])
    result = json.loads(capsys.readouterr().out)
    assert rc == 0 and result["settings"]["precision"] == precision
    assert result["metrics"]["t2i"]["n_queries"] == 6


def test_unknown_precision_refused_by_cli_and_api(capsys, tmp_path, manifest, micro_config):
    with pytest.raises(SystemExit) as e:
        main(["eval", "--model", "hnb-micro", "--model-config", str(micro_config), "--dataset", str(manifest),
              "--output", str(tmp_path / "out"), "--precision", "fp8"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert e.value.code == 2 and len(err) == 1 and "--precision" in err[0] and "'fp8'" in err[0]
    for call in (lambda: evaluate("hnb-micro", str(manifest), model_config=str(micro_config), precision="fp8",
                                  output_dir=tmp_path / "out"),
                 lambda: load_model("hnb-micro", model_config=str(micro_config), precision="fp8")):
        with pytest.raises(ConfigError, match="--precision must be one of fp32, fp16, bf16, got 'fp8'"):
            call()
    assert not (tmp_path / "out").exists() and not list(Path(os.environ["HNBENCH_CACHE"]).rglob("*.emb"))
