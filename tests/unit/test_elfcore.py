"""Tests for sosext's ELF core reader: synthetic cores built here byte by byte, hypothesis
fuzzing of garbled ones, and real createdump cores of a small .NET program (marked slow)."""
from __future__ import annotations

import json
import os
import select
import shutil
import signal
import struct
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sosext.errors import MemoryReadError, SosError, TargetError
from sosext.targets.base import Target
from sosext.targets.elfcore import SPECIAL_DIAGINFO_ADDRESS, CoreTarget, ElfCore

# ---------------------------------------------------------------------------------------------
# A tiny ELF core writer (from the ELF gABI and Linux elf.h layouts, independent of the reader)

X86_REGS = ("r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_rax rip cs eflags "
            "rsp ss fs_base gs_base ds es fs gs").split()
ARM_REGS = [f"x{i}" for i in range(31)] + ["sp", "pc", "pstate"]


def pad4(b: bytes) -> bytes:
    return b + b"\0" * (-len(b) % 4)


def note(name: bytes, ntype: int, desc: bytes) -> bytes:
    n = name + b"\0"
    return struct.pack("<III", len(n), len(desc), ntype) + pad4(n) + pad4(desc)


def prstatus(tid: int, regs: list[int], cursig: int = 0) -> bytes:
    desc = bytearray(112 + 8 * len(regs) + 8)  # + pr_fpvalid and padding
    struct.pack_into("<h", desc, 12, cursig)
    struct.pack_into("<i", desc, 32, tid)
    struct.pack_into(f"<{len(regs)}Q", desc, 112, *regs)
    return note(b"CORE", 1, bytes(desc))


def nt_file(entries: list[tuple[int, int, int, str]], page_size: int = 4096) -> bytes:
    """entries: (start, end, page_offset, path)."""
    desc = struct.pack("<QQ", len(entries), page_size)
    desc += b"".join(struct.pack("<QQQ", s, e, o) for s, e, o, _ in entries)
    desc += b"".join(p.encode() + b"\0" for *_, p in entries)
    return note(b"CORE", 0x46494C45, desc)


def prpsinfo(pid: int, fname: str, psargs: str) -> bytes:
    desc = bytearray(136)
    struct.pack_into("<i", desc, 24, pid)
    desc[40:40 + len(fname)] = fname.encode()
    desc[56:56 + len(psargs)] = psargs.encode()
    return note(b"CORE", 3, bytes(desc))


def auxv(pairs: list[tuple[int, int]]) -> bytes:
    return note(b"CORE", 6, b"".join(struct.pack("<QQ", a, v) for a, v in pairs + [(0, 0)]))


@dataclass
class Load:
    vaddr: int
    data: bytes
    memsz: int | None = None  # default len(data)
    flags: int = 6


def make_core(loads: list[Load], notes: list[bytes] = (), *, machine: int = 62, e_type: int = 4,
              xnum: bool = False, ident: bytes | None = None) -> bytes:
    """An ELF64 LE core: header, program headers (PT_NOTE first), [section header 0], notes,
    then each PT_LOAD's bytes."""
    blob_notes = b"".join(notes)
    phnum = len(loads) + (1 if notes else 0)
    phoff = 64
    shoff = phoff + 56 * phnum if xnum else 0
    notes_off = phoff + 56 * phnum + (64 if xnum else 0)
    data_off = notes_off + len(blob_notes)
    data_off += -data_off % 16
    ident = ident or (b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8))
    ehdr = struct.pack("<16sHHIQQQIHHHHHH", ident, e_type, machine, 1, 0, phoff, shoff, 0, 64, 56,
                       0xFFFF if xnum else phnum, 64 if xnum else 0, 1 if xnum else 0, 0)
    phdrs = b""
    if notes:
        phdrs += struct.pack("<IIQQQQQQ", 4, 0, notes_off, 0, 0, len(blob_notes), 0, 4)
    body = b""
    for ld in loads:
        memsz = len(ld.data) if ld.memsz is None else ld.memsz
        phdrs += struct.pack("<IIQQQQQQ", 1, ld.flags, data_off + len(body), ld.vaddr, 0,
                             len(ld.data), memsz, 0x1000)
        body += ld.data
    shdr = struct.pack("<IIQQQQIIQQ", 0, 0, 0, 0, 0, 0, 0, phnum, 0, 0) if xnum else b""
    head = ehdr + phdrs + shdr + blob_notes
    return head + b"\0" * (data_off - len(head)) + body


