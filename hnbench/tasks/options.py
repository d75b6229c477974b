"""The built-in tasks' options: one frozen dataclass per task that has any, named by its
:data:`hnbench.registry.TASKS` entry (``options=``), each field declared once with :func:`hnbench.settings.option`
(help, choices, bounds, ``record`` / ``identity``).

From these the CLI generates each task's flags (``--<prefix>-<field>``; a field declaring ``flag`` keeps it:
``--templates``, ``--prefixes``), ``hnbench.evaluate`` takes them as keywords (``templates="simple"``) or as
``task_options``, and a run holds the chosen task's as ``EvalSettings.task_options``. A field declared
``record="if_set"`` is written to a result's ``settings`` under its flat key when it differs from its default, and
one declared ``identity`` is part of the result file's name: so the results written before these options moved
here keep their names and bytes. This module imports no torch: the CLI reads it to build its flags.
"""

from __future__ import annotations

from dataclasses import dataclass

from hnbench.settings import option

__all__ = ["MonotonicityOptions", "ZeroShotOptions"]


@dataclass(frozen=True)
class ZeroShotOptions:
    """Zero-shot classification's options (``--task zeroshot``, :mod:`hnbench.tasks.zeroshot`)."""

    templates: str = option("openai", flag="--templates", record="if_set", identity=True,
                            help="prompt templates: openai (open_clip's 80 OPENAI_IMAGENET_TEMPLATES, the default), "
                                 "simple (its SIMPLE_IMAGENET_TEMPLATES) or a file, one template with {} per line")


@dataclass(frozen=True)
class MonotonicityOptions:
    """Caption-length monotonicity's options (``--task monotonicity``, :mod:`hnbench.tasks.monotonicity`)."""

    prefixes: str = option("sentences", flag="--prefixes", record="if_set", identity=True,
                           choices=("sentences", "captions"),
                           help="a list's prefixes: sentences (each caption's cumulative sentences, the default) or "
                                "captions (each image's captions in order, HiMo-Docci)")
