"""The thread pool, read the way SOS's threadpool command reads it.

Since .NET 6 the worker pool is managed code: System.Threading.PortableThreadPool, whose
singleton ``ThreadPoolInstance`` keeps ``_cpuUtilization``, ``_minThreads``, ``_maxThreads`` and,
in ``_separated.counts._data`` (a ulong), the thread counts: bits 0-15 threads processing
work, 16-31 existing threads, 32-47 the goal. The runtime names these fields for SOS in its
source and keeps them stable. Older runtimes (and the legacy I/O completion pool) answer
through the DAC's GetThreadpoolData instead; .NET 8+ DACs refuse that call.

The fields are found by name: the type's FieldDescs give offsets and tokens, CoreLib's
metadata (read from the target) gives the names.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...errors import SosError
from ...formats.metadata import MetadataError, MetadataReader

if TYPE_CHECKING:
    from ...dac.structs import FieldDescData
    from ..runtime import ClrRuntime

PORTABLE_POOL = "System.Threading.PortableThreadPool"
_MAX_FIELDS = 4096


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
