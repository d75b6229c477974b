"""open_clip's text batches trimmed to their longest caption (equal to the padded forward), and each model's
text budget (the share of captions its own tokenizer and context cut) recorded and shown beside R@K."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import make_pairs, write_jsonl
from test_models_hf_auto import siglip_dir  # noqa: F401  (the tiny SigLIP fixture)

from hnbench.data import load_dataset
from hnbench.evaluation.encode import encode_texts
from hnbench.models import load_model
from hnbench.models.family import family_of
from hnbench.models.openclip import trimmed_text_tower

# Trimmed vs padded forward, fp32, L2-normalised embeddings: measured max |diff| 3.0e-7 over the models below
# (float rounding of matmuls of another shape); the stated tolerance, also in the README.
ATOL = 1e-5

TEXT = {"context_length": 32, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 2}
VISION = {"image_size": 32, "layers": 1, "width": 32, "head_width": 16, "patch_size": 8}


def _config(tmp_path: Path, name: str, custom_text: bool = False, **text: object) -> str:
    cfg = {"embed_dim": 32, "vision_cfg": VISION, "text_cfg": {**TEXT, **text},
           **({"custom_text": True} if custom_text else {})}
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(cfg))
    return str(path)


@pytest.fixture(scope="module")
def captions() -> list[str]:
    """synthdense captions (148–226 tokens) and short ones (a few tokens), in no length order."""
    long = load_dataset("synthdense", protocol="test").captions[:40]
    short = [f"{n} {colour} {shape}s{' beside a white table' * (n % 3)}." for n in range(1, 9)
             for colour in ("red", "cyan") for shape in ("cube", "cone", "disc")][:40]
    return [c for pair in zip(long, short) for c in pair]


def _load(kind: str, tmp_path: Path):
    if kind == "hnbench-tiny":  # the bundled 256-context model
        return load_model("hnbench-tiny", "synthdense")
    if kind == "long-clip-248":  # a 77-position tiny stretched the Long-CLIP way to 248
        enc = load_model("hnb-trim77", model_config=_config(tmp_path, "hnb-trim77", context_length=77))
        return family_of("hnb-trim77").stretch(enc, 248)
    if kind == "clip-32":  # a random-init open_clip CLIP with its causal attn_mask, context 32 (PE-Core's)
        return load_model("hnb-trim32", model_config=_config(tmp_path, "hnb-trim32"))
    if kind == "custom-text-32":  # CustomTextCLIP: the same causal TextTransformer as model.text
        return load_model("hnb-trimct", model_config=_config(tmp_path, "hnb-trimct", custom_text=True))
    if kind == "pad-id":  # pad_id enters only no_causal_mask's pad mask: still causal, argmax-pooled
        return load_model("hnb-trimpad", model_config=_config(tmp_path, "hnb-trimpad", pad_id=1))
    if kind == "eos-pool":  # pooled at the first end token (open_clip's "eos" pooling)
        return load_model("hnb-trimeos", model_config=_config(tmp_path, "hnb-trimeos", pool_type="eos",
                                                               eos_id=49407))
    if kind == "no-causal-mask":  # bi-directional: pads reach every position
        return load_model("hnb-bidir", model_config=_config(tmp_path, "hnb-bidir", no_causal_mask=True))
    if kind == "last-token":  # SigLIP's pooling: the last position, which moves when the batch is cut
        return load_model("hnb-last", model_config=_config(tmp_path, "hnb-last", pool_type="last"))
    raise AssertionError(kind)


def _input_lengths(encoder) -> tuple[list[int], torch.utils.hooks.RemovableHandle]:
    """The sequence length each text forward's transformer receives (a hook on the real module)."""
    seen: list[int] = []
    model = encoder.model
    transformer = model.text.transformer if hasattr(model, "text") else model.transformer
    handle = transformer.register_forward_pre_hook(lambda _m, args: seen.append(int(args[0].shape[1])))
    return seen, handle


def _batches(encoder, captions: list[str], size: int = 16) -> list[torch.Tensor]:
    ordered = sorted(captions, key=len, reverse=True)  # as encode_texts groups them
    return [encoder.tokenize(ordered[s:s + size]).tokens for s in range(0, len(ordered), size)]


@pytest.mark.parametrize("kind", ["hnbench-tiny", "long-clip-248", "clip-32", "custom-text-32", "pad-id", "eos-pool"])
def test_trimmed_text_batches_equal_the_padded_forward(kind, captions, tmp_path):
    encoder = _load(kind, tmp_path)
    assert trimmed_text_tower(encoder.model) is not None
    seen, handle = _input_lengths(encoder)
    worst, cut = 0.0, []
    try:
        for tokens in _batches(encoder, captions):
            seen.clear()
            trimmed = encoder.encode_texts(tokens)
            longest = int(tokens.argmax(dim=-1).max()) + 1  # the end token (the largest id) of the longest caption
            assert seen == [longest]  # the tower ran on the batch cut to its longest caption
            cut.append(longest)
            with torch.inference_mode():
                padded = encoder.model.encode_text(tokens, normalize=True).float()
            assert seen[-1] == tokens.shape[1] == encoder.info.context_length
            worst = max(worst, float((trimmed - padded).abs().max()))
    finally:
        handle.remove()
    assert worst <= ATOL, worst
    assert min(cut) < encoder.info.context_length  # the short captions' batch ran cut
    print(f"{kind}: max |trimmed - padded| = {worst:.2e}")