def make_elf_image(build_id: bytes, size: int = 0x3000, vaddr: int = 0, *,
                   writable_at: int | None = None) -> bytes:
    """A small ET_DYN image: one R PT_LOAD over the whole file at ``vaddr``, a PT_NOTE holding
    the GNU build id at file offset 0x200, and optionally a RW PT_LOAD from ``writable_at``."""
    gnu = note(b"GNU", 3, build_id)
    phdrs = [struct.pack("<IIQQQQQQ", 1, 4, 0, vaddr, vaddr, size, size, 0x1000),
             struct.pack("<IIQQQQQQ", 4, 4, 0x200, vaddr + 0x200, vaddr + 0x200, len(gnu),
                         len(gnu), 4)]
    if writable_at is not None:
        n = size - writable_at
        phdrs.append(struct.pack("<IIQQQQQQ", 1, 6, writable_at, vaddr + writable_at,
                                 vaddr + writable_at, n, n, 0x1000))
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
    ehdr = struct.pack("<16sHHIQQQIHHHHHH", ident, 3, 62, 1, 0, 64, 0, 0, 64, 56, len(phdrs),
                       0, 0, 0)
    img = bytearray(pattern(size, seed=9))
    head = ehdr + b"".join(phdrs)
    img[:len(head)] = head
    img[0x200:0x200 + len(gnu)] = gnu
    return bytes(img)


def pattern(n: int, seed: int = 0) -> bytes:
    return bytes((i * 131 + seed * 17 + (i >> 8)) & 0xFF for i in range(n))


def write(tmp_path: Path, blob: bytes, name: str = "core") -> Path:
    p = tmp_path / name
    p.write_bytes(blob)
    return p


# ---------------------------------------------------------------------------------------------
# Reads from the core

def test_reads_within_and_across_segments(tmp_path: Path) -> None:
    a, b, c = pattern(0x1000, 1), pattern(0x1000, 2), pattern(0x800, 3)
    core = make_core([Load(0x10000, a), Load(0x11000, b), Load(0x20000, c)])
    with CoreTarget(write(tmp_path, core)) as t:
        inside = t.read_partial(0x10010, 32)
        assert isinstance(inside, memoryview)  # zero-copy from the mapped core
        assert inside == a[0x10:0x30]
        assert t.read_partial(0x10ff0, 0x20) == a[-0x10:] + b[:0x10]  # crosses two segments
        assert t.read_partial(0x10000, 0x3000) == a + b  # stops at the gap after 0x12000
        assert t.read_partial(0x20700, 0x200) == c[0x700:]  # stops at the end of memory
        assert t.read_partial(0x12000, 8) == b""
        assert t.read_partial(0xFFFF, 8) == b""  # just before the first segment
        assert t.read_partial(0x10000, 0) == b""
        assert t.read(0x11000, 0x1000) == b
        assert isinstance(t.read(0x11000, 4), bytes)
        with pytest.raises(MemoryReadError):
            t.read(0x11ff0, 0x20)
        assert t.read_pointer(0x20000) == int.from_bytes(c[:8], "little")
        buf = bytearray(0x1800)
        assert t.read_into(0x10800, memoryview(buf)) == 0x1800
        assert bytes(buf) == a[0x800:] + b
        buf = bytearray(0x1000)
        assert t.read_into(0x20400, memoryview(buf)) == 0x400
        assert bytes(buf[:0x400]) == c[0x400:]
        assert t.read_into(0x30000, memoryview(buf)) == 0


def test_many_small_reads_and_one_big_read(tmp_path: Path) -> None:
    loads = [Load(0x100000 + i * 0x2000, pattern(0x1000, i)) for i in range(500)]
    with ElfCore(write(tmp_path, make_core(loads))) as core:
        for i in range(0, 500, 7):
            base = 0x100000 + i * 0x2000
            for off in range(0, 0x1000, 0x108):
                assert core.read_partial(base + off, 8) == pattern(0x1000, i)[off:off + 8]
            assert core.read_partial(base + 0x1000, 8) == b""
    big = pattern(8 << 20, 5)
    with ElfCore(write(tmp_path, make_core([Load(0x7F0000000000, big)]), "big")) as core:
        assert core.read_partial(0x7F0000000000, len(big) + 100) == big


def test_target_protocol_and_describe(tmp_path: Path) -> None:
    notes = [prpsinfo(42, "dotnet", "dotnet app.dll")]
    path = write(tmp_path, make_core([Load(0x1000, b"x" * 16)], notes))
    with CoreTarget(path) as t:
        assert isinstance(t, Target)
        assert (t.pointer_size, t.arch, t.is_live, t.generation) == (8, "x86_64", False, 0)
        assert t.describe() == f"core file {path}"
        assert t.path == str(path)
        assert t.core.process is not None
        p = t.core.process
        assert (p.pid, p.fname, p.psargs) == (42, "dotnet", "dotnet app.dll")


# ---------------------------------------------------------------------------------------------
# Pages the core left out, served from the files NT_FILE names

