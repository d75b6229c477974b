"""Training side of the model-family adapters: the trainer, its towers, PEFT and export ask the model family's
adapter (:class:`hnbench.models.family.ModelFamily`) instead of branching on the family's name: a family
registered in this test module (its own CLIP module, parameter names, text mask and export format) trains with
LoRA and its export and adapter reload with no other module edited; SigLIP's towers train with the encoder's
own text mask."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import make_pairs, write_jsonl
from PIL import Image
from safetensors.torch import load_file, save_file
from test_adapters import _models
from test_models_hf_auto import CAPTIONS, siglip2_dir, siglip_dir  # noqa: F401  (the tiny SigLIP fixtures)
from torch import Tensor, nn

from hnbench import registry
from hnbench.models import load_model
from hnbench.models.base import ModelInfo, TokenizedTexts, state_dict_fingerprint
from hnbench.models.checkpoint import save_state_dict
from hnbench.models.family import ModelFamily, family_of

PACKAGE = Path(__file__).resolve().parent.parent / "hnbench"
WORDS = "a red green blue square circle triangle on the left right of small big".split()
VOCAB = {w: i + 1 for i, w in enumerate(WORDS)}  # 0: padding
CTX, DIM, SIDE = 10, 8, 8


# -- a model family this test module declares: not open_clip, not transformers ------------------------------
class ToyCLIP(nn.Module):
    """A dual encoder of its own: a linear image tower on 8×8 pixels, a bag-of-words text tower."""

    def __init__(self) -> None:
        super().__init__()
        self.image_proj = nn.Linear(3 * SIDE * SIDE, DIM)
        self.word_table = nn.Embedding(len(VOCAB) + 1, DIM)
        self.text_proj = nn.Linear(DIM, DIM)
        self.logit_scale = nn.Parameter(torch.tensor(math.log(10.0)))


def _pixels(image: Image.Image) -> Tensor:
    array = np.asarray(image.convert("RGB").resize((SIDE, SIDE)), dtype=np.float32) / 255.0
    return torch.from_numpy(array).permute(2, 0, 1).contiguous()


class ToyEncoder:
    framework = "toy"
    transform_description = None
    has_images = True
    dynamic_padding = False
    eos_token_id = None
    tokenizer = None

    def __init__(self, model: nn.Module, info: ModelInfo) -> None:
        self.model, self.info, self.device = model.eval(), info, torch.device("cpu")
        self.image_transform = _pixels

    def tokenize(self, texts: list[str]) -> TokenizedTexts:
        ids = [[VOCAB[w] for w in t.lower().split() if w in VOCAB][:CTX] for t in texts]
        tokens = torch.zeros(len(texts), CTX, dtype=torch.long)
        for row, words in enumerate(ids):
            tokens[row, :len(words)] = torch.tensor(words, dtype=torch.long)
        return TokenizedTexts(tokens, np.array([len(t.split()) for t in texts], dtype=np.int64))

    @torch.no_grad()
    def encode_images(self, pixels: Tensor) -> Tensor:
        return FAMILY.image_features(self.model, pixels)

    @torch.no_grad()
    def encode_texts(self, tokens: Tensor) -> Tensor:
        return FAMILY.text_features(self.model, tokens, FAMILY.text_attention_mask(self, tokens))

    def to(self, device: str | torch.device) -> ToyEncoder:
        return self


class ToyFamily(ModelFamily):
    """``toy:DIR``: DIR/weights.safetensors of a :class:`ToyCLIP`; exports ``toy.safetensors``."""

    name = "toy"
    export_names = ("toy.safetensors",)  # what export writes into a run folder (--overwrite may remove it)

    def load(self, model: str, pretrained: str | None = None, **_: Any) -> ToyEncoder:
        clip = ToyCLIP()
        weights = pretrained or str(Path(model.removeprefix("toy:")) / "weights.safetensors")
        clip.load_state_dict(load_file(weights))
        info = ModelInfo(arch=model, pretrained=pretrained, fingerprint=state_dict_fingerprint(clip.state_dict()),
                         context_length=CTX, n_params=sum(p.numel() for p in clip.parameters()), embed_dim=DIM,
                         framework="toy")
        return ToyEncoder(clip, info)

    def weight_files(self, model: str, pretrained: str | None, model_config: str | Path | None) -> list[str]:
        return [str((Path(model.removeprefix("toy:")) / "weights.safetensors").resolve())]

    def tower_of(self, param_name: str) -> str:
        if "logit_scale" in param_name:
            return "shared"
        return "image" if "image_" in param_name else "text"

    def lora_targets(self) -> list[str]:
        return ["image_proj", "text_proj"]

    def image_features(self, module: Any, pixels: Tensor) -> Tensor:
        return F.normalize(module.image_proj(pixels.flatten(1)), dim=-1)

    def text_features(self, module: Any, tokens: Tensor, attention_mask: Tensor | None) -> Tensor:
        assert attention_mask is not None  # this family's towers need its mask: the towers ask for it
        mask = attention_mask.to(torch.float32)[..., None]
        pooled = (module.word_table(tokens) * mask).sum(1) / mask.sum(1).clamp(min=1)
        return F.normalize(module.text_proj(pooled), dim=-1)

    def text_attention_mask(self, encoder: Any, tokens: Tensor, eos_token_id: int | None = None) -> Tensor:
        return torch.ne(tokens, 0).long()

    def export(self, module: Any, encoder: Any, out_dir: Path, metadata: dict[str, str]) -> Path:
        return save_state_dict(module, out_dir / "toy.safetensors", metadata)

    def reload(self, exported: Path, encoder: Any, *, device: str = "cpu") -> ToyEncoder:
        return self.load(encoder.info.arch, str(exported))


FAMILY = ToyFamily()


@pytest.fixture
def toy_family(monkeypatch):
    _models(monkeypatch).register("toy", FAMILY, prefixes=("toy:",))
    return FAMILY


def _toy_dir(d: Path) -> Path:
    d.mkdir(parents=True)
    torch.manual_seed(0)
    save_file({k: v.contiguous() for k, v in ToyCLIP().state_dict().items()}, str(d / "weights.safetensors"))
    return d


def _manifest(root: Path) -> Path:
    pairs = make_pairs(root, n=8)
    return write_jsonl(root / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs])


def test_a_test_module_family_trains_with_lora_exports_and_reloads(toy_family, tmp_path):
    pytest.importorskip("peft")
    from hnbench.train.trainer import TrainConfig, train

    model = f"toy:{_toy_dir(tmp_path / 'toy')}"
    assert family_of(model) is toy_family
    base = load_model(model)
    run = tmp_path / "run"
    checkpoint = train(TrainConfig(model=model, dataset=str(_manifest(tmp_path)), epochs=2, batch_size=4, lr=5e-2,
                                   warmup_steps=1, num_workers=0, peft="lora", lora_r=2, peft_save="both",
                                   lock_image=True, output=str(run)), progress=False)
    assert checkpoint == run / "toy.safetensors"  # the family's own export
    merged = toy_family.reload(checkpoint, base)
    adapter = load_model(model, str(run / "adapter"))  # the base comes back through the family, then peft merges
    assert merged.info.fingerprint != base.info.fingerprint
    trained, frozen = load_file(str(checkpoint)), base.model.state_dict()
    # the family's tower split: the locked image tower kept its weights, the text tower's LoRA moved
    assert torch.equal(trained["image_proj.weight"], frozen["image_proj.weight"])
    assert not torch.equal(trained["text_proj.weight"], frozen["text_proj.weight"])
    tokens = base.tokenize(["a red square", "a small blue circle on the left"]).tokens
    assert torch.allclose(adapter.encode_texts(tokens), merged.encode_texts(tokens), atol=1e-6)
    assert not torch.allclose(merged.encode_texts(tokens), base.encode_texts(tokens), atol=1e-4)


def test_a_family_without_a_tower_split_is_refused_in_one_line(monkeypatch, tmp_path, capsys):
    """A plain loader family declares no towers: training it is one line, exit 2, no traceback."""
    from conftest import assert_one_line_error

    from hnbench.cli import main

    d = _toy_dir(tmp_path / "toy")
    _models(monkeypatch).register("plain", lambda model, pretrained=None, **kw: FAMILY.load(
        f"toy:{model.removeprefix('plain:')}"), prefixes=("plain:",))
    rc = main(["train", "--model", f"plain:{d}", "--dataset", str(_manifest(tmp_path)), "--batch-size", "4",
               "--output", str(tmp_path / "run")])
    assert rc == 2
    assert_one_line_error(capsys.readouterr().err, "plain", "tower split")
    assert not (tmp_path / "run").exists()


def _names_of_families() -> tuple[set[str], set[str]]:
    """Every registered family's name and declared framework; the modules that define them."""
    names, modules = set(), set()
    for name in registry.MODELS.names():
        family = registry.MODELS.get(name)
        names |= {name, *([family.framework] if isinstance(family, ModelFamily) and family.framework else [])}
        modules.add(type(family).__module__)
    names.add("transformers")  # HF's framework (also when a family stops declaring it)
    return names, modules


