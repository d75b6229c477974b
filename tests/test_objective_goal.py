"""GOAL through the objective contract (frameworks.md §2.7): closed form per term on a hand-sized batch, the
L_HN swap at γ = 0, 2 gloo processes = 1, real runs that log every term and a checkpoint eval scores, and the
bad inputs refused in one line before any model loads."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.multiprocessing as mp
import torch.nn.functional as F
from conftest import assert_one_line_error, make_pairs, write_jsonl
from test_train_distributed import _free_port, _train_worker

from hnbench.cli import main
from hnbench.data import load_dataset
from hnbench.models.towers import TowerHeads
from hnbench.train import trainer as trainer_module
from hnbench.train.config import TrainConfig, load_recipe
from hnbench.train.objectives.goal import build
from hnbench.train.step import MicroBatch, Objective, run_step

GOAL_TERMS = {"global", "segment", "patch", "text"}
GOAL = ("--objective", "goal")


def _unit(*rows: tuple[float, float]) -> torch.Tensor:
    return F.normalize(torch.tensor(rows, dtype=torch.float64), dim=-1)


def _nce(a: torch.Tensor, b: torch.Tensor, s: float) -> float:
    """Symmetric InfoNCE by hand: ½ (mean_i −log softmax_j(s a_i·b_j)[i] + the same on the transpose)."""
    logits = [[s * float(a[i] @ b[j]) for j in range(len(b))] for i in range(len(a))]

    def ce(rows: list[list[float]]) -> float:
        return sum(math.log(sum(math.exp(v) for v in r)) - r[i] for i, r in enumerate(rows)) / len(rows)

    return 0.5 * (ce(logits) + ce([list(c) for c in zip(*logits)]))


def test_goal_closed_form_per_term_on_a_hand_sized_batch():
    """B = 2, D = W = 2, identity heads, a 4-pixel input of 2-pixel patches (CLS + 2×2 patches)."""
    s = 2.0
    out = {"image": _unit((1, 0), (0, 1)), "text": _unit((1, 1), (0, 1)), "scale": torch.tensor(s, dtype=torch.float64),
           "crop": _unit((1, 0), (1, 1)), "sentence": _unit((0, 1), (1, 1))}
    # image states: CLS then patches (row-major); row 0's box (0, 0, 2, 2) of a 4×4 image is patch 1 only,
    # row 1's box (2, 0, 4, 4) covers patches 2 and 4
    out["image_states"] = torch.tensor([[[9, 9], [3, 0], [0, 5], [7, 7], [1, 1]],
                                        [[9, 9], [5, 5], [0, 2], [8, 8], [2, 0]]], dtype=torch.float64)
    # text states: row 0's span [1, 3) averages (1, 0) and (0, 1); row 1's span [2, 3) is (0, 4)
    out["text_states"] = torch.tensor([[[9, 9], [1, 0], [0, 1], [5, 5]],
                                       [[9, 9], [3, 3], [0, 4], [5, 5]]], dtype=torch.float64)
    side = {"boxes": [(0, 0, 2, 2), (2, 0, 4, 4)], "image_sizes": [(4, 4), (4, 4)], "spans": [(1, 3), (2, 3)]}
    heads = TowerHeads(lambda h: h, lambda h: h, lambda h: h, input_size=4, patch_size=2)
    obj = Objective(terms=build(TrainConfig(objective="goal", loss="infonce")))
    assert [(t.name, t.weight) for t in obj.terms] == [("global", 1.0), ("segment", 0.5), ("patch", 1.0), ("text", 1.0)]
    total = obj(out, mask=None, g_text=None, text_mask=None, tokens=torch.zeros(2, 4, dtype=torch.long),
                image_ids=[0, 1], side=side, heads=heads)
    got = obj.last_terms
    assert got["global"] == pytest.approx(_nce(out["image"], out["text"], s), abs=1e-12)
    assert got["segment"] == pytest.approx(_nce(out["crop"], out["sentence"], s), abs=1e-12)
    # patch: row 0 pooled (3, 0) vs crop (1, 0) → cos 1 → 0; row 1 pooled mean((0, 2), (2, 0)) = (1, 1) vs
    # crop (1, 1)/√2 → 0 as well; perturb row 1's crop to (1, 0): cos 1/√2
    assert got["patch"] == pytest.approx(0.0, abs=1e-12)
    # text: row 0 pooled (½, ½) vs sentence (0, 1) → cos 1/√2; row 1 pooled (0, 4) vs (1, 1)/√2 → 1/√2
    assert got["text"] == pytest.approx((2 ** -0.5 - 1) ** 2, abs=1e-12)
    want = got["global"] + 0.5 * got["segment"] + got["patch"] + got["text"]
    assert float(total) == pytest.approx(want, abs=1e-12)
    out["crop"] = _unit((1, 0), (1, 0))
    obj(out, mask=None, g_text=None, text_mask=None, tokens=torch.zeros(2, 4, dtype=torch.long), image_ids=[0, 1],
        side=side, heads=heads)
    assert obj.last_terms["patch"] == pytest.approx((2 ** -0.5 - 1) ** 2 / 2, abs=1e-12)


def test_goal_compat_uses_patch_16_and_shifts_the_span_one_token():
    from hnbench.train.objectives.base import TermInputs
    from hnbench.train.objectives.goal import patch_mask, text_span_mask
    from hnbench.train.terms.goal import GoalOptions

    out = {"image_states": torch.zeros(1, 1 + 16, 2), "text_states": torch.zeros(1, 8, 2)}
    x = TermInputs(out, torch.zeros(1, 8), [0], side={"boxes": [(0, 0, 16, 16)], "image_sizes": [(32, 32)],
                                                       "spans": [(2, 4)]},
                   heads=TowerHeads(lambda h: h, lambda h: h, lambda h: h, input_size=32, patch_size=8))
    exact, compat = GoalOptions(), GoalOptions(compat=True)
    assert patch_mask(x, exact)[0].nonzero().flatten().tolist() == [1, 2, 5, 6]  # the model's patch 8: 2×2 patches
    assert patch_mask(x, compat)[0].nonzero().flatten().tolist() == [1]  # hard-coded 16: one patch of a 2×2 grid
    assert text_span_mask(x, exact)[0].nonzero().flatten().tolist() == [2, 3]
    assert text_span_mask(x, compat)[0].nonzero().flatten().tolist() == [3, 4]


def _towers(micro_config):
    from hnbench.models import load_model
    from hnbench.models.towers import CLIPTowers

    torch.manual_seed(0)
    enc = load_model("hnb-micro", model_config=str(micro_config))
    return CLIPTowers(enc.model.train(), "open_clip"), enc


def _micro_batch(enc):
    caps = [f"a {c} square. it sits on grey ground." for c in ("red", "blue", "green", "cyan")]
    g = torch.Generator().manual_seed(3)
    pixels, crops = torch.randn(4, 3, 32, 32, generator=g), torch.randn(4, 3, 32, 32, generator=g)
    sentences = enc.tokenize([c.split(".")[0] + "." for c in caps]).tokens
    side = {"boxes": [(0, 0, 16, 16), (8, 8, 32, 32), (0, 16, 32, 32), (3, 3, 5, 30)],
            "image_sizes": [(32, 32)] * 4, "spans": [(1, 5), (1, 5), (1, 5), (1, 5)]}
    return MicroBatch(pixels, enc.tokenize(caps).tokens, [0, 1, 2, 3], caps, extra={"crop": crops, "sentence": sentences},
                      side=side)


def test_goal_one_forward_carries_crops_and_sentences(micro_config):
    towers, enc = _towers(micro_config)
    mb = _micro_batch(enc)
    towers.eval()
    with torch.no_grad():
        out = towers(mb.pixels, mb.tokens, "states", mb.extra)
        assert out["image"].shape == out["crop"].shape == (4, 32) and out["image_states"].shape == (4, 17, 32)
        assert out["text_states"].shape == (4, 32, 32) and out["sentence"].shape == (4, 32)
        # the same features as each through the towers alone (the concatenation is split back)
        assert torch.allclose(out["crop"], towers.encode_image(mb.extra["crop"]), atol=1e-5)
        assert torch.allclose(out["sentence"], towers.encode_text(mb.extra["sentence"]), atol=1e-5)
        assert torch.allclose(out["image"], towers.encode_image(mb.pixels), atol=1e-5)
        heads = towers.heads()
        assert (heads.input_size, heads.patch_size) == (32, 8)
        # the heads on the states' CLS / EOT rows give the pooled features back
        assert torch.allclose(F.normalize(heads.image(out["image_states"][:, 0]), dim=-1), out["image"], atol=1e-5)
        eot = out["text_states"][torch.arange(4), mb.tokens.argmax(dim=1)]
        assert torch.allclose(F.normalize(heads.text(eot), dim=-1), out["text"], atol=1e-5)


@pytest.mark.parametrize("segment_hn", [False, True])
def test_goal_hn_at_gamma_zero_equals_infonce_bit_for_bit(micro_config, segment_hn):
    towers, enc = _towers(micro_config)
    mb = _micro_batch(enc)
    results = []
    for loss in ("infonce", "hn"):
        obj = Objective(terms=build(TrainConfig(objective="goal", loss=loss, gamma=0.0,
                                                objective_options={"segment_hn": segment_hn})))
        towers.zero_grad(set_to_none=True)
        value = run_step(towers, towers, [mb], obj)
        grads = {n: p.grad.clone() for n, p in towers.named_parameters() if p.grad is not None}
        results.append((value, grads, obj.last_terms))
    (l0, g0, t0), (l1, g1, t1) = results
    assert set(t0) == GOAL_TERMS and t0 == t1 and l0 == l1
    assert g0.keys() == g1.keys() and all(torch.equal(g0[k], g1[k]) for k in g0)
    assert "model.visual.ln_post.weight" in g0 and "model.ln_final.weight" in g0  # the heads get gradients
    assert l0 == pytest.approx(t0["global"] + 0.5 * t0["segment"] + t0["patch"] + t0["text"], rel=1e-6)


# ----------------------------------------------------------------------------- bad inputs, before any model loads

def _data(tmp_path, n=8):
    pairs = make_pairs(tmp_path, n=n)
    return write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])


def _sidecar(tmp_path, data, **change):
    """A valid sidecar of the jsonl data (one segment per image: "a <colour> square" in a 24-pixel box)."""
    ds = load_dataset(str(data))
    images = []
    for image_id, text in zip(ds.image_ids, ds.captions):
        end = text.index(" of size")
        images.append({"id": image_id, "width": 48, "height": 48, "original_caption": text,
                       "segment": [{"caption": text[:end], "char_span": [0, end], "similarity_score": 1.0,
                                    "bbox_coordinates": {"x1": 0, "y1": 0, "x2": 24, "y2": 24}, "object": None}]})
    for key, value in change.items():
        images[0] = value(images[0]) if key == "first" else images[0]
    doc = {"format": "hnbench-segments", "version": 1, "writer": "grid-clip", "parameters": {},
           "dataset": {}, "images": images}
    path = tmp_path / "segments.json"
    path.write_text(json.dumps(doc))
    return path


def _refused(tmp_path, monkeypatch, capsys, args, *words):
    def no_model(*a, **k):
        raise AssertionError("a model was loaded before the side inputs were checked")

    monkeypatch.setattr(trainer_module, "load_model", no_model)
    run = tmp_path / "run"
    rc = main(["train", "--batch-size", "4", "--output", str(run), *args])
    assert rc == 2 and not run.exists()
    assert_one_line_error(capsys.readouterr().err, *words)


def test_goal_without_a_sidecar_says_how_to_make_one(tmp_path, monkeypatch, capsys):
    data = _data(tmp_path)
    _refused(tmp_path, monkeypatch, capsys, [*GOAL, "--dataset", str(data)], "segment sidecar", "hnbench segments")


def _image(key, value):
    def change(item):
        item[key] = value(item) if callable(value) else value
        return item
    return change


@pytest.mark.parametrize("change,words", [
    (_image("id", "not-an-image"), ("not-an-image", "not in the data")),
    (_image("segment", lambda it: [{**it["segment"][0], "bbox_coordinates": {"x1": 0, "y1": 0, "x2": 60, "y2": 24}}]),
     ("box", "outside", "48x48")),
    (_image("segment", lambda it: [{**it["segment"][0], "char_span": [0, 999]}]), ("span", "outside", "caption")),
])
def test_goal_refuses_a_bad_sidecar_in_one_line(tmp_path, monkeypatch, capsys, change, words):
    data = _data(tmp_path)
    path = _sidecar(tmp_path, data, first=change)
    _refused(tmp_path, monkeypatch, capsys, [*GOAL, "--dataset", str(data), "--segments", str(path)], *words)


def test_goal_refuses_an_image_without_a_segment_and_cached_accumulation(tmp_path, monkeypatch, capsys):
    data = _data(tmp_path)
    path = _sidecar(tmp_path, data, first=_image("segment", []))
    _refused(tmp_path, monkeypatch, capsys, [*GOAL, "--dataset", str(data), "--segments", str(path)],
             "every image", "hnbench segments")
    path = _sidecar(tmp_path, data)
    _refused(tmp_path, monkeypatch, capsys, [*GOAL, "--dataset", str(data), "--segments", str(path), "--accum-steps", "2",
                                             "--accum-mode", "cached"], "side inputs", "--accum-mode loss")


# ----------------------------------------------------------------------------- real runs

def _config(micro_config, tmp_path, data, sidecar, **kw):
    return {"model": "hnb-micro", "model_config": str(micro_config), "dataset": str(data), "segments": str(sidecar),
            "objective": "goal", "loss": "hn", "epochs": 1, "batch_size": 4, "lr": 1e-4, "warmup_steps": 1,
            "num_workers": 0, "log_every": 1, "seed": 3, **kw}


def test_goal_trains_logs_every_term_and_records_its_side_inputs(micro_config, tmp_path):
    data = _data(tmp_path)
    sidecar = _sidecar(tmp_path, data)
    from hnbench.train.trainer import train

    train(TrainConfig.from_dict({**_config(micro_config, tmp_path, data, sidecar), "output": str(tmp_path / "run")}),
          progress=False)
    log = [json.loads(x) for x in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert len(log) == 2 and all(set(r["terms"]) == GOAL_TERMS for r in log)
    for r in log:
        t = r["terms"]
        assert r["loss"] == pytest.approx(t["global"] + 0.5 * t["segment"] + t["patch"] + t["text"], rel=1e-5)
        assert all(v > 0 for v in t.values())
    meta = json.loads((tmp_path / "run" / "train_config.json").read_text())
    seg = meta["side_inputs"]["segments"]
    assert seg["path"] == str(sidecar) and seg["writer"] == "grid-clip" and seg["choice"] == "best"
    options = meta["config"]["objective_options"]
    assert options["compat"] is False and options["segment_weight"] == 0.5


@pytest.mark.slow
def test_goal_two_gloo_processes_equal_one_process(micro_config, tmp_path):
    from safetensors.torch import load_file

    from hnbench.train.trainer import train

    data = _data(tmp_path, n=16)
    sidecar = _sidecar(tmp_path, data)
    base = _config(micro_config, tmp_path, data, sidecar, segment_choice="random", accum_steps=2, goal_segment_hn=True)
    one = train(TrainConfig.from_dict({**base, "output": str(tmp_path / "one")}), progress=False)
    mp.spawn(_train_worker, args=(2, _free_port(), {**base, "output": str(tmp_path / "two")}), nprocs=2, join=True)
    log1 = [json.loads(x) for x in (tmp_path / "one" / "log.jsonl").read_text().splitlines()]
    log2 = [json.loads(x) for x in (tmp_path / "two" / "log.jsonl").read_text().splitlines()]
    assert len(log1) == len(log2) == 2
    for a, b in zip(log1, log2):
        assert a["loss"] == pytest.approx(b["loss"], abs=1e-5)
        assert set(a["terms"]) == set(b["terms"]) == GOAL_TERMS
        assert all(a["terms"][k] == pytest.approx(b["terms"][k], abs=1e-5) for k in GOAL_TERMS)
    w1, w2 = load_file(str(one)), load_file(str(tmp_path / "two" / "checkpoint.safetensors"))
    assert w1.keys() == w2.keys()
    diff = torch.cat([(w1[k] - w2[k]).abs().reshape(-1) for k in w1])
    # as the clip objective's test: Adam turns float-noise gradients into ±lr steps on a few elements
    assert float(diff.max()) <= 2 * base["lr"] * 2 + 1e-6
    assert float((diff > 5e-6).float().mean()) < 2e-3


def test_goal_recipes_record_the_published_defaults():
    tiny = TrainConfig.from_dict(load_recipe("tiny-synthdense-goal"))
    assert tiny.objective == "goal" and tiny.model == "hnbench-tiny" and tiny.dataset == "synthdense"
    big = TrainConfig.from_dict(load_recipe("longclip-L-goal-hn"))  # frameworks.md §2.4
    assert (big.objective, big.loss, big.batch_size, big.epochs, big.lr, big.weight_decay, big.warmup_steps) == \
        ("goal", "hn", 16, 10, 5e-6, 0.05, 0)
    assert (big.stretch_context, big.position_table, big.segment_choice, big.seed) == (248, "trainable", "best", 1337)
    o = big.objective_options
    assert (o.global_weight, o.segment_weight, o.patch_weight, o.text_weight) == (1.0, 0.5, 1.0, 1.0)
    fl = TrainConfig.from_dict(load_recipe("longclip-L-finelip-hn"))  # frameworks.md §1.4
    assert (fl.objective, fl.batch_size, fl.accum_steps, fl.epochs, fl.lr, fl.objective_options.lr, fl.weight_decay) == \
        ("finelip", 128, 4, 6, 1e-6, 2e-4, 0.01)
    assert (fl.position_table, fl.stretch_context, fl.seed, fl.amp, fl.objective_options.margin) == \
        ("frozen-20", 248, 71, False, 0.2)


@pytest.mark.slow
def test_tiny_goal_recipe_trains_logs_terms_and_eval_scores_it(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "--recipe", "tiny-synthdense-goal", "--loss", "hn", "--epochs", "1",
                 "--output", str(run)]) == 0
    log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    assert log and all(set(r["terms"]) == GOAL_TERMS for r in log)
    meta = json.loads((run / "train_config.json").read_text())
    assert meta["side_inputs"]["segments"]["writer"] == "synthdense"
    capsys.readouterr()
    assert main(["eval", "--model", "hnbench-tiny", "--pretrained", str(run / "checkpoint.safetensors"),
                 "--dataset", "synthdense", "--output", str(tmp_path / "eval")]) == 0
    assert "R@1" in capsys.readouterr().out


@pytest.mark.parametrize("table", ["frozen-20", "trainable"])
def test_frozen_20_position_table_keeps_its_first_20_rows_and_trainable_trains_every_row(micro_config, tmp_path, table):
    """Long-CLIP's frozen-20 mode keeps the first 20 rows of the text position table as loaded; GOAL's
    trainable mode trains every row."""
    from safetensors.torch import load_file

    from hnbench.models import load_model
    from hnbench.train.trainer import seed_everything, train

    long = " with many more plain words that fill the text context of the micro model right up to its end"
    pairs = make_pairs(tmp_path, n=8)
    data = write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c + long} for p, c in pairs])
    cfg = {"model": "hnb-micro", "model_config": str(micro_config), "dataset": str(data), "loss": "infonce",
           "epochs": 1, "batch_size": 4, "lr": 1e-2, "warmup_steps": 1, "num_workers": 0, "seed": 3,
           "position_table": table, "output": str(tmp_path / "run")}
    seed_everything(3)  # the trainer's initialisation, for the rows as loaded
    start = load_model("hnb-micro", model_config=str(micro_config), init_seed=None).model.positional_embedding.detach()
    after = load_file(str(train(TrainConfig.from_dict(cfg), progress=False)))["positional_embedding"]
    moved = [not torch.equal(after[r], start[r]) for r in range(start.shape[0])]  # 32 positions, all used
    assert moved == ([False] * 20 + [True] * 12 if table == "frozen-20" else [True] * 32)


# ------------------------------------------------------------------------------ docs: "Adding an objective"

def _readme_section(start: str, end: str) -> str:
    from pathlib import Path

    text = "".join((Path(__file__).resolve().parents[1] / "docs" / page).read_text()
                   for page in ("guides/objectives.md", "contributing/objective.md"))
    return text[text.index(start):text.index(end, text.index(start))]


def test_the_objectives_guide_lists_the_objectives_and_its_token_term_is_the_code():
    import inspect
    import re

    from hnbench.registry import OBJECTIVES
    from hnbench.train.objectives import clip

    listed = re.search(r"--objective ([a-z|]+)`", _readme_section("# Objectives", "**FineLIP**")).group(1)
    assert listed.split("|") == OBJECTIVES.names()
    block = _readme_section("**Adding an objective**", "## A complete example")
    snippet = block[block.index("```python") + len("```python"):block.index("```", block.index("```python") + 3)]
    source = inspect.getsource(clip.token_term)

    def lines(text: str) -> list[str]:  # code lines, comments and docstrings left out
        return [ln.split("  #")[0].rstrip() for ln in text.splitlines()
                if ln.strip() and not ln.strip().startswith(('"""', "#", "λ"))]

    shown = lines(snippet[:snippet.index("def build")])
    assert shown == lines(source), "the guide's token-level term is not the code of objectives/clip.py"


def test_each_objective_is_one_module_a_registry_line_and_a_recipe():
    """The README's claim, held by every framework there is: its module in hnbench/train/objectives/ with a
    ``build``, one line in registry.py naming it, and a built-in recipe that selects it."""
    import importlib
    from pathlib import Path

    from hnbench.registry import OBJECTIVES, RECIPES

    root = Path(__file__).resolve().parents[1] / "hnbench"
    registry = (root / "registry.py").read_text()
    assert {"clip", "finelip", "goal", "structxlip"} <= set(OBJECTIVES.names())
    for name in OBJECTIVES.names():
        module = f"hnbench.train.objectives.{name}"
        assert registry.count(f'OBJECTIVES.register("{name}", "{module}:build"') == 1
        assert callable(importlib.import_module(module).build)
        assert (root / "train" / "objectives" / f"{name}.py").is_file()
        assert any(load_recipe(r).get("objective", "clip") == name for r in RECIPES.names()), name
