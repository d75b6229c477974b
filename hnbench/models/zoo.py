"""The model zoo: named releases users score (``--model longclip-l14``), each declared once here as a
:class:`ZooEntry` and listed by name in :data:`hnbench.registry.MODEL_ZOO`.

An entry says which family loads it, the ``--model`` / ``--pretrained`` it expands to, where its weights come
from (:class:`Weights`: a Hugging Face repo file pinned where the spec gives a revision, a hub model, an
open_clip tag, a URL with its published sha256, or "manual" with the page to get them from), its context length
and text policy, a one-line description, its license where known, what is unverified (``suite.md`` §2) and the
(source, method) keys of its rows in the packaged ``published-results.csv``.

:func:`resolve` turns a zoo name into what its family loads (a user's explicit ``--pretrained`` wins over the
entry's weights); :func:`check` says, before anything loads, whether the weights can be had (one line naming
what to download and from where, or, for a manual entry, to pass ``--pretrained FILE``); :func:`list_models`
is ``hnbench models`` (with hnbench's built-in model and open_clip's architectures beside the zoo). Nothing here
touches the network except :func:`fetch` of weights; importing it imports no torch (listing open_clip's
architectures does).
"""

from __future__ import annotations

import os
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from hnbench.errors import CheckpointError, ConfigError, DataError
from hnbench.validate import MODEL_FORMATS

if TYPE_CHECKING:
    import pandas as pd

    from hnbench.models.base import Encoder

E = TypeVar("E", bound="Encoder")

__all__ = ["MODEL_KINDS", "Resolved", "Weights", "ZooEntry", "check", "entry_of", "fetch", "list_models", "mark",
           "model_of", "on_machine", "reference_numbers", "resolve"]


@dataclass(frozen=True)
class Weights:
    """Where an entry's weights come from. ``kind``: ``"hub-file"`` (``repo`` / ``filename`` at ``revision``),
    ``"hub-model"`` (a transformers repo the family downloads itself; ``revision`` passed as ``--pretrained``),
    ``"open_clip-tag"`` (``tag``: open_clip downloads it), ``"url"`` (a ``.tar.gz`` checked against ``sha256``,
    unpacked into hnbench's cache; ``folder``: the directory (or file) inside it that is the weights) or ``"manual"``
    (``page``: where a person gets them; hnbench cannot)."""

    kind: str
    repo: str | None = None
    filename: str | None = None
    revision: str | None = None
    tag: str | None = None
    url: str | None = None
    sha256: str | None = None
    folder: str | None = None
    page: str | None = None

    def describe(self) -> str:
        """One line: where the weights are fetched from."""
        at = f"@{self.revision}" if self.revision else ""
        if self.kind == "hub-file":
            return f"huggingface.co/{self.repo} {self.filename}{at}"
        if self.kind == "hub-model":
            return f"huggingface.co/{self.repo}{at}"
        if self.kind == "open_clip-tag":
            return f"open_clip tag {self.tag}"
        if self.kind == "url":
            return f"{self.url} (sha256 {str(self.sha256)[:12]}…)"
        return f"manual: {self.page}"


@dataclass(frozen=True)
class ZooEntry:
    """One registered release: ``model`` is the ``--model`` it expands to (a name of ``family``)."""

    name: str
    family: str
    model: str
    weights: Weights
    context_length: int
    text_policy: str
    description: str
    license: str | None = None
    unverified: str = ""  # what of it is not checked against a real download ("" : nothing the spec doubts)
    # (source, method) of its rows in published-results.csv, or (source, method, backbone) where a source reports
    # several backbones under one method name
    published: tuple[tuple[str, ...], ...] = ()
    trust_remote_code: bool = False  # its family runs the release's code: --trust-remote-code is still required

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "family": self.family, "model": self.model, "weights": self.weights.describe(),
                "context_length": self.context_length, "text_policy": self.text_policy}


