"""The browse page as one self-contained HTML file: no server, no CDN, no framework.

A caption is shown up to :data:`MAX_CAPTION_CHARS` characters, a longer one cut with a note of how much is
left out (and never diffed), so a row's size is bounded whatever the data holds and a page stays linear in
its rows: one caption of 5 MB, retrieved for every query, would otherwise be copied into each row."""

from __future__ import annotations

import html
from typing import Any

from hnbench.io import script_json, value_text
from hnbench.metrics import CI_RULE
from hnbench.pages import textdiff
from hnbench.pages.page import Page, Row
from hnbench.pages.textdiff import MAX_CAPTION_CHARS, diff_words
from hnbench.pages.textdiff import render as render_diff
from hnbench.pages.theme import CSS, SORT_JS
from hnbench.results.compare import BASELINE, BASELINE_ONLY, MODEL, MODEL_ONLY

_CSS = """
#queries th{position:sticky;top:0;z-index:1}
#queries td{padding:4px 6px}
#queries tbody tr{content-visibility:auto;contain-intrinsic-size:auto 190px}
.cap{max-width:34em;display:-webkit-box;-webkit-box-orient:vertical;-webkit-line-clamp:3;overflow:hidden;cursor:pointer}
.cap.open{display:block;-webkit-line-clamp:unset}td>.cap{min-width:16em}
.caps .cap{margin:0 0 3px;padding:1px 4px;border-left:4px solid #ccd;-webkit-line-clamp:2}
.caps .cap.pos{border-left-color:#2a2}
.strip{display:flex;gap:6px;align-items:flex-start}
.item,.fig{width:128px;flex:none;font-size:11px;line-height:1.3}.item.pos img{outline:3px solid #2a2;outline-offset:-3px}
.score{display:block;color:#556}
.name{display:-webkit-box;-webkit-box-orient:vertical;-webkit-line-clamp:2;overflow:hidden;overflow-wrap:anywhere;
color:#223}
.wrong{margin-top:4px;font-size:12px;color:#333}
img{display:block;width:128px;height:128px;object-fit:contain;background:#e9ecf0;cursor:zoom-in}
#zoom{position:fixed;inset:0;background:rgba(20,24,32,.85);display:none;align-items:center;justify-content:center;
flex-direction:column;z-index:9;cursor:zoom-out;color:#fff}
#zoom.on{display:flex}#zoom img{width:auto;height:auto;max-width:92vw;max-height:86vh;min-width:min(512px,92vw);
background:none;cursor:zoom-out}
.controls{margin:.5em 0}
"""

_JS = """
document.querySelectorAll('img[data-t]').forEach(function (i) { i.src = T[i.dataset.t]; });
var body = document.querySelector('#queries tbody'), zoom = document.getElementById('zoom');
function val(id) { var e = document.getElementById(id); return e ? e.value : ''; }
function apply() {
  var q = val('filter').toLowerCase(), d = val('dir'), s = val('status'), n = 0;
  Array.prototype.forEach.call(body.rows, function (tr) {
    var ok = (!d || tr.dataset.direction === d) && (!s || tr.dataset.status === s) &&
             (!q || tr.textContent.toLowerCase().indexOf(q) >= 0);
    tr.hidden = !ok; n += ok ? 1 : 0;
  });
  document.getElementById('shown').textContent = n;
}
hnbSortable(document.getElementById('queries'));
body.addEventListener('click', function (e) {
  var t = e.target;
  if (t.tagName === 'IMG' && t.dataset.t) {
    zoom.querySelector('img').src = t.src;
    zoom.querySelector('span').textContent = t.dataset.t;
    zoom.classList.add('on');
  } else if (t.closest && t.closest('.cap')) {
    t.closest('.cap').classList.toggle('open');
  }
});
zoom.addEventListener('click', function () { zoom.classList.remove('on'); });
document.addEventListener('keydown', function (e) { if (e.key === 'Escape') { zoom.classList.remove('on'); } });
['filter', 'dir', 'status'].forEach(function (id) {
  var e = document.getElementById(id); if (e) { e.addEventListener('input', apply); }
});
apply();
document.body.dataset.ready = '1';
"""

E = html.escape


def _mark(text: str) -> str:
    return f"<mark>{text}</mark>"


def _shown(text: str) -> str:
    """A caption as plain HTML; one over :data:`MAX_CAPTION_CHARS` cut there, with how many characters are left out."""
    if len(text) <= MAX_CAPTION_CHARS:
        return E(text)
    return (E(text[:MAX_CAPTION_CHARS]) + f' <small class="cut">… {len(text) - MAX_CAPTION_CHARS:,} more characters '
            "not shown</small>")


