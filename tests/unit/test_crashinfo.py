"""NativeAOT's triage JSON as crashinfo reads it: the documented fields, and hypothesis:
any bytes give a record or None, never an exception."""
from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from sosext.clr.threads.crashinfo import parse_triage_buffer

TRIAGE = {
    "version": "1.0.0", "runtime_base": "0x7FFF80270000", "runtime_type": "4", "runtime_version": "9.0.16",
    "reason": "2", "thread": "0x7050", "message": "Delegate_GarbageCollected",
    "exception": {"address": "0x1000", "hr": "0x80004003", "message": "boom", "type": "System.NullReferenceException",
                  "stack": [{"ip": "0x7FFF80271234", "sp": "0x10", "module": "0x7FFF80270000", "offset": "0x1234",
                             "name": "Program.Main"}],
                  "inner": [{"address": "0x2000", "hr": "0x80131500", "message": "inner", "type": "System.Exception"}]},
}


def test_the_documented_fields() -> None:
    info = parse_triage_buffer(json.dumps(TRIAGE).encode() + b"\0junk", 0x80004003)
    assert info is not None
    assert (info.reason_name, info.thread_id, info.hresult, info.runtime_type_name, info.runtime_base,
            info.runtime_version, info.message) == ("EnvironmentFailFast", 0x7050, 0x80004003, "NativeAOT",
                                                    0x7FFF80270000, "9.0.16", "Delegate_GarbageCollected")
    e = info.exception
    assert e is not None and (e.address, e.type_name, e.hresult, e.message) == (
        0x1000, "System.NullReferenceException", 0x80004003, "boom")
    assert [(f.ip, f.method, f.offset) for f in e.frames] == [(0x7FFF80271234, "Program.Main", 0x1234)]
    assert [(x.address, x.message) for x in info.nested()] == [(0x1000, "boom"), (0x2000, "inner")]


def test_old_or_broken_buffers_are_none() -> None:
    assert parse_triage_buffer(json.dumps({**TRIAGE, "version": "0.9"}).encode(), 0) is None
    assert parse_triage_buffer(b"{not json", 0) is None
    assert parse_triage_buffer(json.dumps({**TRIAGE, "thread": 12}).encode(), 0) is None


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=512))
def test_any_bytes(data: bytes) -> None:
    parse_triage_buffer(data, 0)


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=12),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                           max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(sorted(TRIAGE) + ["stack", "inner"]), json_values, max_size=8))
def test_any_json_shape(doc: dict) -> None:
    parse_triage_buffer(json.dumps({**doc, "version": "1.0"}).encode(), 0)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["address", "hr", "message", "type", "stack", "inner"]), json_values, max_size=6),
       st.lists(st.dictionaries(st.sampled_from(["ip", "offset", "name"]), json_values, max_size=3), max_size=3))
def test_any_exception_shape(exc: dict, stack: list) -> None:
    parse_triage_buffer(json.dumps({**TRIAGE, "exception": {**exc, "stack": stack}}).encode(), 0)
    parse_triage_buffer(json.dumps({**TRIAGE, "exception": exc}).encode(), 0)
