"""Internal file helpers: where hnbench keeps its files (:func:`cache_dir`), atomic writes with the umask's mode,
CSV/TSV/JSONL row readers, untrusted reads, escaping, file hashes and the stat-keyed memo of file content digests.
Downloads (URLs, archives, the Hub) are :mod:`hnbench.io.download`."""

from __future__ import annotations

import contextlib
import csv
import functools
import hashlib
import io
import json
import logging
import numbers
import os
import re
import stat
import sys
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from hnbench.errors import ConfigError, DataError, HnbenchError

__all__ = ["DIGEST_BYTES", "MAX_JSON_BYTES", "MAX_REPORTED", "Problems", "MAX_TABLE_BYTES", "append_line", "atomic_write_bytes", "cache_dir", "check_output", "content_digest",
           "csv_bytes", "csv_cell", "csv_frame", "file_beside", "file_digests", "follow_umask", "human_bytes", "is_record", "loads_json",
           "markdown_code", "markdown_text", "process_umask", "read_json_untrusted", "read_rows", "read_text_utf8",
           "read_untrusted", "record_output", "script_json", "sha256_file", "value_text", "write_temp"]

logger = logging.getLogger(__name__)

DIGEST_BYTES = 16  # blake2b-128: the embedding cache's content keys and the data fingerprint's image digests
MAX_JSON_BYTES = 64 << 20  # a result, hardness or comparison JSON: a few kB to a few MB in practice
MAX_TABLE_BYTES = 4 << 30  # a per-query or per-caption parquet


