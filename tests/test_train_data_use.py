"""What training does with its data and its options: every image every epoch (a smaller last batch, said and
recorded), a recipe pointed at one's own data, a γ whose loss means nothing, and how an interrupted run goes on."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
import torch
import torch.multiprocessing as mp
from conftest import assert_one_line_error, make_pairs, write_jsonl
from safetensors.torch import load_file

from hnbench.cli import main
from hnbench.errors import ConfigError
from hnbench.train.batches import GlobalBatchSampler, epoch_batch_sizes
from hnbench.train.config import TrainConfig
from hnbench.train.losses import hn_clip_loss
from hnbench.train.state import resume_hint
from hnbench.train.step import MicroBatch, Objective, run_step
from hnbench.train.trainer import train


def _data(root, n):
    pairs = make_pairs(root, n=n)
    return write_jsonl(root / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])


def _argv(micro_config, data, out, *extra):
    return ["train", "--model", "hnb-micro", "--model-config", str(micro_config), "--dataset", str(data),
            "--batch-size", "4", "--num-workers", "0", "--lr", "1e-3", "--warmup-steps", "1", "--log-every", "1",
            "--output", str(out), *extra]


def _cfg(micro_config, data, out, **kw):
    base = {"model": "hnb-micro", "model_config": str(micro_config), "dataset": str(data), "epochs": 2,
            "batch_size": 4, "lr": 1e-3, "warmup_steps": 1, "num_workers": 0, "log_every": 1}
    return TrainConfig.from_dict({**base, **kw, "output": str(out)})


def _meta(run):
    return json.loads((run / "train_config.json").read_text())


def _log(run):
    return [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]


# --- every image every epoch -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("n", "batch", "world", "sizes"), [
    (30, 16, 1, [16, 14]),  # a smaller last batch
    (17, 16, 1, [17]),  # a lone left-over pair joins the batch before it: a batch of one has no negatives
    (33, 16, 1, [16, 17]),
    (32, 16, 1, [16, 16]),
    (5, 16, 1, [5]),  # fewer images than a batch: one batch of them all
    (30, 16, 2, [16, 14]),  # two processes: 7 pairs each in the last step
    (31, 16, 2, [16, 14]),  # one image an epoch is left out so that both ranks hold as many pairs
    (17, 16, 2, [16]),
])
def test_an_epoch_uses_every_image_in_batches_every_rank_can_share(n, batch, world, sizes):
    assert epoch_batch_sizes(n, batch, world, "keep") == sizes
    assert epoch_batch_sizes(n, batch, world, "drop") == ([batch] * (n // batch) or [n])
    seen_skipped = set()
    generators = [torch.Generator().manual_seed(0) for _ in range(world)]
    samplers = [GlobalBatchSampler(n, batch, generator=g, rank=r, world_size=world)
                for r, g in enumerate(generators)]
    for _ in range(3):  # epochs: each rank draws the same global batches and holds an equal slice of each
        per_rank = [list(s) for s in samplers]
        issued = [list(s.issued) for s in samplers]
        assert all(x == issued[0] for x in issued) and [len(b) for b in issued[0]] == sizes
        assert all(len(r) == len(sizes) for r in per_rank)
        for k, size in enumerate(sizes):
            assert all(len(r[k]) == size // world for r in per_rank)
            assert sum((r[k] for r in per_rank), []) == issued[0][k]
        trained = sum(issued[0], [])
        assert len(set(trained)) == len(trained) == sum(sizes)
        seen_skipped |= set(range(n)) - set(trained)
    if sum(sizes) == n:
        assert not seen_skipped
    else:  # the few left out differ from epoch to epoch (the order is reshuffled)
        assert len(seen_skipped) > n - sum(sizes)


def _said(caplog, words):
    """The lines hnbench logged that contain ``words``, with their levels."""
    return [(r.levelname, r.getMessage()) for r in caplog.records
            if r.name.startswith("hnbench") and words in r.getMessage()]


def test_a_smaller_last_batch_is_trained_said_in_one_line_and_recorded(micro_config, tmp_path, caplog):
    data = _data(tmp_path, n=10)
    run = tmp_path / "run"
    assert main(_argv(micro_config, data, run, "--epochs", "2")) == 0
    said = _said(caplog, "--batch-size 4")
    assert len(said) == 1 and said[0][0] == "INFO"  # nothing left out: information, not a warning
    assert "10 training images" in said[0][1] and "last batch has 2 pairs" in said[0][1]
    meta = _meta(run)
    assert meta["steps"] == 6 and meta["total_steps"] == 6  # batches of 4, 4 and 2, twice
    assert meta["config"]["last_batch"] == "keep"
    assert meta["epoch_batches"] == {"last_batch": "keep", "batches": 3, "last_batch_size": 2, "images": 10,
                                     "images_skipped": 0}
    assert all(r["loss"] > 0 for r in _log(run))  # the 2-pair batch is a real contrastive step


def test_a_lone_left_over_pair_joins_the_last_batch_instead_of_a_batch_of_one(micro_config, tmp_path, caplog):
    data = _data(tmp_path, n=9)
    run = tmp_path / "run"
    assert main(_argv(micro_config, data, run, "--epochs", "1")) == 0
    said = _said(caplog, "--batch-size 4")
    assert len(said) == 1 and "one image left over joins" in said[0][1] and "(5 pairs" in said[0][1]
    meta = _meta(run)
    assert meta["steps"] == 2 and meta["epoch_batches"]["last_batch_size"] == 5
    assert all(r["loss"] > 0 for r in _log(run))


def test_last_batch_drop_keeps_full_batches_and_warns_what_it_skips(micro_config, tmp_path, caplog):
    data = _data(tmp_path, n=10)
    run = tmp_path / "run"
    assert main(["-q", *_argv(micro_config, data, run, "--epochs", "2", "--last-batch", "drop")]) == 0
    said = _said(caplog, "--batch-size 4")
    assert len(said) == 1 and said[0][0] == "WARNING" and "skips the last 2 images" in said[0][1]
    meta = _meta(run)
    assert meta["steps"] == 4 and meta["epoch_batches"]["images_skipped"] == 2
    assert meta["config"]["last_batch"] == "drop"


def test_an_epoch_that_fills_its_batches_says_nothing_about_them(micro_config, tmp_path, caplog):
    data = _data(tmp_path, n=8)
    assert main(_argv(micro_config, data, tmp_path / "run", "--epochs", "1")) == 0
    assert not _said(caplog, "--batch-size 4")
    assert _meta(tmp_path / "run")["epoch_batches"]["last_batch_size"] == 4


@pytest.mark.parametrize("stop", [2, 3])  # before the epoch's smaller last batch, and right after it
def test_resume_with_a_smaller_last_batch_equals_an_uninterrupted_run(micro_config, tmp_path, stop):
    data = _data(tmp_path, n=10)  # batches of 4, 4 and 2
    full = train(_cfg(micro_config, data, tmp_path / "full", diag_every=1), progress=False)
    train(_cfg(micro_config, data, tmp_path / "cut", diag_every=1, stop_at_step=stop), progress=False)
    assert _meta(tmp_path / "cut")["steps"] == stop
    resumed = train(_cfg(micro_config, data, tmp_path / "cut", diag_every=1, resume=str(tmp_path / "cut")),
                    progress=False)
    a, b = load_file(str(full)), load_file(str(resumed))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert [r["loss"] for r in _log(tmp_path / "full")] == [r["loss"] for r in _log(tmp_path / "cut")]
    assert _meta(tmp_path / "cut")["steps"] == 6


def test_a_run_started_before_last_batch_existed_resumes_only_as_it_trained(micro_config, tmp_path):
    """Its state records no last_batch: it trained drop_last's full batches, and continues only with them."""
    data = _data(tmp_path, n=10)
    run = tmp_path / "run"
    train(_cfg(micro_config, data, run, last_batch="drop", stop_at_step=1), progress=False)
    saved = run / "last" / "train_config.json"
    older = json.loads(saved.read_text())
    del older["last_batch"]  # what a run of an hnbench without the option wrote
    saved.write_text(json.dumps(older))
    with pytest.raises(ConfigError, match="cannot resume.*last_batch: 'drop' → 'keep'"):
        train(_cfg(micro_config, data, run, resume=str(run)), progress=False)
    train(_cfg(micro_config, data, run, last_batch="drop", resume=str(run)), progress=False)
    assert _meta(run)["steps"] == 4


