"""One adapter per model family, asked by ``remembered``, PEFT loading and the loader instead of branching on
family names; the docs' "Adding a model family" block, registered from this test module, is fingerprinted,
cached, rebuilt on a changed checkpoint and trained with LoRA."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest
import torch
from conftest import MICRO_CONFIG, make_pairs, write_jsonl
from safetensors.torch import save_file

from hnbench import registry
from hnbench.evaluation.evaluate import evaluate
from hnbench.evaluation.remembered import RECORD_DIR, RememberedEncoder, load_remembered
from hnbench.models import load_model
from hnbench.models.base import Encoder
from hnbench.models.family import RANDOM_INIT, ModelFamily, family_of
from hnbench.registry import Registry

README = Path(__file__).resolve().parent.parent / "docs" / "contributing" / "model-family.md"
SECTION = "## A family that keeps open_clip's towers"


def _readme_block() -> tuple[str, str]:
    """The section's Python block and its registry line, as the contributor guide prints them."""
    text = README.read_text()
    section = text[text.index(SECTION):]
    section = section[:section.index("\n## ", len(SECTION))]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    line = re.search(r"`(MODELS\.register\(.*?\))`", section)
    assert code and line, "the guide's section shows the adapter module and its registry line"
    return code.group(1), line.group(1)


def _models(monkeypatch: pytest.MonkeyPatch) -> Registry[object]:
    """A model-family registry for this test only: the package's families plus what the test registers."""
    models: Registry[object] = Registry("model family", default="open_clip")
    for name in registry.MODELS.names():
        models.register(name, registry.MODELS.get(name), prefixes=tuple(
            p for p, n in registry.MODELS._prefixes.items() if n == name))
    monkeypatch.setattr(registry, "MODELS", models)
    return models


@pytest.fixture
def folder_family(monkeypatch):
    """The guide's FolderFamily, its module made importable as ``mymodels.folder``, registered by its line."""
    code, line = _readme_block()
    module = types.ModuleType("mymodels.folder")
    exec(compile(code, "model-family.md:mymodels/folder.py", "exec"), module.__dict__)
    monkeypatch.setitem(sys.modules, "mymodels", types.ModuleType("mymodels"))
    monkeypatch.setitem(sys.modules, "mymodels.folder", module)
    models = _models(monkeypatch)
    exec(line, {"MODELS": models})
    return module.FAMILY


def _write_folder(d: Path, seed: int) -> Path:
    """An open_clip config and the weights of its ``seed`` random init, in the folder family's layout."""
    import json

    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(MICRO_CONFIG))
    from hnbench.models.openclip import load_openclip, register_model_config

    arch = register_model_config(d / "config.json", name="adapters-test-init")
    model = load_openclip(arch, init_seed=seed).model
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(d / "weights.safetensors"))
    return d


def _manifest(root: Path) -> Path:
    pairs = make_pairs(root, n=6)
    return write_jsonl(root / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])


def _eval(model: str, manifest: Path, out: Path, cache: Path):
    return evaluate(model, str(manifest), output_dir=out, cache_dir=cache, progress=False, num_workers=0,
                    batch_size=4)


def test_a_family_registered_in_a_test_module_is_remembered_and_rebuilt(folder_family, tmp_path):
    d = _write_folder(tmp_path / "x", seed=0)
    manifest, cache, model = _manifest(tmp_path), tmp_path / "cache", f"folder:{tmp_path / 'x'}"
    assert family_of(model) is folder_family
    cold = _eval(model, manifest, tmp_path / "o1", cache)
    assert cold.settings["encoding"]["encoded"] == {"images": 6, "texts": 6}
    assert len(list((cache / RECORD_DIR).glob("*.json"))) == 1  # fingerprinted
    warm = load_remembered(model, None, root=cache)
    assert isinstance(warm, RememberedEncoder) and not warm.built
    again = _eval(model, manifest, tmp_path / "o2", cache)
    assert again.settings["encoding"]["encoded"] == {"images": 0, "texts": 0}  # cached
    assert again.model["fingerprint"] == cold.model["fingerprint"]
    _write_folder(d, seed=1)  # a changed checkpoint at the same path
    changed = _eval(model, manifest, tmp_path / "o3", cache)
    assert changed.model["fingerprint"] != cold.model["fingerprint"]  # rebuilt, not a wrong cache hit
    assert changed.settings["encoding"]["encoded"] == {"images": 6, "texts": 6}
    assert changed.model["fingerprint"] == load_model(model).info.fingerprint


def test_a_plain_loader_family_is_never_taken_for_a_random_init(monkeypatch, tmp_path):
    """The wrong cache hit: a family registered as a loader function (no adapter) used to be remembered as a
    seeded random init, so its changed weights were never read again."""
    from hnbench.models.openclip import load_openclip, register_model_config

    def plain(model: str, pretrained: str | None = None, **kw: object) -> Encoder:
        d = Path(model.removeprefix("plain:"))
        arch = register_model_config(d / "config.json", name="adapters-test-plain")
        return load_openclip(arch, str(d / "weights.safetensors"))

    _models(monkeypatch).register("plain", plain, prefixes=("plain:",))
    d = _write_folder(tmp_path / "p", seed=0)
    manifest, cache, model = _manifest(tmp_path), tmp_path / "cache", f"plain:{d}"
    family = family_of(model)
    assert isinstance(family, ModelFamily) and family.weight_files(model, None, None) is None
    first = _eval(model, manifest, tmp_path / "o1", cache)
    assert not (cache / RECORD_DIR).exists() or not list((cache / RECORD_DIR).glob("*.json"))
    _write_folder(d, seed=1)
    second = _eval(model, manifest, tmp_path / "o2", cache)
    assert second.model["fingerprint"] != first.model["fingerprint"]


