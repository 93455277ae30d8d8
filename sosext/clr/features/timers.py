"""Running timers: System.Threading.TimerQueueTimer objects, read the way SOS's timerinfo does.

.NET Core 3.0+ keeps one TimerQueue per processor (``TimerQueue.Instances``); each holds two
doubly linked lists of TimerQueueTimer, ``_shortTimers`` (due within 1/3 s when set) and
``_longTimers``, chained through ``_next``. Each timer keeps the due time and period it was
given in milliseconds (``_dueTime``, ``_period``; 0xFFFFFFFF is Timeout.Infinite), its
``_state`` and its ``_timerCallback`` delegate. Older runtimes had one list, ``m_timers``,
with ``m_``-prefixed fields. TimerQueues are found on the heap, as SOS finds them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

from ...errors import SosError
from ..heap.instances import ObjectReader, objects_of_type
from ...formats.metadata import MetadataError

if TYPE_CHECKING:
    from ..runtime import ClrRuntime

TIMER_QUEUE = "System.Threading.TimerQueue"
INFINITE = 0xFFFFFFFF
_MAX_TIMERS = 1 << 22  # a list longer than this is a cycle in a corrupt heap


@dataclass(frozen=True, slots=True)
class ClrTimer:
    address: int  # the TimerQueueTimer
    due_time: int  # ms, as set
    period: int  # ms; INFINITE when the timer is not periodic
    canceled: bool
    state: int  # the state object, 0 if none
    state_type: str  # "" when there is no state
    callback: str  # "Type.Method" of the callback, "" when the code cannot be named
    is_short: bool | None  # None on runtimes with a single list


def read_timers(runtime: "ClrRuntime") -> list[ClrTimer]:
    """Every timer on every TimerQueue, queue by queue in heap order, short list first."""
    reader = ObjectReader(runtime)
    out: list[ClrTimer] = []
    for queue in objects_of_type(reader.heap, TIMER_QUEUE):
        if reader.has_field(queue, "m_timers"):
            lists = [(reader.read(queue, "m_timers"), None)]
        else:
            lists = [(reader.read(queue, "_shortTimers"), True), (reader.read(queue, "_longTimers"), False)]
        for head, is_short in lists:
            for t in _chain(reader, head):
                out.append(_timer(reader, t, is_short))
    return out


def _chain(reader: ObjectReader, head: int) -> Iterator[int]:
    seen: set[int] = set()
    cur = head
    while cur and cur not in seen and len(seen) < _MAX_TIMERS:
        if not reader.is_object(cur):
            raise SosError(f"timer list leads to {cur:#x}, which is not an object")
        seen.add(cur)
        yield cur
        cur = reader.read(cur, "_next" if reader.has_field(cur, "_next") else "m_next")


def _timer(reader: ObjectReader, t: int, is_short: bool | None) -> ClrTimer:
    p = "_" if reader.has_field(t, "_dueTime") else "m_"
    due = reader.read(t, p + "dueTime") & 0xFFFFFFFF
    period = reader.read(t, p + "period") & 0xFFFFFFFF
    canceled = bool(reader.read(t, p + "canceled"))
    state = reader.read(t, p + "state")
    state_type = ""
    if state and reader.is_object(state):
        state_type = reader.type_name(state)
    else:
        state = 0
    callback = reader.read(t, p + "timerCallback")
    return ClrTimer(t, due, period, canceled, state, state_type, _callback_name(reader, callback), is_short)


def _callback_name(reader: ObjectReader, delegate: int) -> str:
    """SOS's "Type.Method" of a TimerCallback: the method at _methodPtr, named after the type of
    _target. A static method's delegate calls a shuffle thunk there and keeps the method in
    _methodPtrAux (its _target is the delegate itself): SOS prints nothing then, sosext names
    the method and its declaring type, as dumpdelegate does."""
    if not delegate or not reader.is_object(delegate):
        return "???"
    type_name = reader.type_name(delegate)
    if type_name != "System.Threading.TimerCallback":
        return f"<{type_name}>"
    code = reader.read(delegate, "_methodPtr")
    method = method_of_code(reader.runtime, code) if code else None
    if method is None:
        aux = reader.read(delegate, "_methodPtrAux") if reader.has_field(delegate, "_methodPtrAux") else 0
        method = method_of_code(reader.runtime, aux) if aux else None
        return ".".join(method) if method is not None else ""
    declaring, name = method
    target = reader.read(delegate, "_target")
    if target and reader.is_object(target):
        declaring = reader.type_name(target)
    return f"{declaring}.{name}"


def method_desc_of_code(runtime: "ClrRuntime", code: int) -> int:
    """The MethodDesc whose jitted code, or whose precode stub, is at ``code``; 0 if none."""
    dac = runtime.reader
    md = dac.method_desc_from_ip(code)
    if not md:
        header = dac.code_header_data(code)  # GetCodeHeaderData also resolves a precode stub
        md = header.method_desc_ptr if header is not None else 0
    return md or 0


def method_of_code(runtime: "ClrRuntime", code: int) -> tuple[str, str] | None:
    """(declaring type name, method name) of the method whose code or stub is at ``code``."""
    dac = runtime.reader
    md = method_desc_of_code(runtime, code)
    if not md:
        return None
    data = dac.method_desc_data(md)
    if data is None:
        return None
    name = ""
    md_reader = runtime.catalog.metadata(data.module_ptr)
    if md_reader is not None:
        try:
            name = md_reader.method(data.token).name
        except MetadataError:
            name = ""
    if not name:
        full = dac.method_desc_name(md) or ""
        name = full.split("(")[0].rsplit(".", 1)[-1]
    return runtime.heap.types.name_of(data.method_table_ptr), name