@pytest.mark.parametrize("kind", ["no-causal-mask", "last-token"])
def test_non_causal_or_last_token_towers_run_padded(kind, captions, tmp_path):
    """Towers where the padding reaches the pooled position are never trimmed: the padded forward, bit for bit."""
    encoder = _load(kind, tmp_path)
    assert trimmed_text_tower(encoder.model) is None
    seen, handle = _input_lengths(encoder)
    try:
        tokens = _batches(encoder, captions)[-1]  # the shortest captions: trimming would cut the most
        seen.clear()
        ours = encoder.encode_texts(tokens)
        with torch.inference_mode():
            padded = encoder.model.encode_text(tokens, normalize=True).float()
    finally:
        handle.remove()
    assert seen[0] == encoder.info.context_length
    assert torch.equal(ours, padded)


def test_families_declare_whether_their_text_batches_are_trimmed():
    """An adapter attribute, not a name branch: open_clip's causal towers yes; TULIP (RoPE), LoTLIP (BERT with corner
    tokens), transformers and remote-code models no."""
    assert family_of("ViT-B-32").trims_text_batches is True
    for name in ("tulip:ViT-L-14", "lotlip:x", "hf:x", "remote:x"):
        assert family_of(name).trims_text_batches is False, name


def test_encode_texts_trims_sorted_batches_and_keeps_order(captions, tmp_path):
    """Through encode_texts (cached, cold then warm): captions grouped longest first, each batch cut to its longest,
    vectors back in the callers' order and equal to the padded forward; the warm run reads the same entries."""
    encoder = _load("hnbench-tiny", tmp_path)
    seen, handle = _input_lengths(encoder)
    try:
        cold = encode_texts(encoder, captions, batch_size=16, progress=False, cache=True, num_workers=0)
    finally:
        handle.remove()
    assert len(seen) == -(-len(captions) // 16) and seen == sorted(seen, reverse=True)
    assert seen[0] < encoder.info.context_length and seen[-1] < 30  # the short captions ran in a short batch
    tokens = encoder.tokenize(captions).tokens
    with torch.inference_mode():
        padded = encoder.model.encode_text(tokens, normalize=True).float().numpy()
    assert np.abs(cold.vectors - padded).max() <= ATOL
    warm = encode_texts(encoder, captions, batch_size=16, progress=False, cache=True, num_workers=0)
    assert warm.n_cached == len(captions) and np.array_equal(warm.vectors, cold.vectors)


# --- the text budget: recorded with the model's own tokenizer and context, shown beside R@K -------------------------
def _table_cells(board: str, header: str) -> dict[str, str]:
    """model label → its cell in column ``header`` of the board's (first) Markdown table."""
    lines = [ln for ln in board.splitlines() if ln.startswith("|")]
    heads = [h.strip() for h in lines[0].strip("|").split("|")]
    col, name = heads.index(header), heads.index("model")
    rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines[2:]]
    return {r[name]: r[col] for r in rows if len(r) == len(heads)}


def test_text_budget_recorded_and_shown_beside_recall(tmp_path):
    """A 32-token context (PE-Core's) cuts every synthdense caption, the bundled 256-token model none; the share is in
    the result, the eval table's footer and the leaderboard (Markdown, CSV, HTML); an older file without a ``tokens``
    block shows a blank cell, not 0%."""
    from hnbench import evaluate
    from hnbench.results.leaderboard import leaderboard
    from hnbench.results.record import read_result

    out = tmp_path / "results"
    short = evaluate("hnb-budget32", "synthdense", model_config=_config(tmp_path, "hnb-budget32"), protocol="test",
                     limit=40, output_dir=out, progress=False, num_workers=0)
    tiny = evaluate("hnbench-tiny", "synthdense", pretrained="synthdense", protocol="test", limit=40, output_dir=out,
                    progress=False, num_workers=0)
    assert (short.tokens["context_length"], short.tokens["n_texts"], short.tokens["n_truncated"]) == (32, 40, 40)
    assert short.tokens["share_truncated"] == 1.0 and tiny.tokens["n_truncated"] == 0
    assert "captions over the model's 32-token context: 40 of 40 (100%) truncated" in short.table()
    assert "captions over the model's 256-token context: 0 of 40 (0%) truncated" in tiny.table()
    # a file written before the block existed: the same record with another label, no tokens
    old = json.loads(Path(tiny.path).read_text())
    old.pop("tokens")
    old["model"]["arch"] = "hnbench-tiny-old"
    (out / "old.json").write_text(json.dumps(old))
    assert read_result(out / "old.json").tokens == {}

    cells = _table_cells(leaderboard([out]), "truncated")
    by_arch = {next(k for k in cells if k.startswith(a)): a for a in ("hnb-budget32", "hnbench-tiny (", "hnbench-tiny-old")}
    assert {by_arch[k]: v for k, v in cells.items()} == {"hnb-budget32": "100%", "hnbench-tiny (": "0%",
                                                          "hnbench-tiny-old": ""}
    board = pd.read_csv(io.StringIO(leaderboard([out], fmt="csv")), keep_default_na=False)
    assert dict(zip(board["arch"], board["truncated %"].astype(str))) == {"hnb-budget32": "100.0", "hnbench-tiny": "0.0",
                                                                          "hnbench-tiny-old": ""}
    html = leaderboard([out], fmt="html")
    assert "<th>truncated</th>" in html and "<td>100%</td>" in html and "<td>0%</td>" in html


