"""Options declared once: CLI flags, the Python API, the result record and the resume check read the same fields."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
from pathlib import Path

import pytest
from conftest import assert_one_line_error, make_pairs, write_jsonl

from hnbench.cli import build_parser, eval_settings, main
from hnbench.data import load_dataset
from hnbench.errors import ConfigError
from hnbench.evaluation.evaluate import evaluate, run_evaluation
from hnbench.models import load_model
from hnbench.registry import TASKS
from hnbench.settings import (
    EvalSettings,
    HardnessSettings,
    check_minimums,
    choices_of,
    field_types,
    flag_of,
    flat_key,
    help_of,
    negated_help,
)
from hnbench.tasks.options import MonotonicityOptions, ZeroShotOptions
from hnbench.train.config import TrainConfig


def _subparser(name: str):
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return parser, sub.choices[name]


def _declared_help(action, meta) -> str:
    """The help a flag is generated with: the declared one, or for ``--no-X`` what that flag does."""
    return negated_help(meta) if action.option_strings[0].startswith("--no-") else help_of(meta)


def _by_dest(p) -> dict:
    return {a.dest: a for a in p._actions if a.help != argparse.SUPPRESS}  # not a renamed flag's old spelling


@pytest.mark.parametrize("command", ["eval", "demo"])
def test_every_eval_setting_is_a_flag_with_its_help(command):
    _, p = _subparser(command)
    actions = _by_dest(p)
    flagged = [f for f in dataclasses.fields(EvalSettings) if f.metadata["cli"]]
    # progress is the global -q, distributed follows torchrun's environment; task_options: the task's own flags
    assert {f.name for f in dataclasses.fields(EvalSettings)} - {f.name for f in flagged} == {
        "progress", "distributed", "task_options"}
    for entry in TASKS.entries():  # each task's own options: a flag each, in the task's group, with its help
        options = entry.options_class()
        for f in dataclasses.fields(options) if options else ():
            action = actions[flat_key(f, entry.prefix)]
            assert action.option_strings == [flag_of(f, entry.prefix)] and action.default is None
            assert action.help.replace("%%", "%") == help_of(f.metadata)
            group = next(g for g in p._action_groups if action in g._group_actions)
            assert group.title == f"--task {entry.name}"
    assert actions["templates"].option_strings == ["--templates"] and actions["prefixes"].option_strings == ["--prefixes"]
    for f in flagged:
        assert f.name in actions, f"--{f.name} missing on hnbench {command}"
        action = actions[f.name]
        assert action.option_strings and action.option_strings[0].startswith("--")
        assert action.help.replace("%%", "%") == _declared_help(action, f.metadata)
        if f.metadata["choices"]:
            assert list(action.choices) == list(choices_of(f.metadata))
    assert actions["ks"].option_strings == ["--k"] and actions["ci"].option_strings == ["--no-ci"]
    assert actions["use_cache"].option_strings == ["--no-cache"] and actions["seed"].option_strings == ["--seed"]


def test_cli_and_python_api_make_the_same_settings(tmp_path):
    parser, _ = _subparser("eval")
    base = ["eval", "--model", "m", "--dataset", "d", "--output", str(tmp_path)]
    assert eval_settings(parser.parse_args(base)) == EvalSettings()
    flags = ["--device", "cpu", "--batch-size", "8", "--text-batch-size", "16", "--num-workers", "0",
             "--context-length", "77", "--precision", "bf16", "--amp", "--backend", "torch", "--k", "1", "3",
             "--no-ci", "--seed", "5", "--skip-invalid", "--no-cache", "--cache-dir", str(tmp_path / "c"),
             "--search", "approximate", "--overwrite", "--task", "zeroshot", "--templates", "simple",
             "--limit", "4", "--scorer", "finelip-finegrained", "--rerank-top", "7"]
    python = EvalSettings(device="cpu", batch_size=8, text_batch_size=16, num_workers=0, context_length=77,
                          precision="bf16", amp=True, backend="torch", ks=[1, 3], ci=False, seed=5,
                          skip_invalid=True, use_cache=False, cache_dir=tmp_path / "c", search="approximate",
                          overwrite=True, progress=False, task="zeroshot", task_options={"templates": "simple"},
                          limit=4, scorer="finelip-finegrained", rerank_top=7)
    assert eval_settings(parser.parse_args(["-q", *base, *flags])) == python
    assert python.task_options == ZeroShotOptions(templates="simple")
    monotonicity = eval_settings(parser.parse_args([*base, "--task", "monotonicity", "--prefixes", "captions"]))
    assert monotonicity == EvalSettings(task="monotonicity", task_options=MonotonicityOptions(prefixes="captions"))
    # every field was given a non-default value above, so no flag is silently ignored
    assert all(getattr(python, f.name) != f.default for f in dataclasses.fields(EvalSettings)
               if f.metadata["cli"] and f.name != "device")


def test_a_task_option_is_the_tasks_own_and_recorded_under_its_flat_key(tmp_path, capsys):
    """A task's option given to another task is one line naming the task it belongs to (CLI and API), before
    anything loads; the chosen task's is recorded under its flat key only when set, and every result lists
    every task's identity options, as before they moved into the tasks."""
    for argv, task in ((["--templates", "simple"], "retrieval"), (["--task", "zeroshot", "--prefixes", "captions"],
                                                                   "zeroshot")):
        rc = main(["eval", "--model", "no-such-arch", "--dataset", str(tmp_path / "absent.jsonl"),
                   "--output", str(tmp_path / "out"), *argv])
        assert rc == 2
        assert_one_line_error(capsys.readouterr().err, f"is an option of --task {'zeroshot' if task == 'retrieval' else 'monotonicity'}, "
                                  f"not of --task {task}")
    with pytest.raises(ConfigError, match="--templates is an option of --task zeroshot, not of --task retrieval"):
        evaluate("no-such-arch", str(tmp_path / "absent.jsonl"), output_dir=tmp_path / "out", templates="simple")
    with pytest.raises(ConfigError, match=r"--task monotonicity has no option 'prefix' \(did you mean 'prefixes'"):
        EvalSettings(task="monotonicity", task_options={"prefix": "captions"}).validate()
    with pytest.raises(ConfigError, match="--prefixes must be one of sentences, captions"):
        EvalSettings(task="monotonicity", task_options={"prefixes": "words"}).validate()
    with pytest.raises(ConfigError, match="--task retrieval has no options of its own"):
        EvalSettings(task_options={"templates": "simple"}).validate()
    from hnbench.evaluation.suites import run_suite

    with pytest.raises(ConfigError, match="--templates is an option of --task zeroshot, not of --task retrieval"):
        run_suite("zero-shot-splits", ["no-such-arch"], output_dir=tmp_path / "out", templates="simple")
    assert not (tmp_path / "out").exists()
    assert "templates" not in EvalSettings(task="zeroshot").recorded()
    assert EvalSettings(task="zeroshot", task_options={"templates": "simple"}).recorded()["templates"] == "simple"
    assert {"templates", "prefixes"} <= set(EvalSettings().recorded()["identity"])


