"""sosext.formats.metadata against real assemblies, an independent oracle, and fuzzing.

Ground truth comes from System.Reflection.Metadata: tests/unit/metadata_oracle/ is a
small C# program (built here with the .NET SDK) that dumps what SRM sees in an assembly,
or in a bare metadata blob, as JSON. Its assembly doubles as the "test assembly" with the
shapes the reader must handle (Sample.cs).
"""
from __future__ import annotations

import base64
import contextlib
import glob
import json
import os
import shutil
import signal
import struct
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sosext.formats.metadata import (
    ElementType,
    MetadataError,
    MetadataReader,
    MethodSig,
    SigType,
    TableIndex,
    decode_field_sig,
    decode_local_sig,
    decode_method_sig,
    decode_type_sig,
    format_type_sig,
    metadata_from_pe,
)
from sosext.formats.metadata.tables import SCHEMA, CodedIndex, Heap
from sosext.errors import SosError

T = TableIndex
_FRAMEWORKS = sorted(glob.glob("/usr/share/dotnet/shared/Microsoft.NETCore.App/10.0.*"))
FRAMEWORK = Path(_FRAMEWORKS[-1]) if _FRAMEWORKS else None
ORACLE_SRC = Path(__file__).parent / "metadata_oracle"

needs_framework = pytest.mark.skipif(FRAMEWORK is None, reason="no .NET 10 shared framework")


def framework_file(name: str) -> Path:
    assert FRAMEWORK is not None
    return FRAMEWORK / name


@pytest.fixture(scope="session")
def corelib() -> MetadataReader:
    if FRAMEWORK is None:
        pytest.skip("no .NET 10 shared framework")
    return MetadataReader.from_pe(framework_file("System.Private.CoreLib.dll").read_bytes())


# ----------------------------------------------------------------------------- oracle


class Oracle:
    """Runs the built SRM dumper; answers are cached per input file."""

    def __init__(self, dll: Path, workdir: Path, env: dict[str, str]) -> None:
        self.dll = dll
        self.workdir = workdir
        self.env = env
        self._cache: dict[Path, dict[str, Any]] = {}
        self._n = 0

    @property
    def sample(self) -> Path:
        return self.dll  # the oracle's own assembly is the test assembly

    def dump(self, path: Path) -> dict[str, Any]:
        if path not in self._cache:
            self._n += 1
            out = self.workdir / f"dump{self._n}.json"
            run = subprocess.run(
                ["dotnet", str(self.dll), str(path), str(out)],
                env=self.env, timeout=300, capture_output=True, text=True,
            )  # fmt: skip
            assert run.returncode == 0, f"oracle failed on {path}:\n{run.stderr[-3000:]}"
            self._cache[path] = json.loads(out.read_text("utf-8"))
        return self._cache[path]

    def dump_blob(self, blob: bytes) -> dict[str, Any]:
        self._n += 1
        path = self.workdir / f"blob{self._n}.md"
        path.write_bytes(blob)
        return self.dump(path)


@pytest.fixture(scope="session")
def oracle(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Oracle]:
    if shutil.which("dotnet") is None:
        pytest.skip("dotnet (the .NET 10 SDK) is not installed")
    work = tmp_path_factory.mktemp("metadata_oracle")
    src = work / "src"
    shutil.copytree(ORACLE_SRC, src, ignore=shutil.ignore_patterns("bin", "obj"))
    env = dict(
        os.environ,
        DOTNET_CLI_TELEMETRY_OPTOUT="1",
        DOTNET_NOLOGO="1",
        DOTNET_SKIP_FIRST_TIME_EXPERIENCE="1",
        MSBUILDDISABLENODEREUSE="1",
        UseSharedCompilation="false",
    )
    build = subprocess.run(
        ["dotnet", "build", "-nologo", "-v", "q", "--disable-build-servers", "-c", "Debug",
         "-o", str(work / "out")],
        cwd=src, env=env, timeout=600, capture_output=True, text=True,
    )  # fmt: skip
    if build.returncode != 0:
        pytest.fail(f"building the metadata oracle failed:\n{build.stdout}\n{build.stderr}")
    yield Oracle(work / "out" / "MetadataOracle.dll", work, env)


# ----------------------------------------------------------------------------- comparing


def fmt(md: MetadataReader, sig: SigType) -> str:
    """The oracle's text for a signature type (modifiers shown)."""
    return format_type_sig(sig, md.type_name, show_modifiers=True)


def method_fields(md: MetadataReader, sig: MethodSig) -> dict[str, Any]:
    return {
        "conv": sig.calling_convention,
        "generic_count": sig.generic_param_count,
        "required_count": len(sig.params) if sig.vararg_start is None else sig.vararg_start,
        "ret": fmt(md, sig.return_type),
        "params": [fmt(md, p) for p in sig.params],
    }


