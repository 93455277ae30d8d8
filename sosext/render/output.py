"""Where a command's text goes: buffered lines handed to the host's writer.

Every line passes through :func:`~sosext.render.text.safe_text` here, the one place all
command output goes through, so no target-derived control character reaches a terminal.
"""
from __future__ import annotations

import json
from typing import Any, Callable

from .text import safe_text


class Output:
    """Collects lines and passes them to the host in chunks (hosts differ in per-call cost)."""

    def __init__(self, write: Callable[[str], None], color: bool = False, chunk: int = 2000) -> None:
        self._write = write
        self.color = color
        self._lines: list[str] = []
        self._chunk = chunk

    def line(self, text: str = "") -> None:
        self._lines.append(safe_text(text))
        if len(self._lines) >= self._chunk:
            self.flush()

    def lines(self, texts) -> None:  # type: ignore[no-untyped-def]
        for t in texts:
            self.line(t)

    def json(self, obj: Any) -> None:
        self.line(json.dumps(obj, indent=2, sort_keys=False))

    def discard(self) -> None:
        self._lines = []

    def flush(self) -> None:
        if self._lines:
            lines, self._lines = self._lines, []
            self._write("\n".join(lines))
