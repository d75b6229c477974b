"""hnbench.search.exact against the brute-force reference in hnbench.metrics."""

from __future__ import annotations

import json
import logging
import re

import numpy as np
import pytest
import torch

from hnbench.metrics import csr_from_assignment, csr_from_lists, ranks_from_scores
from hnbench.search import calibration as search_calibration
from hnbench.search import exact as search
from hnbench.search.exact import available_backends, resolve_backend, retrieve

BACKENDS = ["torch", "faiss"]


def reference(q: np.ndarray, g: np.ndarray, ptr: np.ndarray, idx: np.ndarray, k: int) -> dict:
    """Numpy brute force on the full score matrix (order: score desc, then index asc)."""
    s = np.asarray(q, np.float32) @ np.asarray(g, np.float32).T
    n, m = s.shape
    ranks, tied = ranks_from_scores(s, ptr, idx)
    gt_i, bw_i = np.empty(n, np.int64), np.full(n, -1, np.int64)
    for i in range(n):
        pos = np.unique(idx[ptr[i] : ptr[i + 1]])
        gt_i[i] = pos[np.argmax(s[i, pos])]  # argmax takes the first = lowest index among equals
        neg = np.setdiff1d(np.arange(m), pos)
        if neg.size:
            bw_i[i] = neg[np.argmax(s[i, neg])]
    rows = np.arange(n)
    order = np.lexsort((np.broadcast_to(np.arange(m), s.shape), -s), axis=1)[:, :k]
    bw_s = np.where(bw_i >= 0, s[rows, np.maximum(bw_i, 0)], np.nan)
    return dict(rank=ranks, tied=tied, gt_index=gt_i, gt_score=s[rows, gt_i], best_wrong_index=bw_i,
                best_wrong_score=bw_s, topk_index=order, topk_score=np.take_along_axis(s, order, 1))


def check(out: search.RetrievalOutput, ref: dict, exact_order: bool = True) -> None:
    """Exact ranks/tied/indices; top-k as sets (or in exact order) with allclose scores."""
    for key in ("rank", "tied", "gt_index", "best_wrong_index"):
        np.testing.assert_array_equal(getattr(out, key), ref[key], err_msg=key)
    for key in ("gt_score", "best_wrong_score", "topk_score"):
        np.testing.assert_allclose(getattr(out, key), ref[key], atol=1e-5, err_msg=key)
    assert out.rank.dtype == out.topk_index.dtype == np.int64 and out.tied.dtype == bool
    assert out.topk_score.dtype == out.gt_score.dtype == np.float32
    if exact_order:
        np.testing.assert_array_equal(out.topk_index, ref["topk_index"])
    else:
        assert [set(r) for r in out.topk_index] == [set(r) for r in ref["topk_index"]]


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def caption_setup(n_img: int, per_img: int, d: int, seed: int, noise: float = 1.0, quant: bool = False):
    """Images and per_img captions each (caption = image + noise); owner[c] = image of caption c."""
    rng = np.random.default_rng(seed)
    if quant:
        # Small integers times 1/4: every product and sum is exact in fp32, so scores do not
        # depend on summation order and ties are real (and plentiful).
        img = rng.integers(-2, 3, size=(n_img, d)).astype(np.float32) / 4
        cap = np.repeat(img, per_img, 0) + rng.integers(-1, 2, size=(n_img * per_img, d)) / 4
        return img, cap.astype(np.float32), np.repeat(np.arange(n_img), per_img)
    img = unit(rng.standard_normal((n_img, d)))
    cap = unit(np.repeat(img, per_img, 0) + noise * rng.standard_normal((n_img * per_img, d)) / np.sqrt(d))
    return img, cap, np.repeat(np.arange(n_img), per_img)


def both_directions(img, cap, owner):
    """(queries, gallery, ptr, idx) for t2i (one positive) and i2t (all captions of the image)."""
    t2i = (cap, img, *csr_from_lists([[o] for o in owner]))
    i2t = (img, cap, *csr_from_assignment(owner, img.shape[0]))
    return [t2i, i2t]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("quant", [False, True])