class Diff:
    """Collects mismatches so a failure lists many of them, not just the first."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self.checked = 0

    def eq(self, what: str, ours: Any, theirs: Any) -> None:
        self.checked += 1
        if ours != theirs:
            self.items.append(f"{what}: ours={ours!r} oracle={theirs!r}")

    def check(self) -> None:
        assert not self.items, f"{len(self.items)} mismatches:\n" + "\n".join(self.items[:40])


def compare_with_oracle(md: MetadataReader, o: dict[str, Any]) -> int:
    """Compare everything the oracle printed; return how many facts were checked."""
    d = Diff()
    d.eq("metadata version", md.version, o["version"])
    for idx, (rows, size, offset) in o["tables"].items():
        t = md.table_stream.tables[TableIndex(int(idx))]
        d.eq(f"table {t.index.name} rows", t.rows, rows)
        d.eq(f"table {t.index.name} row size", t.row_size, size)
        if rows:
            d.eq(f"table {t.index.name} offset", t.offset, offset)
    d.eq("module name", md.module_name(), o["module_name"])
    d.eq("mvid", str(md.module().mvid), o["mvid"])
    a = md.assembly()
    if o["assembly"] is None:
        d.eq("assembly", a, None)
    else:
        assert a is not None
        ours = {"name": a.name, "version": list(a.version), "culture": a.culture, "flags": a.flags}
        d.eq("assembly", ours, o["assembly"])
    d.eq(
        "assembly refs",
        [
            {"token": r.token, "name": r.name, "version": list(r.version), "culture": r.culture}
            for r in md.assembly_refs()
        ],
        o["assembly_refs"],
    )

    d.eq("type def count", md.row_count(T.TYPE_DEF), len(o["type_defs"]))
    for t in o["type_defs"]:
        tok = t["token"]
        td = md.type_def(tok)
        d.eq(f"{tok:#x} namespace", td.namespace, t["namespace"])
        d.eq(f"{tok:#x} name", td.name, t["name"])
        d.eq(f"{tok:#x} full name", md.type_name(tok), t["full_name"])
        d.eq(f"{tok:#x} flags", td.flags, t["flags"])
        d.eq(f"{tok:#x} extends", td.extends or 0, t["extends"])
        d.eq(f"{tok:#x} enclosing", td.enclosing or 0, t["enclosing"])
        d.eq(f"{tok:#x} generic params", list(td.generic_params), t["generic_params"])
        ours_f = [
            {"token": f.token, "name": f.name, "flags": f.flags, "sig": fmt(md, f.signature)}
            for f in md.fields_of(tok)
        ]
        d.eq(f"{t['full_name']} fields", ours_f, t["fields"])
        ours_m = []
        for m in md.methods_of(tok):
            ours_m.append(
                {
                    "token": m.token,
                    "name": m.name,
                    "flags": m.flags,
                    "impl_flags": m.impl_flags,
                    "rva": m.rva,
                    "param_count": len(m.signature.params),
                    **method_fields(md, m.signature),
                    "param_names": md.param_names(m.token),
                    "generic_params": list(md.generic_param_names(m.token)),
                }
            )
        d.eq(f"{t['full_name']} methods", ours_m, t["methods"])

    d.eq("type ref count", md.row_count(T.TYPE_REF), len(o["type_refs"]))
    for t in o["type_refs"]:
        d.eq(f"{t['token']:#x} name", md.type_name(t["token"]), t["full_name"])
        d.eq(f"{t['token']:#x} scope", md.type_ref(t["token"]).resolution_scope or 0, t["scope"])

    d.eq("type spec count", md.row_count(T.TYPE_SPEC), len(o["type_specs"]))
    for t in o["type_specs"]:
        spec = md.type_spec(t["token"])
        d.eq(f"{t['token']:#x} text", fmt(md, spec.signature), t["text"])
        if "mod" not in t["text"]:
            d.eq(f"{t['token']:#x} type_name", md.type_name(t["token"]), t["text"])

    d.eq("member ref count", md.row_count(T.MEMBER_REF), len(o["member_refs"]))
    for t in o["member_refs"]:
        ref = md.member_ref(t["token"])
        ours: dict[str, Any] = {"token": ref.token, "name": ref.name, "parent": ref.parent or 0}
        if isinstance(ref.signature, SigType):
            ours["field"] = fmt(md, ref.signature)
        else:
            ours.update(method_fields(md, ref.signature))
        d.eq(f"member ref {t['token']:#x}", ours, t)

    for t in o["method_specs"]:
        spec = md.method_spec(t["token"])
        ours = {"token": spec.token, "method": spec.method or 0,
                "args": [fmt(md, a) for a in spec.instantiation]}  # fmt: skip
        d.eq(f"method spec {t['token']:#x}", ours, t)

    for t in o["stand_alone_sigs"]:
        sig = md.stand_alone_sig(t["token"])
        if isinstance(sig, MethodSig):
            ours = {"token": t["token"], **method_fields(md, sig)}
        else:
            ours = {
                "token": t["token"],
                "locals": [fmt(md, s) + (" pinned" if s.pinned else "") for s in sig],
            }
        d.eq(f"stand-alone sig {t['token']:#x}", ours, t)

    ours_e = [
        {"token": e.token, "full_name": md.type_name(e.token), "flags": e.flags,
         "implementation": e.implementation or 0}
        for e in md.exported_types()
    ]  # fmt: skip
    d.eq("exported types", ours_e, o["exported_types"])

    for t in o["user_strings"]:
        theirs = base64.b64decode(t["utf16"]).decode("utf-16-le", "replace")
        d.eq(f"user string {t['token']:#x}", md.user_string(t["token"]), theirs)

    d.check()
    return d.checked


# ----------------------------------------------------------------------------- oracle tests


@pytest.mark.slow
@needs_framework
@pytest.mark.parametrize(
    "name", ["System.Private.CoreLib.dll", "System.Collections.dll", "System.Runtime.dll"]
)
def test_framework_assembly_matches_oracle(oracle: Oracle, name: str) -> None:
    path = framework_file(name)
    image = path.read_bytes()
    o = oracle.dump(path)
    blob = metadata_from_pe(image, False)
    assert len(blob) == o["metadata_size"]
    md = MetadataReader(blob)
    checked = compare_with_oracle(md, o)
    assert checked > 50
    if name == "System.Runtime.dll":
        # The facade forwards its types; the names must come from ExportedType.
        assert len(o["exported_types"]) > 500
        assert len(o["type_refs"]) > 0


@pytest.mark.slow
def test_sample_assembly_matches_oracle(oracle: Oracle) -> None:
    md = MetadataReader.from_pe(oracle.sample.read_bytes())
    compare_with_oracle(md, oracle.dump(oracle.sample))


@pytest.mark.slow
@needs_framework
def test_find_type_round_trips_every_type(oracle: Oracle, corelib: MetadataReader) -> None:
    for md, o in (
        (corelib, oracle.dump(framework_file("System.Private.CoreLib.dll"))),
        (MetadataReader.from_pe(oracle.sample.read_bytes()), oracle.dump(oracle.sample)),
    ):
        names: dict[str, list[int]] = {}
        for t in o["type_defs"]:
            names.setdefault(t["full_name"], []).append(t["token"])
        for full, tokens in names.items():
            assert md.find_type(full) == tokens[0], full
        assert md.find_type("No.Such.Type") is None


@pytest.mark.slow
def test_sample_shapes(oracle: Oracle) -> None:
    """Readable expectations for the test assembly, beyond agreeing with the oracle."""
    md = MetadataReader.from_pe(oracle.sample.read_bytes())
    ns = "Sosext.Oracle.Sample"
    deeper = md.find_type(f"{ns}.Outer`1+Inner+Deeper`1")
    assert deeper is not None
    td = md.type_def(deeper)
    assert td.name == "Deeper`1" and td.namespace == ""
    assert td.generic_params == ("T", "U")  # nested types repeat the outer's parameters
    assert md.type_name(td.enclosing or 0) == f"{ns}.Outer`1+Inner"
    assert md.type_name(deeper) == f"{ns}.Outer`1+Inner+Deeper`1"
    assert md.find_type("GlobalNamespaceType+NestedInGlobal") is not None

    prim = md.find_type(f"{ns}.Primitives")
    assert prim is not None
    fields = {f.name: f for f in md.fields_of(prim)}
    expected_codes = {
        "Bool": ElementType.BOOLEAN, "Char": ElementType.CHAR, "I1": ElementType.I1,
        "U1": ElementType.U1, "I2": ElementType.I2, "U2": ElementType.U2,
        "I4": ElementType.I4, "U4": ElementType.U4, "I8": ElementType.I8,
        "U8": ElementType.U8, "R4": ElementType.R4, "R8": ElementType.R8,
        "I": ElementType.I, "U": ElementType.U, "Str": ElementType.STRING,
        "Obj": ElementType.OBJECT, "Dec": ElementType.VALUETYPE,
        "Array1": ElementType.SZARRAY, "Array2": ElementType.ARRAY,
        "Ptr": ElementType.PTR, "ListOfInt": ElementType.GENERICINST,
        "FnPtr": ElementType.FNPTR, "Colour": ElementType.VALUETYPE,
    }  # fmt: skip
    for name, code in expected_codes.items():
        assert fields[name].signature.element_type == code, name
    assert fields["Array2"].signature.rank == 2
    assert fields["Array3"].signature.rank == 3
    assert md.type_name(fields["Colour"].signature.token or 0) == f"{ns}.Color"
    listsig = fields["ListOfInt"].signature
    assert md.type_name(listsig.token or 0) == "System.Collections.Generic.List`1"
    assert [a.element_type for a in listsig.args] == [ElementType.I4]
    volatile = fields["Volatile"].signature
    assert volatile.element_type == ElementType.I4
    assert [(m.required, md.type_name(m.token)) for m in volatile.modifiers] == [
        (True, "System.Runtime.CompilerServices.IsVolatile")
    ]
    assert fields["Origin"].is_static and fields["Answer"].is_literal

    def text(f: str, **kw: Any) -> str:
        return format_type_sig(fields[f].signature, md.type_name, **kw)

    assert text("Array2") == "System.Int32[,]"
    assert text("Array3") == "System.String[,,]"
    assert text("Jagged") == "System.Int32[][]"
    # C# "Point[,][]" is a 2-D array of Point[]; IL and reflection write it inside out.
    assert text("Mixed") == f"{ns}.Point[][,]"
    assert text("PtrPtr") == "System.Void**"
    assert text("Nested") == (
        "System.Collections.Generic.Dictionary`2<System.String, "
        f"System.Collections.Generic.List`1<{ns}.Point>>"
    )
    sos_style = text(
        "Nested",
        generic_formatter=lambda n, a: n + "[" + ",".join(f"[{x}]" for x in a) + "]",
    )
    assert sos_style.startswith("System.Collections.Generic.Dictionary`2[[System.String],[")
    assert text("DeeperInst") == f"{ns}.Outer`1+Inner+Deeper`1<System.Int32, System.Int64>"

    outer = md.find_type(f"{ns}.Outer`1")
    assert outer is not None
    values = {f.name: f for f in md.fields_of(outer)}["Values"]
    assert format_type_sig(values.signature, md.type_name) == "!0[]"
    assert format_type_sig(values.signature, md.type_name, generic_args=["T"]) == "T[]"
    convert = next(m for m in md.methods_of(outer) if m.name == "Convert")
    assert convert.signature.generic_param_count == 1 and convert.signature.has_this
    assert md.param_names(convert.token) == ["value", "other", "counter", "note", "at", "rest"]
    assert md.method_signature_text(convert.token) == (
        f"{ns}.Outer`1.Convert(T, U, Int32&, System.String&, {ns}.Point&, System.Object[])"
    )
    methods = md.find_type(f"{ns}.Methods")
    assert methods is not None
    pinned = next(m for m in md.methods_of(methods) if m.name == "Pinned")
    assert md.method_signature_text(pinned.token) == f"{ns}.Methods.Pinned(Int32[])"
    # Calls through instantiated generic types name the instantiation.
    ref_texts = {
        md.method_signature_text(0x0A000000 | r)
        for r in range(1, md.row_count(T.MEMBER_REF) + 1)
        if isinstance(md.member_ref(r).signature, MethodSig)
    }
    assert f"System.Collections.Generic.List`1<{ns}.Point>.get_Count()" in ref_texts
    assert f"System.Collections.Generic.List`1<!0>..ctor()" in ref_texts
    specs = {
        md.type_name(0x1B000000 | r, generic_args=["T"])
        for r in range(1, md.row_count(T.TYPE_SPEC) + 1)
    }
    assert "System.Collections.Generic.List`1<T>" in specs

    vararg_calls = [
        md.member_ref(0x0A000000 | r)
        for r in range(1, md.row_count(T.MEMBER_REF) + 1)
        if md.member_ref(r).name == "VarArgs"
    ]
    assert any(
        isinstance(r.signature, MethodSig) and r.signature.vararg_start == 1 for r in vararg_calls
    )
    locals_with_pin = []
    for r in range(1, md.row_count(T.STAND_ALONE_SIG) + 1):
        sig = md.stand_alone_sig(r)
        if isinstance(sig, tuple):
            locals_with_pin += [local for local in sig if local.pinned]
    assert locals_with_pin
    strings = {
        md.user_string(0x70000000 | off)
        for off in _user_string_offsets(md)
    }
    assert {"hello", "ünïcødé ✓", "line\nbreak\ttab"} <= strings


def _user_string_offsets(md: MetadataReader) -> Iterator[int]:
    """Walk #US entry by entry (tests only; the reader is index-driven)."""
    from sosext.formats.metadata.heaps import read_compressed_uint

    stream = md.root.stream("#US")
    assert stream is not None
    data = md.data
    pos, end = stream.offset + 1, stream.offset + stream.size
    while pos < end and data[pos] != 0:
        length, body = read_compressed_uint(data, pos, end)
        yield pos - stream.offset
        pos = body + length


