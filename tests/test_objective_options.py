"""An objective's options are declared once, by the objective: its flags, its recipe table, ``--set`` keys, bounds
and resume rules come from its options dataclass (a plugin's too); the flat shape of older recipes and stored
``train_config.json`` files reads through one upgrade; the loss entry declares whether it reads Ḡ; side inputs
are declared by the data set, not its name; the trainer takes its periodic evaluation as a callable."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import assert_one_line_error, make_pairs, write_jsonl
from safetensors.torch import load_file

from hnbench.cli import build_parser, main
from hnbench.cli.train import train_config_from_args
from hnbench.data import load_dataset
from hnbench.errors import ConfigError, DataError
from hnbench.registry import LOSSES, OBJECTIVES
from hnbench.settings import flag_of, flat_key, option
from hnbench.sidecars import OUTLINES, SEGMENT_GEOMETRY
from hnbench.sidecars.options import EdgeSettings
from hnbench.sidecars.segments import default_sidecar_path, synthdense_scenes
from hnbench.train.batches import subset_fraction
from hnbench.train.config import TrainConfig, nest_options, options_class, upgrade
from hnbench.train.objective_options import FineLIPOptions, GoalOptions
from hnbench.train.objectives.base import Term, TermInputs, global_term
from hnbench.train.terms.goal import goal_segment_loss
from hnbench.train.trainer import train

ROOT = Path(__file__).resolve().parents[1]
FLAT_STATE_CONFIG = Path(__file__).parent / "fixtures" / "flat_finelip_state_config.json"


# --- a made-up objective with its own options, registered as a plugin would (hnbench not edited) -------------
@dataclass(frozen=True)
class MineOptions:
    """The made-up objective's options, declared as hnbench declares its own."""

    strength: float = option(1.0, minimum=0, help="mine: the weight of its one term")
    label: str = option("plain", choices=("plain", "bold"), help="mine: a choice it makes")


def build_mine(config: Any) -> list[Term]:
    """One term, the run's global term, weighted by the option it was given."""
    options = config.objective_options
    assert isinstance(options, MineOptions)
    return [dataclasses.replace(global_term(LOSSES.get(config.loss), config.loss, config.gamma),
                                weight=options.strength)]


@pytest.fixture
def mine(monkeypatch):
    """``mine`` registered for one test, then forgotten (the registry's tables restored)."""
    for table in ("_targets", "_help", "_spelling", "_prefixes", "_entries"):
        monkeypatch.setattr(OBJECTIVES, table, dict(getattr(OBJECTIVES, table)))
    OBJECTIVES.register("mine", build_mine, options=MineOptions, help="a made-up objective")


def _train_parser():
    parser = build_parser()
    return parser, next(a for a in parser._actions if a.dest == "command").choices["train"]


def test_a_plugin_objectives_options_are_its_flags_recipe_table_and_set_keys(mine, tmp_path):
    parser, sub = _train_parser()

    def options(*argv: str) -> Any:
        return train_config_from_args(parser.parse_args(["train", *argv])).objective_options

    assert options("--objective", "mine") == MineOptions()
    assert options("--objective", "mine", "--mine-strength", "0.5", "--mine-label", "bold") == MineOptions(0.5, "bold")
    recipe = tmp_path / "mine.toml"
    recipe.write_text('objective = "mine"\n\n[mine]\nstrength = 2.0\n')
    assert options("--recipe", str(recipe)) == MineOptions(2.0)
    assert options("--recipe", str(recipe), "--mine-strength", "3") == MineOptions(3.0)  # a flag over the recipe
    assert options("--recipe", str(recipe), "--mine-strength", "3", "--set", "mine.strength=4") == MineOptions(4.0)
    assert options("--recipe", str(recipe), "--set", "mine_strength=5") == MineOptions(5.0)  # the flat spelling
    flag = sub._option_string_actions["--mine-strength"]  # its help and group, as declared
    assert flag.help == "mine: the weight of its one term" and flag.default is None
    assert [g.title for g in sub._action_groups if flag in g._group_actions] == ["mine"]
    assert list(sub._option_string_actions["--objective"].choices) == OBJECTIVES.names()


@pytest.mark.parametrize("argv, words", [
    (["--mine-strength", "-1"], ["--mine-strength", "mine.strength", ">= 0"]),
    (["--set", "mine.label=italic"], ["mine.label", "plain, bold", "italic"]),
    (["--set", "mine.strenght=1"], ["mine", "strenght", "strength"]),
])
def test_a_plugin_objectives_bad_option_is_one_line_before_anything_is_written(mine, tmp_path, capsys, argv, words):
    rc = main(["train", "--objective", "mine", *argv, "--output", str(tmp_path / "run")])
    assert rc == 2 and not (tmp_path / "run").exists()
    assert_one_line_error(capsys.readouterr().err, *words)