_CLIP_BPE = "CLIP BPE (lower-cased by the tokenizer), padded to the context"
_LONGCLIP_POLICY = "CLIP BPE, 248 positions (Long-CLIP's folded two-table layout), padded to 248"
_GOAL_PAGE = "https://github.com/PerceptualAI-Lab/GOAL (README: Google Drive links per backbone and dataset)"
_DCI_URL = "https://dl.fbaipublicfiles.com/densely_captioned_images/"
_GDRIVE = "unverified against a real download (Google Drive; suite.md §2)"
_HIMO_TABLES = "UnicomAI/HiMo-CLIP@f235e97:static/images/"  # HiMo-CLIP's result tables (it quotes TULIP's too)
_HIMO_TABLE_NAMES = ("eval_tb1.png (Table 1)", "eval_tb2.png (Table 2)")

LONGCLIP_B16 = ZooEntry(
    "longclip-b16", "open_clip", "ViT-B-16-quickgelu", Weights("hub-file", "BeichenZhang/LongCLIP-B", "longclip-B.pt"),
    248, _LONGCLIP_POLICY, "Long-CLIP B/16 (ECCV'24): CLIP ViT-B/16 with a 248-token text table",
    unverified="the hub revision is not pinned (the spec names none)",
    published=(("longclip-model-zoo", "LongCLIP-B/16"), ("debias-clip-2026", "Long-CLIP-B"),
               ("wuw2019/LoTLIP@301b906:README.md", "Long-CLIP", "ViT-B/16 248tok")))
LONGCLIP_L14 = ZooEntry(
    "longclip-l14", "open_clip", "ViT-L-14-quickgelu", Weights("hub-file", "BeichenZhang/LongCLIP-L", "longclip-L.pt"),
    248, _LONGCLIP_POLICY, "Long-CLIP L/14 (ECCV'24): CLIP ViT-L/14 with a 248-token text table",
    unverified="the hub revision is not pinned (the spec names none)",
    published=(("longclip-model-zoo", "LongCLIP-L/14"), ("debias-clip-2026", "Long-CLIP-L"),
               ("hn-clip-2026-table1", "Long-CLIP (released)")))
HIMO_CLIP_L14 = ZooEntry(
    "himo-clip-l14", "open_clip", "ViT-L-14-quickgelu", Weights("hub-file", "5RJ/HiMo-CLIP", "himo-clip_L.pt"),
    248, _LONGCLIP_POLICY, "HiMo-CLIP L/14 (AAAI'26): Long-CLIP-format checkpoint, plain EOT pooling",
    unverified="download and file layout (Long-CLIP format per model/model_himo.py; suite.md §2)",
    published=tuple((f"{_HIMO_TABLES}{t}", "HiMo-CLIP", "ViT-L/14 248tok") for t in _HIMO_TABLE_NAMES))
SIGLIP2_B16 = ZooEntry(
    "siglip2-b16", "open_clip", "ViT-B-16-SigLIP2", Weights("open_clip-tag", tag="webli"),
    64, "Gemma tokenizer, canonicalize (lower-case, punctuation stripped), max-length padding to 64",
    "SigLIP 2 B/16 through open_clip (hf-hub timm/ViT-B-16-SigLIP2)", license="Apache-2.0",
    unverified="scores unverified against a real download")
SIGLIP2_B16_HF = ZooEntry(
    "siglip2-b16-hf", "hf", "hf:google/siglip2-base-patch16-224", Weights("hub-model", "google/siglip2-base-patch16-224"),
    64, "transformers siglip2 policy: max-length padding to 64, lower-cased (last-token pooling)",
    "SigLIP 2 B/16 through transformers (AutoModel)", license="Apache-2.0",
    unverified="the repo name is the hub's, not the spec's; revision not pinned")
METACLIP2_H14 = ZooEntry(
    "metaclip2-h14", "open_clip", "ViT-H-14-worldwide-quickgelu", Weights("open_clip-tag", tag="metaclip2_worldwide"),
    77, "XLM-V tokenizer (facebook/xlm-v-base; needs transformers), padded to 77",
    "Meta CLIP 2 worldwide H/14 through open_clip", unverified="scores unverified against a real download")
