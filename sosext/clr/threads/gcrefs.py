"""A thread's GC references on its stack as the runtime reports them (clrstack -gc).

The runtime's stack-reference enumeration (the DAC's GetStackReferences, or the contracts
reader's own walk) gives, per live slot or register of each frame, where it is and the object
it holds: a managed frame's by its IP and stack pointer, a runtime Frame's by the Frame's
address. Register numbers are named by the reader (``rbp``, ``r14``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...errors import SosError

if TYPE_CHECKING:
    from ..runtime import ClrRuntime

_INTERIOR, _PINNED = 1, 2
_SOURCE_FRAME = 1


@dataclass(frozen=True, slots=True)
class StackGcReference:
    register: str | None  # the register the slot is relative to (or that holds the object); None: a plain address
    offset: int  # from that register
    address: int  # the stack slot; 0 when the object is in the register itself
    object: int
    interior: bool
    pinned: bool
    source: int  # a managed frame's IP, or a runtime Frame's address
    in_runtime_frame: bool
    stack_pointer: int


def stack_gc_references(runtime: "ClrRuntime", os_tid: int) -> list[StackGcReference]:
    """Every GC reference the runtime reports on thread ``os_tid``'s stack, in its order (none
    when it cannot walk the thread)."""
    reader = runtime.reader
    try:
        refs = runtime.stack_references(os_tid)
    except (SosError, OSError):
        return []
    names: dict[int, str] = {}
    out = []
    for r in refs:
        register = None
        if r.has_register_information:
            if r.register not in names:
                names[r.register] = reader.register_name(r.register) or "<unknown register>"
            register = names[r.register]
        out.append(StackGcReference(register, r.offset, r.address, r.object, bool(r.flags & _INTERIOR),
                                    bool(r.flags & _PINNED), r.source, r.source_type == _SOURCE_FRAME,
                                    r.stack_pointer))
    return out
