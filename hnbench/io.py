"""Internal file helpers: atomic writes with the umask's mode, CSV/TSV/JSONL row readers, file hashes."""

from __future__ import annotations

import contextlib
import csv
import functools
import hashlib
import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from hnbench.errors import ConfigError, DataError

__all__ = ["atomic_write_bytes", "check_output", "human_bytes", "process_umask", "read_rows", "read_text_utf8", "record_output",
           "sha256_file", "write_temp"]


@functools.lru_cache(maxsize=1)
def process_umask() -> int:
    """The process umask, read once (``os.umask`` can only be read by setting it)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_temp(path: Path, data: bytes) -> str:
    """``data`` in a synced temporary file beside ``path``, with the mode a plain ``open`` would give."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~process_umask())  # mkstemp creates 0600 whatever the umask
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return tmp


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file and ``os.replace``: never a half-written file."""
    path = Path(path)
    tmp = write_temp(path, data)
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def human_bytes(n: float) -> str:
    """A size for people: ``512 B``, ``1.5 KiB`` … ``3.2 GiB``."""
    unit = "B"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            break
        n /= 1024
    return f"{n:.0f} B" if unit == "B" else f"{n:.1f} {unit}"


def read_text_utf8(path: Path) -> str:
    """A text file as UTF-8, with or without the byte-order mark Excel writes; else one line naming the byte."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise DataError(f"{path}:{line}: not UTF-8 (byte 0x{data[e.start]:02x} at column {column}); "
                        f"save the file as UTF-8") from None


def read_rows(path: Path) -> tuple[list[dict[str, Any]], list[int]]:
    """The rows of a ``.csv``/``.tsv`` (with a header) or JSONL file (one object a line) and the line of each."""
    text = read_text_utf8(path)
    rows: list[dict[str, Any]] = []
    lines: list[int] = []
    if path.suffix in (".csv", ".tsv"):
        reader = csv.DictReader(io.StringIO(text, newline=""), delimiter="\t" if path.suffix == ".tsv" else ",")
        for row in reader:
            n = reader.line_num
            if None in row or any(v is None for v in row.values()):
                raise DataError(f"{path}:{n}: row has a different number of fields than the header "
                                f"{reader.fieldnames}")
            rows.append(row)
            lines.append(n)
        return rows, lines
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{path}:{n}: not valid JSON ({e.msg})") from e
        if not isinstance(row, dict):
            raise DataError(f"{path}:{n}: expected a JSON object, got {type(row).__name__}")
        rows.append(row)
        lines.append(n)
    return rows, lines


def sha256_file(path: str | Path) -> str:
    """The hex SHA-256 of a file's bytes, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_output(path: str | Path, what: str, inputs: dict[str, Any], *, overwrite: bool = False) -> None:
    """Refuse to replace ``path``, a derived output (a report, a comparison, a page), made from other inputs.

    ``inputs`` (JSON-able: what the output is computed from) is what :func:`record_output` wrote beside
    it (``.<name>.inputs.json``) when it was made: a rerun from the same inputs may replace its own
    output, anything else there (other inputs, or a file with no record) only with ``overwrite``. Call it
    before loading anything.
    """
    path = Path(path)
    if path.exists() and not overwrite:
        try:
            same = json.loads(_record_path(path).read_text()) == _canonical(inputs)
        except (OSError, ValueError):
            same = False
        if not same:
            raise ConfigError(f"{path} exists and holds {what} made from other inputs; pass --overwrite "
                              "(overwrite=True) to replace it, or choose another --output")


def record_output(path: str | Path, inputs: dict[str, Any]) -> None:
    """Record the inputs of the output about to be written to ``path`` (see :func:`check_output`)."""
    atomic_write_bytes(_record_path(Path(path)), (json.dumps(_canonical(inputs), indent=1, sort_keys=True) + "\n").encode())


def _record_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.inputs.json")


def _canonical(inputs: dict[str, Any]) -> Any:
    return json.loads(json.dumps(inputs, default=str))