def test_a_plugin_objective_trains_with_the_options_it_was_given(mine, micro_config, tmp_path):
    pairs = make_pairs(tmp_path, n=8)
    data = write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    base = {"model": "hnb-micro", "model_config": str(micro_config), "dataset": str(data), "objective": "mine",
            "epochs": 1, "batch_size": 4, "num_workers": 0, "log_every": 1, "seed": 2}
    for name, strength in (("one", 1.0), ("half", 0.5)):
        train(TrainConfig.from_dict({**base, "mine": {"strength": strength}, "output": str(tmp_path / name)}),
              progress=False)
    one, half = ([json.loads(x) for x in (tmp_path / n / "log.jsonl").read_text().splitlines()] for n in ("one", "half"))
    assert one[0]["terms"] == half[0]["terms"]  # the same weights before the first update: the same term
    assert half[0]["loss"] == pytest.approx(0.5 * half[0]["terms"]["global"], rel=1e-6)
    assert one[0]["loss"] == one[0]["terms"]["global"]
    recorded = json.loads((tmp_path / "half" / "train_config.json").read_text())["config"]
    assert recorded["objective"] == "mine" and recorded["objective_options"] == {"strength": 0.5, "label": "plain"}


@pytest.mark.parametrize("objective", [e.name for e in OBJECTIVES.entries() if e.options is not None])
def test_each_objectives_declared_bounds_and_choices_name_its_flag(objective):
    """The bounds, choices and help an option had as a TrainConfig field, now on its objective's options."""
    entry, cls = OBJECTIVES.entry(objective), options_class(objective)
    for f in dataclasses.fields(cls):
        assert f.metadata["help"], f.name
        flag = re.escape(flag_of(f, entry.prefix))
        bounds = {k: f.metadata[k] for k in ("minimum", "above", "maximum", "below") if f.metadata[k] is not None}
        for kind, edge in bounds.items():
            outside = {"minimum": edge - 1, "above": edge, "maximum": edge + 1, "below": edge}[kind]
            with pytest.raises(ConfigError, match=flag):
                TrainConfig(objective=objective, objective_options={f.name: outside}).validate()
        for bad in f.metadata["choices"] or ():
            with pytest.raises(ConfigError, match=f"{objective}.{f.name} must be one of"):
                TrainConfig(objective=objective, objective_options={f.name: bad + "?"}).validate()
    TrainConfig(objective=objective).validate()  # the defaults are within them


# --- the flat shape: older recipes and stored train_config.json files ----------------------------------------
def test_a_flat_train_config_written_before_options_were_nested_reads_into_the_objectives_options():
    flat = json.loads(FLAT_STATE_CONFIG.read_text())
    assert {"finelip_margin", "goal_segment_weight", "structxlip_top_k", "filter_colors"} <= set(flat)  # every one's
    new = upgrade(flat)
    assert new["objective_options"] == {"swap": "margin-hinge", "margin": 0.3, "max_violation": False,
                                        "num_patches": 20, "lr": 3e-4, "weight_decay": None}
    config = TrainConfig(**new)  # (not from_dict: its data and model paths were another machine's)
    assert config.objective_options == FineLIPOptions(swap="margin-hinge", margin=0.3, num_patches=20, lr=3e-4)
    fields = {f.name for f in dataclasses.fields(TrainConfig)} - {"objective_options"}
    assert {k: v for k, v in dataclasses.asdict(config).items() if k in fields} == \
        {k: v for k, v in flat.items() if k in fields}  # every other field as it was recorded
    assert upgrade(dataclasses.asdict(config)) == upgrade(new)  # the nested shape reads as it is


def test_every_stored_plug_and_play_run_record_reads_with_its_objectives_options():
    """The study's stored train_config.json copies (flat: written before the options were nested)."""
    records = sorted((ROOT / "benchmarks" / "plug_and_play" / "runs").glob("*.json"))
    assert {r.name.split("__")[0] for r in records} == {"clip", "finelip", "goal", "structxlip"}
    for path in records:
        flat = json.loads(path.read_text())["config"]
        config = TrainConfig(**upgrade(flat))
        entry = OBJECTIVES.entry(config.objective)
        for f in dataclasses.fields(options_class(config.objective)):
            assert getattr(config.objective_options, f.name) == flat[flat_key(f, entry.prefix)], (path.name, f.name)


