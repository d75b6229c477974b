"""Hand-computed checks of hnbench.metrics."""

from __future__ import annotations

import numpy as np
import pytest

from hnbench import metrics
from hnbench.metrics import (
    bootstrap_ci,
    csr_from_assignment,
    csr_from_lists,
    rank_summary,
    ranks_from_scores,
    recall_at_k,
    summarize,
    validate_csr,
)

# Query 0: positive {0} scores 0.9, a negative also scores 0.9   -> rank 2, tied.
# Query 1: positives {1, 3} both 0.8, negatives 0.2, 0.3          -> rank 1.
# Query 2: positive {0} is the lowest score                      -> rank 4.
# Query 3: positives {0, 2}: best 0.6, one negative 0.7 above it  -> rank 2.
SCORES = np.array(
    [
        [0.9, 0.5, 0.9, 0.1],
        [0.2, 0.8, 0.3, 0.8],
        [0.1, 0.2, 0.3, 0.4],
        [0.5, 0.7, 0.6, 0.0],
    ],
    dtype=np.float32,
)
POS = [[0], [1, 3], [0], [0, 2]]


def test_ranks_from_scores_hand_computed():
    ptr, idx = csr_from_lists(POS)
    ranks, tied = ranks_from_scores(SCORES, ptr, idx)
    assert ranks.tolist() == [2, 1, 4, 2]
    assert tied.tolist() == [True, False, False, False]
    assert ranks.dtype == np.int64


def test_ranks_i2t_hit_definition():
    # Image 0 owns captions 0 and 1; caption 1 is top-1 though caption 0 is last -> a hit at K=1.
    scores = np.array([[0.1, 0.9, 0.5], [0.3, 0.2, 0.8]], dtype=np.float32)
    ptr, idx = csr_from_assignment(np.array([0, 0, 1]), 2)
    ranks, _ = ranks_from_scores(scores, ptr, idx)
    assert ranks.tolist() == [1, 1]
    assert recall_at_k(ranks, ks=(1,)) == {"R@1": 100.0}


def test_duplicate_positive_entries_are_harmless():
    ranks, _ = ranks_from_scores(SCORES[:2], np.array([0, 2, 4]), np.array([0, 0, 3, 1]))
    assert ranks.tolist() == [2, 1]


def test_recall_and_rank_summary():
    ranks = np.array([1, 2, 4, 2])
    assert recall_at_k(ranks, ks=(1, 2, 5)) == {"R@1": 25.0, "R@2": 75.0, "R@5": 100.0}
    assert rank_summary(ranks) == {"mean_rank": 2.25, "median_rank": 2.0, "MRR": pytest.approx(0.5625)}


@pytest.mark.parametrize("bad", [np.array([]), np.array([0, 1]), np.array([[1, 2]]), np.array([1.5])])
def test_bad_ranks_rejected(bad):
    with pytest.raises(ValueError):
        recall_at_k(bad)


def test_bad_ks_rejected():
    with pytest.raises(ValueError):
        recall_at_k(np.array([1]), ks=(0,))


def test_bootstrap_degenerate_and_reference():
    assert bootstrap_ci(np.ones(50, dtype=np.int64)) == {"R@1": (100.0, 100.0), "R@5": (100.0, 100.0),
                                                         "R@10": (100.0, 100.0)}
    rng = np.random.default_rng(1)
    ranks = rng.integers(1, 20, size=300)
    got = bootstrap_ci(ranks, ks=(1, 5), n_boot=200, alpha=0.1, seed=7)
    # Reference: the same resamples, one Python loop per resample.
    draws = np.random.default_rng(7).integers(0, ranks.size, size=(200, ranks.size))
    for k in (1, 5):
        stats = [100.0 * np.mean(ranks[d] <= k) for d in draws]
        lo, hi = np.percentile(stats, [5.0, 95.0])
        assert got[f"R@{k}"] == pytest.approx((lo, hi))
        point = recall_at_k(ranks, ks=(k,))[f"R@{k}"]
        assert lo <= point <= hi


def test_bootstrap_chunked_is_deterministic(monkeypatch):
    ranks = np.random.default_rng(2).integers(1, 8, size=100)
    a = bootstrap_ci(ranks, n_boot=300, seed=3)
    assert bootstrap_ci(ranks, n_boot=300, seed=3) == a
    assert bootstrap_ci(ranks, n_boot=300, seed=4) != a
    monkeypatch.setattr(metrics, "_BOOT_CHUNK_ELEMS", 700)  # 7 resamples per chunk
    b = bootstrap_ci(ranks, n_boot=300, seed=3)
    for key in a:
        assert b[key][0] <= b[key][1]
        assert abs(b[key][0] - a[key][0]) < 10 and abs(b[key][1] - a[key][1]) < 10


