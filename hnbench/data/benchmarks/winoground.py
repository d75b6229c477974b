"""Winoground (Meta AI; gated on the Hugging Face Hub, research-only licence): two images, two captions of the same
words in another order; caption k describes image k.

Two release layouts of ``facebook/winoground`` are read, whichever the data root holds:

- the current one: ``data/test-*.parquet`` (or ``*.parquet`` at the root), columns ``id``, ``image_0``,
  ``image_1`` (Hugging Face ``Image``: ``{bytes, path}``), ``caption_0``, ``caption_1``, ``tag``,
  ``secondary_tag``, ``num_main_preds``, ``collapsed_tag``;
- the original one: ``data/examples.jsonl`` (one example a line, ``image_0``/``image_1`` image *names*) and
  ``data/images/<name>.png`` (``images.zip`` unpacked; the repository's old loading script ``winoground.py`` joins
  ``images/`` + name + ``.png``).

Scored by :func:`hnbench.metrics.choice.winoground_outcomes`: text, image and group scores (group the headline), strict
``>`` (``official``) or CLIP_benchmark's and MTEB's argmax (``mteb``). hnbench never downloads it: accept the
terms on the Hub and fetch it with your own token.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hnbench.data.benchmarks.protocol import LoadContext
from hnbench.data.benchmarks.spec import BenchmarkSpec, Resource
from hnbench.data.choices import ChoiceBuilder, ChoiceProtocol, JoinedImages, choice_protocol, image_ref
from hnbench.errors import DataError
from hnbench.io import Problems, read_rows
from hnbench.metrics.choice import Scoring

HF_REPO = "facebook/winoground"
N_EXAMPLES = 400
FIELDS = ("id", "image_0", "image_1", "caption_0", "caption_1", "tag", "secondary_tag", "num_main_preds",
          "collapsed_tag")
TAGS = ("tag", "secondary_tag", "collapsed_tag")
IMAGE_ROLES = ("image_0", "image_1")
TEXT_ROLES = ("caption_0", "caption_1")
GATED = (f"gated on the Hub: accept the conditions at https://huggingface.co/datasets/{HF_REPO} with your account, "
         f"then fetch it with your own token (huggingface-cli login; huggingface-cli download {HF_REPO} "
         "--repo-type dataset --local-dir DIR) and pass --data-root DIR")


def _layout(root: Path) -> tuple[str, list[Path]]:
    """``("parquet", files)`` or ``("jsonl", [examples.jsonl])``: the layout under ``root``, parquet first."""
    files = sorted((root / "data").glob("test-*.parquet")) or sorted(root.glob("*.parquet"))
    if files:
        return "parquet", files
    if (root / "data" / "examples.jsonl").is_file():
        return "jsonl", [root / "data" / "examples.jsonl"]
    raise DataError(f"winoground: neither data/test-*.parquet nor data/examples.jsonl (with data/images/) under "
                    f"{root}; Winoground is {GATED}")


def _rows_parquet(files: list[Path], b: ChoiceBuilder) -> tuple[list[dict[str, Any]], list[str], JoinedImages]:
    """The examples of the parquet layout (images not decoded: read per row when encoding) and their images."""
    import datasets
    from hnbench.data.base import HFImages

    quiet = not b.ctx.progress and not datasets.are_progress_bars_disabled()
    if quiet:  # datasets' "Generating train split" bar: only where hnbench shows progress
        datasets.disable_progress_bars()
    try:
        ds = datasets.load_dataset("parquet", data_files=[str(f) for f in files], split="train")
    finally:
        if quiet:
            datasets.enable_progress_bars()
    missing = [f for f in FIELDS if f not in ds.column_names]
    if missing:
        raise DataError(f"winoground: {files[0]} has no column {', '.join(map(repr, missing))} (the release's columns: "
                        f"{', '.join(FIELDS)})")
    for f in files:
        b.file(f, None, f"huggingface.co/datasets/{HF_REPO}, {f.name}")
    rows = ds.remove_columns(list(IMAGE_ROLES)).to_list()
    absent = {col: [i for i, x in enumerate(_image_present(ds, col)) if not x] for col in IMAGE_ROLES}
    where = [f"{files[0].name} row {i}" for i in range(len(rows))]
    for col, bad in absent.items():
        for i in bad:
            b.invalid(where[i], f"no {col} image (an empty cell)", "missing image")
            rows[i] = {}
    ids = [str(r.get("id", i)) for i, r in enumerate(rows)]
    sources = [HFImages(ds, col, [f"ex_{x}_img_{k}" for x in ids]) for k, col in enumerate(IMAGE_ROLES)]
    return rows, where, JoinedImages([(src, i) for i in range(len(rows)) for src in sources])


def _image_present(ds: Any, column: str) -> list[bool]:
    """Whether each row's ``column`` holds an image (bytes or a path), read from the Arrow column (no decoding)."""
    table = ds.data.table if hasattr(ds.data, "table") else ds.data
    out: list[bool] = []
    for chunk in table.column(column).chunks:
        for value in chunk.to_pylist():
            out.append(isinstance(value, dict) and bool(value.get("bytes") or value.get("path")))
    return out


