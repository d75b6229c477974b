"""Query-conditioned (pairwise) scorers — the contract, exact blocked search over the whole gallery,
``--scorer`` / ``--rerank-top``, FineLIP's fine-grained scorer from a run's folder or a released state dict,
the refusals, and the leaderboard's mark."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import assert_one_line_error, make_pairs, snapshot, write_jsonl

from hnbench.cli import main
from hnbench.metrics import csr_from_assignment
from hnbench.models import load_model
from hnbench.models.checkpoint import save_state_dict
from hnbench.models.finelip import ATRM, FINELIP, FineLIPScorer, finelip_scorers
from hnbench.models.scorers import PairScorer
from hnbench.results.record import read_per_query, read_result
from hnbench.search.pairwise import rerank, retrieve_pairwise


# -- fixtures: a tiny FineLIP "run" (checkpoint + cross-net beside it) and a small image–caption set ------------
def _atrm(dim: int, k: int = 3, seed: int = 1) -> ATRM:
    torch.manual_seed(seed)
    atrm = ATRM(dim, k)
    with torch.no_grad():  # away from the default init, so the aggregation is not near-uniform
        for p in atrm.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    return atrm


@pytest.fixture
def run_dir(tmp_path: Path, micro_config: Path) -> Path:
    """A FineLIP training run's folder as hnbench's trainer writes it: checkpoint.safetensors and
    objective_modules.safetensors (keys ``finelip.*``)."""
    torch.manual_seed(0)
    enc = load_model("hnb-micro", model_config=str(micro_config))
    run = tmp_path / "run"
    run.mkdir()
    save_state_dict(enc.model, run / "checkpoint.safetensors", {"hnbench": "train"})
    save_state_dict(torch.nn.ModuleDict({"finelip": _atrm(enc.info.embed_dim)}), run / "objective_modules.safetensors")
    return run


@pytest.fixture
def data(tmp_path: Path) -> Path:
    pairs = make_pairs(tmp_path, n=10)
    rows = [{"image": p, "caption": c} for p, c in pairs]
    rows += [{"image": pairs[0][0], "caption": "a second caption of the first image"}]
    rows += [{"image": pairs[3][0], "caption": pairs[3][1]}]  # the same caption twice: exact ties
    return write_jsonl(tmp_path / "pairs.jsonl", rows)


def _scorer(run_dir: Path, micro_config: Path) -> tuple[PairScorer, object]:
    enc = load_model("hnb-micro", str(run_dir / "checkpoint.safetensors"), model_config=str(micro_config))
    found = finelip_scorers(enc)
    assert set(found) == {FINELIP} and isinstance(found[FINELIP], FineLIPScorer)
    return found[FINELIP], enc


def _states(scorer: PairScorer, enc, n_images: int = 6, seed: int = 0):
    """States of random pixels and of captions (two images and two captions repeated: exact ties)."""
    g = torch.Generator().manual_seed(seed)
    pixels = torch.randn(n_images, 3, 32, 32, generator=g)
    caps = [f"a {c} thing number {i}" for i, c in enumerate(["red", "blue", "green", "cyan", "white", "red", "teal",
                                                                                  "pink"])]
    images, texts = scorer.image_state(pixels), scorer.text_state(enc.tokenize(caps).tokens)
    for state, copy, of in ((images, 5, 2), (texts, 4, 1)):  # a duplicate image and caption: exact ties
        for v in state.values():
            v[copy] = v[of]
    return images, texts


def _brute_force_ranks(s: np.ndarray, ptr: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """rank = 1 + #non-positives scoring >= the best positive; the top list by (score desc, index asc)."""
    ranks, tied, order = [], [], []
    for q in range(s.shape[0]):
        pos = set(idx[ptr[q]:ptr[q + 1]].tolist())
        best = max(s[q, j] for j in pos)
        nonpos = [j for j in range(s.shape[1]) if j not in pos]
        ranks.append(1 + sum(s[q, j] >= best for j in nonpos))
        tied.append(any(s[q, j] == best for j in nonpos))
        order.append(sorted(range(s.shape[1]), key=lambda j: (-s[q, j], j)))
    return np.array(ranks), np.array(tied), np.array(order)


