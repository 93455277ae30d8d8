"""The thread pool, read the way SOS's threadpool command reads it.

Since .NET 6 the worker pool is managed code: System.Threading.PortableThreadPool, whose
singleton ``ThreadPoolInstance`` keeps ``_cpuUtilization``, ``_minThreads``, ``_maxThreads`` and,
in ``_separated.counts._data`` (a ulong), the thread counts: bits 0-15 threads processing
work, 16-31 existing threads, 32-47 the goal. The runtime names these fields for SOS in its
source and keeps them stable. Older runtimes (and the legacy I/O completion pool) answer
through the DAC's GetThreadpoolData instead; .NET 8+ DACs refuse that call.

The fields are found by name: the type's FieldDescs give offsets and tokens, CoreLib's
metadata (read from the target) gives the names.

The pool's hill climbing (PortableThreadPool+HillClimbing, the static ``ThreadPoolHillClimber``)
keeps why it changed the thread count in a ring of LogEntry structs: ``_log`` (the array),
``_logStart`` (the oldest entry) and ``_logSize`` (entries in use). Read as ClrMD reads it, so
threadpool -ti lists what SOS lists. Runtimes before .NET 6 kept that log natively (the DAC's
GetHillClimbingLogEntry); they are not read here.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...errors import SosError
from ...formats.metadata import MetadataError, MetadataReader

if TYPE_CHECKING:
    from ...dac.structs import FieldDescData
    from ..runtime import ClrRuntime

PORTABLE_POOL = "System.Threading.PortableThreadPool"
HILL_CLIMBING = PORTABLE_POOL + "+HillClimbing"
_MAX_FIELDS = 4096
_MAX_LOG = 1 << 16  # the runtime keeps 200 entries; a bigger number is a corrupt core
# HillClimbing.StateOrTransition, in the runtime's order (its values are what the log stores).
TRANSITIONS = ("Warmup", "Initializing", "RandomMove", "ClimbingMove", "ChangePoint", "Stabilizing",
               "Starvation", "ThreadTimedOut", "CooperativeBlocking")


@dataclass(frozen=True, slots=True)
class ClrThreadPool:
    kind: str  # "Portable", "Windows" or "Legacy" (the native pool of old runtimes)
    cpu_utilization: int = 0
    workers_running: int = 0  # threads processing work items
    workers_existing: int = 0  # threads the pool has (running + idle)
    workers_retired: int = 0
    min_workers: int = 0
    max_workers: int = 0
    windows_thread_count: int = 0

    @property
    def workers_idle(self) -> int:
        return self.workers_existing - self.workers_running

    @property
    def workers_total(self) -> int:
        return self.workers_existing + self.workers_retired


@dataclass(frozen=True, slots=True)
class HillClimbingLogEntry:
    """One change of the pool's thread-count goal, or one state the climber went through."""
    tick_count: int  # Environment.TickCount when logged (ms)
    transition: int  # a HillClimbing.StateOrTransition value
    new_thread_count: int  # newControlSetting: the goal after this step
    sample_count: int  # lastHistoryCount
    throughput: float  # lastHistoryMean: completions per second (a float32)

    @property
    def transition_name(self) -> str:
        return TRANSITIONS[self.transition] if 0 <= self.transition < len(TRANSITIONS) else str(self.transition)


def read_threadpool(runtime: "ClrRuntime") -> ClrThreadPool | None:
    """The pool's state, or None when neither the managed pool nor the DAC can tell."""
    found = read_threadpool_or_reason(runtime)
    return found if isinstance(found, ClrThreadPool) else None


def read_threadpool_or_reason(runtime: "ClrRuntime") -> ClrThreadPool | str:
    """The pool's state, or why neither the managed pool nor the DAC can tell (one clause
    each, for SOS's "Failed to obtain ThreadPool data." to say why)."""
    runtime.refresh()
    try:
        pool = _portable_pool(runtime)
    except (SosError, MetadataError) as e:
        pool = f"{PORTABLE_POOL} cannot be read ({e})"
    if isinstance(pool, ClrThreadPool):
        return pool
    legacy = runtime.reader.threadpool_data()
    if legacy is None:
        return (f"{pool}, and the DAC gives no native thread-pool data (GetThreadpoolData; .NET 8 and later "
                "DACs refuse it)")
    return ClrThreadPool("Legacy", legacy.cpu_utilization, legacy.num_working_worker_threads,
                         legacy.num_working_worker_threads + legacy.num_idle_worker_threads,
                         legacy.num_retired_worker_threads, legacy.min_limit_total_worker_threads,
                         legacy.max_limit_total_worker_threads)


class _CoreLib:
    """CoreLib's loaded types and field names: just enough to read a few known fields."""

    def __init__(self, runtime: "ClrRuntime") -> None:
        self.runtime = runtime
        dac = runtime.reader
        mtd = dac.method_table_data(runtime.heap.object_mt)
        if mtd is None:
            raise SosError("cannot find System.Private.CoreLib")
        self.module = mtd.module
        md = dac.module_data(self.module)
        if md is None or not md.metadata_start or not md.metadata_size:
            raise SosError("System.Private.CoreLib has no metadata in the target")
        self.metadata = MetadataReader(runtime.target.read(md.metadata_start, md.metadata_size))
        self._type_map: dict[int, int] | None = None

    def method_table(self, type_name: str) -> int:
        """The MethodTable of a CoreLib type, 0 when the type is not loaded."""
        token = self.metadata.find_type(type_name)
        if token is None:
            return 0
        if self._type_map is None:
            self._type_map = dict(self.runtime.reader.traverse_module_map(self.module, 0))
        return self._type_map.get(token & 0xFFFFFF, 0)

    def fields(self, mt: int) -> dict[str, "FieldDescData"]:
        """The type's own fields (instance and static) by name."""
        dac = self.runtime.reader
        info = dac.method_table_field_data(mt)
        if info is None:
            return {}
        count = min(info.num_instance_fields + info.num_static_fields, _MAX_FIELDS)
        out: dict[str, FieldDescData] = {}
        fd = info.first_field
        while fd and len(out) < count:
            data = dac.field_desc_data(fd)
            if data is None:
                break
            out[self.metadata.field(data.token).name] = data
            fd = data.next_field
        return out


