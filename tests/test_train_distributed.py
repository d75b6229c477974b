"""The distributed HN-CLIP form: local losses over gathered features equal the single-process loss.

Simulated ranks check the algebra exactly; two real gloo processes check the gather-with-gradient
and DDP (loss and gradients), the trainer under two processes against one process, and that the ranks
wait for rank 0's evaluation under the one timeout policy of :mod:`hnbench.distributed`.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import time
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
import torch.nn.functional as F
from conftest import make_pairs, write_jsonl

from hnbench.distributed import TIMEOUT_ENV, DistContext
from hnbench.train.distributed import DistributedHNCLIPLoss
from hnbench.train.losses import duplicate_mask, hn_clip_loss


class _SimulatedRank(DistContext):
    """Rank ``rank`` of ``world`` in one process: ``gather`` hands back the whole batch the rows were cut from."""

    def __init__(self, rank: int, world: int, *batches: torch.Tensor):
        super().__init__(rank=rank, world_size=world)
        self.batches = batches

    def gather(self, x, *, with_grad=True):
        b = x.shape[0]
        (whole,) = [w for w in self.batches if w.shape[1:] == x.shape[1:]
                    and torch.equal(w[self.rank * b:(self.rank + 1) * b], x)]
        return whole if with_grad else whole.detach()


def _feats(b: int, d: int = 16, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    v, t = torch.randn(2, b, d, generator=g, dtype=torch.float64)
    return F.normalize(t + 0.8 * v, dim=-1), F.normalize(t, dim=-1)


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("gamma", [0.0, 0.5])
def test_mean_of_local_losses_is_global_loss_and_gradients_match(world, gamma):
    big_b = 8
    v0, t0 = _feats(big_b)
    mask = duplicate_mask(None, ["a", "b", "a", "c", "d", "e", "f", "c"])
    g_src = F.normalize(t0 + 0.3, dim=-1)
    for kw in ({}, {"mask": mask}, {"mask": mask, "label_smoothing": 0.1}, {"text_features_for_g": g_src}):
        v, t = v0.clone().requires_grad_(), t0.clone().requires_grad_()
        s = torch.tensor(30.0, dtype=torch.float64, requires_grad=True)
        ref = hn_clip_loss(v, t, s, gamma, **kw)
        ref.backward()
        ref_grads = [x.grad.clone() for x in (v, t, s)]
        v2, t2 = v0.clone().requires_grad_(), t0.clone().requires_grad_()
        s2 = torch.tensor(30.0, dtype=torch.float64, requires_grad=True)
        b = big_b // world
        g_all = kw.get("text_features_for_g")
        locals_ = [hn_clip_loss(v2[r * b:(r + 1) * b], t2[r * b:(r + 1) * b], s2, gamma,
                                mask=kw.get("mask"), label_smoothing=kw.get("label_smoothing", 0.0),
                                text_features_for_g=None if g_all is None else g_all[r * b:(r + 1) * b],
                                context=_SimulatedRank(r, world, v2, t2, *([] if g_all is None else [g_all])))
                   for r in range(world)]
        total = torch.stack(locals_).mean()
        total.backward()
        assert torch.allclose(total, ref, rtol=0, atol=1e-12), kw
        for got, want in zip((v2.grad, t2.grad, s2.grad), ref_grads):
            assert torch.allclose(got, want, rtol=0, atol=1e-12), kw


def test_world_size_one_is_the_plain_loss():
    v, t = _feats(6)
    assert torch.equal(hn_clip_loss(v, t, 20.0, 0.5, context=DistContext()), hn_clip_loss(v, t, 20.0, 0.5))
    assert torch.equal(DistributedHNCLIPLoss(0.5)(v, t, 20.0), hn_clip_loss(v, t, 20.0, 0.5))


def test_local_loss_validates_the_gathered_batch():
    v, t = _feats(4)
    with pytest.raises(ValueError, match="same batch size"):  # 3 ranks cannot hold 4 rows each in a batch of 4
        hn_clip_loss(v, t, 10.0, context=_SimulatedRank(0, 3, v, t))


# ----------------------------------------------------------------------------- real processes (gloo)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(rank: int, world: int, port: int) -> None:
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
                       "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank)})


def _ddp_worker(rank: int, world: int, port: int, root: str) -> None:
    _env(rank, world, port)
    torch.set_num_threads(1)
    from torch.nn.parallel import DistributedDataParallel

    from hnbench.distributed import from_env
    from hnbench.models.towers import CLIPTowers

    ctx = from_env("cpu")
    data = torch.load(Path(root) / "batch.pt", weights_only=True)
    model = _micro_model(root)
    model.load_state_dict(data["state"])
    ddp = DistributedDataParallel(CLIPTowers(model, "open_clip"))
    b = data["pixels"].shape[0] // world
    sl = slice(rank * b, (rank + 1) * b)
    out = ddp(data["pixels"][sl], data["tokens"][sl])
    loss = hn_clip_loss(out["image"], out["text"], out["scale"], 0.5, mask=data["mask"], context=ctx)
    loss.backward()
    mean_loss = loss.detach().clone()
    torch.distributed.all_reduce(mean_loss)
    if rank == 0:
        grads = {n: p.grad for n, p in ddp.module.model.named_parameters() if p.grad is not None}
        torch.save({"loss": mean_loss / world, "grads": grads}, Path(root) / "ddp.pt")
    ctx.close()


def _micro_model(root: str):
    from hnbench.models import load_model

    return load_model("hnb-micro", model_config=str(Path(root) / "hnb-micro.json")).model.train()


@pytest.mark.slow
def test_two_process_gloo_ddp_equals_single_process_on_concatenated_batch(micro_config, tmp_path):
    from hnbench.models.towers import CLIPTowers

    (tmp_path / "hnb-micro.json").write_text(micro_config.read_text())
    torch.manual_seed(0)
    model = _micro_model(str(tmp_path))
    enc_tok = __import__("hnbench.models", fromlist=["load_model"]).load_model(
        "hnb-micro", model_config=str(micro_config))
    captions = [f"a {c} square number {i}" for i, c in enumerate("red green blue red cyan white pink red".split())]
    captions[5] = captions[1]  # an exact duplicate caption: the mask must be applied globally
    tokens = enc_tok.tokenize(captions).tokens
    pixels = torch.randn(8, 3, 32, 32)
    mask = duplicate_mask(None, captions)
    torch.save({"state": model.state_dict(), "pixels": pixels, "tokens": tokens, "mask": mask}, tmp_path / "batch.pt")
    towers = CLIPTowers(model, "open_clip")
    out = towers(pixels, tokens)
    ref = hn_clip_loss(out["image"], out["text"], out["scale"], 0.5, mask=mask)
    ref.backward()
    mp.spawn(_ddp_worker, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True)
    got = torch.load(tmp_path / "ddp.pt", weights_only=True)
    assert torch.allclose(got["loss"], ref.detach(), rtol=0, atol=1e-5)
    ref_grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert set(got["grads"]) == set(ref_grads)
    for n, g in ref_grads.items():
        assert torch.allclose(got["grads"][n], g, rtol=1e-4, atol=1e-6), n


def _train_worker(rank: int, world: int, port: int, cfg: dict) -> None:
    _env(rank, world, port)
    torch.set_num_threads(1)
    from hnbench.train.trainer import TrainConfig, train

    train(TrainConfig.from_dict(cfg), progress=False)


@pytest.mark.slow
@pytest.mark.parametrize("accum_mode,extra", [
    ("loss", {}),
    ("cached", {"token_loss_weight": 0.5, "mask_duplicates": True, "g_source": "frozen_init"}),
    ("loss", {"objective": "finelip", "finelip_num_patches": 20}),
    ("loss", {"objective": "finelip", "finelip_num_patches": 20, "finelip_swap": "margin-hinge"}),
])
def test_trainer_two_processes_equals_one_process(micro_config, tmp_path, accum_mode, extra):
    from safetensors.torch import load_file

    from hnbench.train.trainer import TrainConfig, train

    pairs = make_pairs(tmp_path, n=16)
    rows = [{"image": p, "caption": c if i % 5 else "the same caption"} for i, (p, c) in enumerate(pairs)]
    data = write_jsonl(tmp_path / "m.jsonl", rows)
    base = {"model": "hnb-micro", "model_config": str(micro_config), "dataset": str(data), "loss": "hn",
            "epochs": 1, "batch_size": 4, "accum_steps": 2, "accum_mode": accum_mode, "lr": 1e-4,
            "warmup_steps": 1, "num_workers": 0, "log_every": 1, "seed": 3, **extra}
    one = train(TrainConfig.from_dict({**base, "output": str(tmp_path / "one")}), progress=False)
    mp.spawn(_train_worker, args=(2, _free_port(), {**base, "output": str(tmp_path / "two")}), nprocs=2, join=True)
    log1 = [json.loads(x) for x in (tmp_path / "one" / "log.jsonl").read_text().splitlines()]
    log2 = [json.loads(x) for x in (tmp_path / "two" / "log.jsonl").read_text().splitlines()]
    assert len(log1) == len(log2) == 2
    for a, b in zip(log1, log2):
        assert a["loss"] == pytest.approx(b["loss"], abs=1e-5)
    w1, w2 = load_file(str(one)), load_file(str(tmp_path / "two" / "checkpoint.safetensors"))
    assert w1.keys() == w2.keys()
    diff = torch.cat([(w1[k] - w2[k]).abs().reshape(-1) for k in w1])
    # Adam turns float-noise gradients (e.g. the attention key bias, whose true gradient is 0) into
    # ±lr steps, so a few elements may differ by up to 2·lr per step; everything else agrees tightly.
    assert float(diff.max()) <= 2 * base["lr"] * 2 + 1e-6
    assert float((diff > 5e-6).float().mean()) < 2e-3, float((diff > 5e-6).float().mean())
    meta = json.loads((tmp_path / "two" / "train_config.json").read_text())
    assert meta["world_size"] == 2 and meta["steps"] == 2
    if extra.get("objective") == "finelip":  # every term by name, and the module trained alike
        for a, b in zip(log1, log2):
            assert a["terms"].keys() == b["terms"].keys() and all(
                a["terms"][k] == pytest.approx(b["terms"][k], abs=1e-4) for k in a["terms"])
        m1 = load_file(str(tmp_path / "one" / "objective_modules.safetensors"))
        m2 = load_file(str(tmp_path / "two" / "objective_modules.safetensors"))
        assert m1.keys() == m2.keys()
        assert max(float((m1[k] - m2[k]).abs().max()) for k in m1) <= 2 * 2e-4 * 2 + 1e-6


# ----------------------------------------------------------------------------- waiting for rank 0 (timeout policy)

SHORT_TIMEOUT_S = 5  # the default group's timeout in the test below (torch's default on NCCL: 10 minutes)
EVAL_SLEEP_S = 12  # rank 0's per-epoch evaluation takes longer than that
POLICY_TIMEOUT_S = 120  # HNBENCH_DIST_TIMEOUT_S: bounds the test if the policy were not honoured


def _load_slow_eval(*, manifest: str, **_: object):
    """A real dataset whose images are read through a source that sleeps before the first one."""
    from hnbench.data import FileImages, load_dataset

    class SlowImages(FileImages):
        def open(self, i: int):
            if i == 0:
                time.sleep(EVAL_SLEEP_S)
            return super().open(i)

    ds = load_dataset(manifest)
    ds.images = SlowImages(ds.images.paths, ds.images.ids)
    return ds


def _slow_eval_worker(rank: int, world: int, port: int, cfg: dict, root: str) -> None:
    _env(rank, world, port)
    os.environ[TIMEOUT_ENV] = str(POLICY_TIMEOUT_S)
    torch.set_num_threads(1)
    from hnbench.registry import DATASETS
    from hnbench.train import train
    from hnbench.train.trainer import TrainConfig

    DATASETS.register("slow-eval", _load_slow_eval)
    # the default group, set up before the trainer, with a short timeout
    torch.distributed.init_process_group("gloo", timeout=datetime.timedelta(seconds=SHORT_TIMEOUT_S))
    train(TrainConfig.from_dict(cfg), progress=False)
    control = Path(root) / f"control-{rank}.txt"
    if rank == 1:  # control: the same wait for rank 0, as a barrier of the default group, does time out
        try:
            torch.distributed.barrier()
            control.write_text("completed")
        except RuntimeError as e:
            control.write_text(f"failed: {e}")
    else:  # stays away from the barrier until rank 1 has given up on it (bounded: a hang fails the test)
        deadline = time.monotonic() + 10 * SHORT_TIMEOUT_S
        while not (Path(root) / "control-1.txt").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
    torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_ranks_wait_for_a_slow_rank0_evaluation_past_a_short_default_timeout(micro_config, tmp_path):
    """Rank 0's per-epoch evaluation (a real evaluation of a dataset whose image source sleeps 12 s) outlasts
    the 5-s timeout of the default process group, which the workers set up themselves before training (as a
    program embedding the trainer may; it stands for the 10-minute NCCL default the trainer used to keep).

    It still completes because of :mod:`hnbench.distributed`'s policy: the trainer's context joins that group
    for DDP and the feature gather, but every wait for rank 0 (after its evaluation, checkpoint and export)
    goes through a gloo group the context creates with ``HNBENCH_DIST_TIMEOUT_S`` (120 s here), so the
    waiting rank never sits in a collective with the short timeout. The control at the end shows that the
    same wait as a barrier of the default group does time out.
    """
    pairs = make_pairs(tmp_path, n=8)
    data = write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    cfg = {"model": "hnb-micro", "model_config": str(micro_config), "dataset": str(data), "loss": "hn",
           "epochs": 1, "batch_size": 4, "lr": 1e-4, "warmup_steps": 1, "num_workers": 0, "seed": 3,
           "eval_dataset": "slow-eval", "eval_dataset_options": {"manifest": str(data)}, "eval_at_start": False,
           "output": str(tmp_path / "run")}
    mp.spawn(_slow_eval_worker, args=(2, _free_port(), cfg, str(tmp_path)), nprocs=2, join=True)
    run = tmp_path / "run"
    meta = json.loads((run / "train_config.json").read_text())
    assert meta["world_size"] == 2 and meta["steps"] == 2 and not meta["stopped_early"]
    (ev,) = [r for r in map(json.loads, (run / "diagnostics.jsonl").read_text().splitlines()) if r["kind"] == "eval"]
    assert ev["epoch"] == 1 and 0 <= ev["t2i_R@1"] <= 100 and (run / "eval" / "epoch-001").is_dir()
    control = (tmp_path / "control-1.txt").read_text()
    assert control.startswith("failed:") and "timed out" in control.lower(), control