def _diffed(a: str, b: str) -> tuple[str, str]:
    """Both captions as HTML with the words that differ in ``<mark>`` (the one rule of :mod:`hnbench.pages.textdiff`);
    where either is over :data:`MAX_CAPTION_CHARS`, both are shown plain and the long one cut (:func:`_shown`)."""
    if len(a) > MAX_CAPTION_CHARS or len(b) > MAX_CAPTION_CHARS:
        return _shown(a), _shown(b)
    sa, sb = diff_words(a, b)
    return render_diff(sa, E, _mark), render_diff(sb, E, _mark)


def _named(m: dict[str, Any], roles: bool) -> str:
    """A result's label, with its role (model or baseline) where the page compares two."""
    return E(m["label"]) + (f" <small>({E(m['role'])})</small>" if roles and m.get("role") else "")


def _img(image_id: str) -> str:
    return f'<img data-t="{E(image_id)}" alt="{E(image_id)}" title="{E(image_id)}" decoding="async">'


def _figure(image_id: str, score: float | None = None, positive: bool = False, cls: str = "item") -> str:
    """A thumbnail with its score (a retrieved item) and its name under it (two lines at most, whole in its
    tooltip). ``cls``: ``item`` for a retrieved image, ``fig`` for a query's or its true image."""
    return (f'<div class="{cls}{" pos" if positive else ""}">{_img(image_id)}'
            + ("" if score is None else f'<span class="score">{score:.3f}</span>')
            + f'<span class="name" title="{E(image_id)}">{E(image_id)}</span></div>')


def _row(r: Row, compare: bool, hardness: bool) -> str:
    query_html, _ = _diffed(r.query_text, r.confuser_text)
    if r.direction == "t2i":
        query = f'<div class="cap">{query_html}</div><small>{E(r.query_id)}</small>'
        truth = _figure(r.gt_image or "", cls="fig")
        retrieved = '<div class="strip">' + "".join(
            _figure(it["image"], it["score"], it["positive"]) for it in r.items) + "</div>"
        wrong = next((it for it in r.items if not it["positive"]), None)
        if wrong is not None:  # the best wrong image's caption, diffed with the query
            retrieved += (f'<div class="cap wrong"><small>{E(wrong["id"])}:</small> '
                          f'{_diffed(r.query_text, wrong["text"])[1]}</div>')
    else:
        query = _figure(r.query_image or "", cls="fig")
        truth = f'<div class="cap">{query_html}</div>'
        retrieved = '<div class="caps">' + "".join(
            f'<div class="cap{" pos" if it["positive"] else ""}"><small>{it["score"]:.3f} {E(it["id"])}:</small> '
            f'{_diffed(r.query_text, it["text"])[1]}</div>' for it in r.items) + "</div>"
    cells = [f"<td>{r.direction}</td>", f'<td data-v="{r.rank}">{r.rank}</td>',
             f'<td data-v="{r.margin:.6f}">{r.margin:+.3f}</td>' if r.margin > float("-inf") else '<td data-v="-9">–</td>']
    if compare:
        cells += [f'<td data-v="{r.baseline_rank}">{r.baseline_rank}</td>', f"<td>{E(r.status)}</td>"]
    if hardness:
        cells.append(f'<td data-v="{r.hardness:.6f}">{r.hardness:.3f}</td>' if r.hardness is not None
                     else '<td data-v="-9">–</td>')
    cells += [f"<td>{query}</td>", f"<td>{truth}</td>", f"<td>{retrieved}</td>"]
    return (f'<tr class="query" data-direction="{r.direction}" data-status="{E(r.status)}">' + "".join(cells)
            + "</tr>")


def _summary(page: Page) -> str:
    ks = sorted({k for m in page.models for d in ("t2i", "i2t") for k in m["metrics"].get(d, {}) if k.startswith("R@")},
                key=lambda k: int(k[2:]))
    head = "<tr><th>model</th><th>direction</th>" + "".join(f"<th>{k}</th>" for k in ks) + "<th>queries</th></tr>"
    rows = []
    for m in page.models:
        for d in ("t2i", "i2t"):
            met, ci = m["metrics"].get(d, {}), (m["ci95"] or {}).get(d) or {}
            cells = "".join(f"<td>{met[k]:.2f}" + (f" [{ci[k][0]:.2f}, {ci[k][1]:.2f}]" if k in ci else "") + "</td>"
                            if k in met else "<td>–</td>" for k in ks)
            rows.append(f"<tr><td>{_named(m, len(page.models) > 1)}</td><td>{d}</td>{cells}"
                        f"<td>{met.get('n_queries', '–')}</td></tr>")
    return f'<table id="summary">{head}{"".join(rows)}</table>'


