"""A Task's state, as ``Task.Status`` computes it from ``m_stateFlags``.

System.Threading.Tasks.Task keeps its whole life in one int of TASK_STATE_* bits. The
status is decided by the first bit set in this order: Faulted, Canceled, RanToCompletion,
WaitingForChildrenToComplete, Running (the delegate was invoked), WaitingToRun (started),
WaitingForActivation; no bit at all is Created. Bits only outside these (for instance the
low 16, which hold TaskCreationOptions) name no status on their own.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..addresses import AddressClass, classifier
from ..heap.instances import ObjectReader

if TYPE_CHECKING:
    from ..runtime import ClrRuntime

TASK = "System.Threading.Tasks.Task"
STATE_FIELD = "m_stateFlags"

TASK_STATE_STARTED = 0x00010000
TASK_STATE_DELEGATE_INVOKED = 0x00020000
TASK_STATE_DISPOSED = 0x00040000
TASK_STATE_EXCEPTIONOBSERVEDBYPARENT = 0x00080000
TASK_STATE_CANCELLATIONACKNOWLEDGED = 0x00100000
TASK_STATE_FAULTED = 0x00200000
TASK_STATE_CANCELED = 0x00400000
TASK_STATE_WAITING_ON_CHILDREN = 0x00800000
TASK_STATE_RAN_TO_COMPLETION = 0x01000000
TASK_STATE_WAITINGFORACTIVATION = 0x02000000
TASK_STATE_COMPLETION_RESERVED = 0x04000000
TASK_STATE_COMPLETED = TASK_STATE_RAN_TO_COMPLETION | TASK_STATE_CANCELED | TASK_STATE_FAULTED

_STATUS_BY_FIRST_BIT = (
    (TASK_STATE_FAULTED, "Faulted"),
    (TASK_STATE_CANCELED, "Canceled"),
    (TASK_STATE_RAN_TO_COMPLETION, "RanToCompletion"),
    (TASK_STATE_WAITING_ON_CHILDREN, "WaitingForChildrenToComplete"),
    (TASK_STATE_DELEGATE_INVOKED, "Running"),
    (TASK_STATE_STARTED, "WaitingToRun"),
    (TASK_STATE_WAITINGFORACTIVATION, "WaitingForActivation"),
)


def task_status(flags: int) -> str | None:
    """The TaskStatus name of ``m_stateFlags``; None when the bits name none."""
    for bit, name in _STATUS_BY_FIRST_BIT:
        if flags & bit:
            return name
    return "Created" if flags == 0 else None


def task_state_flags(runtime: "ClrRuntime", address: int) -> tuple[AddressClass, int | None]:
    """What ``address`` is, and the ``m_stateFlags`` of the Task (or Task-derived object,
    such as an async method's state machine box) there; None when it is no Task."""
    c = classifier(runtime).classify(address)
    if not c.is_object:
        return c, None
    reader = ObjectReader(runtime)
    mt = reader.method_table(address)
    f = reader.field(mt, STATE_FIELD)
    if f is None or f.is_static or runtime.heap.types.name_of(f.enclosing_mt) != TASK:
        return c, None
    return c, reader.read(address, STATE_FIELD, mt) & 0xFFFFFFFF
