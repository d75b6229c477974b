"""open_clip models: architectures by name, weights by tag, local file, ``hf-hub:`` or ``local-dir:``."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, Protocol, cast

import numpy as np
import torch

from hnbench.errors import CheckpointError, ConfigError, did_you_mean
from hnbench.io import loads_json
from hnbench.models.base import ModelInfo, TokenizedTexts, state_dict_fingerprint
from hnbench.models.checkpoint import (
    FINELIP_CROSS_NET,
    SMARTCLIP_MASK_NET,
    drop_training_only,
    layout_hint,
    load_into,
    read_state_dict,
    save_state_dict,
)
from hnbench.models.family import RANDOM_INIT, ModelFamily, TextPreprocessing, claimed_elsewhere, family_of
from hnbench.models.longclip_tables import convert_longclip_state_dict
from hnbench.models.tags import check_tag, offline_download
from hnbench.validate import check_model_config_name

logger = logging.getLogger(__name__)

# open_clip (heavy: timm, torchvision models) is imported inside the functions that build or tokenize: a run
# whose embeddings are all cached never imports it (tests/test_warm_path.py).

CONFIG_DIR = Path(__file__).parent / "configs"
ASSET_DIR = Path(__file__).parent.parent / "assets"
# Weights hnbench ships itself, addressed like open_clip pretrained tags: (arch, tag) -> file in assets/.
BUILTIN_WEIGHTS = {("hnbench-tiny", "synthdense"): "hnbench-tiny-synthdense.safetensors"}

_registered = False


def register_builtin_configs() -> None:
    """Make hnbench's own architectures (``hnbench-tiny``) known to open_clip."""
    global _registered
    if not _registered:
        import open_clip

        open_clip.add_model_config(CONFIG_DIR)
        _registered = True


def register_model_config(path: str | Path, name: str | None = None) -> str:
    """Register a custom open_clip architecture from a JSON file (open_clip's model-config schema).

    The architecture's name is ``name`` if given, else the file's stem. Returns the name.
    """
    import open_clip

    path = Path(path)
    try:
        cfg = loads_json(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"--model-config {path}: cannot read JSON ({e})") from e
    if not all(k in cfg for k in ("embed_dim", "vision_cfg", "text_cfg")):
        raise ConfigError(f"--model-config {path}: an open_clip config needs 'embed_dim', 'vision_cfg' and "
                          f"'text_cfg' (found {sorted(cfg)})")
    check_model_config_name(name, path)
    name = name or path.stem
    tmp = Path(tempfile.mkdtemp(prefix="hnbench-cfg-"))
    try:  # open_clip reads the file once, here, and keeps the config in memory: the copy can go
        (tmp / f"{name}.json").write_text(json.dumps(cfg))
        open_clip.add_model_config(tmp / f"{name}.json")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return name


class _CLIPModel(Protocol):
    """What this adapter calls on an open_clip ``CLIP`` / ``CustomTextCLIP`` (open_clip ships no types)."""

    def encode_image(self, image: torch.Tensor, normalize: bool = False) -> torch.Tensor: ...

    def encode_text(self, text: torch.Tensor, normalize: bool = False) -> torch.Tensor: ...


