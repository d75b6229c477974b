"""The export's own record (``hnbench-export.json`` in its folder) and the rules of the folder it writes into.

The manifest lists every result file read (path, sha256 of its bytes, whether its per-query parquet was
checked), every file written (path, sha256), every value written with the result and field it comes from,
what was not exported and why, and the notes said once. It holds no time: the same inputs give the same bytes.

The folder: new, empty, or one an earlier export wrote. Anything in it the earlier manifest does not list is
someone else's, and the export is refused (one line, nothing written); so is an export of other inputs (other
result files, format or options) over an earlier one, unless ``overwrite``, and a file hnbench wrote that was
changed since. Files are written atomically (a temporary file, then a rename), the manifest last; files of the
earlier export that this one does not write are removed after it (they were hnbench's, and listed).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from hnbench._version import __version__
from hnbench.errors import ConfigError
from hnbench.io import atomic_write_bytes, loads_json, read_untrusted
from hnbench.publish.options import MANIFEST, ExportSettings
from hnbench.publish.sources import Built, Inputs

__all__ = ["check_folder", "check_inputs", "manifest", "write"]


def _listed(out: Path, record: dict[str, Any]) -> dict[str, str]:
    """The files (relative path → sha256) an earlier manifest lists, only those that lie inside ``out``."""
    files = record.get("files")
    listed: dict[str, str] = {}
    for f in files if isinstance(files, list) else []:
        path, digest = (f.get("path"), f.get("sha256")) if isinstance(f, dict) else (None, None)
        if isinstance(path, str) and isinstance(digest, str) and _inside(path):
            listed[path] = digest
    return listed


def _inside(rel: str) -> bool:
    """A ``/``-separated relative path that stays inside the folder (no absolute path, no ``..``)."""
    parts = rel.split("/")
    return bool(rel) and not rel.startswith("/") and "\\" not in rel and "\0" not in rel and \
        all(p not in ("", ".", "..") for p in parts)


def check_folder(out: Path, overwrite: bool) -> dict[str, Any] | None:
    """The earlier export's manifest in ``out`` (None for a new or empty folder); a folder holding anything that
    manifest does not list, or a listed file changed since (without ``overwrite``), is refused (one line)."""
    if not out.is_dir():
        return None
    present = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file() or p.is_symlink())
    if not present:
        return None
    record: Any = None
    if MANIFEST in present and (out / MANIFEST).is_file() and not (out / MANIFEST).is_symlink():
        try:
            record = loads_json(read_untrusted(out / MANIFEST, "export manifest", error=ConfigError).decode())
        except (ValueError, UnicodeDecodeError):
            record = None
    if not isinstance(record, dict) or record.get("kind") != "hnbench export":
        raise ConfigError(f"--output {out} holds files hnbench did not write (e.g. {present[0]}): export into a new "
                          "or empty folder, or one an earlier export wrote")
    listed = _listed(out, record)
    for rel in present:
        if rel == MANIFEST:
            continue
        if rel not in listed or (out / rel).is_symlink():
            raise ConfigError(f"--output {out} holds {rel}, which hnbench did not write (its {MANIFEST} does not list "
                              "it): move it away, or export into another folder")
        if not overwrite and _sha256(out / rel) != listed[rel]:
            raise ConfigError(f"--output {out}: {rel} was changed since hnbench wrote it; pass --overwrite "
                              "(overwrite=True) to replace it, or export into another folder")
    return record


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def manifest(settings: ExportSettings, inputs: Inputs, built: Built) -> dict[str, Any]:
    """The manifest of an export (see the module docstring)."""
    card = None
    if built.card is not None:
        card = {"path": str(built.card[0]), "sha256": hashlib.sha256(built.card[1]).hexdigest()}
    return {
        "kind": "hnbench export",
        "hnbench_version": __version__,
        "format": settings.format,
        "options": {"model_name": settings.model_name, "source_url": settings.source_url, "card": settings.card},
        "inputs": [s.record() for s in inputs.all],
        "files": [{"path": rel, "sha256": hashlib.sha256(data).hexdigest()} for rel, data in sorted(built.files.items())],
        "card": card,
        "values": [v.record() for v in built.values],
        "not_exported": [s.record() for s in [*inputs.skipped, *built.skipped]],
        "notes": list(built.notes),
    }


def _key(record: dict[str, Any]) -> Any:
    """What makes two exports the same one: format, options and the result files' contents."""
    inputs = record.get("inputs")
    digests = sorted(str(i.get("sha256")) for i in inputs if isinstance(i, dict)) if isinstance(inputs, list) else []
    return [record.get("format"), record.get("options"), digests]


def check_inputs(out: Path, old: dict[str, Any] | None, new: dict[str, Any], overwrite: bool) -> None:
    """Refuse to replace an earlier export of other inputs without ``overwrite`` (a rerun replaces its own)."""
    if old is not None and not overwrite and _key(old) != _key(new):
        raise ConfigError(f"--output {out} holds an export made from other inputs (format {old.get('format')}, "
                          f"{len(old.get('inputs') or [])} result files); pass --overwrite (overwrite=True) to replace "
                          "it, or export into another folder")


def write(out: Path, built: Built, record: dict[str, Any], old: dict[str, Any] | None) -> Path:
    """Write the files, the card (``--card``) and the manifest, each atomically; then remove the earlier
    export's files this one did not write, and the folders they leave empty. Returns the manifest's path."""
    for rel, data in sorted(built.files.items()):
        atomic_write_bytes(out / rel, data)
    if built.card is not None:
        atomic_write_bytes(built.card[0], built.card[1])
    path = out / MANIFEST
    atomic_write_bytes(path, (json.dumps(record, indent=1, ensure_ascii=False) + "\n").encode())
    for rel in sorted(set(_listed(out, old or {})) - set(built.files)):
        stale = out / rel
        if stale.is_file() and not stale.is_symlink():
            stale.unlink()
        parent = stale.parent
        while parent != out and parent.is_dir() and not any(parent.iterdir()):
            os.rmdir(parent)
            parent = parent.parent
    return path
