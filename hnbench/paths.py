"""Where hnbench keeps generated data, embeddings and downloaded weights."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``$HNBENCH_CACHE``, else ``$XDG_CACHE_HOME/hnbench``, else ``~/.cache/hnbench``."""
    if os.environ.get("HNBENCH_CACHE"):
        return Path(os.environ["HNBENCH_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "hnbench"