class OpenCLIPEncoder:
    """An open_clip CLIP model behind the :class:`~hnbench.models.base.TrainableEncoder` protocol."""

    framework: Literal["open_clip", "transformers"] = "open_clip"
    eos_token_id: int | None = None  # open_clip's text towers find the end token themselves
    dynamic_padding = False  # every caption padded to the context
    transform_description: str | None = None  # the cache describes the transform itself
    has_images = True

    def __init__(self, model: torch.nn.Module, tokenizer: Any, image_transform: Callable[[Any], torch.Tensor],
                 info: ModelInfo):
        import open_clip

        self.model = model.eval()
        self.tokenizer = tokenizer
        self.image_transform = image_transform
        self.info = info
        self.device = next(model.parameters()).device
        # fp16/bf16 weights need pixels of the same dtype (the transform yields fp32)
        self.input_dtype = open_clip.get_input_dtype(info.extra.get("precision", "fp32"))

    def to(self, device: str | torch.device) -> OpenCLIPEncoder:
        self.model.to(device)
        self.device = torch.device(device)
        return self

    def tokenize(self, texts: Sequence[str]) -> TokenizedTexts:
        """Tokenize exactly as open_clip does (truncate, keep the end token) and record true lengths."""
        from open_clip.tokenizer import SimpleTokenizer

        ctx = self.info.context_length
        tok = self.tokenizer
        if isinstance(tok, SimpleTokenizer) and tok.reduction_fn is None:
            ids = [[tok.sot_token_id] + tok.encode(t) + [tok.eot_token_id] for t in texts]
            lengths = np.array([len(x) for x in ids], dtype=np.int64)
            out = torch.zeros(len(ids), ctx, dtype=torch.long)
            for i, x in enumerate(ids):
                if len(x) > ctx:  # open_clip's rule: cut, then put the end token back last
                    x = x[:ctx]
                    x[-1] = tok.eot_token_id
                out[i, :len(x)] = torch.tensor(x)
            return TokenizedTexts(out, lengths)
        tokens = tok(list(texts), context_length=ctx)
        inner = getattr(tok, "tokenizer", None)
        if inner is not None:
            lengths = np.array([len(inner(t)["input_ids"]) for t in texts], dtype=np.int64)
        else:  # unknown tokenizer: count non-pad tokens (a lower bound of the true length)
            lengths = (tokens != 0).sum(1).numpy().astype(np.int64)
        return TokenizedTexts(tokens, lengths)

    @torch.inference_mode()
    def encode_images(self, pixels: torch.Tensor) -> torch.Tensor:
        pixels = pixels.to(device=self.device, dtype=self.input_dtype or pixels.dtype, non_blocking=True)
        return cast(_CLIPModel, self.model).encode_image(pixels, normalize=True).float()

    @torch.inference_mode()
    def encode_texts(self, tokens: torch.Tensor) -> torch.Tensor:
        """L2-normalised text embeddings; a causal tower runs only up to the batch's last end token
        (:func:`trimmed_text_tower`), equal to the padded forward within float noise."""
        tokens = tokens.to(self.device, non_blocking=True)
        tower = trimmed_text_tower(self.model) if family_of(self.info.arch).trims_text_batches else None
        if tower is not None:
            return encode_text_trimmed(tower, tokens).float()
        return cast(_CLIPModel, self.model).encode_text(tokens, normalize=True).float()


# Poolings that read one position at or before the end token: with a causal mask, nothing after it reaches it.
_TRIMMABLE_POOLING = ("argmax", "eos", "first")


@dataclass(frozen=True)
class TextTower:
    """The parts of an open_clip causal text tower a trimmed forward runs (an open_clip ``CLIP``'s own
    attributes, or a ``CustomTextCLIP``'s ``TextTransformer``)."""

    module: torch.nn.Module
    pool_type: str
    eos_id: int | None


def trimmed_text_tower(model: torch.nn.Module) -> TextTower | None:
    """The text tower of ``model`` if a batch may run trimmed to its last pooled position, else None.

    Only open_clip's own text transformer qualifies, with its causal mask (each position sees only those
    before it) and a pooling at one position up to the end token (``argmax``: CLIP's EOT, ``eos``,
    ``first``): the pooled vector then never sees a pad token, and cutting the pads changes nothing but
    float rounding. Bi-directional towers (``no_causal_mask``, SigLIP's ``last``-token pooling, CoCa's
    appended class token, HF text towers) and wrapped modules run padded, as before."""
    import open_clip
    from open_clip.transformer import TextTransformer

    if isinstance(model, open_clip.CLIP):
        tower: torch.nn.Module = model
        pool_type, eos_id = str(model.text_pool_type), getattr(model, "text_eos_id", None)
    elif isinstance(model, open_clip.CustomTextCLIP) and type(model.text) is TextTransformer:
        tower = model.text
        if tower.cls_emb is not None or tower.output_tokens:
            return None
        pool_type, eos_id = str(tower.pool_type), getattr(tower, "eos_id", None)
    else:
        return None
    mask = getattr(tower, "attn_mask", None)
    if not isinstance(mask, torch.Tensor) or pool_type not in _TRIMMABLE_POOLING or (pool_type == "eos" and eos_id is None):
        return None
    return TextTower(tower, pool_type, eos_id)


