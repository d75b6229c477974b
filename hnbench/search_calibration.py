"""One-off measurement of the exact search backends on this machine, for ``--backend auto`` on CPU.

The faster of torch and faiss depends on the CPU, the BLAS, the thread counts and the gallery size,
so ``auto`` does not assume: the first time it meets a machine it times, at a few gallery sizes,
the seconds per query of faiss's list search, of the full-row count faiss needs for queries whose
positive ranks below its list, and of the torch path (~30 s in all, once), and stores them in
``<hnbench cache>/search-calibration.json`` keyed by the machine (architecture, CPU model, cores
usable), the device, the torch and faiss thread counts and the torch / faiss / numpy versions.
A later search takes the costs measured at the calibrated gallery size nearest its own (log scale).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import platform
import time
from collections.abc import Callable
from typing import Any

from hnbench._version import package_version
from hnbench.io import atomic_write_bytes
from hnbench.paths import cache_dir

__all__ = ["FILE", "SIZES", "costs", "machine_key"]

log = logging.getLogger(__name__)

FILE = "search-calibration.json"
SIZES = (1_000, 8_000, 32_000)  # calibrated gallery sizes; larger galleries use the largest
QUERIES = 4096  # faiss's query block: with fewer queries per call its cost per query rises up to 6x
DIM = 512
FORMAT = 1


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def machine_key(device: str = "cpu") -> dict[str, Any]:
    """What the measured costs depend on."""
    import faiss
    import torch

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"format": FORMAT, "machine": platform.machine(), "cpu": _cpu_model(), "cores": cores, "device": device,
            "torch_threads": torch.get_num_threads(), "faiss_threads": faiss.omp_get_max_threads(),
            "torch": torch.__version__, "faiss": getattr(faiss, "__version__", None), "numpy": package_version("numpy"),
            "sizes": list(SIZES), "queries": QUERIES, "dim": DIM}


def costs(n_gallery: int, measure: Callable[[int, int, int], dict[str, float]], *,
          device: str = "cpu") -> dict[str, float]:
    """Seconds per query {faiss, count, torch} at the calibrated size nearest ``n_gallery``,
    measured (with ``measure(m, n_queries, dim)``) and stored the first time on this machine."""
    key = machine_key(device)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    path = cache_dir() / FILE
    try:
        table = json.loads(path.read_text())
    except (OSError, ValueError):
        table = {}
    entry = table.get(digest) if isinstance(table, dict) else None
    if not isinstance(entry, dict) or set(entry.get("costs", {})) != {str(s) for s in SIZES}:
        log.info("calibrating the search backends on this machine once (%s); stored in %s",
                 ", ".join(f"{s:,}" for s in SIZES), path)
        entry = {"key": key, "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
                 "costs": {str(s): measure(s, min(QUERIES, s), DIM) for s in SIZES}}
        table = {**(table if isinstance(table, dict) else {}), digest: entry}
        try:
            atomic_write_bytes(path, (json.dumps(table, indent=1) + "\n").encode())
        except OSError as e:  # unwritable cache: measured again next time
            log.warning("cannot store the search calibration at %s: %s", path, e)
    nearest = min(SIZES, key=lambda s: abs(math.log(s) - math.log(max(1, n_gallery))))
    return dict(entry["costs"][str(nearest)])