def test_matches_reference_both_directions(backend, quant):
    img, cap, owner = caption_setup(40, 5, 16, seed=0, noise=2.5, quant=quant)
    for q, g, ptr, idx in both_directions(img, cap, owner):
        out = retrieve(q, g, ptr, idx, k=10, backend=backend, device="cpu")
        assert out.backend == backend
        ref = reference(q, g, ptr, idx, 10)
        check(out, ref, exact_order=quant)
        if quant:
            assert ref["tied"].any() and not ref["tied"].all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_duplicate_gallery_vectors(backend):
    rng = np.random.default_rng(1)
    g = unit(rng.standard_normal((30, 8)))
    g[[3, 11, 20]] = g[7]  # four identical images
    g[25] = g[0]
    q = unit(g[[7, 11, 0, 25, 5, 20]] + 0.01 * rng.standard_normal((6, 8)))
    q[0] = g[7]  # exact copy of the duplicated vector
    ptr, idx = csr_from_lists([[7], [11], [0], [25], [5], [3, 20]])
    out = retrieve(q, g, ptr, idx, k=6, backend=backend, device="cpu")
    ref = reference(q, g, ptr, idx, 6)
    check(out, ref)
    assert out.tied[[0, 1, 2, 3, 5]].all() and not out.tied[4]
    assert out.rank[0] == 4 and out.topk_index[0, :4].tolist() == [3, 7, 11, 20]


