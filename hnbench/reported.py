"""Published numbers as reference rows: the papers' figures, mapped onto hnbench's protocol names.

The packaged copy of ``published-results.csv`` (``hnbench/assets/``) keeps the papers' own protocol
*families*; :data:`PROTOCOL_FAMILIES`, read from the benchmark specs (each protocol declares its
families), says which hnbench protocol each family means on each benchmark, so a reported row only ever lands in a table of the matching protocol.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd

from hnbench.data.benchmarks import BENCHMARKS
from hnbench.registry import BENCHMARK_SPECS
from hnbench.validate import DEFAULT_KS

PUBLISHED_CSV = Path(__file__).parent / "assets" / "published-results.csv"



def _protocol_families() -> dict[str, dict[str, str]]:
    """Protocol family → {benchmark: hnbench protocol}, read from the benchmark specs (each
    :class:`~hnbench.data.benchmarks.Protocol` declares its families): a family's protocol on a benchmark
    is the first the spec declares with it, the one that family's published numbers were measured on
    (DCI's ``full-sentences`` and Urban-1K's ``longclip`` are zero-shot-splits variants after it)."""
    out: dict[str, dict[str, str]] = {}
    for bench in BENCHMARK_SPECS.declared():
        for proto in BENCHMARKS[bench].protocols:
            for fam in proto.families:
                out.setdefault(fam, {}).setdefault(bench, proto.name)
    return dict(sorted(out.items()))


#: protocol family (of the published CSV, and ``train``) → {benchmark: hnbench protocol name}
PROTOCOL_FAMILIES: dict[str, dict[str, str]] = _protocol_families()

#: context length of a published backbone: "ViT-L/14 248tok" → 248; no "…tok" suffix → CLIP's 77
DEFAULT_CONTEXT_LENGTH = 77

KS = DEFAULT_KS


def mapped_families(benchmark: str, protocol: str | None) -> list[str]:
    """The published protocol families a (benchmark, protocol) pair belongs to (none if unmapped)."""
    return [fam for fam, table in PROTOCOL_FAMILIES.items() if table.get(benchmark) == protocol]


def families_of(benchmark: str, protocol: str | None) -> list[str]:
    """Protocol families a (benchmark, protocol) pair belongs to; an unmapped pair is its own family."""
    return mapped_families(benchmark, protocol) or [str(protocol)]


def context_length_of(backbone: str) -> int:
    """Text context length a published backbone name states ("… 248tok"), else 77."""
    m = re.search(r"(\d+)\s*tok", backbone)
    return int(m.group(1)) if m else DEFAULT_CONTEXT_LENGTH


def load_published(path: str | Path = PUBLISHED_CSV) -> pd.DataFrame:
    """The published CSV as read (one row per source, method, benchmark and direction)."""
    return pd.read_csv(path, keep_default_na=False, na_values=[""])


def reported_rows(path: str | Path = PUBLISHED_CSV) -> pd.DataFrame:
    """Reference rows in the leaderboard's row format: one per (source, method, backbone, benchmark).

    Directions are pivoted into ``t2i R@K`` / ``i2t R@K`` columns; the family is replaced by the
    hnbench protocol name through :data:`PROTOCOL_FAMILIES` (unknown families raise ``KeyError``).
    """
    raw = load_published(path)
    rows: dict[tuple[str, ...], dict[str, Any]] = {}
    for rec in raw.to_dict("records"):
        protocol = PROTOCOL_FAMILIES[rec["protocol"]][rec["benchmark"]]
        key = (rec["source"], rec["method"], rec["backbone"], rec["benchmark"], protocol)
        row = rows.setdefault(key, {
            "kind": "reported", "model": rec["method"], "identity": f"reported:{rec['source']}:{rec['method']}:"
            f"{rec['backbone']}", "arch": rec["backbone"], "weights": rec["training"], "fingerprint": "",
            "benchmark": rec["benchmark"], "protocol": protocol, "family": rec["protocol"],
            "context_length": context_length_of(rec["backbone"]), "search": "exact", "data_fingerprint": "",
            "n_images": None, "hnbench_version": "", "created": "", "path": "", "source": rec["source"],
            "note": ""})
        for k in KS:
            row[f"{rec['direction']} R@{k}"] = rec[f"R@{k}"]
        if isinstance(rec["note"], str) and rec["note"] and rec["note"] not in row["note"]:
            row["note"] = "; ".join(filter(None, [row["note"], rec["note"]]))
    table: pd.DataFrame = pd.DataFrame(list(rows.values()))  # (the stubs' overloads give Any for dict rows)
    return table
