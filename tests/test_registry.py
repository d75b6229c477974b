"""The one registry: lazy targets, every entry resolves, unknown names answer with one "did you mean" line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import assert_one_line_error

from hnbench.cli import main
from hnbench.data.benchmarks import BENCHMARKS, BenchmarkSpec
from hnbench.errors import ConfigError, did_you_mean
from hnbench.registry import (
    BENCHMARK_SPECS,
    DATASETS,
    LOSSES,
    MODELS,
    RECIPES,
    TEXT_ENCODERS,
    Registry,
    Target,
    model_family,
)
from hnbench.train.trainer import TrainConfig, load_recipe

ALL = (DATASETS, BENCHMARK_SPECS, MODELS, TEXT_ENCODERS, LOSSES, RECIPES)
ROOT = Path(__file__).resolve().parents[1]


def test_importing_the_registry_imports_no_target():
    """A fresh interpreter: the registry (and the package) load no torch and none of the registered modules."""
    code = ("import sys, json, hnbench, hnbench.registry as r\n"
            "targets = sorted({t.ref.split(':')[0] for reg in (r.DATASETS, r.BENCHMARK_SPECS, r.MODELS, "
            "r.TEXT_ENCODERS, r.LOSSES) for t in reg._targets.values()})\n"
            "print(json.dumps({'targets': targets, 'loaded': sorted(m for m in ['torch', *targets] if m in sys.modules)}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    seen = json.loads(out.stdout)
    assert len(seen["targets"]) >= 7 and seen["loaded"] == []


def test_every_entry_resolves():
    for name in DATASETS:
        assert callable(DATASETS.get(name)), name
    assert set(BENCHMARKS) == set(BENCHMARK_SPECS.names()) and set(BENCHMARKS) | {"synthdense"} <= set(DATASETS.names())
    for name in BENCHMARK_SPECS:
        spec = BENCHMARK_SPECS.get(name)
        assert isinstance(spec, BenchmarkSpec) and spec.name == name and BENCHMARKS[name] is spec
    assert DATASETS.get("docci").keywords == {"name": "docci"}  # one shared loader, the name bound
    for name in (*MODELS, *TEXT_ENCODERS, *LOSSES):
        assert callable(MODELS.get(name) if name in MODELS else TEXT_ENCODERS.get(name) if name in TEXT_ENCODERS
                        else LOSSES.get(name)), name
    assert TEXT_ENCODERS.get("minilm").__module__ == "hnbench.models.sentence"
    assert set(LOSSES.names()) == {"hn", "infonce"}
    assert "tiny-synthdense" in RECIPES and "longclip-L-hn" in RECIPES.names()  # spelt as the file is
    for name in RECIPES:
        assert RECIPES.get(name).is_file()
        TrainConfig.from_dict(load_recipe(name))  # each built-in recipe is a valid training config


def test_model_family_by_prefix(tmp_path):
    assert model_family(str(tmp_path)) == "open_clip"
    (tmp_path / "config.json").write_text("{}")
    assert model_family(str(tmp_path)) == "hf"  # a save_pretrained directory
    assert MODELS.match("hf:openai/clip-vit-base-patch32") == "hf"
    assert MODELS.match("hf-hub:timm/ViT-B-16-SigLIP") == "open_clip"  # the longer prefix is not hf:
    assert MODELS.match("local-dir:/tmp/x") == "open_clip"
    assert MODELS.match("ViT-B-32") == MODELS.match("hnbench-tiny") == "open_clip"  # the default family
    assert MODELS.get("hf").__module__ == "hnbench.models.hf"
    assert type(MODELS.get("open_clip")).__name__ == "OpenCLIPFamily"  # each family is its adapter


def test_targets_bind_arguments_and_resolve_once():
    reg = Registry("thing")
    reg.register("Hint", "hnbench.errors:did_you_mean", choices=["alpha", "beta"])
    reg.register("plain", len)
    assert isinstance(reg._targets["hint"], Target)
    hint = reg.get("HINT")
    assert hint("alpah") == "did you mean 'alpha'?" and reg.get("hint") is hint  # resolved once, cached
    assert reg.names() == ["Hint", "plain"] and reg.get("plain")([1, 2]) == 2
    assert reg.describe() == "Hint, plain"


@pytest.mark.parametrize("reg, wrong, right", [
    (DATASETS, "synthdens", "synthdense"), (DATASETS, "long_dci", "long-dci"), (MODELS, "open-clip", "open_clip"),
    (TEXT_ENCODERS, "minilmm", "minilm"), (LOSSES, "infonse", "infonce"), (RECIPES, "tiny-synthdens", "tiny-synthdense"),
])
def test_unknown_names_suggest_in_one_line(reg, wrong, right):
    with pytest.raises(ConfigError) as e:
        reg.get(wrong)
    msg = str(e.value)
    assert "\n" not in msg and f"did you mean {right!r}" in msg and msg.startswith(f"unknown {reg.kind} {wrong!r}")
    assert ", ".join(reg.names()) in msg


def test_suggestion_helper():
    assert did_you_mean("VIT-B-32", ["ViT-B-32", "ViT-L-14"], n=1) == "did you mean 'ViT-B-32'?"
    assert did_you_mean("zzz", ["docci", "dci"]) == ""


def test_one_suggestion_helper_in_the_package():
    users = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "hnbench").rglob("*.py")
                   if "get_close_matches" in p.read_text())
    assert users == ["hnbench/errors.py"]


def test_cli_names_come_from_the_registry(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")  # argparse wraps help at the terminal width
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    help_text = capsys.readouterr().out
    assert "--loss {hn,infonce}" in help_text and f"built-in recipe ({', '.join(RECIPES.names())})" in help_text
    assert main(["datasets", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == DATASETS.names()
    assert main(["datasets", "info", "doci"]) == 2
    assert_one_line_error(capsys.readouterr().err, "did you mean 'docci'")