@pytest.mark.parametrize("backend", BACKENDS)
def test_all_scores_equal(backend):
    g = np.ones((20, 4), np.float32) / 2
    q = g[:3].copy()
    ptr, idx = csr_from_lists([[0], [13], [5, 19]])
    out = retrieve(q, g, ptr, idx, k=4, backend=backend, device="cpu")
    check(out, reference(q, g, ptr, idx, 4))
    assert out.rank.tolist() == [20, 20, 19] and out.tied.all()
    assert out.topk_index.tolist() == [[0, 1, 2, 3]] * 3
    assert out.gt_index.tolist() == [0, 13, 5] and out.best_wrong_index.tolist() == [1, 0, 0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_k_larger_than_gallery_and_single_query(backend):
    img, cap, owner = caption_setup(7, 2, 8, seed=2)
    q, g, ptr, idx = both_directions(img, cap, owner)[0]
    out = retrieve(q, g, ptr, idx, k=25, backend=backend, device="cpu")
    assert out.topk_index.shape == (14, 7)
    check(out, reference(q, g, ptr, idx, 7))
    one = retrieve(q[3:4], g, ptr[:2], idx[:1] * 0 + owner[3], k=3, backend=backend, device="cpu")
    check(one, reference(q[3:4], g, np.array([0, 1]), np.array([owner[3]]), 3))


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_gallery_item_positive(backend):
    g = unit(np.random.default_rng(3).standard_normal((3, 4)))
    out = retrieve(g[:1], g, np.array([0, 3]), np.array([2, 0, 1]), k=2, backend=backend, device="cpu")
    assert out.rank.tolist() == [1] and not out.tied[0]
    assert out.best_wrong_index.tolist() == [-1] and np.isnan(out.best_wrong_score[0])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("quant", [False, True])
def test_chunk_boundaries_and_tensor_inputs(backend, quant):
    img, cap, owner = caption_setup(23, 3, 12, seed=4, noise=3.0, quant=quant)
    for q, g, ptr, idx in both_directions(img, cap, owner):
        ref = reference(q, g, ptr, idx, 5)
        out = retrieve(torch.from_numpy(q), torch.from_numpy(g), ptr, idx, k=5, backend=backend,
                       device="cpu", chunk_size=7)  # 69 and 23 rows: neither divisible by 7
        check(out, ref, exact_order=quant)
        check(retrieve(q.astype(np.float64), g, ptr, idx, k=5, backend=backend, chunk_size=1), ref,
              exact_order=quant)


def test_unsorted_duplicated_csr():
    img, cap, owner = caption_setup(10, 3, 8, seed=5, noise=3.0)
    ptr, idx = csr_from_assignment(owner, 10)
    lists = [list(idx[ptr[i] : ptr[i + 1]][::-1]) + [int(idx[ptr[i]])] for i in range(10)]
    ptr2, idx2 = csr_from_lists(lists)
    for backend in BACKENDS:
        a = retrieve(img, cap, ptr, idx, k=5, backend=backend)
        b = retrieve(img, cap, ptr2, idx2, k=5, backend=backend)
        check(b, reference(img, cap, ptr, idx, 5))
        np.testing.assert_array_equal(a.rank, b.rank)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("quant", [False, True])
def test_positives_ranked_below_the_candidate_list(backend, quant):
    # Random positives land far below depth k + #positives + margin: the full-row path decides them.
    img, cap, _ = caption_setup(150, 1, 8, seed=12, quant=quant)
    rng = np.random.default_rng(12)
    ptr, idx = csr_from_lists([list(rng.integers(0, 150, size=int(rng.integers(1, 4)))) for _ in range(150)])
    out = retrieve(cap, img, ptr, idx, k=5, backend=backend, chunk_size=40)
    check(out, reference(cap, img, ptr, idx, 5), exact_order=quant)
    assert (out.rank > 5 + 3 + search._MARGIN).mean() > 0.5


def test_faiss_fallback_paths(caplog):
    img, cap, owner = caption_setup(60, 1, 32, seed=6, noise=0.3)
    ptr, idx = csr_from_lists([[o] for o in owner])
    with caplog.at_level(logging.INFO, logger="hnbench.search.exact"):
        check(retrieve(cap, img, ptr, idx, k=5, backend="faiss"), reference(cap, img, ptr, idx, 5))
    assert "below the faiss list" not in caplog.text  # easy queries: all decided from the faiss list
    rng = np.random.default_rng(7)
    ptr, idx = csr_from_lists([[int(rng.integers(60))] for _ in owner])  # random positives: ranked deep
    with caplog.at_level(logging.INFO, logger="hnbench.search.exact"):
        check(retrieve(cap, img, ptr, idx, k=5, backend="faiss"), reference(cap, img, ptr, idx, 5))
    # ranked by the full-row count (top-k and best wrong still from the faiss list)
    assert re.search(r"search: [1-9]\d*/60 queries ranked below the faiss list", caplog.text)


def test_chunk_size_auto_bounds_memory(monkeypatch):
    seen = []
    orig = search._torch_rows
    monkeypatch.setattr(search, "_CHUNK_BYTES", 40 * 4 * 8)  # 8 rows of a 40-item gallery
    monkeypatch.setattr(search, "_torch_rows", lambda *a: seen.append(a[6]) or orig(*a))
    img, cap, owner = caption_setup(40, 1, 8, seed=8)
    q, g, ptr, idx = both_directions(img, cap, owner)[0]
    check(retrieve(q, g, ptr, idx, k=3, backend="torch"), reference(q, g, ptr, idx, 3))
    assert seen == [8]


def test_input_errors():
    g = unit(np.random.default_rng(9).standard_normal((5, 4)))
    ptr, idx = np.array([0, 1]), np.array([0])
    with pytest.raises(ValueError, match="torch, faiss"):
        retrieve(g[:1], g, ptr, idx, backend="annoy")
    with pytest.raises(ValueError, match="dim"):
        retrieve(g[:1, :3], g, ptr, idx)
    with pytest.raises(ValueError, match="NaN"):
        retrieve(np.full((1, 4), np.nan, np.float32), g, ptr, idx)
    with pytest.raises(ValueError, match="no positive"):
        retrieve(g[:2], g, np.array([0, 1, 1]), idx)
    with pytest.raises(ValueError, match="k must"):
        retrieve(g[:1], g, ptr, idx, k=0)
    with pytest.raises(ValueError, match="2-D"):
        retrieve(g[0], g, ptr, idx)


def test_backend_resolution():
    assert available_backends()[:2] == ["torch", "faiss"]
    assert resolve_backend("auto", "cpu", 100) == "torch"
    assert resolve_backend("torch", "cuda", 100) == "torch"
    assert resolve_backend("faiss", "cpu", 100) == "faiss"
    with pytest.raises(ValueError, match="valid: auto, torch, faiss, faiss-gpu"):
        resolve_backend("flat", "cpu", 100)
    with pytest.raises(ValueError, match="empty"):
        resolve_backend("auto", "cpu", 0)
    if "faiss-gpu" not in available_backends():
        assert resolve_backend("auto", "cuda", 100) == "torch"
        assert resolve_backend("faiss", "cuda", 100) == "faiss"
        with pytest.raises(ValueError, match="faiss-gpu"):
            resolve_backend("faiss-gpu", "cuda", 100)
    with pytest.raises(ValueError):
        resolve_backend("faiss-gpu", "cpu", 100)


def test_matmul_precision_restored():
    before = torch.backends.cuda.matmul.fp32_precision if hasattr(torch.backends.cuda.matmul, "fp32_precision") \
        else torch.get_float32_matmul_precision()
    g = unit(np.random.default_rng(10).standard_normal((5, 4)))
    retrieve(g, g, np.arange(6), np.arange(5), k=2, backend="torch")
    after = torch.backends.cuda.matmul.fp32_precision if hasattr(torch.backends.cuda.matmul, "fp32_precision") \
        else torch.get_float32_matmul_precision()
    assert before == after


@pytest.mark.gpu
@pytest.mark.parametrize("quant", [False, True])
def test_gpu_backends_match_reference(quant):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    img, cap, owner = caption_setup(200, 5, 64, seed=11, noise=2.5, quant=quant)
    names = ["torch", "auto"] + (["faiss-gpu"] if "faiss-gpu" in available_backends() else [])
    for q, g, ptr, idx in both_directions(img, cap, owner):
        ref = reference(q, g, ptr, idx, 10)
        for name in names:
            out = retrieve(q, g, ptr, idx, k=10, backend=name, device="cuda", chunk_size=97)
            check(out, ref, exact_order=quant)
        cuda_in = retrieve(torch.from_numpy(q).cuda(), torch.from_numpy(g).cuda(), ptr, idx, k=10)
        assert cuda_in.backend == ("faiss-gpu" if "faiss-gpu" in names else "torch")
        check(cuda_in, ref, exact_order=quant)


@pytest.fixture
def small_calibration(monkeypatch):
    """auto on every size, calibrated (for real, by hnbench's own timing) on small galleries."""
    monkeypatch.setattr(search, "AUTO_MIN_WORK", 0)
    monkeypatch.setattr(search_calibration, "SIZES", (50, 200))
    monkeypatch.setattr(search_calibration, "QUERIES", 64)
    measured = []
    real = search._measure_costs
    monkeypatch.setattr(search, "_measure_costs", lambda *a: measured.append(a[0]) or real(*a))
    return measured


@pytest.mark.parametrize("quant", [False, True])
def test_auto_matches_reference_and_every_backend(small_calibration, quant):
    img, cap, owner = caption_setup(60, 4, 16, seed=3, noise=2.5, quant=quant)
    for q, g, ptr, idx in both_directions(img, cap, owner):
        ref = reference(q, g, ptr, idx, 10)
        auto = retrieve(q, g, ptr, idx, k=10, backend="auto", device="cpu")
        assert auto.backend in ("torch", "faiss")
        check(auto, ref, exact_order=quant)
        for name in BACKENDS:
            other = retrieve(q, g, ptr, idx, k=10, backend=name, device="cpu")
            for key in ("rank", "tied", "gt_index", "best_wrong_index", "topk_index"):
                np.testing.assert_array_equal(getattr(auto, key), getattr(other, key), err_msg=f"{name} {key}")
    assert small_calibration == [50, 200]  # measured once, then read back from the cache
    (entry,) = json.loads((search_calibration.cache_dir() / search_calibration.FILE).read_text()).values()
    assert entry["key"]["torch_threads"] == torch.get_num_threads() and set(entry["costs"]) == {"50", "200"}
    assert all(set(c) == {"faiss", "count", "torch"} and min(c.values()) > 0 for c in entry["costs"].values())


@pytest.mark.parametrize("quant", [False, True])
def test_auto_follows_the_calibration_and_the_probe(monkeypatch, caplog, quant):
    monkeypatch.setattr(search, "AUTO_MIN_WORK", 0)
    monkeypatch.setattr(search, "_PROBE_MIN", 16)
    monkeypatch.setattr(search_calibration, "SIZES", (150,))
    img, cap, _ = caption_setup(150, 1, 8, seed=12, quant=quant)
    rng = np.random.default_rng(12)
    ptr, idx = csr_from_lists([list(rng.integers(0, 150, size=int(rng.integers(1, 4)))) for _ in range(150)])
    ref = reference(cap, img, ptr, idx, 5)
    # A machine where faiss lists are cheap but counting a row is dear: the probe sees most positives
    # ranked below the list (random positives) and hands the rest of the queries to torch.
    search_calibration.costs(150, lambda m, nq, d: {"faiss": 1.0, "count": 100.0, "torch": 2.0})
    with caplog.at_level(logging.INFO, logger="hnbench.search.exact"):
        out = retrieve(cap, img, ptr, idx, k=5, backend="auto", device="cpu")
    assert out.backend == "torch" and "torch for the rest" in caplog.text
    check(out, ref, exact_order=quant)
    # A machine where torch is faster outright: no faiss at all.
    (search_calibration.cache_dir() / search_calibration.FILE).unlink()
    search_calibration.costs(150, lambda m, nq, d: {"faiss": 3.0, "count": 1.0, "torch": 2.0})
    out = retrieve(cap, img, ptr, idx, k=5, backend="auto", device="cpu")
    assert out.backend == "torch"
    check(out, ref, exact_order=quant)


def test_auto_beyond_the_calibrated_sizes_follows_how_each_cost_grows(monkeypatch):
    """A gallery above LARGE_FROM calibrates LARGE too, and beyond LARGE each cost grows from
    the two largest sizes: torch faster at every calibrated size but growing as M² loses to faiss."""
    monkeypatch.setattr(search, "AUTO_MIN_WORK", 0)
    monkeypatch.setattr(search_calibration, "SIZES", (100,))
    monkeypatch.setattr(search_calibration, "LARGE", 400)
    monkeypatch.setattr(search_calibration, "LARGE_FROM", 200)
    measured = []

    def measure(m, nq, d):  # per-query seconds: faiss and count linear in m, torch quadratic
        measured.append(m)
        return {"faiss": m * 1e-6, "count": m * 1e-6, "torch": m * m / 500 * 1e-6}

    small = search_calibration.costs(150, measure)
    assert measured == [100] and small["torch"] < small["faiss"]  # 400 not needed yet
    at_large = search_calibration.costs(400, measure)
    assert measured == [100, 400] and at_large == measure(400, 0, 0)  # added once, stored
    measured.clear()
    beyond = search_calibration.costs(1600, measure)
    assert measured == []  # read back from the cache
    assert beyond["faiss"] == pytest.approx(1600e-6) and beyond["torch"] == pytest.approx(320e-6 * 16)
    # the rule as retrieve uses it: above LARGE, auto runs faiss; ranks equal the torch backend's
    img, cap, owner = caption_setup(1600, 1, 8, seed=5, noise=0.3)
    ptr, idx = csr_from_lists([[o] for o in owner])
    q = cap[:64]
    ptr, idx = ptr[:65], idx[:64]
    auto = retrieve(q, img, ptr, idx, k=5, backend="auto", device="cpu")
    ref = retrieve(q, img, ptr, idx, k=5, backend="torch", device="cpu")
    assert auto.backend == "faiss"
    for key in ("rank", "tied", "gt_index", "best_wrong_index", "topk_index"):
        np.testing.assert_array_equal(getattr(auto, key), getattr(ref, key), err_msg=key)
    # without the grown costs (a gallery at the largest calibrated size) torch is chosen
    assert retrieve(q, img[:400], ptr, np.minimum(idx, 399), k=5, backend="auto", device="cpu").backend == "torch"
