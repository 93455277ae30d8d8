"""The portable PDB reader and the PE debug directory, on synthetic and real bytes, and fuzzed.

Synthetic PDBs are written here by an encoder that follows the spec (dotnet/runtime
docs/design/specs/PortablePdb-Metadata.md) independently of the reader: documents, methods and
their sequence points go in, and the reader must give them back. Real bytes come from the
shared framework's assemblies (debug directories) and, when the SDK can build it, from the
test debuggee (its PDB beside the dll, and the same PDB embedded). Garbled bytes must give a
MetadataError (one line) or a result, never another exception.
"""
from __future__ import annotations

import glob
import struct
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sosext.formats.metadata.errors import MetadataError
from sosext.formats.metadata.pdb import (
    HIDDEN_LINE,
    DebugDirectoryEntry,
    PortablePdb,
    codeview,
    debug_directory,
    embedded_pdb,
)

_FRAMEWORKS = sorted(glob.glob("/usr/share/dotnet/shared/Microsoft.NETCore.App/10.0.*"))
FRAMEWORK = Path(_FRAMEWORKS[-1]) if _FRAMEWORKS else None

# -- an independent encoder ---------------------------------------------------------------------


def cu(v: int) -> bytes:
    """ECMA-335 II.23.2 compressed unsigned integer."""
    if v < 0x80:
        return bytes([v])
    if v < 0x4000:
        return bytes([0x80 | v >> 8, v & 0xFF])
    assert v < 0x20000000
    return bytes([0xC0 | v >> 24, v >> 16 & 0xFF, v >> 8 & 0xFF, v & 0xFF])


def ci(v: int) -> bytes:
    """Compressed signed integer: two's complement rotated left by one within 7, 14 or 29 bits."""
    sign = 1 if v < 0 else 0
    if -(1 << 6) <= v < 1 << 6:
        return bytes([((v & 0x3F) << 1) | sign])
    if -(1 << 13) <= v < 1 << 13:
        raw = ((v & 0x1FFF) << 1) | sign
        return bytes([0x80 | raw >> 8, raw & 0xFF])
    raw = ((v & 0x0FFFFFFF) << 1) | sign
    return bytes([0xC0 | raw >> 24, raw >> 16 & 0xFF, raw >> 8 & 0xFF, raw & 0xFF])


@dataclass
class Point:
    il: int
    line: int  # HIDDEN_LINE for a hidden point
    column: int
    end_line: int
    end_column: int
    document: int