@pytest.mark.slow
@needs_framework
def test_metadata_location_matches_oracle(oracle: Oracle) -> None:
    for path in (framework_file("System.Runtime.dll"), oracle.sample):
        o = oracle.dump(path)
        image = path.read_bytes()
        view = metadata_from_pe(image, False)
        assert len(view) == o["metadata_size"]
        mapped = _map_image(image)
        assert bytes(metadata_from_pe(mapped, True)) == bytes(view)
        rva = o["metadata_rva"]
        assert bytes(mapped[rva : rva + len(view)]) == bytes(view)


# ----------------------------------------------------------------------------- rewritten layouts


def _width_rules(
    counts: dict[TableIndex, int], heap_sizes: int, all_large: bool
) -> Callable[[Any], int]:
    """Column widths per ECMA-335 II.24.2.6, written out independently of the reader."""
    ptr_of = {T.FIELD: T.FIELD_PTR, T.METHOD_DEF: T.METHOD_PTR, T.PARAM: T.PARAM_PTR,
              T.EVENT: T.EVENT_PTR, T.PROPERTY: T.PROPERTY_PTR}  # fmt: skip

    def width(kind: Any) -> int:
        if all_large and isinstance(kind, (CodedIndex, TableIndex)):
            return 4
        if isinstance(kind, Heap):
            return 4 if heap_sizes & int(kind) else 2
        if isinstance(kind, CodedIndex):
            limit = 1 << (16 - kind.bits)
            return 4 if any(counts[t] >= limit for t in kind.tables if t is not None) else 2
        if isinstance(kind, TableIndex):
            n = max(counts[kind], counts[ptr_of[kind]]) if kind in ptr_of else counts[kind]
            return 4 if n >= 1 << 16 else 2
        return int(kind)

    return width