def cache_dir() -> Path:
    """Where hnbench keeps generated data, embeddings and downloaded weights: ``$HNBENCH_CACHE``, else
    ``$XDG_CACHE_HOME/hnbench``, else ``~/.cache/hnbench``."""
    if os.environ.get("HNBENCH_CACHE"):
        return Path(os.environ["HNBENCH_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "hnbench"


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


def follow_umask(path: str | Path) -> None:
    """Give ``path`` the mode a plain ``open`` would under the umask (a writer such as safetensors' creates its
    files 0600, so a colleague could not read a checkpoint every other output lets them read)."""
    os.chmod(path, 0o666 & ~process_umask())


@contextlib.contextmanager
def _naming(path: str | Path) -> Iterator[None]:
    """A write's OSError that names no file (``f.write`` on a full disk) re-raised naming ``path``, the file it
    was writing (the CLI's one line for no room says which)."""
    try:
        yield
    except OSError as e:
        if e.errno is not None and e.filename is None:
            raise OSError(e.errno, e.strerror, str(path)) from e
        raise


def write_temp(path: Path, data: bytes) -> str:
    """``data`` in a synced temporary file beside ``path``, with the mode a plain ``open`` would give."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~process_umask())  # mkstemp creates 0600 whatever the umask
        with _naming(path), os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return tmp


def append_line(path: str | Path, line: str) -> None:
    """Append one line to a log (``log.jsonl``); a failed write names the file."""
    with _naming(path), open(path, "a") as f:
        f.write(line + "\n")


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


def loads_json(text: str) -> Any:
    """``json.loads``, with a document nested past Python's recursion limit (``[[[[...`` 100,000 deep) or an
    integer past Python's digit limit (4,300 digits) reported as the :class:`json.JSONDecodeError` it is: a
    hostile file is bad input, not a crash."""
    try:
        return json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", text, 0) from None
    except json.JSONDecodeError:
        raise
    except ValueError as e:  # "Exceeds the limit (4300 digits) for integer string conversion ..."
        digits = str(e).partition("value has ")[2].partition(" ")[0] or "too many"
        raise json.JSONDecodeError(f"a number too long to read ({digits} digits; at most {getattr(sys, 'get_int_max_str_digits', lambda: 4300)()})",
                                   text, 0) from None


def allow_long_csv_fields() -> None:
    """Lift the csv module's 131,072-character field limit: a long caption is text like any other (the
    tokenizer truncates it and the result counts it, as for JSONL)."""
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))


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


MAX_REPORTED = 10  # problems named in one error line; the rest are counted


class Problems:
    """The bad rows or items of one input, collected and then raised together as one line (each with its file
    and line where known, the first :data:`MAX_REPORTED` named, the rest counted), so a file is fixed in one
    pass rather than one error per rerun."""

    def __init__(self, what: str):
        self.what, self.items, self.droppable = what, list[tuple[str | None, str]](), 0

    def add(self, where: str | None, problem: str, *, droppable: bool = False) -> None:
        """One problem at ``where`` (``path:line``; None: the input as a whole); ``droppable``: ``--skip-invalid``
        would drop the item instead."""
        self.items.append((where, problem))
        self.droppable += droppable

    def __len__(self) -> int:
        return len(self.items)

    def check(self) -> None:
        """Raise the problems collected, if any, as one :class:`DataError` line."""
        n = len(self.items)
        if not n:
            return
        hint = "" if not self.droppable else " (pass --skip-invalid to drop it)" if n == 1 else \
            " (pass --skip-invalid to drop the unusable items)"
        if n == 1:
            where, problem = self.items[0]
            raise DataError(f"{where or self.what}: {problem}{hint}")
        named = "; ".join(f"{w}: {p}" if w else p for w, p in self.items[:MAX_REPORTED])
        more = f"; and {n - MAX_REPORTED} more" if n > MAX_REPORTED else ""
        raise DataError(f"{self.what}: {n} problems: {named}{more}{hint}")


def read_rows(path: Path, problems: Problems | None = None) -> tuple[list[dict[str, Any]], list[int]]:
    """The rows of a ``.csv``/``.tsv`` (with a header) or JSONL file (one object a line) and the line of each.

    A malformed line is added to ``problems`` and left out (without ``problems``: all of them are raised
    together at the end, :class:`Problems`)."""
    text = read_text_utf8(path)
    own = problems is None
    problems = Problems(str(path)) if problems is None else problems
    rows: list[dict[str, Any]] = []
    lines: list[int] = []
    if path.suffix in (".csv", ".tsv"):
        allow_long_csv_fields()
        reader = csv.DictReader(io.StringIO(text, newline=""), delimiter="\t" if path.suffix == ".tsv" else ",")
        for row in reader:
            n = reader.line_num
            if None in row or any(v is None for v in row.values()):
                problems.add(f"{path}:{n}", f"row has a different number of fields than the header {reader.fieldnames}")
                continue
            rows.append(row)
            lines.append(n)
    else:
        for n, line in enumerate(text.split("\n"), start=1):  # not splitlines(): U+2028, U+0085 may be in a string
            if not line.strip():
                continue
            try:
                row = loads_json(line)
            except json.JSONDecodeError as e:
                problems.add(f"{path}:{n}", f"not valid JSON ({e.msg})")
                continue
            if not isinstance(row, dict):
                problems.add(f"{path}:{n}", f"expected a JSON object, got {type(row).__name__}")
                continue
            rows.append(row)
            lines.append(n)
    if own:
        problems.check()
    return rows, lines


def sha256_file(path: str | Path) -> str:
    """The hex SHA-256 of a file's bytes, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def content_digest(data: bytes) -> bytes:
    """blake2b-128 of ``data``: the content key of an image or caption."""
    return hashlib.blake2b(data, digest_size=DIGEST_BYTES).digest()


def _file_stat(path: str) -> list[int] | None:
    """What the digest memo keys a file by: size, mtime and ctime (ns), inode and device; None if absent.

    ctime changes on every write and cannot be set back (``touch -r``, ``rsync -t`` restore only mtime)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def _read_digest(path: str) -> bytes | None:
    try:
        h = hashlib.blake2b(digest_size=DIGEST_BYTES)
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        return h.digest()
    except OSError as e:  # unreadable: no digest; whoever opens the image reports it properly
        logger.debug("cannot read %s: %s", path, e)
        return None


def file_digests(paths: Sequence[str], memo: Path | None, *, threads: int = 8) -> list[bytes | None]:
    """:func:`content_digest` of each file's bytes (None where it cannot be read), through a memo.

    The memo (one JSON file per folder of files under ``memo``) holds each file's digest with its
    :func:`_file_stat`: a file whose stat is unchanged is not read again, so a warm run costs one
    ``stat`` per file. ``memo=None`` reads every file. Files are read on ``threads`` threads (I/O
    and hashing release the GIL). A memo that cannot be read or written is only a slower run.
    """
    absolute = [os.path.abspath(p) for p in paths]
    stats = [_file_stat(p) for p in absolute]
    folders: dict[str, dict[str, list[Any]]] = {}
    if memo is not None:
        for folder in {os.path.dirname(p) for p in absolute}:
            try:
                entries = loads_json(_memo_path(memo, folder).read_text())["files"]
                folders[folder] = entries if isinstance(entries, dict) else {}
            except (OSError, ValueError, KeyError, TypeError):
                folders[folder] = {}
    found: list[bytes | None] = [None] * len(paths)
    todo = []
    for i, (p, st) in enumerate(zip(absolute, stats)):
        known = folders.get(os.path.dirname(p), {}).get(os.path.basename(p))
        if st is not None and isinstance(known, list) and len(known) == 2 and known[0] == st:
            with contextlib.suppress(ValueError, TypeError):
                found[i] = bytes.fromhex(known[1])
                continue
        if st is not None:
            todo.append(i)
    if len(todo) > 64 and threads > 1:
        with ThreadPoolExecutor(threads) as pool:
            read = list(pool.map(lambda i: _read_digest(absolute[i]), todo, chunksize=16))
    else:
        read = [_read_digest(absolute[i]) for i in todo]
    changed: set[str] = set()
    for i, digest in zip(todo, read):
        found[i] = digest
        # the stat after the read: a file rewritten while it was read is not remembered with the new stat
        if digest is not None and memo is not None and _file_stat(absolute[i]) == stats[i]:
            folder = os.path.dirname(absolute[i])
            folders[folder][os.path.basename(absolute[i])] = [stats[i], digest.hex()]
            changed.add(folder)
    for folder in sorted(changed):
        data = json.dumps({"folder": folder, "files": folders[folder]}, separators=(",", ":")).encode()
        try:
            atomic_write_bytes(_memo_path(memo, folder), data)
        except OSError as e:
            logger.debug("cannot write the digest memo of %s: %s", folder, e)
    return found


def _memo_path(memo: Path | None, folder: str) -> Path:
    assert memo is not None  # a folder is read or changed only with a memo
    return memo / f"{hashlib.sha256(folder.encode()).hexdigest()[:24]}.json"


def check_output(path: str | Path, what: str, inputs: dict[str, Any], *, overwrite: bool = False,
                 option: str = "--output") -> None:
    """Refuse to replace ``path``, a derived output (a report, a comparison, a page), made from other inputs.

    ``inputs`` (JSON-able: what the output is computed from) is what :func:`record_output` wrote beside
    it (``.<name>.inputs.json``) when it was made: a rerun from the same inputs may replace its own
    output, anything else there (other inputs, or a file with no record) only with ``overwrite``. Call it
    before loading anything. ``path`` itself must not be a directory, and the folder it goes in must be (or
    can become) a directory hnbench can write in (:func:`hnbench.validate.check_output_dir`).
    """
    from hnbench.validate import check_output_dir  # validate imports nothing of hnbench but its errors

    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{option} {path}: is a directory; give the file name to write {what} to")
    check_output_dir(path.parent, option)
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


def is_record(path: Path) -> bool:
    """Whether ``path`` is an inputs record :func:`record_output` wrote (not a result: readers of a folder skip it)."""
    return path.name.startswith(".") and path.name.endswith(".inputs.json")


def _canonical(inputs: dict[str, Any]) -> Any:
    return json.loads(json.dumps(inputs, default=str))


# --- reading files from someone else: regular files only, bounded, beside their JSON -------------------
def read_untrusted(path: str | Path, what: str, *, limit: int = MAX_JSON_BYTES,
                   error: type[HnbenchError] = DataError) -> bytes:
    """The bytes of ``path`` if it is a regular file (a symlink to one is followed) of at most ``limit`` bytes.

    A FIFO, a device (a symlink to ``/dev/zero``), a socket or a directory is refused without blocking or
    reading, and so is a file over the limit: one line naming ``what``, raised as ``error``."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise error(f"{path}: {what} is unreadable ({e.strerror or e})") from None
    st = os.fstat(fd)  # before fdopen, which refuses a directory with an exception of its own
    if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
        os.close(fd)
        if stat.S_ISREG(st.st_mode):
            raise error(f"{path}: {what} is {st.st_size:,} bytes, more than the {limit:,} hnbench reads; refused")
        kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a directory" if stat.S_ISDIR(st.st_mode)
                else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "a socket"
                if stat.S_ISSOCK(st.st_mode) else "not a file")
        raise error(f"{path}: {what} is {kind}, not a regular file; refused")
    with os.fdopen(fd, "rb") as f:
        data = _read_bounded(f, st.st_size, limit)
    if len(data) > limit:
        raise error(f"{path}: {what} grew past the {limit:,} bytes hnbench reads; refused")
    return data


