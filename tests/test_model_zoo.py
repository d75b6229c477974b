"""The model zoo (``--model NAME``, ``hnbench models``), training-only keys per family, and checkpoints of a
known family refused when given to another one's loader.

Weights "on this machine" are real files in a temporary Hugging Face cache laid out as huggingface_hub lays it out
(``models--ORG--NAME/refs/main`` + ``snapshots/COMMIT/FILE``); the network is never asked (conftest sets
``HF_HUB_OFFLINE``)."""

from __future__ import annotations

import json
import logging
import re
import shutil
from pathlib import Path

import pytest
import torch
from conftest import assert_one_line_error, make_pairs, snapshot, write_jsonl

from hnbench.cli import main
from hnbench.models import load_model, zoo
from hnbench.registry import MODEL_ZOO, MODELS, model_family
from hnbench.results.reported import load_published

ROOT = Path(__file__).resolve().parents[1]
TINY_WEIGHTS = ROOT / "hnbench" / "assets" / "hnbench-tiny-synthdense.safetensors"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
# the releases the zoo must hold, by the names they are registered under
ASKED = ("longclip-b16", "longclip-l14", "himo-clip-l14", "siglip2-b16", "siglip2-b16-hf", "metaclip2-h14",
         "pe-core-l14", "tulip-l14", "lotlip-b16", "goal-b16-docci", "goal-b16-dci", "goal-l14-docci", "goal-l14-dci",
         "structxlip-b16-docci", "fg-clip2-base", "jina-clip-v2", "dreamlip-b16", "dci_pick1", "dci_pick1_nl0")
TINY = zoo.ZooEntry("tiny-zoo-test", "open_clip", "hnbench-tiny",
                    zoo.Weights("hub-file", "hnbench-test/tiny", "tiny.safetensors"), 77, "CLIP BPE",
                    "hnbench-tiny trained on synthdense, as a hub release (this test's)",
                    published=(("longclip-model-zoo", "LongCLIP-B/16"),))


def _hub_cache(root: Path, repo: str, filename: str, source: Path) -> Path:
    """``source`` as huggingface_hub caches ``repo``'s ``filename`` at ``main``."""
    base = root / f"models--{repo.replace('/', '--')}"
    (base / "refs").mkdir(parents=True)
    (base / "refs" / "main").write_text(COMMIT)
    target = base / "snapshots" / COMMIT / filename
    target.parent.mkdir(parents=True)
    shutil.copyfile(source, target)
    return target


@pytest.fixture
def hub(tmp_path, monkeypatch) -> Path:
    """An empty Hugging Face cache of this test's own (``HF_HUB_CACHE``)."""
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))  # read once at import: the env alone is too late
    return cache


@pytest.fixture
def tiny_entry(monkeypatch) -> zoo.ZooEntry:
    """:data:`TINY` registered in the zoo for this test only."""
    monkeypatch.setitem(MODEL_ZOO._targets, TINY.name, TINY)
    monkeypatch.setitem(MODEL_ZOO._spelling, TINY.name, TINY.name)
    return TINY


# --- the registered entries ---------------------------------------------------------------------------
def test_zoo_registers_every_asked_release_once():
    assert set(ASKED) <= set(MODEL_ZOO.names())
    declared = {v.name for v in vars(zoo).values() if isinstance(v, zoo.ZooEntry)}
    assert declared == set(MODEL_ZOO.names())  # every entry declared in zoo.py is listed, and only those
    for name in MODEL_ZOO.names():
        entry = MODEL_ZOO.get(name)
        assert entry.name == name and entry.family in MODELS and entry.description and entry.text_policy
        assert model_family(entry.model) == entry.family  # its --model is its family's
        assert entry.context_length > 0
    text = (ROOT / "hnbench" / "registry.py").read_text()
    assert all(text.count(f'("{name}", ') == 1 for name in ASKED)


def test_zoo_names_collide_with_no_architecture_or_prefix():
    import open_clip

    from hnbench.models.openclip import register_builtin_configs

    register_builtin_configs()
    archs = {a.lower() for a in open_clip.list_models()}
    prefixes = [p for name in MODELS.names() for p in MODELS.prefixes(name)]
    assert prefixes and "hf:" in prefixes
    for name in MODEL_ZOO.names():
        assert ":" not in name and "/" not in name, name
        assert name.lower() not in archs and name.lower().replace("_", "-") not in archs, name
        assert not any(name.lower().startswith(p) for p in prefixes), name
        assert name.lower() not in {n.lower() for n in MODELS.names()}, name


