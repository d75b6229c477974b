"""Released fine-tuning checkpoints in eval: GOAL's and StructXLIP's ``.pth`` (HF ``CLIPModel`` keys, a longer text
table, ``model_state_dict`` / ``clip_model.`` wrappers) and a FineLIP run's state dict (OpenAI-CLIP keys, Long-CLIP's
two tables, the ``cross_net`` aggregation module). Each file is written here in the release's own layout from a real
tiny model, then loaded through ``load_model`` / ``hnbench eval``."""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path

import pytest
import torch
from conftest import assert_one_line_error, make_pairs, snapshot, write_jsonl

from hnbench.cli import main
from hnbench.errors import CheckpointError
from hnbench.models import load_model
from hnbench.models.base import state_dict_fingerprint
from hnbench.models.hf import feature_tensor

transformers = pytest.importorskip("transformers")

POSITIONS = 52  # the release's stretched text table (248 at paper scale); the tiny base has 40


def _released_hf_model(base: Path, seed: int = 1):
    """A tiny HF CLIPModel with the base's towers and a POSITIONS-row text table, as GOAL / StructXLIP train it."""
    from transformers import CLIPConfig, CLIPModel

    config = CLIPConfig.from_pretrained(base)
    config.text_config.max_position_embeddings = POSITIONS
    torch.manual_seed(seed)
    return CLIPModel(config).eval()


def _cpu_state_dict(model) -> dict[str, torch.Tensor]:
    return {k: v.cpu().clone() for k, v in model.state_dict().items()}  # what the releases torch.save


@pytest.fixture(scope="module")
def released(hf_clip_dir):
    return _released_hf_model(hf_clip_dir)


@pytest.mark.parametrize("layout", ["goal-plain", "goal-position-ids", "goal-bf16", "structxlip-model_state_dict",
                                    "structxlip-clip_model-prefix"])
def test_released_hf_layouts_load_with_their_positions(hf_clip_dir, released, tmp_path, layout):
    sd = _cpu_state_dict(released)
    path = tmp_path / "release.pth"
    if layout == "goal-bf16":  # Fabric's "bf16" may be true bf16 (UNVERIFIED): weights saved in bf16
        released = copy.deepcopy(released)
        with torch.no_grad():
            for p in released.parameters():
                p.copy_(p.bfloat16().float())
        sd = {k: v.bfloat16() if v.is_floating_point() else v for k, v in _cpu_state_dict(released).items()}
        torch.save(sd, path)
    elif layout == "goal-position-ids":  # transformers versions that persist the buffer save it
        sd["text_model.embeddings.position_ids"] = torch.arange(POSITIONS)[None]
        sd["vision_model.embeddings.position_ids"] = torch.arange(17)[None]
        torch.save(sd, path)
    elif layout == "structxlip-model_state_dict":
        torch.save({"model_state_dict": sd}, path)
    elif layout == "structxlip-clip_model-prefix":
        torch.save({f"clip_model.{k}": v for k, v in sd.items()}, path)
    else:
        torch.save(sd, path)
    enc = load_model(str(hf_clip_dir), str(path))
    assert enc.info.context_length == POSITIONS and enc.info.pretrained == str(path)
    assert enc.info.fingerprint == state_dict_fingerprint(released.state_dict())
    long_caption = "a red square beside a blue circle " * 8  # > 40 tokens: needs the release's longer table
    tok = enc.tokenize(["a small green triangle", long_caption])
    assert tok.tokens.shape[1] <= POSITIONS and tok.lengths[1] > 40
    feats = enc.encode_texts(tok.tokens)
    ids = enc.tokenizer([long_caption], truncation=True, max_length=POSITIONS, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        direct = torch.nn.functional.normalize(feature_tensor(released.get_text_features(input_ids=ids)), dim=-1)
        pixels = torch.randn(2, 3, 32, 32)
        direct_img = torch.nn.functional.normalize(
            feature_tensor(released.get_image_features(pixel_values=pixels)), dim=-1)
    assert torch.allclose(feats[1], direct[0], atol=1e-5)
    assert torch.allclose(enc.encode_images(pixels), direct_img, atol=1e-5)


def test_goal_checkpoint_scored_by_hnbench_eval(hf_clip_dir, released, tmp_path, capsys):
    path = tmp_path / "goal-docci.pth"
    torch.save(_cpu_state_dict(released), path)
    pairs = make_pairs(tmp_path, n=6)
    data = write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])
    out = tmp_path / "out"
    rc = main(["-q", "eval", "--model", str(hf_clip_dir), "--pretrained", str(path), "--context-length",
               str(POSITIONS), "--dataset", str(data), "--output", str(out), "--num-workers", "0", "--json"])
    assert rc == 0, capsys.readouterr().err
    result = json.loads(next(out.rglob("*.json")).read_text())
    assert result["model"]["pretrained"] == str(path) and result["model"]["context_length"] == POSITIONS
    assert result["model"]["fingerprint"] == state_dict_fingerprint(released.state_dict())
    assert result["metrics"]["t2i"]["R@10"] == 100.0 and 0 < result["metrics"]["i2t"]["MRR"] <= 1

    # the same path rewritten with other weights: the remembered fingerprint follows the file, not its name
    other = _released_hf_model(hf_clip_dir, seed=2)
    torch.save(_cpu_state_dict(other), path)
    out2 = tmp_path / "out2"
    assert main(["-q", "eval", "--model", str(hf_clip_dir), "--pretrained", str(path), "--dataset", str(data),
                 "--output", str(out2), "--num-workers", "0"]) == 0
    result2 = json.loads(next(out2.rglob("*.json")).read_text())
    assert result2["model"]["fingerprint"] == state_dict_fingerprint(other.state_dict())