def _towers_and_batches(micro_config, sizes):
    from hnbench.models import load_model
    from hnbench.models.towers import CLIPTowers

    torch.manual_seed(0)
    enc = load_model("hnb-micro", model_config=str(micro_config))
    towers = CLIPTowers(enc.model.train(), "open_clip")
    caps = [f"a {c} square number {i}" for i, c in enumerate(["red", "blue", "green", "cyan", "white", "pink"])]
    tokens = enc.tokenize(caps).tokens
    pixels = torch.randn(len(caps), 3, 32, 32, generator=torch.Generator().manual_seed(1))
    out, start = [], 0
    for size in sizes:
        sl = slice(start, start + size)
        out.append(MicroBatch(pixels[sl], tokens[sl], list(range(start, start + size)), caps[sl]))
        start += size
    return towers, out


def test_cached_accumulation_over_a_smaller_last_micro_batch_equals_one_batch_of_them_all(micro_config):
    """An epoch's last optimizer step may pair a full micro-batch with a smaller one (14 images at 4 × 2)."""
    obj = Objective(hn_clip_loss, "hn", 0.5, mask_duplicates=True)
    grads = []
    losses = []
    for sizes, mode in (([6], "loss"), ([4, 2], "cached")):
        towers, micro = _towers_and_batches(micro_config, sizes)
        losses.append(run_step(towers, towers, micro, obj, mode=mode))
        grads.append({n: p.grad.clone() for n, p in towers.named_parameters() if p.grad is not None})
    assert losses[1] == pytest.approx(losses[0], abs=1e-5)
    assert grads[0].keys() == grads[1].keys() and grads[0]
    for k in grads[0]:
        assert torch.allclose(grads[0][k], grads[1][k], rtol=1e-4, atol=1e-6), k