def rebuild_metadata(
    md: MetadataReader,
    *,
    stream_name: str = "#~",
    heap_sizes: int = 0,
    extra_data: bool = False,
    indirect: bool = False,
    pad: dict[TableIndex, int] | None = None,
    minimal_delta: bool = False,
) -> bytes:
    """Write ``md``'s tables again in another physical layout, heaps copied as they are.

    ``indirect`` adds Field/Method/Param Ptr tables and stores the Field table reversed, so
    only a reader that follows FieldPtr finds the right fields. ``pad`` appends copies of a
    table's first row (last row for Param) up to a row count, to cross index-width limits.
    ``minimal_delta`` adds an empty #JTD stream, which makes every table index 4 bytes
    wide; like Roslyn, the writer then also flags all heaps as large.
    """
    if minimal_delta:
        heap_sizes |= 0x07
    data = md.data
    rows = {t: [md.raw_row(t, r) for r in range(1, md.row_count(t) + 1)] for t in TableIndex}
    if indirect:
        n = len(rows[T.FIELD])
        rows[T.FIELD] = rows[T.FIELD][::-1]
        rows[T.FIELD_PTR] = [(n - i,) for i in range(n)]
        rows[T.METHOD_PTR] = [(i + 1,) for i in range(len(rows[T.METHOD_DEF]))]
        rows[T.PARAM_PTR] = [(i + 1,) for i in range(len(rows[T.PARAM]))]
    for t, count in (pad or {}).items():
        # Param padding has sequence 0 (a return-value row) so names do not change meaning.
        filler = (0, 0, 0) if t == T.PARAM else rows[t][0]
        rows[t].extend([filler] * (count - len(rows[t])))
    counts = {t: len(rows[t]) for t in TableIndex}
    width = _width_rules(counts, heap_sizes, minimal_delta)
    valid = sum(1 << t for t in TableIndex if counts[t])
    tables = bytearray(
        struct.pack(
            "<IBBBBQQ", 0, 2, 0, heap_sizes | (0x40 if extra_data else 0), 1, valid,
            md.table_stream.sorted,
        )
    )  # fmt: skip
    tables += b"".join(struct.pack("<I", counts[t]) for t in TableIndex if counts[t])
    if extra_data:
        tables += b"\xde\xad\xbe\xef"
    for t in TableIndex:
        form = "<" + "".join({1: "B", 2: "H", 4: "I"}[width(k)] for _, k in SCHEMA[t])
        for row in rows[t]:
            tables += struct.pack(form, *row)
    while len(tables) % 4:
        tables.append(0)

    streams: list[tuple[str, bytes]] = [(stream_name, bytes(tables))]
    for name in ("#Strings", "#US", "#GUID", "#Blob"):
        s = md.root.stream(name)
        if s is not None:
            body = data[s.offset : s.offset + s.size]
            streams.append((name, body + b"\0" * (-len(body) % 4)))
    if minimal_delta:
        streams.append(("#JTD", b""))
    version = b"v4.0.30319\0\0"
    header_size = 16 + len(version) + 4
    for name, _ in streams:
        header_size += 8 + (len(name) + 4) // 4 * 4
    out = bytearray(struct.pack("<IHHII", 0x424A5342, 1, 1, 0, len(version)) + version)
    out += struct.pack("<HH", 0, len(streams))
    offset = header_size
    for name, body in streams:
        raw = name.encode() + b"\0"
        out += struct.pack("<II", offset, len(body)) + raw + b"\0" * (-len(raw) % 4)
        offset += len(body)
    assert len(out) == header_size
    for _, body in streams:
        out += body
    return bytes(out)