PE_CORE_L14 = ZooEntry(
    "pe-core-l14", "open_clip", "PE-Core-L-14-336", Weights("open_clip-tag", tag="meta"),
    32, "CLIP-style BPE, context 32: nearly every long caption is truncated",
    "Meta Perception Encoder core L/14 at 336 px through open_clip", unverified="scores unverified against a real download")
TULIP_L14 = ZooEntry(
    "tulip-l14", "tulip", "tulip:ViT-L-14", Weights("manual", page="https://huggingface.co/mderakhshani/TULIP"),
    248, "CLIP BPE, RoPE text positions, padded to 248 (tulip#4: results shift at 200)",
    "TULIP (ICLR'25): open_clip ViT-L/14 image tower + RoPE text tower",
    unverified="the release's file names (suite.md §2: files unverified), so it is fetched by hand",
    published=((f"{_HIMO_TABLES}{_HIMO_TABLE_NAMES[0]}", "TULIP", "ViT-L/14 248tok"),))
LOTLIP_B16 = ZooEntry(
    "lotlip-b16", "lotlip", "lotlip:ViT-B-16", Weights("hub-file", "weiwu-ww/LoTLIP-ViT-B-16-100M", "model.pt"),
    128, "bert-base-uncased WordPiece with two corner tokens, context 128",
    "LoTLIP B/16 (NeurIPS'24), 100M pairs: timm ViT + BERT text tower with corner tokens", license="CC-BY-4.0",
    unverified="download unverified (hub page); revision not pinned",
    published=(("wuw2019/LoTLIP@301b906:README.md", "LoTLIP", "ViT-B/16 128tok"),))
GOAL_B16_DOCCI, GOAL_B16_DCI, GOAL_L14_DOCCI, GOAL_L14_DCI = (
    ZooEntry(f"goal-{size}-{data}", "hf", f"hf:openai/clip-vit-{base}", Weights("manual", page=_GOAL_PAGE),
             248, "transformers CLIP, text positions stretched to 248 (keep 20), max-length padding",
             f"GOAL (CVPR'25) {size.upper()} fine-tuned on {data.upper()}: HF CLIPModel .pth, 248-token text table",
             unverified=_GDRIVE, published=(("hn-clip-2026-table1", "GOAL"),) if size == "l14" else ())
    for size, base in (("b16", "base-patch16"), ("l14", "large-patch14")) for data in ("docci", "dci"))
STRUCTXLIP_B16_DOCCI = ZooEntry(
    "structxlip-b16-docci", "hf", "hf:openai/clip-vit-base-patch16", Weights("hub-file", "zanxii/StructXlip", "DOCCI.pth"),
    248, "transformers CLIP, 248-row text table (model_state_dict / clip_model. wrappers unwrapped)",
    "StructXLIP fine-tuned on DOCCI: HF CLIPModel keys, 248-token text table",
    unverified="the base (ViT-B/16 as far as its eval script says) and the file name")
FG_CLIP2_BASE = ZooEntry(
    "fg-clip2-base", "remote", "remote:qihoo360/fg-clip2-base", Weights("hub-model", "qihoo360/fg-clip2-base"),
    196, "the release's tokenizer, lower-cased, long mode (walk_type long) at 196",
    "FG-CLIP 2 base (remote code; SigLIP 2 NaFlex image side)", trust_remote_code=True,
    unverified="revision not pinned (pass --pretrained COMMIT); remote code under transformers 5.24")
JINA_CLIP_V2 = ZooEntry(
    "jina-clip-v2", "remote", "remote:jinaai/jina-clip-v2", Weights("hub-model", "jinaai/jina-clip-v2"),
    8192, "XLM-RoBERTa (RoPE) tokenizer inside the model; text-to-image queries get the retrieval.query prompt",
    "jina-clip-v2 (remote code; EVA02-L 512 px, Matryoshka 1024)", license="CC-BY-NC-4.0", trust_remote_code=True,
    unverified="revision not pinned (pass --pretrained COMMIT); remote code under transformers 5.24")
