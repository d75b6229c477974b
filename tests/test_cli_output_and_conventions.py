"""The command line speaks plainly and one way: no raw Python values on screen, one flag convention in every
command, a pretrained tag that fails at once offline, hardness's (model, weights) pairs checked before
anything loads, and the README's install and encoder-protocol examples as written.

Text outputs are checked as exact strings."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import stat
from pathlib import Path

import pytest
from conftest import assert_one_line_error, make_pairs, snapshot, write_jsonl

from hnbench.cli import build_parser, main

REPO = Path(__file__).resolve().parent.parent


def _manifest(root: Path, n: int = 6) -> Path:
    pairs = make_pairs(root, n=n)
    return write_jsonl(root / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])


def _help(*argv: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        build_parser().parse_args([*argv, "--help"])
    return " ".join(out.getvalue().split())  # argparse wraps lines to the terminal's width


# --- raw Python values ---------------------------------------------------------------------------------
def test_value_text_never_spells_python():
    from hnbench.io import value_text

    assert [value_text(v) for v in (None, float("nan"), True, 12.0, 38.8, (0.0, 0.5, 1.0), "cpu")] == \
        ["–", "–", "true", "12", "38.8", "0 0.5 1", "cpu"]
    assert value_text(None, none="none") == "none" and value_text(0.1234, 1, scale=100, suffix="%") == "12.3%"
    assert value_text((), none="none") == "none" and value_text({"used": True, "n": 0}) == "used true, n 0"


def test_datasets_info_on_a_manifest_says_no_none(tmp_path, capsys):
    data = _manifest(tmp_path)
    assert main(["-q", "datasets", "info", str(data)]) == 0
    out = capsys.readouterr().out
    assert "None" not in out, out
    assert f"  loaded from {data}: n_images 6, n_captions 6 (count check: n/a; skipped: none)\n" in out


def test_recall_is_the_decimal_not_its_float_error():
    from hnbench.metrics import recall_at_k

    r = recall_at_k([1] * 97 + [50] * 153, ks=(1,))
    assert json.dumps(r) == '{"R@1": 38.8}'  # 100 * mean gave 38.800000000000004


def test_browse_hardness_table_shows_a_dash_for_an_empty_bucket():
    from hnbench.hardness.schema import RecallBucket as Bucket
    from hnbench.pages.html import _hardness
    from hnbench.pages.page import Page

    rec = {"label": "m", "t2i": [Bucket("[0.9, 1.0]", 0, float("nan"))], "i2t": [Bucket("[0.9, 1.0]", 2, 50.0)]}
    page = Page(title="t", models=[], rows=[], counts={}, hardness=[rec], thumbs={})
    html = _hardness(page)
    assert "nan" not in html
    assert "<tr><td>[0.9, 1.0]</td><td>0</td><td>–</td><td>2</td><td>50.0</td></tr>" in html


def _micro_args(micro_config: Path) -> list[str]:
    return ["--model", "hnb-micro", "--model-config", str(micro_config)]


@pytest.fixture
def scored(micro_config, tmp_path):
    """A random-init micro model scored on a 6-image manifest (the cache filled): the result's path."""
    data = _manifest(tmp_path)
    assert main(["-q", "eval", *_micro_args(micro_config), "--dataset", str(data), "--output",
                 str(tmp_path / "res"), "--num-workers", "0", "--no-ci"]) == 0
    return next((tmp_path / "res").glob("*.json"))


def test_csv_board_rank_is_an_integer(scored, tmp_path, capsys):
    capsys.readouterr()
    assert main(["leaderboard", str(scored.parent), "--format", "csv"]) == 0
    rows = list(__import__("csv").DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["rank"] for r in rows] == ["1"]


