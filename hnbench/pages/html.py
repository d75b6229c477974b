"""The browse page as one self-contained HTML file: no server, no CDN, no framework."""

from __future__ import annotations

import html
from typing import Any

from hnbench.io import script_json, value_text
from hnbench.pages.page import Page, Row
from hnbench.textdiff import diff_words
from hnbench.textdiff import render as render_diff

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fff}
table{border-collapse:collapse;margin:.5em 0}th,td{border:1px solid #ccc;padding:4px 6px;vertical-align:top}
th{background:#f3f3f3;cursor:pointer}mark{background:#ffd54a;padding:0 1px}
.item{display:inline-block;width:110px;margin:2px;vertical-align:top;font-size:12px}
.item.pos{outline:3px solid #2a2}.cap{max-width:38em}.caps .cap{margin:3px 0;padding:3px;border-left:4px solid #ccc}
.caps .cap.pos{border-left-color:#2a2}img{display:block;width:96px;height:96px;object-fit:contain;background:#eee}
.note{background:#fff4e0;padding:6px}.controls{margin:.5em 0}
"""

_JS = """
document.querySelectorAll('img[data-t]').forEach(function (i) { i.src = T[i.dataset.t]; });
var body = document.querySelector('#queries tbody');
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
document.querySelectorAll('#queries th').forEach(function (th, c) {
  th.addEventListener('click', function () {
    var asc = th.dataset.asc !== '1'; th.dataset.asc = asc ? '1' : '0';
    var key = function (tr) { var td = tr.cells[c]; return td.dataset.v !== undefined ? td.dataset.v : td.textContent; };
    Array.prototype.slice.call(body.rows).sort(function (a, b) {
      var x = key(a), y = key(b), nx = parseFloat(x), ny = parseFloat(y);
      var r = (isNaN(nx) || isNaN(ny)) ? x.localeCompare(y) : nx - ny;
      return asc ? r : -r;
    }).forEach(function (tr) { body.appendChild(tr); });
  });
});
['filter', 'dir', 'status'].forEach(function (id) {
  var e = document.getElementById(id); if (e) { e.addEventListener('input', apply); }
});
apply();
document.body.dataset.ready = '1';
"""

E = html.escape


def _mark(text: str) -> str:
    return f"<mark>{text}</mark>"


def _diffed(a: str, b: str) -> tuple[str, str]:
    """Both captions as HTML with the words that differ in ``<mark>`` (the one rule of :mod:`hnbench.textdiff`)."""
    sa, sb = diff_words(a, b)
    return render_diff(sa, E, _mark), render_diff(sb, E, _mark)


def _img(image_id: str) -> str:
    return f'<img data-t="{E(image_id)}" alt="{E(image_id)}" title="{E(image_id)}">'


def _row(r: Row, compare: bool, hardness: bool) -> str:
    query_html, _ = _diffed(r.query_text, r.confuser_text)
    if r.direction == "t2i":
        query = f'<div class="cap">{query_html}</div><small>{E(r.query_id)}</small>'
        truth = _img(r.gt_image or "")
        retrieved = "".join(f'<div class="item{" pos" if it["positive"] else ""}">{_img(it["image"])}'
                            f'{it["score"]:.3f}</div>' for it in r.items)
        wrong = next((it for it in r.items if not it["positive"]), None)
        if wrong is not None:  # the best wrong image's caption, diffed with the query
            retrieved += (f'<div class="cap wrong"><small>{E(wrong["id"])}:</small> '
                          f'{_diffed(r.query_text, wrong["text"])[1]}</div>')
    else:
        query = _img(r.query_image or "") + f"<small>{E(r.query_id)}</small>"
        truth = f'<div class="cap">{query_html}</div>'
        retrieved = '<div class="caps">' + "".join(
            f'<div class="cap{" pos" if it["positive"] else ""}">{it["score"]:.3f} · '
            f'{_diffed(r.query_text, it["text"])[1]}</div>' for it in r.items) + "</div>"
    cells = [f"<td>{r.direction}</td>", f'<td data-v="{r.rank}">{r.rank}</td>',
             f'<td data-v="{r.margin:.6f}">{r.margin:+.3f}</td>' if r.margin > float("-inf") else '<td data-v="-9">–</td>']
    if compare:
        cells += [f'<td data-v="{r.other_rank}">{r.other_rank}</td>', f"<td>{E(r.status)}</td>"]
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
            rows.append(f"<tr><td>{E(m['label'])}</td><td>{d}</td>{cells}<td>{met.get('n_queries', '–')}</td></tr>")
    return f'<table id="summary">{head}{"".join(rows)}</table>'


def _hardness(page: Page) -> str:
    if not page.hardness:
        return ""
    out = ["<h2>Recall by hardness</h2>", "<p>Bucket = similarity of the query's hardest-negative caption (i2t: the "
           "hardest over the image's captions); R@1 in %.</p>"]
    for rec in page.hardness:
        body = "".join(f"<tr><td>{E(a.label)}</td><td>{a.n}</td><td>{value_text(a.r_at_1, 1)}</td><td>{b.n}</td>"
                       f"<td>{value_text(b.r_at_1, 1)}</td></tr>" for a, b in zip(rec["t2i"], rec["i2t"]))
        out.append(f"<h3>{E(rec['label'])}</h3><table class=\"hardness\"><tr><th>bucket</th><th>t2i n</th>"
                   f"<th>t2i R@1</th><th>i2t n</th><th>i2t R@1</th></tr>{body}</table>")
    return "".join(out)


def render(page: Page) -> str:
    """The whole page; ``T`` maps image ids to embedded JPEG thumbnails, filled into ``<img data-t>``."""
    compare, hardness = len(page.models) > 1, bool(page.hardness)
    heads = ["direction", "rank", "margin"] + (["other rank", "right at 1 for"] if compare else []) \
        + (["hardness"] if hardness else []) + ["query", "true item", "retrieved (top)"]
    shown = {d: sum(r.direction == d for r in page.rows) for d in ("t2i", "i2t")}
    legend = (f"{len(page.rows)} query rows ({', '.join(f'{d}: {shown[d]} of {n}' for d, n in page.counts.items())}), "
              "worst first (highest rank, then largest margin = best wrong score − true score). "
              "<mark>Highlighted</mark> words differ between the query's caption and the retrieved item's caption; "
              "shared words are plain (t2i: the caption of the best wrong image; i2t: each retrieved caption against "
              "the image's true caption). Green: a correct item. Click a column to sort.")
    if compare:
        legend += (f" 'right at 1 for': the query is right at K=1 for only one model (baseline = {E(page.models[0]['label'])}, "
                   f"other = {E(page.models[1]['label'])}); every such query is listed.")
    status = ('<select id="status"><option value="">all queries</option><option value="baseline only">right only for '
              'the baseline</option><option value="other only">right only for the other</option></select>') if compare else ""
    controls = ('<div class="controls"><input id="filter" placeholder="filter text" size="30"> '
                '<select id="dir"><option value="">both directions</option><option value="t2i">t2i</option>'
                f'<option value="i2t">i2t</option></select> {status} <span id="shown"></span> shown</div>')
    thumbs = script_json(page.thumbs)
    parts: list[Any] = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">', f"<title>{E(page.title)}</title>",
        f"<style>{_CSS}</style></head><body>", f"<h1>{E(page.title)}</h1>",
        *(f'<p class="note">{E(n)}</p>' for n in page.notes),
        "<h2>Summary</h2>", _summary(page), "<p>R@K in %, brackets: 95% bootstrap interval. Results: "
        + ", ".join(f"<code>{E(str(m['result']))}</code>" for m in page.models) + "</p>",
        _hardness(page), "<h2>Queries</h2>", f"<p>{legend}</p>", controls,
        '<table id="queries"><thead><tr>' + "".join(f"<th>{h}</th>" for h in heads) + "</tr></thead><tbody>",
        *(_row(r, compare, hardness) for r in page.rows), "</tbody></table>",
        f"<script>var T = {thumbs};{_JS}</script>", "</body></html>"]
    return "\n".join(parts) + "\n"