def _portable_pool(runtime: "ClrRuntime") -> ClrThreadPool | str:
    """The managed pool, or why it cannot be read."""
    corelib = _CoreLib(runtime)
    target = runtime.target
    mt = corelib.method_table(PORTABLE_POOL)
    if not mt:
        return f"{PORTABLE_POOL} is not loaded (the process has not used the thread pool yet)"
    fields = corelib.fields(mt)
    instance_field = fields.get("ThreadPoolInstance")
    if instance_field is None:
        return f"{PORTABLE_POOL} has no ThreadPoolInstance field in this runtime"
    static_base = getattr(runtime.reader, "static_base_address", None)
    bases = static_base(mt) if static_base is not None else None
    if not bases or not bases[1]:
        return f"the statics of {PORTABLE_POOL} are not allocated (its class constructor has not run)"
    pool = target.read_pointer(bases[1] + instance_field.offset)
    if not pool:
        return f"{PORTABLE_POOL}.ThreadPoolInstance is null (the pool has not been created yet)"

    def field_address(obj_data: int, flds: dict[str, FieldDescData], name: str) -> int:
        f = flds.get(name)
        if f is None:
            raise SosError(f"{PORTABLE_POOL} has no field {name}")
        return obj_data + f.offset

    data = pool + target.pointer_size  # instance fields follow the MethodTable pointer
    cpu = _i32(target.read(field_address(data, fields, "_cpuUtilization"), 4))
    min_threads = _i16(target.read(field_address(data, fields, "_minThreads"), 2))
    max_threads = _i16(target.read(field_address(data, fields, "_maxThreads"), 2))
    separated = field_address(data, fields, "_separated")
    sep_fields = corelib.fields(fields["_separated"].mt_of_type or
                                corelib.method_table(PORTABLE_POOL + "+CacheLineSeparated"))
    counts = field_address(separated, sep_fields, "counts")
    counts_mt = sep_fields["counts"].mt_of_type or corelib.method_table("System.Threading.PortableThreadPool+ThreadCounts")
    raw = int.from_bytes(target.read(field_address(counts, corelib.fields(counts_mt), "_data"), 8), "little")
    return ClrThreadPool("Portable", cpu, raw & 0xFFFF, (raw >> 16) & 0xFFFF, 0, min_threads, max_threads)


def _i32(b: bytes) -> int:
    return int.from_bytes(b, "little", signed=True)


def _i16(b: bytes) -> int:
    return int.from_bytes(b, "little", signed=True)


def read_hill_climbing_log(runtime: "ClrRuntime") -> list[HillClimbingLogEntry]:
    """The hill climbing log, oldest first; empty when the climber was never created (or its
    type or fields are not what .NET 6+ has)."""
    runtime.refresh()
    corelib = _CoreLib(runtime)
    target = runtime.target
    ptr = target.pointer_size
    mt = corelib.method_table(HILL_CLIMBING)
    if not mt:
        return []
    fields = corelib.fields(mt)
    static_base = getattr(runtime.reader, "static_base_address", None)
    bases = static_base(mt) if static_base is not None else None
    climber_field = fields.get("ThreadPoolHillClimber")
    if climber_field is None or not bases or not bases[1]:
        return []
    climber = target.read_pointer(bases[1] + climber_field.offset)
    need = ("_logStart", "_logSize", "_log")
    if not climber or any(n not in fields for n in need):
        return []
    data = climber + ptr
    start = _i32(target.read(data + fields["_logStart"].offset, 4))
    size = _i32(target.read(data + fields["_logSize"].offset, 4))
    log = target.read_pointer(data + fields["_log"].offset)
    if not log:
        return []
    array_mt = runtime.reader.method_table_data(target.read_pointer(log))
    entry_mt = corelib.method_table(HILL_CLIMBING + "+LogEntry")
    if array_mt is None or not array_mt.component_size or not entry_mt:
        return []
    length = _i32(target.read(log + ptr, 4))
    size = max(0, min(size, length, _MAX_LOG))
    ef = corelib.fields(entry_mt)
    names = ("tickCount", "stateOrTransition", "newControlSetting", "lastHistoryCount", "lastHistoryMean")
    if any(n not in ef for n in names):
        return []
    stride = array_mt.component_size
    elements = log + 2 * ptr  # MethodTable pointer, then the length padded to a pointer
    raw = target.read(elements, size * stride) if size else b""
    entries = []
    for i in range(size):
        # (i + start) % size: the ring as ClrMD walks it (start is the oldest entry).
        at = ((i + start) % size) * stride

        def i32(name: str) -> int:
            return _i32(raw[at + ef[name].offset:at + ef[name].offset + 4])
        mean = struct.unpack_from("<f", raw, at + ef["lastHistoryMean"].offset)[0]
        entries.append(HillClimbingLogEntry(i32("tickCount"), i32("stateOrTransition"), i32("newControlSetting"),
                                            i32("lastHistoryCount"), mean))
    return entries
