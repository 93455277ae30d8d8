"""What the GC records about itself: its last out-of-memory failure and its
GC_CONFIG_DRIVEN counters (analyzeoom, dumpgcdata).

Both are per GC heap: a workstation runtime keeps one record in the GC's globals (the DAC's
"static" requests), a server runtime one per heap (asked by the heap's address). The OOM
record's reason is the GC's ``oom_reason``, and the failing reservation or commit, when
there was one, its ``failure_get_memory`` (gcpriv.h); reason 0 means no OOM happened.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .heap import ClrHeap

# oom_reason (gcpriv.h), worded as SOS's analyzeoom words them.
OOM_REASONS = {
    1: "OOM was due to an internal .Net error, likely a bug in the GC",  # oom_budget
    2: "Didn't have enough memory to commit",  # oom_cant_commit
    3: "OOM was due to an internal .Net error, likely a bug in the GC",  # oom_cant_reserve
    4: "Didn't have enough memory to allocate an LOH segment",  # oom_loh
    5: "Low on memory during GC",  # oom_low_mem
    6: "Could not do a full GC",  # oom_unproductive_full_gc
}
# failure_get_memory (gcpriv.h).
GET_MEMORY_FAILURES = {
    1: "Failed to reserve memory",
    2: "Didn't have enough memory to commit beginning of the segment",
    3: "Didn't have enough memory to commit the new ephemeral segment",
    4: "Didn't have enough memory to grow the internal GC data structures",
    5: "Didn't have enough memory to commit the internal GC data structures",
}

# The counters' names, in the order the GC keeps them (gc.h's interesting data points,
# compact reasons, expand mechanisms, mechanism bits, global mechanisms).
DATA_POINTS = ("pre short", "post short", "merged pins", "converted pins", "pre pin", "post pin",
               "pre and post pin", "pre short padded", "post short padded")
COMPACT_REASONS = ("low on ephemeral space", "high fragmentation", "couldn't allocate gaps",
                   "user specfied compact LOH", "last GC before OOM", "induced compacting GC",
                   "fragmented gen0 (ephemeral GC)", "high memory load (ephemeral GC)",
                   "high memory load and frag", "very high memory load and frag", "no gc mode")
# Whether each compact reason forces a compaction ("M", mandatory) or only suggests it ("W").
COMPACT_MANDATORY = (True, False, True, True, True, True, False, False, True, True, True)
EXPAND_MECHANISMS = ("reused seg with normal fit", "reused seg with best fit", "expand promoting eph",
                     "expand with a new seg", "no memory for a new seg", "expand in next full GC")
BIT_MECHANISMS = ("using mark list", "demotion")
GLOBAL_MECHANISMS = ("concurrent GCs", "compacting GCs", "promoting GCs", "GCs that did demotion",
                     "card bundles", "elevation logic")


@dataclass(frozen=True, slots=True)
class OutOfMemoryInfo:
    heap: int  # the GC heap's number
    reason: int
    get_memory_failure: int
    allocation_size: int  # what the allocation asked for
    failure_size: int  # the reservation or commit that failed
    gc_index: int
    available_pagefile_mb: int
    is_loh: bool

    @property
    def reason_text(self) -> str:
        return OOM_REASONS.get(self.reason, f"unknown reason {self.reason}")

    @property
    def failure_text(self) -> str | None:
        if not self.get_memory_failure:
            return None
        return GET_MEMORY_FAILURES.get(self.get_memory_failure, f"unknown failure {self.get_memory_failure}")


@dataclass(frozen=True, slots=True)
class GCCounters:
    heap: int
    data_points: tuple[int, ...]
    compact_reasons: tuple[int, ...]
    expand_mechanisms: tuple[int, ...]
    bit_mechanisms: tuple[int, ...]


def _heap_addresses(heap: "ClrHeap") -> list[tuple[int, int | None]]:
    """(number, address for the DAC) of each GC heap; workstation's one has no address."""
    if not heap.is_server:
        return [(0, None)]
    return [(h.index, h.address) for h in heap.subheaps]


def out_of_memory(heap: "ClrHeap") -> list[OutOfMemoryInfo]:
    """Every GC heap's recorded OOM (none when no allocation on the GC heap failed)."""
    out = []
    for number, address in _heap_addresses(heap):
        d = heap.reader.oom_data(address)
        if d is None or d.reason == 0:
            continue
        out.append(OutOfMemoryInfo(number, d.reason, d.fgm, d.alloc_size, d.size, d.gc_index,
                                   d.available_pagefile_mb, bool(d.loh_p)))
    return out


_COUNTER_VARS = ("interesting_data_per_heap", "compact_reasons_per_heap", "expand_mechanisms_per_heap",
                 "interesting_mechanism_bits_per_heap", "gc_global_mechanisms")


def counters_withheld(heap: "ClrHeap") -> str | None:
    """Why the DAC is not asked for the GC_CONFIG_DRIVEN counters, or None to ask it. A
    standalone GC (libclrgc.so, DOTNET_GCName) running a workstation heap may publish none in
    its GcDacVars (.NET 10's has them null), and the DAC's static requests read them through
    those variables without checking and fault (SIGSEGV); so they are looked at first. Where
    the GcDacVars cannot be read here (.NET 8: no descriptor) the DAC is not asked either:
    .NET 8's faulted the same way on such a core. (The runtime's own GC answers the DAC by
    other means.)"""
    from ...errors import SosError
    rt = heap.runtime
    if heap.is_server or not any(m.name.startswith("libclrgc") for m in rt.target.modules()):
        return None
    unreadable = ("The standalone GC in use (libclrgc.so) may publish no GC_CONFIG_DRIVEN counters, and "
                  "this runtime's DAC faults reading them then; without a contract descriptor its GcDacVars "
                  "cannot be checked first, so they are not read.")
    reader = rt.contracts_beside()
    if reader is None:
        return unreadable
    try:
        gc = reader.gc
        if any(gc.var(name) for name in _COUNTER_VARS):
            return None
    except (SosError, AttributeError, ValueError):
        return unreadable
    return ("The standalone GC in use (libclrgc.so) keeps no GC_CONFIG_DRIVEN counters "
            "(its GcDacVars publishes none).")


def gc_counters(heap: "ClrHeap") -> list[GCCounters] | None:
    """Each GC heap's GC_CONFIG_DRIVEN counters; None when the runtime keeps none."""
    out = []
    for number, address in _heap_addresses(heap):
        d = heap.reader.gc_interesting_info(address)
        if d is None:
            return None
        out.append(GCCounters(number, d.interesting_data_points, d.compact_reasons, d.expand_mechanisms,
                              d.bit_mechanisms))
    return out


def gc_global_mechanisms(heap: "ClrHeap") -> tuple[int, ...] | None:
    """The GC's global mechanism counters (workstation only: the DAC has them per process)."""
    return None if heap.is_server else heap.reader.gc_global_mechanisms()
