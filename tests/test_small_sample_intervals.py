"""Small samples do not look precise: exact intervals where the bootstrap degenerates, compare's marks after
the Holm correction, hardness on one batch without a standard error, and train-report's interval bands.

Text outputs are checked as exact strings; figures by reading the plotted data and labels back from the
matplotlib figure objects.
"""

from __future__ import annotations

import io
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import make_pairs, write_jsonl

from hnbench.cli import main
from hnbench.hardness.analyze import analyze
from hnbench.hardness.markdown import render_report
from hnbench.hardness.stats import batch_buckets
from hnbench.metrics import ci_methods, clopper_pearson, rank_summary, recall_at_k, recall_ci
from hnbench.plots import buckets_figure
from hnbench.results.compare import compare
from hnbench.results.record import EvalResult, read_per_query, read_result, write_result_pair
from hnbench.train import train
from hnbench.train.report import COLUMN_LEGEND, COLUMNS, r1_summary, read_run, render_table, report_figure
from hnbench.train.trainer import TrainConfig

REPO = Path(__file__).resolve().parents[1]
STORED = REPO / "leaderboards" / "results" / "synthdense"


# --- intervals: exact binomial where the bootstrap degenerates ------------------------------------------------
@pytest.mark.parametrize("x,n", [(0, 23), (23, 23), (1, 24), (3, 24), (12, 24), (4, 5), (0, 1), (2, 500)])
def test_clopper_pearson_matches_scipy_beta_quantiles(x, n):
    stats = pytest.importorskip("scipy.stats", reason="scipy is the independent reference (dev extra)")
    lo = 0.0 if x == 0 else 100 * stats.beta.ppf(0.025, x, n - x + 1)
    hi = 100.0 if x == n else 100 * stats.beta.ppf(0.975, x + 1, n - x)
    assert clopper_pearson(x, n) == pytest.approx((lo, hi), abs=1e-8)


def test_zero_hits_get_an_exact_interval_not_zero_width():
    ranks = np.full(23, 7)  # 0 of 23 at R@1 and R@5, all 23 at R@10
    ci = recall_ci(ranks)
    assert ci["R@1"] == pytest.approx((0.0, 14.8185), abs=1e-4)  # Clopper–Pearson's exact [0, 14.8]
    assert ci["R@10"] == pytest.approx((85.1815, 100.0), abs=1e-4)
    assert ci_methods(ranks) == {"R@1": "clopper-pearson", "R@5": "clopper-pearson", "R@10": "clopper-pearson"}
    # away from the edges, on many queries, the bootstrap's interval as before (bit for bit)
    from hnbench.metrics import bootstrap_ci

    many = np.random.default_rng(0).integers(1, 20, size=400)
    assert ci_methods(many) == {"R@1": "bootstrap", "R@5": "bootstrap", "R@10": "bootstrap"}
    assert recall_ci(many, seed=3) == bootstrap_ci(many, seed=3)
    # 4 hits of 400: exact (fewer than 5 hits), 5 hits: bootstrap
    edge = np.r_[np.ones(4, np.int64), np.full(396, 9)]
    assert ci_methods(edge, (1,)) == {"R@1": "clopper-pearson"}
    assert ci_methods(np.r_[np.ones(5, np.int64), np.full(395, 9)], (1,)) == {"R@1": "bootstrap"}


@pytest.fixture(scope="module")
def eval24(tmp_path_factory, micro_config):
    """A real CLI eval of the micro model on 24 images (random weights: few hits, exact intervals)."""
    root = tmp_path_factory.mktemp("eval24")
    data = write_jsonl(root / "m.jsonl", [{"image": p, "caption": c} for p, c in make_pairs(root, n=24)])
    return root, data