def test_unexpected_keys_are_listed_and_refused(hf_clip_dir, released, tmp_path):
    sd = _cpu_state_dict(released)
    sd["segment_head.weight"] = torch.zeros(3, 3)
    path = tmp_path / "extra.pth"
    torch.save(sd, path)
    with pytest.raises(CheckpointError) as e:
        load_model(str(hf_clip_dir), str(path))
    assert "unexpected keys (1): segment_head.weight" in str(e.value)


def test_pickled_release_is_refused_in_one_line(hf_clip_dir, tmp_path, capsys):
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    path = tmp_path / "evil.pth"
    torch.save({"model_state_dict": {"x": torch.zeros(1)}, "args": Evil()}, path)
    out = tmp_path / "out"
    data = write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in make_pairs(tmp_path, n=4)])
    rc = main(["-q", "eval", "--model", str(hf_clip_dir), "--pretrained", str(path), "--dataset", str(data),
               "--output", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and "pwned" not in err
    assert_one_line_error(err, "refused to unpickle", str(path))
    assert not out.exists()


def _openai_layout_finelip(micro) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(FineLIP run's state dict, the towers' state dict it should load as): Long-CLIP's two tables and cross_net."""
    towers = {k: v.clone() for k, v in micro.model.state_dict().items()}
    sd = dict(towers)
    pe = towers["positional_embedding"]
    sd["positional_embedding"] = torch.cat([pe[:20], torch.randn_like(pe[20:])])  # rows 20+ come from _res
    sd["positional_embedding_res"] = torch.cat([torch.randn_like(pe[:20]), pe[20:]])
    g = torch.Generator().manual_seed(0)
    for tower in ("aggr_net", "cap_aggr_net"):  # TokenAggregation: LayerNorm, two Linears, a learned scale
        d, h, k = 32, 6, 39
        sd |= {f"cross_net.{tower}.norm.weight": torch.ones(d), f"cross_net.{tower}.norm.bias": torch.zeros(d),
               f"cross_net.{tower}.weight.0.weight": torch.randn(h, d, generator=g),
               f"cross_net.{tower}.weight.0.bias": torch.zeros(h),
               f"cross_net.{tower}.weight.2.weight": torch.randn(k, h, generator=g),
               f"cross_net.{tower}.weight.2.bias": torch.zeros(k), f"cross_net.{tower}.scale": torch.ones(1)}
    return sd, towers


def test_finelip_state_dict_loads_towers_and_says_it_drops_cross_net(micro_config, tmp_path, caplog):
    torch.manual_seed(0)
    micro = load_model("hnb-micro", model_config=str(micro_config))
    sd, towers = _openai_layout_finelip(micro)
    path = tmp_path / "finelip-B.pt"
    torch.save(sd, path)
    with caplog.at_level(logging.WARNING, logger="hnbench.models.checkpoint"):
        enc = load_model("hnb-micro", str(path), model_config=str(micro_config))
    warned = [r.getMessage() for r in caplog.records if "cross_net" in r.getMessage()]
    assert len(warned) == 1 and "ignoring 14 keys of cross_net" in warned[0]
    assert "cross_net.aggr_net.norm.weight" in warned[0] and "plain-cosine eval" in warned[0]
    assert enc.info.fingerprint == state_dict_fingerprint(towers) == micro.info.fingerprint
    tokens = micro.tokenize(["a red square", "two blue circles above a green triangle"]).tokens
    pixels = torch.randn(2, 3, 32, 32)
    assert torch.equal(enc.encode_texts(tokens), micro.encode_texts(tokens))
    assert torch.equal(enc.encode_images(pixels), micro.encode_images(pixels))

    data = write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in make_pairs(tmp_path, n=6)])
    out = tmp_path / "out"
    assert main(["-q", "eval", "--model", "hnb-micro", "--model-config", str(micro_config), "--pretrained",
                 str(path), "--dataset", str(data), "--output", str(out), "--num-workers", "0"]) == 0
    result = json.loads(next(out.rglob("*.json")).read_text())
    assert result["model"]["fingerprint"] == micro.info.fingerprint
    assert result["metrics"]["t2i"]["R@10"] == 100.0 and 0 < result["metrics"]["t2i"]["MRR"] <= 1


