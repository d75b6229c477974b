"""The example plugin's benchmark: a release laid out as ``pairs.tsv`` (``image<TAB>caption`` per line) beside the
images, read by its own reader (:func:`read_pairs_tsv`) and caption rule (:func:`collapse_space`), one protocol in its
own protocol family."""

from __future__ import annotations

from pathlib import Path

from hnbench.data.benchmarks.protocol import LoadContext, Protocol
from hnbench.data.benchmarks.readers import Record
from hnbench.data.benchmarks.spec import BenchmarkSpec
from hnbench.errors import DataError
from hnbench.registry import CAPTION_RULES


def collapse_space(text: str) -> str:
    """The caption with every run of white space (newlines, tabs) one space, stripped."""
    return " ".join(str(text).split())


def read_pairs_tsv(root: Path, protocol: Protocol, ctx: LoadContext) -> list[Record]:
    """``root/pairs.tsv``: one ``image<TAB>caption`` line per pair; the image a path under ``root`` (never outside
    it); the caption the protocol's rule applied to the cell."""
    listing = root / "pairs.tsv"
    if not listing.is_file():
        raise DataError(f"example-pairs: {listing} not found (the release holds pairs.tsv beside the images)")
    rule, records = CAPTION_RULES.get(protocol.caption), []
    for n, line in enumerate(listing.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        image, sep, caption = line.partition("\t")
        path = (root / image).resolve()
        if not sep or not caption.strip():
            ctx.invalid(f"{listing}:{n}", "a line without a caption after its tab", "malformed line")
        elif not path.is_relative_to(root.resolve()):
            ctx.invalid(f"{listing}:{n}", f"{image} points outside the data root", "image outside the root")
        else:
            records.append((Path(image).stem, str(path), [rule(caption)]))
    return records


SPEC = BenchmarkSpec(
    name="example-pairs",
    title="Example pairs (the example plugin's benchmark)",
    publisher="the hnbench example plugin",
    homepage="https://github.com/hnbench/hnbench/tree/main/tests/plugins/example",
    license="CC0",
    citation="",
    layout="pairs.tsv (image<TAB>caption per line) beside the images it names",
    protocols=(Protocol("test", ("example-splits",), None, None, "example-pairs-tsv", "example-collapse-space",
                        "every pair of pairs.tsv, white space in captions collapsed"),),
    default_protocol="test",
)
