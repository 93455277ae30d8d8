"""sosext: SOS-style .NET memory debugging for LLDB, GDB and core files."""

__version__ = "0.1.0"
