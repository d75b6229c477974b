"""The documentation site: ``mkdocs build --strict`` passes (no broken link, anchor or API reference), the API page of
``hnbench.evaluate`` shows its parameters, the five contributor guides are built with the example plugin's code, and
the generated parts (zoo, suite and benchmark tables, the command-line reference, the benchmark cards) are made from
their declaration. The README is a front page: at most 300 lines, its links into the docs resolve."""

from __future__ import annotations

import html
import importlib.util
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from docs_pages import REPO, hooks, page

BUILD_NEEDS = ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python")
GUIDES = {"objective": "Adding an objective", "task": "Adding a task", "benchmark": "Adding a benchmark",
          "model-family": "Adding a model family", "suite": "Adding a suite"}


def _text(path: Path) -> str:
    """A built page's visible text (tags dropped, entities decoded)."""
    return html.unescape(re.sub(r"<[^>]+>", "", path.read_text(encoding="utf-8")))


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    missing = [m for m in BUILD_NEEDS if importlib.util.find_spec(m.split(".")[0]) is None]
    if missing:
        pytest.skip(f"the docs extra is not installed ({', '.join(missing)}): pip install -e '.[docs]'")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
           "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                           str(REPO / "mkdocs.yml"), "--site-dir", str(out)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "WARNING" not in done.stderr, done.stderr[-4000:]
    return out


@pytest.mark.slow
def test_the_site_builds_strictly_with_the_evaluate_api_page_and_its_parameters(site):
    import hnbench

    api = (site / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    start = api.index('id="hnbench.evaluation.evaluate.evaluate"')
    section = html.unescape(re.sub(r"<[^>]+>", "", api[start:api.index('id="hnbench.evaluation.evaluate.run_evaluation"')]))
    parameters = inspect.signature(hnbench.evaluate).parameters
    assert {"model", "dataset", "pretrained", "data_root", "protocol", "output_dir", "settings"} <= set(parameters)
    for name in parameters:
        assert re.search(rf"\b{name}\b", section), f"the evaluate API page does not show its parameter {name}"
    assert "Score a model on an image–caption set" in section  # its docstring
    for entry in ("run_evaluation", "run_suite", "compare", "leaderboard", "hardness", "train", "read_result"):
        assert re.search(rf'id="hnbench\.[\w.]*\b{entry}"', api), entry
    encoder = _text(site / "reference" / "encoder" / "index.html")
    assert all(member in encoder for member in ("encode_images", "encode_texts", "tokenize", "ModelInfo"))
    registry = _text(site / "reference" / "registry" / "index.html")
    assert "load_plugins" in registry and "Registry" in registry
    assert "accepts" in _text(site / "reference" / "tasks" / "index.html")


@pytest.mark.slow
def test_the_five_contributor_guides_are_built_showing_the_plugin_code_the_tests_run(site):
    home = _text(site / "index.html")
    for slug, title in GUIDES.items():
        built = site / "contributing" / slug / "index.html"
        text = _text(built)
        assert title in text and "Files to touch and tests to write" in text, slug
        assert title in home  # in the navigation
    plugin = REPO / "tests" / "plugins" / "example" / "hnbench_example"
    for slug, source in (("task", "task.py"), ("model-family", "family.py"), ("benchmark", "benchmark.py")):
        first_def = next(ln for ln in (plugin / source).read_text().splitlines() if ln.startswith(("def ", "class ")))
        assert first_def.rstrip(":") in _text(site / "contributing" / slug / "index.html"), slug


@pytest.mark.slow
def test_generated_pages_show_what_the_package_declares(site):
    from hnbench.cli import build_parser
    from hnbench.registry import BENCHMARK_SPECS, MODEL_ZOO, SUITES

    cli = _text(site / "reference" / "cli" / "index.html")
    commands = next(a for a in build_parser()._actions if a.dest == "command").choices
    for name, sub in commands.items():
        assert f"usage: hnbench {name}" in cli, name
        for action in sub._actions:
            for flag in action.option_strings:
                assert flag in cli, (name, flag)
    models = _text(site / "guides" / "models" / "index.html")
    assert all(name in models for name in MODEL_ZOO.names())
    suites = _text(site / "guides" / "suites" / "index.html")
    assert all(SUITES.help(name) in suites for name in SUITES.declared())
    benchmarks = (site / "guides" / "benchmarks" / "index.html").read_text(encoding="utf-8")
    for name in BENCHMARK_SPECS.declared():
        assert f'href="../../cards/{name}/"' in benchmarks, name
    for card in (REPO / "datasets").glob("*.md"):  # each card a page, from datasets/ (not a copy in docs/)
        title = card.read_text(encoding="utf-8").splitlines()[0].lstrip("# ")
        assert html.unescape(title) in _text(site / "cards" / card.stem / "index.html")
    assert not (REPO / "docs" / "cards").exists()


def test_a_page_marker_renders_its_declaration_and_an_unknown_one_is_refused():
    from hnbench.models.zoo import zoo_table

    assert zoo_table() in page("guides/models.md") and "<!-- hnbench:" not in page("guides/models.md")
    with pytest.raises(ValueError, match="zoo-tabel"):
        hooks().render("<!-- hnbench:zoo-tabel -->")


def test_the_readme_is_a_front_page_whose_links_resolve():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 300
    quick = readme.index("## Quick start")
    assert readme.index("--index-url https://download.pytorch.org/whl/cpu") > quick
    assert readme.index("## Common jobs") > quick
    targets = re.findall(r"\]\(((?!https?:)[^)#\s]+)(?:#[^)]*)?\)", readme)
    assert any(t.startswith("docs/contributing/") for t in targets) and "CONTRIBUTING.md" in targets
    for target in targets:
        assert (REPO / target).exists(), f"README links to {target}, which does not exist"
    for guide in GUIDES:
        assert f"docs/contributing/{guide}.md" in targets
