"""``hnbench models`` lists what a user can pass as ``--model``: the families, hnbench's built-in model (the one that
works offline), the zoo's releases and open_clip's architectures; its default terminal view fits 100 columns, the
md / csv / json outputs keep every row and column."""

from __future__ import annotations

import csv
import io
import json

import open_clip
import pytest

from hnbench.cli import main
from hnbench.models import zoo
from hnbench.models.openclip import register_builtin_configs
from hnbench.registry import MODEL_ZOO, MODELS


def _architectures() -> list[str]:
    register_builtin_configs()
    return list(open_clip.list_models())


def _run(capsys, *args: str) -> str:
    assert main(["models", *args]) == 0
    return capsys.readouterr().out


def _assert_fits(out: str) -> None:
    too_wide = [line for line in out.splitlines() if len(line) > zoo.TERMINAL_WIDTH]
    assert zoo.TERMINAL_WIDTH == 100 and not too_wide, too_wide


def test_the_default_view_fits_100_columns_and_names_every_model_a_user_can_pass(capsys):
    out = _run(capsys)
    _assert_fits(out)
    words = set(out.replace(",", " ").split())
    assert "hnbench-tiny" in words and "synthdense" in words  # the model that works offline, with its weights
    assert set(MODEL_ZOO.names()) <= words and set(MODELS.names()) <= words
    assert set(_architectures()) <= words  # every open_clip architecture, by name
    titles = [line for line in out.splitlines() if line and not line.startswith(" ")]
    assert [t.split(":")[0].split(" (")[0] for t in titles[:4]] == ["Model families", "Built in", "Model zoo",
                                                                    "open_clip architectures"]
    assert "--format md|csv|json" in out.splitlines()[-1]


def test_the_architectures_view_lists_open_clip_architectures_with_their_pretrained_tags(capsys):
    out = _run(capsys, "--architectures")
    _assert_fits(out)
    lines = out.splitlines()
    table = lines[next(i for i, line in enumerate(lines) if line.startswith("---")) + 1:]
    rows = {line.split()[0]: line for line in table if not line.startswith(" ")}
    assert set(rows) == set(_architectures())
    assert "openai" in rows["ViT-B-32"] and "laion2b_s34b_b79k" in out  # ViT-B-32's tags (wrapped lines follow)
    assert "--pretrained synthdense" in rows["hnbench-tiny"]
    assert "longclip-l14" not in out and "Model families" not in out


def test_list_models_has_a_row_per_family_builtin_model_zoo_entry_and_architecture():
    frame = zoo.list_models()
    assert list(dict.fromkeys(frame["kind"])) == list(zoo.MODEL_KINDS)
    by_kind = {k: set(frame.loc[frame["kind"] == k, "name"]) for k in zoo.MODEL_KINDS}
    assert by_kind["family"] == set(MODELS.names()) and by_kind["zoo"] == set(MODEL_ZOO.names())
    assert by_kind["builtin"] == {"hnbench-tiny"}
    assert by_kind["architecture"] == set(_architectures()) - {"hnbench-tiny"}
    assert frame["name"].is_unique
    tiny = frame.set_index("name").loc["hnbench-tiny"]
    cfg = open_clip.get_model_config("hnbench-tiny")
    assert tiny["on_machine"] is True and tiny["context"] == cfg["text_cfg"]["context_length"]
    assert "--pretrained synthdense" in tiny["weights"] and tiny["family"] == "open_clip"
    b32 = frame.set_index("name").loc["ViT-B-32"]
    assert b32["weights"].split(": ", 1)[1].split(", ") == open_clip.list_pretrained_tags_by_model("ViT-B-32")
    assert b32["context"] == 77 and b32["on_machine"] is None
    assert set(zoo.list_models(architectures=False)["kind"]) == {"family", "builtin", "zoo"}


@pytest.mark.parametrize("family", ["hf", "open_clip", "remote"])
def test_a_family_view_fits_and_keeps_that_familys_rows(family, capsys):
    out = _run(capsys, "--family", family)
    _assert_fits(out)
    frame = zoo.list_models(family)
    assert set(frame["family"]) == {family}
    names = set(out.replace(",", " ").split())
    assert set(frame["name"]) <= names
    assert ("hnbench-tiny" in names) == (family == "open_clip") and ("ViT-B-32" in names) == (family == "open_clip")


def test_md_csv_and_json_keep_every_row_and_column(capsys):
    frame = zoo.list_models()
    rows = json.loads(_run(capsys, "--format", "json"))
    assert [r["name"] for r in rows] == list(frame["name"]) and set(rows[0]) == set(frame.columns)
    table = [r for r in csv.reader(io.StringIO(_run(capsys, "--format", "csv"))) if r]
    assert table[0] == list(frame.columns) and [r[1] for r in table[1:]] == list(frame["name"])
    md = _run(capsys, "--format", "md").splitlines()
    assert md[0].startswith("| name") and len(md) == len(frame) + 2
    assert max(len(line) for line in md) > 100  # full columns: the Markdown table is not the terminal view
    arch = json.loads(_run(capsys, "--architectures", "--format", "json"))
    assert {r["kind"] for r in arch} == {"builtin", "architecture"} and len(arch) == len(_architectures())


def test_the_terminal_view_shows_no_control_characters_from_a_row():
    import pandas as pd

    frame = pd.DataFrame([{"kind": "zoo", "name": "a\x1b[31mred", "family": "x", "model": "m", "context": 1,
                           "text_policy": "", "weights": "w\x07", "on_machine": None, "reference": "",
                           "description": ""}])
    out = zoo.render_models(frame, "text")
    assert "\x1b" not in out and "\x07" not in out and "a [31mred" in out
