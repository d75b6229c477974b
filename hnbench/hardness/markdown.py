"""Markdown reports: one caption set's hardness (embedding the PNGs), and several side by side."""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence
from typing import Any

from tabulate import tabulate

from hnbench.hardness.schema import HardnessReport, Pair, PairList
from hnbench.hardness.stats import Distribution
from hnbench.io import markdown_code, markdown_text, value_text
from hnbench.pages import textdiff


def highlight(a: str, b: str) -> tuple[str, str]:
    """Both captions escaped for Markdown with the words that differ in bold (:mod:`hnbench.pages.textdiff`'s
    rule, the same as the browse page's); shared words stay plain, and so do unrelated captions."""
    sa, sb = textdiff.diff_words(a, b)
    return textdiff.render(sa, markdown_text, _bold), textdiff.render(sb, markdown_text, _bold)


def _bold(text: str) -> str:
    return f"**{text}**"




def word_diff(a: str, b: str, max_items: int = 6) -> list[str]:
    """Where two captions differ, word by word: ``"red cross" → "red circle"`` snippets (one word of
    context each side), in order; catches swapped attributes that shared-word sets cannot. None between
    captions that are not near-duplicates (:func:`hnbench.pages.textdiff.near_duplicates`)."""
    wa, wb = textdiff.words(a), textdiff.words(b)
    out: list[str] = []
    if not textdiff.near_duplicates(a, b):
        return out
    for tag, i1, i2, j1, j2 in textdiff.opcodes(a, b):
        if tag == "equal":
            continue
        lo_a, lo_b = max(i1 - 1, 0), max(j1 - 1, 0)
        out.append(f"“{' '.join(wa[lo_a:i2 + 1])}” → “{' '.join(wb[lo_b:j2 + 1])}”")
        if len(out) == max_items:
            out.append("…")
            break
    return out


def _table(rows: list[dict[str, Any]]) -> str:
    return tabulate(rows, headers="keys", tablefmt="github", disable_numparse=True) if rows else "_none_"


def _f(v: Any, nd: int = 3) -> str:
    return value_text(v, nd)


def _pct(v: Any, nd: int = 1) -> str:
    return value_text(v, nd, scale=100, suffix="%")


def _dist_row(name: str, d: Distribution) -> dict[str, str]:
    mean = _f(d.mean) + (f" ± {_f(d.stderr, 4)}" if d.method == "sampled" else "")
    return {"statistic": name, "n": f"{d.n:,}", "mean": mean, "std": _f(d.std), "p5": _f(d.quantiles.get("p5")),
            "median": _f(d.quantiles.get("p50")), "p95": _f(d.quantiles.get("p95")), "max": _f(d.max),
            "method": d.method}


def pair_block(k: int, p: Pair, *, label_a: str = "", label_b: str = "") -> str:
    """One near-duplicate pair: ids, similarity, both captions with the words that differ in bold."""
    head = f"{k}. {markdown_code(p.a)} ↔ {markdown_code(p.b)} — similarity **{p.score:.4f}**"
    if p.other_score is not None:
        head += f" (captions {p.other_score:.4f})"
    lines = [head]
    if p.a_text is not None:
        ha, hb = highlight(p.a_text, p.b_text or "")
        lines += [f"   > {label_a}{ha}", "   >", f"   > {label_b}{hb}"]
        diff = word_diff(p.a_text or "", p.b_text or "")
        sim = textdiff.similarity(p.a_text or "", p.b_text or "")
        lines.append(f"\n   differences: not marked (a caption of more than {textdiff.MAX_WORDS:,} words: not "
                     "compared)" if sim is None else
                     f"\n   differences: {markdown_text('; '.join(diff)) if diff else 'none (identical text)'}"
                     if sim >= textdiff.NEAR_DUPLICATE else
                     f"\n   differences: not marked (unrelated captions: word similarity {sim:.2f} < "
                     f"{textdiff.NEAR_DUPLICATE:g})")
    return "\n".join(lines)