def _pooled_positions(tower: TextTower, tokens: torch.Tensor) -> torch.Tensor:
    """The position each row's embedding is read at (open_clip's ``text_global_pool``'s rule)."""
    if tower.pool_type == "argmax":  # the end token has the highest id
        return tokens.argmax(dim=-1)
    if tower.pool_type == "eos":
        return tokens.eq(int(tower.eos_id or 0)).int().argmax(dim=-1)
    return torch.zeros(tokens.shape[0], dtype=torch.long, device=tokens.device)


def encode_text_trimmed(tower: TextTower, tokens: torch.Tensor) -> torch.Tensor:
    """open_clip's ``encode_text(tokens, normalize=True)`` on ``tokens[:, :L]``, L the batch's last pooled position + 1:
    the positional table and the causal mask sliced to L, the embedding read at the same positions."""
    t: Any = tower.module
    pooled_at = _pooled_positions(tower, tokens)
    length = int(pooled_at.max()) + 1 if tokens.shape[0] else tokens.shape[1]
    tokens = tokens[:, :length]
    cast_dtype = t.transformer.get_cast_dtype()
    x = t.token_embedding(tokens).to(cast_dtype) + t.positional_embedding[:length].to(cast_dtype)
    x = t.ln_final(t.transformer(x, attn_mask=t.attn_mask[:length, :length]))
    x = x[torch.arange(x.shape[0], device=x.device), pooled_at]
    if t.text_projection is not None:
        x = t.text_projection(x) if isinstance(t.text_projection, torch.nn.Linear) else x @ t.text_projection
    return torch.nn.functional.normalize(x, dim=-1)


class _DropRandomInitWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "Model initialized randomly" not in record.getMessage()


@contextlib.contextmanager
def _quiet_random_init(enabled: bool) -> Iterator[None]:
    """open_clip warns "initialized randomly" when we load the weights ourselves right after; hide that."""
    flt = _DropRandomInitWarning()
    root = logging.getLogger()
    if enabled:
        root.addFilter(flt)
    try:
        yield
    finally:
        root.removeFilter(flt)


@contextlib.contextmanager
def _seeded(seed: int | None) -> Iterator[None]:
    """Draw a random initialisation from ``seed`` without touching the caller's RNG (None: the caller's RNG)."""
    if seed is None:
        yield
        return
    with torch.random.fork_rng(devices=[]):  # the model is built on the CPU
        torch.manual_seed(seed)
        yield


def resolve_pretrained(arch: str, pretrained: str | None) -> tuple[str | None, str | None]:
    """``(local_file, open_clip_tag)`` of a --pretrained value (at most one is set): a bundled or local file, else a tag."""
    if not pretrained:
        return None, None
    if (arch, pretrained) in BUILTIN_WEIGHTS:
        return str(ASSET_DIR / BUILTIN_WEIGHTS[(arch, pretrained)]), None
    if os.path.exists(pretrained) or pretrained.endswith((".pt", ".pth", ".bin", ".safetensors", ".ckpt")):
        if not os.path.isfile(pretrained):
            raise CheckpointError(f"checkpoint not found: {pretrained}")
        return pretrained, None
    return None, pretrained


def _context_of(arch: str) -> int | None:
    """The text context of a registered open_clip architecture (its config's ``text_cfg``), None if it names none."""
    import open_clip

    cfg = open_clip.get_model_config(arch) or {}
    ctx = (cfg.get("text_cfg") or {}).get("context_length")
    return ctx if isinstance(ctx, int) else None