def _hardness(page: Page) -> str:
    if not page.hardness:
        return ""
    out = ["<h2>Recall by hardness</h2>", "<p>Bucket = similarity of the query's hardest-negative caption (i2t: the "
           "hardest over the image's captions); R@1 in %.</p>"]
    for rec in page.hardness:
        body = "".join(f"<tr><td>{E(a.label)}</td><td>{a.n}</td><td>{value_text(a.r_at_1, 1)}</td><td>{b.n}</td>"
                       f"<td>{value_text(b.r_at_1, 1)}</td></tr>" for a, b in zip(rec["t2i"], rec["i2t"]))
        out.append(f"<h3>{_named(rec, len(page.hardness) > 1)}</h3><table class=\"hardness\"><tr><th>bucket</th><th>t2i n</th>"
                   f"<th>t2i R@1</th><th>i2t n</th><th>i2t R@1</th></tr>{body}</table>")
    return "".join(out)


def render(page: Page, *, nav: str = "", css: str = "") -> str:
    """The whole page; ``T`` maps image ids to their thumbnails (embedded JPEGs, or a site's relative URLs),
    filled into ``<img data-t>``. ``nav`` (rendered HTML) opens the body and ``css`` adds rules: a site's
    navigation."""
    compare, hardness = len(page.models) > 1, bool(page.hardness)
    heads = ["direction", "rank", "margin"] + ([f"{BASELINE} rank", "right at 1 for"] if compare else []) \
        + (["hardness"] if hardness else []) + ["query", "true item", "retrieved (top)"]
    shown = {d: sum(r.direction == d for r in page.rows) for d in ("t2i", "i2t")}
    legend = (f"{len(page.rows)} query rows ({', '.join(f'{d}: {shown[d]} of {n}' for d, n in page.counts.items())}), "
              "worst first (highest rank, then largest margin = best wrong score − true score). "
              "<mark>Highlighted</mark> words differ between the query's caption and the retrieved item's caption; "
              "shared words are plain (t2i: the caption of the best wrong image; i2t: each retrieved caption against "
              f"the image's true caption). {E(textdiff.RULE)} A caption over {MAX_CAPTION_CHARS:,} characters is cut "
              "(its length is said) and shown plain. Green: a correct item; under each retrieved image its "
              "score and id. Click a thumbnail to enlarge it, a caption to show it whole, a column to sort.")
    if compare:
        legend += (f" 'rank' is the {MODEL}'s ({E(page.models[0]['label'])}), '{BASELINE} rank' the {BASELINE}'s "
                   f"({E(page.models[1]['label'])}, the result compared against, as hnbench compare's first); "
                   f"'right at 1 for': the query is right at K=1 for one of them only ('{MODEL_ONLY}' / "
                   f"'{BASELINE_ONLY}'); every such query is listed.")
    status = (f'<select id="status"><option value="">all queries</option><option value="{MODEL_ONLY}">right only '
              f'for the {MODEL}</option><option value="{BASELINE_ONLY}">right only for the {BASELINE}</option>'
              "</select>") if compare else ""
    controls = ('<div class="controls"><input id="filter" placeholder="filter text" size="30"> '
                '<select id="dir"><option value="">both directions</option><option value="t2i">t2i</option>'
                f'<option value="i2t">i2t</option></select> {status} <span id="shown"></span> shown</div>')
    thumbs = script_json(page.thumbs)
    parts: list[Any] = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">', f"<title>{E(page.title)}</title>",
        f"<style>{CSS}{_CSS}{css}</style></head><body>", nav,
        '<div id="zoom" title="click or Esc to close"><img alt="enlarged"><span></span></div>',
        f"<h1>{E(page.title)}</h1>",
        *(f'<p class="note">{E(n)}</p>' for n in page.notes),
        "<h2>Summary</h2>", _summary(page), f"<p>R@K in %, brackets: {html.escape(CI_RULE)}. Results: "
        + ", ".join(f"<code>{E(str(m['result']))}</code>" for m in page.models) + "</p>",
        _hardness(page), "<h2>Queries</h2>", f"<p>{legend}</p>", controls,
        '<table id="queries"><thead><tr>' + "".join(f"<th>{h}</th>" for h in heads) + "</tr></thead><tbody>",
        *(_row(r, compare, hardness) for r in page.rows), "</tbody></table>",
        f"<script>var T = {thumbs};{SORT_JS}{_JS}</script>", "</body></html>"]
    return "\n".join(parts) + "\n"
