"""Collect a GC heap dump over EventPipe, as ``dotnet-gcdump`` does, in pure Python.

A session on ``Microsoft-Windows-DotNETRuntime`` at level 5 (verbose) with the keywords
GC (0x1) | Type (0x80000) | GCHeapDump (0x100000) | GCHeapCollect (0x800000) |
GCHeapAndTypeNames (0x1000000) makes the runtime run a full blocking GC (reason Induced)
and, while it marks, report every live object and reference. The runtime's events carry no
field metadata in the stream, so payloads are decoded by event id from the layouts of the
runtime's event manifest (``ClrEtwAll.man``)::

    1  GCStart_V2      u32 Count, u32 Depth, u32 Reason, u32 Type, u16 ClrInstanceID, u64 ClientSeq
    2  GCEnd_V1        u32 Count, u32 Depth, u16 ClrInstanceID
    15 BulkType        u32 Count, u16 ClrInstanceID, Count × {u64 TypeID, u64 ModuleID,
                       u32 TypeNameID, u32 Flags, u8 CorElementType, utf16z Name,
                       u32 TypeParameterCount, TypeParameterCount × u64 TypeParameter}
    16 GCBulkRootEdge  u32 Index, u32 Count, u16 ClrInstanceID, Count × {ptr RootedNodeAddress,
                       u8 GCRootKind, u32 GCRootFlag, ptr GCRootID}
    18 GCBulkNode      u32 Index, u32 Count, u16 ClrInstanceID, Count × {ptr Address,
                       u64 Size, u64 TypeID, u64 EdgeCount}
    19 GCBulkEdge      u32 Index, u32 Count, u16 ClrInstanceID, Count × {ptr Value, u32 ReferencingFieldID}
    38 GCBulkRootStaticVar  u32 Count, u64 AppDomainID, u16 ClrInstanceID, Count × {u64 GCRootID,
                       u64 ObjectID, u64 TypeID, u32 Flags, utf16z FieldName}

Node i's references are the next EdgeCount entries of the concatenated GCBulkEdge values
(both streams ordered by their Index). The dump ends with the GCEnd of the GC that produced
the nodes; the session is then stopped.
"""
from __future__ import annotations

import struct
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from sosext.ipc.eventpipe import EventPipeSession, Provider, process_gone
from sosext.ipc.nettrace import Cursor, NettraceError, TraceEvent
from sosext.ipc.protocol import IpcError

__all__ = ["HeapDumpEvents", "collect_heap_dump", "KEYWORDS", "PROVIDER"]

PROVIDER = "Microsoft-Windows-DotNETRuntime"
KEYWORDS = 0x1 | 0x80000 | 0x100000 | 0x800000 | 0x1000000
EV_GC_START, EV_GC_END, EV_BULK_TYPE, EV_ROOT_EDGE, EV_NODE, EV_EDGE, EV_STATIC_ROOT = 1, 2, 15, 16, 18, 19, 38
STATIC_ROOT_KIND = 6
GC_REASON_INDUCED = 1  # the heap dump's own GC (ETW::GCLog::ForceGC)

_NODE = np.dtype([("address", "<u8"), ("size", "<u8"), ("type", "<u8"), ("edges", "<u8")])
_EDGE = np.dtype([("value", "<u8"), ("field", "<u4")])
_ROOT = np.dtype([("address", "<u8"), ("kind", "u1"), ("flag", "<u4"), ("id", "<u8")])


@dataclass
class HeapDumpEvents:
    """What the runtime reported, in arrays (see :class:`sosext.clr.snapshots.gcdumpsnap.GcDump`)."""

    pid: int
    pointer_size: int
    gc_number: int
    types: dict[int, tuple[str, tuple[int, ...]]]  # TypeID -> (name, type parameter ids)
    nodes: np.ndarray  # _NODE records
    edges: np.ndarray  # uint64 targets
    root_address: np.ndarray
    root_kind: np.ndarray
    root_names: dict[int, str] = field(default_factory=dict)  # root index -> field name of a static
    events: int = 0
    seconds: float = 0.0


