"""A training run's periodic evaluation with hnbench's evaluator: the :data:`~hnbench.train.trainer.PeriodicEval`
:func:`hnbench.train.train` hands the trainer (which never imports the evaluation itself)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hnbench.evaluation.evaluate import evaluate
from hnbench.models.base import TrainableEncoder
from hnbench.registry import TASKS
from hnbench.train.config import TrainConfig
from hnbench.train.trainer import PeriodicEval

__all__ = ["periodic_evaluation"]

logger = logging.getLogger("hnbench.train.trainer")  # its lines read as the trainer's, as they always did


def periodic_evaluation(config: TrainConfig) -> PeriodicEval:
    """The evaluation of ``config.eval_dataset`` (task ``eval_task``, its protocol, data root and options, batch
    ``eval_batch_size``) on the run's device: its data loaded at the first call and kept; each call writes one
    result into the folder it is given (no confidence intervals, no cache, no workers: the run owns its
    ``eval/``) and returns the record's fields: the data, the result's path and its scores (retrieval: R@1,
    R@5, R@10 and MRR each way; another task: its columns and main score)."""
    name = config.eval_dataset
    assert name is not None, "a periodic evaluation needs an eval_dataset"
    task = TASKS.get(config.eval_task)
    loaded: list[Any] = []

    def data() -> Any:
        if not loaded:
            spec, options = config.eval_spec()
            loaded.append(task.load(spec, **options))
        return loaded[0]

    def run(encoder: TrainableEncoder, *, device: str, epoch: int, output_dir: Path) -> dict[str, Any]:
        r = evaluate(encoder, data(), output_dir=output_dir, task=config.eval_task, device=device,
                     batch_size=config.eval_batch_size, num_workers=0, ci=False, use_cache=False, progress=False,
                     overwrite=True)  # the run owns its eval/
        fields, line = task.training_log(r)
        logger.info("epoch %d: %s", epoch, line)
        return {"dataset": r.dataset.get("name"), "protocol": r.dataset.get("protocol"),
                "path": str(r.path) if r.path else None, **fields}

    return run