def _train_worker(rank: int, world: int, port: int, cfg: dict) -> None:
    import os

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    train(TrainConfig.from_dict(cfg), progress=False)


@pytest.mark.slow
def test_two_processes_train_an_uneven_epoch_in_equal_steps_as_one_process_does(micro_config, tmp_path):
    import socket

    data = _data(tmp_path, n=14)  # batches of 4, 4, 4 and 2 (1 pair per rank); steps [4, 4] and [4, 2]
    base = {"model": "hnb-micro", "model_config": str(micro_config), "dataset": str(data), "loss": "hn",
            "epochs": 1, "batch_size": 4, "accum_steps": 2, "accum_mode": "cached", "lr": 1e-4,
            "warmup_steps": 1, "num_workers": 0, "log_every": 1, "seed": 3}
    one = train(TrainConfig.from_dict({**base, "output": str(tmp_path / "one")}), progress=False)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_train_worker, args=(2, port, {**base, "output": str(tmp_path / "two")}), nprocs=2, join=True)
    log1, log2 = _log(tmp_path / "one"), _log(tmp_path / "two")
    assert len(log1) == len(log2) == 2
    assert all(a["loss"] == pytest.approx(b["loss"], abs=1e-5) for a, b in zip(log1, log2))
    w1, w2 = load_file(str(one)), load_file(str(tmp_path / "two" / "checkpoint.safetensors"))
    diff = torch.cat([(w1[k] - w2[k]).abs().reshape(-1) for k in w1])
    assert float(diff.max()) <= 2 * base["lr"] * 2 + 1e-6  # Adam's ±lr steps on float-noise gradients, as in
    assert float((diff > 5e-6).float().mean()) < 2e-3  # test_train_distributed
    meta = _meta(tmp_path / "two")
    assert meta["world_size"] == 2 and meta["epoch_batches"]["last_batch_size"] == 2
    assert meta["epoch_batches"]["images_skipped"] == 0