def _read_bounded(f: io.BufferedReader, size: int, limit: int) -> bytes:
    """What ``f`` holds, at most ``limit + 1`` bytes: one read of its ``size`` (its stat, which may be stale: a
    file that grew, a /proc file of size 0) and then blocks of 1 MiB until the end or past ``limit``.

    Never ``read(limit + 1)``: that allocates the whole limit (4 GiB for a table) up front, a ``MemoryError``
    under any memory limit (``ulimit -v``, a container) however small the file."""
    data = f.read(min(size, limit) + 1)
    if len(data) <= size:
        return data
    parts, n = [data], len(data)
    while n <= limit and (block := f.read(min(1 << 20, limit + 1 - n))):
        parts.append(block)
        n += len(block)
    return b"".join(parts)


def read_json_untrusted(path: str | Path, what: str, *, error: type[HnbenchError] = DataError) -> Any:
    """A JSON document read with :func:`read_untrusted`; bytes that are not JSON are one line naming ``what``."""
    data = read_untrusted(path, what, error=error)
    try:
        return loads_json(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise error(f"{path}: not a readable {what} ({e})") from None


def file_beside(json_path: str | Path, name: object, what: str, *, error: type[HnbenchError] = DataError) -> Path:
    """The file a JSON names as ``name`` (its per-query parquet, a hardness run's files): a relative path inside
    the JSON's folder, never absolute (``/dev/zero``) and never above it (``../``)."""
    folder = Path(json_path).parent
    if not isinstance(name, str) or not name or "\\" in name or "\0" in name:
        raise error(f"{json_path}: its {what} {name!r} is not a file name")
    rel = Path(name)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        raise error(f"{json_path}: its {what} {name!r} lies outside the folder of the file; refused")
    return folder / rel


# --- escaping for the formats hnbench writes -------------------------------------------------------------
# every character that starts Markdown markup wherever it stands, and runs of "_" (checked in _escape_markdown:
# a run inside a word, as in laion2b_s34b or a__b, is never emphasis and stays as it is)
_MARKDOWN_SPECIAL = re.compile(r"[\\`*<>|&~]|_+|(?<=\])\(")
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
NO_VALUE = "–"  # what a page, report or console line shows where a value is missing or undefined


def value_text(value: Any, digits: int | None = None, *, scale: float = 1.0, suffix: str = "",
               none: str = NO_VALUE) -> str:
    """``value`` as a person reads it, never a Python spelling: None and NaN are ``none`` ("–"), a number is
    ``scale · value`` with ``digits`` decimals (else its shortest form, ``12.0`` as ``12``) and ``suffix``,
    a bool is ``true``/``false``, a sequence its items joined by spaces and a mapping ``key value, ...`` (an empty
    one ``none``), anything else its text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, numbers.Real):
        x = scale * float(value)
        if x != x:
            return none
        if digits is not None:
            return f"{x:.{digits}f}{suffix}"
        return (str(int(x)) if x.is_integer() and abs(x) < 1e15 else repr(x)) + suffix
    if value is None:
        return none
    if isinstance(value, (list, tuple)):  # as a repeated flag takes them; none at all: ``none``
        return " ".join(value_text(v, digits, scale=scale, none=none) for v in value) + suffix if value else none
    if isinstance(value, dict):
        return ", ".join(f"{k} {value_text(v, digits, scale=scale, none=none)}" for k, v in value.items()) or none
    return str(value) + suffix


def markdown_text(value: object) -> str:
    """``value`` as literal text in Markdown, a table cell included: every character CommonMark or GitHub
    gives a meaning (``<`` of raw HTML, ``|`` of a table, ``*`` and ``_`` of emphasis, the ``(`` of a link
    or image after ``]``, ``&`` of an entity, a backtick ...) is backslash-escaped and line breaks become
    spaces, so a name from a file never becomes markup (brackets alone are plain text: hnbench writes no
    link reference definitions)."""
    return _MARKDOWN_SPECIAL.sub(_escape_markdown, " ".join(str(value).splitlines()))


def _escape_markdown(m: re.Match[str]) -> str:
    text, i, j = m.string, m.start(), m.end()
    if m.group()[0] == "_" and 0 < i and j < len(text) and text[i - 1].isalnum() and text[j].isalnum():
        return m.group()
    return "".join("\\" + c for c in m.group())


def markdown_code(value: object) -> str:
    """``value`` as an inline code span (literal: nothing inside is markup); a backtick, which would end
    the span, and ``|``, which would end a table cell, are replaced; line breaks become spaces."""
    text = " ".join(str(value).splitlines()).replace("`", "'").replace("|", "¦")
    return f"`{text}`"


def csv_cell(value: Any) -> Any:
    """A CSV cell that a spreadsheet never runs: a text starting with ``=``, ``+``, ``-``, ``@``, a tab or a
    carriage return gets a leading ``'`` (OWASP's rule against CSV injection) unless it is a plain number
    (``-0.25``); anything that is not text (numbers written as numbers) is returned as it is."""
    if isinstance(value, str) and value.startswith(_FORMULA_START) and not _NUMBER.fullmatch(value):
        return "'" + value
    return value


def csv_bytes(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> bytes:
    """A CSV file (header, then rows) with every cell passed through :func:`csv_cell`."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow([csv_cell(h) for h in header])
    w.writerows([csv_cell(v) for v in row] for row in rows)
    return buf.getvalue().encode()


def csv_frame(frame: Any) -> bytes:
    """A DataFrame as CSV (no index, pandas' number format) with its column names and every text cell passed
    through :func:`csv_cell`; numeric columns are written as they are."""
    safe = frame.copy()
    for column in safe.columns:
        if not _numeric_column(safe[column]):
            safe[column] = safe[column].map(csv_cell)
    safe.columns = [csv_cell(str(c)) for c in safe.columns]
    # "\r\n" as csv_bytes writes (RFC 4180): a cell holding a carriage return is then quoted, not split
    return str(safe.to_csv(index=False, lineterminator="\r\n")).encode()


def _numeric_column(column: Any) -> bool:
    """Whether a pandas column holds numbers (or booleans) only: nothing in it can be a formula."""
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    return bool(is_numeric_dtype(column) or is_bool_dtype(column))


def script_json(value: Any) -> str:
    """``value`` as JSON to embed in an HTML ``<script>``: every ``<``, ``>`` and ``&`` is written as a
    ``\\u`` escape, so no text in it (``</script>``, ``<!--``, ``<script``) can end or change the script."""
    return (json.dumps(value).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))