@dataclass
class _Collector:
    pid: int
    nodes: list[tuple[int, np.ndarray]] = field(default_factory=list)
    edges: list[tuple[int, np.ndarray]] = field(default_factory=list)
    roots: list[tuple[int, np.ndarray]] = field(default_factory=list)
    static_roots: list[int] = field(default_factory=list)
    static_names: list[tuple[int, str]] = field(default_factory=list)  # (declaring TypeID, field name)
    types: dict[int, tuple[str, tuple[int, ...]]] = field(default_factory=dict)
    dump_gc: int | None = None
    ended: set[int] = field(default_factory=set)
    done: bool = False
    events: int = 0

    def bulk(self, ev: TraceEvent, dtype: np.dtype) -> tuple[int, np.ndarray]:
        p = ev.payload
        if len(p) < 10:
            raise NettraceError(f"truncated heap dump event {ev.metadata.event_id}")
        index, count = struct.unpack_from("<II", p)
        if 10 + count * dtype.itemsize > len(p):
            raise NettraceError(f"truncated heap dump event {ev.metadata.event_id} ({count} entries)")
        return index, np.frombuffer(p, dtype=dtype, count=count, offset=10).copy()

    def on_event(self, ev: TraceEvent) -> None:
        if ev.provider != PROVIDER:
            return
        self.events += 1
        eid, p = ev.metadata.event_id, ev.payload
        # Events of different threads are not in time order in the stream (with server GC the
        # GC thread's GCEnd may come before the triggering thread's GCStart): keep both sides.
        if eid == EV_GC_START and len(p) >= 12:
            count, depth, reason = struct.unpack_from("<III", p)
            if self.dump_gc is None and depth == 2 and reason == GC_REASON_INDUCED:
                self.dump_gc = count
        elif eid == EV_GC_END and len(p) >= 8:
            self.ended.add(struct.unpack_from("<I", p)[0])
        elif eid == EV_NODE:
            self.nodes.append(self.bulk(ev, _NODE))
        elif eid == EV_EDGE:
            self.edges.append(self.bulk(ev, _EDGE))
        elif eid == EV_ROOT_EDGE:
            self.roots.append(self.bulk(ev, _ROOT))
        elif eid == EV_BULK_TYPE:
            self.bulk_types(p)
        elif eid == EV_STATIC_ROOT:
            self.static_var_roots(p)
        if not self.done and self.dump_gc in self.ended and self.nodes:
            self.done = True

    def bulk_types(self, p: bytes) -> None:
        b = Cursor(p, "BulkType event")
        count = b.i32()
        b.take(2)
        for _ in range(max(count, 0)):
            type_id = b.unpack(struct.Struct("<Q"))
            b.take(8 + 4 + 4 + 1)  # ModuleID, TypeNameID, Flags, CorElementType
            name = b.utf16z()
            nparams = b.i32()
            if nparams < 0 or nparams * 8 > b.remaining:
                raise NettraceError("malformed BulkType event")
            params = struct.unpack_from(f"<{nparams}Q", b.take(8 * nparams))
            self.types[type_id] = (name, tuple(params))

    def static_var_roots(self, p: bytes) -> None:
        b = Cursor(p, "GCBulkRootStaticVar event")
        count = b.i32()
        b.take(8 + 2)
        for _ in range(max(count, 0)):
            b.take(8)  # GCRootID
            obj = b.unpack(struct.Struct("<Q"))
            type_id = b.unpack(struct.Struct("<Q"))
            b.take(4)  # Flags
            self.static_roots.append(obj)
            self.static_names.append((type_id, b.utf16z()))


def _concat(chunks: list[tuple[int, np.ndarray]], dtype: np.dtype) -> np.ndarray:
    chunks.sort(key=lambda c: c[0])
    return np.concatenate([c[1] for c in chunks]) if chunks else np.zeros(0, dtype=dtype)


def collect_heap_dump(pid: int, *, timeout: float = 300.0, buffer_mb: int = 256,
                      stop_flag=lambda: False) -> HeapDumpEvents:  # type: ignore[no-untyped-def]
    """Run one heap-dump session on ``pid`` and return what it reported.

    Raises :class:`IpcError` (one line) when the process is not .NET, exits, does not dump
    within ``timeout`` seconds, or events were lost (the edge count does not add up).
    """
    started = time.monotonic()
    session = EventPipeSession(pid, [Provider(PROVIDER, KEYWORDS, 5)], buffer_mb=buffer_mb)
    col = _Collector(pid)
    timed_out = threading.Event()

    def watchdog() -> None:
        while not col.done and not timed_out.is_set():
            if time.monotonic() - started > timeout or stop_flag():
                timed_out.set()
                try:
                    session.stop()
                except IpcError:
                    pass
                return
            time.sleep(0.1)

    dog = threading.Thread(target=watchdog, daemon=True)
    dog.start()
    try:
        stopped = False
        for ev in session.events():
            col.on_event(ev)
            if col.done and not stopped:
                # Stop, then read on: the runtime flushes every thread's buffer before it ends
                # the stream, and some of the dump's events may still be in them.
                session.stop()
                stopped = True
        if not col.done and not timed_out.is_set():
            if process_gone(pid):
                raise IpcError(f"process {pid} exited during the heap dump")
            raise IpcError(f"process {pid} ended the EventPipe session before the heap dump was complete")
    finally:
        timed_out.set()
        session.close()
        dog.join(timeout=2)
    if not col.done:
        if stop_flag():
            raise IpcError("interrupted")
        raise IpcError(f"process {pid} did not finish a heap dump within {timeout:g} s")
    pointer_size = session.reader.info.pointer_size if session.reader and session.reader.info else 8
    if pointer_size != 8:
        raise IpcError(f"process {pid} is a {pointer_size * 8}-bit process; only 64-bit heap dumps are supported")
    nodes = _concat(col.nodes, _NODE)
    edges = _concat(col.edges, _EDGE)["value"].astype(np.uint64)
    roots = _concat(col.roots, _ROOT)
    if int(nodes["edges"].sum(dtype=np.uint64)) != edges.size:
        raise IpcError(f"the heap dump of process {pid} lost events ({int(nodes['edges'].sum())} references "
                       f"announced, {edges.size} received); retry, or the heap is too big for the "
                       f"{buffer_mb} MB session buffer")
    statics = np.array(col.static_roots, dtype=np.uint64)
    # The event's TypeID is the type of the field's value, not the declaring type: name only.
    names = {int(roots.size) + i: field_name for i, (_type_id, field_name) in enumerate(col.static_names)}
    return HeapDumpEvents(
        pid, pointer_size, int(col.dump_gc or 0), col.types, nodes, edges,
        np.concatenate([roots["address"], statics]),
        np.concatenate([roots["kind"], np.full(statics.size, STATIC_ROOT_KIND, dtype=np.uint8)]),
        names, col.events, time.monotonic() - started)
