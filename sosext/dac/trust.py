"""Whether a DAC file may be loaded: where it is, and whether it is whole and the right build.

The DAC is native code that runs inside the debugger, and a core (or a process's maps) is
untrusted input that names the directory it is looked up in. So trust comes from *where* the
file is, never from what it says about itself:

* ``untrusted_reason(path)`` resolves the path one component at a time, as the kernel would,
  and judges every directory a name is looked up in, every symbolic link's directory, and
  the file itself: each must be owned by root or by us (the effective uid) and be neither
  group- nor world-writable (a sticky /tmp is still world-writable). Nobody else can then
  replace the file between our checks and ``dlopen``.
* A directory the user named (``setclrpath`` / ``--clr-path``) is trusted by that choice.

Whatever the location, integrity checks catch mismatches and damage (not attackers, since a
build id can be copied):

* ``check_elf_image`` refuses a file that is not a complete ELF64 shared library of the host's
  architecture: a truncated library would fault (SIGBUS) inside ``dlopen``.
* ``declared_runtime_info`` reads the ``DotNetRuntimeInfo`` export of the target's runtime
  (dotnet/runtime ``src/coreclr/debug/inc/runtimeinfo.h``), whose DAC module index is the
  GNU build id of the DAC built with that runtime. Laid out as::

      char Signature[18]            "DotNetRuntimeInfo\\0"                    @0
      int  Version                  1, 2 ...                                  @20
      u8   RuntimeModuleIndex[24]   length byte, then that many id bytes     @24
      u8   DacModuleIndex[24]                                                 @48
      u8   DbiModuleIndex[24]                                                 @72
      (Version >= 2: four ints, the runtime's file version)                   @96

  Not every runtime exports it: single-file hosts do, the libcoreclr.so of the shared and
  self-contained Linux runtimes (8, 9, 10) does not; callers then fall back on the
  runtime's own build id and version marker.
"""
from __future__ import annotations

import os
import platform
import stat
import struct
from dataclasses import dataclass

from ..errors import DacError
from ..targets.base import Module, Target
from ..targets.elfsymbols import exported_symbol

RUNTIME_INFO_SYMBOL = "DotNetRuntimeInfo"
_RUNTIME_INFO_SIGNATURE = b"DotNetRuntimeInfo\0"
_RUNTIME_INFO_SIZE = 96
_MAX_SYMLINKS = 40  # as the kernel's MAXSYMLINKS

EM_X86_64, EM_AARCH64 = 62, 183
_HOST_MACHINES = {"x86_64": (EM_X86_64, "x86-64"), "amd64": (EM_X86_64, "x86-64"),
                  "aarch64": (EM_AARCH64, "AArch64"), "arm64": (EM_AARCH64, "AArch64")}


def printable(text: str) -> str:
    """``text`` with control characters escaped: paths here come from the target, and a directory
    name holding terminal escape sequences must not reach the user's terminal as such. Bytes that
    were not UTF-8 (surrogate-escaped) are shown as the bytes they were."""
    out = []
    for ch in text:
        o = ord(ch)
        if ch.isprintable() and not 0xDC80 <= o <= 0xDCFF:
            out.append(ch)
        elif 0xDC80 <= o <= 0xDCFF:
            out.append(f"\\x{o - 0xDC00:02x}")
        elif o < 0x100:
            out.append(f"\\x{o:02x}")
        else:
            out.append(f"\\u{o:04x}")
    return "".join(out)


# --- where the file is -----------------------------------------------------------------------

def _judge(path: str, st: os.stat_result) -> str | None:
    """Why one file system entry on the way to a DAC is not trustworthy, or None."""
    if st.st_uid not in (0, os.geteuid()):
        return f"{path} is owned by uid {st.st_uid}, not by root or by you"
    if st.st_mode & stat.S_IWOTH:
        return f"{path} is world-writable"
    if st.st_mode & stat.S_IWGRP:
        return f"{path} is group-writable"
    return None


def untrusted_reason(path: str) -> str | None:
    """None if the file at ``path`` may be loaded as code because of where it is; else why not.

    Every directory a name is looked up in (including the directory of each symbolic link
    followed) and the final regular file must be owned by root or the effective user and be
    neither group- nor world-writable."""
    pending = [c for c in os.path.abspath(path).split("/") if c and c != "."]
    current = "/"
    try:
        st = os.lstat(current)
    except OSError as e:
        return f"cannot examine /: {e.strerror}"
    if (why := _judge(current, st)) is not None:
        return why
    links = 0
    while pending:
        name = pending.pop(0)
        if name == "..":
            current = os.path.dirname(current)  # an ancestor of a judged real path: judged already
            continue
        entry = os.path.join(current, name)
        try:
            st = os.lstat(entry)
        except OSError as e:
            return f"cannot examine {entry}: {e.strerror}"
        if stat.S_ISLNK(st.st_mode):
            # The link lives in ``current``, judged above: only a trusted user could have made it.
            links += 1
            if links > _MAX_SYMLINKS:
                return f"too many symbolic links resolving {path}"
            try:
                target = os.readlink(entry)
            except OSError as e:
                return f"cannot read the symbolic link {entry}: {e.strerror}"
            if target.startswith("/"):
                current = "/"
            pending[:0] = [c for c in target.split("/") if c and c != "."]
            continue
        if (why := _judge(entry, st)) is not None:
            return why
        if pending and not stat.S_ISDIR(st.st_mode):
            return f"{entry} is not a directory"
        if not pending and not stat.S_ISREG(st.st_mode):
            return f"{entry} is not a regular file"
        current = entry
    return None


