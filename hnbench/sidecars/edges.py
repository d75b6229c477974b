"""Edge maps (StructXLIP's structure inputs): exact outlines for synthdense, Canny for real images.

:class:`EdgeSettings` declares the detector (``method``: ``outline`` draws synthdense's objects' outlines
from the render geometry, exact and dependency-free; ``canny`` runs OpenCV's Canny on the grey image,
``pip install 'hnbench[edges]'``; ``auto``: outline for synthdense, else canny) and its parameters. An
edge map is a greyscale image the size of its image, edges white (255) on black; :class:`EdgeImages`
serves them as an :class:`~hnbench.data.base.ImageSource` (``open`` gives the map replicated to RGB, as
StructXLIP reads it, so the towers' own image transform applies; ``tensor`` a float (1, H, W) in [0, 1]).

Maps are cached as PNGs under ``<hnbench cache>/edges/<parameters digest>/<image content digest>.png``
(the content digest is :meth:`ImageSource.content_digests`'), so the same image with the same parameters
is detected once. Each PNG holds the sha256 of its pixels; a cached map is used only if it decodes, has
the size a fresh one would (its image's) and its checksum holds, as an embedding shard is checked
(:mod:`hnbench.evaluation.cache`): anything else is logged, moved to ``<hnbench cache>/edges/quarantine/`` and made
again, never a traceback. A cache that cannot be written is a warning; the maps are still made.
:meth:`EdgeSettings.recorded` is what a run records. :func:`require_edges` is the
trainer's check, before any model loads.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PIL import Image

from hnbench.data.base import ImageSource
from hnbench.errors import CacheError, ConfigError, DataError
from hnbench.io import atomic_write_bytes, read_untrusted
from hnbench.sidecars import OUTLINES
from hnbench.sidecars.options import EDGES_EXTRA as EXTRA
from hnbench.sidecars.options import EdgeSettings
from hnbench.sidecars.segments import image_size

if TYPE_CHECKING:
    import torch

    from hnbench.data.base import ImageTextDataset

EDGES = "edges"  # the cache folder
QUARANTINE = "quarantine"  # under it: cached maps that failed their check, moved out of the way (not deleted)
CHECKSUM = "hnbench-sha256"  # the PNG text chunk holding the sha256 of a cached map's pixels

logger = logging.getLogger(__name__)


class CorruptEdgeMapError(Exception):
    """A cached edge map is not a PNG, is truncated, has another size or mode, or fails its checksum."""


def _pixels_sha256(edges: Image.Image) -> str:
    w, h = edges.size
    return hashlib.sha256(f"{edges.mode}:{w}x{h}:".encode() + edges.tobytes()).hexdigest()


def encode_edge_map(edges: Image.Image) -> bytes:
    """A greyscale edge map as the PNG the cache holds: the sha256 of its pixels in a text chunk."""
    from PIL.PngImagePlugin import PngInfo

    info = PngInfo()
    info.add_text(CHECKSUM, _pixels_sha256(edges))
    buf = io.BytesIO()
    edges.save(buf, format="PNG", pnginfo=info)
    return buf.getvalue()


def decode_edge_map(data: bytes, size: tuple[int, int]) -> Image.Image:
    """The edge map in ``data`` (:func:`encode_edge_map`'s PNG), checked: a greyscale ``size`` image (the size
    read from the header, before any pixel is decoded) whose pixels match its checksum; anything else raises
    :class:`CorruptEdgeMapError`."""
    try:
        with Image.open(io.BytesIO(data), formats=["PNG"]) as im:
            if im.size != tuple(size) or im.mode != "L":
                raise CorruptEdgeMapError(f"a {im.size[0]}x{im.size[1]} {im.mode} image, not the {size[0]}x{size[1]} "
                                          "greyscale map of its image")
            im.load()
            recorded = im.info.get(CHECKSUM)
            edges: Image.Image = im.copy()
    except CorruptEdgeMapError:
        raise
    except Exception as e:  # PIL reports broken data as OSError, SyntaxError, ValueError, zlib.error, ...
        raise CorruptEdgeMapError(f"not a readable PNG ({type(e).__name__}: {e})") from None
    if recorded != _pixels_sha256(edges):
        raise CorruptEdgeMapError("no checksum" if recorded is None else "checksum mismatch")
    return edges


def _cv2() -> Any:
    try:
        import cv2
    except ImportError:
        raise ConfigError(f"--edges canny needs OpenCV: {EXTRA}") from None
    return cv2


def canny(image: Image.Image, settings: EdgeSettings) -> Image.Image:
    """Canny edges of ``image``'s grey version (OpenCV), white on black."""
    import numpy as np

    cv2 = _cv2()
    grey = np.asarray(image.convert("L"))
    if settings.blur:
        grey = cv2.GaussianBlur(grey, (settings.blur, settings.blur), 0)
    edges: Image.Image = Image.fromarray(cv2.Canny(grey, settings.canny_low, settings.canny_high))
    return edges


