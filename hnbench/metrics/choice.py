"""The option-choice rules, written once: which option a model picks, the official conjunctions of Winoground and
SugarCrepe++, how per-item outcomes are aggregated, and their 95% intervals (pure numpy, no model, no data).

An *item* shows one or two images and K texts; ``s(I, T)`` is the cosine of the L2-normalised embeddings. A
:class:`Scoring` names the rule, the order in which the texts are compared (by *role*: ``caption``,
``negative_caption``, ``true_caption`` ... as the release names them, so stored scores are re-scored under another
protocol whatever order it compares them in), the correct option, the tie rule and the aggregation:

- tie rules (:data:`TIE_RULES`): ``strict_gt`` (ties wrong: the correct option must score strictly above every
  other: SugarCrepe's ``pos > neg``) and ``argmax_first`` (first option wins: numpy's and torch's ``argmax`` return
  the first of tied maxima, so a tie with an earlier option is wrong and with a later one right: ARO's VG-* with
  ``[false, true]`` (ties wrong) and its Order tasks with the true caption first (ties right), CLIP_benchmark's and
  MTEB's rules);
- aggregations (:class:`Aggregation`): micro (the mean over items) or macro by a field (each group's accuracy over
  all its items, groups in ``exclude`` or with fewer than ``min_count`` items left out, the unweighted mean of the
  rest: ARO's VG-Relation without the symmetric relations, VG-Attribution over pairs with ≥ 25 items).

Intervals (:func:`intervals`): a micro accuracy is a proportion of independent Bernoulli items, so its interval is
the exact Clopper–Pearson one; a macro average and Winoground's group score are bootstrapped over items (a macro
average within each kept group, so every group keeps its count: each group's resampled accuracy is a draw of
``Binomial(n_g, p̂_g) / n_g``, exactly what resampling its items gives).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from hnbench.metrics import bootstrap_mean_ci, clopper_pearson

__all__ = ["RULES", "TIE_RULES", "Aggregation", "Scoring", "aggregate", "intervals", "negative_pairs", "option_correct",
           "outcomes",
           "sugarcrepe_pp_outcomes", "winoground_outcomes"]

BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]

TIE_RULES = {
    "strict_gt": "ties wrong: the correct option must score strictly above every other option",
    "argmax_first": "first option wins: the pick is argmax over the options in the protocol's order, the first of "
                    "tied maxima (numpy / torch argmax), so a tie with an earlier option is wrong, with a later one "
                    "right",
}

#: rule → (the metrics it writes, its headline metric)
RULES: dict[str, tuple[tuple[str, ...], str]] = {
    "option": (("accuracy",), "accuracy"),
    "winoground": (("text", "image", "group"), "group"),
    "sugarcrepe-pp": (("ITT", "TOT", "P1-Neg", "P2-Neg"), "ITT"),
}

# metrics bootstrapped over items even under micro aggregation (the rule for Winoground's group score)
BOOTSTRAPPED = frozenset({"group"})


@dataclass(frozen=True)
class Aggregation:
    """How per-item outcomes become one number: micro (``field`` None) or macro by ``field`` (see the module)."""

    field: str | None = None
    exclude: tuple[str, ...] = ()
    min_count: int = 1
    exclude_source: str = ""  # where the exclusion list comes from (recorded)

    @property
    def kind(self) -> str:
        return "micro" if self.field is None else "macro"

    def describe(self) -> str:
        """The aggregation in words (recorded with every result)."""
        if self.field is None:
            return "micro: the mean over items"
        parts = [f"macro by {self.field}: each group's accuracy over all its items, then the unweighted mean"]
        if self.exclude:
            parts.append(f"{len(self.exclude)} groups excluded" + (f" ({self.exclude_source})" if self.exclude_source
                                                                    else ""))
        if self.min_count > 1:
            parts.append(f"groups with fewer than {self.min_count} items left out")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "field": self.field, "exclude": list(self.exclude), "min_count": self.min_count,
                "exclude_source": self.exclude_source, "text": self.describe()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Aggregation:
        return cls(field=d.get("field"), exclude=tuple(d.get("exclude") or ()), min_count=int(d.get("min_count", 1)),
                   exclude_source=str(d.get("exclude_source") or ""))


MICRO = Aggregation()


@dataclass(frozen=True)
class Scoring:
    """A protocol's rule: ``rule`` (a key of :data:`RULES`), for the ``option`` rule the texts' roles in the order
    they are compared (``options``) and the ``correct`` one, the ``tie_rule`` and the ``aggregation``."""

    rule: str
    options: tuple[str, ...] = ()
    correct: str = ""
    tie_rule: str = "strict_gt"
    aggregation: Aggregation = field(default_factory=Aggregation)

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ValueError(f"unknown rule {self.rule!r} (known: {', '.join(RULES)})")
        if self.tie_rule not in TIE_RULES:
            raise ValueError(f"unknown tie rule {self.tie_rule!r} (known: {', '.join(TIE_RULES)})")
        if self.rule == "option" and self.correct not in self.options:
            raise ValueError(f"the correct option {self.correct!r} is not one of {self.options}")

    @property
    def metrics(self) -> tuple[str, ...]:
        return RULES[self.rule][0]

    @property
    def headline(self) -> str:
        return RULES[self.rule][1]

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "options": list(self.options), "correct": self.correct, "tie_rule": self.tie_rule,
                "tie_rule_text": TIE_RULES[self.tie_rule], "headline": self.headline,
                "aggregation": self.aggregation.to_dict()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Scoring:
        return cls(rule=str(d["rule"]), options=tuple(d.get("options") or ()), correct=str(d.get("correct") or ""),
                   tie_rule=str(d.get("tie_rule", "strict_gt")),
                   aggregation=Aggregation.from_dict(d.get("aggregation") or {}))


def option_correct(scores: npt.ArrayLike, correct: npt.ArrayLike | int, tie_rule: str) -> tuple[BoolArray, BoolArray]:
    """``(right, tied)`` of each row of ``scores`` (N, K): the options' scores in the protocol's order, the correct
    option's index ``correct`` (one per row, or one for all).

    - ``strict_gt``: right iff ``s[c] > max_{k≠c} s[k]`` (ties wrong);
    - ``argmax_first``: right iff ``argmax_k s[k] = c`` with the first of tied maxima, i.e.
      ``s[c] > s[k]`` for every ``k < c`` and ``s[c] ≥ s[k]`` for every ``k > c``.

    ``tied``: the correct option's score equals another option's maximum (where the tie rule decides)."""
    s = np.asarray(scores, dtype=np.float64)
    n, k = s.shape
    c = np.broadcast_to(np.asarray(correct, dtype=np.int64), (n,))
    if tie_rule not in TIE_RULES:
        raise ValueError(f"unknown tie rule {tie_rule!r}")
    rows = np.arange(n)
    mine = s[rows, c][:, None]
    others = np.ones((n, k), dtype=bool)
    others[rows, c] = False
    best_other = np.where(others, s, -np.inf).max(axis=1) if k > 1 else np.full(n, -np.inf)
    tied: BoolArray = np.asarray(best_other == mine[:, 0], dtype=bool)
    if tie_rule == "strict_gt":
        return np.asarray(mine[:, 0] > best_other, dtype=bool), tied
    before = np.arange(k)[None, :] < c[:, None]
    right = np.where(before, mine > s, mine >= s) | ~others  # the correct option against itself: no constraint
    return np.asarray(right.all(axis=1), dtype=bool), tied


def winoground_outcomes(s: npt.ArrayLike, tie_rule: str = "strict_gt") -> tuple[dict[str, BoolArray], BoolArray]:
    """Winoground's scores of each item from ``s`` (N, 2, 2), ``s[:, i, j] = s(I_i, C_j)`` (caption j describes image
    j), and whether any comparison tied:

    - text score:  ``s(C0,I0) > s(C1,I0)  ∧  s(C1,I1) > s(C0,I1)`` (each image picks its caption);
    - image score: ``s(C0,I0) > s(C0,I1)  ∧  s(C1,I1) > s(C1,I0)`` (each caption picks its image);
    - group score: text ∧ image.

    ``strict_gt`` is the paper's rule (strict ``>``, ties wrong). ``argmax_first`` is CLIP_benchmark's and MTEB's
    (``argmax`` over the 2×2 matrix's rows and columns): a tie on image 0 / caption 0 counts as right, on image 1 /
    caption 1 as wrong."""
    m = np.asarray(s, dtype=np.float64)
    t0, a = option_correct(m[:, 0, :], 0, tie_rule)  # image 0 picks among the captions
    t1, b = option_correct(m[:, 1, :], 1, tie_rule)
    i0, c = option_correct(m[:, :, 0], 0, tie_rule)  # caption 0 picks among the images
    i1, d = option_correct(m[:, :, 1], 1, tie_rule)
    text, image = t0 & t1, i0 & i1
    return {"text": text, "image": image, "group": text & image}, a | b | c | d


def sugarcrepe_pp_outcomes(image_text: npt.ArrayLike, text_text: npt.ArrayLike,
                           tie_rule: str = "strict_gt") -> tuple[dict[str, BoolArray], BoolArray]:
    """SugarCrepe++'s scores of each item from ``image_text`` (N, 3) = ``s(I, P1), s(I, P2), s(I, N)`` and
    ``text_text`` (N, 3) = ``s(P1, P2), s(P1, N), s(P2, N)`` (text embeddings only), and whether any comparison tied:

    - ITT (image-to-text, the headline): ``s(I,P1) > s(I,N)  ∧  s(I,P2) > s(I,N)``;
    - TOT (text-only): ``s(P1,P2) > s(P1,N)  ∧  s(P1,P2) > s(P2,N)``;
    - P1-Neg: ``s(I,P1) > s(I,N)``; P2-Neg: ``s(I,P2) > s(I,N)`` (the diagnostics).

    All strict (``strict_gt``, the official ``test_Variants_CLIP.py``): a record whose P1 equals N scores wrong on ITT
    and P1-Neg whatever the model."""
    it, tt = np.asarray(image_text, dtype=np.float64), np.asarray(text_text, dtype=np.float64)
    p1, t1 = option_correct(it[:, [0, 2]], 0, tie_rule)
    p2, t2 = option_correct(it[:, [1, 2]], 0, tie_rule)
    tot_a, t3 = option_correct(tt[:, [0, 1]], 0, tie_rule)
    tot_b, t4 = option_correct(tt[:, [0, 2]], 0, tie_rule)
    return {"ITT": p1 & p2, "TOT": tot_a & tot_b, "P1-Neg": p1, "P2-Neg": p2}, t1 | t2 | t3 | t4


def outcomes(scoring: Scoring, image_text: npt.ArrayLike, text_text: npt.ArrayLike | None,
             text_roles: Sequence[str]) -> tuple[dict[str, BoolArray], BoolArray]:
    """Every metric's per-item outcome under ``scoring`` and the items where a comparison tied, from the stored
    scores: ``image_text`` (N, n_images, n_texts) with the texts in ``text_roles`` order, ``text_text`` (N, pairs) the
    text–text scores of the pairs ``(j, k), j < k`` in that order (the SugarCrepe++ rule only)."""
    it = np.asarray(image_text, dtype=np.float64)
    roles = list(text_roles)
    if scoring.rule == "option":
        missing = [r for r in scoring.options if r not in roles]
        if missing:
            raise ValueError(f"the scores have no text {missing[0]!r} (their texts: {roles})")
        order = [roles.index(r) for r in scoring.options]
        right, tied = option_correct(it[:, 0, order], scoring.options.index(scoring.correct), scoring.tie_rule)
        return {"accuracy": right}, tied
    if scoring.rule == "winoground":
        return winoground_outcomes(it, scoring.tie_rule)
    if text_text is None:
        raise ValueError("the SugarCrepe++ rule needs the text–text scores")
    return sugarcrepe_pp_outcomes(it[:, 0, :], text_text, scoring.tie_rule)


def negative_pairs(scoring: Scoring, text_roles: Sequence[str]) -> list[tuple[int, int]]:
    """The (positive, negative) text pairs of an item under ``scoring``, as positions in ``text_roles``: what each
    rule asks a model to tell apart (``hnbench hardness`` measures how close they are in a text encoder).

    - ``option``: the correct option against every other option;
    - ``winoground``: its two captions, each the other's negative: ``(C0, C1)``;
    - ``sugarcrepe-pp``: each positive against the negative: ``(P1, N)``, ``(P2, N)``."""
    roles = list(text_roles)
    if scoring.rule == "option":
        missing = [r for r in scoring.options if r not in roles]
        if missing:
            raise ValueError(f"the texts have no {missing[0]!r} (their roles: {roles})")
        right = roles.index(scoring.correct)
        return [(right, roles.index(r)) for r in scoring.options if r != scoring.correct]
    if scoring.rule == "winoground":
        return [(0, 1)]
    return [(0, 2), (1, 2)]


@dataclass
class Aggregate:
    """One metric aggregated: its value (%), the micro accuracy beside a macro one, the groups."""

    value: float
    micro: float
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)  # macro: group → {accuracy, n, kept, why}
    kept: list[str] = field(default_factory=list)


def aggregate(right: npt.ArrayLike, groups: Sequence[str] | None, agg: Aggregation) -> Aggregate:
    """``right`` (N,) aggregated by ``agg`` in percent: micro ``100 · mean(right)``; macro ``100 · mean_g acc_g``
    over the groups ``g`` of ``groups`` (each item's value of ``agg.field``) that are not in ``agg.exclude`` and have
    at least ``agg.min_count`` items, ``acc_g`` the mean over all of group g's items."""
    r = np.asarray(right, dtype=bool)
    if r.size == 0:
        raise ValueError("no items to aggregate")
    micro = 100 * int(r.sum()) / r.size
    if agg.field is None:
        return Aggregate(micro, micro)
    if groups is None or len(groups) != r.size:
        raise ValueError(f"macro by {agg.field}: every item needs a {agg.field}")
    g = np.asarray(groups, dtype=object)
    excluded = set(agg.exclude)
    out: dict[str, dict[str, Any]] = {}
    kept: list[str] = []
    for name in sorted(set(g.tolist())):
        mask = g == name
        n = int(mask.sum())
        why = "excluded" if name in excluded else f"fewer than {agg.min_count} items" if n < agg.min_count else ""
        out[name] = {"accuracy": 100 * int(r[mask].sum()) / n, "n": n, "kept": not why, **({"why": why} if why else {})}
        if not why:
            kept.append(name)
    if not kept:
        raise ValueError(f"macro by {agg.field}: no group is left ({len(out)} groups, all excluded or with fewer "
                         f"than {agg.min_count} items)")
    value = float(np.mean([out[k]["accuracy"] for k in kept]))
    return Aggregate(value, micro, out, kept)


def intervals(right: npt.ArrayLike, groups: Sequence[str] | None, agg: Aggregation, metric: str, *,
              n_boot: int = 1000, alpha: float = 0.05, seed: int = 0) -> tuple[tuple[float, float], str]:
    """The (1 − alpha) interval of ``metric``'s aggregate, in percent, and how it was made:
    ``"clopper-pearson"`` for a micro accuracy (:func:`hnbench.metrics.clopper_pearson`), ``"bootstrap"`` for a
    macro average (groups resampled within, see the module) and for the metrics in :data:`BOOTSTRAPPED`
    (:func:`hnbench.metrics.bootstrap_mean_ci`, items resampled)."""
    r = np.asarray(right, dtype=bool)
    if agg.field is not None:
        a = aggregate(r, groups, agg)
        rng = np.random.default_rng(seed)
        draws = np.zeros(n_boot, dtype=np.float64)
        for name in a.kept:
            n, p = a.groups[name]["n"], a.groups[name]["accuracy"] / 100
            draws += rng.binomial(n, p, size=n_boot) / n
        draws = 100 * draws / len(a.kept)
        lo, hi = np.percentile(draws, [100 * alpha / 2, 100 * (1 - alpha / 2)])
        return (float(lo), float(hi)), "bootstrap"
    if metric in BOOTSTRAPPED:
        lo_a, hi_a = bootstrap_mean_ci(r[:, None], n_boot=n_boot, alpha=alpha, seed=seed)
        return (float(lo_a[0]), float(hi_a[0])), "bootstrap"
    return clopper_pearson(int(r.sum()), int(r.size), alpha), "clopper-pearson"
