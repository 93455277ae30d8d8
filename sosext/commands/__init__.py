"""sosext's commands, one module per family. Importing a module registers its commands."""
from __future__ import annotations

import importlib

FAMILIES = ("help", "config", "hostcmds", "heap", "roots", "threads", "diff", "objects", "types", "modules", "retained",
            "report", "leakhunt", "stacks", "runtimeinfo", "objectcheck", "stresslog", "crash", "breakpoints",
            "heapextra", "runtimeextra", "code", "sessionlog", "targetviews", "http")


def load_all() -> None:
    for fam in FAMILIES:
        importlib.import_module(f"{__name__}.{fam}")


def load_for(name: str) -> None:
    """Import families until one registers ``name`` (all of them when none does).

    A one-shot ``sosext analyze -c "dumpheap -stat"`` then pays for the heap family's imports
    only (~0.1 s less of its start); the debuggers register every name anyway."""
    from .base import REGISTRY
    for fam in FAMILIES:
        if name in REGISTRY or name.lower() in REGISTRY:
            return
        importlib.import_module(f"{__name__}.{fam}")