def test_zoo_entries_declare_valid_weights_sources_and_published_keys():
    rows = load_published()
    published = set(zip(rows["source"], rows["method"], strict=True)) | set(zip(
        rows["source"], rows["method"], rows["backbone"], strict=True))
    for name in MODEL_ZOO.names():
        entry = MODEL_ZOO.get(name)
        w = entry.weights
        assert w.kind in ("hub-file", "hub-model", "open_clip-tag", "url", "manual")
        assert set(entry.published) <= published, (name, set(entry.published) - published)
        if w.kind == "hub-file":
            assert w.repo and w.filename
        if w.kind == "url":
            assert w.url and re.fullmatch(r"[0-9a-f]{64}", str(w.sha256)) and w.folder
        if w.kind == "manual":
            assert str(w.page).startswith("https://")
        if w.kind == "open_clip-tag":
            import open_clip

            assert open_clip.get_pretrained_cfg(entry.model, str(w.tag)), name
    # DCI's sha256 as facebookresearch/DCI@8326c97 download.py checks them
    assert MODEL_ZOO.get("dci_pick1").weights.sha256 == \
        "225b9e1c88a00a2dd62cd5b0e23d4133efbbffe8d28b6de796ba894db1a2aa6a"
    assert MODEL_ZOO.get("dci_pick1_nl0").weights.sha256 == \
        "2943daaba2489492c274284631223e02933cc9436db201c23abe5939ed01d446"
    assert ("hn-clip-2026-table1", "Long-CLIP (released)") in MODEL_ZOO.get("longclip-l14").published
    assert all(MODEL_ZOO.get(n).published for n in ("longclip-b16", "himo-clip-l14", "tulip-l14", "lotlip-b16",
                                                    "goal-l14-docci"))  # the rows that exist are linked
    assert MODEL_ZOO.get("jina-clip-v2").trust_remote_code and MODEL_ZOO.get("pe-core-l14").context_length == 32
    # what suite.md §2 marks unverified is marked so in the entry
    assert all(MODEL_ZOO.get(n).unverified for n in ("himo-clip-l14", "tulip-l14", "dreamlip-b16", "dci_pick1",
                                                     "goal-l14-dci", "lotlip-b16", "fg-clip2-base"))


# --- --model NAME -------------------------------------------------------------------------------------
def test_eval_zoo_name_loads_its_weights_and_records_the_name(tmp_path, hub, tiny_entry):
    _hub_cache(hub, "hnbench-test/tiny", "tiny.safetensors", TINY_WEIGHTS)
    out = tmp_path / "out"
    assert main(["-q", "eval", "--model", "tiny-zoo-test", "--dataset", "synthdense", "--limit", "8",
                 "--output", str(out), "--num-workers", "0"]) == 0
    result = json.loads(next(out.rglob("*.json")).read_text())
    plain = load_model("hnbench-tiny", "synthdense")
    assert result["model"]["arch"] == "hnbench-tiny"  # the resolved spec
    assert result["model"]["fingerprint"] == plain.info.fingerprint  # the entry's weights, from the HF cache
    assert result["model"]["pretrained"] == str(hub / "models--hnbench-test--tiny" / "snapshots" / COMMIT /
                                                "tiny.safetensors")
    recorded = result["model"]["extra"]["zoo"]
    assert recorded["name"] == "tiny-zoo-test" and recorded["family"] == "open_clip"
    assert recorded["weights"] == "huggingface.co/hnbench-test/tiny tiny.safetensors"