def test_eval_prints_intervals_and_records_their_method(eval24, micro_config, capsys):
    root, data = eval24
    assert main(["-q", "eval", "--model", "hnb-micro", "--model-config", str(micro_config), "--dataset", str(data),
                 "--output", str(root / "out"), "--num-workers", "0", "--no-cache"]) == 0
    out = capsys.readouterr().out
    path = out.strip().splitlines()[-1].removeprefix("wrote ")
    stored = json.loads(Path(path).read_text())
    r = read_result(path)
    for d in ("t2i", "i2t"):
        ranks = read_per_query(r).query(f"direction == '{d}'")["rank"].to_numpy()
        assert stored["ci95_method"][d] == ci_methods(ranks)
        assert {k: tuple(v) for k, v in stored["ci95"][d].items()} == recall_ci(ranks)
        for k in ("R@1", "R@5", "R@10"):
            lo, hi = stored["ci95"][d][k]
            mark = "†" if stored["ci95_method"][d][k] == "clopper-pearson" else ""
            assert f"{stored['metrics'][d][k]:.2f} [{lo:.1f}, {hi:.1f}]{mark}" in out
    assert r.table() in out


def _result(ci95, method):
    metrics = {d: {"R@1": v, "R@5": 50.0, "MRR": 0.25, "median_rank": 5.0, "n_queries": 24, "n_tied": 0}
               for d, v in (("t2i", 12.5), ("i2t", 8.333333333333334))}
    return EvalResult(model={"arch": "m"}, dataset={"name": "d"}, metrics=metrics, ci95=ci95, ci95_method=method)


def test_result_table_marks_exact_intervals_and_says_which_method_is_which():
    ci95 = {"t2i": {"R@1": [2.6559, 32.3611], "R@5": [29.0, 71.0]}, "i2t": {"R@1": [1.0263, 27.0], "R@5": [29.0, 71.0]}}
    method = {d: {"R@1": "clopper-pearson", "R@5": "bootstrap"} for d in ("t2i", "i2t")}
    assert _result(ci95, method).table() == (
        "| direction   | R@1                | R@5                |   MRR |   median rank |   queries |   tied |\n"
        "|-------------|--------------------|--------------------|-------|---------------|-----------|--------|\n"
        "| t2i         | 12.50 [2.7, 32.4]† | 50.00 [29.0, 71.0] |  0.25 |             5 |        24 |      0 |\n"
        "| i2t         | 8.33 [1.0, 27.0]†  | 50.00 [29.0, 71.0] |  0.25 |             5 |        24 |      0 |\n"
        "R@K [95% interval over the queries]: percentile bootstrap; † exact binomial (Clopper–Pearson), used where "
        "hits or misses are fewer than 5. Whether two models differ: `hnbench compare` (paired test).")
    # a record written before the method was recorded: intervals, no mark; without intervals: the old table
    assert "†" not in _result(ci95, {}).table() and "[2.7, 32.4] |" in _result(ci95, {}).table()
    assert "interval" not in _result({}, {}).table() and "| t2i         | 12.5  |    50 |" in _result({}, {}).table()


def test_results_written_before_the_interval_method_was_recorded_still_read(tmp_path):
    for src in sorted(STORED.glob("*.json")):
        d = json.loads(src.read_text())
        assert "ci95_method" not in d
        shutil.copy(src, tmp_path / src.name)
        shutil.copy(src.parent / d["per_query"], tmp_path)
        r = read_result(tmp_path / src.name)
        assert r.ci95_method == {} and r.ci95 == d["ci95"] and "ci95_method" not in r.to_dict()
    assert list(STORED.glob("*.json")), "the stored synthdense results are part of the repository"


# --- compare: the * follows the Holm-corrected test, with a legend -------------------------------------------
def _variant(src: Path, dest: Path, better: int) -> Path:
    """A copy of a stored result whose model gets ``better`` more t2i queries right at rank 1."""
    r = read_result(src)
    frame = read_per_query(r).copy()
    wrong = frame.index[(frame["direction"] == "t2i") & (frame["rank"] > 1)][:better]
    frame.loc[wrong, "rank"] = 1
    for d in ("t2i", "i2t"):
        ranks = frame.loc[frame["direction"] == d, "rank"].to_numpy()
        r.metrics[d].update({**recall_at_k(ranks), **rank_summary(ranks)})
    r.model = {**r.model, "pretrained": f"variant-{better}"}
    dest.mkdir(parents=True)
    buf = io.BytesIO()
    frame.to_parquet(buf, index=False)
    return write_result_pair(r, dest, buf.getvalue())


