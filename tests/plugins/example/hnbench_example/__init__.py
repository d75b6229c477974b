"""An hnbench plugin, outside the package: importing it registers one task, one benchmark (with its own release reader
and caption rule), one model family, one suite and one training objective in hnbench's registries, which read them
live. The plain ``hnbench`` command imports it through the entry point its ``pyproject.toml`` declares in the group
``hnbench.plugins`` (or when ``HNBENCH_PLUGINS=hnbench_example``); each entry is a lazy ``"module:attr"`` target, so
registering imports nothing heavy.
"""

from hnbench.registry import BENCHMARK_SPECS, CAPTION_RULES, MODELS, OBJECTIVES, READERS, SUITES, TASKS

# a benchmark: its release layout (pairs.tsv beside images/) read by its own reader, its captions by its own rule
READERS.register("example-pairs-tsv", "hnbench_example.benchmark:read_pairs_tsv",
                 help="pairs.tsv: one 'image<TAB>caption' line per pair, images under the data root")
CAPTION_RULES.register("example-collapse-space", "hnbench_example.benchmark:collapse_space",
                       help="the caption with its runs of white space collapsed to one space")
BENCHMARK_SPECS.register("example-pairs", "hnbench_example.benchmark:SPEC",
                         help="the example plugin's image–caption pairs (pairs.tsv + images/)")

# a task: how far each image's own caption scores above the best other caption
# (with an option of its own: --example-margin-top)
TASKS.register("example-margin", "hnbench_example.task:TASK", options="hnbench_example.task:MarginOptions",
               help="the example plugin's margin: own caption's cosine minus the best other caption's")

# a model family: a colour histogram against the colour words of each caption (example:colour)
MODELS.register("example", "hnbench_example.family:FAMILY", prefixes=("example:",),
                help="the example plugin's colour-histogram encoder: example:colour")

# a suite: the benchmark by retrieval and by the plugin's task, one table
SUITES.register("example-suite", "hnbench.evaluation.suites:fixed",
                help="the example plugin's benchmark, by retrieval and by its margin task",
                entries=(("example-pairs", "test", "retrieval"), ("example-pairs", "test", "example-margin")))

# a training objective with an option of its own: --example-objective-spread, recipe table [example-objective]
OBJECTIVES.register("example-objective", "hnbench_example.objective:build",
                    options="hnbench_example.objective:ExampleOptions",
                    help="the example plugin's objective: the global term plus an image-uniformity term")
