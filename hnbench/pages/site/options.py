"""``hnbench site``'s options, declared once: the flags and :func:`~hnbench.pages.site.build.build_site`'s keywords
are generated from them. Light (no pandas): the CLI imports it to build its parser."""

from __future__ import annotations

from dataclasses import dataclass

from hnbench.errors import ConfigError
from hnbench.results.record import PER_QUERY_TOP
from hnbench.settings import check_declared, option
from hnbench.validate import check_output_dir

__all__ = ["MANIFEST", "SiteSettings"]

MANIFEST = "site.json"  # the site's own record in its folder: every file written, with its inputs' fingerprint


@dataclass
class SiteSettings:
    """What :func:`hnbench.pages.site.build.build_site` writes (everything but the result folders)."""

    output: str | None = option(None, group="site", metavar="DIR",
                                help=f"the folder to write the site into: new, empty, or one hnbench site wrote (its "
                                     f"{MANIFEST} lists its files; a rebuild rewrites only the pages whose inputs "
                                     "changed)")
    baseline: str | None = option(None, group="site", metavar="LABEL",
                                  help="a model label (or glob) the boards show deltas against, with a * where the "
                                       "paired 95% bootstrap interval excludes zero, in each table that holds "
                                       "exactly one such row (as hnbench leaderboard --baseline)")
    limit: int = option(50, group="site", minimum=0,
                        help="worst queries per direction on each failure browser page (0: no failure browsers)")
    top: int = option(5, group="site", minimum=1,
                      help=f"retrieved items shown per query on the failure browser pages (at most {PER_QUERY_TOP})")
    overwrite: bool = option(False, group="site",
                             help="write into an --output that holds files hnbench site did not write (they are "
                                  "left in place; the site's own files are replaced)")

    def validate(self) -> None:
        """Every option, before any result is read (one line each)."""
        check_declared(self)
        if not self.output or not str(self.output).strip():
            raise ConfigError("--output DIR is needed: the folder the site is written to")
        if self.top > PER_QUERY_TOP:
            raise ConfigError(f"--top must be between 1 and {PER_QUERY_TOP}, got {self.top}")
        check_output_dir(self.output)
