"""Publishing stored results: ``hnbench export RESULTS... --format FORMAT --output DIR`` and :func:`export`.

From result files only, never a live run. The formats (:data:`~hnbench.publish.options.EXPORT_FORMATS`, one
module each): ``hf-model-index`` (a model card's ``model-index``), ``hf-eval-results`` (the Hub's
``.eval_results`` files), ``clip-benchmark`` (CLIP_benchmark's per-run JSON and build CSV), ``mteb`` (the MTEB
results-repository layout) and ``open-clip-csv`` (open_clip's retrieval-results CSV); each module's docstring
gives its format, the mapping from hnbench's fields and what the target's own reader keeps.

Every exported value traces to one result file: the folder's manifest (:mod:`hnbench.publish.manifest`) records
each input's path and sha256 and each value's file, place and result field. A result a target cannot hold (a
monotonicity result, a protocol that is not the target's, a benchmark without the id it needs) is listed there
with the reason, never dropped in silence nor approximated. The same inputs give byte-identical files.

Bad input (a file that is not a result, an unknown format, an output folder holding files hnbench did not
write, a local model without ``--model-name``) is one line and nothing is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hnbench.errors import ConfigError
from hnbench.publish.options import EXPORT_FORMATS, MANIFEST, ExportSettings
from hnbench.settings import from_options

if TYPE_CHECKING:
    from hnbench.publish.sources import Built, Skip

# The readers of result files (numpy) load when :func:`export` runs: the CLI imports this package (its
# ``command`` module) to build its parser.

__all__ = ["EXPORT_FORMATS", "MANIFEST", "Export", "ExportSettings", "export"]


@dataclass
class Export:
    """What :func:`export` wrote: the folder, its manifest, the files (and the updated ``card``), how many values,
    what was not exported and why, and the notes said once."""

    output: Path
    manifest: Path
    files: list[Path]
    card: Path | None
    values: int
    results: int
    not_exported: list[Skip] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def export(results: Sequence[str | Path] | str | Path, format: str, output: str | Path, **options: Any) -> Export:
    """Export stored result files (or folders of them) as ``format`` into the folder ``output``.

    ``options`` are those of :class:`~hnbench.publish.options.ExportSettings` (``model_name``, ``source_url``,
    ``card``, ``overwrite``). Checked before any result is read: the options and the output folder (new, empty, or
    an earlier export's); then the results are read and the files made in memory; an earlier export of other
    inputs is replaced only with ``overwrite``; then everything is written, the manifest last."""
    from hnbench.publish.manifest import check_folder, check_inputs, manifest, write
    from hnbench.publish.sources import read_sources

    try:
        settings = from_options(ExportSettings, None, {**options, "format": format,
                                                       "output": None if output is None else str(output)})
    except TypeError as e:
        raise ConfigError(str(e)) from None
    settings.validate()
    assert settings.output is not None  # validate() refuses an export without one
    out = Path(settings.output)
    old = check_folder(out, settings.overwrite)
    inputs = read_sources([results] if isinstance(results, (str, Path)) else list(results), settings)
    built: Built = EXPORT_FORMATS.get(str(settings.format))(inputs.kept, settings)
    record = manifest(settings, inputs, built)
    check_inputs(out, old, record, settings.overwrite)
    path = write(out, built, record, old)
    return Export(out, path, [out / rel for rel in sorted(built.files)], built.card[0] if built.card else None,
                  len(built.values), len(inputs.all), [*inputs.skipped, *built.skipped], list(built.notes))
