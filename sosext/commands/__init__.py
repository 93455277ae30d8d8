"""sosext's commands, one module per family. Importing a module registers its commands."""
from __future__ import annotations

import importlib

FAMILIES = ("help", "config", "hostcmds", "heap", "roots", "threads", "diff", "objects", "types", "modules", "retained",
            "report", "leakhunt", "stacks")


def load_all() -> None:
    for fam in FAMILIES:
        importlib.import_module(f"{__name__}.{fam}")
