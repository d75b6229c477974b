"""Hardness analytics: how near-duplicate a caption set's negatives are, and where a model fails on them.

``hardness(data, model, ...)`` loads, encodes, measures and writes a JSON summary, PNG plots and a
Markdown report; :func:`analyze` does the statistics on embeddings you already have; :func:`compare`
puts several summaries side by side; :func:`choice_hardness` measures an option-choice set (a compositional
benchmark: each negative against its positive, and a choice result's accuracy by that). Definitions live in
:mod:`hnbench.hardness.stats`, :mod:`~hnbench.hardness.structure`, :mod:`~hnbench.hardness.recall` and
:mod:`~hnbench.hardness.choice`.
"""

from __future__ import annotations

from hnbench.hardness.analyze import analyze
from hnbench.hardness.captions import load_captions
from hnbench.hardness.choice import choice_hardness
from hnbench.hardness.outputs import compare
from hnbench.hardness.run import hardness
from hnbench.hardness.schema import SCHEMA_VERSION, HardnessArrays, HardnessReport, read_report, write_report
from hnbench.settings import DEFAULT_EDGES

__all__ = ["DEFAULT_EDGES", "SCHEMA_VERSION", "HardnessArrays", "HardnessReport", "analyze", "choice_hardness", "compare",
           "hardness",
           "load_captions", "read_report", "write_report"]
