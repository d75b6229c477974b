"""The model-family adapter contract: everything hnbench needs to know about one family, declared in one module.

A family is a :class:`ModelFamily` instance registered in :data:`hnbench.registry.MODELS` (one line, with the
name prefixes it claims). It answers:

- **load**: ``family(model, pretrained, model_config=…, context_length=…, device=…, precision=…, init_seed=…)``
  (the registry's loader signature) → an :class:`~hnbench.models.base.Encoder`;
- **fingerprint memo**: :meth:`ModelFamily.weight_files` (the local files that define the weights, or
  :data:`RANDOM_INIT`, or None: never remembered, always built) and :attr:`ModelFamily.library_versions`
  (the packages whose versions enter the memo's key), read by :mod:`hnbench.evaluation.remembered`;
- **text preprocessing**: :meth:`ModelFamily.text_preprocessing` of a loaded encoder (tokenizer, padding,
  case, context length, prompts per direction), recorded with the model; :attr:`ModelFamily.trims_text_batches`
  (its encoders run each text batch only up to its longest caption, equal to the padded forward: open_clip's
  causal towers), for which :func:`hnbench.evaluation.encode.encode_texts` groups captions by length;
- **pairwise scorers**: :meth:`ModelFamily.pair_scorers` (query-conditioned scorers, :mod:`hnbench.models.scorers`; none for a
  dual encoder) and :meth:`ModelFamily.pair_scorer_names` (what it offers, asked before anything loads);
- **training-only keys**: :attr:`ModelFamily.training_only_keys` (modules its releases carry that scoring never
  uses: dropped with a warning; any other unexpected key is refused) and :meth:`ModelFamily.claims` (its releases'
  key signature: another family's loader given such a file refuses it, :func:`claimed_elsewhere`);
- **remote code**: :meth:`ModelFamily.remote_code` (the release's code files loading would run: refused without
  ``trust_remote_code``, :func:`check_trusted`) and :meth:`ModelFamily.prompts` (the per-direction text prefixes the
  evaluation applies);
- **training**: :meth:`ModelFamily.check_training` (a family that cannot be trained at all, refused up front),
  :meth:`ModelFamily.tower_of` (a parameter's tower), :meth:`ModelFamily.lora_targets` (default
  peft targets), :meth:`ModelFamily.stretch` (Long-CLIP's text-position stretch), :meth:`ModelFamily.export` (a finished model in a form hnbench loads again) and
  :meth:`ModelFamily.reload` (load that export); the training forward of its CLIP module
  (:meth:`ModelFamily.image_features`, :meth:`ModelFamily.text_features` with
  :meth:`ModelFamily.text_attention_mask`: by default open_clip's CLIP interface, which finds the end token itself)
  and what its ``pretrained`` means in an adapter's base record (:meth:`ModelFamily.revision`).
  :mod:`hnbench.train` asks these and never branches on a family's name.

A plain callable registered as a family (a loader function) is wrapped by :func:`family_of` in a
:class:`ModelFamily` that loads with it and is never remembered: an unknown family is always built, never
taken for a random init.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from torch import Tensor

from hnbench.errors import ConfigError
from hnbench.models.base import Encoder

__all__ = ["LIBRARY_VERSIONS", "RANDOM_INIT", "ModelFamily", "TextPreprocessing", "as_family", "check_trusted",
           "claimed_elsewhere",
           "export_names", "family_of", "remote_code_refusal"]

# Stands in for the weights file of a random-init model: its weights are a function of the init seed.
RANDOM_INIT = "<cpu rng state>"
# The packages whose versions key a remembered fingerprint unless a family says otherwise.
LIBRARY_VERSIONS = ("torch", "torchvision", "open_clip_torch", "transformers", "timm")


@dataclass(frozen=True)
class TextPreprocessing:
    """How a family's captions reach its text tower (what ``tokenize`` does), as recorded data.

    ``prompts``: a prefix per retrieval direction's text (``"query"``: text→image queries, ``"candidate"``:
    image→text candidates); empty when the text is used as given. ``lowercase``: hnbench lower-cases the captions
    before the tokenizer (a tokenizer that lower-cases by itself, CLIP's BPE, is the tokenizer's business)."""

    tokenizer: str
    context_length: int
    padding: str  # "context" | "longest" | "max_length"
    lowercase: bool = False
    prompts: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"tokenizer": self.tokenizer, "context_length": self.context_length, "padding": self.padding,
                "lowercase": self.lowercase, "prompts": dict(self.prompts)}


class ModelFamily:
    """One model family's adapter (subclass it in the family's module; register an instance in ``MODELS``).

    The defaults describe a family hnbench knows nothing about: it loads through ``loader`` and is never
    remembered; it has no training support until it declares its towers and targets."""

    name = "model family"
    framework: str | None = None  # the ``info.framework`` its encoders report, if the family declares one
    export_names: tuple[str, ...] = ()  # the entries :meth:`export` writes into a training run's folder
    library_versions: tuple[str, ...] = LIBRARY_VERSIONS
    # Bumped whenever this family's loading or encoding changes what the same files embed to (a tokenizer's
    # mask, a pooling fix): part of the remembered-fingerprint key, so a record written before the change is
    # never used after it (hnbench.evaluation.remembered).
    encoding_revision = 1
    # key prefix → why: modules its released checkpoints carry beside the towers that plain-cosine scoring never
    # uses (dropped with a WARNING naming them; any other unexpected key is refused, listed)
    training_only_keys: Mapping[str, str] = MappingProxyType({})
    # Its encoders' encode_texts may run a batch only up to its longest caption (a causal text tower pooled at the
    # end token, where the padding after it changes nothing): encode_texts then groups captions of similar length.
    trims_text_batches = False

    def __init__(self, loader: Callable[..., Encoder] | None = None):
        self._loader = loader

    def load(self, model: str, pretrained: str | None = None, *, model_config: str | Path | None = None,
             context_length: int | None = None, device: str = "cpu", precision: str = "fp32",
             init_seed: int | None = 0) -> Encoder:
        """Build the encoder (the registry's loader signature)."""
        if self._loader is None:
            raise NotImplementedError(f"{type(self).__name__} declares no loader")
        return self._loader(model, pretrained, model_config=model_config, context_length=context_length,
                            device=device, precision=precision, init_seed=init_seed)

    def __call__(self, model: str, pretrained: str | None = None, **kwargs: Any) -> Encoder:
        return self.load(model, pretrained, **kwargs)

    def weight_files(self, model: str, pretrained: str | None, model_config: str | Path | None) -> list[str] | None:
        """The local files that define the weights :meth:`load` would build (``[RANDOM_INIT]`` for a seeded random
        init), or None when they cannot be pinned down locally (then the model is always built)."""
        return None

    def text_preprocessing(self, encoder: Any) -> TextPreprocessing:
        """What ``encoder.tokenize`` does (a loaded encoder of this family)."""
        return TextPreprocessing(tokenizer=f"{type(encoder).__name__}.tokenize",
                                 context_length=int(encoder.info.context_length),
                                 padding="longest" if encoder.dynamic_padding else "context")

    def check(self, model: str, pretrained: str | None = None, *, model_config: str | Path | None = None) -> None:
        """What can be checked of (``model``, ``pretrained``) without building anything (one line each); by
        default nothing: the family checks when it loads."""

    def claims(self, state_dict: Mapping[str, Tensor], arch: str) -> str | None:
        """Why ``state_dict`` (a checkpoint another family's loader was given for architecture ``arch``) is this
        family's release, with what to pass instead (one phrase), else None: another family's loader refuses it
        (:func:`claimed_elsewhere`) rather than loading it wrong. By default nothing is claimed."""
        return None

    def remote_code(self, model: str, pretrained: str | None) -> list[str]:
        """The code files of the release that loading ``model`` would run (transformers' ``auto_map``); a family
        that names any is loaded only with ``trust_remote_code`` (:func:`check_trusted`). None by default."""
        return []

    def catalogue(self, *, architectures: bool = True) -> list[dict[str, Any]]:
        """The models this family names of its own, beside the zoo's releases, as rows of
        :func:`hnbench.list_models` (``kind`` ``"builtin"``: weights shipped with hnbench; ``"architecture"``: its
        library's architectures, listed only with ``architectures``); none by default."""
        return []

    def prompts(self, encoder: Any) -> dict[str, str]:
        """The text prefix per retrieval direction (``"query"``, ``"candidate"``) the evaluation applies to a loaded
        encoder's captions; none by default (asked of any encoder, remembered ones included, without building it)."""
        return {}

    def pair_scorers(self, encoder: Any) -> dict[str, Any]:
        """The query-conditioned scorers (:class:`hnbench.models.scorers.PairScorer`, by name) a loaded encoder of this family
        offers beside its cosine (``--scorer NAME``); ``{}`` by default: a dual encoder."""
        return {}

    def pair_scorer_names(self, model: str, pretrained: str | None) -> list[str] | None:
        """The names :meth:`pair_scorers` will offer for (``model``, ``pretrained``), known without building it, so a
        scorer it lacks is refused before the data loads; None: known only once it loads. A family that does not
        override :meth:`pair_scorers` offers none."""
        return [] if type(self).pair_scorers is ModelFamily.pair_scorers else None

    def check_training(self, model: str) -> None:
        """Refuse (one line, before anything loads) to fine-tune ``model`` where the family cannot be trained at
        all; by default nothing: the trainer's own checks apply."""

    def tower_of(self, param_name: str) -> str:
        """``"image"``, ``"text"`` or ``"shared"`` for a parameter name of the family's CLIP module."""
        raise ConfigError(f"{self.name}: no tower split declared, so it cannot be trained")

    def lora_targets(self) -> list[str]:
        """The module-name suffixes peft adapts by default."""
        raise ConfigError(f"{self.name}: no LoRA targets declared; pass --lora-targets")

    def stretch(self, encoder: Any, context_length: int) -> Encoder:
        """``encoder`` with its text positions stretched to ``context_length`` (Long-CLIP's knob-and-stretch)."""
        raise ConfigError(f"{self.name}: its text positions cannot be stretched (stretch_context is open_clip's)")

    def export(self, module: Any, encoder: Any, out_dir: Path, metadata: dict[str, str]) -> Path:
        """Write ``module`` (the family's CLIP module, trained) under ``out_dir`` in a form :meth:`reload` loads."""
        raise ConfigError(f"{self.name}: no export declared, so a trained model cannot be written")

    def reload(self, exported: Path, encoder: Any, *, device: str = "cpu") -> Encoder:
        """Load what :meth:`export` wrote (``encoder``: the encoder it was trained from)."""
        raise ConfigError(f"{self.name}: no reload declared")

    def revision(self, pretrained: str | None) -> str | None:
        """The hub revision ``pretrained`` names, recorded in an adapter's base record (None: it names weights)."""
        return None

    # -- the training forward (the module may be peft-wrapped); the defaults: open_clip's CLIP interface ------
    def image_features(self, module: Any, pixels: Tensor) -> Tensor:
        """L2-normalised image features of the family's CLIP ``module``, with gradients."""
        features: Tensor = module.encode_image(pixels, normalize=True)
        return features

    def text_features(self, module: Any, tokens: Tensor, attention_mask: Tensor | None) -> Tensor:
        """L2-normalised text features of padded ``tokens`` (``attention_mask``: :meth:`text_attention_mask`'s)."""
        features: Tensor = module.encode_text(tokens, normalize=True)
        return features

    def text_attention_mask(self, encoder: Any, tokens: Tensor, eos_token_id: int | None = None) -> Tensor | None:
        """The mask the text tower takes for padded ``tokens`` in training, the one ``encoder`` (the encoder the
        module came from; None: only ``eos_token_id`` is known) uses to evaluate; None: the tower needs none."""
        return None


def remote_code_refusal(model: str, files: list[str]) -> str:
    """The one line that refuses to run ``model``'s release code without ``--trust-remote-code``."""
    return (f"{model}: loading it runs remote code ({', '.join(files)}); pass --trust-remote-code if you trust it "
            "(the revision is pinned and recorded)")


def check_trusted(model: str, pretrained: str | None, trust_remote_code: bool) -> dict[str, bool]:
    """Refuse (one line naming the files) a model whose family runs release code unless ``trust_remote_code``; the
    keywords its family's ``load`` then takes (``trust_remote_code=True`` for such a family, none otherwise)."""
    from hnbench.errors import ConfigError
    from hnbench.models import zoo

    zoo.check(model, pretrained)  # a zoo name whose weights cannot be had: one line, before anything loads
    model, pretrained = (resolved := zoo.resolve(model, pretrained)).model, resolved.pretrained
    family = family_of(model)
    files = family.remote_code(model, pretrained)
    if not files:
        return {}
    if not trust_remote_code:
        raise ConfigError(remote_code_refusal(model, files))
    return {"trust_remote_code": True}


def claimed_elsewhere(state_dict: Mapping[str, Tensor], loading: ModelFamily, arch: str) -> str | None:
    """The first registered family other than ``loading`` that :meth:`~ModelFamily.claims` ``state_dict`` (its
    reason and advice), else None: the key signatures every family declares, asked by a loader before it loads."""
    from hnbench.registry import MODELS

    for name in MODELS.names():
        found: Any = MODELS.get(name)
        if isinstance(found, ModelFamily) and found is not loading:
            why = found.claims(state_dict, arch)
            if why:
                return why
    return None


def family_of(model: str) -> ModelFamily:
    """The adapter of the family that loads ``model`` (a registered plain loader: wrapped, never remembered)."""
    from hnbench.models.zoo import model_of
    from hnbench.registry import MODELS, model_family

    name = model_family(model_of(model))  # a zoo name: its entry's family
    found: Any = MODELS.get(name)
    if isinstance(found, ModelFamily):
        return found
    family = ModelFamily(found)
    family.name = name
    return family


def export_names() -> tuple[str, ...]:
    """Every registered family's :attr:`ModelFamily.export_names` (what a training run's folder may hold)."""
    from hnbench.registry import MODELS

    found = (MODELS.get(name) for name in MODELS.names())
    return tuple(dict.fromkeys(n for f in found if isinstance(f, ModelFamily) for n in f.export_names))


def as_family(family: ModelFamily | str) -> ModelFamily:
    """``family``, or the registered family a name stands for: a :data:`~hnbench.registry.MODELS` entry or the
    ``framework`` a family declares (an encoder's ``info.framework``)."""
    if isinstance(family, ModelFamily):
        return family
    from hnbench.registry import MODELS

    if family in MODELS.names():
        found: Any = MODELS.get(family)
        if isinstance(found, ModelFamily):
            return found
    for name in MODELS.names():
        found = MODELS.get(name)
        if isinstance(found, ModelFamily) and found.framework == family:
            return found
    raise ConfigError(f"unknown model framework {family!r}")