def _check(arch: str, pretrained: str | None, model_config: str | Path | None
           ) -> tuple[str, str | None, str | None, str | None, bool]:
    """``(arch, schema, local file, tag, offline)`` of an open_clip model, checked before it is built (the
    architecture exists, a weights file exists, a tag is known and can be fetched: :func:`check_tag`)."""
    import open_clip

    register_builtin_configs()
    if model_config is not None:
        arch = register_model_config(model_config, name=arch or None)
    schema = arch.split(":", 1)[0] + ":" if arch.startswith(("hf-hub:", "local-dir:")) else None
    if schema is None and arch.replace("/", "-") not in open_clip.list_models():
        hint = did_you_mean(arch, open_clip.list_models())
        hint = f"; {hint}" if hint else ""
        raise ConfigError(f"unknown open_clip architecture {arch!r}{hint} (or pass --model-config FILE.json)")
    local_file, tag = (None, None) if schema else resolve_pretrained(arch, pretrained)
    return arch, schema, local_file, tag, check_tag(arch, tag) if tag else False


def load_openclip(
    arch: str,
    pretrained: str | None = None,
    *,
    model_config: str | Path | None = None,
    context_length: int | None = None,
    device: str = "cpu",
    precision: str = "fp32",
    init_seed: int | None = 0,
) -> OpenCLIPEncoder:
    """Build an open_clip model and its eval transform; weights come from a tag, a file or a schema.

    Without weights the model is initialised randomly from ``init_seed`` (recorded in ``info.extra``),
    so two runs share a fingerprint and a cache entry; ``None`` draws from torch's global RNG."""
    import open_clip

    arch, schema, local_file, tag, offline = _check(arch, pretrained, model_config)
    local_sd = None
    if local_file:
        local_sd, long_ctx = convert_longclip_state_dict(read_state_dict(local_file))
        if long_ctx and context_length is None:  # a released Long-CLIP checkpoint: 248 positions
            context_length = long_ctx
    kwargs: dict[str, Any] = {"precision": precision, "device": "cpu", "weights_only": True}
    if context_length is not None:
        kwargs["force_context_length"] = context_length
    seed = init_seed if not (schema or local_file or tag) else None
    try:
        with _quiet_random_init(enabled=bool(local_file) or seed is not None), _seeded(seed), offline_download(offline):
            model, _, preprocess = open_clip.create_model_and_transforms(
                arch, pretrained=tag, pretrained_text=False, **kwargs)
    except (RuntimeError, FileNotFoundError) as e:
        if tag:
            raise CheckpointError(f"could not get open_clip weights {arch}/{tag}: {' '.join(str(e).split())[:300]} "
                                  "(or pass a weights file: --pretrained PATH.safetensors)") from e
        raise
    if local_sd is not None:
        sd = local_sd
        from open_clip.convert import convert_state_dict

        sd = convert_state_dict(model, sd)
        if "logit_scale" in sd and sd["logit_scale"].ndim != model.logit_scale.ndim:
            sd["logit_scale"] = sd["logit_scale"].reshape(model.logit_scale.shape)
        own = model.state_dict()
        other = claimed_elsewhere(sd, OPEN_CLIP, arch)  # another family's release: refused, not loaded wrong
        if other:
            raise CheckpointError(f"checkpoint {local_file}: {other}")
        sd = drop_training_only(sd, own, f"checkpoint {local_file}", OPEN_CLIP.training_only_keys)
        sd = _fit_positional_embedding(model, sd, str(local_file))
        load_into(model, {k: v.to(own[k].dtype) if k in own else v for k, v in sd.items()},
                  f"checkpoint {local_file}", hint=layout_hint(sd))
    sd = model.state_dict()
    ctx = int(getattr(model, "context_length", 0) or context_length or 77)
    info = ModelInfo(
        arch=arch, pretrained=pretrained if not schema else arch, fingerprint=state_dict_fingerprint(sd),
        context_length=ctx, n_params=sum(p.numel() for p in model.parameters()),
        embed_dim=_embed_dim(arch, model),
        framework="open_clip", extra={"precision": precision, **({"init_seed": seed} if seed is not None else {})},
    )
    if seed is not None:
        logger.info("%s: no weights given, random initialisation with seed %d", arch, seed)
    tokenizer = open_clip.get_tokenizer(arch, context_length=ctx)
    return OpenCLIPEncoder(model.to(device), tokenizer, preprocess, info)


