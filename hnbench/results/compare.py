"""``hnbench compare``: paired significance of R@K differences between stored results (no encoding).

For results on the same dataset fingerprint and protocol, per direction and K: both R@K, Δ = model −
baseline with a paired bootstrap 95% interval, the exact McNemar p-value and the discordant counts
(:mod:`hnbench.results.significance`). With more than two results every one is compared with the first (the
baseline) and the p-values are Holm-corrected per (direction, K) over those comparisons.

Output schema (version 1), ``compare.json``::

    schema_version, kind ("hnbench.compare"), hnbench_version, created
    dataset   {name, protocol, fingerprint, n_images, n_captions}
    models    [{label, arch, pretrained, fingerprint, result, per_query_schema}]   models[0] is the baseline
    settings  {ks, n_boot, seed, alpha, interval, test, correction, family}
    rows      [{direction, k, model, r_baseline, r_model, delta, ci95 [lo, hi], excludes_zero,
                p_mcnemar, p_holm, significant, n_baseline_only, n_model_only, n_queries}]   (R@K, Δ, interval in %)

``significant`` (the report's ``*``) is ``p_holm < alpha``: what the table's last p column says (with one
model against the baseline ``p_holm = p_mcnemar``). ``excludes_zero`` (the unadjusted bootstrap interval)
is kept for reference; it does not mark anything (rows written before ``significant`` lack it).

The roles are hnbench's one convention (:data:`BASELINE`, :data:`MODEL`), shared with ``hnbench browse``: the
*baseline* is the result the others are compared against (compare's first argument, browse's ``--compare``),
a *model* one compared with it (compare's others, the result browse shows); ``baseline only`` / ``model
only`` count the queries only that one gets right.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tabulate import tabulate

from hnbench._version import __version__
from hnbench.errors import ConfigError, HnbenchError
from hnbench.io import atomic_write_bytes, check_output, markdown_code, markdown_text, record_output
from hnbench.results.record import EvalResult, read_per_query, read_result
from hnbench.results.significance import PairedTest, holm, paired_test
from hnbench.validate import DEFAULT_KS, check_ks

SCHEMA_VERSION = 1
KIND = "hnbench.compare"
DIRECTIONS = ("t2i", "i2t")
ALPHA = 0.05  # the level of the intervals (95%) and of the report's significance mark
BASELINE, MODEL = "baseline", "model"  # the roles of two compared results (see the module's docstring)
BASELINE_ONLY, MODEL_ONLY = f"{BASELINE} only", f"{MODEL} only"  # queries right (at K) for that one only
METHODS = {
    "interval": "paired percentile bootstrap: queries resampled with replacement, jointly for both models",
    "test": "exact McNemar (two-sided binomial sign test on the discordant queries)",
    "correction": "holm",
    "family": "per direction and K, over the models compared with the baseline",
}


def model_label(model: dict[str, Any]) -> str:
    """``arch (weights)``, a checkpoint path shortened to ``run/stem`` (the leaderboard's label)."""
    pretrained = model.get("pretrained")
    weights = str(pretrained) if pretrained else "random init"
    if pretrained and (os.sep in weights or "." in weights):  # "runs/hn/checkpoint.pt" → "hn/checkpoint"
        weights = "/".join(filter(None, [Path(weights).parent.name, Path(weights).stem]))
    return f"{model.get('arch', 'model')} ({weights})"


def check_comparable(results: Sequence[EvalResult]) -> None:
    """Refuse results of different data (the content fingerprint) or protocols,
    naming both files; the dataset's name is a label and may differ (a manifest copied under another name)."""
    first = results[0]
    for r in results:  # paired tests resample retrieval's per-query hits
        if not r.task_spec().per_query:
            raise ConfigError(f"cannot compare {r.path}: it is a {r.task} result; compare pairs retrieval results "
                              "(the per-query files it resamples)")
    for other in results[1:]:
        a, b = first.dataset.get("protocol"), other.dataset.get("protocol")
        if a != b:
            raise ConfigError(f"cannot compare {first.path} and {other.path}: dataset protocol differs "
                              f"({a!r} vs {b!r}); paired tests need the same queries")
        if first.dataset.get("fingerprint") != other.dataset.get("fingerprint"):
            raise ConfigError(f"cannot compare {first.path} and {other.path}: dataset fingerprint differs "
                              f"({first.dataset.get('fingerprint')!r} vs {other.dataset.get('fingerprint')!r}: "
                              "different data); paired tests need the same queries")


def hits(frame: Any, direction: str, ks: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """``(query ids, hits (N, len(ks)) bool)`` of one direction, in query order (hit = rank ≤ K)."""
    f = frame[frame["direction"] == direction].sort_values("query_index", kind="stable")
    ranks = f["rank"].to_numpy()
    return f["query_id"].astype(str).to_numpy(), ranks[:, None] <= np.asarray(ks)[None, :]


def paired_tests(a: EvalResult, b: EvalResult, ks: Sequence[int], *, frames: tuple[Any, Any] | None = None,
                 n_boot: int = 1000, seed: int = 0) -> dict[tuple[str, int], PairedTest]:
    """Paired tests of ``b`` against ``a`` for every direction and K (queries matched by id)."""
    fa, fb = frames or (read_per_query(a), read_per_query(b))
    out = {}
    for direction in DIRECTIONS:
        ids_a, ha = hits(fa, direction, ks)
        ids_b, hb = hits(fb, direction, ks)
        if len(ids_a) == 0:
            continue
        if len(ids_a) != len(ids_b) or not np.array_equal(np.sort(ids_a), np.sort(ids_b)):
            raise ConfigError(f"cannot compare {a.path} and {b.path}: their {direction} queries differ")
        order = np.argsort(ids_b)[np.searchsorted(np.sort(ids_b), ids_a)]  # b's rows in a's query order
        hb = hb[order]
        for j, k in enumerate(ks):
            out[(direction, int(k))] = paired_test(ha[:, j], hb[:, j], n_boot=n_boot, seed=seed)
    return out


def tests_against(base: str | Path, others: Sequence[str | Path], ks: Sequence[int], *, n_boot: int = 1000,
                  seed: int = 0) -> tuple[dict[str, dict[tuple[str, int], PairedTest]], dict[str, str]]:
    """Paired tests of each result in ``others`` against ``base``: ``(tests by path, why not, by path)``.

    A result without a readable per-query file, or on other data, is left untested with the reason."""
    try:
        a = read_result(base)
        fa = read_per_query(a)
    except HnbenchError as e:
        return {}, {str(p): f"baseline untestable: {e}" for p in others}
    tests, why = {}, {}
    for p in others:
        try:
            b = read_result(p)
            check_comparable([a, b])
            tests[str(p)] = paired_tests(a, b, ks, frames=(fa, read_per_query(b)), n_boot=n_boot, seed=seed)
        except HnbenchError as e:
            why[str(p)] = str(e).removeprefix(f"{p}: ")
    return tests, why


@dataclass
class Comparison:
    """The paired comparison of several results on one dataset (``models[0]`` is the baseline)."""

    dataset: dict[str, Any]
    models: list[dict[str, Any]]
    settings: dict[str, Any]
    rows: list[dict[str, Any]]
    schema_version: int = SCHEMA_VERSION
    kind: str = KIND
    hnbench_version: str = __version__
    created: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        order = ["schema_version", "kind", "hnbench_version", "created", "dataset", "models", "settings", "rows"]
        return {k: d[k] for k in order}

    def markdown(self) -> str:
        """A Markdown report: provenance, method, and one row per model × direction × K."""
        base = self.models[0]["label"]
        several = len(self.models) > 2
        st = self.settings
        table = []
        for r in self.rows:
            row = {"model": markdown_text(self.models[r["model"]]["label"]), "direction": r["direction"], "K": r["k"],
                   "baseline R@K": f"{r['r_baseline']:.2f}", "model R@K": f"{r['r_model']:.2f}",
                   "Δ": _signed(r["delta"]) + (" *" if r["significant"] else ""),
                   "95% paired CI": f"[{_signed(r['ci95'][0])}, {_signed(r['ci95'][1])}]",
                   "p (McNemar)": _p(r["p_mcnemar"])}
            if several:
                row["p (Holm)"] = _p(r["p_holm"])
            row.update({BASELINE_ONLY: r["n_baseline_only"], MODEL_ONLY: r["n_model_only"],
                        "queries": r["n_queries"]})
            table.append(row)
        ds = self.dataset
        p_col = "p (Holm)" if several else "p (McNemar)"
        lines = [f"# Paired comparison on {markdown_text(ds['name'])} · {markdown_text(ds['protocol'] or 'default')}",
                 "", f"Dataset fingerprint {markdown_code(ds['fingerprint'])} ({ds.get('n_images')} images, "
                 f"{ds.get('n_captions')} captions). Baseline: **{markdown_text(base)}**. Generated by hnbench {self.hnbench_version} from stored "
                 "per-query results; no encoding.", "",
                 f"Δ = model R@K − baseline R@K in points. 95% paired CI: {METHODS['interval']} "
                 f"({st['n_boot']} draws, seed {st['seed']}). "
                 f"p (McNemar): {METHODS['test']}. '{BASELINE_ONLY}' / '{MODEL_ONLY}': queries only that one gets "
                 "right at K." + (f" p (Holm): Holm-corrected {METHODS['family']}." if several else ""), "",
                 f"`*` after Δ: significant, {p_col} < {st['alpha']:g}"
                 + (" (the Holm-corrected p; an unmarked Δ whose interval excludes zero is not significant "
                    "once the comparisons are corrected)" if several else
                    " (one comparison: nothing to correct; the interval and the test may disagree near the edge)")
                 + ".", "",
                 tabulate(table, headers="keys", tablefmt="github", disable_numparse=True), "",
                 "Models:", ""]
        lines += [f"- {'baseline' if i == 0 else f'model {i}'}: {markdown_text(m['label'])} — {markdown_code(m['result'])}"
                  for i, m in enumerate(self.models)]
        return "\n".join(lines) + "\n"


def _signed(x: float) -> str:
    return f"{x:+.2f}".replace("-", "\u2212")


def _p(p: float) -> str:
    return f"{p:.2g}" if p < 0.001 else f"{p:.3f}"


def compare(results: Sequence[str | Path | EvalResult], *, ks: Sequence[int] = DEFAULT_KS,
            output_dir: str | Path | None = None, seed: int = 0, n_boot: int = 1000,
            overwrite: bool = False) -> Comparison:
    """Compare stored results against the first; write ``compare.md`` and ``compare.json`` to ``output_dir``.

    A comparison of other results already there is not replaced unless ``overwrite``."""
    if len(results) < 2:
        raise ConfigError("compare needs at least two result files (the first is the baseline)")
    check_ks(ks)
    ks = [int(k) for k in ks]
    if n_boot < 1:
        raise ConfigError(f"n_boot must be >= 1, got {n_boot}")
    loaded = [r if isinstance(r, EvalResult) else read_result(r) for r in results]
    check_comparable(loaded)
    if output_dir is not None:
        inputs = {"results": [r.stem() for r in loaded], "ks": ks, "seed": seed, "n_boot": n_boot}
        for name in ("compare.json", "compare.md"):
            check_output(Path(output_dir) / name, "a comparison", inputs, overwrite=overwrite)
    frames = [read_per_query(r) for r in loaded]
    tests = [paired_tests(loaded[0], r, ks, frames=(frames[0], f), n_boot=n_boot, seed=seed)
             for r, f in zip(loaded[1:], frames[1:])]
    rows = []
    for key in tests[0]:
        adjusted = holm([t[key].p_mcnemar for t in tests])
        for i, (t, p_adj) in enumerate(zip(tests, adjusted), start=1):
            x = t[key]
            rows.append({"direction": key[0], "k": key[1], "model": i, "r_baseline": x.r_a, "r_model": x.r_b,
                         "delta": x.delta, "ci95": list(x.ci95), "excludes_zero": x.excludes_zero,
                         "p_mcnemar": x.p_mcnemar, "p_holm": p_adj, "significant": bool(p_adj < ALPHA),
                         "n_baseline_only": x.n_a_only,
                         "n_model_only": x.n_b_only, "n_queries": x.n})
    rows.sort(key=lambda r: (r["model"], DIRECTIONS.index(r["direction"]), r["k"]))
    d = loaded[0].dataset
    out = Comparison(
        dataset={k: d.get(k) for k in ("name", "protocol", "fingerprint", "n_images", "n_captions")},
        models=[{"label": model_label(r.model), "arch": r.model.get("arch"), "pretrained": r.model.get("pretrained"),
                 "fingerprint": r.model.get("fingerprint"), "result": r.path,
                 "per_query_schema": f.attrs.get("schema_version")} for r, f in zip(loaded, frames)],
        settings={"ks": ks, "n_boot": n_boot, "seed": seed, "alpha": ALPHA, **METHODS}, rows=rows)
    if output_dir is not None:
        out_dir = Path(output_dir)
        js, md = (json.dumps(out.to_dict(), indent=2) + "\n").encode(), out.markdown().encode()  # both rendered first
        pair = (("compare.md", md), ("compare.json", js))
        for name, _ in pair:  # both records first: a failure between the two files leaves a rerunnable pair
            record_output(out_dir / name, inputs)
        for name, data in pair:
            atomic_write_bytes(out_dir / name, data)
    return out