def test_no_training_module_names_a_family():
    """grep over hnbench/train: no family or framework name as a string, no comparison on ``framework``, no
    import of a family's module: the training code asks the adapter."""
    names, modules = _names_of_families()
    assert {"open_clip", "hf", "tulip", "lotlip", "transformers"} <= names
    assert "hnbench.models.hf" in modules and "hnbench.models.openclip" in modules
    alternatives = "|".join(map(re.escape, sorted(names)))
    quoted = re.compile(rf"""(['"])({alternatives})\1""")
    branch = re.compile(r"framework\b\s*(==|!=|(not\s+)?in\s*[(\[{])|(==|!=)\s*\S*framework\b")
    family_modules = "|".join(map(re.escape, sorted(modules)))
    imports = re.compile(rf"^\s*(from|import)\s+({family_modules})\b")
    offenders = []
    for path in sorted((PACKAGE / "train").rglob("*.py")):
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if quoted.search(line) or branch.search(line) or imports.search(line):
                offenders.append(f"{path.relative_to(PACKAGE)}:{i}: {line.strip()}")
    assert offenders == []


# -- SigLIP: the towers' text mask is the encoder's own -----------------------------------------------------

@pytest.mark.parametrize("fixture", ["siglip_dir", "siglip2_dir"])
def test_siglip_towers_in_training_equal_the_encoders_eval_features(fixture, request):
    """SigLIP's policy masks by its tokenizer (SigLIP 2's Gemma tokenizer adds no end token and pads on the left),
    not CLIP's end-token mask: the training towers' text features equal the encoder's evaluation features."""
    from hnbench.models.towers import CLIPTowers

    model_dir = request.getfixturevalue(fixture)
    enc = load_model(str(model_dir))
    towers = CLIPTowers(enc.model, family_of(str(model_dir)), encoder=enc).train()  # as the trainer builds them
    tokens = enc.tokenize(CAPTIONS).tokens
    with torch.no_grad():
        training = towers.encode_text(tokens)
    assert torch.allclose(training, enc.encode_texts(tokens), atol=1e-5)


@pytest.mark.slow
def test_siglip_trains_with_lora_and_its_export_reloads(request, tmp_path):
    pytest.importorskip("peft")
    model_dir = request.getfixturevalue("siglip_dir")
    from hnbench.train.trainer import TrainConfig, train

    data = _manifest(tmp_path)
    checkpoint = train(TrainConfig(model=str(model_dir), dataset=str(data), epochs=1, batch_size=4, lr=1e-2,
                                   warmup_steps=1, num_workers=0, peft="lora", lora_r=2, output=str(tmp_path / "run")),
                       progress=False)
    assert checkpoint == tmp_path / "run" / "hf_model"
    again, base = load_model(str(checkpoint)), load_model(str(model_dir))
    assert again.info.fingerprint != base.info.fingerprint
    assert family_of(str(checkpoint)).text_preprocessing(again).lowercase  # still SigLIP's text policy
