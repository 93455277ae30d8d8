"""sosext's own reader for Linux ELF core files, and the standalone core Target.

Why not the debugger's reads: createdump heap dumps leave module images out (or keep PT_LOADs
with ``p_filesz < p_memsz``), and LLDB hands those pages back as zeros, which makes the DAC
parse zeroed metadata (reference/measured.md, "Cores"). This reader serves an address from the
core only where a PT_LOAD's file-backed part covers it, and otherwise from the file that NT_FILE
maps there. The core and the module files are memory-mapped; reads inside one piece are
zero-copy memoryviews, found with one bisect, so millions of small reads stay cheap.

Only ELF64 little-endian cores of x86_64 and aarch64 are supported (what createdump and the
Linux kernel write on the platforms .NET runs on).
"""
from __future__ import annotations

import hashlib
import mmap
import os
import stat
import struct
from bisect import bisect_right
from dataclasses import dataclass, replace
from typing import Callable, Iterator, Sequence

from ..errors import MemoryReadError, TargetError
from . import prewarm
from .base import MemoryRange, Module, Registers, TargetBase, ThreadInfo, modules_from_mappings

# ELF constants (System V gABI, Linux elf.h).
ET_CORE = 4
EM_X86_64 = 62
EM_AARCH64 = 183
PT_LOAD = 1
PT_NOTE = 4
PN_XNUM = 0xFFFF
NT_PRSTATUS = 1
NT_PRPSINFO = 3
NT_AUXV = 6
NT_FILE = 0x46494C45
NT_GNU_BUILD_ID = 3

# createdump's fake page of extra diagnostics (dotnet/runtime createdump/specialdiaginfo.h).
SPECIAL_DIAGINFO_ADDRESS = 0x00007FFFFFF10000
_DIAGINFO_SIGNATURE = b"DIAGINFOHEADER"

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")  # 64 bytes
_PHDR = struct.Struct("<IIQQQQQQ")  # 56 bytes: type flags offset vaddr paddr filesz memsz align
_NHDR = struct.Struct("<III")  # namesz descsz type
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_U64X2 = struct.Struct("<QQ")
_U64X3 = struct.Struct("<QQQ")
_SH_INFO_OFFSET = 44  # Elf64_Shdr.sh_info: the real e_phnum when e_phnum == PN_XNUM

# elf_prstatus: pr_pid at 32, pr_reg at 112 (Linux, both architectures).
_PRSTATUS_PID = 32
_PRSTATUS_CURSIG = 12
_PRSTATUS_REGS = 112
_REG_NAMES: dict[str, tuple[str, ...]] = {
    "x86_64": ("r15", "r14", "r13", "r12", "rbp", "rbx", "r11", "r10", "r9", "r8", "rax", "rcx",
               "rdx", "rsi", "rdi", "orig_rax", "rip", "cs", "eflags", "rsp", "ss", "fs_base",
               "gs_base", "ds", "es", "fs", "gs"),
    "aarch64": tuple(f"x{i}" for i in range(31)) + ("sp", "pc", "pstate"),
}
_REG_STRUCTS = {arch: struct.Struct(f"<{len(names)}Q") for arch, names in _REG_NAMES.items()}
_ARCHES = {EM_X86_64: "x86_64", EM_AARCH64: "aarch64"}

# Auxiliary vector keys (elf.h): where the executable's program headers and entry point are.
_AT_PHDR, _AT_ENTRY = 3, 9

# elf_prpsinfo (136 bytes on both 64-bit Linux ABIs).
_PRPSINFO_SIZE = 136
_PRPSINFO_PID = 24

# Guards against garbled values: the kernel writes the page size (4 KiB .. 64 KiB), GDB's
# gcore writes 1 (its file offsets are in bytes).
_MIN_PAGE, _MAX_PAGE = 1, 1 << 20
# Enough program headers / note bytes for any real shared object's build id.
_MAX_IMAGE_PHNUM = 4096
_MAX_IMAGE_NOTES = 1 << 16


@dataclass(frozen=True, slots=True)
class Segment:
    """One PT_LOAD: ``filesz`` bytes at ``offset`` in the core back [start, start + filesz)."""

    start: int
    end: int  # start + p_memsz
    offset: int
    filesz: int  # as the header says (may exceed what a truncated core holds)
    flags: int


@dataclass(frozen=True, slots=True)
class FileMapping:
    """One NT_FILE entry: [start, end) maps ``path`` from byte ``offset`` on."""

    start: int
    end: int
    offset: int
    path: str