# -- (a) + (e): blocked exact search equals brute force; the scorer only ever sees blocks ---------------------
class _Recorder:
    """A scorer that records the shapes of the states it is asked to score."""

    def __init__(self, inner: PairScorer):
        self.inner, self.name, self.description = inner, inner.name, inner.description
        self.calls: list[tuple[tuple[int, ...], tuple[int, ...], bool]] = []
        self.t2i = True

    def image_state(self, pixels):
        return self.inner.image_state(pixels)

    def text_state(self, tokens):
        return self.inner.text_state(tokens)

    def score(self, text_state, image_state):
        self.calls.append((tuple(text_state["tokens"].shape), tuple(image_state["tokens"].shape), self.t2i))
        return self.inner.score(text_state, image_state)


@pytest.mark.parametrize(("query_block", "candidate_block"), [(1, 1), (2, 4), (3, 5), (4, 2), (64, 256)])
def test_blocked_exact_scorer_equals_brute_force(run_dir, micro_config, query_block, candidate_block):
    scorer, enc = _scorer(run_dir, micro_config)
    images, texts = _states(scorer, enc)
    caption_image = np.array([0, 1, 2, 3, 1, 5, 0, 4])  # caption 4 repeats caption 1 (same image); image 5 = image 2
    full = scorer.score(texts, images).numpy()  # the whole N×M block at once: the brute force
    recorder = _Recorder(scorer)
    any_tied = []
    for t2i in (True, False):
        s = full if t2i else full.T
        ptr, idx = ((np.arange(9), caption_image) if t2i else csr_from_assignment(caption_image, 6))
        recorder.t2i = t2i
        out = retrieve_pairwise(recorder, texts if t2i else images, images if t2i else texts, ptr, idx, t2i=t2i,
                                k=5, query_block=query_block, candidate_block=candidate_block)
        ranks, tied, order = _brute_force_ranks(s, ptr, idx)
        np.testing.assert_array_equal(out.rank, ranks)
        np.testing.assert_array_equal(out.tied, tied)
        np.testing.assert_array_equal(out.topk_index, order[:, :5])
        np.testing.assert_allclose(out.topk_score, np.take_along_axis(s, order[:, :5], 1), rtol=1e-5, atol=1e-6)
        any_tied.append(bool(tied.any()))
    assert any_tied == [True, False]  # caption 2: image 5 ties its image 2 (pessimistic rule: counted against it)
    # (e) the scorer only ever receives one block of queries × one block of candidates: never all N×M tokens
    n_tokens = texts["tokens"].shape[1]
    calls = {t2i: [c for c in recorder.calls if c[2] == t2i] for t2i in (True, False)}
    assert calls[True] and calls[False] and all(t[1] == i[1] == n_tokens for t, i, _ in recorder.calls)
    for t2i, (q, c) in ((True, (0, 1)), (False, (1, 0))):
        assert max(call[q][0] for call in calls[t2i]) <= query_block
        assert max(call[c][0] for call in calls[t2i]) <= candidate_block