DREAMLIP_B16 = ZooEntry(
    "dreamlip-b16", "open_clip", "ViT-B-16",
    Weights("manual", page="https://github.com/zyf0619sjtu/DreamLIP (README: Google Drive ViT-B/16 checkpoints)"),
    77, _CLIP_BPE, "DreamLIP ViT-B/16 (open_clip training checkpoint; CC3M / CC12M / YFCC15M / merged-30M)",
    unverified=f"{_GDRIVE}; whether extra heads break the strict load")
FLAIR_CC3M, FLAIR_CC12M, FLAIR_YFCC15M, FLAIR_MERGED30M = (
    ZooEntry(f"flair-{data}", "flair", "flair:ViT-B-16-FLAIR", Weights("hub-file", "xiaorui638/flair", f"flair-{data}.pt"),
             77, _CLIP_BPE,
             f"FLAIR ViT-B/16 (CVPR'25) pre-trained on {label}: scored as a dual encoder (its global mode) by default; "
             "the paper's numbers are --scorer flair-conditioned",
             unverified="download unverified (hub page); revision not pinned",
             published=(("ExplainableML/flair@0f9ce05:README.md", f"FLAIR (flair-{data})"),))
    for data, label in (("cc3m-recap", "CC3M-recap"), ("cc12m-recap", "CC12M-recap"),
                        ("yfcc15m-recap", "YFCC15M-recap"), ("merged30m", "Merged-30M")))
DCI_PICK1, DCI_PICK1_NL0 = (
    ZooEntry(name, "hf", "hf:openai/clip-vit-base-patch32",
             Weights("url", url=f"{_DCI_URL}{name}.tar.gz", sha256=digest, folder=name),
             77, "transformers CLIP, padded to the batch's longest caption",
             f"DCI's LoRA fine-tune {name} (PEFT adapter on openai/clip-vit-base-patch32)", license="CC-BY-NC-4.0",
             unverified="the adapter folder's name inside the tarball")
    for name, digest in (("dci_pick1", "225b9e1c88a00a2dd62cd5b0e23d4133efbbffe8d28b6de796ba894db1a2aa6a"),
                         ("dci_pick1_nl0", "2943daaba2489492c274284631223e02933cc9436db201c23abe5939ed01d446")))


# --- resolution ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Resolved:
    """What a ``--model`` / ``--pretrained`` pair loads as: the family's own ``model`` and ``pretrained``, and the
    zoo entry they came from (None: not a zoo name, passed through)."""

    model: str
    pretrained: str | None
    entry: ZooEntry | None = None


def entry_of(model: str) -> ZooEntry | None:
    """The zoo entry named ``model`` (case-insensitive), else None."""
    from hnbench.registry import MODEL_ZOO

    if not (isinstance(model, str) and model in MODEL_ZOO):
        return None
    entry: ZooEntry = MODEL_ZOO.get(model)
    return entry


def model_of(model: str) -> str:
    """The family's ``--model`` a zoo name expands to (any other name as given); touches nothing."""
    entry = entry_of(model)
    return entry.model if entry is not None else model


def _cache_root() -> Path:
    from hnbench.io import cache_dir

    return cache_dir() / "models"


def _hub_file(w: Weights) -> str | None:
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(str(w.repo), str(w.filename), revision=w.revision)
    return found if isinstance(found, str) else None


def _url_dir(entry: ZooEntry) -> Path:
    return _cache_root() / entry.name


def _url_weights(entry: ZooEntry) -> Path:
    return _url_dir(entry) / str(entry.weights.folder or "")


