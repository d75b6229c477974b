"""A training run's periodic evaluation with hnbench's evaluator: the :data:`~hnbench.train.trainer.PeriodicEval`
:func:`hnbench.train.train` hands the trainer (which never imports the evaluation itself)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hnbench.data import load_dataset
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
    loaded: list[Any] = []

    def data() -> Any:
        if not loaded and config.eval_task == "retrieval":
            loaded.append(load_dataset(name, data_root=config.eval_data_root,
                                       protocol=config.eval_protocol, **config.eval_dataset_options))
        elif not loaded:  # another task loads its own data (a labelled image set)
            spec, options = config.eval_spec()
            loaded.append(TASKS.get(config.eval_task).target("load")(spec, **options))
        return loaded[0]

    def run(encoder: TrainableEncoder, *, device: str, epoch: int, output_dir: Path) -> dict[str, Any]:
        r = evaluate(encoder, data(), output_dir=output_dir, task=config.eval_task, device=device,
                     batch_size=config.eval_batch_size, num_workers=0, ci=False, use_cache=False, progress=False,
                     overwrite=True)  # the run owns its eval/
        rec: dict[str, Any] = {"dataset": r.dataset.get("name"), "protocol": r.dataset.get("protocol"),
                               "path": str(r.path) if r.path else None}
        if r.task != "retrieval":  # another task: its columns (``classification_top-1``) and main score
            task = r.task_spec()
            rec.update(task=r.task, main_score=r.main_score.get("value"),
                       **{c.replace(" ", "_"): task.value(r.metrics, c) for c in task.columns})
            logger.info("epoch %d: %s %s %.2f", epoch, r.task, task.main_score, task.main_value(r.metrics))
            return rec
        for d in ("t2i", "i2t"):
            for k in ("R@1", "R@5", "R@10", "MRR"):
                if k in r.metrics[d]:
                    rec[f"{d}_{k}"] = r.metrics[d][k]
        logger.info("epoch %d: t2i R@1 %.2f, i2t R@1 %.2f", epoch, rec.get("t2i_R@1", float("nan")),
                    rec.get("i2t_R@1", float("nan")))
        return rec

    return run