def test_compare_marks_follow_holm_not_the_unadjusted_interval(tmp_path):
    base = next(STORED.glob("hnbench-tiny-checkpoint-8f9c6681*.json"))
    five = _variant(base, tmp_path / "five", 5)
    out = compare([base, five], ks=[1], output_dir=tmp_path / "cmp")
    (row,) = [r for r in out.rows if r["direction"] == "t2i"]
    # 5 queries only the model gets right: the bootstrap interval excludes zero, the exact McNemar p is 2/32
    assert (row["n_baseline_only"], row["n_model_only"]) == (0, 5) and row["excludes_zero"]
    assert row["p_mcnemar"] == row["p_holm"] == 0.0625 and row["significant"] is False
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "| +1.00 | [+0.20, +2.00]  | 0.062 " in md and "+1.00 *" not in md
    assert ("`*` after Δ: significant, p (McNemar) < 0.05 (one comparison: nothing to correct; the interval and "
            "the test may disagree near the edge).") in md
    # three results: marks where the Holm p is below 0.05, and only there
    ten = _variant(base, tmp_path / "ten", 10)
    three = compare([base, five, ten], ks=[1])
    for r in three.rows:
        assert r["significant"] == (r["p_holm"] < 0.05)
    (ten_row,) = [r for r in three.rows if r["direction"] == "t2i" and r["model"] == 2]
    assert ten_row["significant"] and ten_row["p_holm"] == pytest.approx(2 * 2 / 2 ** 10)
    text = three.markdown()
    assert "| +2.00 * |" in text and "| +1.00   |" in text
    assert ("`*` after Δ: significant, p (Holm) < 0.05 (the Holm-corrected p; an unmarked Δ whose interval "
            "excludes zero is not significant once the comparisons are corrected).") in text


# --- hardness on one batch ------------------------------------------------------------------------------------
def _captions(n: int) -> tuple[np.ndarray, list[str]]:
    v = np.random.default_rng(5).normal(size=(n, 16)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True), [f"caption {i}" for i in range(n)]


def test_hardness_on_one_batch_has_no_standard_error_and_says_the_batch_used():
    v, caps = _captions(24)
    r = analyze(v, captions=caps, batch_size=128, n_batches=200, seed=3)
    b = r.text.buckets
    assert b.batch_size == 24 and b.n_batches == 1 and all(math.isnan(e) for e in b.stderr)
    md = render_report(r)
    assert ("One batch of all B = 24 captions (the set is smaller than the B = 128 asked, so every batch would be "
            "this one; no standard error across batches); ") in md
    assert "± 0.00%" not in md and md.count("| n/a (one batch) |") == len(b.labels)
    settings = md[md.index("## Settings"):]
    assert "\nbatch_size: 24\nn_batches: 1\nbatch_size_asked: 128\nn_batches_asked: 200\n" in settings
    # several batches: standard errors as before, the asked values not repeated
    many = analyze(v, captions=caps, batch_size=8, n_batches=20, seed=3)
    assert many.settings["batch_size"] == 8 and "batch_size_asked" not in many.settings
    se = many.text.buckets.stderr
    assert not any(math.isnan(e) for e in se) and max(se) > 0 and "n/a (one batch)" not in render_report(many)


def test_bucket_plot_draws_no_zero_width_error_bars():
    v, caps = _captions(24)
    one = analyze(v, captions=caps, batch_size=128, seed=3).text.buckets
    old_file = type(one)(**{**one.__dict__, "stderr": [0.0] * len(one.stderr)})  # as written before: 0 for undefined
    for b in (one, old_file):
        fig = buckets_figure(b.labels, [("captions", b.shares, b.standard_errors())], title="t")
        (ax,) = fig.axes
        assert [type(c).__name__ for c in ax.containers] == ["BarContainer"]  # no ErrorbarContainer
        assert [p.get_height() for p in ax.containers[0]] == pytest.approx([100 * s for s in b.shares])
    many = analyze(v, captions=caps, batch_size=8, n_batches=20, seed=3).text.buckets
    fig = buckets_figure(many.labels, [("captions", many.shares, many.standard_errors())], title="t")
    assert "ErrorbarContainer" in [type(c).__name__ for c in fig.axes[0].containers]


