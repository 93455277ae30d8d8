"""Portable PDBs: IL offset -> source document and line.

A portable PDB is ECMA-335 metadata (the "BSJB" root, #Strings/#Blob/#GUID heaps, a #~ table
stream) holding only debugging tables (0x30-0x37) plus a "#Pdb" stream that names the PDB
(a 20-byte id: the GUID and stamp an assembly's CodeView debug entry also carries) and the row
counts of the type-system tables its columns point into. sosext reads two of its tables:

* Document (0x30): Name (Blob: a separator byte, then compressed #Blob indexes of UTF-8
  parts joined by it), HashAlgorithm (GUID), Hash (Blob), Language (GUID).
* MethodDebugInformation (0x31), one row per MethodDef row: Document (row id, 0 when the
  method spans several), SequencePoints (Blob).
* LocalScope (0x32), sorted by method then start: Method (MethodDef row id, sized by the
  type-system row counts the #Pdb stream lists), ImportScope, VariableList (first
  LocalVariable row; the run ends where the next scope's begins), ConstantList, StartOffset,
  Length (IL bytes).
* LocalVariable (0x33): Attributes (u16, 1 = DebuggerHidden: compiler temporaries), Index (the
  IL local slot), Name (#Strings).

Tables are stored in table-number order, so these four come first in the stream and no other
table's row size matters. The sequence-point blob is a header (local signature row, plus the
initial document when the row's Document is 0) and records: a δILOffset (absolute for the
first record), then either a document change (δILOffset 0 after the first record), a hidden
point (ΔLines 0, ΔColumns 0) or a point whose start line and column are deltas from the
previous visible point. See dotnet/runtime docs/design/specs/PortablePdb-Metadata.md.

The assembly side (its PE debug directory) lives here too: a CodeView entry (type 2, "RSDS",
GUID, age, path) names the PDB to match, an EmbeddedPortablePdb entry (type 17, "MPDB",
uncompressed size, raw deflate data) carries the PDB itself.

Every malformed byte raises MetadataError with a one-line message.
"""
from __future__ import annotations

import bisect
import struct
import uuid
import zlib
from dataclasses import dataclass
from typing import Callable

from .errors import MetadataError
from .heaps import BlobHeap, GuidHeap, StringsHeap, read_compressed_int, read_compressed_uint
from .root import parse_root

HIDDEN_LINE = 0xFEEFEE
DOCUMENT_TABLE = 0x30
METHOD_DEBUG_INFORMATION_TABLE = 0x31
LOCAL_SCOPE_TABLE = 0x32
LOCAL_VARIABLE_TABLE = 0x33
LOCAL_CONSTANT_TABLE = 0x34
IMPORT_SCOPE_TABLE = 0x35
LOCAL_VARIABLE_HIDDEN = 0x1
_FIRST_DEBUG_TABLE = 0x30
_LAST_DEBUG_TABLE = 0x37
_METHOD_DEF_TOKEN = 0x06
_MAX_PDB = 128 << 20  # an embedded PDB claiming more is corrupt (real ones are a few MB)
_MAX_POINTS = 1 << 20  # sequence points of one method; a real one has hundreds

IMAGE_DEBUG_TYPE_CODEVIEW = 2
IMAGE_DEBUG_TYPE_EMBEDDED_PORTABLE_PDB = 17
_RSDS = 0x53445352  # "RSDS"
_MPDB = 0x4244504D  # "MPDB"
PORTABLE_CODEVIEW_MINOR = 0x504D  # a CodeView entry describing a portable PDB


@dataclass(frozen=True, slots=True)
class PdbId:
    """What ties a PDB to its assembly: the GUID and the stamp (the CodeView entry's TimeDateStamp)."""

    guid: uuid.UUID
    stamp: int

    def __str__(self) -> str:
        return f"{self.guid} {self.stamp:08x}"


@dataclass(frozen=True, slots=True)
class SequencePoint:
    il_offset: int
    start_line: int
    start_column: int
    end_line: int
    end_column: int
    document: int  # Document row id

    @property
    def is_hidden(self) -> bool:
        return self.start_line == HIDDEN_LINE


@dataclass(frozen=True, slots=True)
class SourceLocation:
    path: str
    line: int
    column: int = 0

    def __str__(self) -> str:
        return f"{self.path} @ {self.line}"


