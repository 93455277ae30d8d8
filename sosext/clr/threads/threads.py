"""Managed threads: the runtime's Thread objects and what they say about themselves.

Every thread the runtime knows (started or not, alive or dead) sits on the thread store's
list. Each one has an OS thread id while it runs, a managed id, a state word, a GC mode
(cooperative while it runs managed code, preemptive otherwise), an allocation context,
and a handle to the last exception it threw.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...errors import SosError

if TYPE_CHECKING:
    from ..runtime import ClrRuntime


class ThreadState(enum.IntFlag):
    """Thread::ThreadState bits (dotnet/runtime src/coreclr/vm/threads.h)."""

    ABORT_REQUESTED = 0x00000001
    GC_SUSPEND_PENDING = 0x00000002
    USER_SUSPEND_PENDING = 0x00000004
    DEBUG_SUSPEND_PENDING = 0x00000008
    BACKGROUND = 0x00000200
    UNSTARTED = 0x00000400
    DEAD = 0x00000800
    WE_OWN = 0x00001000
    CO_INITIALIZED = 0x00002000
    IN_STA = 0x00004000
    IN_MTA = 0x00008000
    REPORT_DEAD = 0x00010000
    FULLY_INITIALIZED = 0x00020000
    TASK_RESET = 0x00040000
    SYNC_SUSPENDED = 0x00080000
    DEBUG_WILL_SYNC = 0x00100000
    STACK_CRAWL_NEEDED = 0x00200000
    TP_WORKER_THREAD = 0x01000000
    INTERRUPTIBLE = 0x02000000
    INTERRUPTED = 0x04000000
    COMPLETION_PORT_THREAD = 0x08000000
    ABORT_INITIATED = 0x10000000
    FINALIZED = 0x20000000
    FAIL_STARTED = 0x40000000
    DETACHED = 0x80000000


@dataclass(frozen=True, slots=True)
class ThreadStoreInfo:
    """The thread store's counters, as the runtime keeps them."""

    thread_count: int
    unstarted: int
    background: int
    pending: int
    dead: int
    first_thread: int
    finalizer_thread: int
    gc_thread: int
    host_config: int


@dataclass(frozen=True, slots=True)
class ClrThread:
    address: int  # the runtime's Thread object
    managed_id: int  # Thread.ManagedThreadId
    os_id: int  # OS thread id (LWP); 0 when not running on one
    state: int  # ThreadState bits
    cooperative: bool  # GC mode: True while the thread runs managed code (GC must wait for it)
    alloc_context: tuple[int, int]  # (pointer, limit) of its allocation context
    domain: int
    lock_count: int
    frame: int  # innermost explicit runtime Frame
    teb: int
    last_thrown_handle: int
    last_exception: int  # the object the handle refers to, 0 if none
    first_nested_exception: int
    is_finalizer: bool
    is_gc: bool

    @property
    def flags(self) -> ThreadState:
        return ThreadState(self.state & 0xFFFFFFFF)

    @property
    def is_background(self) -> bool:
        return bool(self.state & ThreadState.BACKGROUND)

    @property
    def is_unstarted(self) -> bool:
        return bool(self.state & ThreadState.UNSTARTED)

    @property
    def is_dead(self) -> bool:
        return bool(self.state & ThreadState.DEAD)

    @property
    def is_threadpool_worker(self) -> bool:
        return bool(self.state & ThreadState.TP_WORKER_THREAD)

    @property
    def is_completion_port(self) -> bool:
        return bool(self.state & ThreadState.COMPLETION_PORT_THREAD)

    @property
    def apartment(self) -> str:
        """COM apartment: only Windows has them; SOS prints Ukn elsewhere."""
        return "Ukn"


def thread_store(runtime: "ClrRuntime") -> ThreadStoreInfo:
    runtime.refresh()
    d = runtime.reader.thread_store_data()
    return ThreadStoreInfo(d.thread_count, d.unstarted_thread_count, d.background_thread_count,
                           d.pending_thread_count, d.dead_thread_count, d.first_thread,
                           d.finalizer_thread, d.gc_thread, d.host_config)


def clr_threads(runtime: "ClrRuntime") -> list[ClrThread]:
    """Every runtime Thread, in the thread store's order."""
    runtime.refresh()
    dac = runtime.reader
    store = thread_store(runtime)
    out = []
    for addr, t in dac.threads():
        domain = t.domain
        if not domain and t.context:
            domain = dac.domain_from_context(t.context) or 0
        lock_count = t.lock_count - (1 << 32) if t.lock_count & 0x80000000 else t.lock_count
        out.append(ClrThread(
            address=addr, managed_id=t.cor_thread_id, os_id=t.os_thread_id, state=t.state & 0xFFFFFFFF,
            cooperative=t.preemptive_gc_disabled == 1,
            alloc_context=(t.alloc_context_ptr, t.alloc_context_limit), domain=domain,
            lock_count=lock_count, frame=t.frame, teb=t.teb,
            last_thrown_handle=t.last_thrown_object_handle,
            last_exception=_handle_target(runtime, t.last_thrown_object_handle),
            first_nested_exception=t.first_nested_exception,
            is_finalizer=addr == store.finalizer_thread, is_gc=addr == store.gc_thread))
    return out


def thread_by_os_id(runtime: "ClrRuntime", os_tid: int) -> ClrThread | None:
    for t in clr_threads(runtime):
        if t.os_id == os_tid:
            return t
    return None


def _handle_target(runtime: "ClrRuntime", handle: int) -> int:
    if not handle:
        return 0
    try:
        return runtime.target.read_pointer(handle)
    except SosError:
        return 0


def faulting_thread(runtime: "ClrRuntime") -> tuple[int, int] | None:
    """(OS thread id, signal) of the thread a core was written for: the one whose status note
    records a signal (a crash's SIGABRT/SIGSEGV); None for live processes and plain dumps."""
    core = runtime.target.core_file()
    for t in getattr(core, "threads", ()) if core is not None else ():
        if t.signal:
            return t.tid, t.signal
    return None
