"""The sync block table: where Monitor locks, hash codes and COM data of objects live once
an object header's bits no longer suffice.

Entries are numbered from 1 (0 means "none" in an object header). The runtime reports each
entry's object, whether the slot is free, the lock's MonitorHeld word (1 while owned, plus 2
per waiting thread), the owner's recursion count and the owning runtime Thread, through
ISOSDacInterface::GetSyncBlockData; asking for entry 1 also tells how many entries exist.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...errors import SosError

if TYPE_CHECKING:
    from ..runtime import ClrRuntime

ORPHANED = (1 << 64) - 1  # HoldingThread of a lock whose owner died holding it
_MAX_ENTRIES = 1 << 26  # the header's sync block index has 26 bits


@dataclass(frozen=True, slots=True)
class ClrSyncBlock:
    index: int
    free: bool
    address: int  # the SyncBlock
    object: int
    monitor_held: int
    recursion: int
    holding_thread: int  # the runtime Thread, 0 if none, ORPHANED if its owner died
    holding_os_id: int  # OS thread id of the owner, 0 if none or unknown
    com_flags: int
    additional_threads: int

    @property
    def is_held(self) -> bool:
        return self.monitor_held > 0 and not self.free


@dataclass(frozen=True, slots=True)
class SyncBlockTable:
    count: int
    entries: tuple[ClrSyncBlock | None, ...]  # entry i+1; None where the runtime refused it


def sync_block_table(runtime: "ClrRuntime", only: int = 0) -> SyncBlockTable:
    """Every sync block entry (or just entry ``only``), in index order."""
    runtime.refresh()
    dac = runtime.reader
    first = dac.sync_block_data(1)
    if first is None:
        raise SosError("Error requesting SyncBlk data")
    count = min(first.sync_block_count, _MAX_ENTRIES)
    owners: dict[int, int] = {}
    entries: list[ClrSyncBlock | None] = []
    for n in range(1, count + 1):
        if only and n != only:
            entries.append(None)
            continue
        d = first if n == 1 else dac.sync_block_data(n)
        if d is None:
            entries.append(None)
            continue
        thread = d.holding_thread
        os_id = 0
        if thread and thread != ORPHANED:
            if thread not in owners:
                try:
                    owners[thread] = dac.thread_data(thread).os_thread_id
                except SosError:
                    owners[thread] = 0
            os_id = owners[thread]
        entries.append(ClrSyncBlock(n, bool(d.free), d.sync_block_pointer, d.object, d.monitor_held,
                                    d.recursion, thread, os_id, d.com_flags, d.additional_thread_count))
    return SyncBlockTable(count, tuple(entries))
