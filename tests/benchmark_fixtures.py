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


# --- DCI: densely_captioned_images/{annotations/, complete/, photos/, splits.json} -------------------
def dci_name(i: int) -> str:
    """DCI names an annotation after its crowdsourcing unit (``<unit id>-data.json``), never after its photo.
    Unit ids fall as ``i`` rises, so sorted file order (TULIP's) is the reverse of photo order."""
    return f"{113029 + 11 * (50 - i)}-data.json"


def dci_annotation(i: int, extra: str | None = None) -> dict:
    """What ``annotations/`` holds: no ``summaries`` / ``negatives`` (those are in ``complete/``)."""
    return {"image": f"sa_{1000 + i}.jpg", "short_caption": f"Short caption {i}.",
            "extra_caption": f"Extra caption {i}. It has two sentences" if extra is None else extra,
            "mask_data": {"0": {"idx": 0, "label": "thing", "caption": "a thing", "mask_quality": 0,
                                "parent": -1, "requirements": [], "bounds": [[0, 0], [8, 8]], "area": 64}},
            "mask_keys": ["0"]}


def build_dci(root: Path, n: int = 8, empty_extra: tuple[int, ...] = (3,), blank_extra: tuple[int, ...] = (5,),
              unsplit: tuple[int, ...] = (8,)) -> Path:
    """Annotations ``0..n-1`` named in a splits.json (train/valid/test in that order) plus ``unsplit`` ones
    in no split; ``empty_extra`` have ``extra_caption == ""``, ``blank_extra`` a whitespace-only one.
    ``complete/`` beside ``annotations/`` repeats the split ones with summaries, negatives, clip_scores."""
    base = root / "densely_captioned_images"
    (base / "annotations").mkdir(parents=True, exist_ok=True)
    (base / "complete").mkdir(parents=True, exist_ok=True)
    for i in [*range(n), *unsplit]:
        ann = dci_annotation(i, "" if i in empty_extra else " \n  " if i in blank_extra else None)
        (base / "annotations" / dci_name(i)).write_text(json.dumps(ann))
        jpeg(base / "photos" / ann["image"], i)
        if i < n:
            full = {**ann, "summaries": {"base": [f"Summary {i}."]}, "negatives": {"base": {"swaps": [f"Neg {i}."]}},
                    "clip_scores": {"base": 0.3}}
            (base / "complete" / dci_name(i)).write_text(json.dumps(full))
    names = [dci_name(i) for i in range(n)]
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
def urban_caption(k: int) -> str:
    return f"An urban street scene number {k} with a red car."


def build_urban1k(root: Path, n: int = 11, blank_first: tuple[int, ...] = (5,)) -> Path:
    """Stems 1..n (so numeric order differs from string order); one-line caption files, odd ``k`` ending in a
    line break and even ``k`` not; ``blank_first`` files start with a blank line, as the release's 592.txt."""
    base = root / "Urban1k"
    (base / "caption").mkdir(parents=True, exist_ok=True)
    for k in range(1, n + 1):
        jpeg(base / "image" / f"{k}.jpg", k)
        text = urban_caption(k) + ("\n" if k % 2 else "")
        (base / "caption" / f"{k}.txt").write_text(("\n" if k in blank_first else "") + text)
    return base



def use_counts(monkeypatch, name: str, **counts: tuple[int, int]) -> None:
    """Swap benchmark ``name``'s spec for one whose protocols named in ``counts`` (``_`` for ``-``) expect
    (images, captions)."""
    from hnbench.data.benchmarks import BENCHMARKS

    counts = {k.replace("_", "-"): v for k, v in counts.items()}
    spec = BENCHMARKS[name]
    protos = tuple(replace(p, n_images=counts[p.name][0], n_captions=counts[p.name][1]) if p.name in counts else p
                   for p in spec.protocols)
    monkeypatch.setitem(BENCHMARKS, name, replace(spec, protocols=protos))


def eval_argv(micro_config: Path, dataset: str, root: Path, out: Path) -> list[str]:
    """``hnbench eval`` of the micro model on a benchmark replica (quiet, no workers, no intervals)."""
    return ["-q", "eval", "--dataset", dataset, "--data-root", str(root), "--model", "hnb-micro", "--model-config",
            str(micro_config), "--output", str(out), "--num-workers", "0", "--no-ci"]
