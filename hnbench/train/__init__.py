"""The training side (importable without the evaluation stack's heavy paths).

losses       InfoNCE / HN-CLIP (fp32, masks, label smoothing, Ḡ source)
token_loss   the FILIP-style token-level term
distributed  DistributedHNCLIPLoss: the HN loss as a module for your own DDP loop (hnbench.distributed: the context)
config       TrainConfig and recipes (re-exported by trainer); objective_options: each objective's options
trainer      the run (never imports the evaluation); step (accumulation modes), batches, state (resume), export
periodic     the periodic evaluation with hnbench's evaluator that :func:`train` hands the trainer
diagnostics  InfoNCE-vs-HN gradient measurements; report: ``hnbench train-report``
adapters     LoRA / DoRA through peft; towers: one module over any family's CLIP module (its adapter asked)
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hnbench.train.config import TrainConfig

__all__ = ["train"]


def train(config: TrainConfig, *, progress: bool = True) -> Path:
    """Run one training job (:func:`hnbench.train.trainer.train`), its ``eval_dataset`` scored by hnbench's
    evaluator every ``eval_every`` epochs (:func:`hnbench.train.periodic.periodic_evaluation`); returns the
    checkpoint path. Imported here, not at the top: ``hnbench.train`` stays light."""
    from hnbench.train.periodic import periodic_evaluation
    from hnbench.train.trainer import train as run

    return run(config, progress=progress, evaluate=periodic_evaluation(config) if config.eval_dataset else None)
