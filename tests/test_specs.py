"""The data spec and the model spec — declared once, generated flags, recorded, reloaded."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
from pathlib import Path

import pytest
from benchmark_fixtures import build_dci, build_urban1k, goal_list
from conftest import assert_one_line_error, make_pairs, snapshot, write_jsonl

import hnbench
from hnbench.cli import build_parser, main
from hnbench.settings import help_of

PACKAGE = Path(hnbench.__file__).parent  # the package under test


def _eval(micro_config, out: Path, *argv: str) -> tuple[int, dict | None]:
    rc = main(["-q", "eval", "--model", "hnb-micro", "--model-config", str(micro_config), "--output", str(out),
               "--num-workers", "0", "--no-ci", *argv])
    found = sorted(out.glob("*.json")) if out.is_dir() else []
    return rc, (json.loads(found[0].read_text()) | {"path": str(found[0])} if found else None)


def _manifest(tmp_path: Path, n: int = 6, **extra_columns) -> Path:
    pairs = make_pairs(tmp_path, n=n)
    rows = [{"image": p, "caption": c, **{k: f(i, p, c) for k, f in extra_columns.items()}}
            for i, (p, c) in enumerate(pairs)]
    return write_jsonl(tmp_path / "m.jsonl", rows)


# --- every DataSpec field: set it, eval records it, browse reloads it with no flag -------------------------
def _case_dataset(tmp_path):
    m = _manifest(tmp_path)
    return ["--dataset", str(m)], "dataset", str(m.resolve())


def _case_data_root(tmp_path):
    build_urban1k(tmp_path, n=11)
    return (["--dataset", "urban1k", "--data-root", str(tmp_path), "--allow-count-mismatch"], "data_root",
            str(tmp_path.resolve()))


def _case_protocol(tmp_path):
    build_urban1k(tmp_path, n=11)
    return (["--dataset", "urban1k", "--data-root", str(tmp_path), "--protocol", "longclip",
             "--allow-count-mismatch"], "protocol", "longclip")


def _case_split(tmp_path):
    import datasets

    pairs = make_pairs(tmp_path, n=12)
    half = {name: datasets.Dataset.from_dict({"image": [str(tmp_path / p) for p, _ in part],
                                              "caption": [c for _, c in part]}).cast_column("image", datasets.Image())
            for name, part in (("train", pairs[:6]), ("validation", pairs[6:]))}
    datasets.DatasetDict(half).save_to_disk(str(tmp_path / "hf"))
    return ["--dataset", str(tmp_path / "hf"), "--split", "validation"], "split", "validation"


def _case_image_column(tmp_path):
    pairs = make_pairs(tmp_path, n=6)
    m = write_jsonl(tmp_path / "m.jsonl", [{"picture": p, "caption": c} for p, c in pairs])
    return ["--dataset", str(m), "--image-column", "picture"], "image_column", "picture"


def _case_caption_column(tmp_path):
    m = _manifest(tmp_path, long=lambda i, p, c: f"a long caption number {i}: {c} " * 3)
    return ["--dataset", str(m), "--caption-column", "long"], "caption_column", "long"


def _case_name(tmp_path):
    return ["--dataset", str(_manifest(tmp_path)), "--name", "my-set"], "name", "my-set"


def _case_split_file(tmp_path):
    build_dci(tmp_path / "dci")
    lst = goal_list(tmp_path / "lists" / "DCI_test.json", [0, 1, 2, 4])
    return (["--dataset", "dci", "--data-root", str(tmp_path / "dci"), "--protocol", "goal", "--split-file", str(lst),
             "--allow-count-mismatch"], "split_file", [str(lst.resolve())])


def _case_skip_invalid(tmp_path):
    pairs = make_pairs(tmp_path, n=6)
    rows = [{"image": p, "caption": c} for p, c in pairs] + [{"image": "images/missing.png", "caption": "gone"}]
    return ["--dataset", str(write_jsonl(tmp_path / "m.jsonl", rows)), "--skip-invalid"], "skip_invalid", True


def _case_allow_count_mismatch(tmp_path):
    build_urban1k(tmp_path, n=11)
    return (["--dataset", "urban1k", "--data-root", str(tmp_path), "--allow-count-mismatch"], "allow_count_mismatch",
            True)


def _case_allow_outside_paths(tmp_path):
    pairs = make_pairs(tmp_path, n=6)
    (tmp_path / "sub").mkdir()
    m = write_jsonl(tmp_path / "sub" / "m.jsonl", [{"image": f"../{p}", "caption": c} for p, c in pairs])
    return ["--dataset", str(m), "--allow-outside-paths"], "allow_outside_paths", True


DATA_CASES = {name.removeprefix("_case_"): fn for name, fn in globals().copy().items() if name.startswith("_case_")}


def test_every_data_spec_field_has_a_recorded_and_reloaded_case():
    # hnbench.specs is imported inside the tests, not at module level: without it, each test fails alone
    from hnbench.specs import DataSpec

    assert set(DATA_CASES) == {f.name for f in dataclasses.fields(DataSpec)}


@pytest.mark.parametrize("field", sorted(DATA_CASES))
def test_data_spec_field_is_recorded_and_browse_reloads_it(field, micro_config, tmp_path):
    argv, name, expected = DATA_CASES[field](tmp_path)
    rc, res = _eval(micro_config, tmp_path / "out", *argv)
    assert rc == 0 and res is not None
    assert res["dataset"]["spec"][name] == expected
    # the spec holds nothing it was not given: the others are the defaults (so older results' bytes stay)
    assert set(res["dataset"]["spec"]) <= {"dataset", *(a[2:].replace("-", "_") for a in argv if a.startswith("--"))}
    assert main(["-q", "browse", res["path"], "--output", str(tmp_path / "page")]) == 0  # no data flag
    assert (tmp_path / "page" / "index.html").is_file()


def test_model_spec_fields_are_recorded(micro_config, tmp_path):
    from safetensors.torch import save_file

    from hnbench.models import load_model
    from hnbench.specs import ModelSpec

    enc = load_model("hnb-micro", model_config=str(micro_config), context_length=32)
    ckpt = tmp_path / "micro.safetensors"
    save_file({k: v.contiguous() for k, v in enc.model.state_dict().items()}, str(ckpt))
    rc, res = _eval(micro_config, tmp_path / "out", "--dataset", str(_manifest(tmp_path)), "--pretrained", str(ckpt),
                    "--context-length", "32")
    assert rc == 0 and res is not None
    m = res["model"]  # --model and --model-config: the architecture the config registers
    assert (m["arch"], m["pretrained"], m["context_length"]) == ("hnb-micro", str(ckpt), 32)
    # trust_remote_code is recorded by the remote-code family that needs it (tests/test_models_remote.py)
    assert {f.name for f in dataclasses.fields(ModelSpec)} == {"model", "pretrained", "model_config", "context_length",
                                                               "trust_remote_code"}


def test_older_results_without_a_spec_still_reload(micro_config, tmp_path):
    rc, res = _eval(micro_config, tmp_path / "out", "--dataset", str(_manifest(tmp_path)))
    assert rc == 0 and res is not None
    path = Path(res["path"])
    old = json.loads(path.read_text())
    old["dataset"].pop("spec", None)  # as written before results recorded their spec
    path.write_text(json.dumps(old))
    assert main(["-q", "browse", str(path), "--output", str(tmp_path / "page")]) == 0


# --- each data option reaches hardness and browse; data and model flags declared once -----------------
def test_hardness_measures_the_caption_column_given(micro_config, tmp_path, capsys):
    """All ``caption`` values are one text (pairwise mean 1); ``long`` holds distinct ones."""
    pairs = make_pairs(tmp_path, n=8)
    rows = [{"image": p, "caption": "the same caption", "long": f"caption {i}: {c}"} for i, (p, c) in enumerate(pairs)]
    m = write_jsonl(tmp_path / "m.jsonl", rows)
    base = ["-q", "hardness", "--dataset", str(m), "--model", "hnb-micro", "--model-config", str(micro_config),
            "--n-batches", "2", "--batch-size", "4", "--no-images", "--num-workers", "0"]
    assert main([*base, "--output", str(tmp_path / "default")]) == 0
    assert main([*base, "--caption-column", "long", "--output", str(tmp_path / "long")]) == 0
    means = [float(x) for x in re.findall(r"pairwise mean ([0-9.]+)", capsys.readouterr().out)]
    assert means[0] == pytest.approx(1.0, abs=1e-3) and means[1] < 0.999
    report = json.loads((tmp_path / "long" / "hardness.json").read_text())
    assert report["dataset"]["n_captions"] == 8


def test_browse_reloads_a_partial_benchmark(micro_config, tmp_path):
    build_urban1k(tmp_path, n=11)
    rc, res = _eval(micro_config, tmp_path / "out", "--dataset", "urban1k", "--data-root", str(tmp_path),
                    "--allow-count-mismatch")
    assert rc == 0 and res is not None
    assert main(["-q", "browse", res["path"], "--output", str(tmp_path / "page"), "--data-root", str(tmp_path)]) == 0


def test_browse_reloads_a_caption_column_result(micro_config, tmp_path):
    argv, _, _ = _case_caption_column(tmp_path)
    rc, res = _eval(micro_config, tmp_path / "out", *argv)
    assert rc == 0 and res is not None and res["dataset"]["meta"]["columns"] == ["image", "long"]
    assert main(["-q", "browse", res["path"], "--output", str(tmp_path / "page")]) == 0
    assert "a long caption number 0" in (tmp_path / "page" / "index.html").read_text()


def _parsers(parser: argparse.ArgumentParser, prefix: str = "hnbench"):
    yield prefix, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, f"{prefix} {name}")


def test_data_and_model_flags_are_declared_once_with_their_help():
    """--split-file, --protocol, --data-root, --model, ... have one declaration: every subcommand's flag carries
    the spec field's help (train's too), and no hand-written add_argument names them."""
    from hnbench.specs import DataSpec, ModelSpec

    source = "".join(f.read_text() for f in sorted((PACKAGE / "cli").glob("*.py")))  # every module of the CLI
    own = {"hnbench leaderboard": {"--model", "--protocol", "--context-length"},  # filters of the board, not what to load
           "hnbench hardness": {"--dataset", "--model", "--pretrained"},  # repeatable, to compare several
           "hnbench suite": {"--model", "--pretrained"},  # repeatable: every model of the sweep
           "hnbench cache clear": {"--model"}}  # cached models to remove
    for cls in (DataSpec, ModelSpec):
        for f in dataclasses.fields(cls):
            flag = "--" + f.name.replace("_", "-")
            hand = sum(flag in flags for flags in own.values())
            # hardness and suite share one declaration of their repeatable pair (cli._add_model_list_args)
            assert len(re.findall(rf'add_argument\(\s*"{flag}"', source)) <= hand, flag
            for prog, p in _parsers(build_parser()):
                action = p._option_string_actions.get(flag)
                if action is not None and flag not in own.get(prog, ()):
                    assert action.help.replace("%%", "%") == help_of(f.metadata), (prog, flag)
    train = dict(_parsers(build_parser()))["hnbench train"]
    for flag in ("--model", "--pretrained", "--dataset", "--protocol", "--data-root", "--split-file", "--name"):
        assert flag in train._option_string_actions


def test_at_most_40_hand_written_flags():
    count = sum(len(re.findall(r'add_argument\(\s*"--', p.read_text())) for p in PACKAGE.rglob("*.py"))
    assert count <= 40, count


def test_every_flag_of_every_subcommand_has_help():
    seen = 0
    for prog, p in _parsers(build_parser()):
        for action in p._actions:
            if action.option_strings and not isinstance(action, argparse._HelpAction):
                assert action.help and action.help.strip(), (prog, action.option_strings)
                seen += 1
        text = p.format_help()
        for action in p._actions:
            for flag in action.option_strings:
                assert flag in text or action.help == argparse.SUPPRESS, (prog, flag)  # a renamed flag's old spelling
    assert seen > 100


# --- a data flag the kind of data does not read ---------------------------------------------------------
@pytest.mark.parametrize("argv, words", [
    (["--dataset", "docci", "--caption-column", "long"], ("--caption-column", "docci")),
    (["--dataset", "MANIFEST", "--split-file", "x.json"], ("--split-file", "manifest")),
    (["--dataset", "MANIFEST", "--protocol", "test"], ("--protocol", "manifest")),
])
@pytest.mark.parametrize("command", ["eval", "hardness", "train"])
def test_a_data_flag_the_kind_does_not_read_is_refused(command, argv, words, tmp_path, capsys):
    m = _manifest(tmp_path)
    argv = [str(m) if a == "MANIFEST" else a for a in argv]
    out = tmp_path / "out"
    model = {"eval": ["--model", "no-such-arch"], "hardness": ["--model", "no-such-arch"], "train": []}[command]
    before = snapshot(tmp_path)
    rc = main([command, *model, *argv, "--output", str(out)])
    assert rc == 2
    assert_one_line_error(capsys.readouterr().err, *words)
    assert snapshot(tmp_path) == before  # nothing written, nothing loaded (the model does not even exist)


def test_browse_refuses_a_data_flag_the_recorded_kind_does_not_read(micro_config, tmp_path, capsys):
    rc, res = _eval(micro_config, tmp_path / "out", "--dataset", str(_manifest(tmp_path)))
    assert rc == 0 and res is not None
    capsys.readouterr()
    before = snapshot(tmp_path)
    assert main(["browse", res["path"], "--output", str(tmp_path / "page"), "--protocol", "test"]) == 2
    assert_one_line_error(capsys.readouterr().err, "--protocol", "manifest")
    assert snapshot(tmp_path) == before


def test_datasets_info_offers_only_the_registered_kinds_flags():
    info = dict(_parsers(build_parser()))["hnbench datasets info"]
    assert "--data-root" in info._option_string_actions and "--caption-column" not in info._option_string_actions


def test_python_api_keywords_map_onto_the_data_spec(micro_config, tmp_path):
    from hnbench.errors import ConfigError
    from hnbench.evaluation.evaluate import evaluate

    m = _manifest(tmp_path, long=lambda i, p, c: f"long {i} {c}")
    r = evaluate("hnb-micro", m, model_config=str(micro_config), caption_column="long", num_workers=0, ci=False,
                 progress=False, dataset_options={"name": "api-set"})
    assert r.dataset["spec"] == {"dataset": str(m.resolve()), "caption_column": "long", "name": "api-set"}
    assert r.dataset["name"] == "api-set"
    with pytest.raises(ConfigError, match="--caption-column is not read by 'docci'"):
        evaluate("no-such-arch", "docci", caption_column="long")


def test_hardness_results_rebuilds_the_recorded_data(micro_config, tmp_path, capsys):
    """``hardness --results R`` with no --dataset measures the data R records (its caption column too)."""
    argv, _, _ = _case_caption_column(tmp_path)
    rc, res = _eval(micro_config, tmp_path / "out", *argv)
    assert rc == 0 and res is not None
    base = ["-q", "hardness", "--model", "hnb-micro", "--model-config", str(micro_config), "--n-batches", "2",
            "--batch-size", "4", "--no-images", "--num-workers", "0", "--results", res["path"]]
    assert main([*base, "--output", str(tmp_path / "h")]) == 0
    report = json.loads((tmp_path / "h" / "hardness.json").read_text())
    assert report["dataset"]["fingerprint"] == res["dataset"]["fingerprint"]
    capsys.readouterr()
    assert main(["hardness", "--model", "hnb-micro", "--output", str(tmp_path / "none")]) == 2
    assert_one_line_error(capsys.readouterr().err, "--dataset", "--results")


def test_choices_are_enforced_one_way_in_every_settings_class():
    """A declared ``choices`` is checked by one rule, through each class's one validation entry."""
    from hnbench.errors import ConfigError
    from hnbench.settings import EvalSettings
    from hnbench.train.config import TrainConfig

    with pytest.raises(ConfigError, match=r"^--precision must be one of fp32, fp16, bf16, got 'fp8'$"):
        EvalSettings(precision="fp8").validate()
    with pytest.raises(ConfigError, match=r"^--backend must be one of auto, torch, faiss, faiss-gpu, got 'x'$"):
        EvalSettings(backend="x").validate()
    with pytest.raises(ConfigError, match=r"loss must be one of hn, infonce, got 'HN'"):
        TrainConfig(loss="HN").validate()
    from hnbench.search.exact import BACKENDS  # the one list the search dispatches on

    eval_parser = dict(_parsers(build_parser()))["hnbench eval"]
    assert eval_parser._option_string_actions["--backend"].choices == list(BACKENDS)
    with pytest.raises(ConfigError, match=r"--backend faiss-gpu searches on a CUDA device"):  # before any encoding
        EvalSettings(backend="faiss-gpu", device="cpu").validate()