def _pairs_section(title: str, pl: PairList | None, n_show: int, what: str) -> list[str]:
    if pl is None:
        return []
    out = [f"### {title}", "",
           f"{pl.n_pairs:,} pairs with {what}, involving {pl.n_items:,} items "
           f"({_pct(pl.share_items)})" + (f"; all in [{markdown_code(pl.file)}]({pl.file})" if pl.file else "") + ".", ""]
    out += [pair_block(k + 1, p) for k, p in enumerate(pl.top[:n_show])]
    return out + [""]


def render_report(r: HardnessReport, *, n_show: int = 10) -> str:
    """The Markdown report of one hardness run; image links are relative to the JSON's folder."""
    ds, enc, st = r.dataset, r.encoder, r.settings
    plots = r.files
    md = [f"# Hardness: {markdown_text(r.label)}", "",
          f"{ds.get('n_captions', 0):,} captions" + (f", {ds['n_images']:,} images" if ds.get("n_images") else "")
          + f"; encoder {markdown_code(enc.get('arch'))} ({markdown_text(enc.get('pretrained') or 'random init')}, fingerprint "
          f"{markdown_code(enc.get('fingerprint', ''))}); dataset fingerprint {markdown_code(ds.get('fingerprint', ''))}. "
          f"Negatives: {st.get('negatives')}.", ""]
    t = r.text
    rows = [_dist_row("pairwise caption similarity", t.pairwise), _dist_row("hardest-negative similarity", t.nearest)]
    if r.image is not None:
        rows += [_dist_row("pairwise image similarity", r.image.pairwise),
                 _dist_row("image nearest-neighbour similarity", r.image.nearest)]
    md += ["## Summary", "", _table(rows), ""]
    if t.pairwise.method == "sampled":
        md += [f"Pairwise statistics are estimated from {t.pairwise.n:,} uniformly sampled pairs out of "
               f"{t.pairwise.population:,} (seed {st.get('seed')}); ± is the standard error of the mean.", ""]
    for key in ("text_similarity", "image_similarity"):
        if key in plots:
            md += [f"![{key}]({plots[key]})", ""]
    b = t.buckets
    if b is not None:
        one = b.n_batches < 2  # no spread across batches: the standard error is undefined
        asked = st.get("batch_size_asked", st.get("batch_size"))
        batches = (f"One batch of all B = {b.batch_size} captions (the set is smaller than the B = {asked} asked, so "
                   "every batch would be this one; no standard error across batches)"
                   if one and asked != b.batch_size else
                   f"One random batch of B = {b.batch_size} captions (seed {st.get('seed')}; no standard error "
                   "across batches)" if one else
                   f"Random batches of B = {b.batch_size} captions ({b.n_batches} batches, seed {st.get('seed')})")
        md += ["## In-batch negatives", "",
               f"{batches}; {b.n_negatives:,} negative pairs counted" + (f", {b.n_same_group:,} same-image pairs "
                                                                         "left out" if b.n_same_group else "") + ".", "",
               _table([{"bucket": lab, "share": _pct(s), "± s.e.": "n/a (one batch)" if one else _pct(e, 2)}
                       for lab, s, e in zip(b.labels, b.shares, b.stderr)]), "",
               "Share of negatives at or above: " + ", ".join(f"{k}: {_pct(v)}" for k, v in b.share_at_least.items()),
               ""]
        for key in ("buckets", "gbar"):
            if key in plots:
                md += [f"![{key}]({plots[key]})", ""]
    if r.structure:
        md += ["## Structure by label", "",
               f"Label field {markdown_code(next(iter(r.structure.values())).field)}: similarity of pairs with the same "
               "label vs different labels, and how often the hardest negative carries the item's own label.", ""]
        rows = []
        for mod, s in r.structure.items():
            rows.append({"modality": mod, "labels": f"{s.n_labels:,}", "mean size": _f(s.mean_label_size, 2),
                         "within mean": _f(s.within.mean), "within median": _f(s.within.quantiles.get("p50")),
                         "between mean": _f(s.between.mean) + (f" ± {_f(s.between.stderr, 4)}"
                                                              if s.between.method == "sampled" else ""),
                         "between median": _f(s.between.quantiles.get("p50")),
                         "hardest negative same label": _pct(s.nearest_same_label),
                         "by chance": _pct(s.nearest_same_label_chance)})
        md += [_table(rows), ""]
        for key in ("structure_text", "structure_image"):
            if key in plots:
                md += [f"![{key}]({plots[key]})", ""]
    md += ["## Near-duplicates", "", textdiff.RULE, ""]
    md += _pairs_section("Caption pairs (each caption and its hardest negative)", t.near_duplicates, n_show,
                         f"caption similarity ≥ {t.near_duplicates.threshold:g}")
    if r.image is not None:
        md += _pairs_section("Image pairs (each image and its nearest image)", r.image.near_duplicates, n_show,
                             f"image similarity ≥ {r.image.near_duplicates.threshold:g}")
        if r.both is not None:
            md += _pairs_section("Near-duplicates in both modalities", r.both, n_show,
                                 f"image similarity ≥ {r.both.threshold:g} and best caption similarity ≥ "
                                 f"{st.get('threshold'):g}")
    for k, rec in enumerate(r.recall):
        m = rec.model
        md += [f"## Recall by hardness: {markdown_text(m.get('arch'))} ({markdown_text(m.get('pretrained') or 'random init')})", "",
               f"From {markdown_code(rec.result)} ({rec.n_matched.get('t2i', 0):,} t2i and {rec.n_matched.get('i2t', 0):,} "
               "i2t queries matched). Bucket = similarity of the query's hardest-negative caption (for i2t: the "
               "hardest over the image's captions).", "",
               _table([{"bucket": a.label, "t2i n": a.n, "t2i R@1": _f(a.r_at_1, 1), "i2t n": b2.n,
                        "i2t R@1": _f(b2.r_at_1, 1)} for a, b2 in zip(rec.t2i, rec.i2t)]), "",
               f"{rec.n_errors:,} t2i queries are wrong; in {_pct(rec.errors_at_hardest_negative)} of them the image "
               "ranked first is the image of the query's hardest-negative caption.", ""]
        if f"recall_{k}" in plots:
            md += [f"![recall]({plots[f'recall_{k}']})", ""]
        if rec.wrong:
            md += ["Wrong t2i queries, hardest first (query caption vs the caption of the image the model chose):", ""]
            for j, w in enumerate(rec.wrong[:n_show]):
                p = Pair(0, 0, w.query_id, w.wrong_id, w.wrong_similarity, w.query_text, w.wrong_text)
                md += [pair_block(j + 1, p, label_a="query: ", label_b="chosen: ").replace(
                    "— similarity", f"(rank {w.rank}, hardness {w.hardness:.3f}) — caption similarity"), ""]
        if rec.file:
            md += [f"All errors: [{markdown_code(rec.file)}]({rec.file})", ""]
    md += ["## Settings", "", "```", *(f"{k}: {' '.join(value_text(v, none='none').splitlines())}" for k, v in st.items()), "```", ""]
    return "\n".join(md)