def test_filesz_below_memsz_is_served_from_the_mapped_file(tmp_path: Path) -> None:
    lib = pattern(0x3800, 7)  # ends mid-page: the rest of that page reads as zeros
    (tmp_path / "libfoo.so").write_bytes(lib)
    held = b"\xAA" * 0x1000  # the core's own copy of the first page differs from the file
    core = make_core(
        [Load(0x400000, held, memsz=0x3000), Load(0x500000, b"", memsz=0x1000)],
        [nt_file([(0x400000, 0x403000, 1, str(tmp_path / "libfoo.so")),
                  (0x500000, 0x501000, 0, str(tmp_path / "gone.so"))])])
    with ElfCore(write(tmp_path, core)) as c:
        assert c.read_partial(0x400000, 0x1000) == held  # p_filesz part: from the core
        from_file = c.read_partial(0x401000, 0x1000)
        assert isinstance(from_file, memoryview)  # zero-copy from the mapped module file
        assert from_file == lib[0x2000:0x3000]  # offset = page_offset * page_size + delta
        assert c.read_partial(0x400ff0, 0x20) == held[-0x10:] + lib[0x2000:0x2010]
        assert c.read_partial(0x400000, 0x4000) == held + lib[0x2000:0x3800] + bytes(0x800)
        assert c.read_partial(0x500000, 16) == b""  # the file is missing: no bytes
        ranges = c.memory_ranges()
    assert [(r.start, r.end, r.readable, r.path) for r in ranges] == [
        (0x400000, 0x401000, True, ""),
        (0x401000, 0x403000, True, str(tmp_path / "libfoo.so")),
        (0x500000, 0x501000, False, str(tmp_path / "gone.so")),
    ]


def test_mapping_without_pt_load_is_served_from_file(tmp_path: Path) -> None:
    # createdump heap dumps omit module images entirely: NT_FILE names them, no PT_LOAD covers them
    lib = pattern(0x2000, 4)
    (tmp_path / "mod.dll").write_bytes(lib)
    core = make_core([Load(0x10000, b"h" * 0x100)],
                     [nt_file([(0x7000000, 0x7002000, 0, str(tmp_path / "mod.dll"))])])
    with CoreTarget(write(tmp_path, core)) as t:
        assert t.read(0x7000000, 4) == lib[:4]
        assert t.read_partial(0x7001ff0, 0x100) == lib[-0x10:]
        assert t.read_partial(0x10000, 0x100) == b"h" * 0x100


def test_search_dirs_and_deleted_files(tmp_path: Path) -> None:
    found = tmp_path / "syms"
    found.mkdir()
    (found / "libbar.so").write_bytes(pattern(0x1000, 8))
    (tmp_path / "libdel.so").write_bytes(pattern(0x1000, 9))
    core = make_core([Load(0x10000, b"z" * 16)], [nt_file([
        (0x600000, 0x601000, 0, "/nonexistent/build/libbar.so"),
        (0x700000, 0x701000, 0, f"{tmp_path}/libdel.so (deleted)"),
    ])])
    path = write(tmp_path, core)
    with CoreTarget(path) as t:
        assert t.read_partial(0x600000, 4) == b""
    with CoreTarget(path, search_dirs=[str(tmp_path / "empty"), str(found)]) as t:
        assert t.read_partial(0x600000, 16) == pattern(0x1000, 8)[:16]
        assert t.core.local_path("/nonexistent/build/libbar.so") == str(found / "libbar.so")
        assert t.read_partial(0x700000, 4) == b""  # never a file that replaced a deleted one


def test_pages_the_loader_writes_are_not_taken_from_the_file(tmp_path: Path) -> None:
    # RW / RELRO segments hold relocated pointers and live data: the file's bytes are stale
    img = make_elf_image(b"\x11" * 20, size=0x4000, writable_at=0x2000)
    (tmp_path / "librw.so").write_bytes(img)
    core = make_core([Load(0x10000, b"q" * 16)], [nt_file([
        (0x800000, 0x802000, 0, str(tmp_path / "librw.so")),  # r--p at offset 0
        (0x802000, 0x804000, 2, str(tmp_path / "librw.so")),  # rw-p at offset 0x2000
    ])])
    with ElfCore(write(tmp_path, core)) as c:
        assert c.read_partial(0x800000, 0x3000) == img[:0x2000]
        assert c.read_partial(0x802000, 16) == b""
        assert [r.readable for r in c.memory_ranges() if r.path] == [True, False]


def test_a_different_file_on_disk_is_not_read(tmp_path: Path) -> None:
    # The core holds the image's first page (headers, build id): a file on disk with other
    # headers is another build (another machine's library) and must not supply bytes.
    mapped = make_elf_image(b"\x66" * 20, size=0x3000)
    other = make_elf_image(b"\x77" * 20, size=0x3000)
    entries = [(0x900000, 0x903000, 0, str(tmp_path / "libx.so"))]
    core = make_core([Load(0x900000, mapped[:0x1000], memsz=0x3000)], [nt_file(entries)])
    path = write(tmp_path, core)
    (tmp_path / "libx.so").write_bytes(mapped)
    with ElfCore(path) as c:
        assert c.read_partial(0x900000, 0x3000) == mapped
        assert c.warnings == []
    (tmp_path / "libx.so").write_bytes(other)
    with ElfCore(path) as c:
        assert c.read_partial(0x900000, 0x3000) == mapped[:0x1000]
        assert len(c.warnings) == 1 and "differs" in c.warnings[0]
        assert c.build_id(str(tmp_path / "libx.so")) == b"\x66" * 20  # from the core's page