def on_machine(entry: ZooEntry) -> bool | None:
    """Whether ``entry``'s weights are on this machine (HF cache, open_clip's, hnbench's), never asking the
    network; None where that cannot be told (a manual entry: the file is wherever its user put it)."""
    w = entry.weights
    if w.kind == "hub-file":
        return _hub_file(w) is not None
    if w.kind == "hub-model":
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(str(w.repo), "config.json", revision=w.revision), str)
    if w.kind == "open_clip-tag":
        import open_clip

        from hnbench.models.tags import _local_copy

        return _local_copy(open_clip.get_pretrained_cfg(model_of(entry.model), str(w.tag)))[0] is not None
    if w.kind == "url":
        return _url_weights(entry).exists()
    return None


def _offline_reason(url: str) -> str | None:
    """Why ``url``'s host cannot be asked now (HF offline mode, or it cannot be reached), else None."""
    from hnbench.models.tags import _reachable, hub_offline

    parts = urllib.parse.urlsplit(url)
    if hub_offline() and "huggingface" in (parts.hostname or ""):
        return "HF_HUB_OFFLINE is set"
    if not _reachable(parts.hostname or "", parts.port or 443):
        return f"{parts.hostname} cannot be reached"
    return None


def _source_url(entry: ZooEntry) -> str:
    w = entry.weights
    if w.kind == "url":
        return str(w.url)
    from huggingface_hub import constants

    return f"{constants.ENDPOINT}/{w.repo}"


def check(model: str, pretrained: str | None) -> None:
    """Refuse, before anything loads, a zoo name whose weights cannot be had (one line: for a manual entry, to pass
    ``--pretrained FILE`` and where to get it; for a download that cannot happen now, what to fetch from where).
    An explicit ``pretrained`` is the user's: nothing to check here."""
    entry = entry_of(model)
    if entry is None or pretrained is not None:
        return
    w = entry.weights
    if w.kind == "manual":
        raise ConfigError(f"zoo model {entry.name}: hnbench cannot download its weights; get them from {w.page} "
                          f"and pass --pretrained FILE")
    if w.kind == "open_clip-tag":
        from hnbench.models.tags import check_tag

        check_tag(entry.model, str(w.tag))  # open_clip's offline answer, now rather than after the data loads
        return
    if on_machine(entry):
        return
    why = _offline_reason(_source_url(entry))
    if why is not None:
        instead = "--pretrained FILE" if w.kind in ("hub-file", "url") else "--model with a local copy of the repo"
        raise CheckpointError(f"zoo model {entry.name}: its weights need a download from {w.describe()} and {why}; "
                              f"fetch them once with the internet (they are cached), or pass {instead}")


def fetch(entry: ZooEntry) -> str | None:
    """The ``--pretrained`` that ``entry`` loads with: a downloaded file or folder (fetched now if not on this
    machine), an open_clip tag, a hub revision, or None (the family's default weights)."""
    w = entry.weights
    if w.kind == "open_clip-tag":
        return w.tag
    if w.kind == "hub-model":
        return w.revision
    check(entry.name, None)
    if w.kind == "hub-file":
        found = _hub_file(w)
        if found is None:
            from huggingface_hub import hf_hub_download

            try:
                found = hf_hub_download(str(w.repo), str(w.filename), revision=w.revision)
            except Exception as e:  # huggingface_hub raises many types (offline, HTTP, auth, a missing file)
                first = (str(e).strip().splitlines() or [""])[0][:200]
                raise CheckpointError(f"zoo model {entry.name}: cannot fetch {w.describe()} ({type(e).__name__}: "
                                      f"{first}); fetch it by hand and pass --pretrained FILE") from None
        return found
    if w.kind == "url":
        return str(_fetch_url(entry))
    raise ConfigError(f"zoo model {entry.name}: pass --pretrained FILE (get it from {w.page})")