def test_bootstrap_bad_args():
    with pytest.raises(ValueError):
        bootstrap_ci(np.array([1, 2]), n_boot=0)
    with pytest.raises(ValueError):
        bootstrap_ci(np.array([1, 2]), alpha=1.0)


def test_csr_from_lists():
    ptr, idx = csr_from_lists([[2], [0, 1], [3]])
    assert ptr.tolist() == [0, 1, 3, 4] and idx.tolist() == [2, 0, 1, 3]
    assert ptr.dtype == idx.dtype == np.int64
    with pytest.raises(ValueError, match="query 1"):
        csr_from_lists([[0], []])
    ptr, idx = csr_from_lists([[0], []], allow_empty=True)
    assert ptr.tolist() == [0, 1, 1]
    ptr, idx = csr_from_lists([])
    assert ptr.tolist() == [0] and idx.size == 0


def test_csr_from_assignment():
    ptr, idx = csr_from_assignment(np.array([0, 0, 1, 2, 1]), 3)
    assert ptr.tolist() == [0, 2, 4, 5] and idx.tolist() == [0, 1, 2, 4, 3]
    with pytest.raises(ValueError, match="query 2"):
        csr_from_assignment(np.array([0, 1]), 3)
    assert csr_from_assignment(np.array([0, 1]), 3, allow_empty=True)[0].tolist() == [0, 1, 2, 2]
    with pytest.raises(ValueError):
        csr_from_assignment(np.array([0, 3]), 3)
    with pytest.raises(ValueError):
        csr_from_assignment(np.array([0, -1]), 2)


@pytest.mark.parametrize(
    "n, ptr, idx, match",
    [
        (2, [0, 1], [0], r"shape \(3,\)"),
        (2, [1, 1, 2], [0, 1], "start at 0"),
        (2, [0, 1, 3], [0, 1], "end at"),
        (2, [0, 2, 1], [0], "non-decreasing"),
        (2, [0, 1, 1], [0], "no positive"),
        (2, [0, 1, 2], [0, 4], "out of range"),
        (2, [0, 1, 2], [0, -1], "out of range"),
        (2, [0, 1, 2], [0.0, 1.0], "integer"),
        (1, [0, 1], [[0]], "1-D"),
    ],
)
def test_validate_csr_errors(n, ptr, idx, match):
    with pytest.raises(ValueError, match=match):
        validate_csr(np.array(ptr), np.array(idx), n, 4)


def test_ranks_from_scores_errors():
    ptr, idx = csr_from_lists(POS)
    bad = SCORES.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        ranks_from_scores(bad, ptr, idx)
    with pytest.raises(ValueError):
        ranks_from_scores(SCORES[0], ptr, idx)
    with pytest.raises(ValueError, match="no positive"):
        ranks_from_scores(SCORES[:2], np.array([0, 1, 1]), np.array([0]))


def test_summarize():
    ranks, tied = np.array([1, 2, 4, 2]), np.array([True, False, False, False])
    out = summarize(ranks, tied, ks=(1, 5), n_boot=50)
    assert out["R@1"] == 25.0 and out["R@5"] == 100.0
    assert out["mean_rank"] == 2.25 and out["median_rank"] == 2.0 and out["MRR"] == pytest.approx(0.5625)
    assert out["n_queries"] == 4 and out["n_tied"] == 1
    # 4 of 4 hits: the bootstrap would give [100, 100]; the exact interval is [100 · 0.025^(1/4), 100]
    assert set(out["ci95"]) == {"R@1", "R@5"} and out["ci95"]["R@5"] == pytest.approx([100 * 0.025 ** 0.25, 100.0])
    lo, hi = out["ci95"]["R@1"]
    assert 0.0 <= lo <= 25.0 <= hi <= 100.0
    assert summarize(ranks, tied, ci=False)["ci95"] is None
    with pytest.raises(ValueError):
        summarize(ranks, tied[:2])


def test_metrics_module_does_not_import_torch():
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(metrics))
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not any(x.split(".")[0] in {"torch", "hnbench"} for x in names)