@dataclass(frozen=True, slots=True)
class ThreadStatus:
    """One NT_PRSTATUS: an OS thread and its general registers."""

    tid: int
    signal: int
    registers: Registers


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    """NT_PRPSINFO: the process id, command name and start of the command line."""

    pid: int
    fname: str
    psargs: str


@dataclass(frozen=True, slots=True)
class DiagInfo:
    """createdump's DIAGINFOHEADER page (version 2 adds the runtime's base address)."""

    version: int
    exception_record: int
    runtime_base: int


class _MappedFile:
    """A module file on disk, opened and mapped on first use; empty when it cannot be read."""

    __slots__ = ("path", "local", "view", "written", "_mm")

    def __init__(self, path: str, local: str | None) -> None:
        self.path = path  # as the target saw it
        self.local = local
        self.view: memoryview | None = None
        self.written: list[tuple[int, int]] = []  # file ranges the loader rewrites in memory
        self._mm: mmap.mmap | None = None

    def open(self) -> memoryview:
        if self.view is None:
            self.view = memoryview(b"")
            if self.local is not None:
                try:
                    with open(self.local, "rb") as f:
                        if os.fstat(f.fileno()).st_size > 0:
                            self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                            self.view = memoryview(self._mm)
                except (OSError, ValueError):
                    pass
                self.written = _loader_written_ranges(self.view)
        return self.view

    def holds_process_bytes(self, map_offset: int, page_size: int) -> bool:
        """Whether a mapping of this file starting at ``map_offset`` still has the file's bytes.

        Not so for mappings of segments the loader writes (ELF RW and RELRO segments: relocated
        pointers, initialised data; writable PE sections): heap dumps leave those out, and the
        file's bytes there are not the process's. A mapping starts at its segment's page, so
        its first offset tells which segment it holds."""
        return not any(lo & ~(page_size - 1) <= map_offset < hi for lo, hi in self.written)

    def close(self) -> None:
        if self.view is not None:
            _release_view(self.view)
            self.view = None
        if self._mm is not None:
            _close_mmap(self._mm)
            self._mm = None


def _release_view(view: memoryview) -> None:
    # numpy arrays built on zero-copy reads may still export this view; then it is freed
    # with the last of them.
    try:
        view.release()
    except BufferError:
        pass


def _close_mmap(mm: mmap.mmap) -> None:
    # Callers may still hold zero-copy views; then the mapping goes away with the last of them.
    try:
        mm.close()
    except BufferError:
        pass


def _align(n: int, a: int) -> int:
    return (n + a - 1) & ~(a - 1)


