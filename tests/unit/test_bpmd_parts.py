"""bpmd's parts that need no process: how its arguments are read (SOS's forms and errors),
how a typed source file matches a PDB document, and the ReadyToRun reader on hostile bytes
(tests/test_bpmd_launch.py checks the reader against the runtime on System.Private.CoreLib)."""
from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sosext.clr.code.breakpoints import BreakRequest, _path_ends_with
from sosext.clr.code.readytorun import READYTORUN_SIGNATURE, precompiled_code
from sosext.commands.breakpoints import _request
from sosext.errors import SosError, TargetError, UsageError


def test_the_forms_sos_reads() -> None:
    assert _request(["App.dll", "App.Program.Main"]) == BreakRequest(module="App.dll", method="App.Program.Main")
    assert _request(["App.dll", "App.Program.Main", "0x1c"]).il_offset == 0x1C
    assert _request(["App.dll", "App.Program.Main", "28"]).il_offset == 28
    assert _request(["src/App.cs:32"]) == BreakRequest(source_file="src/App.cs", line=32)
    assert _request(["App.cs:32"]).describe() == "App.cs:32"
    assert _request(["App.dll", "App.Program.Main", "4"]).describe() == "App.dll!App.Program.Main+4"


@pytest.mark.parametrize(("words", "error"), [
    (["App.cs:x"], "Unable to parse line number"),
    (["App.cs:0"], "Line number must be positive"),
    (["App.cs:-3"], "Line number must be positive"),
    (["App.dll", "Main"], "'Main' is not Namespace.Type.Method"),
])
def test_sos_errors(words: list[str], error: str) -> None:
    with pytest.raises(SosError, match=f"^{error}$"):
        _request(words)


@pytest.mark.parametrize("words", [[], ["App.dll"], ["a", "b.c", "1", "2"], ["App.dll", "A.B", "zz"],
                                   ["App.dll", "A.B", "-1"]])
def test_usage(words: list[str]) -> None:
    with pytest.raises(UsageError):
        _request(words)


@pytest.mark.parametrize(("path", "tail", "matches"), [
    ("/src/app/program.cs", "program.cs", True),
    ("/src/app/program.cs", "app/program.cs", True),
    ("/src/app/program.cs", "/src/app/program.cs", True),
    ("/src/app/myprogram.cs", "program.cs", False),
    ("/src/app/program.cs", "pp/program.cs", False),
])
def test_a_source_file_matches_a_document_by_its_path_tail(path: str, tail: str, matches: bool) -> None:
    assert _path_ends_with(path, tail) is matches


class _Memory:
    """A target whose only memory is ``data`` at ``base``."""

    arch = "x86_64"

    def __init__(self, base: int, data: bytes) -> None:
        self.base, self.data = base, data

    def read(self, address: int, size: int) -> bytes:
        off = address - self.base
        if off < 0 or off + size > len(self.data):
            raise TargetError(f"cannot read {size} bytes at {address:#x}")
        return self.data[off:off + size]


def _image_with_header(sections: bytes, count: int) -> bytearray:
    """An x64 PE image (mapped layout) whose CLI header points to a READYTORUN_HEADER."""
    img = bytearray(0x1000)
    img[0:2] = b"MZ"
    struct.pack_into("<I", img, 0x3C, 0x80)
    struct.pack_into("<I", img, 0x80, 0x00004550)
    struct.pack_into("<H", img, 0x80 + 24, 0x20B)
    struct.pack_into("<II", img, 0x80 + 24 + 112 + 8 * 14, 0x400, 72)  # CLI header at 0x400
    struct.pack_into("<II", img, 0x400 + 64, 0x500, 64)  # ManagedNativeHeader at 0x500
    struct.pack_into("<IHHII", img, 0x500, READYTORUN_SIGNATURE, 9, 0, 0, count)
    img[0x510:0x510 + len(sections)] = sections
    return img


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=0, max_size=0x300), st.integers(0, 40), st.integers(1, 0xFFFFFF))
def test_precompiled_code_never_raises_on_hostile_bytes(tail: bytes, count: int, rid: int) -> None:
    img = _image_with_header(b"", count)
    img[0x510:0x510 + len(tail)] = tail  # section table and whatever follows: anything
    target = _Memory(0x7F0000000000, bytes(img))
    code = precompiled_code(target, target.base, 0x06000000 | rid)  # type: ignore[arg-type]
    assert code is None or target.base <= code < target.base + (1 << 32)


def test_precompiled_code_reads_a_method_entry() -> None:
    # MethodDefEntryPoints (103) at 0x600: one element (rid 1), 1-byte block offsets; RuntimeFunctions
    # (102) at 0x700: two rows, the method's id names row 1.
    sections = struct.pack("<III", 102, 0x700, 24) + struct.pack("<III", 103, 0x600, 16)
    img = _image_with_header(sections, 2)
    # Array header: count 1 << 2 | width 0, as a 1-byte unsigned (value << 1); then the block
    # offset table (1 byte), then the block's root: a leaf for element 0 (value 0), then the id.
    img[0x600] = (1 << 2) << 1
    img[0x601] = 1  # the block's root node is 1 byte after the table's start
    img[0x602] = 0  # leaf: element 0 of the block
    img[0x603] = (1 << 1) << 1  # id: no fixups (bit 0 clear), runtime function 1
    struct.pack_into("<III", img, 0x700, 0x900, 0x910, 0)
    struct.pack_into("<III", img, 0x70C, 0xA00, 0xA40, 0)
    target = _Memory(0x7F0000000000, bytes(img))
    assert precompiled_code(target, target.base, 0x06000001) == target.base + 0xA00  # type: ignore[arg-type]
    assert precompiled_code(target, target.base, 0x06000002) is None  # type: ignore[arg-type]
    assert precompiled_code(target, target.base, 0x02000001) is None  # type: ignore[arg-type]
