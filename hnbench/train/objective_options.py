"""The built-in objectives' options: one frozen dataclass per objective, named by its
:data:`hnbench.registry.OBJECTIVES` entry (``options=``), each field declared once with
:func:`hnbench.settings.option` (help, bounds, group).

From these the CLI generates each objective's flags (``--<prefix>-<field>``: ``--finelip-margin``; a field
declaring ``flag`` keeps it: ``--filter-colors``), a recipe reads its table (``[finelip] margin = 0.2``; the
flat ``finelip_margin = 0.2`` of older recipes too) and ``--set finelip.margin=0.3`` sets one; the run holds
the chosen objective's as ``TrainConfig.objective_options``. The term functions take them as they are
(:mod:`hnbench.train.terms`). This module imports no torch: the CLI reads it to build its flags.
"""

from __future__ import annotations

from dataclasses import dataclass

from hnbench.settings import option

__all__ = ["FilterOptions", "FineLIPOptions", "GoalOptions", "StructXLIPOptions", "StructXLIPTermOptions"]


@dataclass(frozen=True)
class FineLIPOptions:
    """FineLIP's options (``--objective finelip``, :mod:`hnbench.train.objectives.finelip`)."""

    swap: str = option("add-global", group="objective", choices=("add-global", "margin-hinge"),
                       help="FineLIP's L_HN swap: add-global (the hinge plus --loss on the CLS/EOT "
                            "features) or margin-hinge (margin m + γḠ in the hinge; --loss infonce: m)")
    margin: float = option(0.2, minimum=0, group="objective", help="FineLIP's hinge margin m")
    max_violation: bool = option(False, group="objective",
                                 help="FineLIP's hinge on each row's and column's hardest negative only")
    num_patches: int = option(196, minimum=1, group="objective",
                              help="FineLIP's num_patches: K = ⌊0.2 · it⌋ aggregated tokens (authors: 196)")
    lr: float = option(2e-4, above=0, group="objective",
                       help="peak learning rate of FineLIP's aggregation module (same schedule)")
    weight_decay: float | None = option(None, minimum=0, group="objective",
                                        help="weight decay of FineLIP's module (default: --weight-decay)")


@dataclass(frozen=True)
class GoalOptions:
    """GOAL's weights and fidelity switches (``--objective goal``; spec §2.1, §2.4, §2.7)."""

    global_weight: float = option(1.0, minimum=0, group="GOAL",
                                  help="GOAL: weight of the global image–long-caption term L_org (authors: 1)")
    segment_weight: float = option(0.5, minimum=0, group="GOAL",
                                   help="GOAL: weight of the crop–sentence InfoNCE L_seg (authors: 0.5)")
    patch_weight: float = option(1.0, minimum=0, group="GOAL",
                                 help="GOAL: weight of the box-pooled patch term L_patch (authors: 1)")
    text_weight: float = option(1.0, minimum=0, group="GOAL",
                                help="GOAL: weight of the span-pooled text term L_text (authors: 1)")
    segment_hn: bool = option(False, group="GOAL",
                              help="GOAL: with --loss hn, L_HN on the segment term too (Ḡ from the "
                                   "sentence embeddings; which one the paper swapped is unverified)")
    compat: bool = option(False, group="GOAL",
                          help="GOAL: reproduce the authors' quirks (patch size hard-coded 16, per-axis box "
                               "scale, sentence span one token late); default: exact mapping")