@pytest.mark.slow
def test_the_documented_family_trains_with_lora_and_its_adapter_reloads(folder_family, tmp_path):
    pytest.importorskip("peft")
    from hnbench.train.trainer import TrainConfig, train

    d = _write_folder(tmp_path / "x", seed=0)
    model, data = f"folder:{d}", _manifest(tmp_path)
    base = load_model(model)
    train(TrainConfig(model=model, dataset=str(data), epochs=1, batch_size=4, lr=1e-2, warmup_steps=1,
                      num_workers=0, peft="lora", lora_r=2, output=str(tmp_path / "run")), progress=False)
    adapter = load_model(model, str(tmp_path / "run" / "adapter"))  # the base comes back through the family
    merged = folder_family.reload(tmp_path / "run" / "checkpoint.safetensors", base)
    assert adapter.info.pretrained == str(tmp_path / "run" / "adapter")
    assert adapter.info.fingerprint != base.info.fingerprint
    tokens = base.tokenize(["a red square", "a small blue circle"]).tokens
    assert torch.allclose(adapter.encode_texts(tokens), merged.encode_texts(tokens), atol=1e-5)


def test_open_clip_and_hf_adapters_re_express_the_trainer_split(micro_config, hf_clip_dir, tmp_path):
    """The adapters' tower split and LoRA targets are the trainer's own (identical results), and their export
    reloads to the same embeddings."""
    from hnbench.models.towers import CLIPTowers
    from hnbench.train.adapters import default_targets

    for enc in (load_model("hnb-micro", model_config=str(micro_config)), load_model(str(hf_clip_dir))):
        family = family_of(enc.info.arch if enc.framework == "open_clip" else str(hf_clip_dir))
        towers = CLIPTowers(enc.model, enc.framework, eos_token_id=enc.eos_token_id)
        names = [n for n, _ in enc.model.named_parameters()]
        assert [family.tower_of(n) for n in names] == [towers.tower_of(n) for n in names]
        assert {family.tower_of(n) for n in names} == {"image", "text", "shared"}
        assert family.lora_targets() == default_targets(enc.framework)
        out = tmp_path / family.name
        out.mkdir()
        exported = family.export(enc.model, enc, out, {"hnbench": "test"})
        again = family.reload(exported, enc)
        assert again.info.fingerprint == enc.info.fingerprint
        tokens = enc.tokenize(["a red square"]).tokens
        assert torch.allclose(again.encode_texts(tokens), enc.encode_texts(tokens), atol=1e-6)
        pre = family.text_preprocessing(enc)
        assert pre.context_length == enc.info.context_length and not pre.lowercase and not pre.prompts
        assert pre.padding == ("longest" if enc.dynamic_padding else "context")


def test_encoder_members_are_declared_not_read_by_getattr():
    """Every member callers use is in the Encoder protocol; no caller reads an encoder member by getattr."""
    declared = set(vars(Encoder)) | set(Encoder.__annotations__)
    assert {"dynamic_padding", "transform_description", "has_images", "image_transform"} <= declared
    package = Path(__file__).resolve().parent.parent / "hnbench"
    offenders = [f"{p.relative_to(package)}:{i}" for p in sorted(package.rglob("*.py"))
                 for i, line in enumerate(p.read_text().splitlines(), 1)
                 if re.search(r"getattr\((encoder|enc|self\.real\(\)),", line)]
    assert offenders == []


def test_random_init_is_the_open_clip_adapters_answer(micro_config):
    family = family_of("hnb-micro")
    assert family.weight_files("hnb-micro", None, str(micro_config)) == [RANDOM_INIT]
    assert family.weight_files("hf-hub:timm/x", None, None) is None


def test_long_clip_stretch_goes_through_the_open_clip_adapter(micro_config, hf_clip_dir):
    """Long-CLIP's stretch goes through the adapter with the same result as the Long-CLIP module's function;
    a family without it says so in one line."""
    from hnbench.errors import ConfigError
    from hnbench.models.longclip import stretch_openclip

    enc = load_model("hnb-micro", model_config=str(micro_config))
    via_family = family_of("hnb-micro").stretch(enc, 68)  # 20 kept + 4 x 12
    direct = stretch_openclip(enc, 68)
    assert via_family.info.context_length == direct.info.context_length == 68
    assert via_family.info.fingerprint == direct.info.fingerprint != enc.info.fingerprint
    with pytest.raises(ConfigError, match="hf: its text positions cannot be stretched"):
        family_of(str(hf_clip_dir)).stretch(load_model(str(hf_clip_dir)), 68)