def render_comparison(reports: Sequence[HardnessReport], *, links: Sequence[str] | None = None,
                      plots: dict[str, str] | None = None) -> str:
    """Several hardness runs side by side: one row per (caption set, encoder)."""
    rows = []
    for k, r in enumerate(reports):
        t, b = r.text, r.text.buckets
        row = {"caption set · encoder": f"[{markdown_text(r.label)}]({urllib.parse.quote(links[k])})" if links
               else markdown_text(r.label),
               "captions": f"{t.n_items:,}", "pairwise mean": _f(t.pairwise.mean),
               "hardest-neg. mean": _f(t.nearest.mean), "hardest-neg. median": _f(t.nearest.quantiles.get("p50")),
               "near-dup pairs": f"{t.near_duplicates.n_pairs:,} (≥ {t.near_duplicates.threshold:g})"}
        if b is not None:
            row.update({f"in-batch {lab}": _pct(s) for lab, s in zip(b.labels, b.shares)})
        if r.image is not None:
            row["image NN mean"] = _f(r.image.nearest.mean)
        s = r.structure.get("text")
        if s is not None:
            row[f"within/between {markdown_text(s.field)}"] = f"{_f(s.within.mean)} / {_f(s.between.mean)}"
        rows.append(row)
    keys = list(dict.fromkeys(k for row in rows for k in row))
    md = ["# Hardness comparison", "", _table([{k: row.get(k, "–") for k in keys} for row in rows]), ""]
    for key, path in (plots or {}).items():
        md += [f"![{key}]({path})", ""]
    return "\n".join(md)
