"""``hnbench datasets download``: fetch a benchmark's files from their official sources and unpack them
into the layout its loader reads.

Each :class:`~hnbench.data.benchmarks.spec.Resource` comes from a direct URL (checked against its
published sha256 when there is one), a Hugging Face dataset repository (pinned to the commit that
``--revision`` resolves to), or — where a license must be accepted first — a file the user
downloaded by hand and passes with ``--local``. What was fetched, with hashes and revisions, is
recorded in ``DIR/hnbench_download.json``, which the loader copies into every result.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hnbench.data.benchmarks.spec import DOWNLOAD_RECORD, BenchmarkSpec, Resource, read_record
from hnbench.errors import ConfigError, DataError
from hnbench.io import atomic_write_bytes, sha256_file
from hnbench.io.download import extract, fetch_hf, fetch_url

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Step:
    """What ``download`` will do for one resource: ``download``, ``local``, ``manual`` or ``present``."""

    resource: Resource
    action: str
    source: str
    target: Path


def _source(r: Resource) -> str:
    return f"https://huggingface.co/datasets/{r.hf_repo} ({r.filename})" if r.hf_repo else str(r.url)


def plan(spec: BenchmarkSpec, to: str | Path, local: Sequence[str | Path] = ()) -> list[Step]:
    """The steps for fetching ``spec`` into ``to``; ``local`` files stand in for downloads (matched by name)."""
    to = Path(to)
    by_name = {Path(p).name: Path(p) for p in local}
    known = {r.filename for r in spec.resources}
    if set(by_name) - known:
        raise ConfigError(f"{spec.name}: --local {sorted(set(by_name) - known)} is none of its files: "
                          f"{sorted(known)}")
    done = read_record(to).get("resources", {})
    steps = []
    for r in spec.resources:
        target = to / r.into
        if r.filename in by_name:
            steps.append(Step(r, "local", str(by_name[r.filename]), target))
        elif r.filename in done or (not r.extract and (target / r.filename).is_file()):
            steps.append(Step(r, "present", str(target), target))
        elif r.manual:
            steps.append(Step(r, "manual", r.manual, target))
        else:
            steps.append(Step(r, "download", _source(r), target))
    return steps


def verify_sha256(r: Resource, digest: str) -> dict[str, Any]:
    """What ``digest`` says about ``r``: the published checksum, a known superseded release (a warning naming
    it), or an error. Returns the fields recorded for the file."""
    if r.sha256 is None or digest == r.sha256:
        return {"verified": None if r.sha256 is None else True}
    old = dict(r.superseded).get(digest)
    if old is None:
        raise DataError(f"{r.filename}: sha256 {digest} does not match the published {r.sha256}; not unpacked")
    logger.warning("%s: sha256 %s is %s, not the current release (%s); accepted, but results may differ from "
                   "the current release's", r.filename, digest[:12], old, r.sha256[:12])
    return {"verified": "superseded", "superseded": old}


def _write_record(to: Path, record: dict[str, Any]) -> None:
    atomic_write_bytes(to / DOWNLOAD_RECORD, (json.dumps(record, indent=2) + "\n").encode())


def download(
    spec: BenchmarkSpec,
    to: str | Path | None = None,
    *,
    local: Sequence[str | Path] = (),
    revision: str | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Fetch (or take from ``local``) every resource of ``spec`` into ``to`` and unpack it.

    A checksum mismatch is an error and nothing is unpacked; a known superseded release's checksum warns,
    naming it, and is recorded (``verified: "superseded"``). Resources that need a license click-through
    are listed in the returned ``manual`` entry; optional ones (GOAL's lists) only warn when they fail.
    """
    to = Path(to) if to is not None else spec.default_root()
    to.mkdir(parents=True, exist_ok=True)
    record = read_record(to)  # shared by benchmarks built on the same files (dci, long-dci)
    record.setdefault("resources", {})
    manual, failed = [], []
    for step in plan(spec, to, local):
        r = step.resource
        if step.action in ("present", "manual"):
            if step.action == "manual":
                manual.append({"file": r.filename, "how": r.manual})
            continue
        owned = step.action == "download" and not r.hf_repo  # a file we wrote and may delete
        entry: dict[str, Any] = {"source": step.source if step.action == "download" else "local file"}
        try:
            if step.action == "local":
                file = Path(step.source)
                entry["path"] = str(file.resolve())
            elif r.hf_repo:
                file, entry["revision"] = fetch_hf(r.hf_repo, r.filename, revision)
            else:
                file = fetch_url(str(r.url), to / ".download" / r.filename, progress=progress)
        except DataError as e:
            if not r.optional:
                raise
            logger.warning("%s (optional, skipped)", e)
            failed.append(r.filename)
            continue
        digest = sha256_file(file)
        try:
            entry.update(sha256=digest, **verify_sha256(r, digest))
        except DataError:
            if owned:
                file.unlink(missing_ok=True)
            raise
        if r.extract:
            entry["extracted_to"], entry["n_files"] = str(step.target), extract(file, step.target, r.members)
            if owned:
                file.unlink(missing_ok=True)
        else:
            step.target.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(file, step.target / r.filename)
            if owned:
                file.unlink(missing_ok=True)
        entry["date"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        record["resources"][r.filename] = entry
        _write_record(to, record)
    shutil.rmtree(to / ".download", ignore_errors=True)
    return {"to": str(to), "resources": record["resources"], "manual": manual, "failed_optional": failed}
