"""The report as one self-contained HTML page: plotly.js (from Debian's python3-plotly) and the
data embedded, no network. Plots are plotly traces (icicle, treemap) drawn by the page; the
tables are plain HTML made sortable by a few lines of our own script.

Text from the target (type names, paths) is HTML-escaped in markup and JSON-escaped (with
``<``, ``>`` and ``&`` as ``\\u003c`` …) inside scripts, so no name can close a tag.
"""
from __future__ import annotations

import html
import json
from typing import Any

from ..errors import SosError
from ..render.text import safe_line

TREEMAP_TYPES = 300  # the treemap's largest types; the rest is one "other types" rectangle
TABLE_TYPES = 2000  # rows of the type table (largest first); --format json has every type

_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;max-width:1400px}
h1{font-size:1.5em;margin:0 0 .2em} h2{font-size:1.2em;margin:1.6em 0 .4em;border-bottom:1px solid #ddd}
.note{color:#666;font-size:.92em;margin:.2em 0 .6em}
table{border-collapse:collapse;font-size:.92em;width:100%} table.summary{width:auto}
td,th{padding:2px 8px;border-bottom:1px solid #eee;text-align:left;vertical-align:top;overflow-wrap:anywhere}
th{background:#f4f4f4;cursor:pointer;user-select:none;white-space:nowrap} th.num,td.num{text-align:right}
th[data-dir=asc]::after{content:" \\25B2"} th[data-dir=desc]::after{content:" \\25BC"}
td.grow{color:#b00} td.shrink{color:#070} code{font-size:.95em;white-space:nowrap} td.num{white-space:nowrap}
table.summary th{cursor:default;text-align:left;background:none;font-weight:600}
.plot{width:100%;height:560px}
ol.chain{margin:.2em 0;padding-left:1.6em}
"""

# Sortable tables: a click on a header sorts by that column (numbers by their data-v value).
_SORT_JS = """
document.querySelectorAll('table.sortable').forEach(function (table) {
  var heads = table.tHead.rows[0].cells;
  Array.prototype.forEach.call(heads, function (th) {
    th.addEventListener('click', function () {
      var col = th.cellIndex, num = th.classList.contains('num');
      var dir = th.dataset.dir === 'desc' ? 'asc' : 'desc';
      Array.prototype.forEach.call(heads, function (h) { delete h.dataset.dir; });
      th.dataset.dir = dir;
      var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
      var key = function (r) {
        var c = r.cells[col];
        return num ? parseFloat(c.dataset.v || '0') : c.textContent.toLowerCase();
      };
      rows.sort(function (a, b) {
        var x = key(a), y = key(b), s = x < y ? -1 : x > y ? 1 : 0;
        return dir === 'asc' ? s : -s;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});
"""


def _js(value: Any) -> str:
    """JSON that is safe inside a <script> element."""
    text = json.dumps(value, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _t(text: str) -> str:
    return html.escape(safe_line(text))


def _num(v: int, signed: bool = False) -> str:
    cls = "num"
    if signed:
        cls += " grow" if v > 0 else " shrink" if v < 0 else ""
    return f'<td class="{cls}" data-v="{v}">{v:+,}</td>' if signed else f'<td class="{cls}" data-v="{v}">{v:,}</td>'


def _plotly_js() -> str:
    try:
        from plotly.offline import get_plotlyjs
    except ImportError:
        raise SosError("sosext report needs plotly (Debian: apt install python3-plotly; scripts/setup.sh installs it)")
    return get_plotlyjs()


def _size(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "bytes" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:,.1f} GiB"


def _summary(doc: dict[str, Any]) -> str:
    s = doc["summary"]
    rows = [("Source", s["source"]), ("Runtime", s["runtime"]),
            ("GC mode", f"{s['gc_mode']} ({s['gc_heaps']} heap{'s' if s['gc_heaps'] != 1 else ''}, {s['layout']})"),
            ("Heap size (allocated)", f"{s['allocated']:,} bytes ({_size(s['allocated'])})"),
            ("Committed", f"{s['committed']:,} bytes ({_size(s['committed'])})"),
            ("Objects", f"{s['objects']:,} objects, {s['object_bytes']:,} bytes"),
            ("Live (reachable)", f"{s['live_objects']:,} objects, {s['live_bytes']:,} bytes"),
            ("Free (fragmentation)", f"{s['free_bytes']:,} bytes ({100 * s['fragmentation']:.1f}% of the heap)")]
    if s.get("note"):
        rows.append(("Note", s["note"]))
    if s["walk_errors"]:
        rows.append(("Heap walk", f"{s['walk_errors']} place(s) could not be read: totals are partial"))
    old = doc.get("baseline")
    if old:
        rows.append(("Baseline", old["source"]))
        rows.append(("Growth", f"{s['objects'] - old['objects']:+,} objects, "
                               f"{s['object_bytes'] - old['object_bytes']:+,} bytes; "
                               f"live {s['live_bytes'] - old['live_bytes']:+,} bytes"))
    body = "".join(f'<tr><th>{_t(k)}</th><td id="summary-{i}">{_t(v)}</td></tr>' for i, (k, v) in enumerate(rows))
    return f'<table class="summary" id="summary">{body}</table>'


def _icicle(doc: dict[str, Any]) -> dict[str, Any]:
    paths = doc["paths"]
    trace: dict[str, Any] = {
        "type": "icicle", "branchvalues": "total", "maxdepth": 8,
        "ids": [str(k) for k in range(len(paths))],
        "parents": ["" if p["parent"] < 0 else str(p["parent"]) for p in paths],
        "labels": [safe_line(p["label"]) for p in paths],
        "values": [p["total"] for p in paths],
        "customdata": [[p["count"], p.get("total_delta", 0)] for p in paths],
        "texttemplate": "%{label}<br>%{value:,} bytes",
        "hovertemplate": ("%{label}<br>%{value:,} bytes retained<br>%{customdata[0]:,} objects"
                          + ("<br>growth %{customdata[1]:+,} bytes" if "baseline" in doc else "") + "<extra></extra>"),
        "tiling": {"orientation": "v"},
    }
    if "baseline" in doc:
        trace["marker"] = {"colors": [p["total_delta"] for p in paths], "colorscale": "RdBu",
                           "cmid": 0, "showscale": True, "colorbar": {"title": {"text": "growth, bytes"}}}
    return trace


def _namespace(name: str) -> str:
    head = name.split("[", 1)[0].split("<", 1)[0]
    return head.rsplit(".", 1)[0] if "." in head else "(no namespace)"


def _treemap(doc: dict[str, Any]) -> dict[str, Any]:
    types = doc["types"]
    shown, rest = types[:TREEMAP_TYPES], types[TREEMAP_TYPES:]
    grow = "baseline" in doc
    ids, parents, labels, values, deltas, counts = ["heap"], [""], ["heap"], [0], [0], [0]
    spaces: dict[str, int] = {}
    for t in shown:
        ns = _namespace(t["name"])
        if ns not in spaces:
            spaces[ns] = len(ids)
            ids.append("ns:" + ns)
            parents.append("heap")
            labels.append(ns)
            values.append(0)
            deltas.append(0)
            counts.append(0)
        k = spaces[ns]
        ids.append(f"t:{t['mt']:x}:{len(ids)}")
        parents.append("ns:" + ns)
        labels.append(t["name"])
        values.append(t["size"])
        deltas.append(t.get("size_delta", 0))
        counts.append(t["count"])
        for j in (k, 0):
            values[j] += t["size"]
            deltas[j] += t.get("size_delta", 0)
            counts[j] += t["count"]
    if rest:
        ids.append("other")
        parents.append("heap")
        labels.append(f"other types ({len(rest):,})")
        values.append(sum(t["size"] for t in rest))
        deltas.append(sum(t.get("size_delta", 0) for t in rest))
        counts.append(sum(t["count"] for t in rest))
        values[0] += values[-1]
        deltas[0] += deltas[-1]
        counts[0] += counts[-1]
    trace: dict[str, Any] = {
        "type": "treemap", "branchvalues": "total", "ids": ids, "parents": parents,
        "labels": [safe_line(x) for x in labels], "values": values, "maxdepth": 3,
        "customdata": [[c, d] for c, d in zip(counts, deltas)],
        "texttemplate": "%{label}<br>%{value:,} bytes<br>%{customdata[0]:,} objects",
        "hovertemplate": ("%{label}<br>%{value:,} bytes<br>%{customdata[0]:,} objects"
                          + ("<br>growth %{customdata[1]:+,} bytes" if grow else "") + "<extra></extra>"),
    }
    if grow:
        trace["marker"] = {"colors": deltas, "colorscale": "RdBu", "cmid": 0,
                           "showscale": True, "colorbar": {"title": {"text": "growth, bytes"}}}
    return trace


def _type_table(doc: dict[str, Any]) -> str:
    grow = "baseline" in doc
    retained = all("retained" in t for t in doc["types"])
    heads = ["Type", "MethodTable", "Count", "Bytes"] + (["Retained"] if retained else [])
    if grow:
        heads += ["Count delta", "Bytes delta"] + (["Retained delta"] if retained else [])
    th = "".join(f'<th class="{"" if h in ("Type", "MethodTable") else "num"}">{h}</th>' for h in heads)
    rows = []
    for t in doc["types"][:TABLE_TYPES]:
        cells = [f"<td>{_t(t['name'])}</td>", f"<td><code>{t['mt']:016x}</code></td>",
                 _num(t["count"]), _num(t["size"])]
        if retained:
            cells.append(_num(t.get("retained", 0)))
        if grow:
            cells += [_num(t["count_delta"], True), _num(t["size_delta"], True)]
            if retained:
                cells.append(_num(t.get("retained_delta", 0), True))
        rows.append(f"<tr>{''.join(cells)}</tr>")
    more = len(doc["types"]) - TABLE_TYPES
    note = (f'<p class="note">{more:,} smaller types are left out here (--format json lists every type).</p>'
            if more > 0 else "")
    return (f'<table class="sortable" id="types"><thead><tr>{th}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table>{note}")


def _chain(chain: list[dict[str, Any]]) -> str:
    items = []
    for c in chain:
        if "skipped" in c:
            items.append(f"<li>… {c['skipped']:,} more …</li>")
            continue
        extra = f", retains {c['retained']:,} bytes" if "retained" in c else ""
        items.append(f"<li><code>{c['address']:016x}</code> {_t(c['type'])}{extra}</li>")
    return f'<ol class="chain">{"".join(items)}</ol>'


def _holders(doc: dict[str, Any]) -> str:
    if not doc["holders"]:
        return '<p class="note">No object retains anything.</p>'
    rows = []
    for h in doc["holders"]:
        rows.append(f"<tr><td><code>{h['address']:016x}</code></td><td>{_t(h['type'])}</td>{_num(h['retained'])}"
                    f"{_num(h['size'])}<td>{_t(h['root'])}</td><td>{_chain(h['chain'])}</td></tr>")
    return ('<table class="sortable" id="holders"><thead><tr><th>Address</th><th>Type</th><th class="num">Retained</th>'
            '<th class="num">Size</th><th>Root</th><th>Dominator chain (root first)</th></tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table>")


def _growing(doc: dict[str, Any]) -> str:
    found = doc.get("growing_holders") or []
    if not found:
        return '<p class="note">No reachable object of a type that grew.</p>'
    rows = []
    for g in found:
        kinds = "; ".join(f"{_t(t['name'])} {t['count']:,} ({t['size']:,} bytes)" for t in g["types"])
        delta = (_num(g["retained_delta"], True) if g["retained_delta"] is not None
                 else '<td class="num" data-v="0"></td>')
        many = f"{g['instances']:,} × " if g.get("instances", 1) > 1 else ""
        rows.append(f"<tr><td>{many}<code>{g['address']:016x}</code> {_t(g['type'])}</td>{_num(g['retained'])}{delta}"
                    f"{_num(g['size'])}<td>{kinds}</td><td>{_t(g['root'])}</td><td>{_chain(g['chain'])}</td></tr>")
    return ('<p class="note">For each object of a type that grew, its holder is the first object up its '
            "dominator chain whose type did not grow (collections' internals looked through), as "
            "<code>leaks</code> and <code>heapdiff</code> name them; alike holders (one type, held by "
            "the same kind of root) are one row, with the first one's address and chain.</p>"
            '<table class="sortable" id="growing"><thead><tr><th>Holder</th><th class="num">Retained</th>'
            '<th class="num">Retained growth</th><th class="num">Growing bytes held</th><th>Growing types held</th>'
            "<th>Held by</th><th>Dominator chain (root first)</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>")


def render_html(doc: dict[str, Any]) -> str:
    s = doc["summary"]
    grow = "baseline" in doc
    config = {"displaylogo": False, "responsive": True, "showLink": False}
    layout = {"margin": {"t": 10, "l": 4, "r": 4, "b": 4}}
    scripts = (f"var cfg={_js(config)},lay={_js(layout)};"
               f"Plotly.newPlot('icicle',[{_js(_icicle(doc))}],lay,cfg);"
               f"Plotly.newPlot('treemap',[{_js(_treemap(doc))}],lay,cfg);")
    title = f"sosext heap report: {s['source']}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; script-src 'unsafe-inline'; "
        "style-src 'unsafe-inline'; img-src data: blob:; font-src data:\">",
        f"<title>{_t(title)}</title><style>{_STYLE}</style>",
        f"<script>{_plotly_js()}</script></head><body>",
        f"<h1>sosext heap report</h1><p class=\"note\">{_t(s['source'])}</p>",
        "<h2>Summary</h2>", _summary(doc),
        "<h2>What keeps the memory: retained bytes along dominator paths</h2>",
        '<p class="note">Root kind, then the types along each path (runs of one type collapsed); '
        "click a box to zoom in, the top bar to zoom out."
        + (" Colour: growth since the baseline (red grew, blue shrank)." if grow else "") + "</p>",
        '<div id="icicle" class="plot"></div>',
        "<h2>Heap by type (dumpheap -stat)</h2>",
        '<p class="note">Namespace, then type; area is the bytes of every object of the type, live or dead.'
        + (" Colour: growth since the baseline." if grow else "") + "</p>",
        '<div id="treemap" class="plot"></div>',
    ]
    if grow:
        parts += ["<h2>Top growing holders</h2>", _growing(doc)]
    parts += ["<h2>Largest holders</h2>", _holders(doc), "<h2>Types</h2>",
              '<p class="note">Click a column to sort.</p>', _type_table(doc),
              f"<script>{scripts}{_SORT_JS}</script>", "</body></html>"]
    return "\n".join(parts)
