"""Paired comparison of stored results: statistics against scipy, refusals, per-query schema v1/v2, CLI."""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import make_pairs, write_jsonl, write_v1_copy

import hnbench
from hnbench.cli import main
from hnbench.errors import ConfigError
from hnbench.results.compare import compare
from hnbench.results.record import PER_QUERY_SCHEMA_VERSION, ResultFormatError, read_per_query, read_result
from hnbench.results.significance import holm, mcnemar_exact, paired_bootstrap, paired_test

stats = pytest.importorskip("scipy.stats", reason="scipy is the independent reference (dev extra)")
REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("b,c", [(0, 0), (0, 1), (0, 5), (3, 17), (10, 10), (11, 10), (50, 70), (400, 452)])
def test_mcnemar_matches_scipy_binomtest(b, c):
    expected = 1.0 if b + c == 0 else stats.binomtest(min(b, c), b + c, 0.5, alternative="two-sided").pvalue
    assert mcnemar_exact(b, c) == pytest.approx(expected, rel=1e-9, abs=1e-15)
    assert mcnemar_exact(c, b) == mcnemar_exact(b, c)


def _crafted(n_both: int, n_a: int, n_b: int, n_none: int) -> tuple[np.ndarray, np.ndarray]:
    a = np.array([1] * n_both + [1] * n_a + [0] * n_b + [0] * n_none, dtype=bool)
    b = np.array([1] * n_both + [0] * n_a + [1] * n_b + [0] * n_none, dtype=bool)
    perm = np.random.default_rng(1).permutation(a.size)
    return a[perm], b[perm]


def test_paired_test_on_crafted_hits():
    a, b = _crafted(300, 12, 30, 158)  # N = 500
    t = paired_test(a, b, n_boot=2000, seed=3)
    assert (t.n_a_only, t.n_b_only, t.n) == (12, 30, 500)
    assert t.r_a == pytest.approx(100 * 312 / 500) and t.r_b == pytest.approx(100 * 330 / 500)
    assert t.delta == pytest.approx(100 * 18 / 500)
    assert t.p_mcnemar == pytest.approx(stats.binomtest(12, 42, 0.5).pvalue)
    # the paired interval is near Δ ± 1.96·sd(d)/√N (normal approximation, independent of the resampling)
    d = b.astype(float) - a.astype(float)
    half = 100 * 1.96 * d.std() / np.sqrt(d.size)
    lo, hi = t.ci95
    assert lo < t.delta < hi
    assert (hi - lo) / 2 == pytest.approx(half, rel=0.15)
    assert t.excludes_zero  # Δ = 3.6 points with sd-based half-width ≈ 1.1
    # seeded: the same seed gives the same interval, another seed another one
    assert paired_bootstrap(a, b, n_boot=500, seed=7) == paired_bootstrap(a, b, n_boot=500, seed=7)
    assert paired_bootstrap(a, b, n_boot=500, seed=7) != paired_bootstrap(a, b, n_boot=500, seed=8)


def test_degenerate_cases():
    a, _ = _crafted(40, 10, 0, 50)
    same = paired_test(a, a.copy())  # identical models: nothing discordant
    assert (same.delta, same.ci95, same.p_mcnemar, same.n_a_only, same.n_b_only) == (0.0, (0.0, 0.0), 1.0, 0, 0)
    assert not same.excludes_zero
    ones = np.ones(30, bool)
    t = paired_test(ones, ones)
    assert (t.r_a, t.r_b, t.p_mcnemar) == (100.0, 100.0, 1.0)
    one_sided = paired_test(np.zeros(20, bool), np.r_[np.ones(6, bool), np.zeros(14, bool)])
    assert one_sided.p_mcnemar == pytest.approx(stats.binomtest(0, 6, 0.5).pvalue)  # = 2 / 2^6
    assert one_sided.p_mcnemar == pytest.approx(2 / 64)
    with pytest.raises(ValueError, match="differ in length"):
        paired_bootstrap(np.ones(3, bool), np.ones(4, bool))


def test_holm_by_hand():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5]) == [0.5]
    assert holm([0.2, 0.9]) == pytest.approx([0.4, 0.9])


# --- real results ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def results(tmp_path_factory, micro_config) -> dict[str, Path]:
    """Three micro-model results (context 8, 16, 32: different hits) on one manifest, one on another."""
    root = tmp_path_factory.mktemp("cmp")
    data = write_jsonl(root / "m.jsonl", [{"image": p, "caption": c} for p, c in make_pairs(root, n=16)])
    other_root = root / "other"
    other = write_jsonl(other_root / "m.jsonl", [{"image": p, "caption": c} for p, c in make_pairs(other_root, n=8)])
    out = {}
    for name, ds, ctx in (("a", data, 8), ("b", data, 16), ("c", data, 32), ("x", other, 16)):
        assert main(["-q", "eval", "--model", "hnb-micro", "--model-config", str(micro_config), "--dataset", str(ds),
                     "--output", str(root / name), "--num-workers", "0", "--context-length", str(ctx),
                     "--no-cache", "--no-ci"]) == 0
        (out[name],) = (root / name).glob("*.json")
    return out


