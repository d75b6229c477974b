"""``hnbench export``'s options, declared once (flags and the API's keywords are generated from them), and the
formats it writes, each registered by name with what it is; light: no numpy, no pandas, so the CLI imports it."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hnbench.errors import ConfigError
from hnbench.registry import Registry
from hnbench.settings import check_declared, option
from hnbench.validate import check_output_dir

__all__ = ["EXPORT_FORMATS", "ExportSettings", "MANIFEST"]

MANIFEST = "hnbench-export.json"  # the export's own record in its folder (inputs, files, values, what was left out)

#: format name → its writer (``build(sources, settings) -> Built``, :mod:`hnbench.publish.sources`)
EXPORT_FORMATS: Registry[Callable[..., Any]] = Registry("export format")
EXPORT_FORMATS.register("hf-model-index", "hnbench.publish.hf_model_index:build",
                        help="a Hugging Face model card's model-index: README.md front matter, a card per model")
EXPORT_FORMATS.register("hf-eval-results", "hnbench.publish.hf_eval_results:build",
                        help="the Hub's .eval_results/*.yaml files, for benchmarks registered as Hub Benchmarks")
EXPORT_FORMATS.register("clip-benchmark", "hnbench.publish.clip_benchmark:build",
                        help="CLIP_benchmark's per-run JSON files and its build CSV, benchmark.csv")
EXPORT_FORMATS.register("mteb", "hnbench.publish.mteb:build",
                        help="the MTEB results-repository layout: results/ORG__MODEL/REVISION/TASK.json and "
                             "model_meta.json")
EXPORT_FORMATS.register("open-clip-csv", "hnbench.publish.open_clip_csv:build",
                        help="a CSV in open_clip's retrieval-results layout: Flickr30k and COCO Karpathy test")

# a model name as the Hub spells one (ORG/NAME) or a display name: printable, no path tricks
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._()+@-]{0,95}(/[A-Za-z0-9][A-Za-z0-9 ._()+@-]{0,95})?")
_URL = re.compile(r"https?://[^\s\"'<>\\]+")


@dataclass
class ExportSettings:
    """What :func:`hnbench.publish.export` writes and how it names things (everything but the result files)."""

    format: str | None = option(None, choices=EXPORT_FORMATS, group="export",
                                help="the target format: {choices}")
    output: str | None = option(None, group="export", metavar="DIR",
                                help="the folder to write into: new, empty, or one an earlier export wrote (its "
                                     f"{MANIFEST} lists its files); nothing else is ever replaced")
    model_name: str | None = option(None, group="export", metavar="NAME",
                                    help="the model's published name (ORG/NAME on the Hub; the weights tag in "
                                         "CLIP_benchmark and open_clip rows), for an export of one model; needed "
                                         "when its weights are a local file, whose path is never written (default: "
                                         "'ARCH (TAG)'; MTEB: ORG/NAME, default 'ARCH/TAG')")
    source_url: str | None = option(None, group="export", metavar="URL",
                                    help="where the result files are published (a model card's source.url, the "
                                         ".eval_results source; without it no source is written)")
    card: str | None = option(None, group="export", metavar="README.md",
                              help="--format hf-model-index: an existing model card to update in place: only its "
                                   "front matter's model-index changes, the rest of the file stays byte-identical "
                                   "(default: a new README.md in --output)")
    overwrite: bool = option(False, group="export",
                             help="replace an export in --output made from other inputs (a rerun from the same "
                                  "inputs replaces its own files without it)")

    def validate(self) -> None:
        """Every option, before any result is read (one line each)."""
        if self.format is None:
            raise ConfigError(f"--format FORMAT is needed: one of {', '.join(EXPORT_FORMATS.names())}")
        if self.format not in EXPORT_FORMATS:
            raise EXPORT_FORMATS.error(str(self.format))
        check_declared(self)
        if not self.output or not str(self.output).strip():
            raise ConfigError("--output DIR is needed: the folder the export is written to")
        check_output_dir(self.output)
        if self.model_name is not None and (not _NAME.fullmatch(self.model_name) or ".." in self.model_name):
            raise ConfigError(f"--model-name {self.model_name!r}: a name is letters, digits, spaces and ._()+@- (at "
                              "most 96), optionally ORG/NAME; no other '/'")
        if self.format == "mteb" and self.model_name is not None and "/" not in self.model_name:
            raise ConfigError(f"--format mteb: --model-name {self.model_name!r} must be ORG/NAME, as MTEB names a model "
                              "(its ModelMeta refuses other names)")
        if self.source_url is not None and not _URL.fullmatch(self.source_url):
            raise ConfigError(f"--source-url {self.source_url!r} is not an http(s) URL without spaces or quotes")
        if self.card is not None:
            if self.format != "hf-model-index":
                raise ConfigError(f"--card updates a model card: it goes with --format hf-model-index, not "
                                  f"{self.format}")
            card = Path(self.card)
            if not card.is_file():
                raise ConfigError(f"--card {card}: no such file (the model card README.md to update; leave --card "
                                  "out for a new card in --output)")
            out = Path(os.path.abspath(self.output))
            if out in Path(os.path.abspath(card)).parents:
                raise ConfigError(f"--card {card} lies inside --output {self.output}: keep the card to update "
                                  "outside the export's folder")
