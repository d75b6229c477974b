"""The hnbench module graph has no import cycles, every module imports in dependency order, the intended
arrows between the layers hold (see ``ARROWS``), and the package keeps few top-level modules.

The graph is built statically with :mod:`ast` from every ``import`` statement in every module of the
package, at module level and inside functions alike: an import inside a function still runs, only later,
so a cycle hidden that way is still a cycle (house style allows such imports only for optional or heavy
third-party dependencies, which are not hnbench modules and so never appear in this graph). Edges:

- ``import hnbench.a.b`` and ``from hnbench.a import b`` (``b`` a submodule) → ``hnbench.a.b``;
  ``from hnbench.a import name`` (``name`` defined in ``a/__init__.py``) → ``hnbench.a``; relative imports
  are resolved against the importing module's package first.
- Importing a submodule also runs its parent packages' ``__init__`` at run time, but no edge is drawn to the
  parents: a package ``__init__`` that re-exports its submodules (``hardness/__init__.py``,
  ``models/__init__.py``) is then an ordinary node above them, and a submodule that imports a *name* from
  its package's ``__init__`` (``from hnbench.hardness import x``) still shows as the cycle it is.
- ``hnbench/__init__.py`` resolves its public names lazily (``_LAZY``, on first attribute access), and the
  registry resolves its ``"module:attr"`` targets on first use: both are strings, not imports, and run
  no code at import time, so neither draws an edge, except that ``from hnbench import compare`` (a lazy
  name) is an edge to the module the name resolves to (``hnbench.results.compare``).
- Imports under ``if TYPE_CHECKING:`` count too: they do not run, but a type two modules need of each
  other belongs in a lower module (house style), and a type checker follows them like any import.

The arrows are checked on the direct edges of this graph: a module of a lower layer never imports one of
the layers named above it. (``hnbench.registry`` names every layer's modules, by string and under
``TYPE_CHECKING``, so a path through it is no arrow between the layers.)
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

import hnbench

PACKAGE_DIR = Path(hnbench.__file__).resolve().parent
ROOT = PACKAGE_DIR.parent


def _module_files() -> dict[str, Path]:
    """Every hnbench module by dotted name (a package by its own name, for its ``__init__.py``)."""
    modules = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


MODULES = _module_files()


def _lazy_names() -> dict[str, str]:
    """``hnbench``'s lazy public names → the module each resolves to (read from ``_LAZY``, not imported)."""
    tree = ast.parse((PACKAGE_DIR / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_LAZY" for t in node.targets):
            lazy = ast.literal_eval(node.value)
            return {name: target.split(":")[0] for name, target in lazy.items()}
    return {}


LAZY = _lazy_names()


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement anywhere in ``tree``: module level, in functions, under ``if`` or ``try``."""
    return [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]


def _edges(module: str, path: Path) -> set[str]:
    """The hnbench modules that ``module`` imports (see the module docstring for the rules)."""
    is_package = path.name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    targets: set[str] = set()
    for node in _imports(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
            continue
        if node.level:
            base_parts = package.split(".")
            base_parts = base_parts[: len(base_parts) - (node.level - 1)]
            base = ".".join(base_parts + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        for alias in node.names:
            submodule = f"{base}.{alias.name}"
            if submodule in MODULES:
                targets.add(submodule)
            elif base == "hnbench" and alias.name in LAZY:
                targets.add(LAZY[alias.name])
            else:
                targets.add(base)
    return {t for t in targets if t in MODULES and t != module}


def import_graph() -> dict[str, set[str]]:
    """hnbench module → the hnbench modules it imports."""
    return {module: _edges(module, path) for module, path in MODULES.items()}


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    try:
        tuple(TopologicalSorter(graph).static_order())
    except CycleError as error:
        return list(error.args[1])
    return None


def _edges_of(source: str, module: str, tmp_path: Path) -> set[str]:
    """``_edges`` of a made-up module named ``module`` whose text is ``source``."""
    path = tmp_path / "made_up.py"
    path.write_text(source)
    return _edges(module, path)


@pytest.mark.parametrize(("source", "module", "expected"), [
    ("import hnbench.evaluation.cache", "hnbench.x", {"hnbench.evaluation.cache"}),
    ("import hnbench.data.base as base", "hnbench.x", {"hnbench.data.base"}),
    ("from hnbench.data import base", "hnbench.x", {"hnbench.data.base"}),  # a submodule
    ("from hnbench.data import load_dataset", "hnbench.x", {"hnbench.data"}),  # a name of data/__init__.py
    ("from hnbench.data import base, load_dataset", "hnbench.x", {"hnbench.data.base", "hnbench.data"}),
    ("from .stats import Distribution", "hnbench.hardness.x", {"hnbench.hardness.stats"}),
    ("from . import stats", "hnbench.hardness.x", {"hnbench.hardness.stats"}),
    ("from .. import io", "hnbench.hardness.x", {"hnbench.io"}),
    ("def f():\n    if True:\n        from hnbench.evaluation.cache import EmbeddingCache\n", "hnbench.x", {"hnbench.evaluation.cache"}),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from hnbench.evaluation.cache import EmbeddingCache\n",
     "hnbench.x", {"hnbench.evaluation.cache"}),
    ("from hnbench import compare", "hnbench.x", {"hnbench.results.compare"}),  # a lazy name of hnbench/__init__.py
    ("from hnbench import __version__", "hnbench.x", {"hnbench"}),
    ("import numpy\nfrom hnbench.evaluation import cache", "hnbench.evaluation.cache", set()),  # third-party and self: no edge
])
def test_edges_follow_the_rules(source, module, expected, tmp_path):
    """Each kind of import draws the edge the module docstring promises."""
    assert _edges_of(source, module, tmp_path) == expected


def test_graph_is_the_whole_package():
    """Every module is a node, with its real imports (so the cycle check cannot pass on an empty graph)."""
    graph = import_graph()
    assert {"hnbench", "hnbench.cli", "hnbench.train.trainer", "hnbench.data.benchmarks.spec"} <= set(graph)
    assert "hnbench.registry" in graph["hnbench"]
    assert {"hnbench.data.benchmarks.readers_suite", "hnbench.data.benchmarks.protocol"} <= graph["hnbench.data.benchmarks.spec"]
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) is not None
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycles():
    """No hnbench module reaches itself through imports, at module level or inside functions."""
    cycle = _find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(reversed(cycle or []))


# (importers, the packages they never import): each a rule of the layering, named by its test id
ARROWS = [
    pytest.param(("hnbench.metrics", "hnbench.search"), ("hnbench.models", "hnbench.data"),
                 id="metrics-and-search-never-import-models-or-data"),
    pytest.param(("hnbench.evaluation",), ("hnbench.train",), id="evaluation-never-imports-train"),
    pytest.param(("hnbench.data",), ("hnbench.train",), id="data-never-imports-train"),
    pytest.param(("hnbench.results",), ("hnbench.models", "hnbench.evaluation", "hnbench.train"),
                 id="results-never-import-models-evaluation-or-train"),
    pytest.param(("hnbench.models",), ("hnbench.train", "hnbench.evaluation"),
                 id="models-never-import-train-or-evaluation"),
    pytest.param(("hnbench.tasks",), ("hnbench.train",), id="tasks-never-import-train"),
]


def _within(module: str, packages: tuple[str, ...]) -> bool:
    """Whether ``module`` is one of ``packages`` or a module below one of them."""
    return any(module == p or module.startswith(p + ".") for p in packages)


def arrow_violations(graph: dict[str, set[str]], importers: tuple[str, ...], imported: tuple[str, ...]) -> list[str]:
    """Each edge of ``graph`` from a module within ``importers`` to one within ``imported``, as ``a -> b``."""
    return [f"{module} -> {target}" for module in sorted(graph) if _within(module, importers)
            for target in sorted(graph[module]) if _within(target, imported)]


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    """The package's import graph, built once for the arrow tests (they only read it)."""
    return import_graph()


@pytest.mark.parametrize(("importers", "imported"), ARROWS)
def test_intended_import_arrows_hold(graph, importers, imported):
    """No module of a lower layer imports a module of the layers it must not know, at any depth of the code."""
    assert any(_within(m, importers) for m in graph) and any(_within(m, imported) for m in graph)  # real layers
    offending = arrow_violations(graph, importers, imported)
    assert offending == [], (f"{' and '.join(importers)} must never import {' or '.join(imported)}; "
                             f"offending edges: {'; '.join(offending)}")


# each way of importing a module the rules of ``_edges`` know, to write a made-up violation with
_STYLES = ["import {target}", "from {package} import {name}", "def f():\n    from {target} import x\n",
           "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import {target}\n"]


def _first_module(package: str) -> str:
    """``package`` itself where it is a plain module (``hnbench.metrics``), else its first submodule by name."""
    if package in MODULES and MODULES[package].name != "__init__.py":
        return package
    return next(m for m in sorted(MODULES) if m.startswith(package + ".") and not m.endswith(".__main__"))


def _violations_to_make() -> list[object]:
    """For each rule, each (importer, forbidden package) pair: a module of the importer given a made-up import of
    a real module of the forbidden package, written in one of ``_STYLES`` (each style used in turn)."""
    cases = []
    for arrow in ARROWS:
        importers, imported = arrow.values
        for importer in importers:
            for package in imported:
                module, target = _first_module(importer), _first_module(package)
                style = _STYLES[len(cases) % len(_STYLES)]
                cases.append(pytest.param(importers, imported, module, target, style,
                                          id=f"{arrow.id}:{module}->{target}"))
    return cases


@pytest.mark.parametrize(("importers", "imported", "module", "target", "style"), _violations_to_make())
def test_each_arrow_catches_a_made_up_violation(graph, importers, imported, module, target, style, tmp_path):
    """A module of the importing layer given a made-up import of the forbidden layer fails the rule, naming the
    edge, whichever way the import is written (module level, in a function, under TYPE_CHECKING)."""
    package, _, name = target.rpartition(".")
    source = style.format(target=target, package=package, name=name)
    assert arrow_violations(graph, importers, imported) == []  # the module as it is
    made_up = {**graph, module: _edges_of(source, module, tmp_path)}
    assert arrow_violations(made_up, importers, imported) == [f"{module} -> {target}"]


def test_the_package_has_at_most_12_top_level_modules():
    """Code lives in the packages (cli/, data/, models/, ...); hnbench/*.py stays a short list of shared modules."""
    top = sorted(p.name for p in PACKAGE_DIR.glob("*.py"))
    assert "__init__.py" in top and len(top) <= 12, f"{len(top)} top-level modules: {', '.join(top)}"


def test_every_module_imports_in_dependency_order():
    """A fresh interpreter imports every hnbench module, dependencies first, without error."""
    # __main__ is left out: importing it runs the command line
    order = [m for m in TopologicalSorter(import_graph()).static_order() if not m.endswith(".__main__")]
    script = ("import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"
              "print(sum(name in sys.modules for name in sys.argv[1:]))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", script, *order], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.split()[-1]) == len(order) > 50
