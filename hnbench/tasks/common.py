"""What the pipelines of the tasks after retrieval share: the output check before encoding, the embedding
cache, and the result record (model, data, metrics, intervals, tokens, settings with the cache use, timings,
throughput)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from hnbench.results.record import EvalResult, check_target, write_result_pair
from hnbench.tasks import Task


class TaskRun:
    """One run of ``task`` on loaded ``data``: :meth:`start` before encoding, :meth:`finish` to record it."""

    def __init__(self, task: Task, encoder: Any, data: Any, settings: Any, output_dir: str | Path | None,
                 recorded: dict[str, Any], *, ctx: Any = None, t0: float | None = None,
                 timings: dict[str, float] | None = None, data_spec: Any = None):
        self.task, self.encoder, self.data, self.settings, self.output_dir = task, encoder, data, settings, output_dir
        self.recorded = {**settings.recorded(), "device": str(settings.device), **recorded}
        self.t0 = time.perf_counter() if t0 is None else t0
        self.timings = {} if timings is None else timings
        self.data_spec = data_spec
        self.dataset = {"name": data.name, "protocol": data.protocol, "fingerprint": data.fingerprint(),
                        "meta": data.meta}
        self.cache: Any = None
        from hnbench.evaluation.throughput import ran_before

        self.warm = ran_before(encoder)  # asked before encoding: whether the timed pass is warm

    def start(self) -> Any:
        """Refuse an output that would replace another result (before encoding; checked again when
        writing); open and return the embedding cache (None with ``use_cache`` off)."""
        from hnbench.evaluation.cache import EmbeddingCache  # imports numpy: only to run

        s = self.settings
        if self.output_dir is not None:
            check_target(EvalResult(model=self.encoder.info.to_dict(), metrics={}, task=self.task.name,
                                    settings=self.recorded, dataset=self.dataset), self.output_dir, s.overwrite)
        self.cache = EmbeddingCache.for_encoder(self.encoder, s.cache_dir, amp=s.amp) if s.use_cache else None
        return self.cache

    def finish(self, metrics: dict[str, Any], ci95: dict[str, Any], img: Any, txt: Any, *,
               ci95_method: dict[str, Any] | None = None, per_query: bytes | None = None,
               **dataset: Any) -> EvalResult:
        """The result of the run (``ci95_method``: how each interval was made, where the task records it;
        ``per_query``: the bytes of its per-item parquet, written beside the JSON as a pair; ``dataset``: counts
        added to the data record), written if there is an output."""
        from hnbench.evaluation.throughput import throughput_record

        self.timings.update(encode_images=img.seconds, encode_texts=txt.seconds,
                            total=time.perf_counter() - self.t0)
        data = self.data
        result = EvalResult(
            model=self.encoder.info.to_dict(), task=self.task.name, metrics={self.task.groups[0]: metrics}, ci95=ci95,
            ci95_method=ci95_method or {},
            dataset={**self.dataset, "n_images": data.n_images, **dataset, "source": data.source,
                     "skipped": {k: len(v) for k, v in data.skipped.items()},
                     **({"spec": self.data_spec.recorded()} if self.data_spec is not None else {})},
            tokens=token_stats(txt.lengths, self.encoder.info.context_length),
            settings={**self.recorded, "cache": self.cache is not None,
                      "encoding": {"cache_key": self.cache.key if self.cache else None,
                                   "encoded": {"images": img.n_encoded, "texts": txt.n_encoded},
                                   "cached": {"images": img.n_cached, "texts": txt.n_cached}}},
            timings={k: round(v, 4) for k, v in self.timings.items()},
            throughput=throughput_record(self.encoder, (img.n_encoded, img.seconds), (txt.n_encoded, txt.seconds),
                                         self.settings, self.recorded["device"], warm=self.warm))
        if self.output_dir is not None:
            write_result_pair(result, self.output_dir, per_query, overwrite=self.settings.overwrite)
        return result


def token_stats(lengths: np.ndarray, context_length: int) -> dict[str, Any]:
    """Caption lengths in tokens (incl. start/end) and how many the context length truncates."""
    n_trunc = int((lengths > context_length).sum())
    return {
        "context_length": int(context_length), "mean": float(lengths.mean()), "median": float(np.median(lengths)),
        "p95": float(np.percentile(lengths, 95)), "max": int(lengths.max()), "n_truncated": n_trunc,
        "n_texts": len(lengths),
        "share_truncated": n_trunc / len(lengths), "over_77": int((lengths > 77).sum()),
        "over_248": int((lengths > 248).sum()),
    }
