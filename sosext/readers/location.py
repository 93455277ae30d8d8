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
    for m in target.modules():
        if m.name == RUNTIME_MODULE:
            return m
    raise NotDotNetError(f"no .NET runtime ({RUNTIME_MODULE}) is loaded in {target.describe()}")
