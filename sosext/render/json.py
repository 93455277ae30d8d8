"""Machine-readable output: one JSON document per command, stable key order."""
from __future__ import annotations

from typing import Any

from .output import Output

SCHEMA_VERSION = 1


def emit_json(out: Output, doc: dict[str, Any]) -> None:
    out.json({"sosext": SCHEMA_VERSION, **doc})
