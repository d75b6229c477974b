"""GPU smoke test: hnbench's whole CUDA path in about 5 minutes on one H200, with no internet.

Steps (each a subprocess, logged to OUT/logs/STEP.log, with its own time limit):

  install        only with --wheels DIR: pip install --no-index --find-links DIR (hnbench's dependencies
                 without faiss-cpu, plus faiss-gpu-cu12 and pytest; then hnbench itself, --no-deps)
  environment    torch / CUDA / GPU / faiss versions and the usable search backends
  pytest -m gpu  the GPU tests (on CPU they must all skip cleanly)
  synthdense     generate the benchmark into $HNBENCH_CACHE (default: OUT/cache)
  eval cuda fp32 hnbench-tiny on synthdense test (500 images), CUDA encoding, GPU FAISS, TF32 off
  eval cpu       the same evaluation on the CPU with the torch backend: the reference
  parity fp32    |R@K difference| <= 1 query (each direction and K) and per-query scores of the ground
                 truth and of the best wrong item within 1e-3 (--score-tol)
  eval cuda amp  the same with --amp (bf16 autocast) and the default TF32 settings
  parity amp     R@K within 1% of the queries, scores within 1.5e-2 (--amp-score-tol). Calibrated on CPU
                 bf16 autocast: max score difference 6.4e-3, R@K within 2 of 500 queries, 141/1000 ranks
                 moved (synthdense's near-duplicates: 68/1000 queries have a margin under 1e-3)
  train hn amp   one epoch of HN-CLIP (recipe tiny-synthdense-hn, half the train split, bf16 autocast):
                 losses finite, evaluation before/after
  search 1M      benchmarks/bench_search_scale.py: exact top-10 over a 1M x 768 gallery, torch and
                 faiss-gpu side by side (262,144 queries by default; --search-queries 0 for all 1M);
                 ranks may differ between backends for at most 1 query in 100,000

--cpu is a dry run of the same steps on the CPU with small sizes (40 images, a 20k gallery): the GPU
tests must skip, "eval cuda fp32" becomes a faiss-cpu evaluation compared with the torch one, and the
AMP steps are skipped. It takes a minute or two on two cores and runs in CI (tests/test_docker.py).

Prints one summary table (step, status, seconds, key numbers); writes OUT/summary.md and
OUT/summary.json; exits 1 if a step failed or ran out of time. Uses the standard library only until
the install step has run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STEPS = ("install", "environment", "pytest", "synthdense", "eval", "amp", "train", "search")
MODEL = ["--model", "hnbench-tiny", "--pretrained", "synthdense"]
SMALL_FAMILIES = {"train": 8, "test": 8}  # --cpu: 40 images per split


@dataclass
class Row:
    step: str
    status: str  # PASS, FAIL, SKIP or TIMEOUT
    seconds: float
    notes: str


class Smoke:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.gpu = not args.cpu
        self.out = Path(args.out).resolve()
        self.logs = self.out / "logs"
        self.rows: list[Row] = []
        self.env = dict(os.environ, PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false",
                        HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
        self.env.setdefault("HNBENCH_CACHE", str(self.out / "cache"))
        self.py = sys.executable
        self.info: dict = {}
        self.dataset = "synthdense"
        self.faiss_gpu = self.gpu and not args.no_faiss_gpu

    # ------------------------------------------------------------------------------------ plumbing
    def run(self, name: str, cmd: list[str], timeout: float, env: dict | None = None) -> tuple[int | None, str, float]:
        """Run cmd in its own process group, output to logs/NAME.log; rc None on timeout."""
        log = self.logs / f"{re.sub(r'[^A-Za-z0-9._-]+', '-', name)}.log"
        t = time.perf_counter()
        with open(log, "w") as fh:
            fh.write("$ " + " ".join(cmd) + "\n")
            fh.flush()
            proc = subprocess.Popen(cmd, cwd=REPO, env=env or self.env, stdout=fh, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            try:
                rc: int | None = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                rc = None
        return rc, log.read_text(errors="replace"), time.perf_counter() - t

    def add(self, step: str, status: str, seconds: float, notes: str) -> None:
        self.rows.append(Row(step, status, round(seconds, 1), notes))
        print(f"[gpu_smoke] {step}: {status} ({seconds:.1f} s) {notes}", file=sys.stderr, flush=True)

    def failed(self, step: str, rc: int | None, output: str, seconds: float, limit: float) -> bool:
        """Record a non-zero exit or a timeout (with the last line of output); True if it was one."""
        if rc == 0:
            return False
        if rc is None:
            self.add(step, "TIMEOUT", seconds, f"killed after {limit:.0f} s")
        else:
            last = [ln for ln in output.strip().splitlines() if ln.strip()][-1:] or [""]
            self.add(step, "FAIL", seconds, f"exit {rc}: {last[0][:160]}")
        return True

    def skipped(self, step: str) -> bool:
        return step in self.args.skip

    def hnbench(self, *argv: str) -> list[str]:
        return [self.py, "-m", "hnbench", "-q", *argv]

    # --------------------------------------------------------------------------------------- steps
    def install(self) -> None:
        if not self.args.wheels:
            return self.add("install", "SKIP", 0, "no --wheels: using the installed packages")
        wheels = Path(self.args.wheels).resolve()
        reqs = [r for r in project_dependencies() if not r.replace("_", "-").startswith("faiss-cpu")]
        reqs += ["faiss-gpu-cu12" if self.faiss_gpu else "faiss-cpu", "pytest"]
        (self.out / "requirements.txt").write_text("\n".join(reqs) + "\n")
        pip = [self.py, "-m", "pip", "install", "--disable-pip-version-check", "--no-index", "--find-links", str(wheels)]
        own = sorted(wheels.glob("hnbench-*.whl"))
        target = [str(own[-1])] if own else ["--no-build-isolation", str(REPO)]
        cmds = [[*pip, "-r", str(self.out / "requirements.txt")], [*pip, "--no-deps", "--force-reinstall", *target]]
        total = 0.0
        for n, cmd in enumerate(cmds, 1):
            rc, out, secs = self.run(f"install-{n}", cmd, 600)
            total += secs
            if self.failed("install", rc, out, total, 600):
                return
        has_cpu = [self.py, "-c", "import importlib.metadata as m; m.version('faiss-cpu')"]
        if self.faiss_gpu and subprocess.run(has_cpu, capture_output=True).returncode == 0:
            # faiss-cpu and faiss-gpu-cu12 write the same files: remove it, then restore the GPU build's
            for n, cmd in enumerate([[self.py, "-m", "pip", "uninstall", "-y", "faiss-cpu"],
                                     [*pip, "--no-deps", "--force-reinstall", "faiss-gpu-cu12"]], len(cmds) + 1):
                rc, out, secs = self.run(f"install-{n}", cmd, 600)
                total += secs
                if self.failed("install", rc, out, total, 600):
                    return
        self.add("install", "PASS", total, f"wheels: {len(list(wheels.glob('*.whl')))} in {wheels}; "
                                           f"hnbench from {'its wheel' if own else 'source'}")

    def environment(self) -> bool:
        probe = ("import json, importlib.metadata as md, torch\n"
                 "i = {'torch': torch.__version__, 'cuda_build': torch.version.cuda, 'cuda': torch.cuda.is_available(),"
                 " 'gpus': torch.cuda.device_count(), 'hnbench': md.version('hnbench')}\n"
                 "if i['cuda']: i['device_name'] = torch.cuda.get_device_name(0)\n"
                 "try:\n import faiss\n i['faiss'] = faiss.__version__\n"
                 " i['faiss_gpus'] = faiss.get_num_gpus() if hasattr(faiss, 'StandardGpuResources') else None\n"
                 "except ImportError:\n i['faiss'] = None\n"
                 "from hnbench.search.exact import available_backends\ni['backends'] = available_backends()\n"
                 "print('ENV' + json.dumps(i))\n")
        rc, out, secs = self.run("environment", [self.py, "-c", probe], 120)
        if self.failed("environment", rc, out, secs, 120):
            return False
        self.info = i = json.loads(out[out.rindex("ENV") + 3:].splitlines()[0])
        faiss = "no faiss" if i["faiss"] is None else (
            f"faiss {i['faiss']} ({'CPU build' if i['faiss_gpus'] is None else str(i['faiss_gpus']) + ' GPUs'})")
        gpus = f"{i['gpus']} x {i['device_name']}" if i["cuda"] else "no CUDA device"
        notes = (f"hnbench {i['hnbench']}, torch {i['torch']} (CUDA build {i['cuda_build']}), {gpus}, {faiss}; "
                 f"backends {','.join(i['backends'])}")
        problems = []
        if self.gpu and not i["cuda"]:
            problems.append("no CUDA device (use --cpu for the dry run)")
        if self.faiss_gpu and "faiss-gpu" not in i["backends"]:
            problems.append("no GPU FAISS (install faiss-gpu-cu12 in place of faiss-cpu, or pass --no-faiss-gpu)")
        self.add("environment", "FAIL" if problems else "PASS", secs, "; ".join(problems + [notes]))
        return not problems

    def pytest(self) -> None:
        limit = 240 if self.gpu else 180
        rc, out, secs = self.run("pytest -m gpu", [self.py, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider",
                                                   "tests"], limit)
        counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|deselected|errors?)", out)}
        notes = ", ".join(f"{n} {k}" for k, n in counts.items()) or "no summary line"
        if rc is None or rc not in (0, 5):
            self.failed("pytest -m gpu", rc, out, secs, limit)
        elif self.gpu and not counts.get("passed"):
            self.add("pytest -m gpu", "FAIL", secs, f"no GPU test ran: {notes}")
        elif not self.gpu and (counts.get("passed") or not counts.get("skipped")):
            self.add("pytest -m gpu", "FAIL", secs, f"without CUDA every GPU test must skip: {notes}")
        else:
            self.add("pytest -m gpu", "PASS", secs, notes + ("" if self.gpu else " (no CUDA: skipped cleanly)"))

    def synthdense(self) -> bool:
        families = None if self.gpu else SMALL_FAMILIES
        code = ("import json, sys\nfrom hnbench.data.synthdense_loader import load_synthdense\n"
                "kw = json.loads(sys.argv[1])\n"
                "sets = {p: load_synthdense(protocol=p, **kw) for p in ('test', 'train')}\n"
                "print('DATA' + json.dumps({p: [len(d.images), d.meta['root']] for p, d in sets.items()}))\n")
        kw = {"n_families": families} if families else {}
        rc, out, secs = self.run("synthdense", [self.py, "-c", code, json.dumps(kw)], 300)
        if self.failed("synthdense", rc, out, secs, 300):
            return False
        sets = json.loads(out[out.rindex("DATA") + 4:].splitlines()[0])
        if not self.gpu:  # the small set is read as an image folder (eval takes no generator options)
            self.dataset = str(Path(sets["test"][1]) / "test")
        self.add("synthdense", "PASS", secs, f"test {sets['test'][0]} images, train {sets['train'][0]} images "
                                             f"({'default' if self.gpu else 'small'} config) in {sets['test'][1]}")
        return True

    def evaluate(self, step: str, out_dir: str, device: str, backend: str, amp: bool = False,
                 env: dict | None = None) -> dict | None:
        """Run `hnbench eval`; the result record, or None after recording a failure."""
        out = self.out / out_dir
        shutil.rmtree(out, ignore_errors=True)
        cmd = self.hnbench("eval", *MODEL, "--dataset", self.dataset, "--device", device, "--backend", backend,
                           "--no-cache", "--no-ci", "--output", str(out), *(["--amp"] if amp else []))
        rc, log, secs = self.run(step, cmd, 300, env)
        if self.failed(step, rc, log, secs, 300):
            return None
        res = json.loads(next(p for p in out.glob("*.json")).read_text())
        want = {"faiss": "faiss-gpu" if device == "cuda" else "faiss"}.get(backend, backend)
        m, s = res["metrics"], res["settings"]
        notes = (f"t2i R@1 {m['t2i']['R@1']:.1f}, i2t R@1 {m['i2t']['R@1']:.1f}; {m['t2i']['n_queries']} captions, "
                 f"{m['i2t']['n_queries']} images; backend {s['backend']}; encode "
                 f"{res['timings'].get('encode_images', 0) + res['timings'].get('encode_texts', 0):.1f} s")
        if device == "cuda" and (env or {}).get("NVIDIA_TF32_OVERRIDE") == "0":
            notes += "; TF32 off"
        ok = s["backend"] == want and s["device"].startswith(device)
        self.add(step, "PASS" if ok else "FAIL", secs, notes if ok else f"ran on {s['device']}/{s['backend']}, "
                                                                       f"expected {device}/{want}; {notes}")
        res["dir"] = str(out)
        return res if ok else None

    def parity(self, step: str, got: dict | None, ref: dict | None, score_tol: float, query_tol: float) -> None:
        """Compare two evaluations: R@K within query_tol of the queries (a count, or a share if < 1)."""
        if got is None or ref is None:
            return self.add(step, "SKIP", 0, "an evaluation it compares failed")
        t = time.perf_counter()
        d = parity_numbers(Path(got["dir"]), Path(ref["dir"]), got["metrics"], ref["metrics"])
        allowed = max(1, math.ceil(query_tol * d["n_min"])) if query_tol < 1 else int(query_tol)
        ok = d["max_dq"] <= allowed and d["max_dscore"] <= score_tol and d["same_queries"]
        notes = (f"R@K differs by <= {d['max_dq']} queries (tol {allowed}); scores by <= {d['max_dscore']:.1e} "
                 f"(tol {score_tol:.0e}); ranks moved {d['moved']}/{d['n']}; R@1 change t2i {d['dr1']['t2i']:+.1f} "
                 f"i2t {d['dr1']['i2t']:+.1f}" + ("" if d["same_queries"] else "; DIFFERENT QUERY SETS"))
        self.add(step, "PASS" if ok else "FAIL", time.perf_counter() - t, notes)

    def train(self) -> None:
        out = self.out / "train"
        shutil.rmtree(out, ignore_errors=True)
        if self.gpu:  # the default synthdense config (already generated), half its 2,000 train images
            extra = ["--device", "cuda", "--amp", "--data-fraction", "0.5", "--set", "dataset_options={}"]
        else:
            opts = json.dumps({"n_families": SMALL_FAMILIES})
            extra = ["--device", "cpu", "--set", f"dataset_options={opts}", "--set", f"eval_dataset_options={opts}"]
        cmd = self.hnbench("train", "--recipe", "tiny-synthdense-hn", "--epochs", "1", "--output", str(out), *extra)
        rc, log, secs = self.run("train", cmd, 300)
        if self.failed("train hn" + (" amp" if self.gpu else ""), rc, log, secs, 300):
            return
        losses = [r["loss"] for r in read_jsonl(out / "log.jsonl") if "loss" in r]
        evals = [r for r in read_jsonl(out / "diagnostics.jsonl") if r.get("kind") == "eval"]
        cfg = json.loads((out / "train_config.json").read_text())
        problems = [p for p, bad in [("no loss logged", not losses), ("non-finite loss", not all(map(math.isfinite, losses))),
                                     ("no checkpoint", not (out / "checkpoint.safetensors").is_file()),
                                     ("no evaluation", len(evals) < 2),
                                     ("AMP off", self.gpu and not cfg["config"]["amp"])] if bad]
        notes = f"{cfg['steps']} steps on {cfg.get('n_train_images', '?')} images"
        if losses:
            notes += f", loss {losses[0]:.3f}->{losses[-1]:.3f}"
        if len(evals) >= 2:
            notes += f", t2i R@1 {evals[0]['t2i_R@1']:.1f}->{evals[-1]['t2i_R@1']:.1f}"
        notes += ", bf16 autocast" if cfg["config"]["amp"] and self.gpu else ", fp32"
        self.add("train hn" + (" amp" if self.gpu else ""), "FAIL" if problems else "PASS", secs,
                 "; ".join(problems + [notes]))

    def search(self) -> None:
        a = self.args
        size, dim = (1_000_000, 768) if self.gpu else (20_000, 64)
        queries = a.search_queries if a.search_queries is not None else (262_144 if self.gpu else 1000)
        backends = ["torch", "faiss-gpu" if self.faiss_gpu else ("faiss" if not self.gpu else None)]
        backends = [b for b in backends if b]
        step = f"search {size // 1000}k" if size < 1_000_000 else f"search {size // 1_000_000}M"
        cmd = [self.py, str(REPO / "benchmarks" / "bench_search_scale.py"), "--sizes", str(size), "--dim", str(dim),
               "--max-queries", str(queries), "--device", "cuda" if self.gpu else "cpu", "--backends", *backends]
        rc, out, secs = self.run(step, cmd, 420 if self.gpu else 180)
        if self.failed(step, rc, out, secs, 420 if self.gpu else 180):
            return
        rows = {}
        for line in out.splitlines():
            f = line.split()
            # gallery, queries, backend, the backend it ran, seconds, queries/s, full N=M seconds, peak RSS
            if len(f) >= 7 and f[0].isdigit() and f[1].isdigit() and f[2] in ("torch", "faiss", "faiss-gpu"):
                rows[f[2]] = (int(f[1]), float(f[4]), float(f[6]))
        diff = re.search(r"ranks differing between backends: (\d+)", out)
        n = next(iter(rows.values()))[0] if rows else 0
        missing = [b for b in backends if b not in rows]
        differ = int(diff.group(1)) if diff else None
        bad = missing or (len(backends) > 1 and (differ is None or differ > n // 100_000))
        notes = (f"{size:,} x {dim} gallery, {n:,} queries, top-10: "
                 + ", ".join(f"{b} {s:.2f} s (all {size:,} queries ~{full:.0f} s)" for b, (_, s, full) in rows.items())
                 + (f"; ranks differing {differ}" if differ is not None else ""))
        self.add(step, "FAIL" if bad else "PASS", secs, (f"missing backends {missing}; " if missing else "") + notes)

    # ----------------------------------------------------------------------------------------- run
    def main(self) -> int:
        shutil.rmtree(self.logs, ignore_errors=True)
        self.logs.mkdir(parents=True)
        t0 = time.perf_counter()
        a = self.args
        dev = "cuda" if self.gpu else "cpu"
        if not self.skipped("install"):
            self.install()
        ok = True
        if not self.rows or self.rows[-1].status in ("PASS", "SKIP"):
            ok = self.environment()
        else:
            ok = False
        if not ok:
            self.add("(remaining steps)", "SKIP", 0, "the environment is not usable; see above")
        else:
            if not self.skipped("pytest"):
                self.pytest()
            have_data = self.synthdense()
            first = f"eval {dev} fp32" if self.gpu else "eval cpu faiss"
            if have_data and not self.skipped("eval"):
                no_tf32 = dict(self.env, NVIDIA_TF32_OVERRIDE="0")  # fp32 really fp32: cuBLAS/cuDNN TF32 off
                got = self.evaluate(first, "eval-device", dev, "faiss" if self.faiss_gpu or not self.gpu else "torch",
                                    env=no_tf32)
                ref = self.evaluate("eval cpu torch", "eval-cpu", "cpu", "torch")
                self.parity("parity fp32", got, ref, a.score_tol, 1)
                if self.gpu and not self.skipped("amp"):
                    amp = self.evaluate(f"eval {dev} amp", "eval-amp", dev, "faiss" if self.faiss_gpu else "torch",
                                        amp=True)
                    self.parity("parity amp", amp, ref, a.amp_score_tol, 0.01)
                else:
                    self.add("eval/parity amp", "SKIP", 0, "bf16 autocast needs CUDA" if not self.gpu else "--skip")
            if have_data and not self.skipped("train"):
                self.train()
            if not self.skipped("search"):
                self.search()
        bad = [r for r in self.rows if r.status in ("FAIL", "TIMEOUT")]
        total = time.perf_counter() - t0
        budget = a.budget or (300 if self.gpu else 150)
        self.add("total", "FAIL" if bad else "PASS", total,
                 f"{len(bad)} failed; budget {budget:.0f} s {'kept' if total <= budget else 'EXCEEDED'}; "
                 f"logs in {self.logs}")
        self.report(total)
        return 1 if bad else 0

    def report(self, total: float) -> None:
        i = self.info
        title = (f"hnbench GPU smoke, {'cuda' if self.gpu else 'cpu dry run'}: "
                 f"{i.get('device_name', 'no CUDA device')}, torch {i.get('torch', '?')}, faiss {i.get('faiss', '?')}")
        table = markdown_table(["step", "status", "seconds", "key numbers"],
                               [[r.step, r.status, f"{r.seconds:.1f}", r.notes] for r in self.rows])
        text = f"{title}\n\n{table}\n"
        print(text, end="", flush=True)
        (self.out / "summary.md").write_text(text)
        summary = {"mode": "cuda" if self.gpu else "cpu", "environment": i, "seconds": round(total, 1),
                   "ok": all(r.status in ("PASS", "SKIP") for r in self.rows), "steps": [asdict(r) for r in self.rows]}
        (self.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")


# ------------------------------------------------------------------------------------------ helpers
def project_dependencies() -> list[str]:
    """hnbench's runtime requirements from pyproject.toml (tomllib on 3.11+, a plain parse on 3.10)."""
    text = (REPO / "pyproject.toml").read_text()
    try:
        import tomllib
    except ImportError:
        block = re.search(r"^dependencies\s*=\s*\[(.*?)\]", text, re.S | re.M)
        return re.findall(r"\"([^\"]+)\"", block.group(1)) if block else []
    return list(tomllib.loads(text)["project"]["dependencies"])


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()] if path.is_file() else []