# --- whether the file is whole -----------------------------------------------------------------

def host_machine() -> tuple[int, str]:
    """(e_machine, display name) of the architecture this Python runs on."""
    machine = platform.machine().lower()
    if machine not in _HOST_MACHINES:
        raise DacError(f"cannot load a DAC on this host architecture ({machine})")
    return _HOST_MACHINES[machine]


def check_elf_image(path: str) -> None:
    """Refuse (one line) anything but a complete little-endian ELF64 shared library for this host.

    Complete means the program and section header tables and every segment and section
    with file contents lie within the file: dlopen maps them and faults on a missing page."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(64)
            want, arch = host_machine()

            def damaged(what: str) -> DacError:
                return DacError(f"refusing to load {path}: not a complete ELF shared library ({what}, "
                                f"file is {size:,} bytes)")

            if len(head) < 64 or head[:4] != b"\x7fELF":
                raise damaged("no ELF header")
            if head[4] != 2 or head[5] != 1:
                raise DacError(f"refusing to load {path}: not a little-endian ELF64 file (this host is {arch})")
            e_type, e_machine = struct.unpack_from("<HH", head, 16)
            if e_machine != want:
                raise DacError(f"refusing to load {path}: built for ELF machine {e_machine}, not {arch} "
                               "(the DAC must match the debugger's architecture)")
            if e_type != 3:  # ET_DYN
                raise damaged(f"ELF type {e_type}, not a shared library")
            e_phoff, e_shoff = struct.unpack_from("<QQ", head, 0x20)
            e_phentsize, e_phnum, e_shentsize, e_shnum = struct.unpack_from("<HHHH", head, 0x36)
            if e_phnum == 0 or e_phentsize < 56 or e_phoff + e_phnum * e_phentsize > size:
                raise damaged("program headers missing or cut off")
            f.seek(e_phoff)
            phdrs = f.read(e_phnum * e_phentsize)
            has_dynamic = False
            for i in range(e_phnum):
                p_type, _fl, p_offset, _va, _pa, p_filesz = struct.unpack_from("<IIQQQQ", phdrs, i * e_phentsize)
                has_dynamic |= p_type == 2  # PT_DYNAMIC
                if p_type in (1, 2) and p_offset + p_filesz > size:  # PT_LOAD, PT_DYNAMIC
                    raise damaged(f"segment {i} ends at {p_offset + p_filesz:,}")
            if not has_dynamic:
                raise damaged("no dynamic segment")
            if e_shnum:
                if e_shentsize < 64 or e_shoff + e_shnum * e_shentsize > size:
                    raise damaged(f"section headers end at {e_shoff + e_shnum * e_shentsize:,}")
                f.seek(e_shoff)
                shdrs = f.read(e_shnum * e_shentsize)
                for i in range(e_shnum):
                    _n, sh_type, _fl, _a, sh_offset, sh_size = struct.unpack_from("<IIQQQQ", shdrs, i * e_shentsize)
                    if sh_type != 8 and sh_type != 0 and sh_offset + sh_size > size:  # not NOBITS/NULL
                        raise damaged(f"section {i} ends at {sh_offset + sh_size:,}")
    except OSError as e:
        raise DacError(f"cannot read {path}: {e.strerror or e}") from None


# --- what the target's runtime declares ----------------------------------------------------------

@dataclass(frozen=True, slots=True)
class RuntimeInfo:
    """The ``DotNetRuntimeInfo`` export of a runtime module, as read from the target."""

    version: int
    runtime_build_id: bytes
    dac_build_id: bytes
    dbi_build_id: bytes


def _module_index(blob: bytes, offset: int) -> bytes:
    n = blob[offset]
    return bytes(blob[offset + 1:offset + 1 + n]) if 0 < n < 24 else b""


def parse_runtime_info(blob: bytes) -> RuntimeInfo | None:
    """The record at the start of ``blob``; None unless it carries the signature."""
    if len(blob) < _RUNTIME_INFO_SIZE or bytes(blob[:18]) != _RUNTIME_INFO_SIGNATURE:
        return None
    version, = struct.unpack_from("<i", blob, 20)
    return RuntimeInfo(version, _module_index(blob, 24), _module_index(blob, 48), _module_index(blob, 72))


def declared_runtime_info(target: Target, runtime: Module, image_path: str | None) -> RuntimeInfo | None:
    """``DotNetRuntimeInfo`` of the runtime mapped at ``runtime.base``, read from target memory.

    ``image_path`` is a file of the same build as the mapped runtime, read only for the
    export's offset. None when the runtime does not export it or the dump lacks the page."""
    if image_path is None:
        return None
    found = exported_symbol(image_path, RUNTIME_INFO_SYMBOL)
    if found is None:
        return None
    value, first_vaddr = found
    address = runtime.base - (first_vaddr & ~0xFFF) + value
    try:
        blob = bytes(target.read_partial(address, _RUNTIME_INFO_SIZE))
    except Exception:  # noqa: BLE001 - an unreadable page only means "not declared"
        return None
    return parse_runtime_info(blob)
