"""The HTML page with hostile type names: nothing a target can name closes a tag, starts a
script or points the page at the network; control characters are escaped."""
from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import pytest

pytest.importorskip("plotly")

from sosext.report.html import render_html  # noqa: E402

class Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()
        self.attrs: set[str] = set()
        self.text = ""

    def handle_starttag(self, tag, attrs) -> None:  # type: ignore[no-untyped-def]
        self.names.add(tag)
        self.attrs.update(a for a, _v in attrs)

    def handle_data(self, data: str) -> None:
        self.text += data


EVIL = '</script><script src="http://evil.invalid/x.js"></script><img src=//evil.invalid/y>\x1b]0;t\x07'


def doc(baseline: bool) -> dict:
    summary = {"source": "core file " + EVIL, "runtime": "10.0.0", "gc_mode": "workstation", "gc_heaps": 1,
               "layout": "regions", "allocated": 100, "committed": 200, "objects": 2, "object_bytes": 48,
               "free_bytes": 0, "fragmentation": 0.0, "live_objects": 2, "live_bytes": 48, "walk_errors": 0}
    chain = [{"address": 0x1000, "type": EVIL, "retained": 48}]
    d = {"sosext_report": 1, "summary": summary,
         "types": [{"name": EVIL, "mt": 0x7f00, "count": 2, "size": 48, "retained": 48}],
         "paths": [{"label": "all roots", "parent": -1, "path": [], "total": 48, "count": 0, "other": False,
                    "example": None},
                   {"label": "strong handle", "parent": 0, "path": ["strong handle"], "total": 48, "count": 0,
                    "other": False, "example": None},
                   {"label": EVIL, "parent": 1, "path": ["strong handle", EVIL], "total": 48, "count": 2,
                    "other": False, "example": 0x1000}],
         "holders": [{"address": 0x1000, "type": EVIL, "retained": 48, "size": 24, "root": EVIL, "chain": chain}]}
    if baseline:
        d["baseline"] = dict(summary)
        for t in d["types"]:
            t.update(count_delta=1, size_delta=24, retained_delta=24)
        for p in d["paths"]:
            p.update(total_delta=24, count_delta=1, in_baseline=True)
        d["growing_holders"] = [{"address": 0x1000, "type": EVIL, "retained": 48, "retained_delta": 24,
                                 "objects": 1, "size": 24, "types": [{"name": EVIL, "count": 1, "size": 24}],
                                 "root": EVIL, "chain": chain}]
    return d


@pytest.mark.parametrize("baseline", [False, True])
def test_hostile_names_stay_text(baseline: bool) -> None:
    page = render_html(doc(baseline))
    scripts = re.findall(r"<script>(.*?)</script>", page, flags=re.S)
    assert len(scripts) == 2 == page.count("<script") == page.count("</script>")  # plotly.js, then ours
    tags = Tags()
    tags.feed(re.sub(r"<script>.*?</script>", "<script></script>", page, count=1, flags=re.S))  # not plotly.js
    assert tags.names <= {"html", "head", "meta", "title", "style", "script", "body", "h1", "h2", "p", "div", "table",
                          "thead", "tbody", "tr", "th", "td", "code", "ol", "li"}, tags.names
    assert not tags.attrs & {"src", "href", "srcset", "action", "style", "onerror", "onload"}, tags.attrs
    assert "evil.invalid" in tags.text  # the name is there, as text
    assert "\x1b" not in page and "\x07" not in page
    # in our script the name is JSON with <, > and & escaped, and it decodes back to the escaped text
    ours = scripts[1]
    assert "</" not in ours and "<script" not in ours
    traces = re.findall(r"Plotly\.newPlot\('(\w+)',\[(\{.*?\})\],lay,cfg\)", ours)
    icicle = json.loads(dict(traces)["icicle"])
    assert icicle["labels"][2] == EVIL.replace("\x1b", "\\x1b").replace("\x07", "\\x07")