class PdbWriter:
    def __init__(self, guid: uuid.UUID, stamp: int) -> None:
        self.guid, self.stamp = guid, stamp
        self.blob = bytearray(b"\0")
        self.guids: list[bytes] = []
        self.docs: list[tuple[int, int, int, int]] = []
        self.methods: list[tuple[int, int]] = []
        self.scopes: list[tuple[int, int, int, int]] = []  # method rid, first variable, start, length
        self.variables: list[tuple[int, int, int]] = []  # attributes, slot, name (#Strings offset)
        self.strings = bytearray(b"\0")

    def add_scope(self, method_rid: int, start: int, length: int, variables: list[tuple[int, str, int]]) -> None:
        """A LocalScope of ``method_rid`` over IL [start, start+length) with (slot, name, attributes)."""
        self.scopes.append((method_rid, len(self.variables) + 1, start, length))
        for slot, name, attrs in variables:
            self.variables.append((attrs, slot, len(self.strings)))
            self.strings += name.encode() + b"\0"

    def add_blob(self, data: bytes) -> int:
        at = len(self.blob)
        self.blob += cu(len(data)) + data
        return at

    def add_document(self, path: str) -> int:
        parts = path.split("/")
        name = b"/" + b"".join(cu(self.add_blob(p.encode()) if p else 0) for p in parts)
        self.guids.append(uuid.UUID("3f5162f8-07c6-11d3-9053-00c04fa302a1").bytes_le)
        self.docs.append((self.add_blob(name), 0, 0, len(self.guids)))
        return len(self.docs)

    def add_method(self, points: list[Point]) -> int:
        if not points:
            self.methods.append((0, 0))
            return len(self.methods)
        docs = {p.document for p in points}
        single = points[0].document if len(docs) == 1 else 0
        out = bytearray(cu(0x11))  # local signature row
        if not single:
            out += cu(points[0].document)
        doc = points[0].document
        prev_il = -1
        prev_line = prev_col = None
        for p in points:
            if p.document != doc:
                out += cu(0) + cu(p.document)
                doc = p.document
            out += cu(p.il if prev_il < 0 else p.il - prev_il)
            prev_il = p.il
            if p.line == HIDDEN_LINE:
                out += cu(0) + cu(0)
                continue
            dl = p.end_line - p.line
            dc = p.end_column - p.column
            out += cu(dl) + (cu(dc) if dl == 0 else ci(dc))
            if prev_line is None:
                out += cu(p.line) + cu(p.column)
            else:
                out += ci(p.line - prev_line) + ci(p.column - prev_col)
            prev_line, prev_col = p.line, p.column
        self.methods.append((single, self.add_blob(bytes(out))))
        return len(self.methods)

    def bytes(self) -> bytes:
        pdb = self.guid.bytes_le + struct.pack("<IIQ", self.stamp, 0, 0)
        valid = (1 << 0x30) | (1 << 0x31) | ((1 << 0x32) | (1 << 0x33) if self.scopes else 0)
        tables = struct.pack("<IBBBBQQ", 0, 2, 0, 0, 1, valid, 0)
        tables += struct.pack("<II", len(self.docs), len(self.methods))
        if self.scopes:
            tables += struct.pack("<II", len(self.scopes), len(self.variables))
        for d in self.docs:
            tables += struct.pack("<HHHH", *d)
        for m in self.methods:
            tables += struct.pack("<HH", *m)
        for method, first, start, length in self.scopes:
            tables += struct.pack("<HHHHII", method, 0, first, 0, start, length)
        for v in self.variables:
            tables += struct.pack("<HHH", *v)
        streams = [("#Pdb", pdb), ("#~", tables), ("#Strings", bytes(self.strings)), ("#Blob", bytes(self.blob)),
                   ("#GUID", b"".join(self.guids))]
        version = b"PDB v1.0\0\0\0\0"
        header_size = 16 + len(version) + 4
        for name, _ in streams:
            header_size += 8 + ((len(name) + 4) & ~3)
        root = struct.pack("<IHHII", 0x424A5342, 1, 1, 0, len(version)) + version + struct.pack("<HH", 0, len(streams))
        body = b""
        offset = header_size
        for name, data in streams:
            data = data + b"\0" * (-len(data) % 4)
            n = name.encode() + b"\0"
            root += struct.pack("<II", offset, len(data)) + n + b"\0" * (-len(n) % 4)
            body += data
            offset += len(data)
        assert len(root) == header_size
        return root + body


def sample() -> tuple[bytes, dict]:
    w = PdbWriter(uuid.UUID("61e697d4-3a5a-4849-92c5-11375bec8e84"), 0x857A92FC)
    a = w.add_document("/src/app/Program.cs")
    b = w.add_document("/src/app/Gen.g.cs")
    m1 = w.add_method([Point(0, 10, 5, 10, 6, a), Point(1, 11, 9, 11, 40, a), Point(7, HIDDEN_LINE, 0, HIDDEN_LINE, 0, a),
                       Point(0x0C, 42, 13, 44, 2, a), Point(0x20, 43, 1, 43, 9, a)])
    m2 = w.add_method([])
    m3 = w.add_method([Point(0, 5, 1, 5, 2, a), Point(4, 900, 1, 900, 30, b), Point(9, 6, 3, 6, 4, a)])
    # m1: an outer scope over the whole body and an inner one over IL 0x0C..0x20; m3: one scope.
    w.add_scope(m1, 0, 0x30, [(0, "total", 0), (1, "CS$<>8__locals0", 1)])
    w.add_scope(m1, 0x0C, 0x14, [(2, "item", 0), (0, "shadow", 0)])
    w.add_scope(m3, 0, 0x10, [(0, "only", 0)])
    return w.bytes(), {"a": a, "b": b, "m1": 0x06000000 | m1, "m2": 0x06000000 | m2, "m3": 0x06000000 | m3}


# -- the reader on synthetic PDBs -------------------------------------------------------------------