def _reference(pa: Path, pb: Path, direction: str, k: int) -> tuple[int, int, float]:
    """Discordant counts and p-value computed straight from the two parquets (pandas + scipy)."""
    fa, fb = (pd.read_parquet(p.parent / read_result(p).per_query) for p in (pa, pb))
    m = fa[fa.direction == direction].merge(fb[fb.direction == direction], on="query_id", suffixes=("_a", "_b"))
    ha, hb = m.rank_a <= k, m.rank_b <= k
    n_a, n_b = int((ha & ~hb).sum()), int((~ha & hb).sum())
    p = 1.0 if n_a + n_b == 0 else stats.binomtest(min(n_a, n_b), n_a + n_b, 0.5).pvalue
    return n_a, n_b, p


def test_per_query_file_holds_top10(results):
    frame = read_per_query(read_result(results["b"]))
    assert frame.attrs["schema_version"] == PER_QUERY_SCHEMA_VERSION == 2
    t2i = frame[frame.direction == "t2i"]
    assert all(len(x) == 10 for x in t2i.topk_index) and all(len(x) == 10 for x in t2i.topk_id)
    for r in t2i.itertuples():
        assert list(r.topk_score) == sorted(r.topk_score, reverse=True)
        assert (r.rank == 1) == (int(r.topk_index[0]) == r.gt_index and not r.tied)
        assert (r.gt_index in set(r.topk_index.tolist())) == (r.rank <= 10)  # 16 images: top 10 of them
        assert list(r.topk_id[r.topk_index == r.gt_index]) == ([r.gt_id] if r.rank <= 10 else [])


def test_old_per_query_schema_is_read(results, tmp_path):
    """A version-1 parquet (no top-k columns) is read, and compare works on it."""
    copy = write_v1_copy(results["a"], tmp_path)
    v1 = read_per_query(read_result(copy))
    assert v1.attrs["schema_version"] == 1 and "topk_index" not in v1
    out = compare([copy, results["b"]], ks=[1])
    assert out.models[0]["per_query_schema"] == 1 and out.models[1]["per_query_schema"] == 2
    assert out.rows == compare([results["a"], results["b"]], ks=[1]).rows
    for stored in sorted((REPO / "leaderboards" / "results").rglob("*.json")):
        assert read_per_query(read_result(stored)).attrs["schema_version"] in (1, 2)


def test_compare_against_independent_computation(results, tmp_path):
    out = hnbench.compare([results["a"], results["b"], results["c"]], ks=[1, 5], output_dir=tmp_path, seed=11)
    saved = json.loads((tmp_path / "compare.json").read_text())
    assert saved["schema_version"] == 1 and saved["kind"] == "hnbench.compare"
    assert saved["settings"]["seed"] == 11 and saved["settings"]["correction"] == "holm"
    assert len(saved["rows"]) == 2 * 2 * 2  # two models × two directions × two Ks
    for direction in ("t2i", "i2t"):
        for k in (1, 5):
            rows = [r for r in saved["rows"] if (r["direction"], r["k"]) == (direction, k)]
            refs = [_reference(results["a"], results[m], direction, k) for m in ("b", "c")]
            for r, (n_a, n_b, p) in zip(rows, refs):
                assert (r["n_baseline_only"], r["n_model_only"]) == (n_a, n_b)
                assert r["p_mcnemar"] == pytest.approx(p)
                assert r["ci95"][0] <= r["delta"] <= r["ci95"][1]
                assert r["excludes_zero"] == (r["ci95"][0] > 0 or r["ci95"][1] < 0)
            assert [r["p_holm"] for r in rows] == pytest.approx(holm([p for _, _, p in refs]))
    md = (tmp_path / "compare.md").read_text()
    assert "p (Holm)" in md and "Holm-corrected" in md and out.markdown() == md
    # identical results: every Δ is zero, every p is 1
    same = compare([results["b"], results["b"]], ks=[1])
    assert all(r["delta"] == 0 and r["p_mcnemar"] == 1 and r["ci95"] == [0, 0] for r in same.rows)


