"""One convention for two compared results, in ``compare`` and ``browse``: the *baseline* is the result compared
against (compare's first argument, browse's ``--compare``), the *model* the one compared with it (the result
browse shows); ``baseline only`` / ``model only`` count the queries only that one gets right."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import make_pairs, write_jsonl

from hnbench.cli import main
from hnbench.pages.build import browse
from hnbench.results.compare import compare, model_label
from hnbench.results.record import read_result


@pytest.fixture(scope="module")
def two_results(tmp_path_factory, micro_config) -> dict[str, Path]:
    """The micro model at context 4 and 32 on a 12-image manifest: their results disagree on some queries."""
    root = tmp_path_factory.mktemp("roles")
    data = write_jsonl(root / "m.jsonl", [{"image": p, "caption": c} for p, c in make_pairs(root, n=12)])
    out = {}
    for name, ctx in (("short", 4), ("long", 32)):
        assert main(["-q", "eval", "--model", "hnb-micro", "--model-config", str(micro_config), "--dataset", str(data),
                     "--output", str(root / name), "--num-workers", "0", "--context-length", str(ctx), "--no-cache",
                     "--no-ci", "--k", "1", "5"]) == 0
        (out[name],) = (root / name).glob("*.json")
    return out


def _statuses(html: str, direction: str) -> list[str]:
    return re.findall(rf'<tr class="query" data-direction="{direction}" data-status="([^"]*)">', html)


def test_browse_counts_what_compare_counts_for_the_same_baseline(two_results, tmp_path):
    """``compare BASELINE MODEL`` and ``browse MODEL --compare BASELINE`` name the same result the baseline, and
    count the same queries as right for the baseline only and for the model only."""
    baseline, model = two_results["short"], two_results["long"]
    comparison = compare([baseline, model], ks=(1,))
    assert comparison.models[0]["label"] == model_label(read_result(baseline).model)  # compare: first = baseline
    html = browse(model, tmp_path / "page", compare=baseline, limit=0, progress=False).read_text()
    counted = {r["direction"]: r for r in comparison.rows if r["k"] == 1}
    disagreements = 0
    for direction in ("t2i", "i2t"):
        statuses = _statuses(html, direction)
        assert len(statuses) == 12
        assert statuses.count("baseline only") == counted[direction]["n_baseline_only"]
        assert statuses.count("model only") == counted[direction]["n_model_only"]
        disagreements += counted[direction]["n_baseline_only"] + counted[direction]["n_model_only"]
    assert disagreements > 0  # the two results do disagree: the counts above are not all zero
    summary = html.split('<table id="summary">')[1].split("</table>")[0]
    labels = {role: model_label(read_result(p).model) for role, p in (("model", model), ("baseline", baseline))}
    assert summary.count(f"{labels['model']} <small>(model)</small>") == 2  # t2i and i2t rows
    assert summary.count(f"{labels['baseline']} <small>(baseline)</small>") == 2
    assert "<th>baseline rank</th>" in html and "other" not in html.split("<h2>Queries</h2>")[1].split("<table")[0]
    assert '<option value="baseline only">right only for the baseline</option>' in html
    assert '<option value="model only">right only for the model</option>' in html


def test_the_help_of_both_commands_names_the_baseline(capsys):
    with pytest.raises(SystemExit):
        main(["browse", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--compare BASELINE.json the baseline:" in text and "first result of hnbench compare" in text
    with pytest.raises(SystemExit):
        main(["compare", "--help"])
    assert "the first is the baseline" in " ".join(capsys.readouterr().out.split())


def test_a_page_recorded_before_keeps_being_replaced_by_its_own_rerun(two_results, tmp_path):
    """The page's inputs record keeps its keys (``result``, ``compare``): a rerun from the same inputs replaces
    its own page without --overwrite, whatever the roles are called."""
    out = tmp_path / "page"
    args = [str(two_results["long"]), "--compare", str(two_results["short"]), "--output", str(out), "--limit", "3"]
    assert main(["-q", "browse", *args]) == 0
    record = json.loads((out / ".index.html.inputs.json").read_text())
    assert set(record) == {"result", "compare", "hardness", "limit", "top"}
    assert record["compare"] == read_result(two_results["short"]).stem()
    assert main(["-q", "browse", *args]) == 0
