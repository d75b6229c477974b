"""Data-parallel encoding under torchrun: the same numbers as one process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import make_pairs, write_jsonl

from hnbench import distributed as dist
from hnbench.evaluation.cache import EmbeddingCache, decode_shard, list_models
from hnbench.evaluation.evaluate import evaluate
from hnbench.models import load_model


def test_batch_share_splits_batches_round_robin():
    for n, bs, world in [(10, 4, 2), (1, 4, 3), (17, 3, 4), (64, 64, 2), (0, 8, 2)]:
        shares = [dist.batch_share(n, bs, r, world) for r in range(world)]
        assert np.array_equal(np.sort(np.concatenate(shares)), np.arange(n))
        for r, share in enumerate(shares):
            # whole single-process batches only: batch b goes to rank b % world
            assert all((i // bs) % world == r for i in share)
    assert dist.batch_share(10, 4, 1, 2).tolist() == [4, 5, 6, 7]


class FakeGroup(dist.DistContext):
    """Two ranks in one process: collectives return canned values of the other rank."""

    def __init__(self, rank: int, others: list):
        super().__init__(rank=rank, world_size=2)
        self.others, self.sent = others, []

    def all_gather(self, obj):
        return [obj, *self.others] if self.rank == 0 else [*self.others, obj]

    def broadcast(self, obj=None):
        self.sent.append(obj)
        return obj if self.rank == 0 else self.others.pop(0)


def test_a_failure_on_any_rank_is_raised_on_every_rank():
    ok = FakeGroup(0, [(None, {"images": 3, "texts": 5})])
    assert dist.encode_share(ok, lambda: {"images": 4, "texts": 6}) == {"images": 7, "texts": 11}
    other_failed = FakeGroup(0, [("ImageLoadError: image 'x' (x.png): cannot decode", {})])
    with pytest.raises(dist.DistributedError, match="rank 1 failed.*x.png"):
        dist.encode_share(other_failed, lambda: {"images": 4})

    def boom():
        raise ValueError("mine")

    with pytest.raises(ValueError, match="mine"):
        dist.encode_share(FakeGroup(1, [(None, {})]), boom)
    with pytest.raises(dist.DistributedError, match="disagree"):
        dist.check_same(FakeGroup(0, ["b"]), "model", "a")
    main = FakeGroup(0, [])
    with pytest.raises(RuntimeError):
        dist.on_main(main, lambda: (_ for _ in ()).throw(RuntimeError("search failed")))
    assert main.sent == [("error", "RuntimeError: search failed")]
    with pytest.raises(dist.DistributedError, match="rank 0 failed: RuntimeError"):
        dist.on_main(FakeGroup(1, [("error", "RuntimeError: search failed")]), lambda: 1)
    assert dist.on_main(FakeGroup(1, [("ok", 42)]), lambda: 1) == 42


def test_single_process_is_not_distributed(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    ctx = dist.from_env()
    assert not ctx.enabled and ctx.is_main and ctx.all_gather(1) == [1] and ctx.broadcast(2) == 2
    assert dist.rank_device("cuda", ctx) == "cuda"
    assert dist.rank_device("cuda", dist.DistContext(rank=1, world_size=2, local_rank=1)) == "cuda:1"


def test_auto_mode_never_joins_a_group_someone_else_set_up(monkeypatch, tmp_path):
    import torch.distributed as td

    monkeypatch.setenv("WORLD_SIZE", "2")
    assert dist.wanted(None) and not dist.wanted(False)
    td.init_process_group("gloo", init_method=f"file://{tmp_path / 'rdv'}", rank=0, world_size=1)
    try:  # e.g. a trainer evaluating on rank 0 only: auto must not wait for the other ranks
        assert not dist.wanted(None) and dist.wanted(True)
    finally:
        td.destroy_process_group()
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert not dist.wanted(None)


def test_eval_and_train_share_one_context_and_its_timeout_policy(monkeypatch, micro_config, tmp_path, capsys):
    """``hnbench eval`` under torchrun and ``hnbench train`` build the same :class:`DistContext` through
    :func:`hnbench.distributed.from_env`, so one timeout setting governs both: a bad ``HNBENCH_DIST_TIMEOUT_S``
    is refused by each (one line, exit 2) before any process group, model or data, and nothing is written."""
    import datetime

    from hnbench.cli import main
    from hnbench.errors import ConfigError
    from hnbench.train import distributed as train_dist
    from hnbench.train.trainer import TrainConfig, train

    assert train_dist.DistContext is dist.DistContext  # the README's training import path: the same class
    for value, seconds in (("90", 90), ("2.5", 2.5), ("", 6 * 3600)):
        monkeypatch.setenv(dist.TIMEOUT_ENV, value)
        assert dist.timeout_from_env() == datetime.timedelta(seconds=seconds)
    manifest = write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in make_pairs(tmp_path, 4)])
    monkeypatch.setenv("WORLD_SIZE", "2")  # as torchrun would: both entry points go distributed
    for bad in ("ten minutes", "0", "-5", "nan", "inf"):
        monkeypatch.setenv(dist.TIMEOUT_ENV, bad)
        with pytest.raises(ConfigError, match=dist.TIMEOUT_ENV):
            dist.from_env()
    with pytest.raises(ConfigError, match=dist.TIMEOUT_ENV):
        evaluate("hnb-micro", str(manifest), model_config=str(micro_config), output_dir=tmp_path / "out")
    rc = main(["-q", "eval", "--model", "hnb-micro", "--model-config", str(micro_config), "--dataset", str(manifest),
               "--output", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and dist.TIMEOUT_ENV in err and "Traceback" not in err
    with pytest.raises(ConfigError, match=dist.TIMEOUT_ENV):
        train(TrainConfig.from_dict({"model": "hnb-micro", "model_config": str(micro_config),
                                     "dataset": str(manifest), "output": str(tmp_path / "run")}), progress=False)
    assert not (tmp_path / "out").exists() and not (tmp_path / "run").exists()


def _torchrun(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    torchrun = Path(sys.executable).with_name("torchrun")
    cmd = [str(torchrun) if torchrun.exists() else shutil.which("torchrun"), "--standalone", "--nproc_per_node=2",
           "-m", "hnbench", "-q", *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", dist.TIMEOUT_ENV: "600"}  # a configured timeout, not the default
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_torchrun_two_gloo_ranks_equal_one_process(micro_config, tmp_path):
    import torch
    from safetensors.torch import save_file

    torch.manual_seed(0)
    enc = load_model("hnb-micro", model_config=str(micro_config))
    ckpt = tmp_path / "micro.safetensors"  # every rank must load the same weights
    save_file({k: v.contiguous() for k, v in enc.model.state_dict().items()}, str(ckpt))
    enc = load_model("hnb-micro", str(ckpt), model_config=str(micro_config))
    pairs = make_pairs(tmp_path, n=14)
    rows = [{"image": p, "caption": [c, c.upper()] if i % 3 == 0 else c} for i, (p, c) in enumerate(pairs)]
    manifest = write_jsonl(tmp_path / "m.jsonl", rows)
    common = ["eval", "--model", "hnb-micro", "--model-config", str(micro_config), "--pretrained", str(ckpt),
              "--dataset", str(manifest), "--num-workers", "0", "--batch-size", "4", "--json"]

    run = _torchrun([*common, "--output", str(tmp_path / "dist"), "--cache-dir", str(tmp_path / "c2")], tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    multi = json.loads(run.stdout)  # rank 0 only prints
    single = evaluate(enc, str(manifest), output_dir=tmp_path / "single", cache_dir=tmp_path / "c1",
                      num_workers=0, batch_size=4, progress=False)
    assert multi["settings"]["encoding"]["world_size"] == 2
    assert multi["settings"]["encoding"]["encoded"] == {"images": 14, "texts": 19}
    assert multi["metrics"] == single.metrics and multi["ci95"] == single.ci95
    qa = pd.read_parquet(tmp_path / "dist" / multi["per_query"])
    qb = pd.read_parquet(tmp_path / "single" / single.per_query)
    pd.testing.assert_frame_equal(qa, qb, check_exact=False, atol=1e-6)
    assert (qa["rank"] == qb["rank"]).all()
    # both ranks wrote image shards (batches 0 and 2 on rank 0, 1 and 3 on rank 1); the 19 captions are one batch
    (row,) = list_models(tmp_path / "c2")
    assert row["image_items"] == 14 and row["image_shards"] == 2 and row["text_items"] == 19
    c1, c2 = EmbeddingCache.for_encoder(enc, tmp_path / "c1"), EmbeddingCache.for_encoder(enc, tmp_path / "c2")
    assert c1.key == c2.key
    keys = np.concatenate([decode_shard(p.read_bytes()).keys for p in c1.images.shards()])
    v1, v2 = c1.images.lookup(keys)[1], c2.images.lookup(keys)[1]
    # the same batches as one process: bit-identical here; only the thread count (1 vs 2) could differ
    np.testing.assert_allclose(v1, v2, rtol=0, atol=1e-6)

    # --no-cache: a private cache for the hand-over, deleted afterwards
    run = _torchrun([*common, "--output", str(tmp_path / "nocache"), "--cache-dir", str(tmp_path / "c3"),
                     "--no-cache"], tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    nocache = json.loads(run.stdout)
    assert nocache["metrics"] == single.metrics and nocache["settings"]["cache"] is False
    assert not [p for p in (tmp_path / "c3").iterdir()]


@pytest.mark.gpu
def test_torchrun_nccl_two_gpus_equal_one_process(micro_config, tmp_path):
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    from safetensors.torch import save_file

    torch.manual_seed(0)
    enc = load_model("hnb-micro", model_config=str(micro_config))
    ckpt = tmp_path / "micro.safetensors"
    save_file({k: v.contiguous() for k, v in enc.model.state_dict().items()}, str(ckpt))
    manifest = write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in make_pairs(tmp_path, 16)])
    common = ["eval", "--model", "hnb-micro", "--model-config", str(micro_config), "--pretrained", str(ckpt),
              "--dataset", str(manifest), "--num-workers", "0", "--batch-size", "4", "--json", "--device", "cuda"]
    run = _torchrun([*common, "--output", str(tmp_path / "dist"), "--cache-dir", str(tmp_path / "c2")], tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    single = evaluate(load_model("hnb-micro", str(ckpt), model_config=str(micro_config), device="cuda"),
                      str(manifest), cache_dir=tmp_path / "c1", num_workers=0, batch_size=4, progress=False,
                      device="cuda")
    assert json.loads(run.stdout)["metrics"] == single.metrics
