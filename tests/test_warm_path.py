"""The warm path: a run whose embeddings are all cached builds no model and reads no weights."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import open_clip
import pandas as pd
import pytest
import torch
from conftest import make_pairs, write_jsonl
from safetensors.torch import save_file

from hnbench.evaluation.evaluate import evaluate
from hnbench.evaluation.remembered import RECORD_DIR, RememberedEncoder, load_remembered
from hnbench.models import load_model


@pytest.fixture
def factory_calls(monkeypatch) -> list[str]:
    """Counts real calls of open_clip's model factory (the real function still runs)."""
    calls: list[str] = []
    real = open_clip.create_model_and_transforms

    def counted(name, *args, **kwargs):
        calls.append(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(open_clip, "create_model_and_transforms", counted)
    return calls


def _checkpoint(micro_config: Path, path: Path, seed: int) -> Path:
    model = load_model("hnb-micro", model_config=str(micro_config), init_seed=seed).model
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    return path


def _manifest(root: Path, n: int = 6) -> Path:
    pairs = make_pairs(root, n=n)
    return write_jsonl(root / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])


def _eval(micro_config, ckpt, manifest, out, cache):
    return evaluate("hnb-micro", str(manifest), pretrained=str(ckpt), model_config=str(micro_config),
                    output_dir=out, cache_dir=cache, progress=False, num_workers=0, batch_size=4)


def test_warm_run_builds_no_model_and_gives_the_cold_results(micro_config, tmp_path, factory_calls):
    ckpt, manifest, cache = _checkpoint(micro_config, tmp_path / "w.safetensors", 0), _manifest(tmp_path), tmp_path / "c"
    factory_calls.clear()
    cold = _eval(micro_config, ckpt, manifest, tmp_path / "o1", cache)
    assert factory_calls == ["hnb-micro"] and cold.settings["encoding"]["encoded"] == {"images": 6, "texts": 6}
    assert len(list((cache / RECORD_DIR).glob("*.json"))) == 1
    warm = _eval(micro_config, ckpt, manifest, tmp_path / "o2", cache)
    assert factory_calls == ["hnb-micro"]  # no second build
    assert warm.settings["encoding"]["encoded"] == {"images": 0, "texts": 0}
    assert warm.settings["encoding"]["cached"] == {"images": 6, "texts": 6}
    assert warm.model == cold.model and warm.metrics == cold.metrics and warm.tokens == cold.tokens
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "o1" / cold.per_query),
                                  pd.read_parquet(tmp_path / "o2" / warm.per_query))


def test_changed_checkpoint_is_detected_and_reencoded(micro_config, tmp_path, factory_calls):
    ckpt, manifest, cache = _checkpoint(micro_config, tmp_path / "w.safetensors", 0), _manifest(tmp_path), tmp_path / "c"
    factory_calls.clear()
    first = _eval(micro_config, ckpt, manifest, tmp_path / "o1", cache)
    # Same bytes under a new inode and mtime (a copy put back): verified by content, still no build.
    shutil.copyfile(ckpt, tmp_path / "copy")
    os.replace(tmp_path / "copy", ckpt)
    os.utime(ckpt, ns=(1_000_000_000, 1_000_000_000))
    again = _eval(micro_config, ckpt, manifest, tmp_path / "o2", cache)
    assert factory_calls == ["hnb-micro"] and again.model == first.model
    (record,) = [json.loads(p.read_text()) for p in (cache / RECORD_DIR).glob("*.json")]
    assert record["files"][0]["mtime_ns"] == 1_000_000_000  # the new stat is remembered
    # New weights written in place at the same path (same size): detected, built, re-encoded.
    other = _checkpoint(micro_config, tmp_path / "other.safetensors", 1)
    factory_calls.clear()
    ckpt.write_bytes(other.read_bytes())
    changed = _eval(micro_config, ckpt, manifest, tmp_path / "o3", cache)
    assert factory_calls == ["hnb-micro"]
    assert changed.model["fingerprint"] != first.model["fingerprint"]
    assert changed.settings["encoding"]["encoded"] == {"images": 6, "texts": 6}
    assert changed.settings["encoding"]["cache_key"] != first.settings["encoding"]["cache_key"]