def _printable(text: str) -> str:
    """A PDB's path is untrusted text bound for a terminal: control characters become escapes."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"
                   for c in text)


def _table_index_width(rows: int) -> int:
    return 2 if rows < 0x10000 else 4


class PortablePdb:
    """One portable PDB's documents and sequence points."""

    def __init__(self, blob: bytes | bytearray | memoryview) -> None:
        data = bytes(blob)
        self._data = data
        root = parse_root(data)
        pdb = root.stream("#Pdb")
        if pdb is None:
            raise MetadataError("not a portable PDB (no #Pdb stream)")
        if pdb.size < 32:
            raise MetadataError("#Pdb stream truncated")
        guid = uuid.UUID(bytes_le=data[pdb.offset : pdb.offset + 16])
        (stamp, self.entry_point) = struct.unpack_from("<II", data, pdb.offset + 16)
        self.id = PdbId(guid, stamp)
        # ReferencedTypeSystemTables (a bit per table) and their row counts: only MethodDef's
        # count matters here (it sizes LocalScope's Method column).
        self._method_defs = 0
        if pdb.size >= 32:
            (referenced,) = struct.unpack_from("<Q", data, pdb.offset + 24)
            tables = [t for t in range(64) if referenced >> t & 1]
            if pdb.size < 32 + 4 * len(tables):
                raise MetadataError("#Pdb stream's type-system row counts truncated")
            rows = dict(zip(tables, struct.unpack_from(f"<{len(tables)}I", data, pdb.offset + 32)))
            self._method_defs = rows.get(_METHOD_DEF_TOKEN, 0)

        def heap(name: str) -> tuple[int, int]:
            s = root.stream(name)
            return (s.offset, s.size) if s else (0, 0)

        self.strings = StringsHeap(data, *heap("#Strings"))
        self.blobs = BlobHeap(data, *heap("#Blob"))
        self.guids = GuidHeap(data, *heap("#GUID"))
        ts = root.stream("#~")
        if ts is None:
            raise MetadataError("portable PDB has no table stream (#~)")
        self._read_tables(ts.offset, ts.size)
        self._names: dict[int, str] = {}
        self._points: dict[int, tuple[SequencePoint, ...]] = {}

    def _read_tables(self, start: int, size: int) -> None:
        data = self._data
        end = start + size
        if size < 24:
            raise MetadataError("PDB table stream header truncated")
        _, _, _, heap_sizes, _, valid, _ = struct.unpack_from("<IBBBBQQ", data, start)
        present = [t for t in range(64) if valid >> t & 1]
        wrong = [t for t in present if not _FIRST_DEBUG_TABLE <= t <= _LAST_DEBUG_TABLE]
        if wrong:
            raise MetadataError(f"portable PDB table stream lists non-debug table {wrong[0]:#04x}")
        pos = start + 24
        if pos + 4 * len(present) > end:
            raise MetadataError("PDB table row counts truncated")
        counts = dict(zip(present, struct.unpack_from(f"<{len(present)}I", data, pos)))
        pos += 4 * len(present)
        if heap_sizes & 0x40:  # extra data
            pos += 4
        blob_w = 4 if heap_sizes & 0x04 else 2
        guid_w = 4 if heap_sizes & 0x02 else 2
        fmt = {2: "H", 4: "I"}
        n_docs = counts.get(DOCUMENT_TABLE, 0)
        n_methods = counts.get(METHOD_DEBUG_INFORMATION_TABLE, 0)
        if n_docs > 0xFFFFFF or n_methods > 0xFFFFFF:
            raise MetadataError("portable PDB claims more rows than a token can name")
        doc_struct = struct.Struct("<" + fmt[blob_w] + fmt[guid_w] + fmt[blob_w] + fmt[guid_w])
        mdi_struct = struct.Struct("<" + fmt[_table_index_width(n_docs)] + fmt[blob_w])
        if pos + n_docs * doc_struct.size + n_methods * mdi_struct.size > end:
            raise MetadataError("portable PDB tables run past the table stream")
        self._docs = (pos, n_docs, doc_struct)
        pos += n_docs * doc_struct.size
        self._methods = (pos, n_methods, mdi_struct)
        pos += n_methods * mdi_struct.size
        n_scopes = counts.get(LOCAL_SCOPE_TABLE, 0)
        n_vars = counts.get(LOCAL_VARIABLE_TABLE, 0)
        if n_scopes > 0xFFFFFF or n_vars > 0xFFFFFF:
            raise MetadataError("portable PDB claims more rows than a token can name")
        width = _table_index_width
        scope_struct = struct.Struct("<" + "".join(fmt[w] for w in (
            width(self._method_defs), width(counts.get(IMPORT_SCOPE_TABLE, 0)), width(n_vars),
            width(counts.get(LOCAL_CONSTANT_TABLE, 0)))) + "II")
        var_struct = struct.Struct("<HH" + ("I" if heap_sizes & 0x01 else "H"))
        if pos + n_scopes * scope_struct.size + n_vars * var_struct.size > end:
            raise MetadataError("portable PDB local tables run past the table stream")
        self._scopes = (pos, n_scopes, scope_struct)
        pos += n_scopes * scope_struct.size
        self._variables = (pos, n_vars, var_struct)

    @property
    def document_count(self) -> int:
        return self._docs[1]

    @property
    def method_count(self) -> int:
        return self._methods[1]

    def document_name(self, rid: int) -> str:
        """The document's path as the compiler wrote it (e.g. "/src/app/Program.cs")."""
        name = self._names.get(rid)
        if name is not None:
            return name
        offset, rows, st = self._docs
        if not 0 < rid <= rows:
            raise MetadataError(f"document {rid} out of range ({rows} documents)")
        name_index = st.unpack_from(self._data, offset + (rid - 1) * st.size)[0]
        blob = self.blobs.get(name_index)
        if not blob:
            raise MetadataError(f"document {rid} has an empty name blob")
        sep = blob[0:1]
        if sep == b"\0":
            sep = b""
        parts = []
        pos = 1
        while pos < len(blob):
            part, pos = read_compressed_uint(blob, pos, len(blob))
            parts.append(self.blobs.get(part))
        name = _printable(sep.join(parts).decode("utf-8", "replace"))
        self._names[rid] = name
        return name

    def local_names_by_slot(self, method_token: int) -> dict[int, str]:
        """IL local slot -> name as SOS's symbol service finds it: the first variable of that slot
        in the method's scopes, in table order (outer scopes first); a slot whose first variable
        is a compiler temporary (DebuggerHidden) has no name."""
        first: dict[int, str | None] = {}
        rid = method_token & 0xFFFFFF
        offset, rows, st = self._scopes
        v_offset, v_rows, v_st = self._variables
        for i in range(rows):
            method, _imports, first_var, _consts, _start, _length = st.unpack_from(self._data, offset + i * st.size)
            if method != rid:
                continue
            end_var = v_rows + 1
            if i + 1 < rows:
                end_var = st.unpack_from(self._data, offset + (i + 1) * st.size)[2]
            if not 0 < first_var <= end_var <= v_rows + 1:
                raise MetadataError(f"local scope {i + 1} lists variables {first_var}..{end_var} of {v_rows}")
            for v in range(first_var, end_var):
                attrs, index, name = v_st.unpack_from(self._data, v_offset + (v - 1) * v_st.size)
                if index not in first:
                    first[index] = None if attrs & LOCAL_VARIABLE_HIDDEN else _printable(self.strings.get(name))
        return {k: n for k, n in first.items() if n is not None}

    def local_names(self, method_token: int, il_offset: int | None = None) -> dict[int, str]:
        """IL local slot -> name of the method's locals in scope at ``il_offset`` (every scope of
        the method when None; an inner scope's name wins). Compiler temporaries are left out."""
        rid = method_token & 0xFFFFFF
        offset, rows, st = self._scopes
        v_offset, v_rows, v_st = self._variables
        names: dict[int, str] = {}
        # Scopes are sorted by method: find the first of this one by bisection.
        lo, hi = 0, rows
        while lo < hi:
            mid = (lo + hi) // 2
            if st.unpack_from(self._data, offset + mid * st.size)[0] < rid:
                lo = mid + 1
            else:
                hi = mid
        for i in range(lo, rows):
            method, _imports, first_var, _consts, start, length = st.unpack_from(self._data, offset + i * st.size)
            if method != rid:
                break
            if il_offset is not None and not start <= il_offset < start + length:
                continue
            end_var = v_rows + 1
            if i + 1 < rows:
                end_var = st.unpack_from(self._data, offset + (i + 1) * st.size)[2]
            if not 0 < first_var <= end_var <= v_rows + 1:
                raise MetadataError(f"local scope {i + 1} lists variables {first_var}..{end_var} of {v_rows}")
            for v in range(first_var, end_var):
                attrs, index, name = v_st.unpack_from(self._data, v_offset + (v - 1) * v_st.size)
                if not attrs & LOCAL_VARIABLE_HIDDEN:
                    names[index] = _printable(self.strings.get(name))
        return names

    def sequence_points(self, method_token: int) -> tuple[SequencePoint, ...]:
        """The method's sequence points in IL order (empty when it has none)."""
        rid = method_token & 0xFFFFFF
        if method_token >> 24 not in (0, _METHOD_DEF_TOKEN):
            raise MetadataError(f"{method_token:#010x} is not a MethodDef token")
        points = self._points.get(rid)
        if points is None:
            points = self._decode_points(rid)
            self._points[rid] = points
        return points

    def _decode_points(self, rid: int) -> tuple[SequencePoint, ...]:
        offset, rows, st = self._methods
        if not 0 < rid <= rows:
            return ()
        document, blob_index = st.unpack_from(self._data, offset + (rid - 1) * st.size)
        blob = self.blobs.get(blob_index)
        if not blob:
            return ()
        end = len(blob)
        _local_sig, pos = read_compressed_uint(blob, 0, end)
        if document == 0:
            document, pos = read_compressed_uint(blob, pos, end)
        out: list[SequencePoint] = []
        il = -1
        line = column = -1  # of the previous visible point; -1: none yet
        while pos < end:
            if len(out) >= _MAX_POINTS:
                raise MetadataError(f"method {rid} has too many sequence points")
            delta_il, pos = read_compressed_uint(blob, pos, end)
            if il >= 0 and delta_il == 0:
                document, pos = read_compressed_uint(blob, pos, end)
                continue
            il = delta_il if il < 0 else il + delta_il
            delta_lines, pos = read_compressed_uint(blob, pos, end)
            if delta_lines == 0:
                delta_cols, pos = read_compressed_uint(blob, pos, end)
            else:
                delta_cols, pos = read_compressed_int(blob, pos, end)
            if delta_lines == 0 and delta_cols == 0:
                out.append(SequencePoint(il, HIDDEN_LINE, 0, HIDDEN_LINE, 0, document))
                continue
            if line < 0:
                line, pos = read_compressed_uint(blob, pos, end)
                column, pos = read_compressed_uint(blob, pos, end)
            else:
                d_line, pos = read_compressed_int(blob, pos, end)
                d_col, pos = read_compressed_int(blob, pos, end)
                line += d_line
                column += d_col
            out.append(SequencePoint(il, line, column, line + delta_lines, column + delta_cols, document))
        return tuple(out)

    def source_location(self, method_token: int, il_offset: int) -> SourceLocation | None:
        """The visible sequence point at or before ``il_offset`` in the method: its document and
        start line; None when there is none (no points, or only hidden ones before it)."""
        points = [p for p in self.sequence_points(method_token) if not p.is_hidden]
        if not points:
            return None
        i = bisect.bisect_right([p.il_offset for p in points], il_offset) - 1
        if i < 0:
            return None
        p = points[i]
        return SourceLocation(self.document_name(p.document), p.start_line, p.start_column)