def _fit_positional_embedding(model: torch.nn.Module, sd: dict[str, torch.Tensor],
                              source: str) -> dict[str, torch.Tensor]:
    """A checkpoint whose text context differs from ``--context-length`` is an error, not a silent resize."""
    key = "positional_embedding"
    if key in sd and hasattr(model, key) and sd[key].shape != getattr(model, key).shape:
        raise CheckpointError(
            f"{source}: text positional table has {sd[key].shape[0]} positions but the model was built for "
            f"{getattr(model, key).shape[0]}; pass --context-length {sd[key].shape[0]}")
    return sd


def _embed_dim(arch: str, model: torch.nn.Module) -> int:
    import open_clip

    cfg = open_clip.get_model_config(arch) or {}
    if "embed_dim" in cfg:
        return int(cfg["embed_dim"])
    return int(getattr(model.visual, "output_dim", 0) or cast(torch.Tensor, model.text_projection).shape[-1])


def _dir_files(path: Path) -> list[str]:
    return sorted(str(p.resolve()) for p in path.rglob("*") if p.is_file())


def tag_file(arch: str, tag: str) -> str | None:
    """The local file open_clip loads for a pretrained tag, when already downloaded (no network)."""
    import open_clip.pretrained as op

    cfg = op.get_pretrained_cfg(arch, tag)
    if cfg.get("file"):
        file: str = cfg["file"]
        return file
    if not cfg.get("hf_hub"):
        return None  # a URL download: its path depends on open_clip internals; not remembered
    from huggingface_hub import try_to_load_from_cache

    model_id, filename = os.path.split(cfg["hf_hub"])
    filename = filename or op.HF_WEIGHTS_NAME
    for name in [*op._get_safe_alternatives(filename), filename]:  # open_clip's own preference order
        found = try_to_load_from_cache(model_id, name)
        if isinstance(found, str):
            return found
    return None


