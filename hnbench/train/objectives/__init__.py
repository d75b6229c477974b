"""The objective contract: an objective is a registered set of named, weighted terms.

A :class:`Term` is a function of (the batch inputs it declares, the towers' outputs, its options) → a
scalar. Its ``needs`` name the batch inputs the data pipeline must produce for it (:data:`INPUTS`); only
what the chosen terms declare is produced. A term may carry an extra trainable module with its own
AdamW parameter group (:class:`ExtraModule`) and a per-epoch weight schedule. Every term's value is
logged by name each step.

An objective is registered in :data:`hnbench.registry.OBJECTIVES` as a builder ``build(config) -> list[Term]``
with the dataclass of its options (:class:`~hnbench.registry.OptionsEntry`; the built-in ones:
:mod:`hnbench.train.objective_options`), which ``build`` reads as ``config.objective_options``; ``--objective``
picks it and ``--loss infonce|hn`` its global term (:func:`global_term`), so every framework runs with and
without L_HN from one flag.
"""

from hnbench.train.objectives.base import (
    INPUTS,
    ExtraModule,
    Term,
    TermInputs,
    check_inputs,
    global_term,
    ramp_first_epoch,
)

__all__ = ["INPUTS", "ExtraModule", "Term", "TermInputs", "check_inputs", "global_term", "ramp_first_epoch"]