def test_gbar_is_a_seeded_random_batch_not_the_set_in_order():
    v, _ = _captions(24)
    b, gbar, items = batch_buckets(v, batch_size=128, seed=3)
    expected = np.random.default_rng(3).choice(24, 24, replace=False)
    assert items.tolist() == expected.tolist() and items.tolist() != list(range(24))
    want = v[items] @ v[items].T
    np.fill_diagonal(want, 0.0)
    assert gbar == pytest.approx(want, abs=1e-5)
    # the counts are those of the same batch: unchanged by the order
    b8, _, items8 = batch_buckets(v, batch_size=8, n_batches=5, seed=3)
    rng = np.random.default_rng(3)
    assert items8.tolist() == rng.choice(24, 8, replace=False).tolist()


# --- train-report and the end-of-training summary --------------------------------------------------------------
@pytest.fixture(scope="module")
def runs(tmp_path_factory, micro_config):
    """Two real micro runs from one start on 12 images with per-epoch evaluation: InfoNCE stopped early at step
    4 of 9, HN-CLIP to its end."""
    root = tmp_path_factory.mktemp("runs")
    pairs = make_pairs(root, n=12)
    data = write_jsonl(root / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    base = {"model": "hnb-micro", "model_config": str(micro_config), "dataset": str(data), "epochs": 3,
            "batch_size": 4, "lr": 1e-3, "warmup_steps": 2, "num_workers": 0, "log_every": 1, "diag_every": 1,
            "eval_dataset": str(data)}
    train(TrainConfig.from_dict({**base, "loss": "infonce", "stop_at_step": 4, "output": str(root / "infonce")}),
          progress=False)
    train(TrainConfig.from_dict({**base, "loss": "hn", "output": str(root / "hn")}), progress=False)
    return root


@pytest.fixture(scope="module")
def report(runs):
    """Both runs as read back, and the report's figure of them."""
    loaded = [read_run(runs / "infonce"), read_run(runs / "hn")]
    return loaded, report_figure(loaded)


def _axis(fig, title):
    (ax,) = [a for a in fig.axes if a.get_title().startswith(title)]
    return ax


@pytest.mark.slow
def test_train_report_draws_r1_interval_bands_on_an_axis_that_holds_them_with_labelled_axes(report):
    loaded, fig = report
    ax = _axis(fig, "held-out R@1")
    for run in loaded:
        for ev in run["evals"]:
            ranks = read_per_query(read_result(ev["path"])).query("direction == 't2i'")["rank"].to_numpy()
            assert ev["t2i_R@1_ci95"] == list(recall_ci(ranks, (1,))["R@1"])
    bands = [c for c in ax.collections if "95% interval" in (c.get_gid() or "")]
    assert len(bands) == 4  # 2 runs × 2 directions
    band = next(c for c in bands if c.get_gid() == f"{loaded[1]['name']}: t2i 95% interval")
    ys = np.concatenate([p.vertices[:, 1] for p in band.get_paths()])
    lo = [ev["t2i_R@1_ci95"][0] for ev in loaded[1]["evals"]]
    hi = [ev["t2i_R@1_ci95"][1] for ev in loaded[1]["evals"]]
    assert ys.min() == pytest.approx(min(lo)) and ys.max() == pytest.approx(max(hi))
    y0, y1 = ax.get_ylim()  # the axis holds every interval whole and is at least 10 points tall
    all_ci = [v for run in loaded for ev in run["evals"] for d in ("t2i", "i2t") for v in ev[f"{d}_R@1_ci95"]]
    assert y0 <= min(all_ci) and y1 >= max(all_ci) and y1 - y0 >= 10 and 0 <= y0 and y1 <= 100
    for a in fig.axes:  # every panel's y axis says what it shows
        assert a.get_ylabel(), a.get_title()
    assert _axis(fig, "learning rate").get_ylabel() == "learning rate"
    assert ax.get_ylabel() == "R@1 (%)"


@pytest.mark.slow
def test_train_report_shows_raw_and_smoothed_loss_the_lr_a_flat_panel_as_a_sentence_and_both_runs_apart(report):
    loaded, fig = report
    loss = _axis(fig, "training loss")
    for run in loaded:
        raw = [r["loss"] for r in run["log"]]
        (faint,) = [ln for ln in loss.get_lines() if ln.get_label() == f"{run['name']}: raw"]
        (smooth,) = [ln for ln in loss.get_lines() if ln.get_label() == f"{run['name']}: smoothed"]
        assert list(faint.get_ydata()) == raw and faint.get_alpha() < 0.5
        w = max(1, len(raw) // 10)
        assert list(smooth.get_ydata()) == pytest.approx([np.mean(raw[max(0, i - w + 1):i + 1])
                                                          for i in range(len(raw))])
        (lr,) = [ln for ln in _axis(fig, "learning rate").get_lines() if ln.get_label() == run["name"]]
        assert list(lr.get_ydata()) == [r["lr"] for r in run["log"]]
    sat = _axis(fig, "rows with positive prob. exactly 1")
    values = [r[k] for run in loaded for r in run["steps"] for k in ("sat_rows_infonce", "sat_rows_hn")]
    if all(v == 0 for v in values):  # the micro model never saturates: a sentence, not a flat line on ±0.04
        assert not sat.get_lines() and [t.get_text() for t in sat.texts] == [
            "rows with positive prob. exactly 1: 0 at every measurement"]
    # the same start: both runs' epoch-0 R@1 are equal, yet each run's points are drawn apart and distinct
    r1 = _axis(fig, "held-out R@1")
    a, b = (next(ln for ln in r1.get_lines() if ln.get_label() == f"{run['name']}: t2i") for run in loaded)
    assert a.get_ydata()[0] == b.get_ydata()[0]
    assert a.get_xdata()[0] != b.get_xdata()[0] and a.get_marker() != b.get_marker()
    assert a.get_linewidth() > b.get_linewidth() and a.get_zorder() < b.get_zorder()


@pytest.mark.slow
def test_train_report_table_has_a_column_legend_the_early_stop_and_the_r1_summary(runs, capsys, caplog):
    loaded = [read_run(runs / "infonce"), read_run(runs / "hn")]
    table = render_table(loaded)
    assert "infonce (infonce): stopped at step 4 of 9." in table and "hn (hn, γ=0.5): stopped" not in table
    legend = table[table.index("\nColumns:\n"):].splitlines()[2:2 + len(COLUMN_LEGEND)]
    assert legend == [f"- **{h}**: {text}" for h, text in COLUMN_LEGEND.items()]
    assert legend[:2] == ["- **epoch**: after that many epochs (0: the starting model)",
                          "- **active InfoNCE**: share of the epoch's diagnosed batches whose InfoNCE loss is at least "
                          "active_threshold"]
    assert set(COLUMN_LEGEND) == {h for _, h in COLUMNS}
    first, last = loaded[1]["evals"][0], loaded[1]["evals"][-1]
    cell = f"{first['t2i_R@1']:.2f} [{first['t2i_R@1_ci95'][0]:.1f}, {first['t2i_R@1_ci95'][1]:.1f}]"
    assert f"| hn (hn, γ=0.5) | 0 | – | – | – | – | – | – | – | – | {cell} |" in table
    fig = report_figure(loaded)
    assert "infonce (infonce): stopped at step 4 of 9" in [ln.get_label() for ln in _axis(fig, "training").get_lines()]

    def fmt(ev, d):
        lo, hi = ev[f"{d}_R@1_ci95"]
        return f"{ev[f'{d}_R@1']:.2f} [{lo:.1f}, {hi:.1f}]"

    diff = {d: f"{last[f'{d}_R@1'] - first[f'{d}_R@1']:+.2f}".replace("-", "\u2212") for d in ("t2i", "i2t")}
    want = (f"held-out R@1, epoch 0 → 3: t2i {fmt(first, 't2i')} → {fmt(last, 't2i')} ({diff['t2i']}), "
            f"i2t {fmt(first, 'i2t')} → {fmt(last, 'i2t')} ({diff['i2t']})")
    assert r1_summary(runs / "hn") == want
    # the trainer says it when the run ends (logged at INFO, what the CLI shows without -q)
    caplog.set_level("INFO", logger="hnbench")
    train(TrainConfig.from_dict({**json.loads((runs / "hn" / "train_config.json").read_text())["config"],
                                 "output": str(runs / "again"), "epochs": 1, "resume": None, "overwrite": False}),
          progress=False)
    assert r1_summary(runs / "again") in [rec.getMessage() for rec in caplog.records]
    assert r1_summary(runs / "again").startswith("held-out R@1, epoch 0 → 1: t2i ")
