"""Async "stacks": tasks and async state machines on the heap, chained by their continuations.

An async method's state lives in a box, ``AsyncTaskMethodBuilder<TResult>+AsyncStateMachineBox
<TStateMachine>``, which is itself a Task<TResult>; its ``StateMachine`` field holds the
compiler's state machine (a struct in release builds) whose ``<>1__state`` is the await it is
paused at (-1 running or not started, -2 done). A task's ``m_continuationObject`` names what
runs when it completes: a box directly, a list of continuations, or a wrapper around a
delegate whose target leads back to a box. Following those links from the task nothing else
continues gives the chain SOS's dumpasync prints as a stack, innermost awaited task first.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ...errors import SosError
from . import tasks as task_states  # the TASK_STATE_* bits (a function below has its own `tasks`)
from ..heap.instances import ObjectReader
from ..progress import polled
from ..typesystem.typenames import csharp_name

if TYPE_CHECKING:
    from ..runtime import ClrRuntime

_BOX_PREFIX = "System.Runtime.CompilerServices.AsyncTaskMethodBuilder<"
_WRAPPER = "System.Runtime.CompilerServices.AsyncMethodBuilderCore+ContinuationWrapper"
_FLAG_NAMES = ((task_states.TASK_STATE_STARTED, "Started"),
               (task_states.TASK_STATE_DELEGATE_INVOKED, "DelegateInvoked"),
               (task_states.TASK_STATE_DISPOSED, "Disposed"),
               (task_states.TASK_STATE_EXCEPTIONOBSERVEDBYPARENT, "ExceptionObservedByParent"),
               (task_states.TASK_STATE_CANCELLATIONACKNOWLEDGED, "CancellationAcknowledged"),
               (task_states.TASK_STATE_FAULTED, "Faulted"), (task_states.TASK_STATE_CANCELED, "Canceled"),
               (task_states.TASK_STATE_WAITING_ON_CHILDREN, "WaitingOnChildren"),
               (task_states.TASK_STATE_RAN_TO_COMPLETION, "RanToCompletion"),
               (task_states.TASK_STATE_COMPLETION_RESERVED, "CompletionReserved"))


def describe_task_flags(flags: int) -> str:
    """m_stateFlags as SOS spells them ("Started|DelegateInvoked"); " " when none is set."""
    names = [n for bit, n in _FLAG_NAMES if flags & bit]
    return "|".join(names) if names else " "


def is_completed(flags: int) -> bool:
    return bool(flags & task_states.TASK_STATE_COMPLETED)


@dataclass
class AsyncObject:
    address: int
    method_table: int
    type_name: str  # C#-style
    description: str  # what SOS prints for it (a box: its state machine's type)
    flags: int
    is_state_machine: bool
    await_state: int = 0
    state_machine: int = 0  # address of the state machine (a struct's data, or an object)
    state_machine_mt: int = 0
    state_machine_is_struct: bool = False
    continuations: list[int] = field(default_factory=list)  # addresses (resolved)
    top_level: bool = True


@dataclass
class AsyncGraph:
    objects: dict[int, AsyncObject]  # heap order
    names: dict[int, str]  # C#-style type names of continuation objects outside ``objects``
    flags_of: dict[int, int]  # m_stateFlags of such continuations, when they are tasks


def is_state_machine_box(type_name: str) -> bool:
    return type_name.startswith(_BOX_PREFIX) and "AsyncStateMachineBox" in type_name[len(_BOX_PREFIX):]


def box_description(type_name: str) -> str:
    pos = type_name.find("StateMachineBox<")
    if pos < 0:
        return type_name
    return type_name[pos + len("StateMachineBox<"):-1]


class _Tasks:
    """Which MethodTables are tasks (System.Threading.Tasks.Task or derived)."""

    def __init__(self, runtime: "ClrRuntime") -> None:
        self.reader = runtime.reader
        self.types = runtime.heap.types
        self._is: dict[int, bool] = {}
        self.task_mt = 0  # System.Threading.Tasks.Task's own MethodTable, once met

    def is_task(self, mt: int) -> bool:
        if mt in self._is:
            return self._is[mt]
        chain = []
        cur, found = mt, False
        while cur and len(chain) < 64:
            if cur in self._is:
                found = self._is[cur]
                break
            chain.append(cur)
            if self.types.name_of(cur) == task_states.TASK:
                self.task_mt = cur
                found = True
                break
            data = self.reader.method_table_data(cur)
            cur = data.parent_method_table if data is not None else 0
        for m in chain:
            self._is[m] = found
        return found


def collect_async_objects(runtime: "ClrRuntime", *, include_completed: bool,
                          only_boxes: bool = False) -> AsyncGraph:
    """Every task on the heap (larger than 24 bytes, as SOS looks), with its continuations
    resolved and top-level ones marked. ``only_boxes`` keeps state machine boxes only."""
    heap = runtime.heap
    ix = heap.index()
    r = ObjectReader(runtime)
    tasks = _Tasks(runtime)
    names: dict[int, str] = {}

    def cname(mt: int) -> str:
        if mt not in names:
            names[mt] = csharp_name(heap.types.name_of(mt))
        return names[mt]

    task_ids = [i for i, mt in enumerate(ix.method_tables.tolist()) if tasks.is_task(mt)]
    mask = ix.mask_type_ids(task_ids) & (ix.sizes > np.uint32(24))
    sentinel = _completion_sentinel(runtime, tasks.task_mt)
    graph = AsyncGraph({}, {}, {})
    for pos in polled(np.flatnonzero(mask).tolist()):
        addr = int(ix.addresses[pos])
        mt = int(ix.method_tables[ix.type_ids[pos]])
        tname = cname(mt)
        box = is_state_machine_box(tname)
        if only_boxes and not box:
            continue
        if r.field(mt, task_states.STATE_FIELD) is None:
            continue
        flags = r.read(addr, task_states.STATE_FIELD, mt) & 0xFFFFFFFF
        if not include_completed and is_completed(flags):
            continue
        o = AsyncObject(addr, mt, tname, _describe(r, addr, mt, tname, box, sentinel, cname), flags, box)
        if box:
            _read_state_machine(r, o)
        cont = _continuation(r, addr, mt, cname, tasks)
        if cont:
            _add_continuation(r, cont, o.continuations, cname, tasks)
        graph.objects[addr] = o
    for o in graph.objects.values():
        for c in o.continuations:
            other = graph.objects.get(c)
            if other is not None:
                other.top_level = False
            elif c not in graph.names:
                cmt = r.method_table(c)
                graph.names[c] = _describe(r, c, cmt, cname(cmt), is_state_machine_box(cname(cmt)), sentinel, cname)
                if r.field(cmt, task_states.STATE_FIELD) is not None:
                    graph.flags_of[c] = r.read(c, task_states.STATE_FIELD, cmt) & 0xFFFFFFFF
    return graph


def _completion_sentinel(runtime: "ClrRuntime", mt: int) -> int:
    """Task.s_taskCompletionSentinel: what a completed task's continuation slot is set to."""
    try:
        f = runtime.fields.field(mt, "s_taskCompletionSentinel") if mt else None
        where = runtime.fields.static_address(mt, f) if f is not None and f.is_static else None
        return runtime.target.read_pointer(where) if where else 0
    except SosError:
        return 0