def test_rerank_with_k_at_least_the_gallery_is_the_full_scorer(run_dir, micro_config):
    scorer, enc = _scorer(run_dir, micro_config)
    images, texts = _states(scorer, enc)
    caption_image = np.array([0, 1, 2, 3, 1, 5, 0, 4])
    iv, tv = images["global"].numpy(), texts["global"].numpy()
    for t2i in (True, False):
        ptr, idx = ((np.arange(9), caption_image) if t2i else csr_from_assignment(caption_image, 6))
        q, g = (texts, images) if t2i else (images, texts)
        qv, gv = (tv, iv) if t2i else (iv, tv)
        full = retrieve_pairwise(scorer, q, g, ptr, idx, t2i=t2i, k=5, query_block=3, candidate_block=4)
        for top in (g["global"].shape[0], 50):
            re = rerank(scorer, q, g, qv, gv, ptr, idx, top=top, t2i=t2i, k=5, query_block=2, candidate_block=3)
            for field in ("rank", "tied", "gt_index", "best_wrong_index", "topk_index"):
                np.testing.assert_array_equal(getattr(re, field), getattr(full, field), err_msg=field)
            np.testing.assert_allclose(re.topk_score, full.topk_score, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("query_block", [32, 1])  # 1: a block whose only query has no positive among its K
def test_rerank_top_k_keeps_the_dual_encoder_rank_outside_it(run_dir, micro_config, query_block):
    scorer, enc = _scorer(run_dir, micro_config)
    images, texts = _states(scorer, enc)
    caption_image = np.array([0, 1, 2, 3, 1, 5, 0, 4])
    ptr, idx = np.arange(9), caption_image
    iv, tv = images["global"].numpy(), texts["global"].numpy()
    from hnbench.search.exact import retrieve

    cos = retrieve(tv, iv, ptr, idx, k=6, backend="torch")
    full = scorer.score(texts, images).numpy()
    re = rerank(scorer, texts, images, tv, iv, ptr, idx, top=3, t2i=True, k=5, query_block=query_block)
    assert any(caption_image[q] not in cos.topk_index[q, :3] for q in range(len(caption_image)))
    for q in range(len(caption_image)):
        top = cos.topk_index[q, :3]
        if caption_image[q] in top:  # re-ranked among the K by the pairwise score
            best = full[q, caption_image[q]]
            assert re.rank[q] == 1 + sum(full[q, j] >= best for j in top if j != caption_image[q])
        else:  # outside: the dual encoder's rank, below the K
            assert re.rank[q] == cos.rank[q] > 3
        assert sorted(re.topk_index[q, :3]) == sorted(top)  # the same K, in the pairwise order
        assert list(re.topk_index[q, 3:5]) == list(cos.topk_index[q, 3:5])  # then the dual encoder's order


# -- (b) end to end through the CLI ---------------------------------------------------------------------------
def _eval(run_dir, micro_config, data, out, *extra):
    return main(["eval", "--model", "hnb-micro", "--model-config", str(micro_config), "--pretrained",
                 str(run_dir / "checkpoint.safetensors"), "--dataset", str(data), "--output", str(out),
                 "--no-ci", "-q", *extra])


def test_eval_scorer_finelip_end_to_end_equals_brute_force(run_dir, micro_config, data, tmp_path, capsys):
    out = tmp_path / "eval"
    assert _eval(run_dir, micro_config, data, out) == 0  # the dual encoder first: its embeddings fill the cache
    assert "scored by" not in capsys.readouterr().out
    assert _eval(run_dir, micro_config, data, out, "--scorer", FINELIP) == 0  # beside it (another file)
    assert f"scored by {FINELIP}, every pair: " in capsys.readouterr().out
    files = sorted(out.glob("*.json"))
    results = {read_result(f).scorer["name"]: read_result(f) for f in files}
    assert set(results) == {"cosine", FINELIP}
    r = results[FINELIP]
    assert r.scorer["rerank_top"] is None and "0.8·cos" in r.scorer["description"]
    assert r.settings["scorer"] == FINELIP and r.settings["similarity"].startswith(FINELIP)
    # the states are never cached, and the cached cosine embeddings were not served as states: all encoded
    assert r.settings["cache"] is False and r.settings["encoding"]["encoded"] == {"images": 10, "texts": 12}
    assert results["cosine"].settings["cache"] is True
    assert "scorer" not in results["cosine"].settings and results["cosine"].scorer["rerank_top"] is None
    # brute force: the states of every image and caption, the whole N×M score matrix at once
    from hnbench.data import load_dataset
    from hnbench.evaluation.encode import encode_images

    ds = load_dataset(str(data))
    scorer, enc = _scorer(run_dir, micro_config)
    pixels = torch.stack([enc.image_transform(ds.images.open(i)) for i in range(ds.n_images)])
    s = scorer.score(scorer.text_state(enc.tokenize(list(ds.captions)).tokens), scorer.image_state(pixels)).numpy()
    for direction, scores, (ptr, idx) in (("t2i", s, (np.arange(ds.n_captions + 1), ds.caption_image)),
                                          ("i2t", s.T, csr_from_assignment(ds.caption_image, ds.n_images))):
        ranks, _, _ = _brute_force_ranks(scores, ptr, idx)
        for k in (1, 5, 10):
            assert r.metrics[direction][f"R@{k}"] == pytest.approx(100 * np.mean(ranks <= k))
    frame = read_per_query(r)  # the per-query file is the pairwise ranks (browse and compare read it)
    assert (frame.loc[frame["direction"] == "t2i", "rank"].to_numpy() ==
            _brute_force_ranks(s, np.arange(ds.n_captions + 1), ds.caption_image)[0]).all()
    assert encode_images  # the states went through hnbench.evaluation.encode (never cached): a rerun encodes them again
    # (c) end to end: --rerank-top K >= the gallery gives the full scorer's numbers, recorded as a re-rank
    assert _eval(run_dir, micro_config, data, out, "--scorer", FINELIP, "--rerank-top", "100") == 0
    re = [read_result(f) for f in out.glob("*.json") if read_result(f).scorer.get("rerank_top")]
    assert len(re) == 1 and re[0].scorer["rerank_top"] == 100 and "dual-encoder rank" in re[0].scorer["rule"]
    assert re[0].metrics["t2i"] == r.metrics["t2i"] and re[0].metrics["i2t"] == r.metrics["i2t"]


def test_released_state_dict_with_cross_net_keys_offers_the_scorer(tmp_path, micro_config):
    torch.manual_seed(0)
    enc = load_model("hnb-micro", model_config=str(micro_config))
    atrm = _atrm(enc.info.embed_dim, k=2)
    sd = {**enc.model.state_dict(), **{f"cross_net.{k}": v for k, v in atrm.state_dict().items()}}
    path = tmp_path / "finelip-micro.pt"
    torch.save(sd, path)  # the authors' torch.save of the model's state dict
    loaded = load_model("hnb-micro", str(path), model_config=str(micro_config))  # cosine load drops cross_net.*
    found = finelip_scorers(loaded)
    assert set(found) == {FINELIP}
    got = found[FINELIP].atrm.state_dict()  # kept for the fine-grained scorer: the file's own weights
    assert all(torch.equal(got[k], v) for k, v in atrm.state_dict().items())


# -- (d) the one-line refusals, before anything is encoded ----------------------------------------------------
def test_scorer_refusals_are_one_line_before_encoding(tmp_path, micro_config, data, capsys, run_dir):
    before = snapshot(tmp_path)
    cache = tmp_path / "cache"
    cases = [
        (["--model", "hnbench-tiny", "--scorer", FINELIP], ("--scorer", FINELIP, "hnbench-tiny", "cosine")),
        (["--model", "hnb-micro", "--model-config", str(micro_config), "--scorer", "flair-conditioned"],
         ("flair-conditioned", "dual encoder", "cosine")),
        (["--model", "hnbench-tiny", "--rerank-top", "5"], ("--rerank-top", "--scorer")),
        (["--model", "hnb-micro", "--model-config", str(micro_config), "--pretrained",
          str(run_dir / "checkpoint.safetensors"), "--scorer", FINELIP, "--search", "approximate"],
         ("--scorer", "--search approximate")),
    ]
    for args, words in cases:
        rc = main(["eval", *args, "--dataset", str(data), "--output", str(tmp_path / "out"), "--cache-dir",
                   str(cache)])
        assert rc == 2
        assert_one_line_error(capsys.readouterr().err, *words)
    with pytest.raises(SystemExit) as e:  # an unknown name: argparse's choices, generated from the registry
        main(["eval", "--model", "hnbench-tiny", "--scorer", "nope", "--dataset", str(data)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1 and FINELIP in err and "flair-conditioned" in err
    assert snapshot(tmp_path) == before and not (tmp_path / "out").exists() and not cache.exists()


def test_scorer_refused_on_a_loaded_dual_encoder_before_encoding(tmp_path, micro_config):
    from hnbench.data import load_dataset
    from hnbench.errors import ConfigError
    from hnbench.evaluation.evaluate import evaluate

    pairs = make_pairs(tmp_path, n=3)
    ds = load_dataset(str(write_jsonl(tmp_path / "p.jsonl", [{"image": p, "caption": c} for p, c in pairs])))
    enc = load_model("hnb-micro", model_config=str(micro_config))
    calls = []
    enc.encode_images = lambda pixels: calls.append(pixels)  # never reached
    with pytest.raises(ConfigError, match="dual encoder: it offers cosine only"):
        evaluate(enc, ds, scorer=FINELIP, use_cache=False, progress=False)
    assert calls == []


# -- results and the leaderboard -------------------------------------------------------------------------------
def test_results_without_scorer_read_as_cosine(tmp_path):
    from hnbench.results.record import EvalResult, upgrade_record

    r = EvalResult(model={"arch": "a", "pretrained": None, "fingerprint": "f"}, dataset={"name": "d"},
                   metrics={"t2i": {"R@1": 1.0}, "i2t": {"R@1": 2.0}})
    d = r.to_dict()
    assert d["scorer"]["name"] == "cosine"
    old = {k: v for k, v in d.items() if k != "scorer"}
    assert upgrade_record(old)["scorer"] == {"name": "cosine", "description": d["scorer"]["description"],
                                             "rerank_top": None}
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert read_result(tmp_path / "old.json").scorer["name"] == "cosine"


def _stored(tmp_path: Path, name: str, scorer: dict | None, r1: float) -> None:
    from hnbench.results.record import EvalResult, write_result

    r = EvalResult(model={"arch": "hnb-micro", "pretrained": "run/checkpoint.safetensors", "fingerprint": "abcd1234",
                          "context_length": 32},
                   dataset={"name": "synthdense", "protocol": "test", "fingerprint": "feed", "n_images": 10},
                   metrics={d: {"R@1": r1, "R@5": 50.0, "R@10": 60.0} for d in ("t2i", "i2t")},
                   settings={"search": "exact", **({"scorer": scorer["name"]} if scorer else {}),
                             "identity": ["scorer"]}, **({"scorer": scorer} if scorer else {}))
    write_result(r, tmp_path / name)


def test_leaderboard_marks_pairwise_rows_in_every_format(tmp_path):
    from hnbench.results.leaderboard import leaderboard

    _stored(tmp_path / "results", "a", None, 30.0)
    _stored(tmp_path / "results", "b", {"name": FINELIP, "description": "FineLIP", "rerank_top": None}, 40.0)
    md = leaderboard([tmp_path / "results"])
    rows = [line for line in md.splitlines() if line.startswith("|") and "hnb-micro" in line]
    assert len(rows) == 2  # the same weights scored two ways: two rows, not a duplicate
    pair = [line for line in rows if "‡" in line]
    assert len(pair) == 1 and f"pairwise ({FINELIP})" in pair[0] and "40.00" in pair[0]
    assert "‡ pairwise" in md.split("\n\n")[1] or any(line.startswith("‡") or "‡ pairwise:" in line
                                                      for line in md.splitlines())
    csv = leaderboard([tmp_path / "results"], fmt="csv")
    header, *lines = csv.splitlines()
    assert "scorer" in header.split(",")
    col = header.split(",").index("scorer")
    assert sorted(line.split(",")[col] for line in lines) == ["cosine", FINELIP]
    page = leaderboard([tmp_path / "results"], fmt="html")
    assert f"‡ pairwise ({FINELIP})" in page and "‡ pairwise" in page.split("<table")[0]


def test_cosine_through_the_pairwise_path_ranks_as_the_cosine_search(micro_config):
    from hnbench.models.scorers import CosineScorer
    from hnbench.search.exact import retrieve

    enc = load_model("hnb-micro", model_config=str(micro_config))
    scorer = CosineScorer(enc)
    g = torch.Generator().manual_seed(4)
    images = scorer.image_state(torch.randn(7, 3, 32, 32, generator=g))
    texts = scorer.text_state(enc.tokenize([f"caption {i} of a thing" for i in range(9)]).tokens)
    caption_image = np.array([0, 1, 2, 3, 4, 5, 6, 0, 3])
    for t2i in (True, False):
        ptr, idx = (np.arange(10), caption_image) if t2i else csr_from_assignment(caption_image, 7)
        q, c = (texts, images) if t2i else (images, texts)
        pair = retrieve_pairwise(scorer, q, c, ptr, idx, t2i=t2i, k=4, query_block=2, candidate_block=3)
        cos = retrieve(q["embedding"], c["embedding"], ptr, idx, k=4, backend="torch")
        for field in ("rank", "tied", "gt_index", "best_wrong_index", "topk_index"):
            np.testing.assert_array_equal(getattr(pair, field), getattr(cos, field), err_msg=field)
        np.testing.assert_allclose(pair.topk_score, cos.topk_score, rtol=1e-5, atol=1e-6)


# -- a family registered in a test module plugs a scorer in through the contract (as FLAIR's family does) -------
class _PooledScorer:
    """A text-conditioned pooling scorer (FLAIR-like): each caption attends over the image's patch tokens and is
    scored against the pooled feature; states: the patch tokens (B, P, D) and the caption feature (B, D)."""

    name, description = "flair-conditioned", "test: caption-conditioned attention pooling of the patch tokens"

    def __init__(self, encoder):
        from hnbench.models.towers import CLIPTowers

        self.towers = CLIPTowers(encoder.model, "open_clip", encoder=encoder)

    @torch.no_grad()
    def image_state(self, pixels):
        return {"patches": torch.nn.functional.normalize(self.towers._image_with_tokens(pixels)[1], dim=-1)}

    @torch.no_grad()
    def text_state(self, tokens):
        return {"text": self.towers._text_with_tokens(tokens)[0]}

    def score(self, text_state, image_state):
        t, x = text_state["text"].double(), image_state["patches"].double()  # (T, D), (I, P, D)
        weights = torch.einsum("td,ipd->tip", t, x).mul(10).softmax(dim=-1)
        pooled = torch.nn.functional.normalize(torch.einsum("tip,ipd->tid", weights, x), dim=-1)
        return torch.einsum("td,tid->ti", t, pooled).float()


@pytest.fixture
def pairtest_family(micro_config):
    from hnbench.models.family import ModelFamily
    from hnbench.models.openclip import load_openclip
    from hnbench.registry import MODELS

    class PairTestFamily(ModelFamily):
        name = "pairtest"

        def load(self, model, pretrained=None, **kw):
            enc = load_openclip(model.removeprefix("pairtest:"), pretrained, model_config=str(micro_config),
                                **{k: v for k, v in kw.items() if k != "model_config"})
            enc.info.arch = model  # the family answers for its encoders (family_of(info.arch))
            return enc

        def pair_scorers(self, encoder):
            return {"flair-conditioned": _PooledScorer(encoder)}

    MODELS.register("pairtest", PairTestFamily(), prefixes=("pairtest:",))
    yield "pairtest:hnb-micro"
    for table in (MODELS._targets, MODELS._help, MODELS._spelling):
        table.pop("pairtest", None)
    MODELS._prefixes.pop("pairtest:", None)


def test_a_family_registered_in_a_test_module_offers_its_scorer(pairtest_family, data, tmp_path):
    from hnbench.data import load_dataset
    from hnbench.evaluation.evaluate import evaluate
    from hnbench.models.family import ModelFamily, family_of

    assert family_of(pairtest_family).pair_scorer_names(pairtest_family, None) is None  # known once it loads
    assert ModelFamily().pair_scorer_names("x", None) == []  # a family without pair_scorers: a dual encoder
    r = evaluate(pairtest_family, str(data), scorer="flair-conditioned", output_dir=tmp_path / "out", ci=False,
                 progress=False, batch_size=4, text_batch_size=5)  # several batches of each
    assert r.scorer["name"] == "flair-conditioned" and r.settings["similarity"] == "flair-conditioned, fp32"
    enc = load_model(pairtest_family)
    scorer = _PooledScorer(enc)
    ds = load_dataset(str(data))
    pixels = torch.stack([enc.image_transform(ds.images.open(i)) for i in range(ds.n_images)])
    s = scorer.score(scorer.text_state(enc.tokenize(list(ds.captions)).tokens), scorer.image_state(pixels)).numpy()
    for direction, scores, (ptr, idx) in (("t2i", s, (np.arange(ds.n_captions + 1), ds.caption_image)),
                                          ("i2t", s.T, csr_from_assignment(ds.caption_image, ds.n_images))):
        ranks, _, _ = _brute_force_ranks(scores, ptr, idx)
        assert r.metrics[direction]["R@1"] == pytest.approx(100 * np.mean(ranks <= 1))
        assert r.metrics[direction]["MRR"] == pytest.approx(np.mean(1 / ranks))


def test_every_registered_scorer_names_its_class():
    """Each ``SCORERS`` entry resolves to the class that scores under that name (a checked declaration, not a
    label): its ``name`` is the registered name and it has the contract's members."""
    from hnbench.registry import SCORERS

    for name in SCORERS.names():
        cls = SCORERS.get(name)
        assert isinstance(cls, type) and cls.name == name, name
        assert all(callable(getattr(cls, m, None)) for m in ("image_state", "text_state", "score")), name
        assert isinstance(cls.description, str) and cls.description, name
