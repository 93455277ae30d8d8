"""Which core file did the debugger open? Ask the kernel, not the debugger.

LLDB 16 has no API for the path of the loaded core, but it keeps the file open (and
mapped), so it appears among our own process's file descriptors and mappings. A core is
recognised by its ELF header (ET_CORE); with several open, the one whose first thread
(NT_PRSTATUS) has the process's pid wins.
"""
from __future__ import annotations

import os
import struct

_ET_CORE = 4


def _is_core(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(18)
    except OSError:
        return False
    return len(head) == 18 and head[:4] == b"\x7fELF" and struct.unpack_from("<H", head, 16)[0] == _ET_CORE


def open_files() -> list[str]:
    paths: list[str] = []
    try:
        for fd in os.listdir("/proc/self/fd"):
            try:
                paths.append(os.readlink(f"/proc/self/fd/{fd}"))
            except OSError:
                pass
    except OSError:
        pass
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) > 5:
                    paths.append(parts[5].strip())
    except OSError:
        pass
    seen: dict[str, None] = {}
    for p in paths:
        if p.startswith("/") and not p.endswith(" (deleted)"):
            seen.setdefault(p, None)
    return list(seen)


def first_thread_pid(path: str) -> int | None:
    from .elfcore import ElfCore
    try:
        core = ElfCore(path)
    except Exception:  # noqa: BLE001 - an unreadable candidate is simply not ours
        return None
    try:
        return core.threads[0].tid if core.threads else None
    finally:
        core.close()


def find_open_core(pid: int) -> str | None:
    cores = [p for p in open_files() if os.path.isfile(p) and _is_core(p)]
    if len(cores) <= 1:
        return cores[0] if cores else None
    for p in cores:
        if first_thread_pid(p) == pid:
            return p
    return cores[-1]