# -- the assembly side: its PE debug directory -------------------------------------------

@dataclass(frozen=True, slots=True)
class DebugDirectoryEntry:
    type: int
    major: int
    minor: int
    stamp: int
    data: bytes


@dataclass(frozen=True, slots=True)
class CodeViewInfo:
    guid: uuid.UUID
    age: int
    path: str
    stamp: int  # the entry's TimeDateStamp: the PDB id's second half
    portable: bool

    @property
    def pdb_id(self) -> PdbId:
        return PdbId(self.guid, self.stamp)


_DEBUG_DIRECTORY = 6  # IMAGE_DIRECTORY_ENTRY_DEBUG
_MAX_DEBUG_ENTRIES = 64
_MAX_DEBUG_DATA = 64 << 20


def debug_directory(read: Callable[[int, int], bytes], mapped: bool) -> list[DebugDirectoryEntry]:
    """The entries of a PE image's debug directory. ``read(offset, size)`` reads the image (file
    offsets for a file on disk, RVAs when ``mapped``) and returns fewer bytes when it cannot."""

    def unpack(fmt: str, offset: int) -> tuple[int, ...]:
        size = struct.calcsize(fmt)
        raw = read(offset, size)
        if len(raw) < size:
            raise MetadataError(f"PE image truncated (need {size} bytes at {offset:#x})")
        return struct.unpack(fmt, raw)

    (mz,) = unpack("<H", 0)
    if mz != 0x5A4D:
        raise MetadataError("not a PE image (no MZ header)")
    (pe,) = unpack("<I", 0x3C)
    (sig,) = unpack("<I", pe)
    if sig != 0x4550:
        raise MetadataError("not a PE image (no PE signature)")
    _, n_sections, _, _, _, opt_size, _ = unpack("<HHIIIHH", pe + 4)
    opt = pe + 24
    (magic,) = unpack("<H", opt)
    if magic == 0x10B:
        count_at, dirs_at = 92, 96
    elif magic == 0x20B:
        count_at, dirs_at = 108, 112
    else:
        raise MetadataError(f"unknown PE optional header magic {magic:#06x}")
    (n_dirs,) = unpack("<I", opt + count_at)
    if n_dirs <= _DEBUG_DIRECTORY or dirs_at + (_DEBUG_DIRECTORY + 1) * 8 > opt_size:
        return []
    rva, size = unpack("<II", opt + dirs_at + _DEBUG_DIRECTORY * 8)
    if not rva or not size:
        return []
    if n_sections > 96:
        raise MetadataError(f"PE image claims {n_sections} sections")
    sections = [unpack("<8sIIII", opt + opt_size + 40 * i)[2:] for i in range(n_sections)]

    def to_offset(r: int, n: int) -> int:
        if mapped:
            return r
        for va, raw_size, raw_ptr in sections:
            if va <= r and r - va + n <= raw_size:
                return raw_ptr + r - va
        raise MetadataError(f"RVA {r:#x} (+{n:#x}) is in no section of the PE file")

    count = size // 28
    if count > _MAX_DEBUG_ENTRIES:
        raise MetadataError(f"PE debug directory claims {count} entries")
    base = to_offset(rva, count * 28)
    entries = []
    for i in range(count):
        _c, stamp, major, minor, kind, data_size, data_rva, data_ptr = unpack("<IIHHIIII", base + 28 * i)
        if data_size > _MAX_DEBUG_DATA:
            raise MetadataError(f"PE debug entry {i} claims {data_size} bytes")
        data = b""
        if data_size:
            where = data_rva if mapped else data_ptr
            if mapped and not data_rva:
                continue  # not mapped: the loader leaves it out
            data = bytes(read(where, data_size))
            if len(data) < data_size:
                raise MetadataError(f"PE debug entry {i} data truncated")
        entries.append(DebugDirectoryEntry(kind, major, minor, stamp, data))
    return entries


