"""Remote-code models (``remote:DIR``) behind ``--trust-remote-code``, with the declared text policies of
FG-CLIP (long-text mode) and jina-clip (per-direction task prompt).

The model folder is written here in the real remote-code layout: ``config.json`` with ``auto_map`` naming a
modeling file beside it (a ``PreTrainedModel`` with ``get_image_features`` / ``get_text_features``), a tokenizer and
an image processor; never the network.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import assert_one_line_error, make_pairs, snapshot, write_jsonl

pytest.importorskip("transformers")

MODELING = '''
import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel


class TinyRemoteConfig(PretrainedConfig):
    model_type = "{model_type}"

    def __init__(self, vocab_size=64, hidden_size=16, projection_dim=8, max_position_embeddings=32, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.projection_dim = projection_dim
        self.max_position_embeddings = max_position_embeddings


class TinyRemoteModel(PreTrainedModel):
    config_class = TinyRemoteConfig

    def __init__(self, config):
        super().__init__(config)
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.short_proj = nn.Linear(config.hidden_size, config.projection_dim, bias=False)
        self.long_proj = nn.Linear(config.hidden_size, config.projection_dim, bias=False)
        self.visual = nn.Linear(3 * 8 * 8, config.projection_dim)
        self.post_init()

    def _init_weights(self, module):
        pass

    def get_text_features(self, input_ids, attention_mask=None, walk_short_pos=True):
        mask = (attention_mask if attention_mask is not None else torch.ones_like(input_ids)).unsqueeze(-1).float()
        pooled = (self.embed(input_ids) * mask).sum(1) / mask.sum(1).clamp(min=1)
        return (self.short_proj if walk_short_pos else self.long_proj)(pooled)

    def get_image_features(self, pixel_values):
        return self.visual(pixel_values.flatten(1))
'''


def _write_remote(root: Path, captions: list[str], model_type: str) -> Path:
    """A remote-code model folder: modeling_tiny.py + config.json (auto_map) + weights + tokenizer + processor."""
    import importlib.util

    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import CLIPImageProcessor, PreTrainedTokenizerFast

    from hnbench.models.remote import JINA_QUERY

    root.mkdir(parents=True)
    (root / "modeling_tiny.py").write_text(MODELING.replace("{model_type}", model_type))
    spec = importlib.util.spec_from_file_location(f"modeling_tiny_{model_type}", root / "modeling_tiny.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    words = sorted({w for c in [*captions, JINA_QUERY] for w in c.replace(",", " ").replace(":", " ").split()})
    vocab = {"[PAD]": 0, "[UNK]": 1, **{w: i + 2 for i, w in enumerate(words)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    torch.manual_seed(0)
    model = module.TinyRemoteModel(module.TinyRemoteConfig(vocab_size=len(vocab)))
    model.save_pretrained(root)
    config = json.loads((root / "config.json").read_text())
    config.update(model_type=model_type, auto_map={"AutoConfig": "modeling_tiny.TinyRemoteConfig",
                                                    "AutoModel": "modeling_tiny.TinyRemoteModel"})
    (root / "config.json").write_text(json.dumps(config))
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]",
                            model_max_length=32).save_pretrained(root)
    CLIPImageProcessor(size={"shortest_edge": 8}, crop_size={"height": 8, "width": 8}).save_pretrained(root)
    return root


@pytest.fixture
def data(tmp_path):
    pairs = make_pairs(tmp_path / "data", n=4)
    return write_jsonl(tmp_path / "data" / "m.jsonl", [{"image": p, "caption": c} for p, c in pairs]), pairs


def test_remote_model_is_refused_without_trust_in_one_line(tmp_path, data, capsys):
    from hnbench.cli import main

    manifest, pairs = data
    folder = _write_remote(tmp_path / "jina", [c for _, c in pairs], "jina_clip")
    before = snapshot(tmp_path)
    capsys.readouterr()  # transformers' progress bar while the folder was written
    for command in (["eval", "--dataset", str(manifest), "--output", str(tmp_path / "out")],
                    ["hardness", "--dataset", str(manifest), "--output", str(tmp_path / "hard")],
                    ["train", "--dataset", str(manifest), "--output", str(tmp_path / "run")]):
        rc = main([*command, "--model", f"remote:{folder}"])
        assert rc == 2, command
        assert_one_line_error(capsys.readouterr().err, f"remote:{folder}", "modeling_tiny.py", "--trust-remote-code")
    assert snapshot(tmp_path) == before  # nothing written (no code ran)
    # the docs' command-line reference lists the flag under eval, and with it the same command scores the model
    from docs_pages import page, section

    assert "[--trust-remote-code]" in section(page("reference/cli.md"), "## `hnbench eval`")
    rc = main(["-q", "eval", "--dataset", str(manifest), "--output", str(tmp_path / "out"), "--model",
               f"remote:{folder}", "--trust-remote-code", "--no-ci", "--num-workers", "0"])
    assert rc == 0
    saved = json.loads(next((tmp_path / "out").glob("*.json")).read_text())
    assert saved["model"]["extra"]["trust_remote_code"] is True
    # trusted, training is still refused in one line before anything loads (the family declares no towers)
    before = snapshot(tmp_path)
    rc = main(["train", "--dataset", str(manifest), "--output", str(tmp_path / "run"), "--model", f"remote:{folder}",
               "--trust-remote-code"])
    assert rc == 2
    assert_one_line_error(capsys.readouterr().err, f"remote:{folder}", "scored, not fine-tuned")
    assert snapshot(tmp_path) == before


def test_remote_hub_model_needs_a_pinned_commit(tmp_path, data, capsys):
    from hnbench.cli import main

    manifest, _ = data
    before = snapshot(tmp_path)
    rc = main(["eval", "--model", "remote:jinaai/jina-clip-v2", "--pretrained", "main", "--trust-remote-code",
               "--dataset", str(manifest), "--output", str(tmp_path / "out")])
    assert rc == 2
    assert_one_line_error(capsys.readouterr().err, "remote:jinaai/jina-clip-v2", "40-hex commit", "'main'")
    assert snapshot(tmp_path) == before


def test_remote_jina_scores_with_per_direction_prompts(tmp_path, data):
    from hnbench.evaluation.evaluate import evaluate
    from hnbench.models import load_model
    from hnbench.models.remote import JINA_QUERY

    manifest, pairs = data
    folder = _write_remote(tmp_path / "jina", [c for _, c in pairs], "jina_clip")
    r = evaluate(f"remote:{folder}", str(manifest), trust_remote_code=True, output_dir=tmp_path / "out",
                 progress=False, num_workers=0, ci=False)
    m = r.model
    assert m["extra"]["trust_remote_code"] is True and m["extra"]["code_files"] == ["modeling_tiny.py"]
    assert m["pretrained"] == m["extra"]["revision"] and m["pretrained"].startswith("sha256:")
    assert m["extra"]["text_preprocessing"]["prompts"] == {"query": JINA_QUERY}
    assert np.isfinite(r.metrics["t2i"]["MRR"]) and np.isfinite(r.metrics["i2t"]["MRR"])
    saved = json.loads(next((tmp_path / "out").glob("*.json")).read_text())
    assert saved["model"]["extra"]["text_preprocessing"]["prompts"] == {"query": JINA_QUERY}

    # the queries (t2i) were embedded with the task prompt, the candidates (i2t) without it
    enc = load_model(f"remote:{folder}", trust_remote_code=True)
    captions = [c for _, c in pairs]
    from PIL import Image

    images = torch.stack([enc.image_transform(Image.open(manifest.parent / p).convert("RGB")) for p, _ in pairs])
    img = enc.encode_images(images)
    plain = enc.encode_texts(enc.tokenize(captions).tokens)
    prompted = enc.encode_texts(enc.tokenize([JINA_QUERY + c for c in captions]).tokens)
    assert not torch.allclose(plain, prompted, atol=1e-3)  # the prompt changes the embedding
    pq = pd.read_parquet(tmp_path / "out" / saved["per_query"])
    t2i = pq[pq.direction == "t2i"].sort_values("query_index")
    i2t = pq[pq.direction == "i2t"].sort_values("query_index")
    assert np.allclose(t2i.gt_score, (prompted * img).sum(1).numpy(), atol=1e-5)
    assert np.allclose(i2t.gt_score, (img * plain).sum(1).numpy(), atol=1e-5)
    # a changed modeling file is another revision
    (folder / "modeling_tiny.py").write_text((folder / "modeling_tiny.py").read_text() + "\n# edited\n")
    edited = load_model(f"remote:{folder}", trust_remote_code=True).info
    assert edited.pretrained != m["pretrained"] and edited.extra["weights_fingerprint"] == m["extra"]["weights_fingerprint"]
    assert edited.fingerprint != m["fingerprint"]  # so the embedding cache does not serve the old code's vectors


def test_remote_fgclip_encodes_in_its_long_text_mode(tmp_path, data):
    from hnbench.models import load_model

    _, pairs = data
    folder = _write_remote(tmp_path / "fg", [c for _, c in pairs], "fgclip")
    enc = load_model(f"remote:{folder}", trust_remote_code=True)
    tp = enc.info.extra["text_preprocessing"]
    assert tp["prompts"] == {} and tp["padding"] == "max_length" and tp["context_length"] == 32  # 248 > the 32 rows
    tokens = enc.tokenize([c for _, c in pairs]).tokens
    mask = enc.text_attention_mask(tokens)
    long = torch.nn.functional.normalize(enc.model.get_text_features(tokens, mask, walk_short_pos=False), dim=-1)
    short = torch.nn.functional.normalize(enc.model.get_text_features(tokens, mask, walk_short_pos=True), dim=-1)
    ours = enc.encode_texts(tokens)
    assert torch.allclose(ours, long.detach(), atol=1e-6) and not torch.allclose(ours, short.detach(), atol=1e-3)