@needs_framework
@pytest.mark.parametrize(
    "layout",
    [
        {"stream_name": "#-", "heap_sizes": 0x07, "extra_data": True, "indirect": True},
        {"heap_sizes": 0x01},
        {"pad": {T.TYPE_SPEC: (1 << 14) - 1, T.PARAM: (1 << 16) - 1}},
        {"pad": {T.TYPE_SPEC: 1 << 14, T.PARAM: 1 << 16}},
        {"stream_name": "#-", "minimal_delta": True},
    ],
    ids=[
        "uncompressed-ptr-large-heaps-extra", "large-strings", "below-limits", "at-limits",
        "minimal-delta",
    ],
)
def test_rewritten_layout_reads_the_same(layout: dict[str, Any]) -> None:
    """Same rows in another layout: every answer about the original rows stays the same."""
    original = MetadataReader.from_pe(framework_file("System.Collections.dll").read_bytes())
    md = MetadataReader(rebuild_metadata(original, **layout))
    assert md.uncompressed == (layout.get("stream_name") == "#-")
    widths = {t: md.table_stream.tables[t].row_size for t in TableIndex}
    if "pad" in layout:
        big = layout["pad"][T.TYPE_SPEC] >= 1 << 14
        # InterfaceImpl: TypeDef index + TypeDefOrRef coded index.
        assert widths[T.INTERFACE_IMPL] == (6 if big else 4)
        assert widths[T.METHOD_DEF] == (16 if big else 14)  # ParamList 2 -> 4 bytes
    if layout.get("minimal_delta"):
        assert widths[T.TYPE_REF] == 12 and widths[T.INTERFACE_IMPL] == 8
    for td in original.type_defs():
        ours = md.type_def(td.token)
        assert ours.name == td.name and ours.namespace == td.namespace
        assert md.type_name(td.token) == original.type_name(td.token)
        assert [f.name for f in md.fields_of(td.token)] == [
            f.name for f in original.fields_of(td.token)
        ]
        assert [(m.name, m.signature) for m in md.methods_of(td.token)] == [
            (m.name, m.signature) for m in original.methods_of(td.token)
        ]
        if layout.get("indirect"):
            n = original.row_count(T.FIELD)
            reversed_rids = [n + 1 - (f & 0xFFFFFF) for f in td.fields]
            assert [f & 0xFFFFFF for f in ours.fields] == reversed_rids
    for r in range(1, original.row_count(T.MEMBER_REF) + 1):
        assert md.member_ref(r) == original.member_ref(r)
    for r in range(1, original.row_count(T.TYPE_SPEC) + 1):
        assert md.type_name(0x1B000000 | r) == original.type_name(0x1B000000 | r)


@pytest.mark.slow
@pytest.mark.parametrize(
    "layout",
    [
        {"stream_name": "#-", "heap_sizes": 0x07, "extra_data": True, "indirect": True},
        {"pad": {T.TYPE_SPEC: (1 << 14) - 1, T.PARAM: (1 << 16) - 1}},
        {"pad": {T.TYPE_SPEC: 1 << 14, T.PARAM: 1 << 16}},
        {"stream_name": "#-", "minimal_delta": True},
    ],
    ids=["uncompressed-ptr-large-heaps-extra", "below-limits", "at-limits", "minimal-delta"],
)
def test_rewritten_layout_matches_oracle(oracle: Oracle, layout: dict[str, Any]) -> None:
    """SRM reads the rewritten blob too: table widths and offsets must agree exactly."""
    original = MetadataReader.from_pe(oracle.sample.read_bytes())
    blob = rebuild_metadata(original, **layout)
    compare_with_oracle(MetadataReader(blob), oracle.dump_blob(blob))


# ----------------------------------------------------------------------------- framework, no oracle


