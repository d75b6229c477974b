"""Hugging Face ``transformers`` image–text models (``hf:ORG/NAME`` or a local ``save_pretrained`` directory); needs
the ``hf`` extra.

Any model ``AutoModel`` builds with ``get_image_features`` / ``get_text_features`` loads (CLIP, SigLIP, SigLIP 2,
Meta CLIP 2, …). Its captions are tokenised by the policy :data:`TEXT_POLICIES` declares for its ``model_type``
(padding, max length, case, attention mask), its images by the checkpoint's own image processor.

This family runs no code but transformers' own: every ``from_pretrained`` passes ``trust_remote_code=False``
(transformers would otherwise ask on stdin whether to run a folder's ``auto_map`` files, and a ``y`` fed to
stdin would run them). A local folder whose config names code files is refused before anything loads, naming
them (:meth:`HFFamily.remote_code`), unless ``--trust-remote-code`` is given: then it loads exactly as
``remote:DIR`` does (:mod:`hnbench.models.remote`: its code files pinned by sha256 and recorded). A hub model
whose config names code is known only once transformers has read it: refused in one line, pointing at
``remote:ORG/NAME``.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, cast

import numpy as np
import torch

from hnbench.errors import CheckpointError, ConfigError, first_line
from hnbench.io import read_json_untrusted
from hnbench.models.base import ModelInfo, TokenizedTexts, state_dict_fingerprint
from hnbench.models.checkpoint import (
    FINELIP_CROSS_NET,
    POSITION_IDS_SUFFIX,
    drop_training_only,
    layout_hint,
    load_into,
    read_state_dict,
)
from hnbench.models.family import ModelFamily, TextPreprocessing, family_of, remote_code_refusal


@dataclass(frozen=True)
class TextPolicy:
    """How one transformers ``model_type`` turns captions into its text tower's input (declared in
    :data:`TEXT_POLICIES`).

    ``padding``: ``"longest"`` (pad a batch to its longest caption: only for causal towers that pool at the end
    token, where padding never changes a caption's features) or ``"max_length"`` (every caption padded to the
    context: towers that pool the last position, SigLIP's). ``max_length``: the context the model was trained
    with (None: the text tower's positions). ``lowercase``: captions are lower-cased first (SigLIP's training
    text). ``attention_mask``: ``"eos"`` attends up to and including the first end token (CLIP: its pad token may
    equal the end token), ``"tokenizer"`` is what the checkpoint's own tokenizer (so its processor) gives: its mask,
    rebuilt from the padded ids, or none where it returns input ids only (:func:`returns_attention_mask`: SigLIP
    as transformers' conversion saves it, whose tower attends to its pad tokens as it was trained)."""

    padding: Literal["longest", "max_length"]
    max_length: int | None = None
    lowercase: bool = False
    attention_mask: Literal["eos", "tokenizer"] = "tokenizer"


# Per model_type; a type not listed gets DEFAULT_POLICY (pad to the context, the tokenizer's mask, text as given).
TEXT_POLICIES: dict[str, TextPolicy] = {
    "clip": TextPolicy("longest", attention_mask="eos"),
    # big_vision's training text: max-length 64 and lower-case; the tower pools the LAST position, so padding=True
    # would pool a different token per caption (mteb PR#1424, big_vision#166/#186/#187)
    "siglip": TextPolicy("max_length", 64, lowercase=True),
    "siglip2": TextPolicy("max_length", 64, lowercase=True),
    "metaclip_2": TextPolicy("longest"),  # causal, pools at the end token; XLM-V's pad token is not the end token
}
DEFAULT_POLICY = TextPolicy("max_length")
# Image processors whose output is more than ``pixel_values`` (SigLIP 2 NaFlex: patches, their mask, the grid).
_NAFLEX_KEYS = ("pixel_attention_mask", "spatial_shapes")


def text_policy(model_type: str) -> TextPolicy:
    """The declared text policy of a transformers ``model_type`` (:data:`DEFAULT_POLICY` if none is)."""
    return TEXT_POLICIES.get(model_type, DEFAULT_POLICY)


class _HFImageTransform:
    """PIL image → pixel tensor with the checkpoint's own image processor (picklable for workers).

    A NaFlex processor (SigLIP 2) returns patches (P, D), their mask (P) and the patch grid (2): packed into one
    (P + 1, D + 1) tensor (row 0: the grid; last column: the mask) so that images batch like any other;
    :func:`unpack_naflex` undoes it."""

    def __init__(self, processor: Any):
        self.processor = processor

    def __call__(self, image: Any) -> torch.Tensor:
        out = self.processor(images=image, return_tensors="pt")
        pixels: torch.Tensor = out["pixel_values"][0]
        if not all(k in out for k in _NAFLEX_KEYS):
            return pixels
        packed = torch.zeros(pixels.shape[0] + 1, pixels.shape[1] + 1, dtype=torch.float32)
        packed[1:, :-1] = pixels
        packed[1:, -1] = out["pixel_attention_mask"][0].float()
        packed[0, :2] = out["spatial_shapes"][0].float()
        return packed


def unpack_naflex(packed: torch.Tensor) -> dict[str, torch.Tensor]:
    """The ``get_image_features`` inputs of a batch of :class:`_HFImageTransform`'s packed NaFlex tensors."""
    return {"pixel_values": packed[:, 1:, :-1], "pixel_attention_mask": packed[:, 1:, -1].round().int(),
            "spatial_shapes": packed[:, 0, :2].round().long()}


def feature_tensor(out: Any) -> torch.Tensor:
    """The embeddings from ``CLIPModel.get_image_features`` / ``get_text_features``: transformers 4 returns the
    tensor, transformers 5 may return a model output that carries it (``image_embeds``, ``text_embeds`` or
    ``pooler_output``)."""
    if isinstance(out, torch.Tensor):
        return out
    for attr in ("image_embeds", "text_embeds", "pooler_output"):
        value: torch.Tensor | None = getattr(out, attr, None)
        if value is not None:
            return value
    raise TypeError(f"unexpected feature output {type(out).__name__}")


def eos_attention_mask(tokens: torch.Tensor, eos_token_id: int | None) -> torch.Tensor:
    """HF CLIP's text attention mask: attend up to and including the first end token (the pad token may equal
    it, so the tokenizer's own mask would stop too early or not at all)."""
    if eos_token_id is None:
        raise ConfigError("an HF CLIP text tower needs its tokenizer's end-of-text token id (it is None)")
    first_eos = torch.eq(tokens, eos_token_id).int().argmax(dim=1)
    positions = torch.arange(tokens.shape[1], device=tokens.device)
    return torch.le(positions[None, :], first_eos[:, None]).long()


def returns_attention_mask(tokenizer: Any) -> bool:
    """Whether ``tokenizer`` (and so the processor built on it) returns an attention mask with the input ids:
    transformers returns one unless the tokenizer's ``model_input_names`` leave it out, as SigLIP's converted
    checkpoints do (``["input_ids"]``: the model then attends to every position, pads included)."""
    names = getattr(tokenizer, "model_input_names", None)
    return names is None or "attention_mask" in names


def tokenizer_attention_mask(tokens: torch.Tensor, pad_token_id: int | None, eos_token_id: int | None) -> torch.Tensor:
    """The attention mask the tokenizer returned with ``tokens``, rebuilt from the ids: every non-pad position
    (a pad token that is also the end token: up to and including the first one, as the tokenizer marks it)."""
    if pad_token_id is None:
        return torch.ones_like(tokens)
    if pad_token_id == eos_token_id:
        return eos_attention_mask(tokens, eos_token_id)
    return torch.ne(tokens, pad_token_id).long()


class HFEncoder:
    """A transformers image–text model (``AutoModel`` with ``get_image_features`` / ``get_text_features``) behind
    the :class:`~hnbench.models.base.TrainableEncoder` protocol; its text follows ``policy``.

    A ``"longest"`` policy pads batches to their longest caption, not the context (``dynamic_padding``): the
    attention mask ends at the end token and attention is causal, so padding never changes a caption's
    features, only the work spent on it."""

    framework: Literal["open_clip", "transformers"] = "transformers"
    transform_description: str | None = None  # the cache describes the processor itself
    has_images = True

    def __init__(self, model: Any, tokenizer: Any, processor: Any, info: ModelInfo, policy: TextPolicy | None = None):
        self.model: Any = model.eval()  # a transformers PreTrainedModel (or its PEFT-merged form)
        self.tokenizer = tokenizer
        self.image_transform = _HFImageTransform(processor)
        self.info = info
        self.policy = policy or TEXT_POLICIES["clip"]
        # the tokenizer's own mask, or none where it gives none (policy "tokenizer"; CLIP's end-token mask is its own)
        self.text_mask = self.policy.attention_mask == "eos" or returns_attention_mask(tokenizer)
        self.dynamic_padding = self.policy.padding == "longest"
        self.naflex = str(getattr(model.config, "model_type", "")) == "siglip2"
        self.device = next(model.parameters()).device

    @property
    def eos_token_id(self) -> int | None:
        """The tokenizer's end token: attention stops after its first occurrence (the pad token may equal it)."""
        eos = self.tokenizer.eos_token_id
        return None if eos is None else int(eos)

    def text_attention_mask(self, tokens: torch.Tensor) -> torch.Tensor | None:
        """The text tower's attention mask for padded ``tokens``, by the policy (None: the tokenizer gives none, so
        the tower attends to every position, as the checkpoint's own processor + model do)."""
        if self.policy.attention_mask == "eos":
            return eos_attention_mask(tokens, self.eos_token_id)
        if not self.text_mask:
            return None
        pad = self.tokenizer.pad_token_id
        return tokenizer_attention_mask(tokens, None if pad is None else int(pad), self.eos_token_id)

    def to(self, device: str | torch.device) -> HFEncoder:
        self.model.to(device)
        self.device = torch.device(device)
        return self

    def prepare_texts(self, texts: Sequence[str]) -> list[str]:
        """Captions as the policy feeds them to the tokenizer (lower-cased for SigLIP)."""
        return [t.lower() for t in texts] if self.policy.lowercase else list(texts)

    def tokenize(self, texts: Sequence[str]) -> TokenizedTexts:
        ctx = self.info.context_length
        texts = self.prepare_texts(texts)
        enc = self.tokenizer(texts, padding=self.policy.padding, truncation=True, max_length=ctx, return_tensors="pt")
        lengths = np.array([len(x) for x in self.tokenizer(texts, truncation=False)["input_ids"]], dtype=np.int64)
        return TokenizedTexts(enc["input_ids"], lengths)

    @torch.inference_mode()
    def encode_images(self, pixels: torch.Tensor) -> torch.Tensor:
        pixels = pixels.to(device=self.device, non_blocking=True)
        inputs = unpack_naflex(pixels) if self.naflex else {"pixel_values": pixels}
        inputs["pixel_values"] = inputs["pixel_values"].to(self.model.dtype)  # fp16/bf16 weights
        f = feature_tensor(self.model.get_image_features(**inputs))
        return torch.nn.functional.normalize(f.float(), dim=-1)

    @torch.inference_mode()
    def encode_texts(self, tokens: torch.Tensor) -> torch.Tensor:
        tokens = tokens.to(self.device, non_blocking=True)
        mask = self.text_attention_mask(tokens)
        f = feature_tensor(self.model.get_text_features(input_ids=tokens, attention_mask=mask))
        return torch.nn.functional.normalize(f.float(), dim=-1)


_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


# A --pretrained value that names a weights file (else it is the hub revision).
WEIGHT_SUFFIXES = (".pt", ".pth", ".bin", ".safetensors", ".ckpt")
TEXT_POSITIONS = "text_model.embeddings.position_embedding.weight"


def weights_file(pretrained: str | None) -> str | None:
    """``pretrained`` when it names a weights file (an existing file, or a checkpoint suffix), else None."""
    if pretrained and (Path(pretrained).is_file() or pretrained.endswith(WEIGHT_SUFFIXES)):
        return pretrained
    return None


def load(model: str, pretrained: str | None = None, *, model_config: str | Path | None = None,
         context_length: int | None = None, device: str = "cpu", precision: str = "fp32",
         init_seed: int | None = 0, trust_remote_code: bool = False) -> HFEncoder:
    """The model registry's loader signature: ``pretrained`` is a weights file (a released GOAL / StructXLIP
    ``.pth``: HF ``CLIPModel`` keys, any text context) loaded into ``model``'s architecture, else the hub
    revision; no config or seed applies. A local folder whose config names code files is refused unless
    ``trust_remote_code`` (then it is the ``remote:`` family's to load)."""
    return HF.load(model, pretrained, model_config=model_config, context_length=context_length, device=device,
                   precision=precision, init_seed=init_seed, trust_remote_code=trust_remote_code)


def _auto_map_files(auto_map: Any) -> list[str]:
    """The Python files an ``auto_map`` names (``module.Class`` → ``module.py``; ``repo--module.Class`` → the file
    in that repo, written ``repo/module.py``)."""
    values: list[Any] = list(auto_map.values()) if isinstance(auto_map, dict) else []
    refs = [v for x in values for v in (x if isinstance(x, list) else [x]) if isinstance(v, str)]
    out = []
    for ref in refs:
        repo, _, ref = ref.rpartition("--")
        module = ref.rsplit(".", 1)[0].replace(".", "/") + ".py"
        out.append(f"{repo}/{module}" if repo else module)
    return sorted(set(out))


def code_files(folder: Path) -> list[str]:
    """The code files loading a local transformers folder would run (the remote-code family's, and what the hf:
    family refuses): the ``auto_map`` entries of its ``config.json``, ``tokenizer_config.json`` and
    ``preprocessor_config.json`` (read as untrusted files)."""
    files: list[str] = []
    for name in ("config.json", "tokenizer_config.json", "preprocessor_config.json"):
        if (folder / name).is_file():
            doc = read_json_untrusted(folder / name, f"the {name} of {folder}")
            files += _auto_map_files(doc.get("auto_map") if isinstance(doc, dict) else None)
    return sorted(set(files))


def local_folder(model: str) -> Path | None:
    """The local ``save_pretrained`` folder ``model`` names (``hf:DIR`` or a bare ``DIR``), None for a hub id."""
    path = Path(model.removeprefix("hf:"))
    return path if path.is_dir() else None


def _load_plain(model: str, pretrained: str | None, *, context_length: int | None, device: str,
                precision: str) -> HFEncoder:
    """:func:`load_hf_clip` of (``model``, ``pretrained``): a weights file into the base, else the hub revision."""
    weights = weights_file(pretrained)
    return load_hf_clip(model, context_length=context_length, device=device,
                        revision=None if weights else pretrained, precision=precision, weights=weights)


def load_hf_clip(name: str, *, context_length: int | None = None, device: str = "cpu",
                 revision: str | None = None, precision: str = "fp32", weights: str | None = None) -> HFEncoder:
    """Load ``hf:ORG/NAME`` (hub, needs the internet) or a local ``save_pretrained`` directory with ``AutoModel``.

    ``weights``: a state-dict file with HF ``CLIPModel`` keys (``model_state_dict`` / ``clip_model.`` wrappers
    unwrapped, read weights-only) replacing the base's weights; the text table's rows set the positions (GOAL's
    and StructXLIP's 248). The base supplies the config, tokenizer and image processor."""
    try:
        from transformers import AutoConfig, AutoImageProcessor, AutoModel, AutoTokenizer
    except ImportError as e:
        raise ConfigError("HF models need transformers: pip install 'hnbench[hf]'") from e
    path = name.removeprefix("hf:")
    if not Path(path).is_dir() and name.startswith("hf:") is False:
        raise ConfigError(f"{name}: not a directory; write hub models as hf:ORG/NAME")
    if precision not in _DTYPES:
        raise ConfigError(f"--precision must be one of {', '.join(_DTYPES)}, got {precision!r}")
    sd = _released_state_dict(weights) if weights else None
    at: dict[str, Any] = {} if revision is None else {"revision": revision}  # None: the hub's default branch
    # trust_remote_code=False in every call: transformers never runs (nor asks on stdin whether to run) a
    # config's auto_map code here; a local folder that names some was refused before (HFFamily.remote_code)
    try:
        config: Any = AutoConfig.from_pretrained(path, trust_remote_code=False, **at)
        _check_image_text(name, config)
        # Any: transformers' decorated methods (to, get_*_features) are not typed usefully
        model: Any
        if sd is None:
            model = AutoModel.from_pretrained(path, use_safetensors=None, trust_remote_code=False, **at)
        else:
            config.text_config.max_position_embeddings = int(sd[TEXT_POSITIONS].shape[0])
            with _no_init():  # every weight is overwritten by the strict load below
                model = cast(Any, AutoModel).from_config(config, trust_remote_code=False)
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=False, **at)
        processor = cast(Any, AutoImageProcessor).from_pretrained(path, trust_remote_code=False, **at)
    except (OSError, ValueError) as e:
        if _REMOTE_CODE_REFUSED in str(e):  # a hub config that names code: transformers refused to run it
            raise ConfigError(f"{name}: its config names remote code, which the hf: family never runs; if you trust "
                              f"it, load it as remote:{path} --pretrained <the 40-hex commit> --trust-remote-code"
                              ) from None
        raise CheckpointError(f"could not load HF model {name}: {first_line(e)}") from e
    if sd is not None:
        _load_weights(model, sd, f"checkpoint {weights} into {name}")
    model = model.to(_DTYPES[precision])
    policy = text_policy(str(model.config.model_type))
    text_config = model.config.text_config
    max_pos = int(text_config.max_position_embeddings)
    ctx = context_length or min(policy.max_length or max_pos, max_pos)
    if ctx > max_pos:
        raise ConfigError(f"{name}: --context-length {ctx} exceeds the model's {max_pos} positions")
    if sd is not None and int(tokenizer.model_max_length) < max_pos:
        tokenizer.model_max_length = max_pos  # the base's 77: would warn on every caption the table now fits
    embed_dim = (getattr(model.config, "projection_dim", None) or getattr(text_config, "projection_size", None)
                 or text_config.hidden_size)
    weights_fp = state_dict_fingerprint(model.state_dict())
    unmasked = policy.attention_mask == "tokenizer" and not returns_attention_mask(tokenizer)
    info = ModelInfo(arch=f"hf:{path}" if not name.startswith("hf:") else name,
                     pretrained=weights or revision or "main",
                     fingerprint=_unmasked_fingerprint(weights_fp) if unmasked else weights_fp, context_length=ctx,
                     n_params=sum(p.numel() for p in model.parameters()),
                     embed_dim=int(embed_dim), framework=HFEncoder.framework,
                     extra={"precision": precision, **({"base": name} if sd is not None else {}),
                            **({"model_type": str(model.config.model_type)}
                               if model.config.model_type != "clip" else {}),
                            **({"text_attention_mask": "none (the tokenizer returns input ids only)",
                                "weights_fingerprint": weights_fp} if unmasked else {})})
    return HFEncoder(model.to(device), tokenizer, processor, info, policy)


def _unmasked_fingerprint(weights_fp: str) -> str:
    """The fingerprint (the embedding cache's key) of a model whose text tower gets no attention mask: its weights'
    and that, so text embeddings cached while hnbench still rebuilt a mask from the pad ids are never served."""
    return hashlib.sha256(f"{weights_fp} text attention mask: none".encode()).hexdigest()[:len(weights_fp)]


# What transformers says when trust_remote_code=False meets a config whose auto_map it would have to run.
_REMOTE_CODE_REFUSED = "trust_remote_code=True"


def _check_image_text(name: str, config: Any) -> None:
    """One line unless ``config`` is a transformers image–text model (both towers' feature methods)."""
    from transformers import MODEL_MAPPING

    model_class = MODEL_MAPPING.get(type(config), None) if type(config) in MODEL_MAPPING else None
    if model_class is None or not all(hasattr(model_class, m) for m in ("get_image_features", "get_text_features")):
        kind = getattr(config, "model_type", type(config).__name__)
        raise ConfigError(f"{name}: a transformers {kind!r} model is not an image-text model (AutoModel gives no "
                          "get_image_features / get_text_features)")


def _no_init() -> contextlib.AbstractContextManager[None]:
    """transformers' switch that skips weight initialisation (its module moved in 5.0), else nothing."""
    import importlib

    for module in ("transformers.initialization", "transformers.modeling_utils"):
        try:
            switch = getattr(importlib.import_module(module), "no_init_weights", None)
        except ImportError:
            continue
        if switch is not None:
            return cast(contextlib.AbstractContextManager[None], switch())
    return contextlib.nullcontext()


def _released_state_dict(weights: str) -> dict[str, torch.Tensor]:
    """A weights file's state dict, refused in one line unless it has HF ``CLIPModel`` keys (saying what to pass)."""
    sd = read_state_dict(weights)
    if TEXT_POSITIONS not in sd:
        raise CheckpointError(f"{weights}: no {TEXT_POSITIONS} key, so not an HF CLIPModel state dict; "
                              f"{layout_hint(sd)}")
    return sd


def _load_weights(model: Any, sd: dict[str, torch.Tensor], source: str) -> None:
    """Strict load of ``sd`` into ``model``: position-id buffers follow the model (saved or not, by transformers
    version), known training-only modules are dropped with a warning, anything else that does not fit is refused."""
    own = model.state_dict()
    sd = {k: v for k, v in sd.items() if not k.endswith(POSITION_IDS_SUFFIX)}
    sd.update({k: v for k, v in own.items() if k.endswith(POSITION_IDS_SUFFIX)})
    sd = drop_training_only(sd, own, source, HF.training_only_keys)
    load_into(model, {k: v.to(own[k].dtype) if k in own else v for k, v in sd.items()}, source,
              hint=layout_hint(sd))


class HFFamily(ModelFamily):
    """transformers image–text models: ``hf:ORG/NAME`` (hub) or a ``save_pretrained`` directory; a weights file as
    ``--pretrained`` (GOAL / StructXLIP) loads into the base's architecture, anything else names the revision."""

    name = "hf"
    framework = "transformers"
    export_names = ("hf_model",)
    training_only_keys = MappingProxyType(FINELIP_CROSS_NET)  # as before families declared their own
    encoding_revision = 2  # 2: a tokenizer that returns no attention mask is encoded without one (SigLIP)

    def load(self, model: str, pretrained: str | None = None, *, model_config: str | Path | None = None,
             context_length: int | None = None, device: str = "cpu", precision: str = "fp32",
             init_seed: int | None = 0, trust_remote_code: bool = False) -> HFEncoder:
        files = self.remote_code(model, pretrained)
        if not files:
            return _load_plain(model, pretrained, context_length=context_length, device=device, precision=precision)
        if not trust_remote_code:  # also when called past load_model, which checks it first
            raise ConfigError(remote_code_refusal(model, files))
        # trusted: the remote-code family's loader (its code files pinned by sha256 and recorded)
        remote = f"remote:{local_folder(model)}"
        return cast(HFEncoder, family_of(remote)(  # a RemoteEncoder (an HFEncoder with the policy's text keywords)
            remote, pretrained, model_config=model_config, context_length=context_length, device=device,
            precision=precision, init_seed=init_seed, trust_remote_code=True))

    def remote_code(self, model: str, pretrained: str | None) -> list[str]:
        """The code files a local folder's ``config.json`` / ``tokenizer_config.json`` / ``preprocessor_config.json``
        name in ``auto_map`` (read as untrusted files); none for a hub id, whose config is known only once fetched
        (transformers, told ``trust_remote_code=False``, then refuses it: :func:`load_hf_clip`)."""
        folder = local_folder(model)
        return [] if folder is None else code_files(folder)

    def check_training(self, model: str) -> None:
        if self.remote_code(model, None):  # loaded as remote: is, so trained as remote: is (not at all)
            family_of(f"remote:{local_folder(model)}").check_training(model)

    def weight_files(self, model: str, pretrained: str | None, model_config: str | Path | None) -> list[str] | None:
        if not Path(model).is_dir() or model.startswith("hf:"):
            return None  # a hub id: its files are the hub's
        if self.remote_code(model, pretrained):
            return None  # the remote-code family's model (never remembered: always built)
        weights = weights_file(pretrained)
        if weights and not Path(weights).is_file():
            return None  # the loader says it is missing
        files = sorted(str(p.resolve()) for p in Path(model).rglob("*") if p.is_file())
        return files + ([str(Path(weights).resolve())] if weights else [])

    def text_preprocessing(self, encoder: Any) -> TextPreprocessing:
        policy: TextPolicy = encoder.policy
        return TextPreprocessing(tokenizer=type(encoder.tokenizer).__name__,
                                 context_length=int(encoder.info.context_length), padding=policy.padding,
                                 lowercase=policy.lowercase)

    def tower_of(self, param_name: str) -> str:
        if "logit_scale" in param_name or "logit_bias" in param_name:
            return "shared"
        return "image" if param_name.startswith(("vision_model.", "visual_projection")) else "text"

    def lora_targets(self) -> list[str]:
        return ["q_proj", "k_proj", "v_proj", "out_proj"]

    def export(self, module: Any, encoder: Any, out_dir: Path, metadata: dict[str, str]) -> Path:
        target = out_dir / "hf_model"
        module.save_pretrained(str(target), safe_serialization=True)
        encoder.tokenizer.save_pretrained(str(target))
        encoder.image_transform.processor.save_pretrained(str(target))
        return target

    def revision(self, pretrained: str | None) -> str | None:
        return pretrained

    def image_features(self, module: Any, pixels: torch.Tensor) -> torch.Tensor:
        naflex = str(getattr(module.config, "model_type", "")) == "siglip2"
        inputs = unpack_naflex(pixels) if naflex else {"pixel_values": pixels}
        return torch.nn.functional.normalize(feature_tensor(module.get_image_features(**inputs)), dim=-1)

    def text_features(self, module: Any, tokens: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        return torch.nn.functional.normalize(feature_tensor(module.get_text_features(
            input_ids=tokens, attention_mask=attention_mask)), dim=-1)

    def text_attention_mask(self, encoder: Any, tokens: torch.Tensor,
                            eos_token_id: int | None = None) -> torch.Tensor | None:
        # the encoder's own mask, by its model_type's policy (SigLIP's is not CLIP's end-token mask)
        return eos_attention_mask(tokens, eos_token_id) if encoder is None else encoder.text_attention_mask(tokens)

    def reload(self, exported: Path, encoder: Any, *, device: str = "cpu") -> HFEncoder:
        return load_hf_clip(str(exported), context_length=int(encoder.info.context_length), device=device,
                            precision=encoder.info.extra.get("precision", "fp32"))


HF = HFFamily()
