"""Whether code is a funclet: an exception handler (catch, finally, fault) or filter the JIT
compiled apart from its method's body. It runs in a frame of its own, called by the runtime's
exception dispatch while its parent's frame is still on the stack, and reaches the parent's
stack slots through that frame, so what is read from a frame's slots is read in the parent's.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import SosError

if TYPE_CHECKING:
    from ..runtime import ClrRuntime


def code_and_funclet(runtime: "ClrRuntime", ip: int) -> tuple[int, bool] | None:
    """(the start of the code holding ``ip``, whether ``ip`` is in a funclet): from the
    runtime's unwind entries where its descriptor can be read, else from the DAC's EH clauses
    (a handler's or filter's native range is its funclet). None when neither tells."""
    side = runtime.contracts_beside()
    if side is not None:
        found = side.code_start_and_funclet(ip)
        if found is not None:
            return found
    try:
        ch = runtime.reader.code_header_data(ip)
        if ch is None or not ch.method_start:
            return None
        offset = ip - ch.method_start
        for e in runtime.reader.traverse_eh_info(ch.method_start) or ():
            if e.handler_start_offset <= offset < e.handler_end_offset or \
                    (e.clause_type == 2 and e.filter_offset <= offset < e.handler_start_offset):  # EHFilter
                return ch.method_start, True
        return ch.method_start, False
    except SosError:
        return None
