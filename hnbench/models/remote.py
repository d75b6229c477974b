"""Remote-code image–text models (``remote:ORG/NAME`` or ``remote:DIR``): transformers models whose classes ship as
Python files beside the weights (``config.json``'s ``auto_map``), e.g. FG-CLIP 1/2 and jina-clip v1/v2.

Loading one runs those files, so it is refused unless ``--trust-remote-code`` is given (one line naming the files,
before anything loads: :meth:`RemoteFamily.remote_code`). A hub model must name its revision as a 40-hex commit
(``--pretrained``), so the code that runs is the code that was read; a local folder is pinned by the sha256 of its
code files. Either is recorded (``info.pretrained``, ``info.extra["revision"]``) with the files that ran; the
model's fingerprint (the embedding cache's key) covers the weights, that revision and the text policy.

Captions follow the :class:`RemotePolicy` declared for the config's ``model_type`` in :data:`REMOTE_POLICIES`
(FG-CLIP's long-text mode as extra ``get_text_features`` keywords, jina-clip's per-direction task prompt), recorded
as ``info.extra["text_preprocessing"]``. The encoder is :class:`~hnbench.models.hf.HFEncoder`'s, with the policy's
text keywords passed on.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from hnbench.errors import CheckpointError, ConfigError, first_line
from hnbench.models.base import ModelInfo, state_dict_fingerprint
from hnbench.models.family import ModelFamily, TextPreprocessing, remote_code_refusal
from hnbench.models.hf import _DTYPES, HFEncoder, TextPolicy, code_files, feature_tensor

__all__ = ["REMOTE_POLICIES", "REMOTE", "RemoteEncoder", "RemoteFamily", "RemotePolicy", "code_files"]

PREFIX = "remote:"
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


@dataclass(frozen=True)
class RemotePolicy(TextPolicy):
    """A :class:`~hnbench.models.hf.TextPolicy` with what remote-code towers add: ``text_kwargs``, keywords of the
    model's ``get_text_features`` (FG-CLIP's long-text mode), and ``prompts``, a text prefix per retrieval direction
    (``"query"``: text→image queries, ``"candidate"``: image→text candidates; jina-clip's task prompt)."""

    text_kwargs: dict[str, Any] = field(default_factory=dict)
    prompts: dict[str, str] = field(default_factory=dict)


JINA_QUERY = "Represent the query for retrieving evidence documents: "
# Per config model_type (suite.md §2); a type not listed: pad to the context, the tokenizer's mask, no prompts.
REMOTE_POLICIES: dict[str, RemotePolicy] = {
    # FG-CLIP v1: the long path (second position table, text_filip_projection) up to 248 tokens
    "fgclip": RemotePolicy("max_length", 248, text_kwargs={"walk_short_pos": False}),
    # FG-CLIP 2: walk_type="long", 196 tokens, lower-cased captions (its eval scripts)
    "fgclip2": RemotePolicy("max_length", 196, lowercase=True, text_kwargs={"walk_type": "long"}),
    # jina-clip: text→image queries carry the retrieval.query task prompt, documents (candidates) none
    "jina_clip": RemotePolicy("longest", prompts={"query": JINA_QUERY}),
}
DEFAULT_REMOTE_POLICY = RemotePolicy("max_length")


def remote_policy(model_type: str) -> RemotePolicy:
    """The declared policy of a remote-code ``model_type`` (:data:`DEFAULT_REMOTE_POLICY` if none is)."""
    return REMOTE_POLICIES.get(model_type, DEFAULT_REMOTE_POLICY)


def _split(model: str) -> tuple[str, bool]:
    """The folder or hub id of ``remote:…`` and whether it is a local folder."""
    path = model.removeprefix(PREFIX)
    return path, Path(path).is_dir()


def _code_digest(folder: Path, files: list[str]) -> str:
    """sha256 over the local code files' names and bytes (16 hex digits): a local folder's pinned revision."""
    h = hashlib.sha256()
    for name in files:
        p = folder / name
        h.update(name.encode() + b"\0" + (p.read_bytes() if p.is_file() else b"<missing>") + b"\0")
    return "sha256:" + h.hexdigest()[:16]


class RemoteEncoder(HFEncoder):
    """:class:`~hnbench.models.hf.HFEncoder` whose text forward passes the policy's ``text_kwargs``."""

    policy: RemotePolicy

    @torch.inference_mode()
    def encode_texts(self, tokens: torch.Tensor) -> torch.Tensor:
        tokens = tokens.to(self.device, non_blocking=True)
        mask = self.text_attention_mask(tokens)
        f = feature_tensor(self.model.get_text_features(input_ids=tokens, attention_mask=mask,
                                                        **self.policy.text_kwargs))
        return torch.nn.functional.normalize(f.float(), dim=-1)


class RemoteFamily(ModelFamily):
    """transformers models with remote code: ``remote:DIR`` (a local folder) or ``remote:ORG/NAME`` (the hub, at the
    commit ``--pretrained`` names); loading runs the folder's code, so only with ``--trust-remote-code``."""

    name = "remote"

    def remote_code(self, model: str, pretrained: str | None) -> list[str]:
        path, local = _split(model)
        if local:
            return code_files(Path(path)) or ["config.json (no auto_map: nothing but transformers' own classes)"]
        return [f"the auto_map files of hub repo {path}" + (f" at {pretrained}" if pretrained else "")]

    def check(self, model: str, pretrained: str | None = None, *, model_config: str | Path | None = None) -> None:
        path, local = _split(model)
        if model_config is not None:
            raise ConfigError(f"{model}: --model-config registers open_clip architectures; a remote-code model's "
                              "architecture is its folder's config.json")
        if local:
            if not (Path(path) / "config.json").is_file():
                raise ConfigError(f"{model}: no config.json in {path}")
            if pretrained is not None:
                raise ConfigError(f"{model}: a local folder is pinned by its files' sha256; leave --pretrained out")
        elif pretrained is None or not _COMMIT.match(pretrained):
            raise ConfigError(f"{model}: pin the revision of a hub model's remote code: --pretrained <the 40-hex "
                              f"commit>, got {pretrained!r}")

    def load(self, model: str, pretrained: str | None = None, *, model_config: str | Path | None = None,
             context_length: int | None = None, device: str = "cpu", precision: str = "fp32",
             init_seed: int | None = 0, trust_remote_code: bool = False) -> RemoteEncoder:
        self.check(model, pretrained, model_config=model_config)
        if not trust_remote_code:  # also when called past load_model, which checks it first
            raise ConfigError(remote_code_refusal(model, self.remote_code(model, pretrained)))
        return load_remote(model, pretrained, context_length=context_length, device=device, precision=precision)

    def check_training(self, model: str) -> None:
        raise ConfigError(f"{model}: remote-code models are scored, not fine-tuned: their towers, logit scale and "
                          "export are the release's own code, which declares none of them to hnbench")

    def text_preprocessing(self, encoder: Any) -> TextPreprocessing:
        policy: RemotePolicy = encoder.policy
        return TextPreprocessing(tokenizer=type(encoder.tokenizer).__name__,
                                 context_length=int(encoder.info.context_length), padding=policy.padding,
                                 lowercase=policy.lowercase, prompts=dict(policy.prompts))

    def prompts(self, encoder: Any) -> dict[str, str]:
        return dict(encoder.policy.prompts)


def load_remote(model: str, pretrained: str | None, *, context_length: int | None = None, device: str = "cpu",
                precision: str = "fp32") -> RemoteEncoder:
    """Build a remote-code model (trusted already) with ``AutoModel`` / ``AutoTokenizer`` / ``AutoImageProcessor``."""
    try:
        from transformers import AutoConfig, AutoImageProcessor, AutoModel, AutoTokenizer
    except ImportError as e:
        raise ConfigError("remote-code models need transformers: pip install 'hnbench[hf]'") from e
    path, local = _split(model)
    at: dict[str, Any] = {} if local else {"revision": pretrained}  # a hub model: at the pinned commit
    files = code_files(Path(path)) if local else []
    revision = _code_digest(Path(path), files) if local else str(pretrained)
    try:
        config: Any = AutoConfig.from_pretrained(path, trust_remote_code=True, **at)
        net: Any = AutoModel.from_pretrained(path, trust_remote_code=True, **at)
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=True, **at)
        processor = AutoImageProcessor.from_pretrained(path, trust_remote_code=True, **at)  # type: ignore[no-untyped-call]
    except (OSError, ValueError, ImportError) as e:
        raise CheckpointError(f"could not load remote-code model {model}: {first_line(e)}") from e
    if not all(callable(getattr(net, m, None)) for m in ("get_image_features", "get_text_features")):
        raise ConfigError(f"{model}: {type(net).__name__} is not an image-text model (no get_image_features / "
                          "get_text_features)")
    if precision not in _DTYPES:
        raise ConfigError(f"--precision must be one of {', '.join(_DTYPES)}, got {precision!r}")
    net = net.to(_DTYPES[precision])
    model_type = str(getattr(config, "model_type", ""))
    policy = remote_policy(model_type)
    text_config = getattr(config, "text_config", config)
    max_pos = int(getattr(text_config, "max_position_embeddings", 0) or tokenizer.model_max_length)
    ctx = context_length or min(policy.max_length or max_pos, max_pos)
    if ctx > max_pos:
        raise ConfigError(f"{model}: --context-length {ctx} exceeds the model's {max_pos} positions")
    embed_dim = (getattr(config, "projection_dim", None) or getattr(text_config, "projection_size", None)
                 or getattr(text_config, "hidden_size", 0))
    # the code and the text policy are the model as much as its weights: all three key the embedding cache
    weights_fp = state_dict_fingerprint(net.state_dict())
    fingerprint = hashlib.sha256(f"{weights_fp} {revision} {policy!r}".encode()).hexdigest()[:16]
    info = ModelInfo(arch=model, pretrained=revision, fingerprint=fingerprint,
                     context_length=ctx, n_params=sum(p.numel() for p in net.parameters()), embed_dim=int(embed_dim or 0),
                     framework=HFEncoder.framework,
                     extra={"precision": precision, "model_type": model_type, "trust_remote_code": True,
                            "weights_fingerprint": weights_fp,
                            "revision": revision, "code_files": files or REMOTE.remote_code(model, pretrained)})
    encoder = RemoteEncoder(net.to(device), tokenizer, processor, info, policy)
    info.extra["text_preprocessing"] = REMOTE.text_preprocessing(encoder).to_dict()
    return encoder


REMOTE = RemoteFamily()