# ---------------------------------------------------------------------------------------------
# Headers and notes

def test_pn_xnum_small(tmp_path: Path) -> None:
    core = make_core([Load(0x1000, b"a" * 32), Load(0x2000, b"b" * 32)],
                     [prstatus(5, list(range(27)))], xnum=True)
    with ElfCore(write(tmp_path, core)) as c:
        assert [s.start for s in c.segments] == [0x1000, 0x2000]
        assert c.read_partial(0x2000, 4) == b"bbbb"
        assert c.threads[0].tid == 5


def test_pn_xnum_with_more_than_65535_segments(tmp_path: Path) -> None:
    n = 70000
    loads = [Load(0x10000000 + i * 0x1000, i.to_bytes(8, "little")) for i in range(n)]
    with ElfCore(write(tmp_path, make_core(loads, xnum=True))) as c:
        assert len(c.segments) == n
        for i in (0, 1, 65535, 65536, n - 1):
            assert c.read_partial(0x10000000 + i * 0x1000, 8) == i.to_bytes(8, "little")


def test_prstatus_registers_x86_64(tmp_path: Path) -> None:
    regs1 = [0x1000 + i for i in range(27)]
    regs2 = [0x2000 + i for i in range(27)]
    notes = [prstatus(101, regs1, cursig=11), prstatus(77, regs2)]
    core = make_core([Load(0x1000, b"s" * 8)], notes)
    with CoreTarget(write(tmp_path, core)) as t:
        assert [(th.tid, th.index) for th in t.threads()] == [(101, 0), (77, 1)]  # numbered from 0 as dotnet-dump
        assert t.registers(101) == dict(zip(X86_REGS, regs1))
        assert t.registers(77)["rip"] == 0x2000 + X86_REGS.index("rip")
        assert t.registers(77)["rsp"] == 0x2000 + X86_REGS.index("rsp")
        assert t.core.threads[0].signal == 11
        with pytest.raises(TargetError, match="no thread 0x5 in core file"):
            t.registers(5)


def test_prstatus_registers_aarch64(tmp_path: Path) -> None:
    regs = [0xA000 + i for i in range(34)]
    core = make_core([Load(0x1000, b"s" * 8)], [prstatus(9, regs)], machine=183)
    with CoreTarget(write(tmp_path, core)) as t:
        assert t.arch == "aarch64"
        r = t.registers(9)
        assert r == dict(zip(ARM_REGS, regs))
        assert (r["x0"], r["x30"], r["sp"], r["pc"], r["pstate"]) == (
            0xA000, 0xA01E, 0xA01F, 0xA020, 0xA021)


def test_nt_file_modules_auxv_and_build_ids(tmp_path: Path) -> None:
    libc = make_elf_image(bytes(range(20)), size=0x3000)
    (tmp_path / "libc.so.6").write_bytes(libc)
    (tmp_path / "App.dll").write_bytes(b"MZ" + bytes(0x1FFE))
    exe_disk = make_elf_image(b"\x22" * 20, vaddr=0x400000)  # non-PIE: notes at p_vaddr
    exe_mem = make_elf_image(b"\x33" * 20, vaddr=0x400000)
    (tmp_path / "app").write_bytes(exe_disk)
    garbage = b"not an elf image".ljust(0x1000, b"\0")
    (tmp_path / "libz.so").write_bytes(make_elf_image(b"\x44" * 8))
    entries = [
        (0x7F0000000000, 0x7F0000001000, 0, str(tmp_path / "libc.so.6")),
        (0x7F0000001000, 0x7F0000003000, 1, str(tmp_path / "libc.so.6")),
        (0x7F0000100000, 0x7F0000102000, 0, str(tmp_path / "App.dll")),
        (0x400000, 0x403000, 0, str(tmp_path / "app")),
        (0x7F0000200000, 0x7F0000201000, 0, str(tmp_path / "libz.so")),
        (0x7F0000300000, 0x7F0000301000, 0, "/no/such/libgone.so"),
    ]
    core = make_core([Load(0x400000, exe_mem), Load(0x7F0000200000, garbage)],
                     [nt_file(entries), auxv([(6, 4096), (33, 0x7FFF0000)])])
    with CoreTarget(write(tmp_path, core)) as t:
        c = t.core
        assert c.page_size == 4096
        assert [(m.start, m.end, m.offset, m.path) for m in c.file_mappings] == sorted(
            (s, e, o * 4096, p) for s, e, o, p in entries)
        assert c.auxv == [(6, 4096), (33, 0x7FFF0000), (0, 0)]
        mods = {m.name: m for m in t.modules()}
        assert [m.base for m in t.modules()] == sorted(m.base for m in mods.values())
        assert (mods["libc.so.6"].base, mods["libc.so.6"].size) == (0x7F0000000000, 0x3000)
        assert mods["libc.so.6"].build_id == bytes(range(20))  # through memory served from disk
        assert mods["app"].build_id == b"\x33" * 20  # the image in memory wins over the file
        assert mods["libz.so"].build_id == b"\x44" * 8  # memory is garbage: the file on disk
        assert mods["App.dll"].build_id is None  # a PE file
        assert mods["libgone.so"].build_id is None
        assert t.find_module("libc.so.6") == mods["libc.so.6"]
        assert t.module_at(0x7F0000002FFF) == mods["libc.so.6"]


