"""Tiny copies of each benchmark's real on-disk layout (same file names, fields, columns, conventions)."""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path

from PIL import Image

from hnbench.data.benchmarks import BenchmarkSpec

PALETTE = [(220, 30, 30), (30, 200, 30), (30, 30, 220), (230, 230, 40), (140, 40, 180), (40, 220, 220),
           (240, 140, 20), (250, 250, 250), (90, 60, 20), (20, 90, 60), (200, 120, 160), (60, 60, 60)]


def jpeg(path: Path, i: int) -> Path:
    """A small JPEG, distinct per ``i``: a coloured square on a dark background."""
    path.parent.mkdir(parents=True, exist_ok=True)
    im = Image.new("RGB", (32, 32), (15, 15, 15))
    off = 2 + (i % 5) * 3
    im.paste(PALETTE[i % len(PALETTE)], (off, off, off + 14, off + 14))
    im.save(path, format="JPEG", quality=90)
    return path


def truncate(path: Path) -> None:
    """Cut a JPEG in half (PIL then fails to decode it)."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def sized(spec: BenchmarkSpec, **counts: int) -> BenchmarkSpec:
    """``spec`` with fixture-sized expected counts per protocol (``test_qual`` names ``test+qual``, ``_`` → ``-``)."""
    named = {k.replace("_qual", "+qual").replace("_", "-"): v for k, v in counts.items()}
    protos = tuple(replace(p, n_images=named[p.name], n_captions=named[p.name]) if p.name in named else p
                   for p in spec.protocols)
    return replace(spec, protocols=protos)


# --- DOCCI: docci_descriptions.jsonlines + images/ -------------------------------------------------
def build_docci(root: Path) -> list[dict]:
    """5 test, 2 qual_test, 1 qual_dev, 2 train rows, interleaved; descriptions kept raw (odd spacing)."""
    rows = []
    plan = ["test", "train", "test", "qual_test", "test", "qual_dev", "test", "qual_test", "train", "test"]
    counters: dict[str, int] = {}
    for i, split in enumerate(plan):
        k = counters[split] = counters.get(split, -1) + 1
        ex = f"{split}_{k:05d}"
        rows.append({"example_id": ex, "split": split, "image_file": f"{ex}.jpg",
                     "description": f"  A photo number {i} of a {split} scene.\nSecond line with detail {i}. ",
                     "cluster_id": "c0"})
        jpeg(root / "images" / f"{ex}.jpg", i)
    (root / "docci_descriptions.jsonlines").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


# --- DCI: densely_captioned_images/{annotations/*.json, photos/, splits.json} ----------------------
def dci_annotation(i: int, extra: str | None = None) -> dict:
    return {"image": f"sa_{1000 + i}.jpg", "short_caption": f"Short caption {i}.",
            "extra_caption": f"Extra caption {i}. It has two sentences" if extra is None else extra,
            "mask_data": {"0": {"idx": 0, "label": "thing", "caption": "a thing", "mask_quality": 0}},
            "mask_keys": ["0"], "summaries": {}, "negatives": {}}


def build_dci(root: Path, n: int = 8, empty_extra: tuple[int, ...] = (3,), odd_name: int | None = 7) -> Path:
    """``n`` annotations (``sa_<1000+i>.json``; one named ``odd_*.json`` to exercise lookup by image),
    photos, and a splits.json with train/valid/test in that order."""
    base = root / "densely_captioned_images"
    names = []
    for i in range(n):
        ann = dci_annotation(i, "" if i in empty_extra else None)
        name = f"odd_{i}.json" if i == odd_name else f"sa_{1000 + i}.json"
        (base / "annotations").mkdir(parents=True, exist_ok=True)
        (base / "annotations" / name).write_text(json.dumps(ann))
        jpeg(base / "photos" / ann["image"], i)
        names.append(name)
    cut = max(1, n - 3)
    splits = {"train": names[2:cut], "valid": names[:2], "test": names[cut:]}
    (base / "splits.json").write_text(json.dumps(splits))
    return base


def goal_list(path: Path, indices: list[int], captions: dict[int, str] | None = None) -> Path:
    """A GOAL-style list: ``filename`` with the authors' leading path, ``caption``."""
    rows = [{"filename": f"/home/authors/DCI/densely_captioned_images/photos/sa_{1000 + i}.jpg",
             "caption": (captions or {}).get(i, f"Extra caption {i}. It has two sentences")} for i in indices]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rows))
    return path


def build_long_dci_csv(root: Path, dci_base: Path) -> Path:
    """TULIP's constructor, as published: sorted annotation files, ``extra_caption``, empty ones skipped,
    written as a tab-separated dci_long.csv (``filepath``, ``title``)."""
    rows = []
    for p in sorted((dci_base / "annotations").glob("*.json")):
        ann = json.loads(p.read_text())
        if len(ann["extra_caption"]) == 0:
            continue
        rows.append({"filepath": ann["image"], "title": ann["extra_caption"]})
    with open(root / "dci_long.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["filepath", "title"], delimiter="\t")
        w.writeheader()
        w.writerows(rows)
    return root / "dci_long.csv"


# --- Urban-1K: Urban1k/image/<k>.jpg + Urban1k/caption/<k>.txt -------------------------------------
def build_urban1k(root: Path, n: int = 11) -> Path:
    """Stems 1..n (so numeric order differs from string order); two-line caption files."""
    base = root / "Urban1k"
    (base / "caption").mkdir(parents=True, exist_ok=True)
    for k in range(1, n + 1):
        jpeg(base / "image" / f"{k}.jpg", k)
        (base / "caption" / f"{k}.txt").write_text(f"An urban street scene number {k} with a red car.\n"
                                                   f"A second line that is not part of the caption {k}.\n")
    return base
