"""Benchmark specs (metadata only) and the one loader every registered benchmark goes through.

A :class:`BenchmarkSpec` names a benchmark's publisher, license, citation, on-disk layout,
downloadable :class:`Resource` files and its :class:`Protocol` variants, each with the counts it
must produce. :func:`load_benchmark` resolves the protocol, finds the split lists it needs
(:class:`SplitList`, e.g. GOAL's ``DCI_test.json``), runs the protocol's reader from
``readers.py`` to get ``(image_id, image_path, [caption])`` records, builds the dataset with
:func:`~hnbench.data.base.build_dataset`, and checks the loaded counts against the spec's.
(:class:`Protocol`, :class:`SplitList` and the readers' :class:`LoadContext` live in ``protocol.py``,
below both this module and ``readers.py``; they are importable from here too.)
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hnbench.data.base import FileImages, ImageTextDataset, build_dataset, check_inside, is_blank_caption
from hnbench.data.benchmarks.pairs import check_pairs
from hnbench.data.benchmarks.protocol import LoadContext, Protocol, SplitList
from hnbench.data.benchmarks.readers_suite import release_layout
from hnbench.errors import ConfigError, DataError
from hnbench.io import cache_dir, loads_json, sha256_file
from hnbench.registry import CAPTION_RULES, READERS

logger = logging.getLogger(__name__)

DOWNLOAD_RECORD = "hnbench_download.json"


def read_record(root: Path) -> dict[str, Any]:
    """The download record in ``root``; empty when missing, unreadable or not shaped as one (it is rewritten)."""
    try:
        record = loads_json((root / DOWNLOAD_RECORD).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    if not isinstance(record, dict) or not isinstance(record.get("resources", {}), dict):
        return {}
    return record


@dataclass(frozen=True)
class Resource:
    """A file of a benchmark's release and how ``hnbench datasets download`` gets it."""

    filename: str
    url: str | None = None  # a direct https URL ...
    hf_repo: str | None = None  # ... or a Hugging Face *dataset* repository holding ``filename``
    sha256: str | None = None  # the published checksum, verified when known
    superseded: tuple[tuple[str, str], ...] = ()  # (sha256, what it was) of older releases: accepted with a warning
    extract: bool = False  # unpack the archive into ``into`` (then delete it)
    into: str = ""  # folder under the target directory
    members: str | None = None  # extract only members matching this glob, flattened into ``into``
    manual: str | None = None  # cannot be fetched automatically: how to get it (then pass it with --local)
    optional: bool = False  # a failed fetch only warns


@dataclass(frozen=True)
class HubIds:
    """A benchmark's ids on the Hugging Face Hub, where it has them (``hnbench export`` names it by them):
    ``dataset``, the dataset repository of its data (a model card's ``dataset.type``); ``benchmark``, a
    registered Hub *Benchmark* dataset with an ``eval.yaml`` (the ``.eval_results`` files' ``dataset.id``),
    which none of hnbench's benchmarks is known to have yet."""

    dataset: str | None = None
    benchmark: str | None = None


@dataclass(frozen=True)
class BenchmarkSpec:
    """A benchmark: where it comes from, its terms, its files and its protocols."""

    name: str
    title: str
    publisher: str
    homepage: str
    license: str
    citation: str
    layout: str  # the expected on-disk layout under --data-root, in words
    protocols: tuple[Protocol, ...]
    default_protocol: str
    resources: tuple[Resource, ...] = ()
    data_dir: str = ""  # folder name under <cache>/benchmarks/ used when no --data-root is given
    notes: str = ""
    hub: HubIds = HubIds()  # its Hugging Face Hub ids, where known (``hnbench export``)
    # the one task that scores it ("choice": option-choice items, hnbench.data.choices); None: an image–caption set,
    # read by every task that reads one (retrieval, monotonicity, hardness)
    task: str | None = None

    def protocol(self, name: str | None) -> Protocol:
        """The protocol called ``name`` (or one of its aliases); the default when ``name`` is None."""
        wanted = (name or self.default_protocol).lower()
        for p in self.protocols:
            if wanted == p.name or wanted in p.aliases:
                return p
        known = ", ".join(f"{p.name} ({n} items)" if (n := getattr(p, "n_items", None)) else
                          f"{p.name} ({p.n_images or '?'} images)" for p in self.protocols)
        raise ConfigError(f"{self.name} has no protocol {name!r}; known: {known}")

    def default_root(self) -> Path:
        return cache_dir() / "benchmarks" / (self.data_dir or self.name)


def _read_split_list(path: Path) -> list[dict[str, Any]]:
    try:
        entries = loads_json(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataError(f"split list {path}: not readable JSON ({e})") from e
    if not isinstance(entries, list):
        raise DataError(f"split list {path}: expected a JSON list of {{filename, caption}} objects")
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("filename"), str) or not entry["filename"]:
            raise DataError(f"split list {path}: item {i} has no 'filename' string")
    return entries