def test_diag_info_page(tmp_path: Path) -> None:
    page = bytearray(0x1000)
    page[:14] = b"DIAGINFOHEADER"
    # version, 4 bytes of C padding, exception record, runtime base
    struct.pack_into("<i4xQQ", page, 16, 2, 0x1234, 0x7F00AA000000)
    with CoreTarget(write(tmp_path, make_core([Load(SPECIAL_DIAGINFO_ADDRESS, bytes(page))]))) as t:
        info = t.diag_info()
        assert info is not None
        assert (info.version, info.exception_record, info.runtime_base) == (
            2, 0x1234, 0x7F00AA000000)
    with CoreTarget(write(tmp_path, make_core([Load(0x1000, b"x")]), "nodiag")) as t:
        assert t.diag_info() is None


def test_close(tmp_path: Path) -> None:
    lib = pattern(0x1000)
    (tmp_path / "lib.so").write_bytes(lib)
    core = make_core([Load(0x1000, b"abcd" * 4)],
                     [nt_file([(0x9000, 0xA000, 0, str(tmp_path / "lib.so"))])])
    t = CoreTarget(write(tmp_path, core))
    held = t.read_partial(0x1000, 4)  # a view still alive when the target closes
    assert t.read_partial(0x9000, 4) == lib[:4]
    t.close()
    t.close()
    assert held == b"abcd"
    assert t.read_partial(0x1000, 4) == b""
    with pytest.raises(MemoryReadError):
        t.read(0x1000, 4)


# ---------------------------------------------------------------------------------------------
# Bad input: one-line TargetError messages

def one_line_error(path: Path, match: str, **kw: object) -> None:
    with pytest.raises(TargetError, match=match) as info:
        ElfCore(path, **kw)
    assert "\n" not in str(info.value)


def test_bad_files(tmp_path: Path) -> None:
    one_line_error(tmp_path / "missing", r"cannot open core file .*missing: No such file")
    one_line_error(tmp_path, r"^not a core file: .* is a directory$")
    one_line_error(Path("/dev/zero"), r"^not a core file: /dev/zero is a character device, not a regular file$")
    one_line_error(write(tmp_path, b"", "empty"), r"not an ELF core file: .*empty \(empty file\)")
    one_line_error(write(tmp_path, b"hello world" * 10, "text"), r"^not an ELF core file: .*text$")
    good = make_core([Load(0x1000, b"x" * 8)], [prstatus(1, [0] * 27)])
    one_line_error(write(tmp_path, good[:40], "short"), r"^not an ELF core file: .*short$")
    one_line_error(write(tmp_path, make_core([Load(0x1000, b"x")], e_type=2), "exec"),
                   r"not an ELF core file: .*exec \(ELF type 2, not ET_CORE\)")
    one_line_error(write(tmp_path, make_core([Load(0x1000, b"x")], machine=40), "arm32"),
                   r"unsupported core file: .*arm32 \(machine 40")
    elf32 = b"\x7fELF" + bytes([1, 1, 1, 0]) + bytes(8)
    one_line_error(write(tmp_path, make_core([Load(0x1000, b"x")], ident=elf32), "e32"),
                   r"unsupported core file: .*e32 \(only 64-bit little-endian")
    one_line_error(write(tmp_path, good[:64 + 56], "cut_ph"),
                   r"truncated core file: .*cut_ph \(2 program headers")
    one_line_error(write(tmp_path, good[:64 + 112 + 20], "cut_note"),
                   r"truncated core file: .*cut_note \(PT_NOTE")
    short_prstatus = note(b"CORE", 1, bytes(200))
    one_line_error(write(tmp_path, make_core([Load(0x1000, b"x")], [short_prstatus]), "prs"),
                   r"malformed core file: .*prs \(NT_PRSTATUS of 200 bytes")
    bad_file = note(b"CORE", 0x46494C45, struct.pack("<QQ", 1 << 40, 4096))
    one_line_error(write(tmp_path, make_core([Load(0x1000, b"x")], [bad_file]), "ntf"),
                   r"malformed core file: .*ntf \(NT_FILE claims")
    xnum = make_core([Load(0x1000, b"x")], xnum=True)
    xnum = xnum[:40] + struct.pack("<Q", len(xnum) + 10) + xnum[48:]  # e_shoff past the end
    one_line_error(write(tmp_path, xnum, "xnum"), r"truncated core file: .*xnum \(section header 0")