def test_documents_and_id() -> None:
    data, ids = sample()
    pdb = PortablePdb(data)
    assert pdb.id.guid == uuid.UUID("61e697d4-3a5a-4849-92c5-11375bec8e84") and pdb.id.stamp == 0x857A92FC
    assert pdb.document_count == 2 and pdb.method_count == 3
    assert pdb.document_name(ids["a"]) == "/src/app/Program.cs"
    assert pdb.document_name(ids["b"]) == "/src/app/Gen.g.cs"
    with pytest.raises(MetadataError):
        pdb.document_name(3)


def test_sequence_points_decode_as_written() -> None:
    data, ids = sample()
    pdb = PortablePdb(data)
    pts = pdb.sequence_points(ids["m1"])
    assert [(p.il_offset, p.start_line, p.start_column, p.end_line, p.end_column) for p in pts] == [
        (0, 10, 5, 10, 6), (1, 11, 9, 11, 40), (7, HIDDEN_LINE, 0, HIDDEN_LINE, 0), (0x0C, 42, 13, 44, 2),
        (0x20, 43, 1, 43, 9)]
    assert pts[2].is_hidden
    assert pdb.sequence_points(ids["m2"]) == ()
    m3 = pdb.sequence_points(ids["m3"])
    assert [(p.il_offset, p.start_line, p.document) for p in m3] == [(0, 5, ids["a"]), (4, 900, ids["b"]), (9, 6, ids["a"])]
    assert pdb.sequence_points(0x06000099) == ()  # past the table: no points


def test_local_names_by_scope_and_il_offset() -> None:
    data, ids = sample()
    pdb = PortablePdb(data)
    # Outside the inner scope: the outer scope's names; compiler temporaries (hidden) left out.
    assert pdb.local_names(ids["m1"], 0) == {0: "total"}
    assert pdb.local_names(ids["m1"], 0x2F) == {0: "total"}
    # Inside it, its names join in, and the inner name of a shared slot wins.
    assert pdb.local_names(ids["m1"], 0x0C) == {0: "shadow", 2: "item"}
    assert pdb.local_names(ids["m1"], 0x1F) == {0: "shadow", 2: "item"}
    assert pdb.local_names(ids["m1"]) == {0: "shadow", 2: "item"}
    assert pdb.local_names(ids["m1"], 0x30) == {}
    assert pdb.local_names(ids["m2"], 0) == {}
    assert pdb.local_names(ids["m3"], 5) == {0: "only"}


def test_il_offset_maps_to_the_nearest_visible_point_at_or_before_it() -> None:
    data, ids = sample()
    pdb = PortablePdb(data)
    loc = lambda il: pdb.source_location(ids["m1"], il)  # noqa: E731
    assert (loc(0).path, loc(0).line) == ("/src/app/Program.cs", 10)
    assert loc(6).line == 11
    assert loc(7).line == 11 and loc(0x0B).line == 11  # the hidden point is skipped
    assert loc(0x0C).line == 42 and loc(0x1F).line == 42
    assert loc(0x20).line == 43 and loc(0x1000).line == 43
    assert str(loc(0x0C)) == "/src/app/Program.cs @ 42"
    assert pdb.source_location(ids["m2"], 0) is None
    assert pdb.source_location(ids["m3"], 5).path == "/src/app/Gen.g.cs"
    with pytest.raises(MetadataError):
        pdb.sequence_points(0x02000001)  # a TypeDef token


_point_lists = st.lists(
    st.tuples(st.integers(1, 0x400), st.booleans(), st.integers(1, 0x1FFFFF), st.integers(0, 0xFFF),
              st.integers(0, 50), st.integers(0, 0xFFF), st.integers(1, 3)),
    max_size=40,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_point_lists, st.integers(0, 0x3FFF))
def test_any_sequence_points_round_trip(raw: list, first_il: int) -> None:
    w = PdbWriter(uuid.uuid4(), 1)
    docs = [w.add_document(f"/src/f{i}.cs") for i in range(3)]
    points = []
    il = first_il
    for step, hidden, line, col, dl, width, doc in raw:
        if hidden:
            points.append(Point(il, HIDDEN_LINE, 0, HIDDEN_LINE, 0, docs[doc - 1]))
        else:
            end_col = col + width + (1 if dl == 0 else 0)
            points.append(Point(il, line, col, line + dl, end_col, docs[doc - 1]))
        il += step
    token = 0x06000000 | w.add_method(points)
    got = PortablePdb(w.bytes()).sequence_points(token)
    assert [(p.il_offset, p.start_line, p.start_column, p.end_line, p.end_column, p.document) for p in got] == [
        (p.il, p.line, p.column, p.end_line, p.end_column, p.document) for p in points]