def test_one_option_is_one_key_whichever_spelling_gives_it():
    assert nest_options({"finelip_margin": 0.3, "filter_colors": False, "goal.compat": True, "lr": 1.0}) == \
        {"lr": 1.0, "finelip": {"margin": 0.3}, "structxlip": {"filter_colors": False}, "goal": {"compat": True}}
    for twice in ({"finelip_margin": 0.3, "finelip": {"margin": 0.2}}, {"finelip.margin": 0.3, "finelip_margin": 0.2}):
        with pytest.raises(ConfigError, match="finelip.margin.*give it once"):
            nest_options(twice)
    with pytest.raises(ConfigError, match="did you mean 'margin'"):
        TrainConfig.from_dict({"objective": "finelip", "finelip": {"margn": 0.3}})
    with pytest.raises(ConfigError, match="finelip must be a table"):
        TrainConfig.from_dict({"finelip": 0.3})
    with pytest.raises(ConfigError, match=r"--goal-segment-weight \(goal.segment_weight\) must be a finite number"):
        TrainConfig.from_dict({"objective": "goal", "goal": {"segment_weight": -1}})
    # another objective's table stays behind (a recipe run with another --objective), as its flat keys always did
    config = TrainConfig.from_dict({"objective": "goal", "finelip": {"margin": 0.3}, "goal": {"segment_weight": 0.2}})
    assert config.objective_options == GoalOptions(segment_weight=0.2)


def test_the_built_in_recipes_tables_flags_and_set_keys_compose(tmp_path):
    parser, _ = _train_parser()
    args = parser.parse_args(["train", "--recipe", "tiny-synthdense-finelip", "--finelip-margin", "0.3",
                              "--set", "finelip.swap=margin-hinge", "--set", "finelip_lr=1e-4"])
    assert train_config_from_args(args).objective_options == FineLIPOptions(swap="margin-hinge", margin=0.3, lr=1e-4)
    args = parser.parse_args(["train", "--recipe", "tiny-synthdense-structxlip", "--no-filter-colors",
                              "--structxlip-top-k", "2"])
    options = train_config_from_args(args).objective_options
    assert (options.filter_colors, options.top_k, options.structure_weight) == (False, 2, 0.5)


def test_a_run_started_before_options_were_nested_resumes_to_the_uninterrupted_numbers(micro_config, tmp_path):
    """The fixture is the ``last/train_config.json`` the trainer wrote before this change (a finelip run stopped
    at step 4 of 6); with this test's paths in it, it stands for the state this test's run saved."""
    pairs = make_pairs(tmp_path, n=12)
    data = write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    base = {"model": "hnb-micro", "model_config": str(micro_config), "dataset": str(data), "epochs": 2,
            "batch_size": 4, "lr": 1e-3, "warmup_steps": 1, "num_workers": 0, "log_every": 1, "seed": 3,
            "objective": "finelip", "finelip_swap": "margin-hinge", "finelip_num_patches": 20, "finelip_margin": 0.3,
            "finelip_lr": 3e-4}
    train(TrainConfig.from_dict({**base, "output": str(tmp_path / "whole")}), progress=False)
    cut = tmp_path / "cut"
    train(TrainConfig.from_dict({**base, "stop_at_step": 4, "output": str(cut)}), progress=False)
    old = json.loads(FLAT_STATE_CONFIG.read_text())
    old.update(model_config=str(micro_config), dataset=str(data), output=str(cut))
    (cut / "last" / "train_config.json").write_text(json.dumps(old, indent=2) + "\n")
    with pytest.raises(ConfigError, match=r"cannot resume.*finelip\.margin: 0\.3 → 0\.4"):
        train(TrainConfig.from_dict({**base, "finelip_margin": 0.4, "output": str(cut), "resume": str(cut)}),
              progress=False)
    train(TrainConfig.from_dict({**base, "output": str(cut), "resume": str(cut)}), progress=False)

    def log(run: Path) -> list[dict[str, Any]]:
        lines = (run / "log.jsonl").read_text().splitlines()
        return [{k: v for k, v in json.loads(x).items() if k != "seconds"} for x in lines]

    assert log(cut) == log(tmp_path / "whole") and len(log(cut)) == 6
    for name in ("checkpoint.safetensors", "objective_modules.safetensors"):
        a, b = load_file(str(tmp_path / "whole" / name)), load_file(str(cut / name))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# --- the loss entry declares Ḡ -------------------------------------------------------------------------------
