"""The side inputs' options, declared once (flags and recipe keys are generated from them); light: no numpy,
no torch, so the CLI and the training config can import them."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from hnbench.errors import ConfigError
from hnbench.settings import check_declared, option
from hnbench.sidecars import OUTLINES

if TYPE_CHECKING:
    from hnbench.data.base import ImageTextDataset
    from hnbench.specs import ModelSpec

__all__ = ["EDGE_METHODS", "EDGES_EXTRA", "MAX_GRID", "EdgeSettings", "SegmentsSettings"]

EDGE_METHODS = ("auto", "outline", "canny")
EDGES_EXTRA = "pip install 'hnbench[edges]'"
# --grids' largest N: 16 x 16 = 256 cells of an image (all of 1..16: 1,496 candidate crops); finer cells than
# ~1/16 of a side hold too little of an object for a CLIP to score, and N x N crops per image grow fast
MAX_GRID = 16


@dataclass(frozen=True)
class EdgeSettings:
    """How edge maps are made (recorded in a run; the cache key hashes them)."""

    method: str = option("auto", group="edge maps", choices=EDGE_METHODS, flag="--edges",
                         help="edge detector: outline (synthdense's exact object outlines), canny (OpenCV on the grey "
                              f"image; {EDGES_EXTRA}) or auto (outline for synthdense, else canny)")
    canny_low: float = option(100.0, group="edge maps", minimum=0, not_above="canny_high",
                              help="Canny's lower hysteresis threshold")
    canny_high: float = option(200.0, group="edge maps", minimum=0, help="Canny's upper hysteresis threshold")
    blur: int = option(3, group="edge maps", minimum=0, odd=True,
                       help="Gaussian blur kernel before Canny, odd pixels (0: none)")
    line_width: int = option(2, group="edge maps", minimum=1,
                             help="outline width in pixels at synthdense's 2x render scale")

    def validate(self) -> None:
        check_declared(self)  # blur 0 or odd, canny_low ≤ canny_high: declared on the fields

    def resolved(self, dataset: ImageTextDataset) -> EdgeSettings:
        """``auto`` made concrete for ``dataset``: outline where it declares its objects' outlines
        (:data:`~hnbench.sidecars.OUTLINES`: synthdense), else canny; outline on other data is refused."""
        method = self.method
        if method == "auto":
            method = "outline" if OUTLINES in dataset.side_inputs else "canny"
        if method == "outline" and OUTLINES not in dataset.side_inputs:
            raise ConfigError(f"--edges outline draws synthdense's geometry; {dataset.name!r} has none: "
                              "use --edges canny")
        return replace(self, method=method)

    def recorded(self) -> dict[str, Any]:
        """The parameters that made the maps (only those of the method), as a run records them."""
        keep = {"outline": ("line_width",), "canny": ("canny_low", "canny_high", "blur")}.get(self.method, ())
        out: dict[str, Any] = {"method": self.method, **{k: v for k, v in asdict(self).items() if k in keep}}
        if self.method == "canny":
            out.update(polarity="white on black", input="grey (ITU-R 601 luma)", detector="cv2.Canny")
        else:
            out.update(polarity="white on black")
        return out

    def key(self) -> str:
        """The cache folder of these parameters."""
        blob = json.dumps(self.recorded(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


@dataclass
class SegmentsSettings:
    """``hnbench segments``' options (the data and model: :class:`~hnbench.specs.DataSpec`, ModelSpec)."""

    output: str | None = option(None, group="segments",
                                help="the sidecar JSON to write (default: where training looks: beside a synthdense "
                                     "split, else <hnbench cache>/segments/<data fingerprint>.json)")
    import_goal: str | None = option(None, group="segments", metavar="GOAL.json",
                                     help="import GOAL's released segment JSON for this data instead of scoring boxes")
    grids: tuple[int, ...] = option((2, 3), group="segments",
                                    help=f"grid box candidates: N splits each side into N, N from 1 to {MAX_GRID} "
                                         "(default 2 3)")
    centre: tuple[float, ...] = option((0.5, 0.75), group="segments",
                                       help="centred box candidates, as fractions of each side (default 0.5 0.75)")
    whole: bool = option(False, group="segments", help="the whole image is a candidate too (GOAL's is; its "
                                                       "*_del_org files drop the sentences it wins)")
    device: str = option("cpu", group="model", help="cpu, cuda, cuda:N or mps (default: cpu)")
    batch_size: int = option(64, group="segments", minimum=1, help="crops per encoder batch (default 64)")
    overwrite: bool = option(False, group="segments",
                             help="replace a sidecar made from other data, model or parameters")

    def __post_init__(self) -> None:
        self.grids, self.centre = tuple(self.grids), tuple(self.centre)

    def validate(self) -> None:
        check_declared(self)
        if not all(isinstance(g, int) and not isinstance(g, bool) and g >= 1 for g in self.grids) or \
                any(not isinstance(c, (int, float)) or isinstance(c, bool) or not 0 < c <= 1 for c in self.centre):
            raise ConfigError("--grids are positive integers and --centre fractions in (0, 1]")
        if any(g > MAX_GRID for g in self.grids):  # before anything loads: N x N crops of every image
            raise ConfigError(f"--grids {max(self.grids)}: at most {MAX_GRID} (a {MAX_GRID}x{MAX_GRID} grid, "
                              f"{MAX_GRID * MAX_GRID} cells of each image); give a coarser grid")
        if not self.grids and not self.centre and not self.whole:
            raise ConfigError("no box candidates: give --grids, --centre or --whole")

    def parameters(self, model: ModelSpec | None) -> dict[str, Any]:
        """What the sidecar records of how it was made."""
        keep = {k: v for k, v in asdict(self).items() if k in ("grids", "centre", "whole")}
        return {**keep, "grids": list(self.grids), "centre": list(self.centre), "sentences": "split after . ! ?",
                "model": model.model if model else None, "pretrained": model.pretrained if model else None}