def _cstr(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


def _iter_notes(buf, start: int, end: int,
                align: int = 4) -> Iterator[tuple[bytes, int, int, int]]:
    """(owner name, type, desc offset, desc size) of each note in buf[start:end].

    Raises ValueError when a note runs past ``end``."""
    pos = start
    while pos + _NHDR.size <= end:
        namesz, descsz, ntype = _NHDR.unpack_from(buf, pos)
        name_off = pos + _NHDR.size
        desc_off = name_off + _align(namesz, align)
        if desc_off + descsz > end or name_off + namesz > end:
            raise ValueError(f"note at {pos:#x} runs past its segment")
        yield bytes(buf[name_off:name_off + namesz]).rstrip(b"\0"), ntype, desc_off, descsz
        pos = desc_off + _align(descsz, align)


def _gaps(start: int, end: int, starts: list[int], ends: list[int]) -> Iterator[tuple[int, int]]:
    """Sub-ranges of [start, end) covered by none of the sorted, disjoint [starts[i], ends[i])."""
    i = bisect_right(ends, start)
    pos = start
    while pos < end and i < len(starts) and starts[i] < end:
        if starts[i] > pos:
            yield pos, starts[i]
        pos = max(pos, ends[i])
        i += 1
    if pos < end:
        yield pos, end


def _elf_build_id(read: Callable[[int, int], bytes], base: int, in_memory: bool) -> bytes | None:
    """The GNU build id of the ELF image at ``base`` of an address space read by ``read``.

    ``in_memory``: notes are found at their p_vaddr (relative to the lowest PT_LOAD) instead of
    at their p_offset."""
    ehdr = read(base, _EHDR.size)
    if len(ehdr) < _EHDR.size or ehdr[:4] != b"\x7fELF" or ehdr[4] != 2 or ehdr[5] != 1:
        return None
    fields = _EHDR.unpack(ehdr)
    phoff, phentsize, phnum = fields[5], fields[9], fields[10]
    if phentsize != _PHDR.size or not 0 < phnum <= _MAX_IMAGE_PHNUM:
        return None
    table = read(base + phoff, phnum * _PHDR.size)
    if len(table) < phnum * _PHDR.size:
        return None
    phdrs = [_PHDR.unpack_from(table, i * _PHDR.size) for i in range(phnum)]
    loads = [p for p in phdrs if p[0] == PT_LOAD]
    # The mapping at base holds file offset 0, i.e. the first PT_LOAD's vaddr minus its offset.
    link_base = min((p[3] - p[2] for p in loads), default=0) if in_memory else 0
    for p_type, _, p_offset, p_vaddr, _, p_filesz, _, p_align in phdrs:
        if p_type != PT_NOTE or p_filesz == 0:
            continue
        where = base + (p_vaddr - link_base if in_memory else p_offset)
        notes = read(where, min(p_filesz, _MAX_IMAGE_NOTES))
        try:
            align = 8 if p_align == 8 else 4
            for name, ntype, off, size in _iter_notes(notes, 0, len(notes), align):
                if name == b"GNU" and ntype == NT_GNU_BUILD_ID and size > 0:
                    return bytes(notes[off:off + size])
        except ValueError:
            continue
    return None


PF_W = 2
PT_GNU_RELRO = 0x6474E552
_IMAGE_SCN_MEM_WRITE = 0x80000000


def _loader_written_ranges(image) -> list[tuple[int, int]]:
    """File ranges [lo, hi) of an ELF64 or PE image that its loader writes after mapping."""
    try:
        if len(image) >= _EHDR.size and image[:4] == b"\x7fELF" and image[4:6] == b"\x02\x01":
            fields = _EHDR.unpack_from(image, 0)
            phoff, phentsize, phnum = fields[5], fields[9], fields[10]
            if phentsize != _PHDR.size:
                return []
            out = []
            for i in range(min(phnum, _MAX_IMAGE_PHNUM)):
                p_type, flags, offset, _, _, filesz, _, _ = _PHDR.unpack_from(
                    image, phoff + i * _PHDR.size)
                if (p_type == PT_LOAD and flags & PF_W or p_type == PT_GNU_RELRO) and filesz:
                    out.append((offset, offset + filesz))
            return out
        if image[:2] == b"MZ" and len(image) >= 0x40:
            (pe,) = _U32.unpack_from(image, 0x3C)
            if image[pe:pe + 4] != b"PE\0\0":
                return []
            nsections, = struct.unpack_from("<H", image, pe + 6)
            opt_size, = struct.unpack_from("<H", image, pe + 20)
            table = pe + 24 + opt_size
            out = []
            for i in range(nsections):
                raw_size, raw_ptr = struct.unpack_from("<II", image, table + i * 40 + 16)
                (characteristics,) = _U32.unpack_from(image, table + i * 40 + 36)
                if characteristics & _IMAGE_SCN_MEM_WRITE and raw_size:
                    out.append((raw_ptr, raw_ptr + raw_size))
            return out
    except struct.error:
        pass  # a garbled header: nothing known to be rewritten
    return []


def _read_file_range(path: str, offset: int, size: int) -> bytes:
    if not 0 <= offset < 1 << 62 or size <= 0:
        return b""
    with open(path, "rb") as f:
        return os.pread(f.fileno(), size, offset)


class ElfCore:
    """A Linux ELF64 core file: memory (mapped, zero-copy), threads, registers, mapped files."""

    def __init__(self, path: str | os.PathLike[str], search_dirs: Sequence[str] = ()) -> None:
        self.path = os.fspath(path)
        self.search_dirs = list(search_dirs)
        self.warnings: list[str] = []  # non-fatal findings, e.g. segments cut off by truncation
        self.notes_digest = hashlib.blake2b(digest_size=16)  # of every PT_NOTE: threads, files, pid
        self.arch = "x86_64"
        self.machine = 0
        self.segments: list[Segment] = []
        self.file_mappings: list[FileMapping] = []
        self.page_size = 4096
        self.threads: list[ThreadStatus] = []
        self.process: ProcessInfo | None = None
        self.auxv: list[tuple[int, int]] = []
        self._files: dict[str, _MappedFile] = {}
        self._locals: dict[str, str | None] = {}
        self._build_ids: dict[str, bytes | None] = {}
        self._image_bases: dict[str, int] | None = None
        self._checked: set[str] = set()  # module files compared against the core's copy
        # The read map: sorted, disjoint pieces [start, end); byte at a = view[a + delta].
        # A core piece has its view from the start; a file piece gets it when first read.
        self._starts: list[int] = []
        self._ends: list[int] = []
        self._deltas: list[int] = []
        self._views: list[memoryview | None] = []
        self._piece_files: list[_MappedFile | None] = []
        self._piece_map_offsets: list[int] = []  # file pieces: offset of the NT_FILE mapping
        self._fd = -1
        self._mm, self._view = self._map_core()
        try:
            self._parse()
        except BaseException:
            self.close()
            raise

    # -- opening and parsing ------------------------------------------------------------

    def _map_core(self) -> tuple[mmap.mmap, memoryview]:
        st = check_core_file(self.path)
        if st.st_size == 0:
            raise TargetError(f"not an ELF core file: {self.path} (empty file)")
        made = prewarm.take(self.path, st)  # the CLI's, with its page tables filled already
        if made is not None:
            mm, self._fd = made
            return mm, memoryview(mm)
        try:
            with open(self.path, "rb") as f:
                mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                self._fd = os.dup(f.fileno())  # for bulk reads (read_into)
        except (OSError, ValueError) as e:
            raise TargetError(f"cannot map core file {self.path}: {e}") from None
        return mm, memoryview(mm)

    def _fail(self, kind: str, detail: str) -> TargetError:
        foreign = foreign_arch_note(self.arch) if self.machine else None
        if foreign is not None:
            # A core of another architecture that also fails to parse: the architecture is
            # what the user must hear about first.
            return TargetError(f"unsupported core file: {self.path} ({foreign}; {detail})")
        return TargetError(f"{kind}: {self.path} ({detail})")

    @property
    def truncation(self) -> str | None:
        """One line when PT_LOAD data runs past the end of the file (a dump cut short), else None."""
        need = max((seg.offset + min(seg.filesz, seg.end - seg.start) for seg in self.segments), default=0)
        have = len(self._mm) if self._mm is not None else 0
        if need <= have:
            return None
        return (f"truncated core file: {self.path} is {have:,} bytes, but its memory segments need "
                f"{need:,} ({100 * have // need}% present): the dump was cut short (a full disk?) "
                "or copied incompletely; collect or copy it again")

    def _parse(self) -> None:
        mm, size = self._mm, len(self._mm)
        if size < _EHDR.size or mm[:4] != b"\x7fELF":
            raise TargetError(f"not an ELF core file: {self.path}")
        (ident, e_type, e_machine, _, _, e_phoff, e_shoff, _, _, e_phentsize, e_phnum,
         _, _, _) = _EHDR.unpack_from(mm, 0)
        if ident[4] != 2 or ident[5] != 1:
            raise self._fail("unsupported core file", "only 64-bit little-endian ELF is supported")
        if e_type != ET_CORE:
            raise self._fail("not an ELF core file", f"ELF type {e_type}, not ET_CORE")
        if e_machine not in _ARCHES:
            raise self._fail("unsupported core file", f"machine {e_machine}, not x86_64 or aarch64")
        self.machine, self.arch = e_machine, _ARCHES[e_machine]
        phnum = e_phnum
        if phnum == PN_XNUM:
            # More program headers than fit in 16 bits: the count lives in section header 0.
            if e_shoff == 0 or e_shoff + 64 > size:
                raise self._fail("truncated core file",
                                 "section header 0 (program header count) missing")
            (phnum,) = _U32.unpack_from(mm, e_shoff + _SH_INFO_OFFSET)
        if phnum and e_phentsize != _PHDR.size:
            raise self._fail("malformed core file",
                             f"program header size {e_phentsize}, expected 56")
        if e_phoff + phnum * _PHDR.size > size:
            raise self._fail("truncated core file",
                             f"{phnum} program headers end past the file's {size} bytes")
        loads: list[Segment] = []
        for i in range(phnum):
            p_type, flags, offset, vaddr, _, filesz, memsz, _ = _PHDR.unpack_from(
                mm, e_phoff + i * _PHDR.size)
            if p_type == PT_LOAD and memsz > 0:
                loads.append(Segment(vaddr, vaddr + memsz, offset, filesz, flags))
            elif p_type == PT_NOTE:
                if offset + filesz > size:
                    raise self._fail("truncated core file",
                                     f"PT_NOTE at {offset:#x} ends past the file")
                self._parse_notes(offset, offset + filesz)
        loads.sort(key=lambda s: s.start)
        self.segments = loads
        self._build_read_map(size)

    def _parse_notes(self, start: int, end: int) -> None:
        mm = self._mm
        self.notes_digest.update(mm[start:end])
        try:
            notes = list(_iter_notes(mm, start, end))
        except ValueError as e:
            raise self._fail("malformed core file", str(e)) from None
        for name, ntype, off, size in notes:
            if name != b"CORE":
                continue
            if ntype == NT_PRSTATUS:
                self._parse_prstatus(off, size)
            elif ntype == NT_FILE:
                self._parse_nt_file(off, size)
            elif ntype == NT_PRPSINFO and size >= _PRPSINFO_SIZE:
                (pid,) = _U32.unpack_from(mm, off + _PRPSINFO_PID)
                fname, psargs = _cstr(mm[off + 40:off + 56]), _cstr(mm[off + 56:off + 136])
                self.process = ProcessInfo(pid, fname, psargs)
            elif ntype == NT_AUXV:
                self.auxv = [_U64X2.unpack_from(mm, off + i) for i in range(0, size - 15, 16)]

    def _parse_prstatus(self, off: int, size: int) -> None:
        regs = _REG_STRUCTS[self.arch]
        if size < _PRSTATUS_REGS + regs.size:
            raise self._fail("malformed core file", f"NT_PRSTATUS of {size} bytes is too short")
        (tid,) = _U32.unpack_from(self._mm, off + _PRSTATUS_PID)
        (signal,) = struct.unpack_from("<h", self._mm, off + _PRSTATUS_CURSIG)
        values = regs.unpack_from(self._mm, off + _PRSTATUS_REGS)
        self.threads.append(ThreadStatus(tid, signal, dict(zip(_REG_NAMES[self.arch], values))))

    def _parse_nt_file(self, off: int, size: int) -> None:
        mm = self._mm
        if size < 16:
            raise self._fail("malformed core file", "NT_FILE note too short")
        count, page_size = _U64X2.unpack_from(mm, off)
        table_end = off + 16 + count * 24
        if table_end > off + size:
            raise self._fail("malformed core file", f"NT_FILE claims {count} entries")
        if not _MIN_PAGE <= page_size <= _MAX_PAGE or page_size & (page_size - 1):
            raise self._fail("malformed core file", f"NT_FILE page size {page_size}")
        names = bytes(mm[table_end:off + size]).split(b"\0")
        if len(names) < count:
            raise self._fail("malformed core file", "NT_FILE has fewer names than entries")
        self.page_size = page_size
        for i in range(count):
            start, end, page_offset = _U64X3.unpack_from(mm, off + 16 + i * 24)
            if start < end:
                path = names[i].decode("utf-8", "surrogateescape")
                self.file_mappings.append(FileMapping(start, end, page_offset * page_size, path))
        self.file_mappings.sort(key=lambda m: m.start)

    def _build_read_map(self, core_size: int) -> None:
        # Core pieces: the part of each PT_LOAD that the core file really holds.
        # A truncated core (a full disk) still serves what it holds; the rest reads as missing.
        core: list[tuple[int, int, int]] = []
        cut = 0
        for seg in self.segments:
            held = min(seg.filesz, seg.end - seg.start, max(0, core_size - seg.offset))
            cut += held < min(seg.filesz, seg.end - seg.start)
            if held > 0:
                core.append((seg.start, seg.start + held, seg.offset - seg.start))
        if cut:
            self.warnings.append(f"{cut} memory segments are cut off by the end of the core "
                                 f"(truncated at {core_size} bytes)")
        core = _disjoint(core)
        cstarts = [s for s, _, _ in core]
        cends = [e for _, e, _ in core]
        # File pieces: what NT_FILE maps where the core holds nothing (image pages left out).
        files: list[tuple[int, int, int, str | None, int]] = []
        for m in self.file_mappings:
            for s, e in _gaps(m.start, m.end, cstarts, cends):
                files.append((s, e, m.offset - m.start, m.path, m.offset))
        files = _disjoint(files)
        pieces = sorted([(s, e, d, None, 0) for s, e, d in core] + files, key=lambda p: p[0])
        for s, e, delta, path, map_offset in pieces:
            self._starts.append(s)
            self._ends.append(e)
            self._deltas.append(delta)
            self._piece_map_offsets.append(map_offset)
            if path is None:
                self._views.append(self._view)
                self._piece_files.append(None)
            else:
                self._views.append(None)
                self._piece_files.append(self._mapped_file(path))

    def _mapped_file(self, path: str) -> _MappedFile:
        mf = self._files.get(path)
        if mf is None:
            mf = self._files[path] = _MappedFile(path, self.local_path(path))
        return mf

    # -- module files on disk -----------------------------------------------------------

    def local_path(self, path: str) -> str | None:
        """A regular file on this machine holding the target's ``path``; None if there is none.

        Tries the recorded path, then its file name in each of ``search_dirs``."""
        if path in self._locals:
            return self._locals[path]
        found = None
        # "(deleted)" means the file the target saw is gone; a file now at that path differs.
        if path.startswith("/") and not path.endswith(" (deleted)"):
            name = path.rsplit("/", 1)[-1]
            for cand in [path] + [os.path.join(d, name) for d in self.search_dirs]:
                try:
                    if stat.S_ISREG(os.stat(cand).st_mode):
                        found = cand
                        break
                except (OSError, ValueError):
                    continue
        self._locals[path] = found
        return found

    def build_id(self, path: str) -> bytes | None:
        """The GNU build id of the ELF image NT_FILE maps from ``path``: from the image in
        memory, else from the file on disk; None for non-ELF files (managed assemblies)."""
        if path in self._build_ids:
            return self._build_ids[path]
        bid = None
        base = self._image_base(path)
        if base is not None:
            bid = _elf_build_id(lambda a, n: bytes(self.read_partial(a, n)), base, True)
        if bid is None:
            local = self.local_path(path)
            if local is not None:
                try:
                    bid = _elf_build_id(lambda a, n: _read_file_range(local, a, n), 0, False)
                except OSError:
                    bid = None
        self._build_ids[path] = bid
        return bid

    def _image_base(self, path: str) -> int | None:
        """Where the target mapped the start of ``path`` (its headers)."""
        if self._image_bases is None:
            self._image_bases = {}
            for m in reversed(self.file_mappings):  # sorted by start: the lowest wins
                if m.offset == 0:
                    self._image_bases[m.path] = m.start
        return self._image_bases.get(path)

    def _same_file(self, mf: _MappedFile) -> bool:
        """Whether the file on disk is the one the target mapped, judged by the copy of its
        first page that the core holds (ELF headers and build id, PE headers); True when the
        core holds none. Guards against serving, say, another machine's libc."""
        base = self._image_base(mf.path)
        i = bisect_right(self._starts, base) - 1 if base is not None else -1
        if i < 0 or base >= self._ends[i] or self._piece_files[i] is not None:
            return True
        off = base + self._deltas[i]
        held = self._view[off:off + min(self.page_size, self._ends[i] - base)]
        disk = mf.view if mf.view is not None else memoryview(b"")
        n = min(len(held), len(disk))
        if held[:n] == disk[:n]:
            return True
        self.warnings.append(f"{mf.local} differs from the {mf.path} in the core; not reading it")
        return False

    # -- memory -------------------------------------------------------------------------

    def read_partial(self, address: int, size: int) -> bytes | memoryview:
        """The longest readable prefix of [address, address + size); zero-copy when it lies in
        one piece. The result is read-only and valid until close()."""
        i = bisect_right(self._starts, address) - 1
        if i >= 0 and size > 0 and address + size <= self._ends[i]:
            view = self._views[i]
            if view is not None:
                off = address + self._deltas[i]
                chunk = view[off:off + size]
                if len(chunk) == size:
                    return chunk
        chunks = list(self._chunks(address, size))
        if len(chunks) == 1:
            return chunks[0]
        return b"".join(chunks)

    def mapped_range(self, address: int, size: int) -> tuple[mmap.mmap, int] | None:
        """(the core's mapping, file offset of ``address``) when [address, address + size)
        lies wholly in bytes the core file holds, else None: for kernels that read a range
        in place (gcroot's search from the roots) rather than through read calls."""
        i = bisect_right(self._starts, address) - 1
        if i < 0 or address + size > self._ends[i] or self._piece_files[i] is not None:
            return None
        return self._mm, address + self._deltas[i]

    def read_into(self, address: int, buf: memoryview) -> int:
        """Fill ``buf`` from ``address`` on as far as memory is readable; the count filled.

        Bytes the core holds are copied with pread from the file rather than through the
        mapping: a bulk copy from the page cache is several times cheaper than faulting in
        every page of a mapping (what a heap walk of a big core would otherwise pay)."""
        starts, ends = self._starts, self._ends
        size = len(buf)
        filled, pos = 0, address
        i = bisect_right(starts, pos) - 1
        while filled < size and 0 <= i < len(starts) and starts[i] <= pos < ends[i]:
            want = min(size - filled, ends[i] - pos)
            if self._piece_files[i] is None and self._fd >= 0:
                n = os.preadv(self._fd, [buf[filled:filled + want]], pos + self._deltas[i])
            else:
                chunk = self._piece_bytes(i, pos, want)
                n = len(chunk)
                buf[filled:filled + n] = chunk
            filled += n
            pos += n
            if n < want:
                break
            i += 1
            if i >= len(starts) or starts[i] != pos:
                break
        return filled

    def _chunks(self, address: int, size: int) -> Iterator[bytes | memoryview]:
        """Contiguous pieces of [address, address + size), stopping at the first hole."""
        starts, ends = self._starts, self._ends
        pos, end = address, address + size
        i = bisect_right(starts, pos) - 1
        if i < 0 or size <= 0:
            return
        while pos < end and pos < ends[i]:
            want = min(end, ends[i]) - pos
            chunk = self._piece_bytes(i, pos, want)
            if len(chunk) == 0:
                return
            yield chunk
            pos += len(chunk)
            if len(chunk) < want:
                return  # a module file ends or is missing: no bytes past it
            i += 1
            if i >= len(starts) or starts[i] != pos:
                return

    def _piece_bytes(self, i: int, address: int, n: int) -> bytes | memoryview:
        view = self._views[i]
        mf = self._piece_files[i]
        if view is None and mf is not None:
            view = mf.open()
            if mf.path not in self._checked:
                self._checked.add(mf.path)
                if len(view) and not self._same_file(mf):
                    mf.close()
                    mf.view = view = memoryview(b"")
            if not mf.holds_process_bytes(self._piece_map_offsets[i], self.page_size):
                view = memoryview(b"")
            self._views[i] = view
        if view is None:
            return b""
        off = address + self._deltas[i]
        chunk = view[off:off + n]
        if mf is None or len(chunk) == n or len(view) == 0:
            return chunk
        # A mapping past a file's end reads as zeros up to the end of the page holding EOF.
        have = len(view)
        zeros = min(off + n, _align(have, self.page_size)) - max(off, have)
        return bytes(chunk) + bytes(zeros) if zeros > 0 else chunk

    def memory_ranges(self) -> list[MemoryRange]:
        """Every range the core describes, sorted: ``path == ""`` for bytes held in the core,
        ``path`` = the NT_FILE path for bytes served from that file (``readable`` is False when
        the file is missing or the loader rewrites that part), ``readable=False, path=""`` for
        PT_LOAD parts nobody holds. Opens the module files it has not opened yet."""
        out = []
        for i, (s, e, mf) in enumerate(zip(self._starts, self._ends, self._piece_files)):
            if mf is None:
                out.append(MemoryRange(s, e, True, ""))
            else:
                out.append(MemoryRange(s, e, len(self._piece_bytes(i, s, 1)) > 0, mf.path))
        for seg in self.segments:
            for s, e in _gaps(seg.start, seg.end, self._starts, self._ends):
                out.append(MemoryRange(s, e, False, ""))
        out.sort(key=lambda r: r.start)
        return out

    def executable(self) -> str | None:
        """The path of the process's executable: the file NT_FILE maps where the auxiliary
        vector's AT_PHDR (its program headers) or AT_ENTRY lies; None when the core cannot tell."""
        aux = dict(self.auxv)
        for key in (_AT_PHDR, _AT_ENTRY):
            address = aux.get(key)
            if address:
                for m in self.file_mappings:
                    if m.start <= address < m.end:
                        return m.path
        return None

    def diag_info(self) -> DiagInfo | None:
        """createdump's DIAGINFOHEADER page, when the core has one."""
        data = bytes(self.read_partial(SPECIAL_DIAGINFO_ADDRESS, 40))
        if len(data) < 24 or not data.startswith(_DIAGINFO_SIGNATURE):
            return None
        (version,) = _U32.unpack_from(data, 16)
        (exc,) = _U64.unpack_from(data, 24)
        base = _U64.unpack_from(data, 32)[0] if version >= 2 and len(data) >= 40 else 0
        return DiagInfo(version, exc, base)

    # -- lifetime -----------------------------------------------------------------------

    def close(self) -> None:
        for mf in self._files.values():
            mf.close()
        self._files.clear()
        self._starts, self._ends, self._deltas = [], [], []
        self._views, self._piece_files, self._piece_map_offsets = [], [], []
        if self._view is not None:
            _release_view(self._view)
            self._view = None  # type: ignore[assignment]
        if self._mm is not None:
            _close_mmap(self._mm)
            self._mm = None  # type: ignore[assignment]
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> ElfCore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _disjoint(pieces: list) -> list:
    """Sort (start, end, ...) tuples and trim overlaps (earlier start wins); garbled cores only.

    Trimming a start keeps the piece's delta valid, since it maps addresses, not offsets."""
    out = []
    prev_end = -1
    for p in sorted(pieces, key=lambda p: p[0]):
        start = max(p[0], prev_end)
        if start < p[1]:
            out.append((start,) + tuple(p[1:]))
            prev_end = p[1]
    return out


def host_arch() -> str:
    import platform
    machine = platform.machine()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine.lower(), machine)


