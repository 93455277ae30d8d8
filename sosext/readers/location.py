"""Where the target's runtime is, and which DAC file (if any) a reader loaded for it."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import NotDotNetError
from ..targets.base import Module, Target

RUNTIME_MODULE = "libcoreclr.so"


@dataclass(frozen=True, slots=True)
class RuntimeLocation:
    dac_path: str  # "" when no DAC is used (the contracts reader)
    runtime: Module  # libcoreclr.so as mapped in the target
    version: str  # the DAC's file version, e.g. "10.0.1226.42308" ("" without a DAC)
    trusted_by: str = "location"  # "location" (judged safe), "setclrpath" (the user's choice), "" (no DAC)


def find_runtime(target: Target) -> Module:
    modules = target.modules()
    for m in modules:
        if m.name == RUNTIME_MODULE:
            return m
    core = target.core_file() if hasattr(target, "core_file") else None
    if core is not None and not modules and not core.file_mappings:
        # A core without an NT_FILE note names no file at all (qemu-user writes such cores).
        raise NotDotNetError(f"no .NET runtime found in {target.describe()}: the core has no NT_FILE note "
                             "listing its mapped files (qemu-user writes such cores; see docs/readers.md)")
    raise NotDotNetError(f"no .NET runtime ({RUNTIME_MODULE}) is loaded in {target.describe()}")