def _describe(r: ObjectReader, addr: int, mt: int, tname: str, box: bool, sentinel: int, cname) -> str:  # type: ignore[no-untyped-def]
    if box:
        return box_description(tname)
    action = _object_field(r, addr, mt, "m_action")
    if action:
        method = _delegate_method(r, action)
        if method:
            return f"{tname} {{{method}}}"
        return tname
    if addr and addr == sentinel:
        return "TaskCompletionSentinel"
    return tname


def _delegate_method(r: ObjectReader, delegate: int) -> str:
    """The signature of the method a delegate calls ("N.C.M(System.Object)"), "" if unknown."""
    from .timers import method_desc_of_code
    dmt = r.method_table(delegate)
    for name in ("_methodPtr", "_methodPtrAux"):
        if r.field(dmt, name) is None:
            return ""
        code = r.read(delegate, name, dmt)
        md = method_desc_of_code(r.runtime, code) if code else 0
        if md:
            return r.runtime.reader.method_desc_name(md) or ""
        if code and name == "_methodPtr":
            continue  # a shuffle thunk (static method): the real target is in _methodPtrAux
        break
    return ""


def _object_field(r: ObjectReader, addr: int, mt: int, name: str) -> int:
    """A reference field's target if the field exists and points at an object, else 0."""
    if r.field(mt, name) is None:
        return 0
    v = r.read(addr, name, mt)
    return v if v and r.is_object(v) else 0


def _read_state_machine(r: ObjectReader, o: AsyncObject) -> None:
    f = r.field(o.method_table, "StateMachine")
    if f is None:
        return
    where = f.address_in(o.address)
    if f.is_struct:
        o.state_machine, o.state_machine_mt, o.state_machine_is_struct = where, f.type_mt, True
    else:
        sm = r.runtime.target.read_pointer(where)
        if not sm or not r.is_object(sm):
            return
        o.state_machine, o.state_machine_mt = sm, r.method_table(sm)
    if o.state_machine_mt and r.field(o.state_machine_mt, "<>1__state") is not None:
        v = r.read(o.state_machine, "<>1__state", o.state_machine_mt, value_class=o.state_machine_is_struct)
        o.await_state = int(v)


def _continuation(r: ObjectReader, addr: int, mt: int, cname, tasks: _Tasks) -> int:  # type: ignore[no-untyped-def]
    c = _object_field(r, addr, mt, "m_continuationObject")
    return _resolve(r, c, cname, tasks) if c else 0


def _resolve(r: ObjectReader, c: int, cname, tasks: _Tasks) -> int:  # type: ignore[no-untyped-def]
    """From a continuation object to what it will run: a box, a task, or a delegate's target."""
    mt = r.method_table(c)
    if tasks.is_task(mt) and is_state_machine_box(cname(mt)):
        return c
    t = _object_field(r, c, mt, "m_task")
    if t:
        return t
    a = _object_field(r, c, mt, "m_action")
    if a:
        c, mt = a, r.method_table(a)
    target = _object_field(r, c, mt, "_target")
    if target:
        c, mt = target, r.method_table(target)
        if cname(mt) == _WRAPPER:
            inner = _object_field(r, c, mt, "_continuation")
            if inner:
                c, mt = inner, r.method_table(inner)
                t2 = _object_field(r, c, mt, "_target")
                if t2:
                    c = t2
    return c


def _add_continuation(r: ObjectReader, c: int, out: list[int], cname, tasks: _Tasks) -> None:  # type: ignore[no-untyped-def]
    mt = r.method_table(c)
    if cname(mt).startswith("System.Collections.Generic.List<"):
        items = _object_field(r, c, mt, "_items")
        if not items:
            return
        n = r.runtime.target.read_u32(items + 8)
        for i in range(min(n, 1 << 20)):
            v = r.runtime.target.read_pointer(items + 16 + 8 * i)
            if v and r.is_object(v):
                out.append(_resolve(r, v, cname, tasks))
        return
    out.append(c)