# --- a recipe pointed at one's own data ------------------------------------------------------------------------
def test_a_dataset_on_the_command_line_replaces_the_recipes_whole_data_spec_and_says_so(micro_config, tmp_path,
                                                                                         caplog):
    data = _data(tmp_path, n=8)
    run = tmp_path / "run"
    argv = ["-q", "train", "--recipe", "tiny-synthdense-hn", "--model", "hnb-micro", "--model-config",
            str(micro_config), "--pretrained", "", "--dataset", str(data), "--eval-dataset", str(data),
            "--epochs", "1", "--batch-size", "4", "--diag-every", "0", "--num-workers", "0", "--output", str(run)]
    assert main(argv) == 0  # was refused over the recipe's protocol, which a manifest does not read
    said = [line for level, line in _said(caplog, "replaces recipe tiny-synthdense-hn") if level == "WARNING"]
    assert len(said) == 2
    assert f"--dataset {data} replaces" in said[0] and "protocol 'train'" in said[0] and "n_families" in said[0]
    assert f"--eval-dataset {data} replaces" in said[1] and "eval_protocol 'test'" in said[1]
    config = _meta(run)["config"]
    assert (config["dataset"], config["dataset_options"]) == (str(data), {})
    assert TrainConfig.from_dict(config).data_spec().protocol is None  # the default "train": only for benchmarks
    assert (config["eval_dataset"], config["eval_protocol"], config["eval_dataset_options"]) == (str(data), None, {})
    assert config["pretrained"] is None and config["gamma"] == 0.5  # "": unset; the rest of the recipe holds
    evals = [json.loads(x) for x in (run / "diagnostics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in evals if r["kind"] == "eval"] == [0, 1]


def test_the_recipes_own_dataset_keeps_its_data_spec(micro_config, tmp_path, caplog):
    recipe = tmp_path / "r.toml"
    data = _data(tmp_path, n=8)
    recipe.write_text(f'dataset = "{data}"\n\n[dataset_options]\ncaption_column = "caption"\n')
    run = tmp_path / "run"
    assert main(["-q", "train", "--recipe", str(recipe), *_argv(micro_config, data, run, "--epochs", "1")[1:]]) == 0
    assert not _said(caplog, "replaces recipe")
    assert _meta(run)["config"]["dataset_options"] == {"caption_column": "caption"}


def test_a_recipe_without_a_dataset_names_the_default_one():
    from hnbench.train.config import replace_data_spec

    recipe = {"protocol": "test", "dataset_options": {"n_families": {"test": 8}}}
    assert replace_data_spec(recipe, "dataset", "synthdense", "r") is None and len(recipe) == 2
    said = replace_data_spec(recipe, "dataset", "other.jsonl", "r")
    assert said is not None and "protocol 'test', dataset_options n_families" in said and recipe == {}


@pytest.mark.parametrize("clear", [["--protocol", ""], ["--set", "protocol=null"]])
def test_an_empty_protocol_or_set_null_clears_a_recipes_protocol(micro_config, tmp_path, capsys, clear):
    data = _data(tmp_path, n=8)
    recipe = tmp_path / "r.toml"
    recipe.write_text(f'dataset = "{data}"\nprotocol = "test"\n')
    argv = ["-q", "train", "--recipe", str(recipe), "--model", "hnb-micro", "--model-config", str(micro_config),
            "--epochs", "1", "--batch-size", "4", "--num-workers", "0", "--output", str(tmp_path / "run")]
    assert main(argv) == 2  # the recipe's protocol on data that has none
    assert_one_line_error(capsys.readouterr().err, "--protocol is not read")
    assert main([*argv, *clear]) == 0
    assert _meta(tmp_path / "run")["config"]["protocol"] is None


# --- a γ whose loss means nothing ------------------------------------------------------------------------------
@pytest.mark.parametrize("flags", [["--gamma", "1e30"], ["--gamma", "2e5"], ["--set", "gamma=1e30"],
                                   ["--gamma", "2e6", "--max-logit-scale", "10"]])
def test_a_gamma_whose_logits_fp32_cannot_resolve_is_refused_before_loading(tmp_path, capsys, flags):
    argv = ["train", "--model", "no-such-model", "--dataset", str(tmp_path / "missing.jsonl"),
            "--output", str(tmp_path / "run"), *flags]
    assert main(argv) == 2  # neither the model nor the data is loaded: their errors would come first
    assert_one_line_error(capsys.readouterr().err, "gamma", "too large", "2^24")
    assert not (tmp_path / "run").exists()


def test_gamma_is_bounded_through_its_product_with_the_largest_logit_scale():
    TrainConfig(gamma=1e5, max_logit_scale=100.0).validate()  # γ·s = 1e7 < 2^24
    TrainConfig(gamma=1e6, max_logit_scale=10.0).validate()
    with pytest.raises(ConfigError, match="gamma 1e\\+06 is too large for max_logit_scale 100"):
        TrainConfig(gamma=1e6, max_logit_scale=100.0).validate()


def test_a_run_whose_loss_is_exactly_zero_from_the_first_step_stops_untrained(tmp_path, capsys):
    """Items 0 (red) and 1 (green): their captions have a cosine just below 0 under the bundled tiny model, so a
    large γ pushes each negative out of the softmax (exactly 0 in fp32); at γ = 0.5 the same batch trains."""
    pairs = make_pairs(tmp_path, n=2)
    data = write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    argv = ["-q", "train", "--model", "hnbench-tiny", "--pretrained", "synthdense", "--dataset", str(data),
            "--epochs", "3", "--batch-size", "2", "--num-workers", "0", "--log-every", "1"]
    assert main([*argv, "--gamma", "1000", "--output", str(tmp_path / "silent")]) == 2
    assert_one_line_error(capsys.readouterr().err, "exactly 0.0 at the first step", "--gamma 1000",
                          "no checkpoint written")
    assert not (tmp_path / "silent").exists()  # nothing was trained, nothing of value written
    assert main([*argv, "--gamma", "0.5", "--epochs", "1", "--output", str(tmp_path / "run")]) == 0
    assert _log(tmp_path / "run")[0]["loss"] > 0 and (tmp_path / "run" / "checkpoint.safetensors").is_file()


def test_a_first_step_weighted_to_zero_by_a_warm_up_schedule_trains_on(micro_config, tmp_path):
    """FineLIP's margin-hinge swap: its only term is ramped from weight 0, so the first step's loss is exactly 0
    while the term itself is not: nothing is saturated, and the run trains."""
    data = _data(tmp_path, n=8)
    run = tmp_path / "run"
    train(_cfg(micro_config, data, run, objective="finelip", finelip_swap="margin-hinge", finelip_num_patches=20,
               loss="hn", epochs=1), progress=False)
    log = _log(run)
    assert log[0]["loss"] == 0.0 and log[0]["terms"]["hinge"] > 0 and log[1]["loss"] > 0
    assert (run / "checkpoint.safetensors").is_file()


# --- Ctrl-C ----------------------------------------------------------------------------------------------------
def _keyboard_sigint() -> None:
    """In the child, before Python starts: SIGINT as a terminal delivers it, whatever the test runner ignores (a
    background job, nohup, setsid … & start with it ignored, and a child inherits that)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_during_training_names_the_exact_resume_flag_and_resuming_continues(micro_config, tmp_path):
    data = _data(tmp_path, n=8)
    run = tmp_path / "my run"  # a space: the flag is shown quoted, ready to paste
    argv = _argv(micro_config, data, run, "--epochs", "10000", "--save-every", "1")
    child = subprocess.Popen([sys.executable, "-m", "hnbench", "-q", *argv], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, preexec_fn=_keyboard_sigint)
    try:
        deadline = time.monotonic() + 120
        while not (run / "last" / "trainer_state.pt").is_file() and child.poll() is None:
            assert time.monotonic() < deadline, "no state saved within 2 minutes"
            time.sleep(0.05)
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=120)
    finally:
        child.kill()
    lines = err.strip().splitlines()
    assert child.returncode == 130 and "Traceback" not in err, err
    saved = torch.load(run / "last" / "trainer_state.pt", map_location="cpu", weights_only=True)["step"]
    assert lines[-1] == (f"hnbench: interrupted; its state at step {saved} is saved in {run / 'last'}: continue "
                         f"with --resume '{run}' (and the same options)")
    assert not (run / "checkpoint.safetensors").exists()
    assert main(["-q", *argv, "--resume", str(run), "--stop-at-step", str(saved + 1)]) == 0
    assert _meta(run)["steps"] == saved + 1


def test_the_interrupted_line_says_when_there_is_nothing_to_resume(tmp_path):
    assert resume_hint(tmp_path / "never-made").endswith("no resumable state was saved yet (a state is saved at "
                                                         "each epoch end and every --save-every steps): start it again")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "log.jsonl").write_text("")
    assert resume_hint(tmp_path / "run").endswith("start again with --overwrite")