def test_finelip_state_dict_with_another_unknown_module_is_refused(micro_config, tmp_path):
    torch.manual_seed(0)
    micro = load_model("hnb-micro", model_config=str(micro_config))
    sd, _ = _openai_layout_finelip(micro)
    sd["criterion.margin"] = torch.tensor(0.2)
    path = tmp_path / "finelip-odd.pt"
    torch.save(sd, path)
    with pytest.raises(CheckpointError, match=r"unexpected keys \(1\): criterion.margin"):
        load_model("hnb-micro", str(path), model_config=str(micro_config))


def test_wrong_family_says_what_to_pass(hf_clip_dir, released, micro_config, tmp_path, capsys):
    hf_file = tmp_path / "goal.pth"
    torch.save(_cpu_state_dict(released), hf_file)
    with pytest.raises(CheckpointError) as e:  # an HF-layout release given to an open_clip architecture
        load_model("hnb-micro", str(hf_file), model_config=str(micro_config))
    assert "Hugging Face CLIPModel keys" in str(e.value) and "--model hf:" in str(e.value)
    assert f"--context-length {POSITIONS}" in str(e.value)

    torch.manual_seed(0)
    micro = load_model("hnb-micro", model_config=str(micro_config))
    oa_file = tmp_path / "finelip.pt"
    torch.save(_openai_layout_finelip(micro)[0], oa_file)
    out = tmp_path / "out"
    data = write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in make_pairs(tmp_path, n=4)])
    before = snapshot(tmp_path)
    rc = main(["-q", "eval", "--model", str(hf_clip_dir), "--pretrained", str(oa_file), "--dataset", str(data),
               "--output", str(out)])
    assert rc == 2 and snapshot(tmp_path) == before
    assert_one_line_error(capsys.readouterr().err, str(oa_file), "not an HF CLIPModel state dict",
                          "OpenAI-CLIP / open_clip keys", "--model ")


def test_layout_hint_names_the_openai_base_by_vision_shape():
    from hnbench.models.checkpoint import layout_hint

    l14 = {"vision_model.embeddings.patch_embedding.weight": torch.zeros(1024, 3, 14, 14),
           "text_model.embeddings.position_embedding.weight": torch.zeros(248, 1)}
    assert "--model hf:openai/clip-vit-large-patch14 --pretrained FILE --context-length 248" in layout_hint(l14)
    b16 = {"visual.conv1.weight": torch.zeros(768, 3, 16, 16), "positional_embedding": torch.zeros(248, 1)}
    assert "--model ViT-B-16-quickgelu --pretrained FILE --context-length 248" in layout_hint(b16)
    assert "neither" in layout_hint({"x": torch.zeros(1)})


def test_release_of_another_size_names_its_vision_tower(hf_clip_dir, released, tmp_path):
    import shutil

    base = tmp_path / "wider-base"
    shutil.copytree(hf_clip_dir, base)
    for f in base.glob("*.safetensors"):
        f.unlink()  # only the config, tokenizer and processor are read when weights are given
    config = json.loads((base / "config.json").read_text())
    config["vision_config"] = dict(config["vision_config"], hidden_size=48, patch_size=16)
    (base / "config.json").write_text(json.dumps(config))
    path = tmp_path / "goal-B.pth"
    torch.save(_cpu_state_dict(released), path)
    with pytest.raises(CheckpointError) as e:
        load_model(str(base), str(path))
    msg = str(e.value)
    assert "shape mismatch" in msg and "vision_model.embeddings.patch_embedding.weight (32, 3, 8, 8)" in msg
    assert "vision width 32, patch 8" in msg and f"--context-length {POSITIONS}" in msg