def test_the_loss_entry_declares_whether_it_reads_g_not_its_name(monkeypatch):
    assert LOSSES.entry("hn").uses_g and not LOSSES.entry("infonce").uses_g
    for table in ("_targets", "_help", "_spelling", "_prefixes", "_entries"):
        monkeypatch.setattr(LOSSES, table, dict(getattr(LOSSES, table)))
    LOSSES.register("margin", "hnbench.train.losses:hn_clip_loss", uses_g=True, help="HN-CLIP by another name")
    g = torch.Generator().manual_seed(4)
    image, text = (torch.nn.functional.normalize(torch.randn(4, 8, generator=g), dim=-1) for _ in range(2))
    x = TermInputs({"image": image, "text": text, "scale": torch.tensor(20.0)}, text, [0, 1, 2, 3])

    def value(loss: str) -> torch.Tensor:
        return global_term(LOSSES.get(loss), loss, 0.5).fn(x)

    assert torch.equal(value("margin"), value("hn")) and not torch.equal(value("hn"), value("infonce"))
    TrainConfig(loss="margin").validate()  # a loss registered after the config was declared is a choice
    on = GoalOptions(segment_hn=True)
    assert torch.equal(goal_segment_loss(image, text, 20.0, loss="margin", gamma=0.5, options=on),
                       goal_segment_loss(image, text, 20.0, loss="hn", gamma=0.5, options=on))
    assert not torch.equal(goal_segment_loss(image, text, 20.0, loss="margin", gamma=0.5, options=on),
                           goal_segment_loss(image, text, 20.0, loss="infonce", gamma=0.5, options=on))


# --- side inputs: the data set's declaration -----------------------------------------------------------------
def test_side_inputs_are_what_the_data_set_declares_not_its_name():
    synth = load_dataset("synthdense", protocol="train", n_families={"train": 2, "test": 2})
    assert synth.side_inputs == {SEGMENT_GEOMETRY, OUTLINES}
    assert subset_fraction(synth, 0.5, 0).side_inputs == synth.side_inputs  # a subset keeps them
    renamed = dataclasses.replace(synth, name="my-scenes")  # another name, the same declaration
    assert EdgeSettings().resolved(renamed).method == "outline"
    assert default_sidecar_path(renamed) == default_sidecar_path(synth) == Path(synth.meta["root"]) / "train" / \
        "segments.json"
    assert synthdense_scenes(renamed)[0].keys() == set(synth.image_ids)
    silent = dataclasses.replace(synth, side_inputs=frozenset())  # named synthdense, declaring nothing
    assert EdgeSettings().resolved(silent).method == "canny"
    with pytest.raises(ConfigError, match="--edges outline"):
        EdgeSettings(method="outline").resolved(silent)
    assert default_sidecar_path(silent).parent.name == "segments"  # the cache's, as for any other data
    with pytest.raises(DataError, match="geometry is unknown"):
        synthdense_scenes(silent)


# --- the trainer's periodic evaluation: a callable its caller hands in ----------------------------------------
def test_the_trainer_imports_no_evaluation():
    code = ("import sys, hnbench.train.trainer\n"
            "print(sorted(m for m in sys.modules if m.startswith('hnbench.evaluation')))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]"


def test_the_trainer_evaluates_with_the_callable_it_is_handed(micro_config, tmp_path):
    pairs = make_pairs(tmp_path, n=8)
    data = write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    config = TrainConfig.from_dict({"model": "hnb-micro", "model_config": str(micro_config), "dataset": str(data),
                                    "epochs": 1, "batch_size": 4, "num_workers": 0, "eval_dataset": str(data),
                                    "output": str(tmp_path / "run")})
    with pytest.raises(ConfigError, match="needs a periodic evaluation"):
        train(config, progress=False)  # an eval_dataset and nothing to evaluate it with: before anything is written
    assert not (tmp_path / "run").exists()
    calls = []

    def evaluate(encoder: Any, *, device: str, epoch: int, output_dir: Path) -> dict[str, Any]:
        calls.append((encoder.info.pretrained, device, epoch, output_dir, encoder.model.training))
        return {"dataset": "seen", "score": 10 * epoch}

    train(config, progress=False, evaluate=evaluate)
    run = tmp_path / "run"
    assert calls == [(str(run / f"epoch-{e:03d}"), "cpu", e, run / "eval" / f"epoch-{e:03d}", False) for e in (0, 1)]
    records = [json.loads(x) for x in (run / "diagnostics.jsonl").read_text().splitlines()]
    assert [r for r in records if r["kind"] == "eval"] == [
        {"kind": "eval", "epoch": 0, "step": 0, "dataset": "seen", "score": 0},
        {"kind": "eval", "epoch": 1, "step": 2, "dataset": "seen", "score": 10}]
