"""Query-conditioned (pairwise) scorers: models whose score of an (image, caption) pair is not a cosine of two
independent embeddings (FineLIP's fine-grained mode, :mod:`hnbench.models.finelip`; FLAIR's text-conditioned pooling,
:mod:`hnbench.models.flair`).

The contract (:class:`PairScorer`), offered by a model family (:meth:`hnbench.models.family.ModelFamily.pair_scorers`,
``{}`` for a dual encoder): per-image and per-caption **states** (batch-first tensors, e.g. token sets), computed
once per item, and a ``score`` of a block of captions against a block of images. The search over them is
:mod:`hnbench.search.pairwise`; their states are encoded by :func:`hnbench.evaluation.encode.encode_states`.

States are never cached (the embedding cache holds dual-encoder embeddings only; ``--rerank-top`` reads those from
it): a pairwise run encodes its states every time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from torch import Tensor

from hnbench.errors import ConfigError
from hnbench.models.base import Encoder

__all__ = ["COSINE", "CosineScorer", "PairScorer", "check_scorer", "offered", "pick"]

COSINE = "cosine"  # the dual encoder: today's path (embeddings, cosine, the search backends)


@runtime_checkable
class PairScorer(Protocol):
    """A query-conditioned scorer: states per item, then a score per (caption, image) pair."""

    name: str  # recorded in results, e.g. "finelip-finegrained"
    description: str  # one line for help / the results

    def image_state(self, pixels: Tensor) -> dict[str, Tensor]:
        """Per-image tensors, batch-first (e.g. token sets)."""
        ...

    def text_state(self, tokens: Tensor) -> dict[str, Tensor]:
        """Per-caption tensors, batch-first."""
        ...

    def score(self, text_state: dict[str, Tensor], image_state: dict[str, Tensor]) -> Tensor:
        """The (n_texts, n_images) block of scores, higher = better; the dicts are slices of the states."""
        ...


# -- the scorers a model offers ----------------------------------------------------------------------------
def offered(encoder: Encoder) -> dict[str, PairScorer]:
    """The pairwise scorers ``encoder``'s family offers for it (none: a dual encoder)."""
    from hnbench.models.family import family_of

    return family_of(encoder.info.arch).pair_scorers(encoder)


def _refusal(scorer: str, model: str, names: Sequence[str]) -> ConfigError:
    what = (f"it offers {', '.join([COSINE, *names])}" if names else
            f"it is a dual encoder: it offers {COSINE} only")
    return ConfigError(f"--scorer {scorer}: {model} has no such scorer; {what}")


def check_scorer(scorer: str, model: str, names: Sequence[str] | None) -> None:
    """Refuse (one line naming what the model offers) ``scorer`` where ``names`` (the pairwise scorers a model
    offers; None: not known before it loads) lacks it."""
    if scorer != COSINE and names is not None and scorer not in names:
        raise _refusal(scorer, model, names)


def pick(scorer: str, encoder: Encoder) -> PairScorer:
    """The pairwise scorer ``scorer`` of a loaded encoder, or the one-line refusal (before any encoding)."""
    found = offered(encoder)
    if scorer not in found:
        raise _refusal(scorer, encoder.info.arch + (f" ({encoder.info.pretrained})" if encoder.info.pretrained else ""),
                       sorted(found))
    return found[scorer]


# -- the dual encoder as a pairwise scorer (the degenerate case) --------------------------------------------
class CosineScorer:
    """The dual encoder behind the pairwise contract: states are the L2-normalised embeddings, the score their inner
    product (what the cosine path computes; the tests check the two agree)."""

    name = COSINE
    description = "dual encoder: cosine of the L2-normalised image and caption embeddings"

    def __init__(self, encoder: Encoder):
        self.encoder = encoder

    def image_state(self, pixels: Tensor) -> dict[str, Tensor]:
        return {"embedding": self.encoder.encode_images(pixels).float()}

    def text_state(self, tokens: Tensor) -> dict[str, Tensor]:
        return {"embedding": self.encoder.encode_texts(tokens).float()}

    def score(self, text_state: dict[str, Tensor], image_state: dict[str, Tensor]) -> Tensor:
        return text_state["embedding"] @ image_state["embedding"].T
