"""One-off measurement of the exact search backends on this machine, for ``--backend auto`` on CPU.

The faster of torch and faiss depends on the CPU, the BLAS, the thread counts and the gallery size,
so ``auto`` does not assume: the first time it meets a machine it times, at a few gallery sizes,
the seconds per query of faiss's list search, of the full-row count faiss needs for queries whose
positive ranks below its list, and of the torch path (~30 s in all, once), and stores them in
``<hnbench cache>/search-calibration.json`` keyed by the machine (architecture, CPU model, cores
usable), the device, the torch and faiss thread counts and the torch / faiss / numpy versions.
A later search takes the costs measured at the calibrated gallery size nearest its own (log scale).
A gallery above ``LARGE_FROM`` items also calibrates ``LARGE`` (once more, ~30 s, ~1.3 GB), and one
above ``LARGE`` grows each cost from the two largest sizes as a power of the size (at least linear):
torch's cost per query grows faster than faiss's there (its query chunk shrinks as 1/M, so it
streams the gallery more often), which 1k-32k alone did not show (benchmarks/README.md, issue 14).
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
from hnbench.io import atomic_write_bytes, cache_dir

__all__ = ["FILE", "LARGE", "LARGE_FROM", "SIZES", "at_size", "costs", "machine_key"]

log = logging.getLogger(__name__)

FILE = "search-calibration.json"
SIZES = (1_000, 8_000, 32_000)  # calibrated gallery sizes
LARGE, LARGE_FROM = 256_000, 64_000  # also calibrated LARGE, once a gallery above LARGE_FROM is searched
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
    """Seconds per query {faiss, count, torch} at ``n_gallery`` (see :func:`at_size`), measured (with
    ``measure(m, n_queries, dim)``) and stored the first time on this machine (``LARGE``: the first time
    a gallery above ``LARGE_FROM`` is searched)."""
    key = machine_key(device)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    path = cache_dir() / FILE
    try:
        table = json.loads(path.read_text())
    except (OSError, ValueError):
        table = {}
    entry = table.get(digest) if isinstance(table, dict) else None
    need = [*SIZES, LARGE] if n_gallery > LARGE_FROM else list(SIZES)
    stored = entry.get("costs") if isinstance(entry, dict) else None
    have: dict[str, Any] = stored if isinstance(stored, dict) and {str(s) for s in SIZES} <= set(stored) else {}
    if any(str(s) not in have for s in need):
        todo = [s for s in need if str(s) not in have]
        log.info("calibrating the search backends on this machine once (%s); stored in %s",
                 ", ".join(f"{s:,}" for s in todo), path)
        have = {**have, **{str(s): measure(s, min(QUERIES, s), DIM) for s in todo}}
        entry = {"key": key, "created": time.strftime("%Y-%m-%dT%H:%M:%S"), "costs": have}
        table = {**(table if isinstance(table, dict) else {}), digest: entry}
        try:
            atomic_write_bytes(path, (json.dumps(table, indent=1) + "\n").encode())
        except OSError as e:  # unwritable cache: measured again next time
            log.warning("cannot store the search calibration at %s: %s", path, e)
    return at_size(n_gallery, {int(s): c for s, c in have.items() if int(s) in need})


def at_size(n_gallery: int, table: dict[int, dict[str, float]]) -> dict[str, float]:
    """Costs at the calibrated size nearest ``n_gallery`` (log scale); beyond the largest, each cost grown
    from the two largest sizes as a power of the size, the exponent clipped to [1, 2] (every gallery
    item is scored for every query, so at least linear; a steeper measured slope is kept)."""
    sizes = sorted(table)
    if n_gallery <= sizes[-1] or len(sizes) < 2:
        nearest = min(sizes, key=lambda s: abs(math.log(s) - math.log(max(1, n_gallery))))
        return dict(table[nearest])
    m1, m2 = sizes[-2], sizes[-1]
    out: dict[str, float] = {}
    for name, c2 in table[m2].items():
        c1 = table[m1].get(name, 0.0)
        slope = math.log(c2 / c1) / math.log(m2 / m1) if c1 > 0 and c2 > 0 else 1.0
        out[name] = c2 * (n_gallery / m2) ** min(2.0, max(1.0, slope))
    return out