class EdgeImages(ImageSource):
    """The edge maps of a dataset's images (same ids, same positions), made on first use and cached."""

    def __init__(self, images: ImageSource, settings: EdgeSettings, scenes: dict[str, Any] | None = None,
                 image_size: int | None = None, cache: Path | None = None):
        from hnbench.io import cache_dir

        self.images, self.settings, self.scenes, self.image_size = images, settings, scenes, image_size
        self.ids = list(images.ids)
        self.cache = (cache or cache_dir() / EDGES) / settings.key()
        self.unwritable = False  # set by the first failed cache write: the maps are still made, not cached
        self._sizes: dict[int, tuple[int, int] | None] = {}

    def edge_map(self, i: int) -> Image.Image:
        """Image ``i``'s edge map (greyscale), from the cache, checked, or made now and cached."""
        digest = self.images.content_digests([i])[0]
        path = self.cache / f"{digest.hex()}.png" if digest is not None else None
        size = self._size(i)
        if path is not None and size is not None and os.path.lexists(path):
            cached = self._cached(path, size)
            if cached is not None:
                return cached
        if self.settings.method == "outline":
            from hnbench.data.synthdense import render_outlines

            assert self.scenes is not None and self.image_size is not None
            edges = render_outlines(self.scenes[self.ids[i]], self.image_size, self.settings.line_width)
        else:
            edges = canny(self.images.open(i), self.settings)
        if path is not None and not self.unwritable:
            try:
                atomic_write_bytes(path, encode_edge_map(edges))
            except OSError as e:  # read-only or full: the run goes on, only the reuse is lost
                self.unwritable = True
                logger.warning("cannot write the edge-map cache at %s (%s); continuing without writing to it",
                               self.cache, e)
        return edges

    def _size(self, i: int) -> tuple[int, int] | None:
        """The size a fresh map of image ``i`` has: synthdense's render size, or (Canny) its image's, read from
        the file's header where it is a file and remembered (a source's content is fixed)."""
        if self.settings.method == "outline" and self.image_size:
            return self.image_size, self.image_size
        if i not in self._sizes:
            self._sizes[i] = image_size(self.images, i)
        return self._sizes[i]

    def _cached(self, path: Path, size: tuple[int, int]) -> Image.Image | None:
        """The map cached at ``path`` if it is whole, ``size`` and its checksum holds; else None (it is made
        again), the file logged and moved to the quarantine beside the cache's folders, as a corrupt
        embedding shard is (:mod:`hnbench.evaluation.cache`): a cached map that is not the map is never used."""
        try:  # bounded: a map's PNG is far smaller than its pixels twice over; a FIFO or device is refused
            return decode_edge_map(read_untrusted(path, "cached edge map", limit=2 * size[0] * size[1] + (1 << 20),
                                                  error=CacheError), size)
        except (CacheError, CorruptEdgeMapError) as e:
            quarantine = self.cache.parent / QUARANTINE
            dest = quarantine / f"{self.cache.name}-{path.name}"
            moved: Path | None = dest
            try:
                quarantine.mkdir(parents=True, exist_ok=True)
                os.replace(path, dest)
            except OSError:
                moved = None
            logger.warning("corrupt cached edge map %s (%s): moved to %s; it is made again", path, e, moved)
            return None

    def open(self, i: int) -> Image.Image:
        return self.edge_map(i).convert("RGB")

    def tensor(self, i: int) -> torch.Tensor:
        """Image ``i``'s edge map as a float tensor (1, H, W) in [0, 1]."""
        import numpy as np
        import torch

        return torch.from_numpy(np.asarray(self.edge_map(i), dtype=np.float32) / 255.0).unsqueeze(0)

    def describe(self, i: int) -> str:
        return f"edge map ({self.settings.method}) of {self.images.describe(i)}"

    def subset(self, keep: Sequence[int]) -> EdgeImages:
        return EdgeImages(self.images.subset(keep), self.settings, self.scenes, self.image_size,
                          self.cache.parent)


def require_edges(dataset: ImageTextDataset, settings: EdgeSettings | None = None, *,
                  needed_by: str = "this objective") -> EdgeImages:
    """The edge maps of ``dataset`` for a trainer to call before any model loads: settings checked,
    ``auto`` resolved; Canny without OpenCV, or outlines without synthdense geometry, is one line naming
    what is missing and how to get it."""
    settings = settings or EdgeSettings()
    settings.validate()
    settings = settings.resolved(dataset)
    if settings.method == "canny":
        try:
            _cv2()
        except ConfigError:
            raise ConfigError(f"{needed_by} needs edge maps of {dataset.name!r}: they are made with Canny, which "
                              f"needs OpenCV: {EXTRA}") from None
        return EdgeImages(dataset.images, settings)
    from hnbench.sidecars.segments import synthdense_scenes

    try:
        scenes, size = synthdense_scenes(dataset, OUTLINES)
    except (OSError, ValueError, KeyError) as e:
        raise DataError(f"{needed_by} needs edge maps of {dataset.name!r}: its synthdense geometry is unreadable "
                        f"({e}); regenerate it, or use --edges canny ({EXTRA})") from None
    missing = [i for i in dataset.image_ids if i not in scenes]
    if missing:
        raise DataError(f"{needed_by} needs edge maps of {dataset.name!r}: image {missing[0]!r} has no scene in its "
                        "metadata; regenerate the data, or use --edges canny")
    return EdgeImages(dataset.images, settings, scenes, size)
