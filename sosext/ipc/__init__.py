"""The .NET diagnostics IPC channel, in pure Python: list .NET processes, ask a runtime
about itself, and have it write a core dump of itself (``dotnet-dump ps`` / ``collect``
without any .NET tool).

    from sosext.ipc import DumpType, collect_dump, get_process_info, list_processes

    for p in list_processes():
        print(p.pid, p.name, p.runtime_version, p.command_line)
    get_process_info(1234).clr_product_version      # '10.0.12+...'
    collect_dump(1234, "/tmp/core.%p", DumpType.WITH_HEAP)   # -> '/tmp/core.1234'
"""

from sosext.ipc.client import (
    DEFAULT_TIMEOUT,
    DiagnosticsClient,
    DiagnosticsSocket,
    NoDiagnosticsSocketError,
    NoSuchProcessError,
    NotListeningError,
    collect_dump,
    find_socket,
    get_process_info,
    published_sockets,
)
from sosext.ipc.processes import DotnetProcess, list_processes
from sosext.ipc.protocol import (
    DumpType,
    HResult,
    IpcError,
    ProcessInfo,
    UnknownCommandError,
    WriteDumpFlags,
)

__all__ = [
    "DEFAULT_TIMEOUT",
    "DiagnosticsClient",
    "DiagnosticsSocket",
    "DotnetProcess",
    "DumpType",
    "HResult",
    "IpcError",
    "NoDiagnosticsSocketError",
    "NoSuchProcessError",
    "NotListeningError",
    "ProcessInfo",
    "UnknownCommandError",
    "WriteDumpFlags",
    "collect_dump",
    "find_socket",
    "get_process_info",
    "list_processes",
    "published_sockets",
]
