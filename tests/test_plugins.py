"""A plugin outside the package — ``tests/plugins/example``: its own ``pyproject.toml`` and an entry point in the group
``hnbench.plugins`` — adds a task, a benchmark (its own release reader and caption rule, its own protocol family), a
model family, a suite and a training objective, and the plain ``hnbench`` command uses them: through the entry point
of the installed package, through ``HNBENCH_PLUGINS``, and with the plugin imported after the CLI. No registry is
read while hnbench is imported, so nothing is copied before a plugin registers."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import make_pairs

from hnbench import registry
from hnbench.cli import main

PLUGIN = Path(__file__).parent / "plugins" / "example"
REPO = Path(__file__).resolve().parents[1]
REGISTRIES = [value for value in vars(registry).values() if isinstance(value, registry.Registry)]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The plugin installed by pip (offline: no dependencies, this environment's setuptools) into a folder of its
    own, from a copy (a build writes into the source tree)."""
    source, target = tmp_path_factory.mktemp("source") / "example", tmp_path_factory.mktemp("site")
    shutil.copytree(PLUGIN, source)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-index", "--target", str(target), str(source)], check=True, timeout=600,
                   capture_output=True)
    assert list(target.glob("hnbench_example_plugin-*.dist-info/entry_points.txt"))
    return target


@pytest.fixture(scope="module")
def pairs_root(tmp_path_factory) -> Path:
    """A release in the plugin benchmark's layout: pairs.tsv (image<TAB>caption, white space to collapse) + images/."""
    root = tmp_path_factory.mktemp("example-pairs")
    pairs = make_pairs(root, n=10)
    (root / "pairs.tsv").write_text("".join(f"{image}\t  {caption.replace(' ', '   ')}\n" for image, caption in pairs))
    return root


