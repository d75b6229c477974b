"""``hnbench site``: one static, self-contained site of stored results (:func:`hnbench.pages.site.build.build_site`).

An index of the benchmarks, suites, models and hardness reports found; a board per benchmark and per suite (the
leaderboard's HTML tables: sortable, with intervals and, against ``--baseline``, paired marks) with bar charts of
R@1 and their intervals; a page per model (its results, its record's model block, its throughput where recorded);
each result's failure browser (``hnbench browse``'s page, where its per-query file and data are here) and the
hardness reports. Every link is relative and nothing is fetched from anywhere, so the folder can be served by any
static host or opened from disk. Built from stored files only, and incrementally: ``site.json`` records each
file's inputs, and a rebuild rewrites only the files whose inputs changed.

This package's ``__init__`` stays light (the CLI imports :mod:`.options` to build its flags); the builder loads
pandas and matplotlib when it runs.
"""