def test_cli_refuses_mismatched_datasets(results, tmp_path, capsys):
    out = tmp_path / "cmp"
    assert main(["-q", "compare", str(results["a"]), str(results["x"]), "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(results["a"]) in err and str(results["x"]) in err
    assert "fingerprint" in err or "name" in err
    assert not out.exists()
    d = json.loads(results["b"].read_text())
    d["dataset"]["protocol"] = "other"
    (tmp_path / results["b"].name).write_text(json.dumps(d))
    assert main(["-q", "compare", str(results["a"]), str(tmp_path / results["b"].name)]) == 2
    assert "protocol differs" in capsys.readouterr().err
    with pytest.raises(ResultFormatError, match="per-query"):  # the parquet is not beside the copied JSON
        compare([tmp_path / results["b"].name, tmp_path / results["b"].name])
    with pytest.raises(ConfigError, match="at least two"):
        compare([results["a"]])


def test_cli_prints_and_writes(results, tmp_path, capsys):
    assert main(["-q", "compare", str(results["a"]), str(results["b"]), "--k", "1", "10", "--output",
                 str(tmp_path), "--seed", "5"]) == 0
    text = capsys.readouterr().out
    assert "| model" in text and "95% paired CI" in text and "p (Holm)" not in text
    assert json.loads((tmp_path / "compare.json").read_text())["settings"]["ks"] == [1, 10]


def test_leaderboard_marks_deltas_whose_paired_interval_excludes_zero(tmp_path):
    """On the stored synthdense results (per-query schema 1): * exactly where compare's interval excludes zero."""
    from hnbench.results.leaderboard import leaderboard

    stored = REPO / "leaderboards" / "results" / "synthdense"
    files = sorted(stored.glob("*.json"))
    if len(files) < 2:
        pytest.skip("leaderboards/results/synthdense not present")
    for f in files:  # copies, one of them without its per-query file
        shutil.copy(f, tmp_path / f.name)
        if "synthdense-4e3c" not in f.name:
            shutil.copy(f.parent / read_result(f).per_query, tmp_path)
    base = next(f for f in files if "8f9c6681" in f.name)  # the InfoNCE fine-tune
    md = leaderboard([tmp_path], baseline="hnbench-tiny (tiny-infonce/checkpoint)", ci=True)
    assert "A * after a delta: its paired 95% bootstrap interval" in md
    assert "Note: no paired test, so no \\* mark, for: hnbench-tiny (synthdense) (" in md
    (table,) = [t for t in _md_tables(md)]
    hn = table[table["model"] == "hnbench-tiny (tiny-hn/checkpoint)"].iloc[0]
    untested = table[table["model"] == "hnbench-tiny (synthdense)"].iloc[0]
    ref = compare([base, next(f for f in files if "f067700b" in f.name)], ks=[1, 5, 10])
    for r in ref.rows:
        cell = hn[f"{r['direction']} R@{r['k']}"]
        lo, hi = (f"{x:+.2f}".replace("-", "\u2212") for x in r["ci95"])
        marked = re.compile(r"\([+\u2212]\d+\.\d\d\*")  # "(+3.60*": a * right after the delta
        assert bool(marked.search(cell)) == r["excludes_zero"] and f"[{lo}, {hi}]" in cell
        assert not marked.search(untested[f"{r['direction']} R@{r['k']}"])
    assert any(r["excludes_zero"] for r in ref.rows)  # t2i R@5: +3.6 points, interval above zero
    csv = pd.read_csv(io.StringIO(leaderboard([tmp_path], baseline="hnbench-tiny (tiny-infonce/checkpoint)",
                                              fmt="csv")))
    row5 = next(r for r in ref.rows if (r["direction"], r["k"]) == ("t2i", 5))
    got = csv[csv["model"] == "hnbench-tiny (tiny-hn/checkpoint)"].iloc[0]
    assert (got["delta t2i R@5 lo"], got["delta t2i R@5 hi"]) == tuple(round(x, 2) for x in row5["ci95"])
    assert csv[csv["model"] == "hnbench-tiny (synthdense)"]["delta t2i R@5 lo"].isna().all()  # untested


def _md_tables(md: str) -> list[pd.DataFrame]:
    out = []
    for block in md.split("\n\n"):
        if block.startswith("|"):
            df = pd.read_csv(io.StringIO(block), sep="|", dtype=str, skipinitialspace=True)
            df = df.drop(columns=[df.columns[0], df.columns[-1]]).iloc[1:]
            df.columns = [c.strip() for c in df.columns]
            out.append(df.map(lambda s: s.strip() if isinstance(s, str) else s))
    return out


def test_a_manifest_copied_under_another_name_is_the_same_data(results, micro_config, tmp_path, capsys):
    """Identity is content, the name a label: a copy of the manifest under another file name has the
    same data fingerprint, and compare accepts the pair (it refused it: "dataset name differs")."""
    original = read_result(results["b"])
    source = Path(original.dataset["source"])
    copy = source.parent / "renamed-copy.jsonl"  # beside it, so its relative image paths resolve
    shutil.copy(source, copy)
    assert main(["-q", "eval", "--model", "hnb-micro", "--model-config", str(micro_config), "--dataset", str(copy),
                 "--output", str(tmp_path / "copy"), "--num-workers", "0", "--context-length", "8",
                 "--no-cache", "--no-ci"]) == 0
    (path,) = (tmp_path / "copy").glob("*.json")
    renamed = read_result(path)
    assert renamed.dataset["name"] == "renamed-copy" != original.dataset["name"]
    assert renamed.dataset["fingerprint"] == original.dataset["fingerprint"]
    out = compare([results["a"], path], ks=[1])  # a: the same model (ctx 8) on the original
    assert all(r["delta"] == 0 for r in out.rows)
    assert main(["-q", "compare", str(path), str(results["b"])]) == 0
    # a different data set is still refused, by fingerprint
    assert main(["-q", "compare", str(path), str(results["x"])]) == 2
    assert "fingerprint differs" in capsys.readouterr().err