@pytest.mark.slow
def test_zoo_name_works_for_hardness_suite_and_train(tmp_path, hub, tiny_entry):
    import hnbench

    _hub_cache(hub, "hnbench-test/tiny", "tiny.safetensors", TINY_WEIGHTS)
    plain = load_model("hnbench-tiny", "synthdense").info.fingerprint
    captions = [f"a {c} square beside {n} circles" for c in ("red", "blue", "green", "pink") for n in range(4)]
    rep = hnbench.hardness(captions, "tiny-zoo-test", batch_size=4, n_batches=2, progress=False, num_workers=0)
    assert rep.encoder["fingerprint"] == plain  # the entry's weights embedded the captions
    suite = hnbench.run_suite("synthdense", ["tiny-zoo-test"], output_dir=tmp_path / "suite", limit=8,
                              progress=False, num_workers=0, ci=False)
    assert not suite.failures
    result = json.loads(next((tmp_path / "suite").rglob("*__synthdense-test__*.json")).read_text())
    assert result["model"]["fingerprint"] == plain and result["model"]["extra"]["zoo"]["name"] == "tiny-zoo-test"
    data = write_jsonl(tmp_path / "m.jsonl", [{"image": p, "caption": c} for p, c in make_pairs(tmp_path, n=8)])
    cfg = hnbench.TrainConfig(model="tiny-zoo-test", dataset=str(data), epochs=1, batch_size=4, num_workers=0,
                              output=str(tmp_path / "run"))
    assert hnbench.train(cfg, progress=False).name == "checkpoint.safetensors"


def test_explicit_pretrained_overrides_the_zoo_weights(hub, tiny_entry):
    enc = load_model("tiny-zoo-test", "synthdense")  # no hub copy needed: the user's weights win
    assert enc.info.arch == "hnbench-tiny" and enc.info.pretrained == "synthdense"
    assert enc.info.extra["zoo"]["pretrained"] == "synthdense"


def test_zoo_name_in_the_embedding_cache_path_is_recorded_too(tmp_path, hub, tiny_entry):
    from hnbench.evaluation.remembered import load_remembered

    _hub_cache(hub, "hnbench-test/tiny", "tiny.safetensors", TINY_WEIGHTS)
    for _ in range(2):  # built and remembered, then remembered
        enc = load_remembered("tiny-zoo-test", None, root=tmp_path / "cache")
        assert enc.info.arch == "hnbench-tiny" and enc.info.extra["zoo"]["name"] == "tiny-zoo-test"
    assert type(enc).__name__ == "RememberedEncoder"


@pytest.mark.parametrize(("name", "words"), [
    ("longclip-l14", ("BeichenZhang/LongCLIP-L", "longclip-L.pt", "--pretrained FILE")),
    ("siglip2-b16-hf", ("huggingface.co/google/siglip2-base-patch16-224", "--model with a local copy")),
    ("dci_pick1", ("dl.fbaipublicfiles.com/densely_captioned_images/dci_pick1.tar.gz", "cannot be reached",
                   "--pretrained FILE"))])
