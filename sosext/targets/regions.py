"""The target's address space as mappings: start, end, permissions and backing file.

A live local process tells it in /proc/<pid>/maps. A core tells it in two places: its PT_LOAD
program headers (every mapping the dumper kept, with R/W/X flags) and its NT_FILE note (which
file each file-backed mapping came from). Reserved-only memory (no access) is listed too,
with perms "---".
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

from ..errors import TargetError
from .base import Target

PF_X, PF_W, PF_R = 1, 2, 4


@dataclass(frozen=True, slots=True)
class Region:
    start: int
    end: int
    perms: str  # "rwx" with "-" for what is missing
    path: str  # backing file or pseudo-name ("[stack]"); "" for anonymous memory

    @property
    def size(self) -> int:
        return self.end - self.start

    @property
    def readable(self) -> bool:
        return self.perms[:1] == "r"


def _core_of(target: Target):  # type: ignore[no-untyped-def]
    """The ElfCore behind a core target (the CLI's CoreTarget, or the one a debugger target keeps)."""
    core = getattr(target, "core", None)
    if core is not None and hasattr(core, "core"):
        core = core.core
    return core if core is not None and hasattr(core, "segments") else None


def target_regions(target: Target) -> list[Region]:
    """Every mapping of the target, sorted by address."""
    core = _core_of(target)
    if core is not None:
        return _core_regions(core)
    pid = getattr(target, "pid", None)
    if target.is_live and pid:
        from .procfs import read_maps
        try:
            maps = read_maps(pid)
        except OSError as e:
            raise TargetError(f"cannot read /proc/{pid}/maps: {e.strerror}") from None
        return [Region(s, e, perms[:3], path) for s, e, perms, path, _off in maps]
    raise TargetError("this target does not describe its memory mappings")


def _core_regions(core) -> list[Region]:  # type: ignore[no-untyped-def]
    files = sorted(core.file_mappings, key=lambda m: m.start)
    starts = [m.start for m in files]
    out = []
    for seg in core.segments:
        perms = "".join(c if seg.flags & bit else "-" for c, bit in (("r", PF_R), ("w", PF_W), ("x", PF_X)))
        i = bisect_right(starts, seg.start) - 1
        path = files[i].path if i >= 0 and files[i].start <= seg.start < files[i].end else ""
        out.append(Region(seg.start, seg.end, perms, path))
    out.sort(key=lambda r: r.start)
    return out