def _manifest(tmp_path: Path, captions: list[str]) -> str:
    pairs = make_pairs(tmp_path / "data", n=len(captions))
    return str(write_jsonl(tmp_path / "data" / "m.jsonl", [{"image": p, "caption": c} for (p, _), c in zip(pairs, captions)]))


@pytest.mark.slow
def test_each_family_records_its_own_text_budget(siglip_dir, tmp_path):  # noqa: F811  (the fixture)
    """The tokens block counts with the family's own tokenizer and context: SigLIP through transformers (64, its
    max-length policy), TULIP (its RoPE tower at 248, CLIP's BPE) — one caption over each."""
    from test_models_hf_auto import CAPTIONS as SIGLIP_CAPTIONS
    from test_models_tulip import _release_state_dict, _save_release, _tiny_config

    from hnbench import evaluate

    siglip = evaluate(str(siglip_dir), _manifest(tmp_path / "s", SIGLIP_CAPTIONS), progress=False, num_workers=0,
                      ci=False)
    assert (siglip.tokens["context_length"], siglip.tokens["n_truncated"], siglip.tokens["n_texts"]) == (64, 1, 4)
    assert "captions over the model's 64-token context: 1 of 4 (25%) truncated" in siglip.table()
    cfg = _tiny_config(tmp_path)
    arch, sd = _release_state_dict(cfg)
    captions = ["a red square on a dark ground", "two blue circles " * 90, "green"]
    tulip = evaluate(f"tulip:{arch}", _manifest(tmp_path / "t", captions), pretrained=str(_save_release(tmp_path / "t.pt", sd)),
                     model_config=str(cfg), progress=False, num_workers=0, ci=False)
    assert (tulip.tokens["context_length"], tulip.tokens["n_truncated"], tulip.tokens["max"]) == (248, 1, 272)


def test_the_scoring_guide_states_the_budget_line_and_the_tolerance_tested():
    """The scoring guide's footer example is what a result prints, and its tolerance is the one these tests assert."""
    import re

    from hnbench.results.record import EvalResult

    readme = (Path(__file__).resolve().parents[1] / "docs" / "guides" / "scoring.md").read_text()
    line = "captions over the model's 77-token context: 412 of 5,000 (8.2%) truncated"
    assert f"`{line}`" in readme
    result = EvalResult(model={"arch": "m"}, dataset={"name": "d"}, metrics={"t2i": {}, "i2t": {}},
                        tokens={"context_length": 77, "n_texts": 5000, "n_truncated": 412, "share_truncated": 412 / 5000})
    assert result.text_budget() == line and result.table().endswith(line)
    tested = re.search(r"`tests/test_text_budget.py` asserts (\S+)\)", readme)
    measured = re.search(r"at most (\S+) measured", readme)
    assert tested and float(tested.group(1)) == ATOL and measured and float(measured.group(1)) < ATOL
    assert "(`ModelFamily.trims_text_batches`)" in readme and "`truncated %`" in readme


def test_zero_shot_class_prompts_are_not_counted_as_captions(tmp_path):
    """Zero-shot's tokens block counts its class prompts: the footer names them, and its leaderboard section has no
    caption-budget column (a retrieval section beside it keeps one)."""
    from hnbench.results.leaderboard import leaderboard
    from hnbench.results.record import EvalResult, write_result

    tokens = {"context_length": 77, "n_texts": 8, "n_truncated": 2, "share_truncated": 0.25}
    zeroshot = EvalResult(model={"arch": "m", "pretrained": None, "fingerprint": "f", "context_length": 77},
                          dataset={"name": "d", "protocol": None, "fingerprint": "x", "n_images": 4}, task="zeroshot",
                          metrics={"classification": {"top-1": 50.0, "top-5": 100.0, "n_queries": 4}}, tokens=tokens)
    assert zeroshot.table().endswith("class prompts over the model's 77-token context: 2 of 8 (25%) truncated")
    write_result(zeroshot, tmp_path / "zs")
    board = leaderboard([tmp_path / "zs"])
    assert "top-1" in board and "truncated" not in board.split("Zero-shot")[-1] and "25%" not in board
    assert "truncated %" not in leaderboard([tmp_path / "zs"], fmt="csv").splitlines()[0]
