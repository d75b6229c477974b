"""hnbench's version, and the installed version of a package (recorded where results depend on it)."""

from __future__ import annotations

from importlib import metadata

__version__ = "0.1.0"


def package_version(package: str) -> str | None:
    """The installed distribution's version, or None when it is not installed."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None