def test_unknown_evaluate_keyword_suggests_the_field(tmp_path):
    with pytest.raises(TypeError, match="did you mean 'seed'"):
        evaluate("no-such-arch", str(tmp_path / "absent.jsonl"), sed=3)


def test_bad_seed_is_refused_before_loading(tmp_path, capsys):
    with pytest.raises(ConfigError, match="--seed"):
        evaluate("no-such-arch", str(tmp_path / "absent.jsonl"), output_dir=tmp_path / "out", seed=-1)
    rc = main(["eval", "--model", "no-such-arch", "--dataset", str(tmp_path / "absent.jsonl"),
               "--output", str(tmp_path / "out"), "--seed", "-1"])
    err = capsys.readouterr().err
    assert rc == 2 and "--seed" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_seed_changes_the_bootstrap_only(micro_config, tmp_path, capsys):
    pairs = make_pairs(tmp_path, n=24)
    data = str(write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs]))
    kw = {"model_config": str(micro_config), "progress": False, "num_workers": 0}
    default = evaluate("hnb-micro", data, output_dir=tmp_path / "default", **kw)
    zero = evaluate("hnb-micro", data, seed=0, **kw)
    other = evaluate("hnb-micro", data, output_dir=tmp_path / "seed7", seed=7, **kw)
    assert default.metrics == zero.metrics == other.metrics
    assert default.ci95 == zero.ci95 and default.ci95 != other.ci95
    # the default is not written (results keep their bytes); another seed is
    assert "seed" not in default.settings and other.settings["seed"] == 7
    assert json.loads(open(other.path).read())["settings"]["seed"] == 7
    # the core on loaded objects, and a settings object with a keyword replacing one of its fields
    core = run_evaluation(load_model("hnb-micro", model_config=str(micro_config)), load_dataset(data),
                          EvalSettings(seed=7, progress=False, num_workers=0))
    assert core.metrics == other.metrics and core.ci95 == other.ci95 and core.settings["seed"] == 7
    both = evaluate("hnb-micro", data, model_config=str(micro_config), settings=EvalSettings(seed=7, ci=False),
                    progress=False, num_workers=0, ci=True)
    assert both.ci95 == other.ci95
    rc = main(["-q", "eval", "--model", "hnb-micro", "--model-config", str(micro_config), "--dataset", data,
               "--output", str(tmp_path / "cli"), "--num-workers", "0", "--seed", "7", "--json"])
    cli = json.loads(capsys.readouterr().out)
    assert rc == 0 and cli["ci95"] == other.ci95 and cli["settings"]["seed"] == 7


