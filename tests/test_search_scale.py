"""Search at scale: a 200k gallery in bounded memory, exact on a brute-force sample; approximate mode marked.

Memory bound of the exact torch search on CPU (what ``test_200k_gallery_memory_bound`` asserts)::

    peak RSS - RSS with the inputs loaded <= 1.25 * 256 MiB (one reused fp32 score block of the chunk)
                                             + N * (12 k + 64) bytes (outputs)  + 64 MiB (slack)

i.e. O((N + M) d) for the inputs plus a constant, never N x M (200k x 200k fp32 would be 149 GiB).
The test searches 16k queries against the 200k gallery so that it takes ~30 s on a 2-core box; set
``HNBENCH_SCALE_QUERIES=200000`` for the full 200k x 200k (~6 min there; numbers in benchmarks/README.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from hnbench.metrics import ranks_from_scores
from hnbench.search.approximate import retrieve_approximate
from hnbench.search.exact import _CHUNK_BYTES, available_backends, retrieve

GALLERY, DIM, K, SAMPLE = 200_000, 32, 10, 200


def make_data(m: int, n: int, d: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Unit gallery; query i = its owner + noise (half close: shallow ranks, half far: ranks in the thousands)."""
    rng = np.random.default_rng(seed)
    g = rng.standard_normal((m, d), dtype=np.float32)
    g /= np.linalg.norm(g, axis=1, keepdims=True)
    owner = rng.integers(0, m, n)
    sigma = np.where(np.arange(n) % 2 == 0, 0.3, 3.0).astype(np.float32)[:, None]
    q = g[owner] + sigma * rng.standard_normal((n, d), dtype=np.float32) / np.sqrt(d, dtype=np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    return q, g, owner


def _status_mib(field: str) -> float:
    """VmRSS (now) or VmHWM (peak) of this process. Not ru_maxrss: Linux carries the forking parent's
    peak over into a child's ru_maxrss at exec, so under pytest it would report pytest's size."""
    with open("/proc/self/status") as f:
        line = next(x for x in f if x.startswith(field + ":"))
    return int(line.split()[1]) / 1024


def _child(m: int, n: int, out_path: str) -> None:
    """Run in a fresh process so that the peak RSS is this search's alone."""
    q, g, owner = make_data(m, n, DIM)
    base = _status_mib("VmRSS")
    t = time.perf_counter()
    out = retrieve(q, g, np.arange(n + 1), owner, k=K, backend="torch", device="cpu")
    seconds = time.perf_counter() - t
    peak = _status_mib("VmHWM")
    np.savez(out_path, rank=out.rank, tied=out.tied, gt_index=out.gt_index, topk_index=out.topk_index,
             best_wrong_index=out.best_wrong_index)
    print(json.dumps({"base_mib": base, "peak_mib": peak, "seconds": seconds}))


@pytest.mark.slow
def test_200k_gallery_memory_bound_and_brute_force_sample(tmp_path):
    n = int(os.environ.get("HNBENCH_SCALE_QUERIES", 16_384))
    out_path = tmp_path / "out.npz"
    run = subprocess.run([sys.executable, __file__, str(GALLERY), str(n), str(out_path)], capture_output=True,
                         text=True, timeout=1800)
    assert run.returncode == 0, run.stderr[-3000:]
    stats = json.loads(run.stdout.strip().splitlines()[-1])
    bound = 1.25 * _CHUNK_BYTES / 2**20 + n * (12 * K + 64) / 2**20 + 64
    grown = stats["peak_mib"] - stats["base_mib"]
    assert grown <= bound, f"search grew RSS by {grown:.0f} MiB > bound {bound:.0f} MiB ({stats})"
    assert grown < n * GALLERY * 4 / 2**20 / 10  # nowhere near an N x M matrix

    got = np.load(out_path)
    q, g, owner = make_data(GALLERY, n, DIM)
    rows = np.sort(np.random.default_rng(1).choice(n, SAMPLE, replace=False))
    scores = (torch.from_numpy(q[rows]) @ torch.from_numpy(g).T).numpy()  # brute force: the full rows
    ref_rank, ref_tied = ranks_from_scores(scores, np.arange(SAMPLE + 1), owner[rows])
    assert (ref_rank > 3 * K).sum() > SAMPLE // 4  # deep ranks are exercised, not only shallow ones
    np.testing.assert_array_equal(got["rank"][rows], ref_rank)
    np.testing.assert_array_equal(got["tied"][rows], ref_tied)
    np.testing.assert_array_equal(got["gt_index"][rows], owner[rows])
    order = np.lexsort((np.broadcast_to(np.arange(GALLERY), scores.shape), -scores), axis=1)[:, :K]
    np.testing.assert_array_equal(got["topk_index"][rows], order)
    is_pos = order == owner[rows, None]
    first_wrong = np.where(is_pos[:, 0], order[:, 1], order[:, 0])
    np.testing.assert_array_equal(got["best_wrong_index"][rows], first_wrong)


@pytest.mark.parametrize("index", ["hnsw", "ivf"])
def test_approximate_search_reports_recall_and_is_marked(index):
    q, g, owner = make_data(4000, 1000, 16, seed=3)
    ptr = np.arange(1001)
    exact = retrieve(q, g, ptr, owner, k=K)
    approx = retrieve_approximate(q, g, ptr, owner, k=K, index=index, sample=300)
    assert approx.approximate and not exact.approximate and approx.backend == f"faiss-{index}"
    r = approx.recall_vs_exact
    assert r["sample"] == 300 and r["k"] == K and 0 < r["recall@k"] <= 1 and 0 < r["rank_agreement"] <= 1
    # the index can only miss items: ranks are lower bounds of the exact ones; positives are scored exactly
    assert (approx.rank <= exact.rank).all()
    np.testing.assert_array_equal(approx.gt_index, exact.gt_index)
    np.testing.assert_allclose(approx.gt_score, exact.gt_score, atol=1e-6)
    if index == "hnsw":
        assert r["recall@k"] > 0.9


def test_evaluate_marks_approximate_results(tmp_path):
    from hnbench.tasks.retrieval import score_embeddings

    _, g, _ = make_data(300, 1, 16, seed=4)
    rng = np.random.default_rng(4)
    caption_image = np.concatenate([np.arange(300), rng.integers(0, 300, 100)])
    q = g[caption_image] + 0.2 * rng.standard_normal((400, 16), dtype=np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    metrics, _, outs = score_embeddings(g, q, caption_image, search="approximate", ci=False)
    assert all(o.approximate and o.recall_vs_exact for o in outs.values())
    exact_metrics, _, _ = score_embeddings(g, q, caption_image, ci=False)
    assert metrics["t2i"]["R@1"] >= exact_metrics["t2i"]["R@1"]  # lower-bound ranks: never worse


@pytest.mark.gpu
def test_multi_gpu_sharded_search_matches_cpu():
    if torch.cuda.device_count() < 1:
        pytest.skip("needs CUDA")
    q, g, owner = make_data(20_000, 3000, 64, seed=5)
    ptr = np.arange(3001)
    ref = retrieve(q, g, ptr, owner, k=K, backend="torch", device="cpu")
    names = ["torch"] + (["faiss-gpu"] if "faiss-gpu" in available_backends() else [])
    for name in names:
        for device in ["cuda", "cuda:0"]:  # "cuda": every visible GPU (sharded when there are several)
            out = retrieve(q, g, ptr, owner, k=K, backend=name, device=device)
            np.testing.assert_array_equal(out.rank, ref.rank)
            np.testing.assert_array_equal(out.gt_index, ref.gt_index)
            assert (out.topk_index == ref.topk_index).mean() > 0.999  # fp32 kernels may swap near-ties


if __name__ == "__main__":
    _child(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
