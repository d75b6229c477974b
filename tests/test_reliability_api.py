"""Every public name of ``hnbench`` works twice in one process, whatever was imported before.

Each case runs in a fresh interpreter, so the import order is the real one (pytest has imported the
submodules already in this process).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import make_pairs, write_jsonl

import hnbench

REPO = Path(__file__).resolve().parents[1]

TWICE = textwrap.dedent("""
    import sys
    import hnbench

    cfg, data, out = sys.argv[1:4]
    used = set()

    def call(name, *args, **kwargs):
        used.add(name)
        return getattr(hnbench, name)(*args, **kwargs)

    for round in (1, 2):
        enc = call("load_model", "hnb-micro", model_config=cfg)
        ds = call("load_dataset", data)
        assert isinstance(ds, hnbench.ImageTextDataset)
        used.add("ImageTextDataset")
        r = call("evaluate", enc, ds, output_dir=f"{out}/eval{round}", progress=False, num_workers=0, ci=False)
        back = call("read_result", r.path)
        assert isinstance(back, hnbench.EvalResult) and back.metrics == r.metrics
        used.add("EvalResult")
        assert "hnb-micro" in call("leaderboard", [f"{out}/eval{round}"])
        exported = call("export", [r.path], "clip-benchmark", f"{out}/export{round}", model_name="org/micro")
        assert exported.files  # CLIP_benchmark's run JSON and its build CSV
        cmp = call("compare", [r.path, r.path], ks=[1], n_boot=10)
        assert all(row["delta"] == 0 for row in cmp.rows)
        assert call("browse", r.path, f"{out}/browse{round}", progress=False).name == "index.html"
        rep = call("hardness", ds, enc, output_dir=f"{out}/hard{round}", batch_size=4, n_batches=2,
                   progress=False, num_workers=0)
        assert rep.text.buckets.batch_size == 4
        suite = call("run_suite", "synthdense", ["hnb-micro"], model_config=cfg, output_dir=f"{out}/suite{round}",
                     limit=8, progress=False, num_workers=0, ci=False)
        assert not suite.failures
        tc = call("TrainConfig", model="hnb-micro", model_config=cfg, dataset=data, epochs=1, batch_size=4,
                  num_workers=0, output=f"{out}/run{round}")
        assert call("train", tc, progress=False).name == "checkpoint.safetensors"
        assert "longclip-l14" in set(call("list_models")["name"])
        used.add("__version__")
        assert hnbench.__version__
        # importing the submodules of the same names must not hide the functions
        import hnbench.evaluation.evaluate, hnbench.hardness, hnbench.results.leaderboard, hnbench.train  # noqa: E401,F401
    print(sorted(used))
""")

IMPORTED_FIRST = textwrap.dedent("""
    import hnbench.evaluation.evaluate, hnbench.hardness.run, hnbench.results.leaderboard, hnbench.train.trainer  # noqa: E401,F401
    import hnbench
    from hnbench.tasks.retrieval import score_embeddings  # the submodules stay importable by name
    assert callable(score_embeddings)
    for name in ("evaluate", "hardness", "leaderboard", "train"):
        assert callable(getattr(hnbench, name)), (name, getattr(hnbench, name))
        assert getattr(hnbench, name) is getattr(hnbench, name)
    from hnbench import evaluate, leaderboard
    print(evaluate.__module__, leaderboard.__module__)
""")


def _python(code: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=300)


@pytest.mark.slow
def test_every_public_name_works_twice_in_one_process(micro_config, tmp_path):
    pairs = make_pairs(tmp_path, n=8)
    data = write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    run = _python(TWICE, str(micro_config), str(data), str(tmp_path / "out"), cwd=tmp_path)
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr[-3000:]
    used = json.loads(run.stdout.strip().splitlines()[-1].replace("'", '"'))
    assert sorted(used) == sorted(hnbench.__all__)  # every public name was exercised, twice


def test_public_functions_survive_importing_their_submodules_first(tmp_path):
    run = _python(IMPORTED_FIRST, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == ["hnbench.evaluation.evaluate", "hnbench.results.leaderboard"]