@dataclass(frozen=True)
class StructXLIPTermOptions:
    """StructXLIP's weights, schedule, chunking, fidelity switches and edge crops (spec §3.1, §3.4; argparse
    defaults — the shipped DOCCI script uses λ_SC 0.25, λ_RGB 0.001, λ_LSC 0.001)."""

    global_weight: float = option(1.0, minimum=0, group="StructXLIP",
                                  help="StructXLIP: weight λ_global of the RGB–caption term L_org")
    structure_weight: float = option(0.5, minimum=0, group="StructXLIP",
                                     help="StructXLIP: weight λ_SC of the edge-map–filtered-caption term")
    rgb_weight: float = option(0.05, minimum=0, group="StructXLIP",
                               help="StructXLIP: weight λ_RGB of the RGB–edge cosine term")
    local_weight: float = option(0.1, minimum=0, group="StructXLIP",
                                 help="StructXLIP: weight λ_LSC of the chunk–edge-crop term")
    structure_floor: float = option(0.7, minimum=0, maximum=1, group="StructXLIP",
                                    help="StructXLIP: floor of λ_SC's per-epoch cosine decay")
    rgb_floor: float = option(0.5, minimum=0, maximum=1, group="StructXLIP",
                              help="StructXLIP: floor of λ_RGB's per-epoch cosine decay")
    local_floor: float = option(0.4, minimum=0, maximum=1, group="StructXLIP",
                                help="StructXLIP: floor of λ_LSC's per-epoch cosine decay")
    warm_epochs: int = option(1, minimum=1, group="StructXLIP",
                              help="StructXLIP: epochs of linear weight warm-up ((e+1)/warm)")
    decay_start: int = option(1, minimum=0, group="StructXLIP",
                              help="StructXLIP: first epoch of the cosine weight decay")
    decay_end: int = option(8, minimum=1, group="StructXLIP", help="StructXLIP: epoch the decay reaches its floor")
    sketch_epochs: int = option(0, minimum=0, group="StructXLIP",
                                help="StructXLIP: first epochs with the structure terms only (λ_global 0)")
    chunk_tau: float = option(0.07, above=0, group="StructXLIP",
                              help="StructXLIP: chunk term temperature τ (scale min(s/τ, 100))")
    chunk_window: int = option(3, minimum=1, group="StructXLIP",
                               help="StructXLIP: base word window of the caption chunks")
    chunk_stride: int = option(1, minimum=1, group="StructXLIP", help="StructXLIP: chunk word stride")
    max_chunks: int = option(64, minimum=1, group="StructXLIP", help="StructXLIP: chunks per caption at most")
    structure_hn: bool = option(False, group="StructXLIP",
                                help="StructXLIP: with --loss hn, L_HN on L_SC too (Ḡ from the filtered "
                                     "captions; unverified what the paper did)")
    mask_duplicates: bool = option(True, group="StructXLIP",
                                   help="StructXLIP: in L_SC, mask the in-batch pairs whose filtered captions "
                                        "are identical (synthdense colour variants filter to one text)",
                                   off="StructXLIP: keep identical filtered captions as L_SC negatives "
                                       "(the authors' code)")
    compat_double_ln: bool = option(False, group="StructXLIP",
                                    help="StructXLIP: reproduce the authors' double final LayerNorm "
                                         "on chunk states")
    compat_span_shift: bool = option(False, group="StructXLIP",
                                     help="StructXLIP: reproduce the authors' chunk spans of the "
                                          "filtered caption indexing the unfiltered caption's states")
    top_k: int = option(3, minimum=1, group="StructXLIP",
                        help="StructXLIP: edge crops per image, the sidecar's best segments (argparse 3, "
                             "shipped script 2; fewer segments: the rest masked out)")


@dataclass(frozen=True)
class FilterOptions:
    """Which lexicons StructXLIP's filtered caption drops (spec §3.2; the shipped DOCCI script removes colours):
    :func:`hnbench.train.terms.lexicon.filter_caption`'s options, flagged ``--filter-*`` as they always were."""

    filter_colors: bool = option(True, group="StructXLIP", flag="--filter-colors",
                                 help="StructXLIP: drop colour words from the filtered caption (shipped script: on)",
                                 off="StructXLIP: keep colour words in the filtered caption")
    filter_materials: bool = option(False, group="StructXLIP", flag="--filter-materials",
                                    help="StructXLIP: drop material words too")
    filter_textures: bool = option(False, group="StructXLIP", flag="--filter-textures",
                                   help="StructXLIP: drop texture words too")
    filter_insect: bool = option(False, group="StructXLIP", flag="--filter-insect",
                                 help="StructXLIP: drop the insect-colour lexicon too (the authors' Insect data)")
    filter_min_words: int = option(2, minimum=1, group="StructXLIP", flag="--filter-min-words",
                                   help="StructXLIP: keep the caption unfiltered when fewer non-stop-words remain")

    def filter_options(self) -> FilterOptions:
        """Only the lexicon filter's options (what a run records of its filtered captions)."""
        return FilterOptions(**{name: getattr(self, name) for name in FilterOptions.__dataclass_fields__})


@dataclass(frozen=True)
class StructXLIPOptions(FilterOptions, StructXLIPTermOptions):
    """StructXLIP's options (``--objective structxlip``): its terms' (:class:`StructXLIPTermOptions`), then its
    lexicon filter's (:class:`FilterOptions`; the term functions and the filter take this class as it is)."""
