"""The look every hnbench HTML page shares (browse page, leaderboard): one stylesheet, one column sorter.

Pages are single files that open from disk: the CSS and JavaScript here are inlined into each, with
no font, script or stylesheet fetched from anywhere.
"""

from __future__ import annotations

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:1.5em 2em;color:#1d2330;
background:#fff}
h1{font-size:1.5em;margin:.2em 0 .5em}h2{font-size:1.2em;margin:1.4em 0 .4em;padding-bottom:.15em;
border-bottom:1px solid #dde1e8}h3{font-size:1.05em;margin:1em 0 .3em}p{max-width:70em}
code{font:12px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:#f2f4f7;padding:0 3px;border-radius:3px}
a{color:#1f5fbf}
table{border-collapse:collapse;margin:.5em 0;font-variant-numeric:tabular-nums}
th,td{border:1px solid #d5d9e0;padding:3px 7px;vertical-align:top;text-align:left}
th{background:#eef1f5;font-weight:600;white-space:nowrap}
tbody tr:nth-child(even){background:#fafbfc}tbody tr:hover{background:#f1f6ff}
th.sortable{cursor:pointer;user-select:none}th.sortable::after{content:" \\2195";color:#9aa3b2;font-weight:400}
th[data-asc="1"]::after{content:" \\2191";color:#1d2330}th[data-asc="0"]::after{content:" \\2193";color:#1d2330}
mark{background:#ffd54a;padding:0 1px;border-radius:2px}
.note{background:#fff4e0;border-left:4px solid #f0a020;padding:6px 10px}
"""

SORT_JS = """
function hnbSortable(table) {
  var body = table.tBodies[0];
  if (!body || !table.tHead) { return; }
  Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, c) {
    th.classList.add('sortable');
    th.title = 'click to sort';
    th.addEventListener('click', function () {
      var asc = th.dataset.asc !== '1';
      Array.prototype.forEach.call(table.tHead.rows[0].cells, function (h) { delete h.dataset.asc; });
      th.dataset.asc = asc ? '1' : '0';
      var key = function (tr) {
        var td = tr.cells[c], v = td.dataset.v !== undefined ? td.dataset.v : td.textContent.trim();
        var n = parseFloat(v.replace('\\u2212', '-'));
        return isFinite(n) ? n : v;
      };
      Array.prototype.slice.call(body.rows).map(function (tr) { return [key(tr), tr]; }).sort(function (a, b) {
        var x = a[0], y = b[0], nx = typeof x === 'number', ny = typeof y === 'number';
        if (nx !== ny) { return nx ? -1 : 1; }  // a number before a dash, either way round
        var r = nx ? x - y : String(x).localeCompare(String(y));
        return asc ? r : -r;
      }).forEach(function (p) { body.appendChild(p[1]); });
    });
  });
}
"""
