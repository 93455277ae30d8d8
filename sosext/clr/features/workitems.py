"""Work items queued to the thread pool and not yet run (threadpoolqueue).

.NET Core's pool keeps its queues in managed objects, found on the heap as SOS finds them:
the System.Threading.ThreadPoolWorkQueue holds the global queues (``workItems``, and
``highPriorityWorkItems`` and ``_assignableWorkItemQueues`` on runtimes that have them:
ConcurrentQueue<object>s), and every worker thread a
``ThreadPoolWorkQueue+WorkStealingQueue`` whose ``m_array`` holds its local items (a
dequeued slot is set to null). A work item is a Task or an IThreadPoolWorkItem; the
callbacks of ThreadPool.QueueUserWorkItem are QueueUserWorkItemCallback* objects whose
``_callback`` delegate says what will run.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

from .concurrent import read_concurrent_queue
from .delegates import callback_name
from ..heap.instances import ObjectReader, objects_of_type, reference_elements

if TYPE_CHECKING:
    from ..runtime import ClrRuntime

WORK_QUEUE = "System.Threading.ThreadPoolWorkQueue"
LOCAL_QUEUE = "System.Threading.ThreadPoolWorkQueue+WorkStealingQueue"
TASK = "System.Threading.Tasks.Task"
# SOS names exactly these types (not a Task's subclasses, not the generic callbacks of
# QueueUserWorkItem<TState>): every other item shows its type, as SOS shows it.
QUEUE_USER_WORK_ITEMS = ("System.Threading.QueueUserWorkItemCallback",
                         "System.Threading.QueueUserWorkItemCallbackDefaultContext")
DEFAULT_SCHEDULER = "System.Threading.Tasks.ThreadPoolTaskScheduler"
_GLOBAL_QUEUES = ("highPriorityWorkItems", "workItems")  # in the order workers take from them


class WorkItemKind(enum.Enum):
    TASK = "task"
    WORK = "work"  # a ThreadPool.QueueUserWorkItem callback
    RAW = "raw"  # any other work item (a Task's subclass too): its type is all SOS shows


@dataclass(frozen=True, slots=True)
class QueuedWorkItem:
    address: int
    kind: WorkItemKind
    type_name: str  # in C# form, as ClrMD (and so SOS's threadpool commands) names it
    method: str  # what will run ("Type.Method", with SOS's notes); the type name for RAW
    is_local: bool  # in a worker thread's own queue rather than a global one


def queued_work_items(runtime: "ClrRuntime") -> list[QueuedWorkItem]:
    """Every queued work item: the global queues first (in dequeue order), then the local ones."""
    reader = ObjectReader(runtime)
    heap = reader.heap
    out: list[QueuedWorkItem] = []
    for queue in objects_of_type(heap, WORK_QUEUE)[:1]:
        for address in _global_items(reader, queue):
            out.append(_item(reader, address, False))
    for local in objects_of_type(heap, LOCAL_QUEUE):
        for address in _local_items(reader, local):
            out.append(_item(reader, address, True))
    return out


def _global_items(reader: ObjectReader, queue: int) -> Iterator[int]:
    queues = [reader.read(queue, name) for name in _GLOBAL_QUEUES if reader.has_field(queue, name)]
    if reader.has_field(queue, "_assignableWorkItemQueues"):
        queues += reference_elements(reader, reader.read(queue, "_assignableWorkItemQueues")) or []
    for q in queues:
        if not q or not reader.is_object(q):
            continue
        # In slot order, as SOS lists them (ClrMDHelper walks each segment's slots from 0).
        for value in read_concurrent_queue(reader.runtime, q, slot_order=True):
            if value.address and value.kind != "null":
                yield value.address


def _local_items(reader: ObjectReader, local: int) -> Iterator[int]:
    if not reader.has_field(local, "m_array"):
        return
    yield from reference_elements(reader, reader.read(local, "m_array")) or []


def _item(reader: ObjectReader, address: int, is_local: bool) -> QueuedWorkItem:
    mt = reader.method_table(address)
    runtime_name = reader.heap.types.name_of(mt)
    type_name = reader.heap.types.csharp_name_of(mt)
    if runtime_name == TASK:
        return QueuedWorkItem(address, WorkItemKind.TASK, type_name, _task_method(reader, address), is_local)
    if runtime_name in QUEUE_USER_WORK_ITEMS:
        return QueuedWorkItem(address, WorkItemKind.WORK, type_name, _callback_method(reader, address), is_local)
    return QueuedWorkItem(address, WorkItemKind.RAW, type_name, type_name, is_local)


def _task_method(reader: ObjectReader, task: int) -> str:
    action = reader.read(task, "m_action") if reader.has_field(task, "m_action") else 0
    if not action or not reader.is_object(action):
        return " [no action]"
    target = reader.read(action, "_target")
    if not target or not reader.is_object(target):
        return " [no target]"
    name = callback_name(reader, action, reader.type_name(target))
    scheduler = reader.read(task, "m_taskScheduler") if reader.has_field(task, "m_taskScheduler") else 0
    if scheduler and reader.is_object(scheduler):
        kind = reader.type_name(scheduler)
        if kind != DEFAULT_SCHEDULER:
            name = f"{name} [{kind}]"
    return name


def _callback_method(reader: ObjectReader, item: int) -> str:
    field = next((n for n in ("_callback", "callback") if reader.has_field(item, n)), None)
    if field is None:
        return "[no callback]"
    callback = reader.read(item, field)
    if not callback or not reader.is_object(callback):
        return "[no callback]"
    target = reader.read(callback, "_target")
    if not target or not reader.is_object(target):
        return "[no callback target]"
    return callback_name(reader, callback, reader.type_name(target))