def _hnbench(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hnbench", "-q", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=600)


def _env(*paths: Path, plugins: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != registry.PLUGIN_VARIABLE}
    env["PYTHONPATH"] = os.pathsep.join([*map(str, paths), str(REPO), env.get("PYTHONPATH", "")])
    if plugins is not None:
        env[registry.PLUGIN_VARIABLE] = plugins
    return env


@pytest.fixture
def registries_restored():
    """Every registry as it was before the test (a plugin imported in-process registers into them)."""
    saved = [(r, dict(r._targets), dict(r._help), dict(r._spelling), dict(r._prefixes)) for r in REGISTRIES]
    loaded = (registry._Plugins.loaded, list(registry._Plugins.names))
    yield
    for r, targets, helps, spelling, prefixes in saved:
        r._targets, r._help, r._spelling, r._prefixes = targets, helps, spelling, prefixes
    registry._Plugins.loaded, registry._Plugins.names = loaded[0], loaded[1]
    for name in [m for m in sys.modules if m == "hnbench_example" or m.startswith("hnbench_example.")]:
        del sys.modules[name]


@pytest.mark.slow
def test_the_plain_cli_finds_an_installed_plugin_through_its_entry_point(installed, pairs_root, tmp_path):
    env, out = _env(installed), tmp_path / "results"
    listed = _hnbench("datasets", "list", env=env, cwd=tmp_path)
    assert listed.returncode == 0 and "example-pairs" in listed.stdout, listed.stderr
    for task in ("retrieval", "example-margin"):  # the plugin's family scores the plugin's benchmark, both tasks
        run = _hnbench("eval", "--model", "example:colour", "--dataset", "example-pairs", "--data-root",
                       str(pairs_root), "--task", task, "--output", str(out), "--no-ci", env=env, cwd=tmp_path)
        assert run.returncode == 0, run.stderr
    results = {json.loads(p.read_text())["task"]: json.loads(p.read_text()) for p in out.glob("*.json")}
    assert set(results) == {"retrieval", "example-margin"}
    retrieval = results["retrieval"]
    assert retrieval["dataset"]["name"] == "example-pairs" and retrieval["dataset"]["n_images"] == 10
    assert retrieval["dataset"]["meta"]["caption_rule"] == "example-collapse-space"  # the plugin's rule ran
    assert retrieval["metrics"]["t2i"]["R@1"] > 10  # colour words against colour histograms: far above chance
    margin = results["example-margin"]["metrics"]["margin"]
    assert 0 <= margin["positive"] <= 100 and margin["n_queries"] == 10
    board = _hnbench("leaderboard", str(out), env=env, cwd=tmp_path)
    assert board.returncode == 0, board.stderr
    assert "example-pairs · test (example-splits)" in board.stdout  # its own protocol family, from its spec
    assert "Example margin (the example plugin's task)" in board.stdout and "example:colour" in board.stdout
    roots = tmp_path / "roots.json"
    roots.write_text(json.dumps({"example-pairs": str(pairs_root)}))
    suite = _hnbench("suite", "example-suite", "--model", "example:colour", "--data-root-map", str(roots),
                     "--output", str(tmp_path / "suite"), "--no-ci", env=env, cwd=tmp_path)
    assert suite.returncode == 0, suite.stderr
    table = (tmp_path / "suite" / "suite-example-suite.md").read_text()
    assert "example-pairs/test t2i R@1" in table and "example-pairs/test positive" in table
    row = next(line for line in table.splitlines() if line.startswith("| example:colour"))
    cells = [c.strip() for c in row.strip("|").split("|")][1:]  # two tasks on one benchmark/protocol: own cells
    links = [c.partition("](")[2] for c in cells]
    assert "nan" not in row and len(set(links[:2])) == 1 and links[0] != links[-1], row


@pytest.mark.slow
def test_hnbench_plugins_names_a_module_on_the_path_without_installing_it(tmp_path):
    env = _env(PLUGIN, plugins="hnbench_example")
    help_text = _hnbench("eval", "--help", env=env, cwd=tmp_path)
    assert help_text.returncode == 0 and "example-margin" in help_text.stdout  # --task's choices, read live
    models = _hnbench("models", "--format", "csv", env=env, cwd=tmp_path)
    assert models.returncode == 0 and "example" in models.stdout, models.stderr


def test_a_plugin_that_fails_to_load_is_one_line_naming_it(tmp_path):
    run = _hnbench("--version", env=_env(plugins="no_such_plugin_module"), cwd=tmp_path)
    err = [line for line in run.stderr.splitlines() if line.strip()]
    assert run.returncode == 2 and len(err) == 1 and "Traceback" not in run.stderr
    assert "plugin no_such_plugin_module (HNBENCH_PLUGINS) failed to load: ModuleNotFoundError" in err[0]


def test_importing_hnbench_reads_no_registry_so_a_plugin_loads_only_when_one_is_read(tmp_path):
    """Every module of the package imported with HNBENCH_PLUGINS set: the plugin is imported by the first registry
    read, never by an import (a module that copied a registry at import would have loaded it)."""
    (tmp_path / "probe_plugin.py").write_text("import os\nopen(os.environ['PROBE'], 'w').write('loaded')\n")
    script = ("import importlib, os, pkgutil, hnbench\n"
              "names = [m.name for m in pkgutil.walk_packages(hnbench.__path__, 'hnbench.') "
              "if not m.name.endswith('__main__')]\n"
              "[importlib.import_module(n) for n in names]\n"
              "print(len(names), os.path.exists(os.environ['PROBE']))\n"
              "from hnbench.registry import TASKS\nTASKS.names()\nprint(os.path.exists(os.environ['PROBE']))\n")
    env = {**_env(tmp_path, plugins="probe_plugin"), "PROBE": str(tmp_path / "mark")}
    run = subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    n, at_import, after_read = run.stdout.split()
    assert int(n) > 100 and at_import == "False" and after_read == "True"


def test_a_plugin_imported_after_the_cli_is_used_by_it(pairs_root, tmp_path, capsys, registries_restored,
                                                         monkeypatch):
    from hnbench.cli import build_parser

    build_parser()  # the CLI built (and the registries read) before the plugin exists
    monkeypatch.syspath_prepend(str(PLUGIN))
    importlib.import_module("hnbench_example")  # registers into the registries the CLI reads live
    rc = main(["-q", "eval", "--model", "example:colour", "--dataset", "example-pairs", "--data-root", str(pairs_root),
               "--task", "example-margin", "--output", str(tmp_path / "out"), "--no-ci"])
    assert rc == 0, capsys.readouterr().err
    (result,) = [json.loads(p.read_text()) for p in (tmp_path / "out").glob("*.json")]
    assert result["task"] == "example-margin" and result["model"]["arch"] == "example:colour"
    assert result["main_score"]["name"] == "positive" and "example_margin_top" not in result["settings"]
    # the task's own option: its flag, recorded under its flat key, another file; the margin over the mean of the
    # two best other captions is at least the margin over the best one
    rc = main(["-q", "eval", "--model", "example:colour", "--dataset", "example-pairs", "--data-root", str(pairs_root),
               "--task", "example-margin", "--example-margin-top", "2", "--output", str(tmp_path / "out"), "--no-ci"])
    assert rc == 0, capsys.readouterr().err
    (top2,) = [r for p in (tmp_path / "out").glob("*.json") if (r := json.loads(p.read_text()))["settings"] != result["settings"]]
    assert top2["settings"]["example_margin_top"] == 2 and "example_margin_top" in top2["settings"]["identity"]
    assert top2["metrics"]["margin"]["mean"] >= result["metrics"]["margin"]["mean"]
    capsys.readouterr()
    rc = main(["-q", "eval", "--model", "example:colour", "--dataset", "example-pairs", "--data-root", str(pairs_root),
               "--example-margin-top", "2", "--output", str(tmp_path / "refused")])  # retrieval: not its option
    assert rc == 2 and "--example-margin-top is an option of --task example-margin" in capsys.readouterr().err


@pytest.mark.slow
def test_the_plain_cli_trains_the_plugins_objective_with_its_option(micro_config, tmp_path):
    """The plugin's objective through HNBENCH_PLUGINS: its option is a flag, a recipe table and a ``--set`` key, its
    bound is one line naming the flag, and the run logs its term beside the global one, weighted by the option."""
    env = _env(PLUGIN, plugins="hnbench_example")
    pairs = make_pairs(tmp_path, n=8)
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps({"image": p, "caption": c}) + "\n" for p, c in pairs))
    base = ["train", "--model", "hnb-micro", "--model-config", str(micro_config), "--dataset", str(data),
            "--objective", "example-objective", "--epochs", "1", "--batch-size", "4", "--num-workers", "0",
            "--log-every", "1", "--seed", "3"]
    help_text = _hnbench("train", "--help", env=env, cwd=tmp_path)
    assert help_text.returncode == 0 and "--example-objective-spread" in help_text.stdout
    bad = _hnbench(*base, "--set", "example-objective.spread=-1", "--output", str(tmp_path / "bad"), env=env,
                   cwd=tmp_path)
    assert bad.returncode == 2 and not (tmp_path / "bad").exists()
    assert len(bad.stderr.strip().splitlines()) == 1 and "--example-objective-spread" in bad.stderr, bad.stderr
    recipe = tmp_path / "spread.toml"
    recipe.write_text('[example-objective]\nspread = 0.25\n')
    runs = {"flag": ["--example-objective-spread", "0.5"], "set": ["--set", "example-objective.spread=0.5"],
            "recipe": ["--recipe", str(recipe)]}
    logs = {}
    for name, given in runs.items():
        run = _hnbench(*base, *given, "--output", str(tmp_path / name), env=env, cwd=tmp_path)
        assert run.returncode == 0, run.stderr
        logs[name] = [json.loads(line) for line in (tmp_path / name / "log.jsonl").read_text().splitlines()]
        recorded = json.loads((tmp_path / name / "train_config.json").read_text())["config"]
        assert recorded["objective"] == "example-objective"
        assert recorded["objective_options"] == {"spread": 0.25 if name == "recipe" else 0.5}
    for name, log in logs.items():
        first = log[0]
        assert set(first["terms"]) == {"global", "example-spread"}
        weight = 0.25 if name == "recipe" else 0.5
        assert first["loss"] == pytest.approx(first["terms"]["global"] + weight * first["terms"]["example-spread"],
                                              rel=1e-5)
    assert logs["flag"] == [{**r, "seconds": s["seconds"]} for r, s in zip(logs["set"], logs["flag"])]
