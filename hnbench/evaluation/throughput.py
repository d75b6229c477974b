"""Throughput of a run: images/s and captions/s of each tower, the model's parameters and FLOPs, the device and —
on a GPU of :data:`PEAK_TFLOPS` — the share of its peak reached. One record on every result
(``result.throughput``, :func:`throughput_record`), written by every task's run; shown in ``hnbench eval``'s footer
(:func:`footer`) and taken by the open_clip CSV export (:func:`open_clip_numbers`).

**Rates** are the items a tower ran through the model divided by the wall seconds of that tower's encode step
(reading and decoding the images or tokenizing the captions, the forward, copying the embeddings back): the time
the task records as ``timings.encode_images`` / ``encode_texts``, so searching and scoring are not in it. Items that
came from the embedding cache are not counted; a tower whose every item came from the cache has no rate
(``cached``: said in the note). ``warm`` says whether the encoder had already run a forward in this process before
the timed pass (a suite's second benchmark, a second ``evaluate`` of the same encoder object): the first pass of a
process also pays for loading kernels and allocating memory.

**FLOPs** are counted once per architecture by :class:`torch.utils.flop_counter.FlopCounterMode` on a real forward
of one image (a grey picture through the model's own image transform: its image size) and one caption that fills
the model's context (a long text through its tokenizer, truncated there), with ``nn.MultiheadAttention``'s fused
inference path off and the CPU's fused attention kernel given the formula torch has for the CUDA ones, so that the
attention's matrix products are counted on every device. The unit is the one open_clip's ``docs/model_profile.csv`` uses for its ``gflops``
columns (its ``src/training/profiler.py``, ``--profiler torch``, the default since open_clip#693): **FLOPs, two per
multiply-add**, counting matrix products, convolutions and attention only (not normalisations, activations,
softmax or embedding look-ups). fvcore's counts, which open_clip's earlier profile reported as ``gmacs``, are half
of these. open_clip ViT-B-32 at 224 px and 77 tokens counts 8.82 / 5.96 GFLOPs per image / caption, as its profile
lists. A caption's FLOPs are at the full context: where a family runs a batch only to its longest caption
(open_clip's causal towers, dynamically padded HF/sentence tokenizers) a caption shorter than the context costs less.

**Parameters** of each tower are those its forward reads (every parameter tensor an operation of the counted
forward takes as input), so they need no per-family rule: a parameter neither tower reads (open_clip's
``logit_scale``) is in the total only; one both read (tied weights) is in both.

The counts are cached per architecture — the model's name, framework, parameter count, embedding width, context
length and image preprocessing, never its weights — as one small JSON per architecture under
``<hnbench cache dir>/flops/`` (``$HNBENCH_CACHE``, :func:`hnbench.io.cache_dir`), written atomically; a file
that does not read back as the expected record (corrupt, edited, another format) is ignored and rewritten, never
executed or unpickled. Counting changes nothing of the model (its modules' train/eval flags are restored), of the
global RNG (forked) or of torch's attention settings (restored), so a run's numbers are those it had without it.

**Peak share** (GPU only): the FLOP rate a tower reached (its rate × its FLOPs per item) over the device's dense
peak at the run's compute precision (fp32: the non-tensor-core rate, as hnbench runs fp32 without TF32; bf16/fp16
weights or ``--amp``: the 16-bit tensor-core rate), from :data:`PEAK_TFLOPS`. A CPU, or a GPU the table does not
know, has ``peak_share`` None and a note saying so. The text share is an upper bound where batches are trimmed
(above).

This module imports torch only inside the counting functions: reading a result and its footer stays light.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import weakref
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hnbench.io import atomic_write_bytes, cache_dir, read_json_untrusted

if TYPE_CHECKING:  # hnbench.models imports torch: this module reads results without it
    from hnbench.models.base import Encoder

__all__ = ["COUNT_FORMAT", "FLOP_UNIT", "PEAK_TFLOPS", "architecture_key", "count_cache_dir", "count_model",
           "device_name", "footer", "model_counts", "open_clip_numbers", "peak_rate", "peak_share", "ran_before",
           "throughput_record"]

logger = logging.getLogger(__name__)

#: the format of a cached count; raised when the counting rule changes, so that older counts are recounted
COUNT_FORMAT = 1
FLOP_UNIT = ("FLOPs (torch.utils.flop_counter.FlopCounterMode: 2 per multiply-add; matrix products, convolutions "
             "and attention), the unit of open_clip's model_profile.csv gflops")
RATE_RULE = ("items run through the model / wall seconds of that tower's encode step (reading, decoding or "
             "tokenizing, forward, copying back); cached items not counted")

#: Dense peak TFLOP/s (no structured sparsity: half the datasheets' "with sparsity" figures) per GPU, from NVIDIA's
#: datasheets: ``fp32`` the non-tensor-core rate (hnbench runs fp32 without TF32), ``bf16`` / ``fp16`` the 16-bit
#: tensor-core rate with fp32 accumulation.
#: Keys are matched, in this order, as words of ``torch.cuda.get_device_name`` ("NVIDIA H100 80GB HBM3",
#: "NVIDIA A100-SXM4-80GB", "Tesla V100-SXM2-16GB"); the first key found wins, so a variant comes before its family.
PEAK_TFLOPS: dict[str, dict[str, float]] = {
    "H200 NVL": {"fp32": 60.0, "bf16": 835.0, "fp16": 835.0},
    "H200": {"fp32": 67.0, "bf16": 989.0, "fp16": 989.0},  # SXM
    "H100 PCIe": {"fp32": 51.0, "bf16": 756.0, "fp16": 756.0},
    "H100 NVL": {"fp32": 60.0, "bf16": 835.0, "fp16": 835.0},
    "H100": {"fp32": 67.0, "bf16": 989.0, "fp16": 989.0},  # SXM
    "A100": {"fp32": 19.5, "bf16": 312.0, "fp16": 312.0},  # SXM and PCIe alike
    "L40S": {"fp32": 91.6, "bf16": 362.0, "fp16": 362.0},
    "RTX 4090": {"fp32": 82.6, "bf16": 165.2, "fp16": 165.2},
    "V100": {"fp32": 15.7, "fp16": 125.0},  # SXM2 (PCIe: 14 / 112); no bf16 (hnbench's --amp autocasts to fp16)
}

# The side of the grey picture counted: any size does, the model's transform resizes and crops it to its own.
_PICTURE_SIDE = 512
# Encoders (by object) that have run a forward in this process: their next timed pass is warm.
_RAN: weakref.WeakSet[Any] = weakref.WeakSet()
_RAN_IDS: set[int] = set()  # an encoder that takes no weak reference


# --- warm or cold -----------------------------------------------------------------------------------------------
def ran_before(encoder: Any) -> bool:
    """Whether ``encoder`` has run a forward in this process (through a task's run, or a count): the run that
    asks before encoding is then warm."""
    try:
        return encoder in _RAN
    except TypeError:
        return id(encoder) in _RAN_IDS


def _mark_ran(encoder: Any) -> None:
    try:
        _RAN.add(encoder)
    except TypeError:
        _RAN_IDS.add(id(encoder))


# --- the device and its peak ------------------------------------------------------------------------------------
def device_name(device: Any) -> str:
    """The device as torch names it: ``cpu``, ``mps``, or a CUDA device's name (``NVIDIA H100 80GB HBM3``)."""
    import torch

    dev = torch.device(str(device))
    if dev.type == "cuda":
        return str(torch.cuda.get_device_name(dev))
    return dev.type


def _words(text: str) -> list[str]:
    return text.replace("-", " ").replace("_", " ").upper().split()


def peak_rate(name: str, compute: str) -> tuple[float | None, str]:
    """The dense peak TFLOP/s of device ``name`` at ``compute`` (``fp32``, ``bf16``, ``fp16``) and a note saying
    where it comes from, or (None, why not): a CPU, an unknown device, a precision the device lacks."""
    if name in ("cpu", "mps"):
        return None, (f"no peak share on {name}: hnbench's peak table lists GPUs only "
                      f"({', '.join(PEAK_TFLOPS)})")
    words = _words(name)
    for key, rates in PEAK_TFLOPS.items():
        want = _words(key)
        if any(words[i:i + len(want)] == want for i in range(len(words))):
            rate = rates.get(compute) or (rates.get("fp16") if compute == "bf16" else None)
            if rate is None:
                return None, f"{name}: no {compute} peak in hnbench's table"
            return rate, f"of {name}'s dense {compute} peak, {rate:g} TFLOP/s (hnbench's table, as {key})"
    return None, (f"unknown device {name!r}: no peak rate in hnbench's table ({', '.join(PEAK_TFLOPS)}), "
                  "so no peak share")


def peak_share(name: str, compute: str, images_per_s: float | None, captions_per_s: float | None,
               gflops: Mapping[str, Any] | None) -> tuple[dict[str, float | None] | None, str]:
    """The share of device ``name``'s peak at ``compute`` each tower reached (its rate × its GFLOPs per item over
    the peak; None for a tower without a rate or a count), and the note saying against what; (None, why) where
    the device has no peak in :data:`PEAK_TFLOPS`."""
    rate, note = peak_rate(name, compute)
    if rate is None:
        return None, note
    g = gflops or {}
    share = {tower: round(per_s * g[tower] * 1e9 / (rate * 1e12), 6) if per_s is not None and g.get(tower) else None
             for tower, per_s in (("image", images_per_s), ("text", captions_per_s))}
    return share, (f"{note}; the rate × the FLOPs per item; the text share is at the full context (an upper bound "
                   "where batches run trimmed to their longest caption)")


def _compute_precision(settings: Any) -> str:
    """The precision the matrix products ran at: the weights' (``--precision``), or 16-bit under ``--amp``
    (bf16 where the device has it, as :func:`hnbench.evaluation.encode._autocast` picks; fp16 weights stay fp16)."""
    precision = str(getattr(settings, "precision", "fp32"))
    return "bf16" if getattr(settings, "amp", False) and precision == "fp32" else precision


# --- counting ---------------------------------------------------------------------------------------------------
def architecture_key(encoder: Encoder) -> dict[str, Any]:
    """What the counts depend on: the architecture (name, framework, parameter count, embedding width), the
    context length and the image preprocessing (its image size); not the weights."""
    from hnbench.evaluation.cache import _describe_transform

    info = encoder.info
    preprocess = encoder.transform_description
    if preprocess is None and encoder.has_images:
        preprocess = _describe_transform(encoder.image_transform)
    return {"format": COUNT_FORMAT, "arch": info.arch, "framework": info.framework, "n_params": int(info.n_params),
            "embed_dim": int(info.embed_dim), "context_length": int(info.context_length),
            "preprocess": preprocess if encoder.has_images else None}


def count_cache_dir() -> Path:
    """Where counts are cached: ``<hnbench cache dir>/flops`` (``$HNBENCH_CACHE``, :func:`hnbench.io.cache_dir`)."""
    return cache_dir() / "flops"


def _cache_path(key: Mapping[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return count_cache_dir() / f"{digest}.json"


def _is_count(value: Any) -> bool:
    return value is None or isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _valid_counts(counts: Any) -> bool:
    """Whether ``counts`` has the shape :func:`count_model` gives (anything else in a cache file is ignored)."""
    if not isinstance(counts, dict) or not isinstance(counts.get("params"), dict):
        return False
    size = counts.get("image_size")
    return (all(_is_count(counts.get(k)) for k in ("image_flops", "text_flops", "context_length"))
            and all(_is_count(counts["params"].get(k)) for k in ("image", "text", "total"))
            and (size is None or _is_count(size) or isinstance(size, list) and len(size) == 2
                 and all(_is_count(s) for s in size)))


def _read_cached(key: Mapping[str, Any]) -> dict[str, Any] | None:
    """The counts cached for ``key``, or None: absent, unreadable, of another key or shape (then recounted)."""
    path = _cache_path(key)
    if not path.is_file():
        return None
    try:
        record = read_json_untrusted(path, "FLOP count cache file")
    except Exception as e:  # any failure to read is a miss: the file is rewritten
        logger.warning("ignoring the FLOP count cache file %s (%s); counting again", path, e)
        return None
    if not isinstance(record, dict) or record.get("key") != dict(key) or not _valid_counts(record.get("counts")):
        logger.warning("ignoring the FLOP count cache file %s (not a count of this architecture); counting again",
                       path)
        return None
    counts: dict[str, Any] = record["counts"]
    return counts


def _write_cached(key: Mapping[str, Any], counts: dict[str, Any]) -> None:
    path = _cache_path(key)
    try:
        atomic_write_bytes(path, (json.dumps({"key": dict(key), "counts": counts}, indent=1, sort_keys=True)
                                  + "\n").encode())
    except OSError as e:  # an unwritable cache costs a recount next time, nothing else
        logger.warning("cannot cache the FLOP count in %s (%s)", path, e)


def _modules(encoder: Any) -> list[Any]:
    """The torch modules an encoder holds (``encoder.model``, a tower, …), each once."""
    from torch import nn

    out: list[Any] = []
    for value in vars(encoder).values():
        if isinstance(value, nn.Module) and not any(value is m for m in out):
            out.append(value)
    return out


@contextlib.contextmanager
def _counting(modules: list[Any], device: Any) -> Iterator[None]:
    """Eval mode, the RNG forked and MHA's fused inference path off (its one fused op is not counted); all
    restored after."""
    import torch

    flags = [(m, m.training) for module in modules for m in module.modules()]
    fastpath = torch.backends.mha.get_fastpath_enabled()
    dev = torch.device(str(device))
    cuda = [dev.index or 0] if dev.type == "cuda" else []
    try:
        for module in modules:
            module.eval()
        torch.backends.mha.set_fastpath_enabled(False)
        with torch.random.fork_rng(devices=cuda), torch.inference_mode():
            yield
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)
        for m, training in flags:
            m.training = training


def _attention_formulas() -> dict[Any, Any]:
    """FLOP formulas of the fused attention kernels torch's counter lacks: the CPU's (and MPS's) scaled-dot-product
    attention get the formula it has for the CUDA kernels (QKᵀ and AV: 2 FLOPs per multiply-add, the full square
    even under a causal mask, as a matrix-product path counts them)."""
    import torch
    from torch.utils.flop_counter import flop_registry

    aten = torch.ops.aten
    formula = flop_registry[aten._scaled_dot_product_flash_attention]

    def fused(*args: Any, **kwargs: Any) -> int:
        return int(formula(*args, **kwargs))  # the registered formula reads the tensors' shapes itself

    fused._get_raw = True  # type: ignore[attr-defined]  # FlopCounterMode: pass the tensors as they are
    names = ("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_attention_math_for_mps")
    return {getattr(aten, n): fused for n in names if hasattr(aten, n)}


def _measure(run: Any) -> tuple[int, set[int]]:
    """(FLOPs of ``run()``, the storage addresses of every tensor its operations took as input)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves
    from torch.utils.flop_counter import FlopCounterMode

    class _Inputs(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch's class is untyped
        def __init__(self) -> None:
            super().__init__()  # type: ignore[no-untyped-call]
            self.seen: set[int] = set()

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            for t in tree_leaves((args, kwargs or {})):
                if isinstance(t, torch.Tensor):
                    with contextlib.suppress(Exception):  # a tensor without storage reads no parameter
                        self.seen.add(t.untyped_storage().data_ptr())
            return func(*args, **(kwargs or {}))

    counter, inputs = FlopCounterMode(display=False, custom_mapping=_attention_formulas()), _Inputs()
    with counter, inputs:
        run()
    return int(counter.get_total_flops()), inputs.seen


def count_model(encoder: Encoder) -> dict[str, Any]:
    """Count (no cache) the FLOPs of one image and one caption at the context length, and the parameters each
    tower's forward reads: ``{image_flops, text_flops, image_size, context_length, params {image, text, total}}``
    (image entries None for a text-only encoder; a tower's params None where the encoder holds no torch module)."""
    from PIL import Image

    info = encoder.info
    modules = _modules(encoder)
    params = {id(p): p for m in modules for p in m.parameters()}
    has_images = bool(encoder.has_images)
    pixels = encoder.image_transform(Image.new("RGB", (_PICTURE_SIDE, _PICTURE_SIDE), (128, 128, 128))
                                     ).unsqueeze(0) if has_images else None
    # a caption longer than any context: the tokenizer truncates it to exactly the model's context length
    tokens = encoder.tokenize([" ".join(["photo"] * (4 * int(info.context_length) + 8))]).tokens

    def used(seen: set[int]) -> int | None:
        if not modules:
            return None
        return int(sum(p.numel() for p in params.values() if p.numel() and p.untyped_storage().data_ptr() in seen))

    with _counting(modules, encoder.device):
        image_flops, image_seen = _measure(lambda: encoder.encode_images(pixels)) if pixels is not None else (None, set())
        text_flops, text_seen = _measure(lambda: encoder.encode_texts(tokens))
    _mark_ran(encoder)
    size: Any = None
    if pixels is not None:
        h, w = (int(s) for s in pixels.shape[-2:])
        size = h if h == w else [h, w]
    total = int(info.n_params)  # the model record's count (every parameter of the model)
    return {"image_flops": image_flops, "text_flops": text_flops, "image_size": size,
            "context_length": int(tokens.shape[-1]),
            "params": {"image": used(image_seen) if has_images else None, "text": used(text_seen), "total": total}}


def model_counts(encoder: Encoder) -> tuple[dict[str, Any] | None, str]:
    """The counts of ``encoder``'s architecture (:func:`count_model`), from the cache or counted and cached, and
    where they came from (``"cache"``, ``"counted"``); (None, why) where they cannot be had: a model never built in
    this run (every embedding came from the cache) whose architecture was never counted, or a count that failed."""
    from hnbench.models.base import as_deferred

    deferred = as_deferred(encoder)  # a remembered model: never built just to be counted
    try:
        key = architecture_key(encoder)
    except Exception as e:  # a transform that cannot be described: count without the cache
        logger.warning("no FLOP count cache key for %s (%s)", encoder.info.arch, e)
        key = None
    cached = _read_cached(key) if key is not None else None
    if cached is not None:
        return cached, "cache"
    if deferred is not None and not deferred.built:
        return None, ("not counted: the model was not built (every embedding came from the cache) and its "
                      "architecture was never counted here")
    target = deferred.real() if deferred is not None else encoder
    try:
        counts = count_model(target)
    except Exception as e:  # an exotic forward the counter cannot run: the run's numbers stand without it
        logger.warning("could not count the FLOPs of %s: %s", encoder.info.arch, e)
        return None, f"not counted: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}".rstrip(": ")
    if key is not None:
        _write_cached(key, counts)
    return counts, "counted"


# --- the record -------------------------------------------------------------------------------------------------
def _rate(n: int, seconds: float) -> float | None:
    return round(n / seconds, 3) if n > 0 and seconds > 0 else None


def throughput_record(encoder: Any, images: tuple[int, float], texts: tuple[int, float], settings: Any, device: Any,
                      *, warm: bool, shared: int = 0) -> dict[str, Any]:
    """``result.throughput`` of a run: rates of each tower from ``images`` / ``texts`` (the items each encode step
    ran through the model, and its seconds), the device, ``warm`` (asked with :func:`ran_before` before encoding),
    the parameters and FLOPs of the architecture (:func:`model_counts`) and, on a known GPU, the share of its peak
    at the run's precision (``settings``: its ``precision`` and ``amp``; module docstring). ``shared``: the items
    the ranks of a ``torchrun`` encoded together into the cache before rank 0 read them (no per-tower rate)."""
    (n_img, img_s), (n_txt, txt_s) = (int(images[0]), float(images[1])), (int(texts[0]), float(texts[1]))
    if n_img or n_txt:
        _mark_ran(encoder)
    name = device_name(device)
    counts, source = model_counts(encoder)
    images_per_s, captions_per_s = _rate(n_img, img_s), _rate(n_txt, txt_s)
    cached = not n_img and not n_txt and not shared
    notes = [RATE_RULE]
    if shared:
        notes.append(f"no rate: under torchrun the ranks encoded {shared:,} items into the cache together (both "
                     "towers in timings.encode_share) and rank 0 read them back")
    elif cached:
        notes.append("no rate: every embedding came from the cache (nothing was encoded)")
    else:
        notes += [f"no {what} rate: all came from the cache" for what, n in (("image", n_img), ("caption", n_txt))
                  if not n]
    record: dict[str, Any] = {
        "device": name, "compute": _compute_precision(settings), "warm": bool(warm), "cached": cached,
        "images_per_s": images_per_s, "captions_per_s": captions_per_s,
        "images_encoded": n_img, "captions_encoded": n_txt,
        "image_encode_s": round(img_s, 4), "text_encode_s": round(txt_s, 4),
    }
    if counts is None:
        record.update(params={"image": None, "text": None, "total": int(encoder.info.n_params)}, gflops=None)
        notes.append(f"FLOPs {source}")
    else:
        record.update(params=dict(counts["params"]), gflops={
            "image": None if counts["image_flops"] is None else round(counts["image_flops"] / 1e9, 6),
            "text": None if counts["text_flops"] is None else round(counts["text_flops"] / 1e9, 6),
            "image_size": counts["image_size"], "context_length": counts["context_length"], "unit": FLOP_UNIT,
            "counted": source})
    share, peak_note = peak_share(name, record["compute"], images_per_s, captions_per_s, record["gflops"])
    record.update(peak_share=share, peak_note=peak_note, note="; ".join(notes))
    return record


# --- reading it -------------------------------------------------------------------------------------------------
def _number(value: Any) -> float | None:
    """A finite number from a stored record (a result file may come from anyone), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _block(record: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    """``record[name]`` where it is an object, else None."""
    value = record.get(name)
    return value if isinstance(value, dict) else None


def _count_text(n: float) -> str:
    """``5.1M``, ``88.2M``, ``1.4B`` parameters."""
    return f"{n / 1e9:.3g}B" if n >= 1e9 else f"{n / 1e6:.3g}M" if n >= 1e5 else f"{int(n):,}"


def _gflops_text(g: float) -> str:
    return f"{g:.3g}" if g < 10 else f"{g:,.1f}"


def footer(result: Any) -> str | None:
    """One line on a result's throughput, shown after ``hnbench eval``'s table: rates, device, warm or cold, the
    model's parameters and GFLOPs per image / caption; None for a result without the record (written before it)."""
    t = getattr(result, "throughput", None)
    if not isinstance(t, dict) or not t:
        return None
    rates = [f"{r:,.0f} {what}/s" if r >= 100 else f"{r:.3g} {what}/s"
             for what, r in (("images", _number(t.get("images_per_s"))), ("captions", _number(t.get("captions_per_s"))))
             if r is not None]
    if t.get("cached") is True:
        line = f"throughput: no rate (every embedding came from the cache) on {t.get('device', '?')}"
    else:
        line = (f"throughput: {', '.join(rates) or 'no rate'} on {t.get('device', '?')} "
                f"({'warm' if t.get('warm') is True else 'cold'})")
    params = _block(t, "params") or {}
    total = _number(params.get("total"))
    parts = [f"{(result.model or {}).get('arch', 'model')}"
             + (f" {_count_text(total)} params" if total is not None else "")]
    g = _block(t, "gflops")
    if g is not None:
        image, text = _number(g.get("image")), _number(g.get("text"))
        size, ctx = g.get("image_size"), _number(g.get("context_length"))
        flops = " / ".join("—" if v is None else _gflops_text(v) for v in (image, text))
        at = ([f"{size} px"] if _number(size) is not None else []) + ([f"{int(ctx)} tokens"] if ctx is not None else [])
        parts.append(f"{flops} GFLOPs per image / caption" + (f" at {', '.join(at)}" if at else ""))
    else:
        parts.append("FLOPs not counted")
    share = _block(t, "peak_share")
    if share:
        shown = [f"{tower} {100 * s:.2g}%" for tower in ("image", "text") if (s := _number(share.get(tower))) is not None]
        if shown:
            parts.append(f"peak share {', '.join(shown)}")
    return f"{line}; {', '.join(parts)}"


def open_clip_numbers(throughput: Any) -> tuple[float | None, float | None, str]:
    """(parameters in millions, GFLOPs of one image plus one caption, why missing) from a result's ``throughput``,
    the numbers open_clip's ``params (M)`` / ``FLOPs (B)`` columns hold (its ``mparams`` / ``gflops``: the whole
    model's forward on one image and one caption)."""
    if not isinstance(throughput, dict) or not throughput:
        return None, None, "the result has no throughput record (written before hnbench recorded one)"
    total = _number((_block(throughput, "params") or {}).get("total"))
    g = _block(throughput, "gflops")
    image, text = (_number(g.get("image")), _number(g.get("text"))) if g is not None else (None, None)
    flops = image + text if image is not None and text is not None else None
    why = "" if flops is not None else "its throughput record has no FLOP count of both towers"
    return (None if total is None else total / 1e6), flops, why
