"""StructXLIP's objective as term functions (``frameworks.md`` §3.1, §3.7 item 2–3, §4).

Follows intelligolabs/StructXLIP @bd63274: ``structxlip/losses.py`` (terms, chunk spans, weight schedule),
``structxlip/train.py`` (total, logit-scale clamp) and ``plug_and_play_loss.py``. With v the RGB image
embedding, e the global edge-map embedding, e_{b,k} the K edge-crop embeddings (with a validity mask),
t the caption and t̃ the lexicon-filtered caption (:mod:`hnbench.train.terms.lexicon`)::

    L = λ_g·L_org + λ_SC(e)·L_SC + λ_RGB(e)·L_RGB + λ_LSC(e)·L_LSC

- L_org: symmetric InfoNCE of (v, t) — the term L_HN replaces (``loss="hn"``):
  :func:`hnbench.train.objectives.global_term` (spec §3.1 item 1, ``structxlip/train.py``);
- L_SC: symmetric InfoNCE of (e, t̃) over the images with an edge map, the scale detached;
- L_RGB: mean over those images of 1 − cos(v, e);
- L_LSC: multi-positive InfoNCE of caption chunks against all valid edge crops of the batch, scale
  min(s/τ, 100), image b's own valid crops the positives;
- λ(e): per-epoch cosine decay to a floor (:func:`schedule_factor`); log s clamped to [0, 3.5] after every
  optimiser step (the run's ``max_logit_scale`` = e^3.5, as the StructXLIP recipes set it).

Corrected behaviour by default, the authors' quirks behind compat options (spec §3.1 "Quirks"): chunks pool
the *pre*-final-LayerNorm states of the text they were cut from (the filtered caption); compat: the states
are already LayerNormed before the final LayerNorm is applied again (``compat_double_ln``), and the
spans index the unfiltered caption's states (``compat_span_shift``).

UNVERIFIED (spec §3, §6): the edge detector and its parameters; the paper's λ's and K; whether the HN-CLIP
paper also put the Ḡ margin on L_SC (a switch here, Ḡ from t̃); the authors' ε = 1e-8 before normalising is
not reproduced (``F.normalize`` is used).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hnbench.distributed import DistContext
from hnbench.registry import LOSSES
from hnbench.train.losses import as_scale, compute_dtype, duplicate_mask, hn_clip_loss
from hnbench.train.objective_options import StructXLIPOptions
from hnbench.train.terms import gather_all

__all__ = ["STRUCTXLIP_TERMS", "StructXLIPOptions", "chunk_spans", "chunk_embeddings",
           "local_structure_loss", "local_structure_term", "rgb_structure_loss", "schedule_factor", "structure_loss",
           "structxlip_weights"]

DEFAULTS = StructXLIPOptions()  # the default options of the functions below

STRUCTXLIP_TERMS = ("global", "structure", "rgb_structure", "local_structure")

Head = Callable[[Tensor], Tensor]


def _has_edges(has_edge: Tensor, b: int) -> Tensor:
    if has_edge.shape != (b,):
        raise ValueError(f"has_edge must be ({b},), got {tuple(has_edge.shape)}")
    return has_edge.bool()


def structure_loss(edge: Tensor, filtered_text: Tensor, has_edge: Tensor, logit_scale: Tensor | float, *,
                   loss: str = "infonce", gamma: float = 0.5,
                   options: StructXLIPOptions = DEFAULTS, context: DistContext | None = None,
                   filtered_tokens: Tensor | None = None) -> Tensor:
    """L_SC (spec §3.1 item 2; ``compute_structure_centric_loss`` in ``structxlip/losses.py``): symmetric
    InfoNCE of s̄·e t̃ᵀ on the images with an edge map (``has_edge``), s̄ = s detached; 0 (still attached to the
    graph) when none has one. L_HN (Ḡ from t̃) only with ``loss="hn"`` and ``structure_hn``. Data
    parallel: the global subset's loss on every rank (:func:`hnbench.train.terms.gather_all`).

    With ``filtered_tokens`` (this rank's filtered captions' token ids) and ``mask_duplicates``, pairs
    whose filtered captions are identical are no negatives of each other (spec §3.6: with colours removed,
    synthdense's colour variants filter to the same text); without such a pair the loss is unchanged, bit for bit."""
    keep = _has_edges(has_edge, edge.shape[0]).to(edge.device)
    edge, filtered_text, keep = gather_all(context, edge, filtered_text, keep, grad=(True, True, False))
    if not bool(keep.any()):
        return (edge.sum() * 0).to(compute_dtype(edge, filtered_text))
    s = logit_scale.detach() if isinstance(logit_scale, Tensor) else logit_scale
    g = gamma if LOSSES.entry(loss).uses_g and options.structure_hn else 0.0
    mask = None
    if filtered_tokens is not None and options.mask_duplicates:
        (tokens,) = gather_all(context, filtered_tokens, grad=(False,))
        same = duplicate_mask(None, tokens[keep].cpu())
        mask = same.to(edge.device) if bool(same.any()) else None
    return hn_clip_loss(edge[keep], filtered_text[keep], s, g, mask=mask)


def rgb_structure_loss(image: Tensor, edge: Tensor, has_edge: Tensor, *, context: DistContext | None = None) -> Tensor:
    """L_RGB (spec §3.1 item 3; ``compute_rgb_structure_consistency_loss``): mean over the images with an edge
    map of 1 − cos(v, e); 0 (attached) when none has one. Data parallel as :func:`structure_loss`."""
    keep = _has_edges(has_edge, image.shape[0]).to(image.device)
    image, edge, keep = gather_all(context, image, edge, keep, grad=(True, True, False))
    dtype = compute_dtype(image, edge)
    if not bool(keep.any()):
        return (image.sum() * 0 + edge.sum() * 0).to(dtype)
    cos = F.cosine_similarity(image[keep].to(dtype), edge[keep].to(dtype), dim=-1)
    return (1 - cos).mean()


def _window(n_words: int, base: int) -> int:
    """Chunk width for a clause of ``n_words`` words (spec §3.1 item 4): 2 up to 4 words, then base, +1, +2,
    +3 up to 10, 20, 40 and beyond."""
    if n_words <= 4:
        return 2
    return base + sum(n_words > limit for limit in (10, 20, 40))


def chunk_spans(caption: str, encode: Callable[[str], list[int]], *, window: int = 3, stride: int = 1,
                max_chunks: int = 64, context_length: int | None = None) -> list[tuple[int, int]]:
    """Token spans [start, end) (SOT at 0) of the caption's word-window chunks (spec §3.1 item 4;
    ``adaptive_global_chunk_spans`` in ``structxlip/losses.py``).

    Words are ``\\b\\w+\\b`` runs; clauses end at each run of ``.,;!?``; a clause of n words gives windows of
    :func:`_window` words every ``stride`` words (a clause shorter than its window gives none). The authors
    map characters to tokens with a fast tokenizer's offsets; open_clip's BPE has none, so a position is
    1 + the token count of the caption up to it (``encode``: BPE without SOT/EOT; it tokenises each word on
    its own, spec §3.7 item 2). Spans past ``context_length`` − 1 (the EOT) are dropped. As read, not pinned:
    a window that starts at the word after an apostrophe ("don't" → "don", "t") starts one token late, as
    BPE keeps "'t" whole (the "t" has no token of its own)."""
    words = list(re.finditer(r"\b\w+\b", caption))
    if not caption.strip() or not words:
        return []
    ends = [m.end() for m in re.finditer(r"[.,;!?]+", caption)]
    if not ends or ends[-1] < len(caption):
        ends.append(len(caption))
    cache: dict[int, int] = {}

    def position(char: int) -> int:
        if char not in cache:
            cache[char] = 1 + (len(encode(caption[:char])) if caption[:char].strip() else 0)
        return cache[char]

    spans: list[tuple[int, int]] = []
    w = 0
    for clause_end in ends:
        first = w
        while w < len(words) and words[w].start() < clause_end:
            w += 1
        n = w - first
        if n <= 0:
            continue
        size = _window(n, window)
        for i in range(first, w - size + 1, stride):
            start, end = position(words[i].start()), position(words[i + size - 1].end())
            if end > start and (context_length is None or end <= context_length - 1):
                spans.append((start, end))
            if len(spans) >= max_chunks:
                return spans
    return spans


def chunk_embeddings(states: Tensor, spans: Sequence[tuple[int, int]], text_ln: nn.Module | Head,
                     text_proj: Head, *, options: StructXLIPOptions = DEFAULTS) -> Tensor:
    """(C, D) normalised chunk embeddings of one caption (spec §3.1 item 4; ``compute_local_structure_centric_
    loss``): per span the softmax(‖h‖)-weighted sum of the token states h (weights without gradient), then the
    final LayerNorm and the projection. ``states`` (T, W) are *pre*-final-LN; with
    ``compat_double_ln`` the LayerNorm is applied to them first as well (the authors' HF
    ``last_hidden_state`` is already normalised)."""
    if options.compat_double_ln:
        states = text_ln(states)
    pooled = []
    for start, end in spans:
        if not 0 <= start < end <= states.shape[0]:
            raise ValueError(f"chunk span {(start, end)} is outside the {states.shape[0]} token states")
        h = states[start:end]
        with torch.no_grad():
            w = torch.softmax(h.norm(dim=-1), dim=0)
        pooled.append((h * w[:, None]).sum(dim=0))
    out = text_proj(text_ln(torch.stack(pooled)))
    return F.normalize(out.to(compute_dtype(out)), dim=-1)


def local_structure_loss(chunks: Sequence[Tensor], crops: Tensor, crop_valid: Tensor, logit_scale: Tensor | float,
                         *, options: StructXLIPOptions = DEFAULTS,
                         context: DistContext | None = None) -> Tensor:
    """L_LSC (spec §3.1 item 4; ``compute_local_structure_centric_loss``): for image b's chunks c
    (``chunks[b]``, (C_b, D) normalised, possibly empty) and the edge crops ``crops`` (B, K, D) with
    ``crop_valid`` (B, K)::

        ℓ(c) = −log Σ_{k valid, own} exp(s_eff·cos(c, e_{b,k})) / Σ_{(b',k) valid} exp(s_eff·cos(c, e_{b',k}))

    s_eff = min(s/τ, 100) (gradient into s below the cap). Invalid crops are in neither sum. Mean over the
    chunks, then over the images with chunks and a valid crop; 0 (attached) when there is none. Data parallel:
    every rank's chunks (padded to ``max_chunks``) and crops gathered, the global loss on every rank."""
    b, k = crop_valid.shape
    if crops.ndim != 3 or crops.shape[:2] != (b, k) or len(chunks) != b:
        raise ValueError(f"need (B, K, D) crops matching a (B, K) mask and B chunk sets, got "
                         f"{tuple(crops.shape)}, {tuple(crop_valid.shape)} and {len(chunks)}")
    if context is not None and context.enabled:
        n = options.max_chunks
        counts = torch.tensor([c.shape[0] for c in chunks], device=crops.device)
        if bool((counts > n).any()):
            raise ValueError(f"an image has more than max_chunks = {n} chunks")
        padded = torch.stack([F.pad(c, (0, 0, 0, n - c.shape[0])) for c in chunks])
        padded, counts, crops, crop_valid = gather_all(context, padded, counts, crops, crop_valid,
                                                      grad=(True, False, True, False))
        chunks = [padded[i, :int(counts[i])] for i in range(padded.shape[0])]
        b = crop_valid.shape[0]
    dtype = compute_dtype(crops, *chunks)
    valid = crop_valid.bool().to(crops.device).reshape(-1)
    flat = F.normalize(crops.reshape(b * k, -1).to(dtype), dim=-1)
    s = as_scale(logit_scale, dtype, crops.device)
    s_eff = (s / options.chunk_tau).clamp(max=100.0)
    per_image = []
    for i in range(b):
        own = torch.zeros(b * k, dtype=torch.bool, device=crops.device)
        own[i * k:(i + 1) * k] = crop_valid[i].bool().to(crops.device)
        if chunks[i].shape[0] == 0 or not bool(own.any()):
            continue
        logits = s_eff * (chunks[i].to(dtype) @ flat.T)
        log_all = logits.masked_fill(~valid[None], -math.inf).logsumexp(dim=1)
        log_own = logits.masked_fill(~own[None], -math.inf).logsumexp(dim=1)
        per_image.append((log_all - log_own).mean())
    if not per_image:
        return flat.sum() * 0 + s * 0
    return torch.stack(per_image).mean()


def local_structure_term(caption_states: Tensor, filtered_states: Tensor, filtered_captions: Sequence[str],
                         encode: Callable[[str], list[int]], text_ln: nn.Module | Head, text_proj: Head, crops: Tensor,
                         crop_valid: Tensor, logit_scale: Tensor | float, *,
                         options: StructXLIPOptions = DEFAULTS,
                         context: DistContext | None = None) -> Tensor:
    """L_LSC from the text tower's pre-final-LN states (spec §3.1 item 4, "Quirks"): chunks of each filtered
    caption (:func:`chunk_spans`) pooled from the filtered caption's own states ``filtered_states`` (B, T, W),
    or with ``compat_span_shift`` from the unfiltered caption's ``caption_states`` (the authors'
    mismatch); then :func:`chunk_embeddings` and :func:`local_structure_loss`."""
    o = options
    states = caption_states if o.compat_span_shift else filtered_states
    chunks = []
    for i, text in enumerate(filtered_captions):
        spans = chunk_spans(text, encode, window=o.chunk_window, stride=o.chunk_stride,
                            max_chunks=o.max_chunks, context_length=states.shape[1])
        chunks.append(chunk_embeddings(states[i], spans, text_ln, text_proj, options=o) if spans
                      else crops.new_zeros(0, crops.shape[-1], dtype=compute_dtype(crops)))
    return local_structure_loss(chunks, crops, crop_valid, logit_scale, options=o, context=context)


def schedule_factor(epoch: int, floor: float, *, warm: int = 1, decay_start: int = 1, decay_end: int = 8) -> float:
    """Per-epoch weight factor (spec §3.1 "Weight schedule"; ``cosine_anneal_warm_decay``): (e+1)/warm before
    ``warm``, 1 until ``decay_start``, then cosine from 1 to ``floor`` at ``decay_end``, ``floor`` after."""
    if epoch < warm:
        return (epoch + 1) / max(1, warm)
    if epoch < decay_start:
        return 1.0
    span = max(1e-6, decay_end - decay_start)
    progress = min(max(epoch - decay_start, 0), span) / span
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))


def structxlip_weights(epoch: int, options: StructXLIPOptions = DEFAULTS) -> dict[str, float]:
    """Each term's weight at ``epoch`` (0-based): λ_global (0 during the sketch epochs) and λ·factor(epoch, floor)
    for the three structure terms (spec §3.1 "Total", "Weight schedule")."""
    o = options

    def factor(floor: float) -> float:
        return schedule_factor(epoch, floor, warm=o.warm_epochs, decay_start=o.decay_start,
                               decay_end=o.decay_end)

    return {"global": 0.0 if epoch < o.sketch_epochs else o.global_weight,
            "structure": o.structure_weight * factor(o.structure_floor),
            "rgb_structure": o.rgb_weight * factor(o.rgb_floor),
            "local_structure": o.local_weight * factor(o.local_floor)}