def _fetch_url(entry: ZooEntry) -> Path:
    """Download ``entry``'s archive, check its published sha256, unpack it into hnbench's cache (atomically: a
    folder that exists is complete)."""
    import shutil
    import tempfile

    from hnbench.io import sha256_file
    from hnbench.io.download import extract, fetch_url

    target = _url_weights(entry)
    if target.exists():
        return target
    w = entry.weights
    root = _url_dir(entry)
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}-", dir=root.parent))
    try:
        try:
            archive = fetch_url(str(w.url), tmp / os.path.basename(urllib.parse.urlsplit(str(w.url)).path),
                                progress=False)
        except DataError as e:
            raise CheckpointError(f"zoo model {entry.name}: {str(e).split('; offline?')[0]}; fetch and unpack it by "
                                  f"hand and pass --pretrained {w.folder or 'PATH'}") from None
        digest = sha256_file(archive)
        if digest != w.sha256:
            raise CheckpointError(f"zoo model {entry.name}: {w.url} has sha256 {digest}, not the published {w.sha256}")
        extract(archive, tmp / "unpacked")
        if not (tmp / "unpacked" / str(w.folder or "")).exists():
            raise CheckpointError(f"zoo model {entry.name}: {w.url} holds no {w.folder}")
        (tmp / "unpacked").replace(root)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def resolve(model: str, pretrained: str | None, *, download: bool = False) -> Resolved:
    """``model`` / ``pretrained`` as its family loads them: a zoo name expands to its entry's model and weights
    (``download``: fetched now, else only named), an explicit ``pretrained`` winning; anything else as given."""
    entry = entry_of(model)
    if entry is None:
        return Resolved(model, pretrained)
    if pretrained is None and download:
        pretrained = fetch(entry)
    elif pretrained is None and entry.weights.kind in ("open_clip-tag", "hub-model"):
        pretrained = fetch(entry)  # a tag or a revision: nothing to download to name it
    return Resolved(entry.model, pretrained, entry)


def mark(encoder: E, resolved: Resolved) -> E:
    """``encoder`` with the zoo entry it was loaded by recorded in ``info.extra["zoo"]`` (its name, family, model,
    weights source, context, text policy and the ``pretrained`` it resolved to), beside the resolved spec."""
    if resolved.entry is not None:
        encoder.info.extra = {**encoder.info.extra,
                              "zoo": {**resolved.entry.to_dict(), "pretrained": resolved.pretrained}}
    return encoder


# --- the listing: hnbench models ----------------------------------------------------------------------
def reference_numbers(entry: ZooEntry) -> str:
    """The best published R@1 per benchmark of ``entry``'s linked rows (``benchmark t2i/i2t``), or ""."""
    if not entry.published:
        return ""
    from hnbench.results.reported import load_published

    rows = load_published()
    keys = set(entry.published)
    mine = rows[[(s, m) in keys or (s, m, b) in keys
                 for s, m, b in zip(rows["source"], rows["method"], rows["backbone"], strict=True)]]
    parts = []
    for bench, group in mine.groupby("benchmark", sort=False):
        best = [group.loc[group["direction"] == d, "R@1"].max() for d in ("t2i", "i2t")]
        if all(v == v for v in best):  # retrieval rows (a classification row has no R@1 per direction)
            parts.append(f"{bench} {best[0]:.1f}/{best[1]:.1f}")
    return f"R@1 t2i/i2t: {', '.join(parts)} ({len(mine)} rows; --reported)" if parts else ""


MODEL_KINDS = ("family", "builtin", "zoo", "architecture")  # the ``kind`` of a list_models row, in listing order