# --- training: TrainConfig's field metadata ---------------------------------------------------------
def test_resume_free_comes_from_train_config_metadata():
    from hnbench.train.state import RESUME_FREE, check_resume_config
    from hnbench.train.trainer import TrainConfig

    declared = {f.name for f in dataclasses.fields(TrainConfig) if f.metadata["resume_free"]}
    assert RESUME_FREE == declared
    # the set the trainer refused with before it was generated: where a run may and may not change on resume
    assert declared == {"output", "resume", "overwrite", "stop_at_step", "num_workers", "log_every", "save_every",
                        "device", "diag_every", "active_threshold", "eval_dataset", "eval_task", "eval_protocol",
                        "eval_data_root", "eval_dataset_options", "eval_every", "eval_at_start", "eval_batch_size"}
    saved = dataclasses.asdict(TrainConfig())
    check_resume_config(saved, {**saved, **{name: "changed" for name in declared}})
    with pytest.raises(ConfigError, match="cannot resume.*lr"):
        check_resume_config(saved, {**saved, "lr": 1.0})


def test_train_flags_come_from_train_config_fields(tmp_path):
    from hnbench.registry import RECIPE_DIR
    from hnbench.train.config import options_class
    from hnbench.train.trainer import TrainConfig, load_recipe

    parser, p = _subparser("train")
    actions = _by_dest(p)
    for f in dataclasses.fields(TrainConfig):
        if not f.metadata["cli"]:
            assert isinstance(f.default_factory(), dict)  # only the loaders' option tables: recipe / --set
            continue
        action = actions[f.name]
        assert action.default is None, f"--{f.name} would override a recipe's {f.name} unasked"
        if f.name not in ("model", "pretrained", "model_config", "dataset", "data_root", "protocol"):  # shared
            assert action.help == _declared_help(action, f.metadata)
        if f.metadata["choices"]:
            assert list(action.choices) == list(choices_of(f.metadata))
    # recipe keys are field names, or the chosen objective's table of the options it declares
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    for recipe in RECIPE_DIR.glob("*.toml"):
        keys = load_recipe(str(recipe))
        tables = set(keys) - names
        assert tables <= {keys.get("objective")}, recipe.name
        for table in tables:
            assert set(keys[table]) <= {f.name for f in dataclasses.fields(options_class(table))}, recipe.name
    for f in dataclasses.fields(TrainConfig):  # the declared choices are the ones the config accepts
        for value in f.metadata["choices"] or ():
            TrainConfig.from_dict({f.name: value})
        if f.metadata["choices"]:
            with pytest.raises(ConfigError, match=f.name):
                TrainConfig.from_dict({f.name: "no-such-choice"})
    args = parser.parse_args(["train", "--recipe", "x", "--lora-targets", "c_fc,c_proj", "--resume",
                              "--no-eval-at-start", "--amp"])
    assert args.device is None  # no --device: the recipe's device stands (no special case)
    assert args.lora_targets == ["c_fc", "c_proj"] and args.resume == "" and args.eval_at_start is False
    assert args.amp is True and args.lock_text is None


