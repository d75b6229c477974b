"""synthdense's compositional variant (``--dataset synthdense --task choice``): option-choice items with known ground
truth, made from the test split's scenes, so the choice task runs (and is tested) offline.

Each test image gets up to one item of each kind, a true caption (``positive``) and a false one (``negative``)
made from the scene's own objects and geometry (:func:`scene_items`):

- ``swap-att``: two objects' colours swapped (``a red circle and a blue square`` / ``a blue circle and a red
  square``), only where neither swapped pair is in the scene;
- ``swap-rel``: the two sides of a spatial relation swapped (``the red circle is above the blue square`` / ``the
  blue square is above the red circle``), the relation read from the objects' grid rows (else columns);
- ``replace-obj``: one object's shape replaced by a shape the scene has in no object of that colour;
- ``reorder``: an object's phrase (``a large red circle in the top left corner``) with its words shuffled
  (a seeded permutation that differs from it).

Scored like SugarCrepe: right iff ``s(I, positive) > s(I, negative)`` (ties wrong). Protocols: one per kind (micro)
and ``compositional``, all four, macro by kind. Items are a pure function of the config (its seed, the scenes)
and are made in memory each load; the images are the test split's files.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from hnbench.data.benchmarks.protocol import LoadContext
from hnbench.data.choices import ChoiceBuilder, ChoiceSet, choice_protocol, image_ref
from hnbench.data.synthdense import CELLS, SHAPES, SynthDenseConfig, generate_synthdense
from hnbench.data.synthdense_loader import CHOICE_PROTOCOLS, synthdense_dir
from hnbench.errors import ConfigError, DataError
from hnbench.metrics.choice import Aggregation, Scoring

__all__ = ["KINDS", "PROTOCOLS", "load_synthdense_choices", "scene_items"]

PROTOCOLS = CHOICE_PROTOCOLS  # "compositional" (all kinds), then one per kind
KINDS = CHOICE_PROTOCOLS[1:]
ROLES = ("positive", "negative")
SPLIT = "test"
_CELL_WORDS = {c: c.replace("-", " ") for c in CELLS}


def _a(phrase: str) -> str:
    return ("an " if phrase[0] in "aeiou" else "a ") + phrase


def _name(o: dict[str, Any]) -> str:
    return f"{o['colour']} {o['shape']}"


def scene_items(scene: dict[str, Any], rng: np.random.Generator) -> dict[str, tuple[str, str]]:
    """``{kind: (positive, negative)}`` of one scene (a kind is left out where the scene cannot give it)."""
    objs = list(scene["objects"])
    pairs = {(o["colour"], o["shape"]) for o in objs}
    order = [objs[int(i)] for i in rng.permutation(len(objs))]
    out: dict[str, tuple[str, str]] = {}
    for a in order:
        for b in order:
            if a is b or a["colour"] == b["colour"] or a["shape"] == b["shape"]:
                continue
            if (b["colour"], a["shape"]) in pairs or (a["colour"], b["shape"]) in pairs:
                continue
            out["swap-att"] = (f"{_a(_name(a))} and {_a(_name(b))}",
                               f"{_a(b['colour'] + ' ' + a['shape'])} and {_a(a['colour'] + ' ' + b['shape'])}")
            break
        if "swap-att" in out:
            break
    for a in order:
        for b in order:
            (ra, ca), (rb, cb) = divmod(CELLS.index(a["position"]), 3), divmod(CELLS.index(b["position"]), 3)
            rel = "above" if ra < rb else "to the left of" if ra == rb and ca < cb else None
            if a is b or rel is None:
                continue
            out["swap-rel"] = (f"the {_name(a)} is {rel} the {_name(b)}", f"the {_name(b)} is {rel} the {_name(a)}")
            break
        if "swap-rel" in out:
            break
    for a in order:
        other = [s for s in SHAPES if (a["colour"], s) not in pairs]
        if other:
            s = other[int(rng.integers(len(other)))]
            out["replace-obj"] = (_a(_name(a)), _a(f"{a['colour']} {s}"))
            break
    a = order[0]
    phrase = f"{_a(a['size'] + ' ' + _name(a))} in the {_CELL_WORDS[a['position']]}"
    words = phrase.split(" ")
    for _ in range(20):
        shuffled = " ".join(words[int(i)] for i in rng.permutation(len(words)))
        if shuffled != phrase:
            out["reorder"] = (phrase, shuffled)
            break
    return out


def _protocol(name: str) -> Any:
    if name not in PROTOCOLS:
        raise ConfigError(f"synthdense's compositional protocols are {', '.join(PROTOCOLS)}, not {name!r}")
    agg = Aggregation("kind") if name == "compositional" else Aggregation()
    scoring = Scoring("option", ROLES, "positive", "strict_gt", agg)
    kinds = KINDS if name == "compositional" else (name,)
    return choice_protocol(name, "", scoring, {}, f"synthdense test scenes: {', '.join(kinds)} items, right iff "
                           "s(I, positive) > s(I, negative); " + agg.describe(), breakdown=("kind",)), kinds


def load_synthdense_choices(data_root: str | None = None, protocol: str | None = None, split: str | None = None,
                            skip_invalid: bool = False, config: SynthDenseConfig | None = None,
                            progress: bool = False, allow_outside_paths: bool = False,
                            **overrides: Any) -> ChoiceSet:
    """The compositional variant's items under ``protocol`` (generating synthdense on first use, as
    :func:`hnbench.data.synthdense_loader.load_synthdense`; ``overrides``: config fields)."""
    proto, kinds = _protocol(protocol or split or "compositional")
    config = config or SynthDenseConfig(**overrides)
    if SPLIT not in config.n_families or not config.n_families[SPLIT]:
        raise ConfigError(f"synthdense's compositional variant is made from its {SPLIT} split, which this config has "
                          "no families in")
    root = generate_synthdense(synthdense_dir(config, data_root), config, progress=progress)
    folder = root / SPLIT
    ctx = LoadContext("synthdense", skip_invalid=skip_invalid, allow_outside_paths=allow_outside_paths)
    b = ChoiceBuilder("synthdense", ("image",), ROLES, ctx)
    meta_file = folder / "metadata.jsonl"
    try:
        rows = [json.loads(line) for line in meta_file.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, ValueError) as e:
        raise DataError(f"synthdense: {meta_file} is not readable ({e})") from None
    for row in rows:
        seed = [config.seed, *row["id"].encode()]
        items = scene_items(row["scene"], np.random.default_rng(seed))
        ref = image_ref(folder, folder, row["file_name"], row["id"], ctx)
        for kind in kinds:
            if kind in items:
                b.add(f"{row['id']}/{kind}", [ref], list(items[kind]), kind, {"kind": kind})
    ds = b.build(proto, folder)
    ds.meta.update(benchmark="synthdense", generator_fingerprint=config.fingerprint(), root=str(root),
                   kinds=list(kinds),
                   count_check={"status": "generated (no published count)", "loaded": ds.parts()})
    return ds

