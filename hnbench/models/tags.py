"""open_clip pretrained tags before any download: is the tag known, is a local copy cached, can its host be
reached. Offline, open_clip (through huggingface_hub) retries for about a minute and ends listing "known tags"
that include the one asked for; :func:`check_tag` answers in one line at once instead."""

from __future__ import annotations

import contextlib
import os
import socket
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hnbench.errors import CheckpointError

__all__ = ["check_tag", "hub_offline", "offline_download"]

CONNECT_SECONDS = 3.0  # one TCP connection attempt to the weights' host; no retries
HF_WEIGHTS = "open_clip_pytorch_model.bin"  # open_clip's default file name of an hf_hub entry without one


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) is set: Hugging Face downloads are off."""
    return any(os.environ.get(v, "").strip().upper() in ("1", "ON", "YES", "TRUE")
               for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _reachable(host: str, port: int = 443) -> bool:
    """One connection attempt to ``host`` (a proxy in the environment is trusted to reach it)."""
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True
    try:
        with socket.create_connection((host, port), timeout=CONNECT_SECONDS):
            return True
    except OSError:
        return False


def _local_copy(cfg: dict[str, Any]) -> tuple[str | None, str, str, int]:
    """``(cached file or None, where a copy is looked for, host, port)`` of an open_clip pretrained config, in
    the order open_clip downloads (the hub entry first, with its safetensors alternative; else the URL)."""
    from open_clip.pretrained import has_hf_hub

    if cfg.get("hf_hub") and has_hf_hub():
        from huggingface_hub import constants, try_to_load_from_cache

        repo, filename = os.path.split(cfg["hf_hub"])  # "org/name/file.bin", or "org/name/" for the default file
        filename = filename or HF_WEIGHTS
        names = [filename[:-4] + ".safetensors"] if filename.endswith((".bin", ".pth")) else []
        found = next((p for p in (try_to_load_from_cache(repo, n) for n in [*names, filename]) if isinstance(p, str)),
                     None)
        url = urllib.parse.urlsplit(constants.ENDPOINT)
        where = str(Path(constants.HF_HUB_CACHE) / f"models--{repo.replace('/', '--')}")
        return found, where, url.hostname or "huggingface.co", url.port or (443 if url.scheme == "https" else 80)
    url = urllib.parse.urlsplit(cfg.get("url", ""))
    target = Path("~/.cache/clip").expanduser() / os.path.basename(url.path)  # open_clip's download folder
    return (str(target) if target.is_file() else None), str(target), url.hostname or "", url.port or 443


def check_tag(arch: str, tag: str) -> bool:
    """Refuse an open_clip tag ``arch``/``tag`` that cannot load, before anything downloads: an unknown tag (the
    arch's tags listed), or one with no local copy while downloads are off (``HF_HUB_OFFLINE``) or its host
    cannot be reached (where a copy is looked for, and how to pass a file instead, said once).

    Returns whether the weights must come from the local copy without asking the hub (:func:`offline_download`):
    they are cached and the host cannot be reached."""
    import open_clip

    cfg = open_clip.get_pretrained_cfg(arch, tag)
    if not cfg:
        known = [t for t in open_clip.list_pretrained_tags_by_model(arch) if t != tag]
        raise CheckpointError(f"{arch} has no open_clip pretrained tag {tag!r} (known tags: {', '.join(known) or 'none'}); "
                              "or pass a weights file: --pretrained PATH.safetensors")
    found, where, host, port = _local_copy(cfg)
    if found:
        return not hub_offline() and not _reachable(host, port)
    why = "HF_HUB_OFFLINE is set" if hub_offline() and cfg.get("hf_hub") else \
        f"{host} cannot be reached" if not _reachable(host, port) else None
    if why is None:
        return False
    raise CheckpointError(f"open_clip weights {arch}/{tag} need a download and {why}: no local copy in {where}. "
                          "Fetch them once with the internet (they are cached there), or pass a weights file: "
                          "--pretrained PATH.safetensors")


@contextlib.contextmanager
def offline_download(enabled: bool) -> Iterator[None]:
    """huggingface_hub's offline mode for the duration (``enabled``): a cached file is used without a request."""
    if not enabled:
        yield
        return
    from huggingface_hub import constants

    before = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = before