def foreign_arch_note(arch: str) -> str | None:
    """Why a core of ``arch`` cannot be analyzed here, or None when it can."""
    here = host_arch()
    if arch == here:
        return None
    return (f"an {arch} core; this machine is {here}, and the runtime's DAC, which sosext loads "
            f"as native code, runs only on the core's own architecture: analyze it on an {arch} machine")


def check_core_file(path: str) -> os.stat_result:
    """``path``'s status if it can be a core file; else the one error every command that takes
    a core (analyze, diff, leaks, report, the API) gives for it."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise TargetError(f"cannot open core file {path}: {e.strerror or e}") from None
    if stat.S_ISDIR(st.st_mode):
        raise TargetError(f"not a core file: {path} is a directory")
    if not stat.S_ISREG(st.st_mode):
        kind = ("a character device" if stat.S_ISCHR(st.st_mode) else "a block device" if stat.S_ISBLK(st.st_mode)
                else "a pipe" if stat.S_ISFIFO(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode)
                else "not a regular file")
        raise TargetError(f"not a core file: {path} is {kind}, not a regular file")
    return st


class CoreTarget(TargetBase):
    """A Linux core file as a sosext Target (the standalone CLI's target; debuggers use its
    memory too)."""

    pointer_size = 8
    is_live = False
    background_safe = True  # every read is of our own mapping of the file

    def __init__(self, path: str | os.PathLike[str],
                 search_dirs: Sequence[str] | None = None) -> None:
        self.core = ElfCore(path, search_dirs or ())
        self.path = self.core.path
        self.arch = self.core.arch
        self._generation = 0  # a core never runs
        self._modules: list[Module] | None = None
        # Hot path: bind the reader's method directly, saving a call layer per read.
        self.read_partial = self.core.read_partial  # type: ignore[method-assign]

    def read_partial(self, address: int, size: int) -> bytes | memoryview:  # type: ignore[override]
        return self.core.read_partial(address, size)

    def core_file(self) -> ElfCore:
        return self.core

    def read(self, address: int, size: int) -> bytes:
        data = self.core.read_partial(address, size)
        if len(data) != size:
            raise MemoryReadError(address, size)
        return bytes(data)

    def read_pointer(self, address: int) -> int:
        data = self.core.read_partial(address, 8)
        if len(data) != 8:
            raise MemoryReadError(address, 8)
        return int.from_bytes(data, "little")

    def read_into(self, address: int, buf: memoryview) -> int:
        return self.core.read_into(address, buf)

    def memory_ranges(self) -> list[MemoryRange]:
        return self.core.memory_ranges()

    def modules(self) -> list[Module]:
        if self._modules is None:
            mods = modules_from_mappings((m.start, m.end, m.path, m.offset) for m in self.core.file_mappings)
            self._modules = [replace(m, build_id=self.core.build_id(m.path)) for m in mods]
        return list(self._modules)

    def threads(self) -> list[ThreadInfo]:
        return [ThreadInfo(t.tid, index=i) for i, t in enumerate(self.core.threads)]

    def registers(self, tid: int) -> Registers:
        for t in self.core.threads:
            if t.tid == tid:
                return dict(t.registers)
        raise TargetError(f"no thread 0x{tid:x} in core file {self.path}")

    def diag_info(self) -> DiagInfo | None:
        return self.core.diag_info()

    @property
    def truncation(self) -> str | None:
        return self.core.truncation

    def unusable(self) -> str | None:
        """One line saying why no runtime can be read from this core (truncated), or None.
        Checked before a reader is asked, whose own error would mislead. A core of another
        architecture is usable: the contracts reader reads it (clr/readerchoice.py), and the DAC
        reader refuses a DAC of another machine before loading it (dac/trust.py)."""
        return self.truncation

    def describe(self) -> str:
        return f"core file {self.path}"

    def close(self) -> None:
        self.core.close()

    def __enter__(self) -> CoreTarget:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["ElfCore", "CoreTarget", "Segment", "FileMapping", "ThreadStatus", "ProcessInfo",
           "DiagInfo", "SPECIAL_DIAGINFO_ADDRESS"]
