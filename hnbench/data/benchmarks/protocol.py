"""A benchmark protocol and what its reader gets: the types shared by ``spec.py`` and ``readers.py``.

A :class:`Protocol` names the reader and caption rule (names in :data:`hnbench.registry.READERS` and
:data:`hnbench.registry.CAPTION_RULES`: a plugin registers its own) that turn a release into a test set; a reader gets a :class:`LoadContext`
and reports skipped items and metadata through it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from hnbench.errors import DataError

GOAL_REPO = "PerceptualAI-Lab/GOAL"
GOAL_COMMIT = "2db3d4a0c03576bb961632832af7a43aaf3c60db"


@dataclass(frozen=True)
class SplitList:
    """A third-party list that defines a protocol's items: a JSON list of ``{"filename", "caption"}``."""

    filename: str
    n_items: int
    sha256: str | None = None
    repo: str = GOAL_REPO
    folder: str = "datasets"
    commit: str = GOAL_COMMIT

    @property
    def url(self) -> str:
        return f"https://raw.githubusercontent.com/{self.repo}/{self.commit}/{self.folder}/{self.filename}"

    @property
    def where(self) -> str:
        return f"GitHub {self.repo}, {self.folder}/{self.filename} at commit {self.commit}"


@dataclass(frozen=True)
class Layout:
    """Another release file of the same protocol (another author's copy of the same set, in its own format): its
    reader (a name in :data:`hnbench.registry.READERS`) and the options that differ from the protocol's (``file``,
    ``dirs``, ``from``, ...); ``keep_empty`` where that file's reference loader keeps blank captions (None: the
    protocol's)."""

    reader: str
    options: Mapping[str, Any]
    keep_empty: bool | None = None


@dataclass(frozen=True)
class Protocol:
    """One published way of turning a release into a test set; ``n_images``/``n_captions`` are what it yields."""

    name: str
    families: tuple[str, ...]
    n_images: int | None
    n_captions: int | None
    reader: str  # a name in hnbench.registry.READERS
    caption: str  # a name in hnbench.registry.CAPTION_RULES
    description: str = ""
    options: Mapping[str, Any] = field(default_factory=dict)
    lists: tuple[SplitList, ...] = ()
    aliases: tuple[str, ...] = ()
    # The reference loader feeds empty / whitespace-only captions as queries (Long-CLIP's Urban-1K reading,
    # TULIP's Long-DCI): keep them, counted in ``meta.empty_captions``, instead of treating them as invalid.
    keep_empty: bool = False
    # A shipped (image name, caption sha256) list the loaded pairs are checked against (``pairs.py``): a file
    # name in hnbench/assets/pairs/ (or a path); one not shipped yet leaves the set "unverified".
    pairs_list: str | None = None
    # The other release files that give this protocol's set (``readers_suite.release_layout``): read when the
    # primary file (``options["file"]``) is absent, the first present in this order.
    layouts: tuple[Layout, ...] = ()

    def with_layout(self, layout: Layout) -> Protocol:
        """This protocol as read from ``layout``'s file: its reader, its options over the protocol's."""
        keep = self.keep_empty if layout.keep_empty is None else layout.keep_empty
        return replace(self, reader=layout.reader, options={**self.options, **layout.options}, keep_empty=keep,
                       layouts=())


@dataclass
class LoadContext:
    """What a reader needs besides the data root, and where it reports what it did."""

    name: str
    skip_invalid: bool
    progress: bool = False
    # --allow-outside-paths: the by-name image search also follows symlinks that lead out of the data root
    allow_outside_paths: bool = False
    lists: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    skipped: dict[str, list[str]] = field(default_factory=dict)

    def invalid(self, where: str, reason: str, kind: str) -> None:
        """A bad item: an error naming it, or with ``skip_invalid`` a counted skip."""
        if not self.skip_invalid:
            raise DataError(f"{self.name}: {where}: {reason} (pass --skip-invalid to drop it)")
        self.skipped.setdefault(kind, []).append(where)
