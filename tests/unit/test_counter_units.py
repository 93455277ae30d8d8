"""sosext counters writes values as dotnet-counters does (##,###,##0.###: at most three decimals)
and units in words (the meter's UCUM "By" is bytes); CSV and JSON keep the runtime's unit."""
from __future__ import annotations

import io
import json

from sosext.ipc.counters import CounterInterval, CounterSample
from sosext.render.counters import CounterWriter, human_unit, number


def test_values_as_dotnet_counters_formats_them() -> None:
    assert number(36.4326) == "36.433"
    assert number(2.236) == "2.236" and number(0.5) == "0.5" and number(1_421_893.21) == "1,421,893.21"
    assert number(1234) == "1,234" and number(0.0) == "0" and number(-0.0001) == "0" and number(None) == "-"


def test_units_in_words() -> None:
    assert human_unit("By") == "bytes" and human_unit("B") == "bytes" and human_unit("MB") == "MB"
    assert human_unit("{collection}") == "collections" and human_unit("{assembly}") == "assemblies"
    assert human_unit("{work_item}") == "work items" and human_unit("s") == "s" and human_unit("%") == "%"
    assert human_unit("") == "" and human_unit("count") == ""
    assert human_unit("{collection}", 1) == "collection" and human_unit("By", 1.0) == "byte"
    assert human_unit("{collection}", 2) == "collections" and human_unit("By", 0) == "bytes"


def _interval() -> CounterInterval:
    return CounterInterval(0.0, "metrics", (
        CounterSample("dotnet.gc.last_collection.heap.size", "gc.heap.generation=gen2", "By", 1_234_567.0, None),
        CounterSample("gc-heap-size", "", "MB", 36.4326, None),
        CounterSample("dotnet.gc.collections", "", "{collection}", 3.0, 1.0)))


def test_pipe_lines_and_table_use_words_csv_and_json_keep_the_unit() -> None:
    buf = io.StringIO()
    CounterWriter(buf, "table", tty=False, pid=1, interval=1).write(_interval())
    lines = [ln.split("  ", 1)[1] for ln in buf.getvalue().splitlines()]
    assert lines == ["dotnet.gc.collections  3 collections  (1/1s)",
                     "dotnet.gc.last_collection.heap.size [gc.heap.generation=gen2]  1,234,567 bytes",
                     "gc-heap-size  36.433 MB"]
    buf = io.StringIO()
    CounterWriter(buf, "table", tty=True, pid=1, interval=1).write(_interval())
    assert buf.getvalue().splitlines()[-1].split() == ["gc-heap-size", "36.433", "MB"]
    buf = io.StringIO()
    CounterWriter(buf, "json", tty=False, pid=1, interval=1).write(_interval())
    assert [c["unit"] for c in json.loads(buf.getvalue())["counters"]] == ["{collection}", "By", "MB"]
    buf = io.StringIO()
    CounterWriter(buf, "csv", tty=False, pid=1, interval=1).write(_interval())
    assert ",By,1234567," in buf.getvalue()