def parity_numbers(got_dir: Path, ref_dir: Path, got: dict, ref: dict) -> dict:
    """R@K differences in queries, per-query score and rank differences between two evaluations."""
    import numpy as np
    import pandas as pd

    max_dq, n, n_min = 0, 0, min(m["n_queries"] for m in ref.values())
    for direction, m in ref.items():
        n += m["n_queries"]
        for key, value in m.items():
            if key.startswith("R@"):
                max_dq = max(max_dq, round(abs(got[direction][key] - value) * m["n_queries"] / 100))
    a, b = (pd.read_parquet(next(d.glob("*.parquet"))).sort_values(["direction", "query_index"]).reset_index(drop=True)
            for d in (got_dir, ref_dir))
    same = len(a) == len(b) and bool((a[["direction", "query_id"]].values == b[["direction", "query_id"]].values).all())
    dscore = 0.0
    if same:
        for col in ("gt_score", "best_wrong_score"):
            diff = np.abs(a[col].to_numpy(np.float64) - b[col].to_numpy(np.float64))
            dscore = max(dscore, float(np.nanmax(diff)) if len(diff) else 0.0)
    return {"n": n, "n_min": n_min, "max_dq": max_dq, "max_dscore": dscore, "same_queries": same,
            "moved": int((a["rank"].to_numpy() != b["rank"].to_numpy()).sum()) if same else -1,
            "dr1": {d: got[d]["R@1"] - ref[d]["R@1"] for d in ref}}


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"

    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpu", action="store_true", help="dry run on the CPU with small sizes (CI)")
    ap.add_argument("--wheels", metavar="DIR", help="install from this folder of wheels first (no index)")
    ap.add_argument("--out", default="results/gpu-smoke", help="output folder (default: results/gpu-smoke)")
    ap.add_argument("--no-faiss-gpu", action="store_true",
                    help="GPU run without GPU FAISS: search with torch on the GPU (where faiss-gpu cannot be installed)")
    ap.add_argument("--search-queries", type=int, help="queries for the search benchmark (0: as many as the gallery)")
    ap.add_argument("--score-tol", type=float, default=1e-3, help="fp32 parity: max per-query score difference")
    ap.add_argument("--amp-score-tol", type=float, default=1.5e-2, help="AMP parity: max per-query score difference")
    ap.add_argument("--budget", type=float, help="seconds the run should take, reported not enforced "
                                                 "(default: 300 on a GPU, 150 with --cpu)")
    ap.add_argument("--skip", nargs="+", default=[], choices=[s for s in STEPS if s not in ("environment", "synthdense")],
                    help="steps to leave out")
    return ap.parse_args(argv)


if __name__ == "__main__":
    sys.exit(Smoke(parse_args()).main())