def codeview(entries: list[DebugDirectoryEntry]) -> CodeViewInfo | None:
    """The CodeView entry naming the image's PDB (the portable one when there are several)."""
    found = []
    for e in entries:
        if e.type != IMAGE_DEBUG_TYPE_CODEVIEW or len(e.data) < 24:
            continue
        sig, = struct.unpack_from("<I", e.data, 0)
        if sig != _RSDS:
            continue
        guid = uuid.UUID(bytes_le=e.data[4:20])
        (age,) = struct.unpack_from("<I", e.data, 20)
        path = e.data[24:].split(b"\0", 1)[0].decode("utf-8", "replace")
        found.append(CodeViewInfo(guid, age, path, e.stamp, e.minor == PORTABLE_CODEVIEW_MINOR))
    found.sort(key=lambda c: not c.portable)
    return found[0] if found else None


def embedded_pdb(entries: list[DebugDirectoryEntry]) -> bytes | None:
    """The portable PDB an EmbeddedPortablePdb entry carries, decompressed; None without one."""
    for e in entries:
        if e.type != IMAGE_DEBUG_TYPE_EMBEDDED_PORTABLE_PDB:
            continue
        if len(e.data) < 8:
            raise MetadataError("embedded PDB entry truncated")
        sig, size = struct.unpack_from("<II", e.data, 0)
        if sig != _MPDB:
            raise MetadataError(f"embedded PDB entry has signature {sig:#010x} (expected MPDB)")
        if size > _MAX_PDB:
            raise MetadataError(f"embedded PDB claims {size} bytes")
        try:
            d = zlib.decompressobj(-15)
            out = d.decompress(e.data[8:], size)
        except zlib.error as exc:
            raise MetadataError(f"embedded PDB does not inflate: {exc}") from None
        if len(out) != size:
            raise MetadataError(f"embedded PDB inflates to {len(out)} bytes, not {size}")
        return out
    return None
