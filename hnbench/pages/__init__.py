"""``hnbench browse``: a static HTML page of one result's failures, built from stored files only.

The result's per-query parquet gives ranks and the top retrieved ids; the dataset is re-loaded (never
encoded) for captions and image thumbnails. The page (:mod:`hnbench.pages.html`) is one file that
opens from disk: thumbnails are embedded as base64 JPEG, sorting and filtering are a few lines of
plain JavaScript.
"""

from __future__ import annotations

from hnbench.pages.build import browse, build_page, reload_dataset

__all__ = ["browse", "build_page", "reload_dataset"]
