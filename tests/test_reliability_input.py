"""Bad input is one line and exit 2, found before anything loads.

Each CLI case asserts the exact outcome: status 2, one line on stderr naming the offending item, no
traceback, and nothing written.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import make_pairs, write_jsonl

from hnbench.cli import main
from hnbench.data import load_dataset
from hnbench.errors import ConfigError, DataError
from hnbench.evaluation.evaluate import evaluate

REPO = Path(__file__).resolve().parent.parent


def _cli(capsys, *argv: str) -> tuple[int, str, list[str]]:
    try:
        rc = main(["-q", *argv])
    except SystemExit as e:  # argparse's own errors (an unknown --precision)
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, [line for line in err.splitlines() if line.strip()]


def _assert_one_line(rc: int, err: list[str], *names: str) -> None:
    assert rc == 2, err
    assert len(err) == 1, err
    assert err[0].startswith("hnbench") and "Traceback" not in err[0]
    for name in names:
        assert name in err[0], err


def _manifest(root: Path, n: int = 6) -> Path:
    pairs = make_pairs(root, n=n)
    return write_jsonl(root / "manifest.jsonl", [{"image": p, "caption": c} for p, c in pairs])


# --- arguments ----------------------------------------------------------------------------------
BAD_ARGS = [(["--k", "0"], "--k"), (["--k", "5", "-1"], "--k"), (["--batch-size", "0"], "--batch-size"),
            (["--batch-size", "-3"], "--batch-size"), (["--device", "tpu"], "--device"),
            (["--precision", "fp8"], "--precision"), (["--num-workers", "-1"], "--num-workers"),
            (["--context-length", "0"], "--context-length")]


@pytest.mark.parametrize("bad,name", BAD_ARGS, ids=[" ".join(b) for b, _ in BAD_ARGS])
def test_bad_eval_argument_is_one_line_before_loading(capsys, tmp_path, bad, name):
    # Neither the model nor the dataset exists: an error naming the flag proves it was checked first.
    rc, out, err = _cli(capsys, "eval", "--model", "no-such-arch", "--dataset", str(tmp_path / "absent.jsonl"),
                        "--output", str(tmp_path / "out"), *bad)
    _assert_one_line(rc, err, name)
    assert out == "" and not (tmp_path / "out").exists()


@pytest.mark.parametrize("bad,name", [(["--device", "tpu"], "--device"), (["--in-batch-size", "0"], "--in-batch-size"),
                                      (["--encode-batch-size", "-3"], "--encode-batch-size"),
                                      (["--edges", "0.5", "0.2"], "--edges"), (["--threshold", "7"], "--threshold"),
                                      (["--context-length", "0"], "--context-length")])
@pytest.mark.parametrize("n_models", [1, 2])
def test_bad_hardness_argument_is_one_line_before_loading(capsys, tmp_path, bad, name, n_models):
    models = ["--model", "no-such-arch"] * n_models  # two models go through hardness_many
    rc, out, err = _cli(capsys, "hardness", "--dataset", str(tmp_path / "absent.jsonl"), *models,
                        "--output", str(tmp_path / "out"), *bad)
    _assert_one_line(rc, err, name)
    assert out == "" and not (tmp_path / "out").exists()


def test_more_pretrained_than_models_is_one_line_before_loading(capsys, tmp_path):
    rc, out, err = _cli(capsys, "hardness", "--dataset", str(tmp_path / "absent.jsonl"), "--model", "no-such-arch",
                        "--model", "other-arch", *["--pretrained", "w.pt"] * 3, "--output", str(tmp_path / "out"))
    _assert_one_line(rc, err, "3 --pretrained values for 2 models")
    assert out == "" and not (tmp_path / "out").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a CUDA GPU")
@pytest.mark.parametrize("command", ["eval", "hardness"])
def test_device_cuda_without_gpu_is_one_line(capsys, tmp_path, command):
    rc, _, err = _cli(capsys, command, "--model", "no-such-arch", "--dataset", str(tmp_path / "absent.jsonl"),
                      "--output", str(tmp_path / "out"), "--device", "cuda")
    _assert_one_line(rc, err, "--device cuda", "no CUDA GPU")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kwargs,name", [({"ks": (0,)}, "--k"), ({"batch_size": 0}, "--batch-size"),
                                         ({"precision": "fp8"}, "--precision"), ({"device": "tpu"}, "--device")])
def test_python_api_validates_the_same_way(tmp_path, kwargs, name):
    with pytest.raises(ConfigError, match=name):
        evaluate("no-such-arch", str(tmp_path / "absent.jsonl"), output_dir=tmp_path / "out", **kwargs)
    assert not (tmp_path / "out").exists()


def _unwritable_dir(tmp_path: Path) -> Path:
    """A directory this process cannot create files in (root ignores modes: use a read-only mount)."""
    if os.geteuid() != 0:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        return ro
    import tempfile

    try:
        with tempfile.TemporaryFile(dir="/sys"):
            pytest.skip("running as root and /sys is writable: no read-only directory to try")
    except OSError:
        return Path("/sys")


@pytest.mark.parametrize("case", ["file", "under-file", "read-only"])
@pytest.mark.parametrize("command", ["eval", "hardness"])
def test_output_dir_not_writable_is_one_line_before_loading(capsys, tmp_path, case, command):
    blocker = tmp_path / "taken"
    blocker.write_text("not a directory")
    target = {"file": blocker, "under-file": blocker / "results",
              "read-only": _unwritable_dir(tmp_path) / "results"}[case]
    rc, _, err = _cli(capsys, command, "--model", "no-such-arch", "--dataset", str(tmp_path / "absent.jsonl"),
                      "--output", str(target))
    _assert_one_line(rc, err, "--output", str(target))
    assert blocker.read_text() == "not a directory"  # the file in the way is left as it was
    assert case == "file" or not target.exists()


def test_unreadable_cache_shard_is_one_line_naming_it(capsys, tmp_path, micro_config):
    manifest = _manifest(tmp_path / "data")
    common = ["eval", "--model", "hnb-micro", "--model-config", str(micro_config), "--dataset", str(manifest),
              "--num-workers", "0", "--cache-dir", str(tmp_path / "cache")]
    assert _cli(capsys, *common, "--output", str(tmp_path / "out1"))[0] == 0
    shard = next((tmp_path / "cache").rglob("image/*.emb"))
    shard.unlink()
    shard.mkdir()  # unreadable as a file whoever we run as (tests often run as root, where chmod blocks nothing)
    rc, _, err = _cli(capsys, *common, "--output", str(tmp_path / "out2"))
    _assert_one_line(rc, err, str(shard), "unreadable", "--no-cache")
    assert not (tmp_path / "out2").exists()


def _pickle_payload(marker: Path) -> dict:
    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    return {"weight": torch.zeros(1), "payload": Payload()}


@pytest.mark.parametrize("kind", ["local-dir", "hf-dir", "adapter"])
def test_pickle_in_a_model_directory_is_one_line(capsys, tmp_path, micro_config, kind):
    from conftest import MICRO_CONFIG

    marker, d = tmp_path / "executed", tmp_path / kind
    d.mkdir()
    payload = _pickle_payload(marker)
    if kind == "local-dir":
        (d / "open_clip_config.json").write_text(json.dumps({"model_cfg": MICRO_CONFIG, "preprocess_cfg": {}}))
        torch.save(payload, d / "open_clip_pytorch_model.bin")
        model = ["--model", f"local-dir:{d}"]
    elif kind == "hf-dir":
        pytest.importorskip("transformers")
        from transformers import CLIPConfig

        CLIPConfig(text_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                                "num_attention_heads": 2},
                   vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                                  "num_attention_heads": 2, "image_size": 32, "patch_size": 8},
                   projection_dim=24).save_pretrained(d)
        torch.save(payload, d / "pytorch_model.bin")
        model = ["--model", str(d)]
    else:
        pytest.importorskip("peft")
        (d / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 2, "lora_alpha": 2,
                                                           "target_modules": ["c_fc"]}))
        (d / "hnbench_base.json").write_text(json.dumps({"model": "hnb-micro", "model_config": str(micro_config)}))
        torch.save(payload, d / "adapter_model.bin")
        model = ["--model", "hnb-micro", "--model-config", str(micro_config), "--pretrained", str(d)]
    manifest = _manifest(tmp_path / "data", n=2)
    rc, _, err = _cli(capsys, "eval", *model, "--dataset", str(manifest), "--output", str(tmp_path / "out"),
                      "--num-workers", "0")
    errors = [line for line in err if line.startswith("hnbench: error")]
    assert rc == 2 and len(errors) == 1 and not any("Traceback" in line for line in err), err
    assert str(d) in errors[0] and "refused to unpickle" in errors[0]
    assert not marker.exists() and not (tmp_path / "out").exists()


def test_hardness_results_of_another_dataset_is_one_line_before_loading(capsys, tmp_path, micro_config):
    a = _manifest(tmp_path / "a", n=4)
    b = tmp_path / "b" / "manifest.jsonl"
    pairs = make_pairs(b.parent, n=4, seed=1)
    write_jsonl(b, [{"image": p, "caption": f"another set: {c}", "id": f"b{i}"} for i, (p, c) in enumerate(pairs)])
    rc, _, _ = _cli(capsys, "eval", "--model", "hnb-micro", "--model-config", str(micro_config), "--dataset", str(a),
                    "--output", str(tmp_path / "res"), "--num-workers", "0")
    result = next((tmp_path / "res").glob("*.json"))
    rc, _, err = _cli(capsys, "hardness", "--dataset", str(b), "--model", "no-such-arch", "--results", str(result),
                      "--output", str(tmp_path / "hard"))
    _assert_one_line(rc, err, "--results", str(result), "not in it")
    assert not (tmp_path / "hard").exists()


def test_ctrl_c_exits_130_with_one_line_and_keeps_what_was_encoded(capsys, tmp_path, micro_config, monkeypatch):
    import signal

    from hnbench.data.base import FileImages
    from hnbench.registry import DATASETS

    manifest = _manifest(tmp_path / "data", n=8)

    class InterruptAt6(FileImages):
        def open(self, i):
            if i == 6:  # a real SIGINT, as from the keyboard, halfway through the images
                os.kill(os.getpid(), signal.SIGINT)
            return super().open(i)

    def loader(interrupt: bool, **_):
        ds = load_dataset(str(manifest))
        if interrupt:
            ds.images = InterruptAt6(ds.images.paths, ds.images.ids)
        return ds

    monkeypatch.setitem(DATASETS._targets, "interrupted-set", lambda **kw: loader(True, **kw))
    monkeypatch.setitem(DATASETS._targets, "resumed-set", lambda **kw: loader(False, **kw))
    common = ["--model", "hnb-micro", "--model-config", str(micro_config), "--num-workers", "0",
              "--batch-size", "2", "--cache-dir", str(tmp_path / "cache")]
    # SIGINT as the keyboard delivers it, however pytest was started: a process started with SIGINT ignored (a
    # background job, nohup, setsid … &) keeps it ignored, and the signal would never become a KeyboardInterrupt
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        rc, _, err = _cli(capsys, "eval", *common, "--dataset", "interrupted-set", "--output", str(tmp_path / "out"))
    finally:
        signal.signal(signal.SIGINT, previous)
    assert rc == 130 and len(err) == 1 and "interrupted" in err[0] and "Traceback" not in err[0], err
    assert not (tmp_path / "out").exists()
    # The three finished batches (6 images) were flushed to the cache: the rerun encodes only the last 2.
    rc, _, _ = _cli(capsys, "eval", *common, "--dataset", "resumed-set", "--output", str(tmp_path / "out"), "--json")
    result = json.loads(next((tmp_path / "out").glob("*.json")).read_text())
    assert rc == 0 and result["settings"]["encoding"]["cached"]["images"] == 6
    assert result["settings"]["encoding"]["encoded"]["images"] == 2


# --- manifests ----------------------------------------------------------------------------------
def test_manifest_non_utf8_names_file_and_line(tmp_path):
    pairs = make_pairs(tmp_path, n=3)
    lines = [json.dumps({"image": p, "caption": c}).encode() for p, c in pairs]
    lines[1] = lines[1].replace(b"square", b"squ\xe9re")  # Latin-1, as a careless export writes it
    path = tmp_path / "m.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    for skip in (False, True):
        with pytest.raises(DataError, match=rf"{path}:2: not UTF-8 \(byte 0xe9"):
            load_dataset(str(path), skip_invalid=skip)


def test_manifest_non_utf8_is_one_line_from_the_cli(capsys, tmp_path):
    path = tmp_path / "m.csv"
    path.write_bytes(b"image,caption\nimages/a.png,caf\xe9\n")
    rc, _, err = _cli(capsys, "eval", "--model", "no-such-arch", "--dataset", str(path), "--output",
                      str(tmp_path / "out"), "--skip-invalid")
    _assert_one_line(rc, err, f"{path}:2", "UTF-8")
    assert not (tmp_path / "out").exists()


def test_csv_with_byte_order_mark_reads(tmp_path):
    pairs = make_pairs(tmp_path, n=3)
    buf = io.StringIO()
    csv.writer(buf).writerows([("image", "caption"), *pairs])  # Excel's dialect: \r\n, quoted commas
    (tmp_path / "excel.csv").write_bytes(b"\xef\xbb\xbf" + buf.getvalue().encode())
    ds = load_dataset(str(tmp_path / "excel.csv"))
    assert ds.n_images == 3 and ds.captions == [c for _, c in pairs]


def test_exact_duplicate_rows_warn_with_the_count(tmp_path, caplog):
    pairs = make_pairs(tmp_path, n=5)
    rows = [{"image": p, "caption": c} for p, c in pairs]
    path = write_jsonl(tmp_path / "m.jsonl", rows + [rows[0], rows[3]])
    with caplog.at_level("WARNING", logger="hnbench"):
        ds = load_dataset(str(path))
    assert ds.n_images == 5 and ds.n_captions == 7
    warnings = [r.getMessage() for r in caplog.records if "repeat an earlier row" in r.getMessage()]
    assert len(warnings) == 1 and "2 rows repeat" in warnings[0] and "line 6 = line 1" in warnings[0]


@pytest.mark.parametrize("ref", ["../outside.png", "ABSOLUTE"])
def test_image_path_outside_the_manifest_folder_is_refused(tmp_path, capsys, ref):
    root = tmp_path / "set"
    pairs = make_pairs(root, n=2)
    outside = tmp_path / "outside.png"
    outside.write_bytes((root / pairs[0][0]).read_bytes())
    ref = str(outside) if ref == "ABSOLUTE" else ref
    path = write_jsonl(root / "m.jsonl", [{"image": pairs[1][0], "caption": "fine"}, {"image": ref, "caption": "x"}])
    with pytest.raises(DataError, match=rf"{path}:2: image path .* points outside {root}"):
        load_dataset(str(path), skip_invalid=True)
    rc, _, err = _cli(capsys, "eval", "--model", "no-such-arch", "--dataset", str(path), "--output",
                      str(tmp_path / "out"))
    _assert_one_line(rc, err, "--allow-outside-paths")
    ds = load_dataset(str(path), allow_outside_paths=True)
    assert ds.n_images == 2 and any(Path(p).resolve() == outside.resolve() for p in ds.images.paths)


def test_numeric_caption_is_named_as_non_text(tmp_path):
    pairs = make_pairs(tmp_path, n=3)
    rows = [{"image": p, "caption": c} for p, c in pairs]
    rows[1]["caption"] = 42
    path = write_jsonl(tmp_path / "m.jsonl", rows)
    with pytest.raises(DataError, match=r"non-text caption \(int '42'; captions must be strings\) for image"):
        load_dataset(str(path))
    ds = load_dataset(str(path), skip_invalid=True)
    assert ds.skipped == {"non-text caption": [pairs[1][0]]} and ds.n_images == 2


def test_skipped_empty_caption_is_counted_once(tmp_path):
    pairs = make_pairs(tmp_path, n=3)
    rows = [{"image": p, "caption": c} for p, c in pairs]
    rows[0]["caption"] = ""
    ds = load_dataset(str(write_jsonl(tmp_path / "m.jsonl", rows)), skip_invalid=True)
    assert ds.skipped == {"empty caption": [pairs[0][0]]} and ds.n_skipped() == 1 and ds.n_images == 2


# --- smaller items -------------------------------------------------------------------------------
def test_random_init_is_seeded_and_recorded(tmp_path, micro_config):
    from hnbench.models import load_model

    a = load_model("hnb-micro", model_config=str(micro_config))
    torch.manual_seed(1234)  # the caller's RNG state does not change the initialisation
    b = load_model("hnb-micro", model_config=str(micro_config))
    assert a.info.fingerprint == b.info.fingerprint and a.info.extra["init_seed"] == 0
    r = evaluate(b, str(_manifest(tmp_path, n=3)), progress=False, num_workers=0, use_cache=False)
    assert r.settings["init_seed"] == 0


@pytest.mark.slow
def test_cli_logs_only_its_own_loggers_and_header_names_the_protocol(tmp_path, micro_config):
    manifest = _manifest(tmp_path / "data", n=3)
    cmd = [sys.executable, "-m", "hnbench", "eval", "--model", "hnb-micro", "--model-config", str(micro_config),
           "--dataset", str(manifest), "--output", str(tmp_path / "out"), "--num-workers", "0", "--k", "1"]  # K < 3: no warning
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    loud = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    quiet = subprocess.run([*cmd[:3], "-q", *cmd[3:]], capture_output=True, text=True, env=env, timeout=300)
    assert loud.returncode == quiet.returncode == 0, loud.stderr
    assert "root:" not in loud.stderr and "INFO hnbench" in loud.stderr  # open_clip's INFO lines are not ours
    assert quiet.stderr.strip() == ""
    stem = next((tmp_path / "out").glob("*.json")).stem
    name = f"{tmp_path.name}-data"  # data/manifest.jsonl: both generic, so the folders above name it
    assert f"__{name}-default__" in stem and f"on {name}/default:" in loud.stdout


@pytest.mark.slow
def test_quiet_also_hides_transformers_progress_bars(tmp_path, hf_clip_dir):
    manifest = _manifest(tmp_path / "data", n=3)
    cmd = [sys.executable, "-m", "hnbench", "eval", "--model", str(hf_clip_dir), "--dataset", str(manifest),
           "--output", str(tmp_path / "out"), "--num-workers", "0", "--no-cache", "--k", "1"]  # K < 3 images: no warning
    # an in-process `main(["-q", ...])` of an earlier test sets HF_HUB_DISABLE_PROGRESS_BARS in this process
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_DISABLE_PROGRESS_BARS"} | {"PYTHONPATH": str(REPO)}
    loud = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    quiet = subprocess.run([*cmd[:3], "-q", *cmd[3:]], capture_output=True, text=True, env=env, timeout=300)
    assert loud.returncode == quiet.returncode == 0, loud.stderr
    assert "Loading weights" in loud.stderr  # transformers' own bar, shown without -q
    assert quiet.stderr.strip() == ""


# --- found in review: more inputs that must be one line --------------------------------------------
@pytest.mark.parametrize("setting, words", [("epochs=abc", "--epochs (epochs) must be an integer"),
                                            ("lr=abc", "--lr (lr) must be a number"),
                                            ("dataset_options=3", "dataset_options must be a table"),
                                            ("lora_r=0", "--lora-r (lora_r) must be a positive integer"),
                                            ("eval_every=0", "--eval-every"), ("save_every=-1", "--save-every")])
def test_wrong_type_or_range_from_set_is_one_line_before_loading(capsys, tmp_path, setting, words):
    rc, out, err = _cli(capsys, "train", "--model", "no-such-arch", "--dataset", str(tmp_path / "absent.jsonl"),
                        "--output", str(tmp_path / "run"), "--set", setting)
    _assert_one_line(rc, err, words)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("options, words", [({"loss": "HN"}, "loss must be one of"),  # dispatched on the exact name
                                            ({"num_workers": -1}, "--num-workers"), ({"log_every": 0}, "log_every"),
                                            ({"device": "cuda:x"}, "--device")])
def test_bad_training_options_are_refused_by_the_config(options, words):
    from hnbench.train.trainer import TrainConfig

    with pytest.raises(ConfigError, match=words):
        TrainConfig.from_dict(options)


def test_caption_files_with_bad_bytes_or_a_missing_column_are_handled(tmp_path):
    from hnbench.hardness.captions import load_captions

    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"a caption\n\xff\xfe\n")
    with pytest.raises(DataError, match="bad.txt:2: not UTF-8"):
        load_captions(bad)
    rows = tmp_path / "c.jsonl"
    rows.write_text('{"caption": "a red square"}\n{"id": 3}\n{"caption": "a blue star"}\n')
    assert load_captions(rows).captions == ["a red square", "a blue star"]  # the row without one keeps nothing


def test_unreadable_model_config_is_one_line_with_the_cache_on(tmp_path):
    manifest = _manifest(tmp_path / "data", n=2)
    with pytest.raises(ConfigError, match="model-config"):
        evaluate("hnb-missing", str(manifest), model_config=str(tmp_path / "absent.json"), progress=False,
                 num_workers=0, cache_dir=tmp_path / "cache")
