"""Host adapters: LLDB, GDB and the standalone CLI. Each only maps its debugger's command
API onto :func:`sosext.hosts.common.execute`."""