def test_zoo_download_offline_is_one_line_naming_what_and_where(tmp_path, hub, capsys, monkeypatch, name,
                                                                        words):
    from hnbench.models import tags

    monkeypatch.setenv("HNBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(tags, "_reachable", lambda host, port=443: False)  # no network, whatever this machine has
    before = snapshot(tmp_path)
    assert main(["-q", "eval", "--model", name, "--dataset", "synthdense", "--output", str(tmp_path / "out")]) == 2
    why = () if name == "dci_pick1" else ("HF_HUB_OFFLINE",)
    assert_one_line_error(capsys.readouterr().err, f"zoo model {name}", *words, *why)
    assert snapshot(tmp_path) == before


def test_zoo_download_that_fails_is_one_line_too(hub, tiny_entry, monkeypatch):
    from huggingface_hub import constants

    from hnbench.errors import CheckpointError
    from hnbench.models import tags

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(tags, "_reachable", lambda host, port=443: True)  # the host answers ...
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # ... but the download itself fails, at once
    with pytest.raises(CheckpointError) as e:
        load_model("tiny-zoo-test")
    assert str(e.value).startswith("zoo model tiny-zoo-test: cannot fetch huggingface.co/hnbench-test/tiny "
                                   "tiny.safetensors (") and "\n" not in str(e.value)
    assert str(e.value).endswith("fetch it by hand and pass --pretrained FILE")


@pytest.mark.parametrize("name", ["goal-l14-docci", "tulip-l14", "dreamlip-b16"])
def test_manual_zoo_entry_says_where_to_get_the_file(tmp_path, name, capsys):
    before = snapshot(tmp_path)
    assert main(["-q", "eval", "--model", name, "--dataset", "synthdense", "--output", str(tmp_path / "out")]) == 2
    page = str(MODEL_ZOO.get(name).weights.page).split()[0]
    assert_one_line_error(capsys.readouterr().err, f"zoo model {name}", "--pretrained FILE", page)
    assert snapshot(tmp_path) == before


def test_zoo_remote_entry_resolves_to_the_remote_family(tmp_path, capsys):
    from hnbench.models.family import family_of

    assert family_of("jina-clip-v2").name == "remote"  # the entry's family answers for it
    assert zoo.resolve("jina-clip-v2", None).model == "remote:jinaai/jina-clip-v2"


# --- hnbench models -----------------------------------------------------------------------------------
def test_list_models_names_families_entries_and_what_is_on_this_machine(hub, tiny_entry, capsys):
    import hnbench

    frame = hnbench.list_models()
    named = set(frame.loc[frame["kind"].isin(["family", "zoo"]), "name"])  # (and the built-in, the architectures)
    assert set(MODELS.names()) | set(MODEL_ZOO.names()) == named
    fam = frame.set_index("name")
    assert fam.loc["hf", "kind"] == "family" and "hf:" in fam.loc["hf", "model"]
    assert fam.loc["tiny-zoo-test", "on_machine"] is False  # not in the cache yet
    assert fam.loc["goal-l14-docci", "on_machine"] is None  # manual: where the user put it
    assert fam.loc["longclip-l14", "context"] == 248 and fam.loc["pe-core-l14", "context"] == 32
    assert "--reported" in fam.loc["longclip-l14", "reference"] and "urban1k 86.1/82.5" in \
        fam.loc["longclip-l14", "reference"]  # the best R@1 of its linked rows (hn-clip-2026-table1's urban1k)
    _hub_cache(hub, "hnbench-test/tiny", "tiny.safetensors", TINY_WEIGHTS)
    assert hnbench.list_models().set_index("name").loc["tiny-zoo-test", "on_machine"] is True

    assert main(["models", "--family", "open_clip", "--format", "md"]) == 0
    md = capsys.readouterr().out
    lines = md.splitlines()
    assert lines[0].startswith("| name") and all(line.startswith("|") for line in lines)
    assert "| tiny-zoo-test " in md and "| yes " in md and "lotlip-b16" not in md
    assert "dci\\_pick1" not in md and main(["models", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["name"] for r in rows} == set(frame["name"])
    assert {r["kind"] for r in rows} == {"family", "builtin", "zoo", "architecture"}
    assert main(["models", "--format", "csv", "--family", "hf"]) == 0
    csv_lines = capsys.readouterr().out.splitlines()
    assert csv_lines[0].startswith("kind,name,family,model,context") and any("dci_pick1," in x for x in csv_lines)


def test_models_markdown_escapes_what_it_shows():
    import pandas as pd

    frame = pd.DataFrame([{"name": "a|b", "family": "x", "model": "<b>m</b>", "context": 1, "weights": "*w*",
                           "on_machine": None, "reference": ""}])
    md = zoo.render_models(frame)
    assert "a\\|b" in md and "\\<b\\>" in md and "\\*w\\*" in md and "<b>" not in md


def test_models_unknown_family_is_one_line(capsys):
    assert main(["models", "--family", "nope"]) == 2
    assert_one_line_error(capsys.readouterr().err, "nope", "open_clip")


# --- training-only keys, per family -------------------------------------------------------------------
def _longclip_layout(micro, extra: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A Long-CLIP-format release of ``micro``'s towers (its two position tables) with ``extra`` modules."""
    sd = {k: v.clone() for k, v in micro.model.state_dict().items()}
    pe = sd["positional_embedding"]
    sd["positional_embedding"] = torch.cat([pe[:20], torch.randn_like(pe[20:])])
    sd["positional_embedding_res"] = torch.cat([torch.randn_like(pe[:20]), pe[20:]])
    return {**sd, **extra}


def test_training_only_keys_are_declared_per_family():
    from hnbench.models import checkpoint
    from hnbench.models.family import as_family

    assert not hasattr(checkpoint, "TRAINING_ONLY")  # no global table any more
    assert set(as_family("open_clip").training_only_keys) == {"cross_net.", "mask_net."}
    for name in ("hf", "tulip", "lotlip"):  # as before: FineLIP's module only
        assert set(as_family(name).training_only_keys) == {"cross_net."}, name
    assert dict(as_family("remote").training_only_keys) == {}


def test_smartclip_mask_net_is_dropped_with_a_warning_naming_it(micro_config, tmp_path, caplog):
    torch.manual_seed(0)
    micro = load_model("hnb-micro", model_config=str(micro_config))
    mask_net = {"mask_net.0.weight": torch.randn(8, 32), "mask_net.0.bias": torch.zeros(8),
                "mask_net.2.weight": torch.randn(1, 8)}
    path = tmp_path / "smartclip-B.pt"
    torch.save({"state_dict": _longclip_layout(micro, mask_net)}, path)
    with caplog.at_level(logging.WARNING, logger="hnbench.models.checkpoint"):
        enc = load_model("hnb-micro", str(path), model_config=str(micro_config))
    warned = [r.getMessage() for r in caplog.records if "mask_net" in r.getMessage()]
    assert len(warned) == 1 and "ignoring 3 keys of mask_net" in warned[0] and "SmartCLIP" in warned[0]
    assert all(k in warned[0] for k in mask_net)
    assert enc.info.fingerprint == micro.info.fingerprint  # the towers, exactly


def test_a_training_only_prefix_is_kept_when_asked():
    from hnbench.models.checkpoint import FINELIP_CROSS_NET, drop_training_only

    sd = {"a.w": torch.zeros(1), "cross_net.x": torch.ones(1)}
    assert set(drop_training_only(sd, {"a.w"}, "f", FINELIP_CROSS_NET)) == {"a.w"}
    assert set(drop_training_only(sd, {"a.w"}, "f", FINELIP_CROSS_NET, keep=("cross_net.",))) == set(sd)


def test_unknown_module_in_a_longclip_release_is_refused_listing_it(micro_config, tmp_path, capsys):
    torch.manual_seed(0)
    micro = load_model("hnb-micro", model_config=str(micro_config))
    path = tmp_path / "odd-B.pt"
    torch.save(_longclip_layout(micro, {"foo.w": torch.randn(4, 4), "foo.b": torch.zeros(4),
                                        "mask_net.0.weight": torch.randn(2, 2)}), path)
    before = snapshot(tmp_path)
    assert main(["-q", "eval", "--model", "hnb-micro", "--model-config", str(micro_config), "--pretrained", str(path),
                 "--dataset", "synthdense", "--limit", "4", "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert_one_line_error(err, "unexpected keys (2)", "foo.b", "foo.w")
    assert "mask_net" not in err  # the allow-listed module is dropped, not listed
    assert snapshot(tmp_path) == before


# --- another family's checkpoint given to the open_clip loader ----------------------------------
def _tulip_text_only(tmp_path):
    """A distilled TULIP text tower (main_distill_rope.py's student state dict) for the test's tiny architecture."""
    from test_models_tulip import _release_state_dict, _save_release, _tiny_config

    cfg = _tiny_config(tmp_path)
    arch, sd = _release_state_dict(cfg)
    text = {k: v for k, v in sd.items() if not k.startswith("visual.") and k not in ("positional_embedding",
                                                                                     "logit_scale")}
    return cfg, arch, _save_release(tmp_path / "tulip-text.pt", text)


def test_tulip_text_tower_given_to_open_clip_names_the_tulip_family(tmp_path, capsys):
    cfg, arch, path = _tulip_text_only(tmp_path)
    before = snapshot(tmp_path)
    assert main(["-q", "eval", "--model", arch, "--model-config", str(cfg), "--pretrained", str(path),
                 "--dataset", "synthdense", "--limit", "4", "--output", str(tmp_path / "out")]) == 2
    assert_one_line_error(capsys.readouterr().err, "TULIP's RoPE text tower", f"--model tulip:{arch}",
                          "image tower")
    assert snapshot(tmp_path) == before


def test_tulip_text_only_checkpoint_says_what_it_needs(tmp_path, capsys):
    cfg, arch, path = _tulip_text_only(tmp_path)
    assert main(["-q", "eval", "--model", f"tulip:{arch}", "--model-config", str(cfg), "--pretrained", str(path),
                 "--dataset", "synthdense", "--limit", "4", "--output", str(tmp_path / "out")]) == 2
    assert_one_line_error(capsys.readouterr().err, "only TULIP's RoPE text tower", "no visual.* keys",
                          "add the teacher's", "visual.* keys")


def test_families_declare_the_signatures_the_open_clip_loader_asks():
    from hnbench.models.family import as_family, claimed_elsewhere

    sd = {"token_embedding.weight": torch.zeros(1), "transformer.resblocks.0.ln_1.weight": torch.zeros(1)}
    assert "tulip:ViT-L-14" in str(as_family("tulip").claims(sd, "ViT-L-14"))
    assert as_family("open_clip").claims(sd, "ViT-L-14") is None  # the default: nothing claimed
    assert as_family("tulip").claims({**sd, "positional_embedding": torch.zeros(1)}, "ViT-L-14") is None
    assert "tulip:" in str(claimed_elsewhere(sd, as_family("open_clip"), "ViT-L-14"))
    assert claimed_elsewhere(sd, as_family("tulip"), "ViT-L-14") is None  # a family never refuses its own


# --- the docs' model zoo section --- -------------------------------------------------------------------
def test_the_documented_model_zoo_table_is_the_registry():
    from docs_pages import page

    readme = page("guides/models.md")  # the model zoo section as the site shows it (its table generated)
    section = readme.split("## Model zoo", 1)[1].split("\n## ", 1)[0]
    assert zoo.zoo_table() in section  # every entry, as registered
    for claim in ("hnbench models", "--format md|csv|json", "--family F", "hnbench.list_models(family=None)",
                  "model.extra.zoo", "`cross_net.*`", "`mask_net.*`", "ModelFamily.training_only_keys",
                  "ModelFamily.claims", "--trust-remote-code", "`--pretrained FILE`"):
        assert claim in section, claim
    families = "|".join(map(re.escape, MODELS.names()))
    assert set(re.findall(rf"\| `([a-z0-9_.-]+)` \| (?:{families}) \|", section)) == \
        set(MODEL_ZOO.names())
    from hnbench.cli import build_parser

    assert "models" in build_parser()._subparsers._group_actions[0].choices  # the command the section names


def _url_entry(tmp_path, digest: str | None = None) -> tuple[zoo.ZooEntry, Path]:
    """A zoo entry whose weights are a ``.tar.gz`` at a ``file://`` URL (DCI's release form), and the archive."""
    import hashlib
    import tarfile

    archive = tmp_path / "release" / "tiny_pick.tar.gz"
    archive.parent.mkdir()
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(TINY_WEIGHTS, arcname="tiny_pick/model.safetensors")
    sha = digest or hashlib.sha256(archive.read_bytes()).hexdigest()
    entry = zoo.ZooEntry("tiny-url-test", "open_clip", "hnbench-tiny",
                         zoo.Weights("url", url=archive.as_uri(), sha256=sha, folder="tiny_pick/model.safetensors"),
                         77, "CLIP BPE", "hnbench-tiny as a tarball release (this test's)")
    return entry, archive


def test_url_release_is_checked_unpacked_and_loaded(tmp_path, monkeypatch):
    from hnbench.models import tags

    entry, _ = _url_entry(tmp_path)
    monkeypatch.setitem(MODEL_ZOO._targets, entry.name, entry)
    monkeypatch.setenv("HNBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(tags, "_reachable", lambda host, port=443: True)
    assert zoo.on_machine(entry) is False
    enc = load_model("tiny-url-test")
    assert enc.info.fingerprint == load_model("hnbench-tiny", "synthdense").info.fingerprint
    unpacked = tmp_path / "cache" / "models" / "tiny-url-test" / "tiny_pick" / "model.safetensors"
    assert enc.info.pretrained == str(unpacked) and zoo.on_machine(entry) is True
    assert sorted(p.name for p in (tmp_path / "cache" / "models").iterdir()) == ["tiny-url-test"]  # no leftovers


def test_url_release_with_another_sha256_is_refused_and_leaves_nothing(tmp_path, monkeypatch):
    from hnbench.errors import CheckpointError
    from hnbench.models import tags

    entry, _ = _url_entry(tmp_path, digest="0" * 64)
    monkeypatch.setitem(MODEL_ZOO._targets, entry.name, entry)
    monkeypatch.setenv("HNBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(tags, "_reachable", lambda host, port=443: True)
    with pytest.raises(CheckpointError, match="not the published 0000"):
        load_model("tiny-url-test")
    assert list((tmp_path / "cache" / "models").iterdir()) == [] and zoo.on_machine(entry) is False