def read_winoground(root: Path, proto: ChoiceProtocol, ctx: LoadContext) -> ChoiceBuilder:
    """Winoground's 400 examples from either layout (see the module); refused (one line): a missing field, a
    duplicate id, two identical captions, an image the example names that is not there, ≠ 400 examples."""
    layout, files = _layout(root)
    if layout == "parquet":
        b = ChoiceBuilder(ctx.name, IMAGE_ROLES, TEXT_ROLES, ctx)
        rows, where, source = _rows_parquet(files, b)
        b.source = source
        positions: list[tuple[Any, ...]] = [(2 * i, 2 * i + 1) for i in range(len(rows))]
    else:
        b = ChoiceBuilder(ctx.name, IMAGE_ROLES, TEXT_ROLES, ctx)
        b.file(files[0], None, f"huggingface.co/datasets/{HF_REPO}, data/examples.jsonl")
        problems = Problems(str(files[0]))
        rows, lines = read_rows(files[0], problems)
        problems.check()
        where = [f"{files[0].name}:{n}" for n in lines]
        positions = []
        for i, r in enumerate(rows):
            names = [r.get(k) for k in IMAGE_ROLES]
            positions.append(tuple(image_ref(root, root / "data" / "images", f"{n}.png", where[i], ctx)
                                   if isinstance(n, str) and n else None for n in names))
    seen: dict[Any, str] = {}
    needed = FIELDS if layout == "jsonl" else [f for f in FIELDS if f not in IMAGE_ROLES]  # parquet: image columns
    for i, r in enumerate(rows):
        if not r:
            continue  # reported above (an image cell without an image)
        lacking = [f for f in needed if f not in r]
        if lacking:
            b.refuse(where[i], f"no {', '.join(map(repr, lacking))} (each example has {', '.join(FIELDS)})")
            continue
        rid = r["id"]
        if isinstance(rid, bool) or not isinstance(rid, int):
            b.refuse(where[i], f"id {rid!r} is not a number")
            continue
        if rid in seen:
            b.refuse(where[i], f"id {rid} again (first at {seen[rid]})")
            continue
        seen[rid] = where[i]
        texts = [b.check_text(where[i], r, k) for k in TEXT_ROLES]
        if texts[0] is None or texts[1] is None:
            continue
        if texts[0] == texts[1]:
            b.invalid(where[i], "caption_0 equals caption_1", "identical captions")
            continue
        if any(p is None for p in positions[i]):
            b.invalid(where[i], "no image name in image_0 / image_1", "missing field")
            continue
        tags = {t: "" if r[t] is None else str(r[t]) for t in TAGS}
        b.add(f"ex_{rid}", list(positions[i]), [texts[0], texts[1]], "examples",
              {**tags, "num_main_preds": str(r["num_main_preds"])})
    b.meta["layout"] = layout
    return b


_OFFICIAL = ("text score = s(C0,I0) > s(C1,I0) ∧ s(C1,I1) > s(C0,I1); image score = s(C0,I0) > s(C0,I1) ∧ "
             "s(C1,I1) > s(C1,I0); group = text ∧ image")

SPEC = BenchmarkSpec(
    name="winoground",
    title="Winoground: probing vision and language models for visio-linguistic compositionality",
    publisher="Meta AI (facebook/winoground); images from Getty Images",
    homepage=f"https://huggingface.co/datasets/{HF_REPO}",
    license="research use only (license_agreement.txt in the gated repository); never bundled",
    # As the dataset card and its old loading script give it.
    citation="""@inproceedings{thrush_and_ross2022winoground,
  author = {Tristan Thrush and Ryan Jiang and Max Bartolo and Amanpreet Singh and Adina Williams and Douwe Kiela and Candace Ross},
  title = {Winoground: Probing vision and language models for visio-linguistic compositionality},
  booktitle = {CVPR},
  year = 2022,
}""",
    layout="data/test-*.parquet (or a parquet at the root), or data/examples.jsonl with data/images/<name>.png",
    protocols=(
        choice_protocol("official", "hnbench.data.benchmarks.winoground:read_winoground",
                        Scoring("winoground", tie_rule="strict_gt"), {"examples": N_EXAMPLES},
                        f"the paper's scores, strict > (ties wrong): {_OFFICIAL}; group is the headline"),
        choice_protocol("mteb", "hnbench.data.benchmarks.winoground:read_winoground",
                        Scoring("winoground", tie_rule="argmax_first"), {"examples": N_EXAMPLES},
                        "CLIP_benchmark's and MTEB's: argmax over the 2×2 matrix's rows (text) and columns (image), "
                        "a tie on image 0 / caption 0 right, on image 1 / caption 1 wrong; MTEB's accuracy = group",
                        official=False),
    ),
    default_protocol="official",
    resources=(Resource("winoground", hf_repo=HF_REPO, manual=GATED),),
    notes="Gated: hnbench never downloads it; fetch it with your own Hub token.",
    task="choice",
)
