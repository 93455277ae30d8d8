"""Test harness: builds and runs the C# debuggees whose printed ground truth the tests assert against."""
from .debuggee import (
    DEFAULT_TFM,
    Debuggee,
    DebuggeeError,
    DebuggeeFactory,
    build_bpmd_app,
    build_debuggee,
    dotnet_path,
    is_elf_core,
    source_hash,
    work_dir,
)

__all__ = [
    "DEFAULT_TFM",
    "Debuggee",
    "DebuggeeError",
    "DebuggeeFactory",
    "build_bpmd_app",
    "build_debuggee",
    "dotnet_path",
    "is_elf_core",
    "source_hash",
    "work_dir",
]
