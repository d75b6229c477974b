"""Long-CLIP: 248-token text towers in the open_clip architecture.

:func:`stretch_openclip` stretches a loaded open_clip encoder's text table the Long-CLIP way; the table
arithmetic (and the fold of a released Long-CLIP checkpoint, which the open_clip loader applies) is in
:mod:`hnbench.models.longclip_tables`, below both this module and :mod:`hnbench.models.openclip`, and is
importable from here too.
"""

from __future__ import annotations

from typing import Any

from hnbench.models.base import state_dict_fingerprint
from hnbench.models.checkpoint import load_into
from hnbench.models.longclip_tables import (
    KEEP,
    convert_longclip_state_dict,
    stretch_positional_embedding,
    stretched_length,
)

__all__ = ["KEEP", "convert_longclip_state_dict", "stretch_openclip", "stretch_positional_embedding",
           "stretched_length"]


def stretch_openclip(encoder: Any, context_length: int | None = None, *, keep: int = KEEP,
                     factor: int = 4) -> Any:
    """A new OpenCLIPEncoder whose text table is ``encoder``'s stretched the Long-CLIP way (77 → 248).

    ``context_length`` defaults to keep + factor·(L − keep) and must equal it.
    """
    import open_clip

    sd = {k: v.detach().cpu() for k, v in encoder.model.state_dict().items()}
    pe = sd["positional_embedding"]
    new_len = stretched_length(pe.shape[0], keep, factor)
    if context_length not in (None, new_len):
        raise ValueError(f"stretching {pe.shape[0]} positions gives {new_len}, not {context_length}")
    sd["positional_embedding"] = stretch_positional_embedding(pe.float(), keep, factor).to(pe.dtype)
    info = encoder.info
    device = encoder.device
    model = open_clip.create_model(info.arch, pretrained=None, force_context_length=new_len,
                                   precision=info.extra.get("precision", "fp32"), device="cpu")
    load_into(model, sd, f"{info.arch} stretched to {new_len} positions")
    tokenizer = open_clip.get_tokenizer(info.arch, context_length=new_len)
    new_info = type(info)(**{**info.to_dict(), "context_length": new_len,
                             "fingerprint": state_dict_fingerprint(model.state_dict()),
                             "extra": {**info.extra, "stretched_from": int(pe.shape[0])}})
    # the encoder's own class (OpenCLIPEncoder): this module sits below hnbench.models.openclip, whose adapter calls it
    return type(encoder)(model.to(device), tokenizer, encoder.image_transform, new_info)