class OpenCLIPFamily(ModelFamily):
    """open_clip architectures (by name, ``hf-hub:``, ``local-dir:``; hnbench's own configs), weights by tag, local
    file (a released Long-CLIP checkpoint folded in, :mod:`hnbench.models.longclip`) or a seeded random init."""

    name = "open_clip"
    export_names = ("checkpoint.safetensors",)
    training_only_keys = MappingProxyType({**FINELIP_CROSS_NET, **SMARTCLIP_MASK_NET})  # Long-CLIP-format releases
    trims_text_batches = True  # open_clip's causal text transformer: see trimmed_text_tower

    def load(self, model: str, pretrained: str | None = None, *, model_config: str | Path | None = None,
             context_length: int | None = None, device: str = "cpu", precision: str = "fp32",
             init_seed: int | None = 0) -> OpenCLIPEncoder:
        return load_openclip(model, pretrained, model_config=model_config, context_length=context_length,
                             device=device, precision=precision, init_seed=init_seed)

    def check(self, model: str, pretrained: str | None = None, *, model_config: str | Path | None = None) -> None:
        """What :func:`load_openclip` checks before it builds anything (one line each), without building."""
        _check(model, pretrained, model_config)

    def catalogue(self, *, architectures: bool = True) -> list[dict[str, Any]]:
        """hnbench's own models with the weights its package ships (``hnbench-tiny`` on synthdense) and, with
        ``architectures``, every other architecture open_clip knows (``open_clip.list_models()``) with its
        context and the pretrained tags open_clip can fetch for it (``--pretrained TAG``)."""
        import open_clip

        register_builtin_configs()
        rows = [{"kind": "builtin", "name": arch, "family": self.name, "model": arch, "context": _context_of(arch),
                 "text_policy": "CLIP BPE (lower-cased by the tokenizer), padded to the context",
                 "weights": f"built in: --pretrained {tag} ({file}, in hnbench's package)",
                 "on_machine": (ASSET_DIR / file).is_file(), "reference": "",
                 "description": f"hnbench's own tiny CLIP trained on {tag}: works offline, nothing to download "
                                "(hnbench demo)"}
                for (arch, tag), file in BUILTIN_WEIGHTS.items()]
        listed = {r["name"] for r in rows}
        for arch in open_clip.list_models() if architectures else ():
            if arch in listed:
                continue
            tags = open_clip.list_pretrained_tags_by_model(arch)
            rows.append({"kind": "architecture", "name": arch, "family": self.name, "model": arch,
                         "context": _context_of(arch), "text_policy": "",
                         "weights": f"open_clip tags: {', '.join(tags)}" if tags else "", "on_machine": None,
                         "reference": "", "description": "open_clip architecture: " + (
                             "--pretrained TAG (open_clip downloads it) or FILE" if tags else
                             "no open_clip weights (random init, or --pretrained FILE)")})
        return rows

    def weight_files(self, model: str, pretrained: str | None, model_config: str | Path | None) -> list[str] | None:
        if model.startswith("hf-hub:"):
            return None
        if model.startswith("local-dir:"):
            d = Path(model.split(":", 1)[1])
            return _dir_files(d) if d.is_dir() else None
        try:
            local, tag = resolve_pretrained(model, pretrained)
        except CheckpointError:
            return None
        if local:
            return [str(Path(local).resolve())]
        if tag:
            found = tag_file(model, tag)  # a downloaded tag's file (open_clip + HF cache)
            return [str(Path(found).resolve())] if found else None
        return [RANDOM_INIT]

    def text_preprocessing(self, encoder: Any) -> TextPreprocessing:
        return TextPreprocessing(tokenizer=type(encoder.tokenizer).__name__,
                                 context_length=int(encoder.info.context_length), padding="context")

    def pair_scorers(self, encoder: Any) -> dict[str, Any]:
        """FineLIP's fine-grained scorer where the weights carry its cross-net (a FineLIP run's folder, or a released
        state dict's ``cross_net.*`` keys): :func:`hnbench.models.finelip.finelip_scorers`."""
        from hnbench.models.finelip import finelip_scorers

        return dict(finelip_scorers(encoder))

    def pair_scorer_names(self, model: str, pretrained: str | None) -> list[str] | None:
        from hnbench.models.finelip import FINELIP, finelip_cross_net

        found = finelip_cross_net(pretrained, read=False)
        return None if found is None else [FINELIP] * bool(found)

    def tower_of(self, param_name: str) -> str:
        if "logit_scale" in param_name or "logit_bias" in param_name:
            return "shared"
        return "image" if param_name.startswith("visual.") else "text"

    def lora_targets(self) -> list[str]:
        # nn.MultiheadAttention takes LoRA only as a whole ("attn") and no DoRA: the MLP layers work for both
        return ["c_fc", "c_proj"]

    def stretch(self, encoder: Any, context_length: int) -> OpenCLIPEncoder:
        from hnbench.models.longclip import stretch_openclip  # Long-CLIP's table arithmetic

        stretched: OpenCLIPEncoder = stretch_openclip(encoder, context_length)
        return stretched

    def export(self, module: Any, encoder: Any, out_dir: Path, metadata: dict[str, str]) -> Path:
        return save_state_dict(module, out_dir / "checkpoint.safetensors", metadata)

    def reload(self, exported: Path, encoder: Any, *, device: str = "cpu") -> OpenCLIPEncoder:
        info = encoder.info
        return load_openclip(info.arch, str(exported), context_length=int(info.context_length), device=device,
                             precision=info.extra.get("precision", "fp32"))


OPEN_CLIP = OpenCLIPFamily()