@needs_framework
def test_corelib_names_and_speed(corelib: MetadataReader) -> None:
    start = time.perf_counter()
    md = MetadataReader.from_pe(framework_file("System.Private.CoreLib.dll").read_bytes())
    names = [md.type_name(td.token) for td in md.type_defs()]
    elapsed = time.perf_counter() - start
    print(f"\nCoreLib: {len(names)} TypeDefs opened and named in {elapsed * 1000:.1f} ms")
    assert "System.String" in names and "System.Collections.Generic.Dictionary`2+Entry" in names

    string = corelib.find_type("System.String")
    assert string is not None
    assert [f.name for f in corelib.fields_of(string) if not f.is_static] == [
        "_stringLength",
        "_firstChar",
    ]
    concat = [
        corelib.method_signature_text(m.token)
        for m in corelib.methods_of(string)
        if m.name == "Concat"
    ]
    assert "System.String.Concat(System.String, System.String)" in concat
    lst = corelib.find_type("System.Collections.Generic.List`1")
    assert lst is not None and corelib.type_def(lst).generic_params == ("T",)
    items = {f.name: f for f in corelib.fields_of(lst)}["_items"]
    assert format_type_sig(items.signature, corelib.type_name, generic_args=["T"]) == "T[]"
    entry = corelib.find_type("System.Collections.Generic.Dictionary`2+Entry")
    assert entry is not None
    assert corelib.type_def(entry).enclosing == corelib.find_type(
        "System.Collections.Generic.Dictionary`2"
    )
    asm = corelib.assembly()
    assert asm is not None and asm.name == "System.Private.CoreLib" and asm.version[0] == 10
    assert corelib.module_name() == "System.Private.CoreLib.dll"


@needs_framework
def test_facade_exported_types() -> None:
    md = MetadataReader.from_pe(framework_file("System.Runtime.dll").read_bytes())
    names = {md.type_name(e.token): e for e in md.exported_types()}
    obj = names["System.Object"]
    assert obj.implementation is not None and obj.implementation >> 24 == T.ASSEMBLY_REF
    refs = {r.token: r.name for r in md.assembly_refs()}
    assert refs[obj.implementation] == "System.Private.CoreLib"
    # Nested exported types are named through their enclosing ExportedType.
    assert any("+" in n for n in names)
    assert [md.type_name(tr.token) for tr in md.type_refs()]


def _map_image(image: bytes) -> bytearray:
    """Lay a PE file out as the loader would: each section at its RVA."""
    pe = struct.unpack_from("<I", image, 0x3C)[0]
    (n_sections,) = struct.unpack_from("<H", image, pe + 6)
    (opt_size,) = struct.unpack_from("<H", image, pe + 20)
    opt = pe + 24
    size_of_image, size_of_headers = struct.unpack_from("<II", image, opt + 56)
    mapped = bytearray(size_of_image)
    mapped[:size_of_headers] = image[:size_of_headers]
    for i in range(n_sections):
        header = opt + opt_size + 40 * i
        _, vsize, va, raw_size, raw_ptr = struct.unpack_from("<8sIIII", image, header)
        chunk = image[raw_ptr : raw_ptr + min(raw_size, vsize or raw_size)]
        mapped[va : va + len(chunk)] = chunk
    return mapped


@needs_framework
@pytest.mark.parametrize("name", ["System.Private.CoreLib.dll", "System.Runtime.dll"])
def test_metadata_from_pe_file_and_mapped_layouts(name: str) -> None:
    image = framework_file(name).read_bytes()
    from_file = metadata_from_pe(image, False)
    assert bytes(from_file[:4]) == b"BSJB"
    mapped = _map_image(image)
    from_mapped = metadata_from_pe(memoryview(mapped), True)
    assert bytes(from_mapped) == bytes(from_file)
    # The two layouts differ, so naming the wrong one must not silently succeed.
    with pytest.raises(MetadataError):
        metadata_from_pe(image, True)
    assert MetadataReader(from_mapped).module_name() == name


def test_metadata_from_pe_rejects_non_images() -> None:
    for bad in (b"", b"MZ", b"MZ" + b"\0" * 100, b"\x7fELF" + b"\0" * 200):
        with pytest.raises(MetadataError):
            metadata_from_pe(bad, False)


# ----------------------------------------------------------------------------- signatures


def test_signature_decoding_by_hand() -> None:
    # int32[2..5, 0..] : ARRAY I4 rank=2 nsizes=1 size=4 nbounds=2 lo=2 lo=0
    sig = decode_type_sig(bytes([0x14, 0x08, 2, 1, 4, 2, 4, 0]))
    assert (sig.element_type, sig.rank, sig.sizes, sig.lower_bounds) == (0x14, 2, (4,), (2, 0))
    # Signed compressed lower bounds: -1 encodes as 0x7F, -64 as 0x01, 63 as 0x7E.
    sig = decode_type_sig(bytes([0x14, 0x08, 3, 0, 3, 0x7F, 0x01, 0x7E]))
    assert sig.lower_bounds == (-1, -64, 63)
    sig = decode_type_sig(bytes([0x14, 0x08, 1, 0, 2, 0xBF, 0xFF, 0x80, 0x02]))
    assert sig.lower_bounds == (-1, 1)
    assert format_type_sig(sig, hex) == "System.Int32[*]"
    # GENERICINST VALUETYPE TypeRef#3 <!!0, string>
    sig = decode_type_sig(bytes([0x15, 0x11, (3 << 2) | 1, 2, 0x1E, 0, 0x0E]))
    assert sig.value_type and sig.token == 0x01000003
    assert format_type_sig(sig, lambda t: f"T{t:x}", method_generic_args=["X"]) == (
        "T1000003<X, System.String>"
    )
    # Method: HASTHIS|GENERIC, 1 generic param, 2 params, returns byref !!0, (int&, int*)
    m = decode_method_sig(bytes([0x30, 1, 2, 0x10, 0x1E, 0, 0x10, 0x08, 0x0F, 0x08]))
    assert m.has_this and m.is_generic and m.generic_param_count == 1
    assert [format_type_sig(p, hex) for p in m.params] == ["System.Int32&", "System.Int32*"]
    # vararg call site: VARARG, 3 params, void (int, SENTINEL, long, string)
    m = decode_method_sig(bytes([0x05, 3, 0x01, 0x08, 0x41, 0x0A, 0x0E]))
    assert m.vararg_start == 1 and len(m.params) == 3
    # Locals: pinned byref int, typedbyref
    locs = decode_local_sig(bytes([0x07, 2, 0x45, 0x10, 0x08, 0x16]))
    assert locs[0].pinned and locs[0].element_type == 0x10 and locs[1].element_type == 0x16
    # Field with modreq/modopt: modreq(TypeRef#1) modopt(TypeDef#2) int
    f = decode_field_sig(bytes([0x06, 0x1F, (1 << 2) | 1, 0x20, 2 << 2, 0x08]))
    assert [(x.required, x.token) for x in f.modifiers] == [(True, 0x01000001), (False, 0x02000002)]


