"""Machine-readable output a command builds itself: one JSON document, stable key order."""
from __future__ import annotations

from typing import Any

from .formats import SCHEMA_VERSION
from .output import Output


def emit_json(out: Output, doc: dict[str, Any]) -> None:
    out.json({"sosext": SCHEMA_VERSION, **doc})
