"""Fetching files: a URL (streamed with a progress bar), a file of a Hugging Face repository (pinned to a revision),
and archives unpacked without leaving their destination. The one place hnbench reaches the network for files: benchmark
downloads (:mod:`hnbench.data.benchmarks.download`) and zoo weights (:mod:`hnbench.models.zoo`) come through here."""

from __future__ import annotations

import fnmatch
import logging
import shutil
import tarfile
import urllib.error
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

from tqdm import tqdm

from hnbench.errors import DataError

logger = logging.getLogger(__name__)


def _urlopen(url: str, timeout: float = 60) -> Any:  # indirection so tests can simulate being offline
    return urllib.request.urlopen(url, timeout=timeout)


def fetch_url(url: str, dest: Path, progress: bool = True) -> Path:
    """Stream ``url`` into ``dest``; a one-line :class:`DataError` when the network is unreachable."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    try:
        with _urlopen(url) as resp, open(part, "wb") as f:
            total = int(resp.headers.get("Content-Length") or 0) or None
            with tqdm(total=total, unit="B", unit_scale=True, desc=dest.name, disable=not progress) as bar:
                for block in iter(lambda: resp.read(1 << 20), b""):
                    f.write(block)
                    bar.update(len(block))
    except (urllib.error.URLError, OSError, TimeoutError) as e:
        part.unlink(missing_ok=True)
        reason = getattr(e, "reason", None) or e
        raise DataError(f"cannot download {url} ({reason}); offline? fetch it by hand and pass --local FILE"
                        ) from None
    part.replace(dest)
    return dest


def fetch_hf(repo: str, filename: str, revision: str | None) -> tuple[Path, str | None]:
    """``filename`` from Hugging Face dataset ``repo`` at the commit ``revision`` resolves to (default main)."""
    try:
        from huggingface_hub import HfApi, hf_hub_download

        sha = HfApi().dataset_info(repo, revision=revision or "main").sha
        path = hf_hub_download(repo, filename, repo_type="dataset", revision=sha)
    except Exception as e:  # huggingface_hub raises many types (offline mode, HTTP, auth, missing file)
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise DataError(f"cannot fetch {filename} from huggingface.co/datasets/{repo} ({type(e).__name__}: "
                        f"{first}); offline? fetch it by hand and pass --local FILE") from None
    return Path(path), sha


def _inside(dest: Path, name: str) -> Path:
    target = (dest / name).resolve()
    if not target.is_relative_to(dest.resolve()):
        raise DataError(f"archive member {name!r} would land outside {dest}; not extracting")
    return target


def extract(archive: Path, dest: Path, members: str | None = None) -> int:
    """Unpack a zip or tar archive into ``dest`` (safely); with ``members``, only matching files, flattened."""
    dest.mkdir(parents=True, exist_ok=True)
    n = 0
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as z:
            for info in z.infolist():
                base = Path(info.filename).name
                if info.is_dir() or (members and not fnmatch.fnmatch(base, members)):
                    continue
                target = _inside(dest, base if members else info.filename)
                target.parent.mkdir(parents=True, exist_ok=True)
                with z.open(info) as src, open(target, "wb") as out:
                    shutil.copyfileobj(src, out)
                n += 1
        return n
    if not tarfile.is_tarfile(archive):
        raise DataError(f"{archive}: neither a zip nor a tar archive")
    with tarfile.open(archive) as tar:
        try:
            for m in tar.getmembers():
                if not m.isfile() or (members and not fnmatch.fnmatch(Path(m.name).name, members)):
                    continue
                if members:
                    m.name = Path(m.name).name
                _inside(dest, m.name)
                tar.extract(m, dest, filter="data")
                n += 1
        except tarfile.TarError as e:
            raise DataError(f"{archive}: cannot extract ({e})") from e
    return n