def test_a_cache_miss_builds_the_model_on_first_use(micro_config, tmp_path, factory_calls):
    ckpt, cache = _checkpoint(micro_config, tmp_path / "w.safetensors", 0), tmp_path / "c"
    factory_calls.clear()
    _eval(micro_config, ckpt, _manifest(tmp_path / "a", 4), tmp_path / "o1", cache)
    more = _manifest(tmp_path / "b", 6)  # 4 images and captions already cached, 2 new
    warm = _eval(micro_config, ckpt, more, tmp_path / "o2", cache)
    assert factory_calls == ["hnb-micro", "hnb-micro"]
    assert warm.settings["encoding"]["encoded"] == {"images": 2, "texts": 2}
    fresh = evaluate(load_model("hnb-micro", str(ckpt), model_config=str(micro_config)), str(more),
                     use_cache=False, progress=False, num_workers=0, batch_size=4)
    assert warm.metrics == fresh.metrics and warm.model == fresh.model


def test_random_init_is_remembered_by_its_seed(micro_config, tmp_path, factory_calls):
    def load(seed: int | None):
        return load_remembered("hnb-micro", None, root=tmp_path, model_config=str(micro_config), init_seed=seed)

    built = load(0)
    assert not isinstance(built, RememberedEncoder) and len(factory_calls) == 1
    recalled = load(0)
    assert isinstance(recalled, RememberedEncoder) and len(factory_calls) == 1
    assert recalled.info == built.info
    other = load(1)  # another seed: other weights, so the model is built
    assert not isinstance(other, RememberedEncoder) and other.info.fingerprint != built.info.fingerprint


def test_unseeded_random_init_is_remembered_by_the_rng_state(micro_config, tmp_path, factory_calls):
    def load(seed: int):
        torch.manual_seed(seed)
        return load_remembered("hnb-micro", None, root=tmp_path, model_config=str(micro_config), init_seed=None)

    built = load(0)
    recalled = load(0)
    assert isinstance(recalled, RememberedEncoder) and len(factory_calls) == 1 and recalled.info == built.info
    other = load(1)
    assert not isinstance(other, RememberedEncoder) and other.info.fingerprint != built.info.fingerprint


@pytest.mark.slow
def test_warm_cli_run_imports_no_open_clip(micro_config, tmp_path):
    ckpt, manifest, cache = _checkpoint(micro_config, tmp_path / "w.safetensors", 0), _manifest(tmp_path), tmp_path / "c"
    args = ["-q", "eval", "--model", "hnb-micro", "--model-config", str(micro_config), "--pretrained", str(ckpt),
            "--dataset", str(manifest), "--num-workers", "0", "--cache-dir", str(cache)]
    code = textwrap.dedent("""
        import sys
        from hnbench.cli import main
        assert main(sys.argv[1:]) == 0
        print("open_clip loaded:", "open_clip" in sys.modules)
    """)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    outs = [subprocess.run([sys.executable, "-c", code, *args, "--output", str(tmp_path / f"o{i}")], env=env,
                           capture_output=True, text=True, timeout=120) for i in range(2)]
    assert [o.returncode for o in outs] == [0, 0], outs[-1].stderr
    assert "open_clip loaded: True" in outs[0].stdout and "open_clip loaded: False" in outs[1].stdout


def test_a_record_written_before_a_familys_encoding_changed_is_never_used(micro_config, tmp_path, factory_calls,
                                                                           monkeypatch):
    """A family bumps ``encoding_revision`` when the same files embed otherwise (SigLIP's mask): a record from before
    is not recalled, the model is built again (the cached embeddings of the old encoding are never served)."""
    from hnbench.models.openclip import OPEN_CLIP

    def load():
        return load_remembered("hnb-micro", None, root=tmp_path, model_config=str(micro_config), init_seed=0)

    built = load()
    assert isinstance(load(), RememberedEncoder) and len(factory_calls) == 1
    monkeypatch.setattr(type(OPEN_CLIP), "encoding_revision", 2)
    rebuilt = load()
    assert not isinstance(rebuilt, RememberedEncoder) and len(factory_calls) == 2
    assert isinstance(load(), RememberedEncoder) and rebuilt.info == built.info  # recalled under its new key
    assert len(list((tmp_path / RECORD_DIR).glob("*.json"))) == 2
