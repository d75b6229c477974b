"""Shared fixtures: a micro open_clip architecture and small image–caption sets in each generic format."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

MICRO_CONFIG = {
    "embed_dim": 32,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "head_width": 16, "patch_size": 8},
    "text_cfg": {"context_length": 32, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
}

COLOURS = {"red": (220, 30, 30), "green": (30, 200, 30), "blue": (30, 30, 220), "yellow": (230, 230, 40),
           "purple": (140, 40, 180), "cyan": (40, 220, 220), "orange": (240, 140, 20), "white": (250, 250, 250)}


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Every test gets its own hnbench cache; no test touches the user's."""
    monkeypatch.setenv("HNBENCH_CACHE", str(tmp_path_factory.mktemp("cache")))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


@pytest.fixture(scope="session")
def micro_config(tmp_path_factory) -> Path:
    """A JSON model config for a ~2M-parameter open_clip CLIP registered as ``hnb-micro``."""
    path = tmp_path_factory.mktemp("cfg") / "hnb-micro.json"
    path.write_text(json.dumps(MICRO_CONFIG))
    return path


@pytest.fixture(scope="session")
def hf_clip_dir(tmp_path_factory) -> Path:
    """A randomly initialised tiny transformers CLIPModel with the real CLIP BPE tokenizer, saved locally."""
    pytest.importorskip("transformers")
    from open_clip.tokenizer import SimpleTokenizer
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPTokenizer

    root = tmp_path_factory.mktemp("hfclip")
    tok = SimpleTokenizer()
    names = {"<start_of_text>": "<|startoftext|>", "<end_of_text>": "<|endoftext|>"}  # HF spelling
    (root / "vocab.json").write_text(json.dumps({names.get(k, k): v for k, v in tok.encoder.items()}))
    merges = sorted(tok.bpe_ranks.items(), key=lambda kv: kv[1])
    (root / "merges.txt").write_text("#version: 0.2\n" + "\n".join(" ".join(pair) for pair, _ in merges) + "\n")
    import torch

    torch.manual_seed(0)
    config = CLIPConfig(
        text_config={"vocab_size": len(tok.encoder), "hidden_size": 32, "intermediate_size": 64,
                     "num_hidden_layers": 1, "num_attention_heads": 2, "max_position_embeddings": 40},
        vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                       "num_attention_heads": 2, "image_size": 32, "patch_size": 8},
        projection_dim=24)
    out = root / "model"
    CLIPModel(config).save_pretrained(out)
    CLIPTokenizer(str(root / "vocab.json"), str(root / "merges.txt")).save_pretrained(out)
    CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(out)
    return out


def make_pairs(root: Path, n: int = 12, seed: int = 0) -> list[tuple[str, str]]:
    """Write ``n`` solid-colour PNGs with a shape into ``root/images`` and return (rel_path, caption)."""
    rng = np.random.default_rng(seed)
    (root / "images").mkdir(parents=True, exist_ok=True)
    names = list(COLOURS)
    pairs = []
    for i in range(n):
        colour = names[i % len(names)]
        size = 16 + 8 * (i // len(names))
        im = Image.new("RGB", (48, 48), (20, 20, 20))
        x, y = rng.integers(0, 48 - size, size=2)
        im.paste(COLOURS[colour], (int(x), int(y), int(x) + size, int(y) + size))
        rel = f"images/img_{i:03d}.png"
        im.save(root / rel)
        pairs.append((rel, f"a {colour} square of size {size} on a dark background, item {i}"))
    return pairs


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def pytest_collection_modifyitems(config, items):
    import torch

    if not torch.cuda.is_available():
        skip = pytest.mark.skip(reason="needs a CUDA device")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def write_v1_copy(result_json: Path, dest: Path) -> Path:
    """A copy of a result whose per-query parquet is of schema 1 (no top-k columns); returns the JSON's path."""
    import pandas as pd

    d = json.loads(result_json.read_text())
    old = pd.read_parquet(result_json.parent / d["per_query"]).drop(columns=["topk_index", "topk_id", "topk_score"])
    old.attrs = {}
    dest.mkdir(parents=True, exist_ok=True)
    d["per_query"] = "v1.queries.parquet"
    d.pop("per_query_sha256", None)  # the copy's parquet is another file
    old.to_parquet(dest / d["per_query"], index=False)
    (dest / result_json.name).write_text(json.dumps(d))
    return dest / result_json.name


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file below ``root`` with its bytes: compare before and after to show nothing was written."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def assert_one_line_error(err: str, *words: str) -> None:
    """``err`` is exactly one ``hnbench: error:`` line, no traceback, naming each of ``words``."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hnbench: error:") and "Traceback" not in err, err
    for w in words:
        assert w in lines[0], (w, lines[0])
