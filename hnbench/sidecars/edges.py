"""Edge maps (StructXLIP's structure inputs): exact outlines for synthdense, Canny for real images.

:class:`EdgeSettings` declares the detector (``method``: ``outline`` draws synthdense's objects' outlines
from the render geometry, exact and dependency-free; ``canny`` runs OpenCV's Canny on the grey image,
``pip install 'hnbench[edges]'``; ``auto``: outline for synthdense, else canny) and its parameters. An
edge map is a greyscale image the size of its image, edges white (255) on black; :class:`EdgeImages`
serves them as an :class:`~hnbench.data.base.ImageSource` (``open`` gives the map replicated to RGB, as
StructXLIP reads it, so the towers' own image transform applies; ``tensor`` a float (1, H, W) in [0, 1]).

Maps are cached as PNGs under ``<hnbench cache>/edges/<parameters digest>/<image content digest>.png``
(the content digest is :meth:`ImageSource.content_digests`'), so the same image with the same parameters
is detected once; :meth:`EdgeSettings.recorded` is what a run records. :func:`require_edges` is the
trainer's check, before any model loads.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PIL import Image

from hnbench.data.base import ImageSource
from hnbench.errors import ConfigError, DataError
from hnbench.sidecars.options import EDGES_EXTRA as EXTRA
from hnbench.sidecars.options import EdgeSettings

if TYPE_CHECKING:
    import torch

    from hnbench.data.base import ImageTextDataset

EDGES = "edges"  # the cache folder


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
        from hnbench.paths import cache_dir

        self.images, self.settings, self.scenes, self.image_size = images, settings, scenes, image_size
        self.ids = list(images.ids)
        self.cache = (cache or cache_dir() / EDGES) / settings.key()

    def edge_map(self, i: int) -> Image.Image:
        """Image ``i``'s edge map (greyscale), from the cache or made now and cached."""
        from hnbench.io import atomic_write_bytes

        digest = self.images.content_digests([i])[0]
        path = self.cache / f"{digest.hex()}.png" if digest is not None else None
        if path is not None and path.is_file():
            with Image.open(path) as im:
                cached: Image.Image = im.convert("L")
            return cached
        if self.settings.method == "outline":
            from hnbench.data.synthdense import render_outlines

            assert self.scenes is not None and self.image_size is not None
            edges = render_outlines(self.scenes[self.ids[i]], self.image_size, self.settings.line_width)
        else:
            edges = canny(self.images.open(i), self.settings)
        if path is not None:
            import io

            buf = io.BytesIO()
            edges.save(buf, format="PNG")
            atomic_write_bytes(path, buf.getvalue())
        return edges

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
        scenes, size = synthdense_scenes(dataset)
    except (OSError, ValueError, KeyError) as e:
        raise DataError(f"{needed_by} needs edge maps of {dataset.name!r}: its synthdense geometry is unreadable "
                        f"({e}); regenerate it, or use --edges canny ({EXTRA})") from None
    missing = [i for i in dataset.image_ids if i not in scenes]
    if missing:
        raise DataError(f"{needed_by} needs edge maps of {dataset.name!r}: image {missing[0]!r} has no scene in its "
                        "metadata; regenerate the data, or use --edges canny")
    return EdgeImages(dataset.images, settings, scenes, size)