def test_truncated_segment_data_is_readable_up_to_the_cut(tmp_path: Path) -> None:
    data = pattern(0x2000)
    blob = make_core([Load(0x10000, data)])
    with ElfCore(write(tmp_path, blob[:-0x800])) as c:
        assert c.read_partial(0x10000, 0x2000) == data[:0x1800]
        assert c.warnings and "cut off" in c.warnings[0]
        ranges = c.memory_ranges()
    assert [(r.start, r.end, r.readable) for r in ranges] == [(0x10000, 0x11800, True),
                                                              (0x11800, 0x12000, False)]


# ---------------------------------------------------------------------------------------------
# Fuzzing: garbled cores raise TargetError or open; nothing else, and nothing hangs

def _fuzz_base(tmp: Path) -> tuple[bytes, int]:
    lib = make_elf_image(b"\x55" * 20, size=0x2000, writable_at=0x1000)
    (tmp / "libfz.so").write_bytes(lib)
    notes = [prpsinfo(7, "fz", "fz --x"), auxv([(6, 4096)]),
             nt_file([(0x500000, 0x502000, 0, str(tmp / "libfz.so")),
                      (0x600000, 0x601000, 0, "/missing/lib.so")]),
             prstatus(7, list(range(27))), prstatus(8, list(range(100, 127)))]
    loads = [Load(0x10000, pattern(0x300)), Load(0x10300, pattern(0x100, 1)),
             Load(0x500000, lib[:0x1000], memsz=0x2000),
             Load(SPECIAL_DIAGINFO_ADDRESS, b"DIAGINFOHEADER")]
    blob = make_core(loads, notes)
    header = 64 + 56 * (len(loads) + 1) + len(b"".join(notes))
    return blob, header


def _exercise(path: Path, tmp: Path) -> None:
    try:
        t = CoreTarget(path, search_dirs=[str(tmp)])
    except TargetError:
        return
    with t:
        for r in t.memory_ranges()[:64]:
            t.read_partial(r.start, min(r.end - r.start, 1 << 16))
            t.read_partial(r.start - 4, 64)
            t.read_into(r.start, memoryview(bytearray(256)))
        for th in t.threads():
            t.registers(th.tid)
        t.modules()
        t.diag_info()
        t.describe()
        try:
            t.read(0x10000, 0x400)
        except MemoryReadError:
            pass


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def test_fuzz_base_core_is_valid(fuzz_dir: Path) -> None:
    blob, _ = _fuzz_base(fuzz_dir)
    path = write(fuzz_dir, blob, "base")
    with CoreTarget(path, search_dirs=[str(fuzz_dir)]) as t:
        assert [th.tid for th in t.threads()] == [7, 8]
        assert t.read(0x10000, 0x400) == pattern(0x300) + pattern(0x100, 1)
        assert t.read(0x501000, 4) == (fuzz_dir / "libfz.so").read_bytes()[0x1000:0x1004]
        assert len(t.modules()) == 2
    _exercise(path, fuzz_dir)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fuzz_truncated(fuzz_dir: Path, data: st.DataObject) -> None:
    blob, _ = _fuzz_base(fuzz_dir)
    cut = data.draw(st.integers(0, len(blob)))
    _exercise(write(fuzz_dir, blob[:cut], "trunc"), fuzz_dir)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fuzz_garbled_headers_and_notes(fuzz_dir: Path, data: st.DataObject) -> None:
    blob, header = _fuzz_base(fuzz_dir)
    garbled = bytearray(blob)
    flips = data.draw(st.lists(st.tuples(st.integers(0, header - 1), st.integers(0, 255)),
                               min_size=1, max_size=12))
    for pos, value in flips:
        garbled[pos] = value
    if data.draw(st.booleans()):  # and sometimes a whole word: huge counts, sizes, offsets
        pos = data.draw(st.integers(0, header - 8))
        word = data.draw(st.sampled_from([0, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF, 1 << 63, 0x7FFFFFFF]))
        garbled[pos:pos + 8] = word.to_bytes(8, "little")
    _exercise(write(fuzz_dir, bytes(garbled), "garbled"), fuzz_dir)


# ---------------------------------------------------------------------------------------------
# Real cores written by the runtime's createdump