def resolve_split_lists(
    spec: BenchmarkSpec, protocol: Protocol, root: Path, split_file: str | Sequence[str] | None
) -> tuple[dict[str, list[dict[str, Any]]], list[dict[str, Any]]]:
    """Find, read and hash the split lists ``protocol`` needs: ``--split-file`` first, then
    ``ROOT/goal/``, ``ROOT/`` and ``<cache>/goal/``. Returns the entries by list name and what to record."""
    given = [Path(p) for p in ([split_file] if isinstance(split_file, (str, Path)) else split_file or [])]
    if not protocol.lists:
        if given:
            users = [p.name for p in spec.protocols if p.lists]
            raise ConfigError(f"{spec.name}/{protocol.name} uses no split list (--split-file applies to "
                              f"{', '.join(users) or 'no protocol of ' + spec.name})")
        return {}, []
    for p in given:
        if not p.exists():
            raise DataError(f"split file not found: {p}")
    files = [p for p in given if p.is_file()]
    dirs = [p for p in given if p.is_dir()] + [root / "goal", root, cache_dir() / "goal"]
    needed = [lst.filename for lst in protocol.lists]
    if len(needed) > 1 and any(f.name not in needed for f in files):
        raise ConfigError(f"{spec.name}/{protocol.name} needs {' and '.join(needed)}; pass each with --split-file "
                          f"under its published name (or a folder holding them)")
    lists, record = {}, []
    for lst in protocol.lists:
        path = next((f for f in files if f.name == lst.filename), None)
        if path is None and len(needed) == 1 and len(files) == 1:
            path = files[0]
        if path is None:
            path = next((d / lst.filename for d in dirs if (d / lst.filename).is_file()), None)
        if path is None:
            raise DataError(
                f"{spec.name}/{protocol.name} needs {lst.filename} ({lst.n_items} items), which is not part of the "
                f"official release: get it from {lst.where} ({lst.url}) and pass --split-file PATH, or put it in "
                f"{root / 'goal'} (`hnbench datasets download {spec.name}` fetches it)")
        lists[lst.filename] = _read_split_list(path)
        digest = sha256_file(path)
        verified = None if lst.sha256 is None else digest == lst.sha256
        if lst.sha256 is not None and not verified:
            logger.warning("%s: sha256 %s of %s differs from the published %s (%s); results may not be comparable",
                           spec.name, digest[:12], path, lst.sha256[:12], lst.where)
        record.append({"file": lst.filename, "path": str(path), "sha256": digest, "expected_sha256": lst.sha256,
                       "verified": verified, "n_items": len(lists[lst.filename])})
    return lists, record


def check_counts(
    ds: ImageTextDataset, expected: Mapping[str, int] | None, expected_from: str, allow_mismatch: bool
) -> dict[str, Any]:
    """Compare the counts loaded *after skipping* with the expected ones: an error on any difference unless allowed.

    Items skipped with ``--skip-invalid`` (or absent from the release) do not excuse a shortfall: a
    smaller set is a different benchmark, so it runs only with ``allow_mismatch`` and says so in the
    result (``status`` "mismatch allowed", with the number of items skipped)."""
    got = {"n_images": ds.n_images, "n_captions": ds.n_captions}
    check: dict[str, Any] = {"expected": dict(expected) if expected else None, "expected_from": expected_from,
                             "loaded": got, "n_skipped": ds.n_skipped(), "allow_mismatch": allow_mismatch}
    if not expected:
        check["status"] = "unverified (no published count)"
        return check
    if all(expected[k] == got[k] for k in expected):
        check["status"] = "ok"
        return check
    skipped = f" after skipping {ds.n_skipped()} items ({', '.join(sorted(ds.skipped))})" if ds.n_skipped() else ""
    summary = (f"{ds.name}/{ds.protocol}: loaded {got['n_images']} images / {got['n_captions']} captions{skipped}, "
               f"expected {expected.get('n_images')} / {expected.get('n_captions')} ({expected_from})")
    if not allow_mismatch:
        why = ("a smaller set than the published one is another benchmark" if skipped else
               f"the files under {ds.source} look incomplete or from another release")
        raise DataError(f"{summary}; {why}. Pass --allow-count-mismatch to run anyway (recorded in the result)")
    logger.warning("%s; continuing because the mismatch is allowed", summary)
    check["status"] = "mismatch allowed"
    return check


def recheck_counts(ds: ImageTextDataset) -> ImageTextDataset:
    """Repeat the count check of a benchmark that lost items after loading (unreadable images dropped)."""
    check = ds.meta.get("count_check")
    if check and check.get("expected"):
        ds.meta["count_check"] = check_counts(ds, check["expected"], check["expected_from"],
                                              bool(check.get("allow_mismatch")))
    return ds