# --- hardness -----------------------------------------------------------------------------------------
def test_every_hardness_setting_is_a_flag_and_the_cli_matches_python(tmp_path):
    import inspect

    from hnbench.hardness.analyze import analyze
    from hnbench.settings import HardnessSettings

    parser, p = _subparser("hardness")
    actions = _by_dest(p)
    for f in dataclasses.fields(HardnessSettings):
        if f.metadata["cli"]:
            assert actions[f.name].help.replace("%%", "%") == _declared_help(actions[f.name], f.metadata)
    base = ["hardness", "--dataset", "d", "--model", "m", "--output", str(tmp_path)]
    assert parser.parse_args(base) is not None
    from hnbench.cli import settings_from_args

    assert settings_from_args(HardnessSettings, parser.parse_args(base)) == HardnessSettings()
    args = parser.parse_args(["-q", *base, "--batch-size", "8", "--edges", "0", "0.9", "1", "--sample-pairs", "5",
                              "--no-images", "--results", "a.json", "--results", "b.json", "--show", "3",
                              "--no-cache", "--seed", "2", "--context-length", "77"])
    assert settings_from_args(HardnessSettings, args) == HardnessSettings(
        batch_size=8, edges=[0, 0.9, 1], n_sample_pairs=5, images=False, results=["a.json", "b.json"], n_show=3,
        use_cache=False, seed=2, context_length=77, progress=False)
    # analyze's defaults are HardnessSettings' (one declaration)
    defaults = HardnessSettings()
    for name, param in inspect.signature(analyze).parameters.items():
        if name in {f.name for f in dataclasses.fields(HardnessSettings)} and name != "progress":
            assert param.default == getattr(defaults, name), name


def test_another_bootstrap_seed_is_its_own_result_file(micro_config, tmp_path):
    """The bootstrap seed changes the intervals, so it is in the settings hash: a --seed 7 run never replaces
    the seed-0 file in the same folder; the default seed keeps the names files had before seeds existed."""
    pairs = make_pairs(tmp_path, n=8)
    data = str(write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs]))
    kw = {"model_config": str(micro_config), "progress": False, "num_workers": 0, "output_dir": tmp_path / "out"}
    zero = evaluate("hnb-micro", data, **kw)
    seven = evaluate("hnb-micro", data, seed=7, **kw)
    assert zero.path != seven.path and Path(zero.path).is_file() and Path(seven.path).is_file()
    assert "seed" not in zero.result_settings() and seven.result_settings()["seed"] == 7


@pytest.mark.parametrize("cls", [EvalSettings, HardnessSettings, TrainConfig])
def test_declared_integer_bounds_are_the_only_integer_checks(cls):
    """Each field's ``minimum`` is checked by one rule (flag named, None allowed where it is the default)."""
    kinds = field_types(cls)
    bounded = [f for f in dataclasses.fields(cls) if f.metadata.get("minimum") is not None and kinds[f.name][0] is int]
    assert bounded
    for f in bounded:
        for bad in (f.metadata["minimum"] - 1, 2.5, True):
            with pytest.raises(ConfigError, match=re.escape(f.metadata["flag"] or "--" + f.name.replace("_", "-"))):
                check_minimums(cls(**{f.name: bad}))
        if f.default is None:
            check_minimums(cls(**{f.name: None}))
    with pytest.raises(ConfigError, match="num_workers" if cls is TrainConfig else "--num-workers"):
        cls(num_workers=-1).validate()  # each settings class has one validation entry, and it goes through it


@pytest.mark.parametrize("cls", [HardnessSettings, TrainConfig])  # EvalSettings has no float field
def test_float_fields_are_finite_and_within_their_declared_bounds(cls):
    """Every float field of every settings class refuses NaN and infinities; the bounds a field declares
    (``minimum``/``maximum`` inclusive, ``above``/``below`` exclusive) are checked by the same rule."""
    floats = [f for f in dataclasses.fields(cls) if field_types(cls)[f.name][0] is float]
    assert floats
    bounds = ("minimum", "above", "maximum", "below")
    for f in floats:
        flag = re.escape(f.metadata["flag"] or "--" + f.name.replace("_", "-"))
        for bad in (float("nan"), float("inf"), float("-inf")):
            with pytest.raises(ConfigError, match=f"{flag} must be a finite number"):
                check_minimums(cls(**{f.name: bad}))
        for kind in bounds:
            edge = f.metadata.get(kind)
            if edge is None:
                continue
            outside = {"minimum": edge - 1e-6, "above": edge, "maximum": edge + 1e-6, "below": edge}[kind]
            with pytest.raises(ConfigError, match=flag):
                check_minimums(cls(**{f.name: outside}))
        check_minimums(cls(**{f.name: f.default}))  # the default is within its bounds
    declared = {f.name for f in floats if any(f.metadata.get(k) is not None for k in bounds)}
    if cls is TrainConfig:  # the rates, weights and fractions training divides by or takes logs of
        assert {"lr", "gamma", "data_fraction", "label_smoothing", "lora_dropout", "init_logit_scale"} <= declared