@pytest.mark.parametrize(
    "blob",
    [
        b"",
        b"\x00",  # END is not a type
        b"\x12",  # CLASS without a token
        b"\x12\x03",  # TypeDefOrRefOrSpec tag 3
        b"\x14\x08\x00\x00\x00",  # rank 0
        b"\x14\x08\x21\x00\x00",  # rank 33
        b"\x14\x08\x02\x7f",  # 127 sizes in a 4-byte blob
        b"\x15\x11\x04\xdf\xff\xff\xff\x08",  # a huge argument count
        b"\x15\x08\x04\x01\x08",  # GENERICINST of a primitive
        b"\x1d" * 200 + b"\x08",  # nested deeper than the bound
        b"\x0f" * 5000,  # and without end
        b"\xff",
        b"\xe0\x00\x00\x00\x00",
        b"\x45\x08",  # PINNED outside a local signature
    ],
)
def test_bad_type_signatures_raise_metadata_error(blob: bytes) -> None:
    with pytest.raises(MetadataError):
        decode_type_sig(blob)


def test_bad_member_signatures_raise_metadata_error() -> None:
    for blob in (b"\x06", b"\x07\x00", b"\x06\x1f", b"\x00\x05\x01", b"\x20\x7f\x01",
                 b"\x05\x01\x01\x41\x41\x08", b"\x0b\x00\x01"):  # fmt: skip
        with pytest.raises(MetadataError):
            (decode_field_sig if blob[:1] == b"\x06" else decode_method_sig)(blob)
    with pytest.raises(MetadataError):
        decode_local_sig(b"\x06\x00")
    # A function pointer nested too deep is bounded like any other type.
    deep = bytes([0x1B, 0x00, 0x00]) * 100 + b"\x01"
    with pytest.raises(MetadataError):
        decode_type_sig(deep)


def test_metadata_error_is_a_sos_error() -> None:
    assert issubclass(MetadataError, SosError)


# ----------------------------------------------------------------------------- malformed blobs


@pytest.fixture(scope="module")
def small_blob() -> bytes:
    if FRAMEWORK is None:
        pytest.skip("no .NET 10 shared framework")
    return bytes(metadata_from_pe(framework_file("System.Runtime.dll").read_bytes(), False))


