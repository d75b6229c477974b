"""The throughput record on every result (``result.throughput``): rates of each tower, warm or cold, the model's
parameters and FLOPs (counted with ``FlopCounterMode`` once per architecture, cached as JSON), the device and its peak
share; ``hnbench eval``'s footer; the open_clip CSV export's params and FLOPs columns."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import make_pairs, write_jsonl

import hnbench
from hnbench.cli import main
from hnbench.evaluation.throughput import (
    FLOP_UNIT,
    count_cache_dir,
    count_model,
    footer,
    model_counts,
    peak_rate,
    peak_share,
)
from hnbench.models import load_model
from hnbench.results.record import EvalResult, read_result

REPO = Path(__file__).resolve().parents[1]
RUN = {"num_workers": 0, "progress": False}


@pytest.fixture
def manifest(tmp_path) -> Path:
    pairs = make_pairs(tmp_path, n=6)
    return write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])


@pytest.fixture
def micro(micro_config):
    """A fresh micro open_clip model: no forward has run on it yet."""
    return load_model("hnb-micro", model_config=str(micro_config))


def _transformer_flops(tokens: int, width: int, layers: int, mlp: int) -> int:
    """FLOPs (2 per multiply-add) of ``layers`` pre-norm transformer blocks on ``tokens`` tokens: q/k/v/out
    projections, the two MLP matrices, and the attention's QKᵀ and AV products (open_clip's blocks)."""
    per_layer = 2 * tokens * (4 * width * width + 2 * width * mlp) + 2 * 2 * tokens * tokens * width
    return layers * per_layer


def _open_clip_flops_by_hand(cfg: dict) -> tuple[int, int]:
    """(image, caption) FLOPs of an open_clip ViT CLIP from its config, by hand: the patch convolution, the
    transformer, the projection of the pooled token to the embedding; the text tower at its full context."""
    v, t, embed = cfg["vision_cfg"], cfg["text_cfg"], cfg["embed_dim"]
    patches = (v["image_size"] // v["patch_size"]) ** 2
    w = v["width"]
    image = (2 * patches * w * 3 * v["patch_size"] ** 2 + _transformer_flops(patches + 1, w, v["layers"], 4 * w)
             + 2 * w * embed)
    tw = t["width"]
    text = _transformer_flops(t["context_length"], tw, t["layers"], 4 * tw) + 2 * tw * embed
    return image, text


# --- the record -----------------------------------------------------------------------------------------------
def test_a_tiny_run_records_positive_rates_and_says_cold_then_warm(micro, manifest, tmp_path):
    first = hnbench.evaluate(micro, str(manifest), output_dir=tmp_path / "a", use_cache=False, **RUN)
    t = first.throughput
    assert t["device"] == "cpu" and t["compute"] == "fp32" and t["cached"] is False and t["warm"] is False
    assert t["images_encoded"] == 6 and t["captions_encoded"] == 6
    # the rate is of the unrounded seconds; the recorded seconds are rounded to 0.1 ms (as timings are)
    for rate, seconds in ((t["images_per_s"], t["image_encode_s"]), (t["captions_per_s"], t["text_encode_s"])):
        assert 6 / (seconds + 5e-5) * 0.999 <= rate <= 6 / max(seconds - 5e-5, 1e-9) * 1.001 and rate > 0
    assert t["image_encode_s"] == first.timings["encode_images"]  # the encode step the task times
    assert t["gflops"]["unit"] == FLOP_UNIT and t["gflops"]["image_size"] == 32 and t["gflops"]["context_length"] == 32
    assert read_result(first.path).throughput == t  # written and read back
    # the same encoder object again: its model has run a forward, so this pass is warm
    second = hnbench.evaluate(micro, str(manifest), output_dir=tmp_path / "b", use_cache=False, **RUN)
    assert second.throughput["warm"] is True and second.metrics == first.metrics


def test_a_run_from_the_embedding_cache_has_no_rate_and_says_so(micro_config, manifest, tmp_path):
    options = {"model_config": str(micro_config), **RUN}
    hnbench.evaluate("hnb-micro", str(manifest), output_dir=tmp_path / "a", **options)
    again = hnbench.evaluate("hnb-micro", str(manifest), output_dir=tmp_path / "b", **options)
    t = again.throughput
    assert t["cached"] is True and t["images_per_s"] is None and t["captions_per_s"] is None
    assert "every embedding came from the cache" in t["note"]
    assert t["gflops"]["counted"] == "cache" and t["gflops"]["image"] > 0  # known without building the model
    assert "no rate (every embedding came from the cache) on cpu" in footer(again)


@pytest.mark.parametrize("task", ["zeroshot", "monotonicity", "choice"])
def test_every_task_writes_the_record(micro_config, tmp_path, task):
    if task == "zeroshot":
        from test_zeroshot import _class_folder

        data, options = str(_class_folder(tmp_path / "colours")), {}
    elif task == "monotonicity":
        pairs = make_pairs(tmp_path, n=3)
        data, options = str(write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": f"{c}. It is small."}
                                                                for p, c in pairs])), {}
    else:
        data, options = "synthdense", {"protocol": "compositional", "dataset_options": {
            "n_families": {"test": 3}, "family_size": 4, "image_size": 48}}
    r = hnbench.evaluate("hnb-micro", data, model_config=str(micro_config), task=task, use_cache=False, **options,
                         **RUN)
    t = r.throughput
    assert r.task == task and t["images_per_s"] > 0 and t["captions_per_s"] > 0 and t["images_encoded"] > 0
    assert t["params"]["total"] == r.model["n_params"] and t["gflops"]["text"] > 0


# --- parameters and FLOPs -------------------------------------------------------------------------------------
def test_tower_params_are_the_parameters_each_tower_reads(micro):
    params = count_model(micro)["params"]
    model = micro.model
    visual = sum(p.numel() for p in model.visual.parameters())
    text = sum(p.numel() for n, p in model.named_parameters() if not n.startswith(("visual.", "logit_")))
    assert params == {"image": visual, "text": text, "total": sum(p.numel() for p in model.parameters())}
    assert params["total"] == params["image"] + params["text"] + model.logit_scale.numel()  # read by neither tower


def test_the_bundled_model_counts_the_flops_its_config_gives_by_hand():
    encoder = load_model("hnbench-tiny", "synthdense")
    cfg = json.loads((REPO / "hnbench" / "models" / "configs" / "hnbench-tiny.json").read_text())
    counts = count_model(encoder)
    assert (counts["image_flops"], counts["text_flops"]) == _open_clip_flops_by_hand(cfg)
    assert counts["image_size"] == cfg["vision_cfg"]["image_size"]
    assert counts["context_length"] == cfg["text_cfg"]["context_length"]


def test_the_micro_model_counts_the_flops_its_config_gives_by_hand(micro):
    from conftest import MICRO_CONFIG

    counts = count_model(micro)
    assert (counts["image_flops"], counts["text_flops"]) == _open_clip_flops_by_hand(MICRO_CONFIG)


@pytest.mark.slow
def test_vit_b_32_counts_open_clips_profile_numbers():
    """open_clip's docs/model_profile.csv (its profiler, torch FlopCounterMode on CUDA) lists ViT-B-32 at 224 px and
    77 tokens: 151.28 M params (87.85 image, 63.43 text), 8.82 / 5.96 GFLOPs per image / caption. The same unit here:
    FLOPs are 2 per multiply-add, attention products included (fvcore's MACs would be half: 4.41 / 2.98). The
    architecture is built offline with random weights: FLOPs do not depend on them."""
    counts = count_model(load_model("ViT-B-32", None))
    assert round(counts["image_flops"] / 1e9, 2) == 8.82 and round(counts["text_flops"] / 1e9, 2) == 5.96
    assert counts["image_size"] == 224 and counts["context_length"] == 77
    assert {k: round(v / 1e6, 2) for k, v in counts["params"].items()} == {"image": 87.85, "text": 63.43,
                                                                           "total": 151.28}


def test_counting_leaves_the_model_the_rng_and_torchs_settings_as_they_were(micro):
    import torch

    model = micro.model
    model.train()  # a training run's periodic evaluation may count a model in train mode
    before = {k: v.clone() for k, v in model.state_dict().items()}
    torch.manual_seed(123)
    rng, fastpath = torch.get_rng_state(), torch.backends.mha.get_fastpath_enabled()
    count_model(micro)
    assert torch.equal(torch.get_rng_state(), rng) and torch.backends.mha.get_fastpath_enabled() == fastpath
    assert all(m.training for m in model.modules())
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    model.eval()


# --- the count cache ------------------------------------------------------------------------------------------
def _cache_files() -> list[Path]:
    return sorted(count_cache_dir().glob("*.json"))


def test_the_count_is_cached_per_architecture_and_read_back(micro_config, micro):
    counts, source = model_counts(micro)
    assert source == "counted" and len(_cache_files()) == 1
    (path,) = _cache_files()
    record = json.loads(path.read_text())
    assert record["counts"] == counts and record["key"]["arch"] == "hnb-micro" and "fingerprint" not in record["key"]
    # other weights of the same architecture: the cached count, not a second one (read from the file: an edit shows)
    record["counts"]["text_flops"] += 1000
    path.write_text(json.dumps(record))
    other = load_model("hnb-micro", model_config=str(micro_config), init_seed=7)
    assert other.info.fingerprint != micro.info.fingerprint
    again, source = model_counts(other)
    assert source == "cache" and again["text_flops"] == counts["text_flops"] + 1000 and len(_cache_files()) == 1


@pytest.mark.parametrize("content", [b"{not json", b"\x80\x04\x95pickle", b'{"key": {}, "counts": {"params": 3}}'])
def test_a_corrupt_count_cache_file_is_ignored_and_rewritten(micro, content):
    counts, _ = model_counts(micro)
    (path,) = _cache_files()
    path.write_bytes(content)
    again, source = model_counts(micro)
    assert source == "counted" and again == counts
    assert json.loads(path.read_text())["counts"] == counts  # rewritten whole


# --- peak share -----------------------------------------------------------------------------------------------
def test_peak_share_is_none_with_a_note_on_cpu(micro, manifest):
    t = hnbench.evaluate(micro, str(manifest), use_cache=False, **RUN).throughput
    assert t["peak_share"] is None and "no peak share on cpu" in t["peak_note"]


def test_known_gpus_have_a_peak_and_unknown_ones_say_so():
    assert peak_rate("NVIDIA H100 80GB HBM3", "bf16")[0] == 989.0
    assert peak_rate("NVIDIA H100 PCIe", "fp32")[0] == 51.0  # the variant before its family
    assert peak_rate("NVIDIA A100-SXM4-80GB", "fp32")[0] == 19.5
    assert peak_rate("NVIDIA H200", "bf16")[0] == 989.0 and peak_rate("NVIDIA L40S", "fp32")[0] == 91.6
    assert peak_rate("Tesla V100-SXM2-16GB", "bf16")[0] == 125.0  # no bf16: --amp autocasts to fp16 there
    rate, note = peak_rate("NVIDIA GeForce GTX 1080", "fp32")
    assert rate is None and "unknown device" in note and "GTX 1080" in note
    assert peak_share("NVIDIA GeForce GTX 1080", "fp32", 100.0, 100.0, {"image": 1.0, "text": 1.0})[0] is None


def test_peak_share_is_the_flop_rate_over_the_devices_peak():
    # 10,000 images/s of 8.82 GFLOPs = 88.2 TFLOP/s of an H200's 989 bf16 TFLOP/s; no caption rate: no text share
    share, note = peak_share("NVIDIA H200", "bf16", 10_000.0, None, {"image": 8.82, "text": 5.96})
    assert share == {"image": pytest.approx(88.2 / 989, abs=1e-6), "text": None}
    assert "989 TFLOP/s" in note and "bf16" in note
    assert peak_share("NVIDIA H200", "fp32", 1000.0, 1000.0, None)[0] == {"image": None, "text": None}  # no count


# --- stored results, the footer, the export -------------------------------------------------------------------
def test_a_stored_result_without_throughput_reads_and_writes_no_throughput():
    stored = sorted((REPO / "leaderboards" / "results").rglob("*.json"))
    assert stored
    for path in stored:
        r = read_result(path)
        assert r.throughput == {} and "throughput" not in r.to_dict() and footer(r) is None
        assert "throughput" not in json.loads(path.read_text())  # the committed files are as they were


def test_the_record_changes_no_board(micro, manifest, tmp_path):
    """A board of results with the record is the board of the same results without it (as stored results are)."""
    from hnbench.results.leaderboard import leaderboard

    r = hnbench.evaluate(micro, str(manifest), output_dir=tmp_path / "new" / "res", use_cache=False, **RUN)
    assert r.throughput
    shutil.copytree(tmp_path / "new" / "res", tmp_path / "old" / "res")
    path = tmp_path / "old" / "res" / Path(r.path).name
    d = json.loads(path.read_text())
    del d["throughput"]
    path.write_text(json.dumps(d, indent=2) + "\n")
    boards = [leaderboard([tmp_path / side / "res"], tmp_path / side / "board.md", ci=True) for side in ("new", "old")]
    # the header names the command (its folders); everything else is the same
    assert boards[0].replace(str(tmp_path / "new"), str(tmp_path / "old")) == boards[1] and "hnb-micro" in boards[1]


def test_the_eval_footer_follows_the_table(micro_config, manifest, tmp_path, capsys):
    assert main(["-q", "eval", "--model", "hnb-micro", "--model-config", str(micro_config), "--dataset",
                 str(manifest), "--output", str(tmp_path / "out"), "--num-workers", "0", "--no-cache"]) == 0
    lines = capsys.readouterr().out.splitlines()
    (line,) = [s for s in lines if s.startswith("throughput: ")]
    assert lines.index(line) == len(lines) - 2 and lines[-1].startswith("wrote ")  # after the table
    r = read_result(next((tmp_path / "out").glob("*.json")))
    t = r.throughput
    # each rate as recorded: 3 significant figures, or from 100 up the whole number with thousands separators
    shown = re.match(r"throughput: ([\d,.e+]+) images/s, ([\d,.e+]+) captions/s on cpu \(cold\); ", line)
    assert shown, line
    for text, rate in zip(shown.groups(), (t["images_per_s"], t["captions_per_s"]), strict=True):
        assert float(text.replace(",", "")) == pytest.approx(rate, rel=5e-3, abs=0.5), (text, rate)
    assert f"hnb-micro {t['params']['total'] / 1e6:.3g}M params" in line
    assert f"{t['gflops']['image']:.3g} / {t['gflops']['text']:.3g} GFLOPs per image / caption at 32 px, 32 tokens" \
        in line


def test_open_clip_csv_takes_params_and_flops_from_throughput_and_lists_them_missing_without(
        micro, tmp_path, monkeypatch):
    from test_export_formats import _karpathy

    from hnbench.data.benchmarks import BENCHMARKS

    spec = BENCHMARKS["flickr30k"]
    monkeypatch.setitem(BENCHMARKS, "flickr30k", replace(spec, protocols=tuple(
        replace(p, n_images=4, n_captions=20) if p.name == "karpathy-test" else p for p in spec.protocols)))
    root = _karpathy(tmp_path / "flickr", "flickr30k", "flickr30k-images", 4)
    r = hnbench.evaluate(micro, "flickr30k", data_root=root, protocol="karpathy-test", output_dir=tmp_path / "res",
                         use_cache=False, **RUN)
    t = r.throughput
    hnbench.export([tmp_path / "res"], "open-clip-csv", tmp_path / "oc")
    rows = list(csv.DictReader(io.StringIO((tmp_path / "oc" / "openclip_retrieval_results.csv").read_text())))
    assert rows[0]["params (M)"] == f"{t['params']['total'] / 1e6:.2f}".rstrip("0").rstrip(".")
    assert rows[0]["FLOPs (B)"] == f"{t['gflops']['image'] + t['gflops']['text']:.2f}".rstrip("0").rstrip(".")
    # the same result written before throughput was recorded: both columns empty, listed with the reason
    old = tmp_path / "old"
    shutil.copytree(tmp_path / "res", old)
    path = old / Path(r.path).name
    d = json.loads(path.read_text())
    del d["throughput"]
    path.write_text(json.dumps(d, indent=2) + "\n")
    assert isinstance(read_result(path), EvalResult)
    hnbench.export([old], "open-clip-csv", tmp_path / "oc-old")
    rows = list(csv.DictReader(io.StringIO((tmp_path / "oc-old" / "openclip_retrieval_results.csv").read_text())))
    assert rows[0]["params (M)"] == rows[0]["FLOPs (B)"] == ""
    manifest = json.loads((tmp_path / "oc-old" / "hnbench-export.json").read_text())
    missing = {s["what"]: s["reason"] for s in manifest["not_exported"]}
    assert "no throughput record" in missing["params (M)"] and "no throughput record" in missing["FLOPs (B)"]


def test_an_hf_clip_model_counts_its_towers_by_hand(hf_clip_dir):
    """transformers' CLIP (its own attention, through scaled-dot-product attention): the same hand count with its
    MLP width, and each tower's parameters (vision model + visual projection, text model + text projection)."""
    encoder = load_model(str(hf_clip_dir))
    counts = count_model(encoder)
    cfg = encoder.model.config
    v, t, proj = cfg.vision_config, cfg.text_config, cfg.projection_dim
    patches = (v.image_size // v.patch_size) ** 2
    image = (2 * patches * v.hidden_size * 3 * v.patch_size ** 2
             + _transformer_flops(patches + 1, v.hidden_size, v.num_hidden_layers, v.intermediate_size)
             + 2 * v.hidden_size * proj)
    ctx = counts["context_length"]
    text = _transformer_flops(ctx, t.hidden_size, t.num_hidden_layers, t.intermediate_size) + 2 * t.hidden_size * proj
    assert ctx == encoder.info.context_length and (counts["image_flops"], counts["text_flops"]) == (image, text)

    def size(*modules) -> int:
        return sum(p.numel() for m in modules for p in m.parameters())

    model = encoder.model
    assert counts["params"]["image"] == size(model.vision_model, model.visual_projection)
    assert counts["params"]["text"] == size(model.text_model, model.text_projection)


@pytest.mark.slow
def test_under_torchrun_the_shared_encoding_has_no_per_tower_rate_and_says_so(micro_config, manifest, tmp_path):
    from test_distributed import _torchrun

    run = _torchrun(["eval", "--model", "hnb-micro", "--model-config", str(micro_config), "--dataset", str(manifest),
                     "--num-workers", "0", "--batch-size", "4", "--json", "--output", str(tmp_path / "out"),
                     "--cache-dir", str(tmp_path / "cache")], tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    t = json.loads(run.stdout)["throughput"]
    assert t["images_per_s"] is None and t["captions_per_s"] is None and t["cached"] is False
    assert "under torchrun the ranks encoded 12 items" in t["note"] and t["gflops"]["image"] > 0


def test_a_remembered_model_never_built_takes_its_count_from_the_cache_or_goes_without(micro_config, tmp_path):
    """A run whose embeddings all come from the cache never builds the model (hnbench.evaluation.remembered): its
    count comes from the count cache, or the record says it was not counted; asking never builds it."""
    from hnbench.evaluation.remembered import load_remembered

    def remembered():
        return load_remembered("hnb-micro", None, root=tmp_path / "emb", model_config=str(micro_config))

    built = remembered()  # builds and remembers the model
    unbuilt = remembered()
    assert not unbuilt.built
    counts, why = model_counts(unbuilt)
    assert counts is None and "not counted: the model was not built" in why and not unbuilt.built
    model_counts(built)
    counts, source = model_counts(unbuilt)
    assert source == "cache" and counts == count_model(built) and not unbuilt.built