def test_cache_ls_names_random_init_and_counts_generated_images(scored, capsys):
    from hnbench.data import load_dataset

    load_dataset("synthdense", n_families={"test": 2, "train": 0}, family_size=2)  # generated into the cache
    capsys.readouterr()
    assert main(["cache", "ls"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "hnb-micro" in line)
    assert re.search(r"hnb-micro\s+random init\s+[0-9a-f]{16}", row), out
    gen = next(line for line in out.splitlines() if line.startswith("generated data"))
    assert re.fullmatch(r"generated data synthdense/[0-9a-f]+: 4 images, [0-9.]+ KiB in .+synthdense/[0-9a-f]+ "
                        r"\(not embeddings: cache clear keeps it\)", gen), gen
    assert main(["cache", "du"]) == 0
    assert re.search(r"KiB  generated data synthdense/[0-9a-f]+ \(4 images; cache clear keeps it\)",
                     capsys.readouterr().out)


# --- one CLI convention ----------------------------------------------------------------------------------
@pytest.mark.parametrize("argv,flag,text", [
    (["eval"], "--no-ci", "--no-ci skip the confidence intervals (without it: bootstrap confidence intervals of R@K)"),
    (["eval"], "--no-cache", "--no-cache neither read nor write the embedding cache: encode everything (without "
                             "it: read and write the embedding cache)"),
    (["hardness"], "--no-images", "--no-images measure the text side only (without it: measure the image side too "
                                  "where images exist)"),
    (["train"], "--no-train-logit-scale", "--no-train-logit-scale freeze the logit scale (without it: train the "
                                          "logit scale)"),
])
def test_negated_flag_help_says_what_the_flag_does(argv, flag, text):
    assert text in _help(*argv)


def test_every_negated_flag_declares_what_it_does():
    from hnbench.settings import negated_help

    def parsers(p):
        yield p
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for child in dict.fromkeys(a.choices.values()):
                    yield from parsers(child)

    negated = [a for p in parsers(build_parser()) for a in p._actions
               if any(s.startswith("--no-") for s in a.option_strings)]
    assert len(negated) >= 6
    for a in negated:
        assert "on by default" not in a.help and not a.help.startswith("turn this off"), (a.option_strings, a.help)
    assert negated_help({"help": "x"}) == "turn this off (without it: x)"


def test_batch_size_means_the_encoder_batch_in_every_command(micro_config, tmp_path, capsys):
    assert "--batch-size BATCH_SIZE images per encoder batch (default 64)" in _help("eval")
    hard = _help("hardness")
    assert "--batch-size" not in hard and "--in-batch-size IN_BATCH_SIZE B of the in-batch negative buckets" in hard
    (tmp_path / "a.txt").write_text("\n".join(f"a red square number {i}" for i in range(12)))
    base = ["-q", "hardness", *_micro_args(micro_config), "--captions", str(tmp_path / "a.txt"), "--n-batches", "2"]
    assert main([*base, "--in-batch-size", "4", "--output", str(tmp_path / "new")]) == 0
    capsys.readouterr()
    assert main([*base, "--batch-size", "4", "--output", str(tmp_path / "old")]) == 0
    err = capsys.readouterr().err
    assert err == "hnbench: warning: --batch-size is now --in-batch-size here (the old spelling will go)\n"
    new, old = (json.loads((tmp_path / d / "hardness.json").read_text()) for d in ("new", "old"))
    assert new["settings"]["batch_size"] == old["settings"]["batch_size"] == 4
    # with a mistake beside it, still one line: the error, the former spelling folded into it
    for argv in ([*base, "--batch-size", "4"],  # argparse's (no --output)
                 [*base, "--batch-size", "4", "--n-batches", "0", "--output", str(tmp_path / "bad")]):  # hnbench's
        with contextlib.suppress(SystemExit):
            assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "error:" in err and err.rstrip().endswith(
            "--batch-size is now --in-batch-size here (the old spelling will go)"), err
    assert not (tmp_path / "bad").exists()


@pytest.mark.parametrize("argv", [["cache", "-q", "ls"], ["cache", "ls", "-q"],
                                  ["datasets", "list", "--quiet"], ["eval", "-q", "--model", "m", "--dataset", "d",
                                                                    "--output", "o"]])
def test_global_flags_parse_the_same_before_or_after_the_subcommand(argv):
    args = build_parser().parse_args(argv)
    assert args.quiet is True and args.verbose is False
    before = build_parser().parse_args(["-q", *(a for a in argv if a not in ("-q", "--quiet"))])
    assert before.quiet is True and vars(before) == vars(args)  # one command, wherever the flag is


def test_eval_with_q_after_the_subcommand_runs_without_progress_bars(scored, micro_config, tmp_path, capsys):
    data = tmp_path / "m.jsonl"
    capsys.readouterr()
    assert main(["eval", *_micro_args(micro_config), "--dataset", str(data), "--output", str(tmp_path / "res"),
                 "--num-workers", "0", "--no-ci", "-q"]) == 0
    assert capsys.readouterr().err == ""  # -q: no progress bars


def test_manifest_errors_are_all_reported_with_file_and_line(tmp_path, capsys):
    pairs = make_pairs(tmp_path, n=4)
    lines = [json.dumps({"image": pairs[0][0], "caption": pairs[0][1]}), "{not json",
             json.dumps({"caption": "no image here"}), json.dumps({"image": pairs[1][0], "caption": ""}),
             json.dumps({"image": "images/gone.png", "caption": "a missing file"}),
             json.dumps({"image": pairs[2][0], "caption": 7})]
    data = tmp_path / "bad.jsonl"
    data.write_text("\n".join(lines) + "\n")
    before = snapshot(tmp_path)
    assert main(["-q", "eval", "--model", "hnbench-tiny", "--dataset", str(data), "--output",
                 str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert_one_line_error(err)
    assert err == (f"hnbench: error: {data}: 5 problems: {data}:2: not valid JSON (Expecting property name enclosed "
                   f"in double quotes); {data}:3: row has no 'image' value; {data}:4: empty caption for image "
                   f"'{pairs[1][0]}'; {data}:6: non-text caption (int '7'; captions must be strings) for image "
                   f"'{pairs[2][0]}'; {data}:5: image 'images/gone.png' not found at {tmp_path}/images/gone.png "
                   "(pass --skip-invalid to drop the unusable items)\n")
    assert snapshot(tmp_path) == before


def test_manifest_errors_are_capped_at_ten_and_the_rest_counted(tmp_path, capsys):
    data = tmp_path / "bad.jsonl"
    data.write_text("".join("{broken\n" for _ in range(14)))
    assert main(["-q", "datasets", "info", str(data)]) == 2
    err = capsys.readouterr().err
    assert_one_line_error(err, f"{data}: 14 problems: {data}:1: not valid JSON", f"{data}:10:", "; and 4 more")
    assert f"{data}:11:" not in err


@pytest.mark.slow
def test_checkpoints_follow_the_umask_and_the_bar_stops_at_stop_at_step(micro_config, tmp_path, capsys):
    from hnbench.train.trainer import TrainConfig, train

    data = _manifest(tmp_path, n=8)
    old = os.umask(0o022)
    try:
        cfg = TrainConfig(model="hnb-micro", model_config=str(micro_config), dataset=str(data), loss="infonce",
                          epochs=3, batch_size=4, num_workers=0, stop_at_step=2, eval_at_start=False,
                          output=str(tmp_path / "run"))
        ckpt = train(cfg, progress=True)
    finally:
        os.umask(old)
    err = capsys.readouterr().err
    bars = re.findall(r"\| (\d+)/(\d+) \[", err)
    assert bars and {total for _, total in bars} == {"2"}, err  # not the schedule's 6 steps
    for f in (ckpt, tmp_path / "run" / "last" / "model.safetensors"):
        assert stat.S_IMODE(f.stat().st_mode) == 0o644, f


# --- the pretrained tag offline ------------------------------------------------------------------------
def test_pretrained_tag_with_hub_offline_fails_at_once_in_one_line(tmp_path, capsys, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))  # HF_HUB_OFFLINE=1: conftest
    before = snapshot(tmp_path)
    assert main(["-q", "eval", "--model", "ViT-B-32", "--pretrained", "laion2b_s34b_b79k", "--dataset", "synthdense",
                 "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err == ("hnbench: error: open_clip weights ViT-B-32/laion2b_s34b_b79k need a download and HF_HUB_OFFLINE is "
                   f"set: no local copy in {tmp_path}/hub/models--laion--CLIP-ViT-B-32-laion2B-s34B-b79K. Fetch them "
                   "once with the internet (they are cached there), or pass a weights file: --pretrained "
                   "PATH.safetensors\n")
    assert snapshot(tmp_path) == before


def test_pretrained_tag_with_hub_unreachable_fails_at_once(tmp_path, monkeypatch):
    from huggingface_hub import constants

    from hnbench.errors import CheckpointError
    from hnbench.models import load_model

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # the discard port: refused at once
    with pytest.raises(CheckpointError) as e:
        load_model("ViT-B-32", "laion2b_s34b_b79k")
    assert str(e.value).startswith("open_clip weights ViT-B-32/laion2b_s34b_b79k need a download and 127.0.0.1 "
                                   "cannot be reached: no local copy in ")


def test_unknown_pretrained_tag_never_lists_itself_as_known():
    from hnbench.errors import CheckpointError
    from hnbench.models import load_model

    with pytest.raises(CheckpointError) as e:
        load_model("ViT-B-32", "laion2b_s34b_b79k_typo")
    text = str(e.value)
    assert text.startswith("ViT-B-32 has no open_clip pretrained tag 'laion2b_s34b_b79k_typo' (known tags: ")
    assert text.endswith("); or pass a weights file: --pretrained PATH.safetensors")
    assert "laion2b_s34b_b79k_typo" not in text.split("known tags:")[1]


# --- hardness: every (model, weights) pair checked before any loads ----------------------------------------
def test_hardness_weights_never_pass_to_the_next_model(micro_config, tmp_path, capsys):
    (tmp_path / "a.txt").write_text("\n".join(f"a red square number {i}" for i in range(12)))
    base = ["-q", "hardness", "--captions", str(tmp_path / "a.txt"), "--model-config", str(micro_config),
            "--output", str(tmp_path / "out")]
    before = snapshot(tmp_path)
    assert main([*base, "--model", "hnb-micro", "--pretrained", "x.safetensors", "--model", "minilm"]) == 2
    assert capsys.readouterr().err == ("hnbench: error: 1 --pretrained values for 2 models: give one per --model, "
                                       "in order ('none' for a model without weights)\n")
    assert main([*base, "--model", "hnb-micro", "--pretrained", "none", "--model", "hnb-micro", "--pretrained",
                 str(tmp_path / "gone.safetensors")]) == 2
    assert capsys.readouterr().err == f"hnbench: error: checkpoint not found: {tmp_path}/gone.safetensors\n"
    assert main([*base, "--model", "hnb-micro", "--pretrained", "none", "--model", "minilm", "--pretrained",
                 "x.safetensors"]) == 2
    assert capsys.readouterr().err == ("hnbench: error: --model minilm is a text-only encoder and takes no weights, "
                                       "got --pretrained x.safetensors (give 'none' for it)\n")
    assert snapshot(tmp_path) == before  # nothing loaded, nothing written


def test_hardness_none_weights_run_and_a_failure_leaves_nothing(micro_config, tmp_path, monkeypatch):
    from hnbench.hardness import run

    (tmp_path / "a.txt").write_text("\n".join(f"a red square number {i}" for i in range(12)))
    base = ["-q", "hardness", "--captions", str(tmp_path / "a.txt"), "--model-config", str(micro_config),
            "--n-batches", "2", "--in-batch-size", "4"]
    assert main([*base, "--model", "hnb-micro", "--pretrained", "none", "--output", str(tmp_path / "ok")]) == 0
    assert json.loads((tmp_path / "ok" / "hardness.json").read_text())["encoder"]["pretrained"] is None
    settings_block = (tmp_path / "ok" / "report.md").read_text().split("## Settings")[1]
    assert "\nlabel_field: none\n" in settings_block  # was "label_field: None"
    assert "None" not in settings_block and "True" not in settings_block and "{" not in settings_block
    assert "\nedges: 0 0.5 0.7 0.8 0.9 1\n" in settings_block
    real, calls = run.hardness, []

    def second_fails(*a, **k):  # the second model's run fails after the first finished
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(run, "hardness", second_fails)
    before = snapshot(tmp_path)
    assert main([*base, "--model", "hnb-micro", "--model", "hnb-micro", "--pretrained", "none", "--pretrained",
                 "none", "--output", str(tmp_path / "two")]) == 130
    assert len(calls) == 2 and not (tmp_path / "two").exists() and snapshot(tmp_path) == before


# --- docs ------------------------------------------------------------------------------------------------
def _readme_block(heading: str, page: str = "docs/guides/models.md") -> str:
    text = (REPO / page).read_text()
    section = text[text.index(heading):]
    return section[section.index("```python\n") + 10:section.index("\n```", section.index("```python\n"))]


@pytest.mark.slow
def test_the_documented_encoder_protocol_example_scores_a_custom_model(tmp_path, monkeypatch, capsys):
    from hnbench.models.base import Encoder

    monkeypatch.chdir(tmp_path)
    scope: dict = {"__name__": "readme_example"}
    exec(compile(_readme_block("## Scoring your own model: the encoder protocol"), "models.md", "exec"), scope)
    assert isinstance(scope["ColourEncoder"](), Encoder)  # the protocol, as documented
    result = scope["result"]
    assert result.model["arch"] == "colour-histogram" and result.dataset["name"] == "synthdense"
    assert result.metrics["t2i"]["R@10"] > 10 * 100 * 10 / result.dataset["n_images"]  # ten times chance
    assert Path(result.path).resolve().parent == tmp_path.resolve() / "results" / "colours"
    assert "| t2i" in capsys.readouterr().out


def test_readme_documents_the_cpu_torch_install_and_keeps_its_two_commands():
    from packaging.specifiers import SpecifierSet

    text = (REPO / "README.md").read_text()
    pinned = re.search(r"^torch==(\S+)$", (REPO / "constraints.txt").read_text(), re.M).group(1)
    claim = re.search(r"since `torch==(\S+)` in `constraints.txt` is satisfied by `(\S+)\+cpu`", text)
    assert claim and claim.groups() == (pinned, pinned)
    assert SpecifierSet(f"=={pinned}").contains(f"{pinned}+cpu")  # so pip keeps the CPU build
    assert (".venv/bin/pip install -c constraints.txt torch torchvision --index-url "
            "https://download.pytorch.org/whl/cpu\n") in text
    for command in ('python3 -m venv .venv && .venv/bin/pip install -c constraints.txt -e . && .venv/bin/hnbench demo',
                    'python3 -m venv .venv && .venv/bin/pip install -c constraints.txt -e ".[dev]" && '
                    '.venv/bin/python -m pytest'):
        assert f"```bash\n{command}\n```" in text