def test_hardness_captions_file_refuses_the_other_data_flags(tmp_path, capsys):
    captions = tmp_path / "c.txt"
    captions.write_text("a red car\na blue car\n")
    before = snapshot(tmp_path)
    assert main(["hardness", "--captions", str(captions), "--protocol", "test", "--model", "minilm",
                 "--output", str(tmp_path / "out")]) == 2
    assert_one_line_error(capsys.readouterr().err, "--protocol", "--captions")
    assert snapshot(tmp_path) == before


def test_a_result_recording_a_malformed_spec_is_one_line(micro_config, tmp_path, capsys):
    """Result folders are untrusted: a spec of the wrong types is refused in one line, not a traceback."""
    rc, res = _eval(micro_config, tmp_path / "out", "--dataset", str(_manifest(tmp_path)))
    assert rc == 0 and res is not None
    path = Path(res["path"])
    for bad, words in (({"dataset": 3}, ("--dataset", "string")), ({"dataset": res["dataset"]["spec"]["dataset"],
                                                                     "split_file": 5}, ("--split-file",))):
        record = json.loads(path.read_text())
        record["dataset"]["spec"] = bad
        path.write_text(json.dumps(record))
        capsys.readouterr()
        assert main(["browse", str(path), "--output", str(tmp_path / "page")]) == 2
        assert_one_line_error(capsys.readouterr().err, *words)


def test_train_checks_its_evaluation_data_the_same_way():
    from hnbench.errors import ConfigError
    from hnbench.train.config import TrainConfig

    with pytest.raises(ConfigError, match=r"--caption-column is not read by 'docci'"):
        TrainConfig.from_dict({"eval_dataset": "docci", "eval_dataset_options": {"caption_column": "long"}})
    assert TrainConfig.from_dict({"dataset": "synthdense", "protocol": "test"}).data_spec().protocol == "test"