# -- garbled bytes ----------------------------------------------------------------------------------

_FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _exercise(data: bytes) -> None:
    try:
        pdb = PortablePdb(data)
        for rid in range(1, min(pdb.document_count, 8) + 1):
            try:
                pdb.document_name(rid)
            except MetadataError:
                pass
        for rid in range(1, min(pdb.method_count, 8) + 1):
            try:
                pdb.source_location(0x06000000 | rid, 3)
            except MetadataError:
                pass
            try:
                pdb.local_names(0x06000000 | rid, 3)
            except MetadataError:
                pass
    except MetadataError as e:
        assert "\n" not in str(e) and str(e)


@_FUZZ
@given(st.data())
def test_garbled_pdbs_raise_only_metadata_errors(data: st.DataObject) -> None:
    blob = bytearray(sample()[0])
    for _ in range(data.draw(st.integers(1, 8))):
        at = data.draw(st.integers(0, len(blob) - 1))
        blob[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(blob)))
    _exercise(bytes(blob[:cut]) if data.draw(st.booleans()) else bytes(blob))


@_FUZZ
@given(st.binary(max_size=400))
def test_random_bytes_raise_only_metadata_errors(data: bytes) -> None:
    _exercise(data)
    _exercise(sample()[0][:64] + data)


# -- the PE side -------------------------------------------------------------------------------------


def _entry(kind: int, data: bytes, minor: int = 0) -> DebugDirectoryEntry:
    return DebugDirectoryEntry(kind, 0x100, minor, 0x857A92FC, data)


def test_codeview_and_embedded_entries() -> None:
    pdb_bytes, _ = sample()
    guid = uuid.UUID("61e697d4-3a5a-4849-92c5-11375bec8e84")
    cv = _entry(2, b"RSDS" + guid.bytes_le + struct.pack("<I", 1) + b"/obj/App.pdb\0", minor=0x504D)
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    deflated = comp.compress(pdb_bytes) + comp.flush()
    emb = _entry(17, b"MPDB" + struct.pack("<I", len(pdb_bytes)) + deflated)
    info = codeview([cv, emb])
    assert info is not None and info.guid == guid and info.age == 1 and info.path == "/obj/App.pdb" and info.portable
    assert info.pdb_id == PortablePdb(pdb_bytes).id
    assert embedded_pdb([cv, emb]) == pdb_bytes
    assert embedded_pdb([cv]) is None and codeview([emb]) is None
    for bad in (b"MPDB", b"XPDB" + emb.data[4:], emb.data[:8] + b"\xff" * 20,
                b"MPDB" + struct.pack("<I", len(pdb_bytes) + 1) + deflated):
        with pytest.raises(MetadataError):
            embedded_pdb([_entry(17, bad)])


@pytest.mark.skipif(FRAMEWORK is None, reason="no .NET 10 shared framework")
def test_a_framework_assemblys_debug_directory() -> None:
    image = (FRAMEWORK / "System.Runtime.dll").read_bytes()
    entries = debug_directory(lambda off, n: image[off:off + n], mapped=False)
    info = codeview(entries)
    assert info is not None and info.path.endswith("System.Runtime.pdb") and info.age == 1


@pytest.mark.skipif(FRAMEWORK is None, reason="no .NET 10 shared framework")
@_FUZZ
@given(st.data())
def test_garbled_pe_images_raise_only_metadata_errors(data: st.DataObject) -> None:
    image = bytearray((FRAMEWORK / "System.Runtime.dll").read_bytes()[:0x2000])
    for _ in range(data.draw(st.integers(1, 6))):
        at = data.draw(st.integers(0, 0x400))
        image[at] = data.draw(st.integers(0, 255))
    view = bytes(image)
    try:
        entries = debug_directory(lambda off, n: view[off:off + n], mapped=data.draw(st.booleans()))
        codeview(entries)
        embedded_pdb(entries)
    except MetadataError as e:
        assert "\n" not in str(e)


def test_document_paths_reach_the_terminal_escaped() -> None:
    w = PdbWriter(uuid.uuid4(), 1)
    doc = w.add_document("/src/evil\x1b[2J\u202e.cs")
    assert PortablePdb(w.bytes()).document_name(doc) == "/src/evil\\x1b[2J\\u202e.cs"
