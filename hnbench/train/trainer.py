"""A minimal, real fine-tuner for open_clip models: AdamW, cosine schedule with warm-up, InfoNCE or HN-CLIP.

Single process. Writes ``checkpoint.safetensors`` (loadable by ``hnbench eval --pretrained``),
``train_config.json`` (the exact recipe that ran) and ``log.jsonl`` (one line per logged step)
into the output directory.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from hnbench.errors import ConfigError

logger = logging.getLogger(__name__)


@dataclass
class TrainConfig:
    """Everything that decides a training run (a recipe file holds a subset of these fields)."""

    model: str = "hnbench-tiny"
    pretrained: str | None = None
    model_config: str | None = None
    dataset: str = "synthdense"
    protocol: str | None = "train"
    data_root: str | None = None
    dataset_options: dict[str, Any] = field(default_factory=dict)
    loss: str = "hn"
    gamma: float = 0.5
    epochs: int = 1
    batch_size: int = 64
    lr: float = 5e-4
    weight_decay: float = 0.1
    warmup_steps: int = 10
    max_logit_scale: float = 100.0
    seed: int = 0
    device: str = "cpu"
    context_length: int | None = None
    num_workers: int | None = None
    log_every: int = 10
    output: str = "runs/train"

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"unknown training options {unknown}; known: {sorted(known)}")
        return cls(**d)


def load_recipe(name_or_path: str) -> dict[str, Any]:
    """Read a recipe (TOML): a built-in name from ``hnbench/train/recipes/`` or a file path."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]

    path = Path(name_or_path)
    if not path.is_file():
        path = Path(__file__).parent / "recipes" / f"{name_or_path}.toml"
    if not path.is_file():
        known = sorted(p.stem for p in (Path(__file__).parent / "recipes").glob("*.toml"))
        raise ConfigError(f"no recipe {name_or_path!r} (built-in: {known})")
    with open(path, "rb") as f:
        return tomllib.load(f)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def cosine_lr(step: int, total: int, base: float, warmup: int) -> float:
    """Linear warm-up to ``base`` over ``warmup`` steps, then cosine decay to 0 at ``total``."""
    if step < warmup:
        return base * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * base * (1 + math.cos(math.pi * min(1.0, progress)))


class _PairItems(torch.utils.data.Dataset):
    """Image position → (pixels, position)."""

    def __init__(self, source: Any, transform: Any):
        self.source, self.transform = source, transform

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return self.transform(self.source.open(i)), i


def train(config: TrainConfig, *, progress: bool = True) -> Path:
    """Run one training job; returns the path of the saved safetensors checkpoint."""
    from safetensors.torch import save_file

    from hnbench.data import load_dataset
    from hnbench.models.openclip import load_openclip
    from hnbench.registry import LOSSES
    from hnbench.results import atomic_write_bytes

    seed_everything(config.seed)
    loss_fn = LOSSES.get(config.loss)
    out_dir = Path(config.output)
    out_dir.mkdir(parents=True, exist_ok=True)
    encoder = load_openclip(config.model, config.pretrained, model_config=config.model_config,
                            context_length=config.context_length, device=config.device)
    model = encoder.model.train()
    ds = load_dataset(config.dataset, data_root=config.data_root, protocol=config.protocol,
                      **config.dataset_options)
    tokens = encoder.tokenize(ds.captions).tokens
    captions_of = ds.image_captions()
    workers = (min(2, max(0, len(ds.images) // config.batch_size)) if config.num_workers is None
               else config.num_workers)
    generator = torch.Generator().manual_seed(config.seed)
    loader = torch.utils.data.DataLoader(
        _PairItems(ds.images, encoder.image_transform), batch_size=config.batch_size, shuffle=True,
        drop_last=len(ds.images) >= config.batch_size, num_workers=workers, generator=generator)
    steps_per_epoch = len(loader)
    total = steps_per_epoch * config.epochs
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "embedding" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "embedding" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": config.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=config.lr)
    rng = np.random.default_rng(config.seed)
    log_path = out_dir / "log.jsonl"
    log_path.write_text("")
    step, start = 0, time.perf_counter()
    with tqdm(total=total, desc=f"train ({config.loss})", disable=not progress) as bar:
        for epoch in range(config.epochs):
            for pixels, idx in loader:
                caps = [int(rng.choice(captions_of[int(i)])) for i in idx]
                for g in opt.param_groups:
                    g["lr"] = cosine_lr(step, total, config.lr, config.warmup_steps)
                image_features = model.encode_image(pixels.to(config.device), normalize=True)
                text_features = model.encode_text(tokens[caps].to(config.device), normalize=True)
                scale = model.logit_scale.exp().clamp(max=config.max_logit_scale)
                loss = loss_fn(image_features, text_features, scale, gamma=config.gamma)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                with torch.no_grad():
                    model.logit_scale.clamp_(0, math.log(config.max_logit_scale))
                if step % config.log_every == 0 or step == total - 1:
                    rec = {"step": step, "epoch": epoch, "loss": float(loss.detach()), "lr": opt.param_groups[0]["lr"],
                           "logit_scale": float(scale.detach()), "seconds": round(time.perf_counter() - start, 3)}
                    with open(log_path, "a") as f:
                        f.write(json.dumps(rec) + "\n")
                    bar.set_postfix(loss=f"{float(loss.detach()):.4f}")
                step += 1
                bar.update(1)
    ckpt = out_dir / "checkpoint.safetensors"
    tmp = out_dir / ".checkpoint.safetensors.tmp"
    save_file({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}, str(tmp),
              metadata={"arch": config.model, "hnbench": "train", "loss": config.loss})
    tmp.replace(ckpt)
    meta = {"config": asdict(config), "steps": step, "seconds": round(time.perf_counter() - start, 2),
            "dataset_fingerprint": ds.fingerprint(), "checkpoint": ckpt.name}
    atomic_write_bytes(out_dir / "train_config.json", (json.dumps(meta, indent=2) + "\n").encode())
    logger.info("wrote %s after %d steps", ckpt, step)
    return ckpt