def list_models(family: str | None = None, *, architectures: bool = True) -> pd.DataFrame:
    """Every model family (:data:`~hnbench.registry.MODELS`: its prefixes and help), hnbench's built-in model
    (``hnbench-tiny --pretrained synthdense``: weights shipped in the package, so it works offline), every zoo
    entry (name, family, context, text policy, weights source, whether the weights are on this machine, reference
    numbers) and, with ``architectures``, every other open_clip architecture (``open_clip.list_models()``: its
    text context and its open_clip pretrained tags), one row each, ``kind`` saying which (:data:`MODEL_KINDS`);
    ``family`` keeps that family's rows. The built-in model and the architectures are what a family adapter lists
    of its own (:meth:`hnbench.models.family.ModelFamily.catalogue`). Never asks the network."""
    import pandas as pd

    from hnbench.registry import MODEL_ZOO, MODELS

    if family is not None and family not in MODELS:
        raise MODELS.error(family)
    rows: list[dict[str, Any]] = []
    for name in MODELS.names():
        rows.append({"kind": "family", "name": name, "family": name, "model": ", ".join(MODELS.prefixes(name)) or "(default)",
                     "context": None, "text_policy": "", "weights": "", "on_machine": None, "reference": "",
                     "description": MODELS.help(name)})
    for name in MODELS.names():  # what each family lists of its own (the registry imports it: no import cycle)
        catalogue = getattr(MODELS.get(name), "catalogue", None)  # a plain loader function lists nothing
        rows += catalogue(architectures=architectures) if callable(catalogue) else []
    for name in MODEL_ZOO.names():
        e: ZooEntry = MODEL_ZOO.get(name)
        rows.append({"kind": "zoo", "name": e.name, "family": e.family, "model": e.model, "context": e.context_length,
                     "text_policy": e.text_policy, "weights": e.weights.describe(), "on_machine": on_machine(e),
                     "reference": reference_numbers(e), "description": e.description + (
                         f" (unverified: {e.unverified})" if e.unverified else "")})
    rows.sort(key=lambda r: MODEL_KINDS.index(r["kind"]))  # stable: each kind in the order it was listed
    frame: pd.DataFrame = pd.DataFrame(rows)
    frame["context"] = frame["context"].astype("Int64")  # families have none
    if family is not None:
        kept: pd.DataFrame = frame[frame["family"] == family.lower()].reset_index(drop=True)
        return kept
    return frame


_MD_COLUMNS = ("name", "family", "model", "context", "weights", "on_machine", "reference")
TERMINAL_WIDTH = 100  # the default view of ``hnbench models`` fits a terminal this wide


def render_models(frame: pd.DataFrame, fmt: str = "md") -> str:
    """:func:`list_models`' frame as a terminal view (``text``: sections by kind, fitting :data:`TERMINAL_WIDTH`
    columns, long cells wrapped, open_clip's architectures as a list of names), a Markdown table (every cell
    escaped, the main columns), CSV (every column, cells safe for spreadsheets) or JSON (one object per row)."""
    import json

    import pandas as pd

    from hnbench.io import csv_bytes, markdown_text

    if fmt == "text":
        return _terminal_view(frame)
    if fmt == "json":
        return json.dumps(frame.astype(object).where(frame.notna(), None).to_dict("records"), indent=2)
    if fmt == "csv":
        return csv_bytes(list(frame.columns), frame.astype(object).where(frame.notna(), "").values.tolist()).decode()
    if fmt != "md":
        raise ConfigError(f"--format {fmt!r}: one of {', '.join(MODEL_FORMATS)}")
    from tabulate import tabulate

    def cell(v: Any) -> str:
        if v is None or v is pd.NA:
            return ""
        return "yes" if v is True else "no" if v is False else markdown_text(v)

    rows = [[cell(v) for v in r] for r in frame.loc[:, list(_MD_COLUMNS)].itertuples(index=False)]
    return tabulate(rows, headers=list(_MD_COLUMNS), tablefmt="github", disable_numparse=True)