PROGRAM = r"""
using System;
using System.Runtime.InteropServices;
class Program {
    static byte[] pinned;
    static void Main() {
        pinned = GC.AllocateArray<byte>(8192, pinned: true);
        for (int i = 0; i < pinned.Length; i++) pinned[i] = (byte)(i * 7 + 3);
        long addr = Marshal.UnsafeAddrOfPinnedArrayElement(pinned, 0).ToInt64();
        Console.WriteLine($"{{\"pid\": {Environment.ProcessId}, \"pinned\": {addr}, " +
                          $"\"length\": {pinned.Length}}}");
        Console.Out.Flush();
        Console.ReadLine();
        GC.KeepAlive(pinned);
    }
}
"""

PROJECT = """<Project Sdk="Microsoft.NET.Sdk">
  <PropertyGroup>
    <OutputType>Exe</OutputType>
    <TargetFramework>net10.0</TargetFramework>
    <UseAppHost>false</UseAppHost>
    <Nullable>disable</Nullable>
  </PropertyGroup>
</Project>
"""


@dataclass
class MapLine:
    start: int
    end: int
    perms: str
    offset: int
    path: str


@dataclass
class Dumps:
    pid: int
    tids: set[int]
    maps: list[MapLine]
    heap: Path
    full: Path
    pinned: int
    pinned_bytes: bytes
    mem: dict[int, bytes] = field(default_factory=dict)  # anonymous memory read from /proc/pid/mem


def _parse_maps(text: str) -> list[MapLine]:
    out = []
    for line in text.splitlines():
        parts = line.split(None, 5)
        lo, hi = parts[0].split("-")
        out.append(MapLine(int(lo, 16), int(hi, 16), parts[1], int(parts[2], 16),
                           parts[5].strip() if len(parts) > 5 else ""))
    return out


def _wait_stopped(pid: int) -> None:
    for _ in range(200):
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "T":
                return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} did not stop")


@pytest.fixture(scope="module")
def dumps(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dumps]:
    if shutil.which("dotnet") is None:
        pytest.skip("the .NET SDK (dotnet) is not installed")
    d = _make_dumps(tmp_path_factory.mktemp("elfcore_debuggee"))
    yield d
    for core in (d.heap, d.full):  # ~200 MB together; pytest keeps its last temp dirs
        core.unlink(missing_ok=True)


def _make_dumps(work: Path) -> Dumps:
    """Build and run the debuggee, stop it, write both dumps, read its memory, kill it."""
    (work / "app.csproj").write_text(PROJECT)
    (work / "Program.cs").write_text(PROGRAM)
    env = dict(os.environ, DOTNET_CLI_TELEMETRY_OPTOUT="1", DOTNET_NOLOGO="1",
               DOTNET_SKIP_FIRST_TIME_EXPERIENCE="1")
    build = subprocess.run(["dotnet", "build", "-c", "Release", "-o", str(work / "out")], cwd=work,
                           env=env, capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    proc = subprocess.Popen(["dotnet", str(work / "out" / "app.dll")], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready, "debuggee printed nothing"
        info = json.loads(proc.stdout.readline())
        pid = info["pid"]
        assert pid == proc.pid
        os.kill(pid, signal.SIGSTOP)  # stable bytes for /proc/pid/mem and both dumps
        _wait_stopped(pid)
        maps = _parse_maps(Path(f"/proc/{pid}/maps").read_text())
        tids = {int(t) for t in os.listdir(f"/proc/{pid}/task")}
        coreclr = next(m for m in maps if m.path.endswith("/libcoreclr.so"))
        createdump = Path(coreclr.path).parent / "createdump"
        heap, full = work / "heap.core", work / "full.core"
        for out, kind in ((heap, "--withheap"), (full, "--full")):
            r = subprocess.run([str(createdump), "-f", str(out), kind, str(pid)],
                               capture_output=True, text=True, timeout=300)
            assert r.returncode == 0, r.stdout + r.stderr
        _wait_stopped(pid)  # createdump detaches and leaves the process stopped
        mem: dict[int, bytes] = {}
        with open(f"/proc/{pid}/mem", "rb", buffering=0) as f:
            pinned_bytes = os.pread(f.fileno(), info["length"], info["pinned"])
            for m in maps:
                if m.path == "" and m.perms.startswith("rw") and len(mem) < 40:
                    try:
                        mem[m.start] = os.pread(f.fileno(), min(m.end - m.start, 0x4000), m.start)
                    except OSError:
                        pass
        return Dumps(pid, tids, maps, heap, full, info["pinned"], pinned_bytes, mem)
    finally:
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)
        proc.stdout.close()
        proc.stdin.close()


def _coreclr_maps(d: Dumps) -> list[MapLine]:
    return [m for m in d.maps if m.path.endswith("/libcoreclr.so")]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["heap", "full"])