def load_benchmark(
    spec: BenchmarkSpec,
    *,
    data_root: str | Path | None = None,
    protocol: str | None = None,
    split: str | None = None,
    skip_invalid: bool = False,
    split_file: str | Sequence[str] | None = None,
    allow_count_mismatch: bool = False,
    expected_counts: Mapping[str, int] | None = None,
    progress: bool = False,
    allow_outside_paths: bool = False,
    **unknown: Any,
) -> ImageTextDataset:
    """Load ``spec`` under ``protocol`` from ``data_root`` (default ``<cache>/benchmarks/NAME``).

    ``split`` is accepted as another name for the protocol. ``expected_counts`` (``n_images``,
    ``n_captions``) replaces the spec's counts, e.g. for a subset; ``allow_count_mismatch`` turns a
    count mismatch (after skipping) into a warning. Either is recorded in ``ds.meta["count_check"]``.
    ``progress`` shows a bar while a reader opens thousands of annotation files. An image path a
    release's annotation names (``../``, an absolute path) that leaves ``data_root`` is refused, whatever
    the reader, unless ``allow_outside_paths``.
    """
    if unknown:
        raise ConfigError(f"{spec.name}: unknown option(s) {sorted(unknown)}")
    proto = spec.protocol(protocol or split)
    if data_root is None and not spec.default_root().is_dir():
        raise DataError(f"{spec.name}: no data: pass --data-root DIR pointing at the release ({spec.layout}), "
                        f"or run `hnbench datasets download {spec.name}`")
    root = Path(data_root) if data_root is not None else spec.default_root()
    if not root.is_dir():
        raise DataError(f"{spec.name}: data root not found: {root}")
    lists, list_record = resolve_split_lists(spec, proto, root, split_file)
    ctx = LoadContext(name=spec.name, skip_invalid=skip_invalid, progress=progress, lists=lists,
                      allow_outside_paths=allow_outside_paths)
    proto = release_layout(root, proto, ctx)  # the protocol as read from the release file present (Protocol.layouts)
    records = READERS.get(proto.reader)(root, proto, ctx)
    if not allow_outside_paths:
        for image_id, ref, _ in records:
            check_inside(root, os.path.abspath(ref), f"{spec.name}: image {image_id!r}", "these files")
    meta = {"benchmark": spec.name, "protocol_families": list(proto.families), "caption_rule": proto.caption,
            "caption_rule_text": CAPTION_RULES.get(proto.caption).__doc__, **ctx.meta}
    if proto.keep_empty:
        empty = [image_id for image_id, _, texts in records if any(is_blank_caption(t) for t in texts)]
        meta["empty_captions"] = empty
        if empty:
            logger.warning("%s/%s: %d empty or whitespace-only captions kept as queries, as the protocol's reference "
                           "loader does (e.g. %s)", spec.name, proto.name, len(empty), empty[:3])
    if list_record:
        meta["split_lists"] = list_record
    if (root / DOWNLOAD_RECORD).is_file():
        meta["download"] = read_record(root)
        if not meta["download"]:
            logger.warning("%s: ignoring unreadable %s", spec.name, root / DOWNLOAD_RECORD)
    ds = build_dataset(spec.name, records, make_source=FileImages, skip_invalid=skip_invalid, protocol=proto.name,
                       source=str(root.resolve()), meta=meta, keep_empty=proto.keep_empty)
    for kind, items in ctx.skipped.items():
        logger.warning("%s: skipped %d items (%s), e.g. %s", spec.name, len(items), kind, items[:2])
        ds.skipped.setdefault(kind, []).extend(items)
    if expected_counts is not None:
        expected, source = dict(expected_counts), "given by the caller"
    else:
        expected = {k: v for k, v in (("n_images", proto.n_images), ("n_captions", proto.n_captions)) if v}
        source = f"{spec.name} spec, protocol {proto.name}"
    ds.meta["count_check"] = check_counts(ds, expected, source, allow_count_mismatch)
    if proto.pairs_list is not None:
        ds.meta["pairs_check"] = check_pairs(ds, proto.pairs_list, allow_count_mismatch)
    return ds


def goal_resource(lst: SplitList) -> Resource:
    """Download entry for a GOAL split list (optional: the zero-shot protocols do not need it)."""
    return Resource(lst.filename, url=lst.url, sha256=lst.sha256, into="goal", optional=True)


# GOAL's split lists (github.com/PerceptualAI-Lab/GOAL, datasets/, at GOAL_COMMIT): JSON lists of
# {"filename": ".../photos/sa_<id>.jpg", "caption": ...}; DCI and Long-DCI's goal protocols use them.
GOAL_DCI_TEST = SplitList("DCI_test.json", 1999, "35227d8dfe02eccfff44947ecd0c265fb20ce3c03a59c85f062356b7c15165ae")
GOAL_DCI_TRAIN = SplitList("DCI_train_del_org.json", 5445)  # no published checksum: the hash is recorded