def _fit(rows: list[list[str]], headers: list[str], wrap: int, indent: str = "") -> list[str]:
    """``rows`` as a plain table whose column ``wrap`` is wrapped so that every line fits :data:`TERMINAL_WIDTH`."""
    import textwrap

    from tabulate import tabulate

    # tabulate pads a column to its header's width + 2 (its MIN_PADDING) at least, then 2 spaces between columns
    widths = [max([len(h) + 2, *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    room = max(TERMINAL_WIDTH - len(indent) - sum(w for i, w in enumerate(widths) if i != wrap)
               - 2 * (len(headers) - 1), len(headers[wrap]) + 2)
    cells = [[textwrap.fill(c, room, break_on_hyphens=False) if i == wrap else c for i, c in enumerate(r)]
             for r in rows]
    text = tabulate(cells, headers=headers, tablefmt="simple", disable_numparse=True)
    return [indent + line.rstrip() for line in text.splitlines()]


def _terminal_view(frame: pd.DataFrame) -> str:
    """The default ``hnbench models`` view: families, built-in, zoo entries (name, family, context, on this machine,
    weights) and open_clip's architecture names, each a section, in :data:`TERMINAL_WIDTH` columns; an
    architectures-only frame (``--architectures``) is their table with the pretrained tags."""
    import textwrap

    import pandas as pd

    def text(v: Any) -> str:
        if isinstance(v, bool):
            return "yes" if v else "no"
        if v is None or v is pd.NA or (isinstance(v, float) and v != v):
            return ""
        return "".join(c if c.isprintable() else " " for c in str(v))  # no control characters reach the terminal

    kinds = {k: frame[frame["kind"] == k] for k in MODEL_KINDS}
    lines: list[str] = []
    if kinds["family"].empty and kinds["zoo"].empty:  # --architectures: the open_clip catalogue with its tags
        arch = frame[frame["kind"].isin(["builtin", "architecture"])]
        lines += textwrap.wrap(f"open_clip architectures ({len(arch)}): --model ARCH --pretrained TAG (open_clip "
                               "downloads it), a local FILE, or none (random init)", TERMINAL_WIDTH)
        lines += _fit([[text(r.name), text(r.context), text(r.weights).removeprefix("open_clip tags: ")]
                       for r in arch.itertuples(index=False)], ["architecture", "ctx", "pretrained tags"], wrap=2)
        return "\n".join(lines)
    if not kinds["family"].empty:
        lines += ["Model families: --model PREFIX... picks the family (a bare name is open_clip's)"]
        lines += _fit([[text(r.name), text(r.model), text(r.description)] for r in kinds["family"].itertuples(index=False)],
                      ["family", "prefixes", "what it loads"], wrap=2, indent="  ")
    if not kinds["builtin"].empty:
        lines += ["", "Built in: --model NAME (weights shipped with hnbench: works offline, hnbench demo)"]
        lines += _fit([[text(r.name), text(r.context), text(r.on_machine), text(r.weights)]
                       for r in kinds["builtin"].itertuples(index=False)],
                      ["name", "ctx", "here", "weights"], wrap=3, indent="  ")
    if not kinds["zoo"].empty:
        lines += ["", "Model zoo: --model NAME (weights fetched on first use; here: on this machine, blank: manual)"]
        lines += _fit([[text(r.name), text(r.family), text(r.context), text(r.on_machine), text(r.weights)]
                       for r in kinds["zoo"].itertuples(index=False)],
                      ["name", "family", "ctx", "here", "weights"], wrap=4, indent="  ")
    if not kinds["architecture"].empty:
        names = ", ".join(text(n) for n in kinds["architecture"]["name"])
        lines += ["", f"open_clip architectures ({len(kinds['architecture'])}): --model ARCH; their pretrained tags: "
                      "hnbench models --architectures"]
        lines += textwrap.wrap(names, TERMINAL_WIDTH, initial_indent="  ", subsequent_indent="  ",
                               break_on_hyphens=False)
    lines += ["", "Text policies, descriptions and reference numbers: --format md|csv|json"]
    return "\n".join(lines)


def zoo_table() -> str:
    """The registered entries as a Markdown table (name, family, ``--model``, context, weights): the docs' model zoo
    table, made from it when the site is built (docs/hooks.py)."""
    from hnbench.io import markdown_code, markdown_text
    from hnbench.registry import MODEL_ZOO

    lines = ["| name | family | `--model` | context | weights |", "|---|---|---|---|---|"]
    for name in MODEL_ZOO.names():
        e: ZooEntry = MODEL_ZOO.get(name)
        lines.append(f"| {markdown_code(e.name)} | {e.family} | {markdown_code(e.model)} | {e.context_length} | "
                     f"{markdown_text(e.weights.describe())} |")
    return "\n".join(lines)