def test_real_core_modules_threads_registers(dumps: Dumps, kind: str) -> None:
    with CoreTarget(getattr(dumps, kind)) as t:
        coreclr = t.find_module("libcoreclr.so")
        assert coreclr is not None
        lines = _coreclr_maps(dumps)
        assert coreclr.base == min(m.start for m in lines)
        assert coreclr.base + coreclr.size == max(m.end for m in lines)
        assert coreclr.path == lines[0].path
        assert coreclr.build_id is not None
        if shutil.which("readelf"):
            out = subprocess.run(["readelf", "-n", coreclr.path], capture_output=True,
                                 text=True).stdout
            assert f"Build ID: {coreclr.build_id.hex()}" in out
        assert t.read(coreclr.base, 4) == b"\x7fELF"
        assert t.diag_info() is not None and t.diag_info().runtime_base == coreclr.base
        t.memory_ranges()  # opens and checks every module file
        assert t.core.warnings == []

        tids = [th.tid for th in t.threads()]
        assert set(tids) == dumps.tids
        assert dumps.pid in tids
        assert [th.index for th in t.threads()] == list(range(len(tids)))  # from 0 as dotnet-dump
        assert t.core.process is not None and t.core.process.pid == dumps.pid

        def mapped(addr: int, perm: str) -> bool:
            return any(m.start <= addr < m.end and perm in m.perms for m in dumps.maps)

        for tid in tids:
            regs = t.registers(tid)
            assert mapped(regs["rip"], "x"), hex(regs["rip"])
            assert mapped(regs["rsp"], "rw"), hex(regs["rsp"])
            assert len(t.read_partial(regs["rsp"], 64)) == 64  # stacks are in both dumps


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["heap", "full"])
def test_real_core_image_bytes_match_the_file(dumps: Dumps, kind: str) -> None:
    text = next(m for m in _coreclr_maps(dumps) if "x" in m.perms)
    assert text.end - text.start >= 0x20000
    addr = text.start + 0x10000
    with open(text.path, "rb") as f:
        expected = os.pread(f.fileno(), 0x10000, text.offset + 0x10000)
    with CoreTarget(getattr(dumps, kind)) as t:
        assert t.read(addr, 0x10000) == expected
        from_disk = [r for r in t.memory_ranges() if r.path == text.path and r.readable]
        if kind == "heap":
            # createdump heap dumps leave module text out: these bytes came from the file
            assert any(r.start <= addr and addr + 0x10000 <= r.end for r in from_disk)
        else:
            assert from_disk == []  # a full dump holds every page itself


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["heap", "full"])
def test_real_core_anonymous_memory_matches_the_process(dumps: Dumps, kind: str) -> None:
    with CoreTarget(getattr(dumps, kind)) as t:
        assert t.read(dumps.pinned, len(dumps.pinned_bytes)) == dumps.pinned_bytes
        assert dumps.pinned_bytes[:4] == bytes([3, 10, 17, 24])
        compared = 0
        for addr, want in dumps.mem.items():
            got = t.read_partial(addr, len(want))
            if kind == "full":
                assert got == want, hex(addr)
            elif len(got):
                assert got == want[:len(got)], hex(addr)
            compared += len(got) > 0
        assert compared >= 5


@pytest.mark.slow
def test_heap_dump_agrees_with_full_dump_wherever_it_reads(dumps: Dumps) -> None:
    # Pages served from module files must be the process's bytes: compare against the full dump.
    with CoreTarget(dumps.heap) as h, CoreTarget(dumps.full) as f:
        served = 0
        for r in h.memory_ranges():
            if r.readable:
                got = h.read_partial(r.start, r.end - r.start)
                assert len(got) == r.end - r.start
                assert got == f.read_partial(r.start, r.end - r.start), (hex(r.start), r.path)
                served += bool(r.path) * len(got)
        assert served > 1 << 20


@pytest.mark.slow
def test_real_core_segments_agree_with_pyelftools(dumps: Dumps) -> None:
    elffile = pytest.importorskip("elftools.elf.elffile")
    with open(dumps.heap, "rb") as fh, ElfCore(dumps.heap) as c:
        elf = elffile.ELFFile(fh)
        loads = sorted((s["p_vaddr"], s["p_vaddr"] + s["p_memsz"], s["p_offset"], s["p_filesz"])
                       for s in elf.iter_segments() if s["p_type"] == "PT_LOAD")
        assert [(s.start, s.end, s.offset, s.filesz) for s in c.segments] == loads
        for seg in elf.iter_segments():
            if seg["p_type"] != "PT_NOTE":
                continue
            for n in seg.iter_notes():
                if n["n_type"] == "NT_FILE":
                    d = n["n_desc"]
                    theirs = sorted((e["vm_start"], e["vm_end"], e["page_offset"] * d["page_size"],
                                     p.decode() if isinstance(p, bytes) else p)
                                    for e, p in zip(d["Elf_Nt_File_Entry"], d["filename"]))
                    assert [(m.start, m.end, m.offset, m.path) for m in c.file_mappings] == theirs


def test_errors_are_sos_errors() -> None:
    assert issubclass(TargetError, SosError)
