"""The one error family that reaches users: every message is a single line."""


class SosError(Exception):
    """A failure the user can act on; hosts print ``error: <message>``."""


class SosAnswer(SosError):
    """An input the command cannot take, where SOS answers with a line of its own and does not
    call it a failure ("Address 10 not found in the managed heap."): hosts print the message
    as the command's output, without ``error:``, and the command succeeds."""


class TargetError(SosError):
    """Memory, module or thread information could not be obtained from the target."""


class MemoryReadError(TargetError):
    """An address range is not readable in the target."""

    def __init__(self, address: int, size: int, detail: str = "") -> None:
        self.address = address
        self.size = size
        msg = f"cannot read {size} bytes at {address:#x}"
        super().__init__(f"{msg}: {detail}" if detail else msg)


class DacError(SosError):
    """The runtime's DAC could not be found, loaded or answered a call with a failure."""

    def __init__(self, message: str, hr: int = 0) -> None:
        self.hr = hr  # the failing call's HRESULT, 0 when not from a call
        super().__init__(message)


class NoGcHeap(SosError):
    """The dump holds no GC heap (a triage dump): heap commands cannot answer from it."""

    def __init__(self) -> None:
        super().__init__("this dump holds no GC heap (a triage dump): heap commands need a dump written with "
                         "createdump --withheap or --full")


class NotDotNetError(SosError):
    """The target has no CoreCLR runtime loaded."""


class UsageError(SosError):
    """A command was called with options or values it does not accept."""


class TargetChanged(TargetError):
    """A live process exited, was detached or ran while a command was reading it."""


class Interrupted(SosError):
    """The user pressed Ctrl-C during long work."""

    def __init__(self) -> None:
        super().__init__("interrupted")


class ContractError(SosError):
    """The runtime's data contracts (its contract descriptor, the GC's DAC globals) are absent,
    damaged, or lack what a question needs."""


class ReaderUnsupported(SosError):
    """The chosen runtime reader cannot answer this question; the message names the one that can."""
