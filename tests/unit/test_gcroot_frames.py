"""Which frame gcroot's output names for a stack root, as SOS (ClrMD's CreateClrStackRoot) does:
the first frame of the thread's walk that is a runtime Frame at the root's stack pointer, or else
the managed frame at its IP and stack pointer."""
from __future__ import annotations

from types import SimpleNamespace

import sosext.commands.roots as roots
from sosext.readers.stacks import ClrStack, ClrStackFrame, FrameKind


def _root(sp: int, ip: int) -> SimpleNamespace:
    return SimpleNamespace(thread_os_id=0x613A, frame_sp=sp, source=ip, source_is_frame=False)


def test_an_inlined_call_frame_at_the_managed_sp_names_the_root(monkeypatch) -> None:
    # A webapi core: the InlinedCallFrame of a socket Shutdown P/Invoke lay exactly at the SP of
    # Interop+Sys.Shutdown's frame, where the root's slot was.
    icf = ClrStackFrame(FrameKind.RUNTIME, 0x7FB6135AD7A0, 0x7FF750928D97, 0, "", 0x7FB6135AD7A0, "InlinedCallFrame")
    managed = ClrStackFrame(FrameKind.MANAGED, 0x7FB6135AD7A0, 0x7FF6D5B710F5, 0x1234, "Interop+Sys.Shutdown")
    other = ClrStackFrame(FrameKind.MANAGED, 0x7FB6135AD820, 0x7FF6D5B70D5A, 0x5678, "Socket.Shutdown")
    monkeypatch.setattr(roots, "walk_stack", lambda runtime, tid: ClrStack(tid, (icf, managed, other), True))
    heap = SimpleNamespace(runtime=None)
    assert roots._frame_at_root(heap, _root(0x7FB6135AD7A0, 0x7FF6D5B710F5), {}) is icf
    assert roots._frame_at_root(heap, _root(0x7FB6135AD820, 0x7FF6D5B70D5A), {}) is None  # its managed frame