def test_malformed_roots(small_blob: bytes) -> None:
    md = MetadataReader(small_blob)
    bad = [
        b"",
        b"BSJB",
        b"XSJB" + small_blob[4:],
        small_blob[:20],
        small_blob[:200],
        small_blob[: len(small_blob) // 2],
    ]
    for blob in bad:
        with pytest.raises(MetadataError):
            MetadataReader(blob)
    # A stream header pointing past the blob.
    first = md.root.streams[0]
    pos = 16 + struct.unpack_from("<I", small_blob, 12)[0] + 4
    broken = bytearray(small_blob)
    struct.pack_into("<I", broken, pos + 4, first.size + len(small_blob))
    with pytest.raises(MetadataError, match="out of range"):
        MetadataReader(bytes(broken))
    # A bogus row count is refused before anything is sized by it.
    ts = md.root.stream("#~")
    assert ts is not None
    for count, message in ((0x00FFFFF0, "runs past"), (0xFFFFFFF0, "claims")):
        broken = bytearray(small_blob)
        struct.pack_into("<I", broken, ts.offset + 24, count)
        with pytest.raises(MetadataError, match=message):
            MetadataReader(bytes(broken))


def test_wrong_tokens_and_rows(small_blob: bytes) -> None:
    md = MetadataReader(small_blob)
    for call in (
        lambda: md.type_def(0x02000000 | 9999),
        lambda: md.type_def(0x06000001),
        lambda: md.field(1),
        lambda: md.method(0x06FFFFFF),
        lambda: md.type_name(0x06000001),
        lambda: md.type_name(0x1B000001),
        lambda: md.user_string(0x71000001),
        lambda: md.user_string(0x70FFFFFF),
        lambda: md.guid(99),
        lambda: md.raw_row(0x3F, 1),
        lambda: md.member_ref(-1),
        lambda: md.method_signature_text(0x02000001),
    ):
        with pytest.raises(MetadataError):
            call()


# ----------------------------------------------------------------------------- fuzzing


class Hang(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Turn a hang into a failure instead of a stuck test run."""

    def fire(signum: int, frame: Any) -> None:
        raise Hang(f"no answer within {seconds} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _try(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except MetadataError as e:
        assert str(e) and "\n" not in str(e)
        return None


def exercise(blob: bytes) -> None:
    """Call everything on a possibly corrupt blob: MetadataError is the only allowed failure."""
    with time_limit(20):
        md = _try(MetadataReader, blob)
        if md is None:
            return
        for rid in range(1, md.row_count(T.TYPE_DEF) + 1):
            td = _try(md.type_def, rid)
            _try(md.type_name, 0x02000000 | rid)
            if td is None:
                continue
            for f in _try(md.fields_of, td.token) or ():
                _try(format_type_sig, f.signature, md.type_name)
            for m in _try(md.methods_of, td.token) or ():
                _try(md.param_names, m.token)
                _try(md.method_signature_text, m.token)
                for p in m.signature.params:
                    _try(format_type_sig, p, md.type_name)
        _try(md.find_type, "System.Object")
        for t, get in (
            (T.TYPE_REF, md.type_name),
            (T.TYPE_SPEC, md.type_name),
            (T.MEMBER_REF, md.member_ref),
            (T.MEMBER_REF, md.method_signature_text),
            (T.METHOD_SPEC, md.method_spec),
            (T.STAND_ALONE_SIG, md.stand_alone_sig),
            (T.EXPORTED_TYPE, md.type_name),
            (T.FIELD, md.field),
            (T.METHOD_DEF, md.method),
            (T.METHOD_DEF, md.declaring_type),
        ):
            for rid in range(1, md.row_count(t) + 1):
                _try(get, (t << 24) | rid)
        _try(md.assembly)
        _try(md.assembly_refs)
        _try(md.module)
        _try(lambda: list(md.exported_types()))
        _try(md.custom_attribute_types, 0x20000001)
        for off in range(0, 64, 3):
            _try(md.user_string, 0x70000000 | off)
        for i in range(4):
            _try(md.guid, i)


def _mutations(size: int) -> st.SearchStrategy[tuple[list[tuple[int, int]], int | None]]:
    # Half the flips land in the first bytes: root, stream headers, table header, and the
    # first tables, where one byte changes the meaning of everything after it.
    position = st.one_of(st.integers(0, min(size - 1, 600)), st.integers(0, size - 1))
    flips = st.lists(st.tuples(position, st.integers(0, 255)), min_size=1, max_size=6)
    return st.tuples(flips, st.one_of(st.none(), st.integers(0, size)))


def _mutate(blob: bytes, flips: list[tuple[int, int]], cut: int | None) -> bytes:
    b = bytearray(blob)
    for pos, value in flips:
        b[pos] = value
    return bytes(b[:cut] if cut is not None else b)


_FUZZ = settings(
    max_examples=300,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.slow
def test_fuzz_sample_assembly_blob(oracle: Oracle) -> None:
    blob = bytes(metadata_from_pe(oracle.sample.read_bytes(), False))
    exercise(blob)  # the unmodified blob must work all the way through

    @_FUZZ
    @given(_mutations(len(blob)))
    def run(mutation: tuple[list[tuple[int, int]], int | None]) -> None:
        exercise(_mutate(blob, *mutation))

    run()


@needs_framework
def test_fuzz_facade_blob(small_blob: bytes) -> None:
    """Same as above without the SDK: System.Runtime (a facade) is small enough."""

    @settings(_FUZZ, max_examples=100)
    @given(_mutations(len(small_blob)))
    def run(mutation: tuple[list[tuple[int, int]], int | None]) -> None:
        exercise(_mutate(small_blob, *mutation))

    run()


_STREAM_NAMES = ["#~", "#-", "#Strings", "#US", "#Blob", "#GUID", "#JTD", "#Pdb"]


@st.composite
def synthetic_roots(draw: st.DrawFn) -> bytes:
    """A well-formed root over random streams: usually a plausible table stream header
    (a few tables, small row counts) followed by random rows, and random heaps."""
    body = draw(st.binary(min_size=0, max_size=1500))
    tables_first = draw(st.booleans())
    if tables_first:
        mask = st.integers(0, (1 << 45) - 1)
        valid = draw(mask) & draw(mask) & draw(mask)  # about six tables
        counts = [draw(st.integers(0, 6)) for _ in range(bin(valid).count("1"))]
        head = struct.pack("<IBBBBQQ", 0, 2, 0, draw(st.integers(0, 255)), 1, valid, 0)
        body = head + struct.pack(f"<{len(counts)}I", *counts) + body
    names = draw(st.lists(st.sampled_from(_STREAM_NAMES), min_size=1, max_size=6))
    if tables_first:
        names.insert(0, draw(st.sampled_from(["#~", "#-"])))
    version = b"v4.0.30319\0\0"
    header = 16 + len(version) + 4 + sum(8 + (len(n) + 4) // 4 * 4 for n in names)
    out = bytearray(struct.pack("<IHHII", 0x424A5342, 1, 1, 0, len(version)) + version)
    out += struct.pack("<HH", 0, len(names))
    for i, n in enumerate(names):
        if i == 0 and tables_first:
            start, size = 0, len(body)
        else:
            start = draw(st.integers(0, len(body)))
            size = draw(st.integers(0, len(body) - start))
        raw = n.encode() + b"\0"
        out += struct.pack("<II", header + start, size) + raw + b"\0" * (-len(raw) % 4)
    return bytes(out) + body


@settings(_FUZZ, max_examples=300)
@given(st.one_of(st.binary(max_size=600), synthetic_roots(), synthetic_roots()))
def test_fuzz_random_bytes(blob: bytes) -> None:
    exercise(blob)


@needs_framework
def test_fuzz_pe_headers() -> None:
    """Corrupt DOS/PE/section/CLI headers: MetadataError or a BSJB view, nothing else."""
    image = framework_file("System.Runtime.dll").read_bytes()
    cli_area = 0x200  # start of .text, where the CLI header and metadata root sit

    @settings(_FUZZ, max_examples=200)
    @given(
        st.lists(
            st.tuples(st.integers(0, cli_area + 0x100), st.integers(0, 255)),
            min_size=1, max_size=4,
        ),
        st.one_of(st.none(), st.integers(0, len(image))),
        st.booleans(),
    )  # fmt: skip
    def run(flips: list[tuple[int, int]], cut: int | None, mapped: bool) -> None:
        blob = _mutate(image, flips, cut)
        try:
            view = metadata_from_pe(blob, mapped)
        except MetadataError:
            return
        assert bytes(view[:4]) == b"BSJB"

    run()
