"""Framework objectives' terms as pure tensor functions (issue 22; ``shared/spec/frameworks.md`` §2, §3, §4).

Each term is a function of tensors and a small frozen options dataclass (fields made with
:func:`hnbench.settings.option`, so flags and recipe keys can be generated from them) returning a
differentiable scalar tensor; nothing here holds module state. The objective contract (``hnbench.train``)
registers and weights them.

- :mod:`~hnbench.train.terms.geometry`: a segment box in image pixels → the ViT patch tokens it touches.
- :mod:`~hnbench.train.terms.goal`: GOAL's global, segment, patch-pooling and text-pooling terms.
- :mod:`~hnbench.train.terms.structxlip`: StructXLIP's edge-map, RGB–edge and chunk terms, its per-epoch
  weight schedule and logit-scale clamp.
- :mod:`~hnbench.train.terms.lexicon`: StructXLIP's lexicon filter (colours, materials, textures, insect terms).
"""

from __future__ import annotations
