"""Where a command's output goes, in the format the user asked for.

A command says *what* it found, through four calls, and this module decides *how* it
looks: ``line(text)`` (SOS text: headings, totals, prose), ``field(key, value, text)`` (one
member of a record: "Name: System.String" in text, ``"name": "System.String"`` in JSON),
``table(key, table, keys)`` (a :class:`TableWriter` whose rows are SOS columns in text and
objects/CSV rows/Markdown rows otherwise) and ``json(doc)`` / ``raw(text)`` for a command
that writes its own JSON document. The modes:

* ``text`` (default): SOS's text, coloured through pygments when the host says the output
  is a terminal (never in a pipe, never with ``--no-color`` or ``NO_COLOR``);
* ``json``: one document ``{"sosext": 1, "command": …, <fields>, <tables>}`` at the end;
  a command that printed neither fields nor tables gives its text as ``"lines"``;
* ``csv`` and ``markdown``: the tables (and the record's fields as a key/value table).

Every line passes through :func:`~sosext.render.text.safe_text` here, the one place all
command output goes through, so no target-derived control character reaches a terminal;
colour is added after that, so only our own escapes reach it.

A listing of millions of objects must start at once and must not be held in memory, so
text lines leave in chunks: every ``chunk`` lines, or as soon as a line comes ``interval``
seconds after the previous chunk left (hosts differ in per-call cost, so not line by
line). Before a chunk leaves, the command's Ctrl-C and process-state checks run: every
printing loop can be interrupted without asking for it. What was handed over stays
printed when the command then fails; the host prints the one error line after it.
"""
from __future__ import annotations

import json
import os
import re
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable

from ..clr.progress import check_interrupt
from .text import safe_text

if TYPE_CHECKING:
    from .table import Table

MODES = ("text", "json", "csv", "markdown")
# Colour is for reading: a listing longer than this is for scrolling or saving, and pygments
# costs microseconds per line, so the rest of such a listing is left plain.
COLOR_LINES_MAX = 20_000
_LABEL = re.compile(r"^\s*([A-Za-z][A-Za-z0-9 /.()#-]{0,40}?):\s+(\S.*)$")


def _snake(label: str) -> str:
    label = re.sub(r"(?<=[a-z])(?=[A-Z])", "_", label)  # MethodTable → method_table
    return re.sub(r"[^a-z0-9]+", "_", label.lower()).strip("_")
SCHEMA_VERSION = 1


class TableWriter:
    """Rows of one table: SOS columns in text mode, records in the others.

    ``table`` None: the command writes its text itself (a layout no table describes) and
    only the structured forms take these rows; in text mode they are then dropped."""

    def __init__(self, out: "Output", key: str, table: "Table | None", keys: tuple[str, ...]) -> None:
        self.out = out
        self.key = key
        self.table = table
        self.keys = keys
        self.rows: list[dict[str, Any]] = out._tables.setdefault(key, []) if out.structured else []

    def header(self, *titles: str) -> None:
        """SOS's header line (text mode only: the structured forms name columns by key)."""
        if not self.out.structured and self.table is not None:
            self.out.line(self.table.header(*titles))

    def row(self, *values: Any, data: tuple[Any, ...] | None = None) -> None:
        """One row: ``values`` are what the SOS columns show; ``data`` (default: the same)
        what the structured forms carry, one per key (addresses as ints become "0x…")."""
        if not self.out.structured:
            if self.table is not None:
                self.out.line(self.table.row(*values))
            return
        self.rows.append({k: _plain(v) for k, v in zip(self.keys, values if data is None else data)})


def _plain(v: Any) -> Any:
    if isinstance(v, Address):
        return f"0x{int(v):x}"
    if isinstance(v, bool) or v is None or isinstance(v, (int, float, str, list, dict)):
        return v
    if hasattr(v, "item"):  # numpy scalars
        return v.item()
    return str(v)


def label_fields(texts: Iterable[str], fields: dict[str, Any] | None = None) -> list[str]:
    """Fill ``fields`` from SOS's ``Label:  value`` lines (see :meth:`Output.record`);
    returns the lines without a label."""
    fields = {} if fields is None else fields
    rest = []
    for t in texts:
        m = _LABEL.match(t)
        if m is None:
            rest.append(safe_text(t))
            continue
        key = _snake(m.group(1))
        value = safe_text(m.group(2).rstrip())
        if key in fields:
            old = fields[key]
            fields[key] = (old if isinstance(old, list) else [old]) + [value]
        else:
            fields[key] = value
    return rest


class Address(int):
    """An int that the structured forms write as a "0x…" string (a pointer, not a count)."""

    __slots__ = ()


class Output:
    def __init__(self, write: Callable[[str], None], color: bool = False, chunk: int = 2000,
                 interval: float = 0.2, mode: str = "text", command: str = "") -> None:
        self._write = write
        self._lines: list[str] = []
        self._chunk = chunk
        self._interval = interval
        self._due = time.monotonic() + interval
        self.command = command
        self.mode = "text"
        self.color = False
        self._fields: dict[str, Any] = {}
        self._tables: dict[str, list[dict[str, Any]]] = {}
        self._text: list[str] = []
        self._emitted = False  # the command wrote its own JSON document
        self._colorize: Callable[[str], str] | None = None
        self._painted = 0
        self.configure(mode, color)

    def configure(self, mode: str = "text", color: bool = False, command: str | None = None) -> None:
        if mode not in MODES:
            raise ValueError(mode)
        self.mode = mode
        self.color = color and mode == "text"
        if command is not None:
            self.command = command
        if self.color:
            from .color import colorizer
            self._colorize = colorizer()
        else:
            self._colorize = None

    @property
    def structured(self) -> bool:
        return self.mode != "text"

    # -- what commands call -------------------------------------------------------------

    def line(self, text: str = "") -> None:
        if self.structured:
            self._text.append(safe_text(text))
            return
        lines = self._lines
        lines.append(self._paint(safe_text(text)))
        if len(lines) >= self._chunk or time.monotonic() >= self._due:
            self._pass_on()

    def lines(self, texts: Iterable[str]) -> None:
        if self.structured:
            self._text.extend(safe_text(t) for t in texts)
            return
        held = self._lines
        chunk = self._chunk
        paint = self._paint
        for t in texts:
            held.append(paint(safe_text(t)))
            if len(held) >= chunk:
                self._pass_on()
                held = self._lines
        if held and time.monotonic() >= self._due:
            self._pass_on()

    def field(self, key: str, value: Any, text: str | None = None) -> None:
        """One member of the command's record: ``text`` is SOS's line for it (None: none)."""
        if self.structured:
            self._fields[key] = _plain(value)
        elif text is not None:
            self.line(text)

    def record(self, texts: Iterable[str]) -> None:
        """Lines of SOS's ``Label:  value`` form, printed as they are in text mode; in the
        structured forms each becomes a field keyed by its label in snake_case ("Method
        Table:" → ``method_table``), the value as the text shows it. A label seen again
        makes its field a list. Lines without a label are decoration."""
        if not self.structured:
            self.lines(texts)
            return
        self._text.extend(label_fields(texts, self._fields))

    def record_line(self, text: str = "") -> None:
        """One line of a record (see :meth:`record`)."""
        self.record((text,))

    def table(self, key: str, table: "Table | None", keys: Iterable[str]) -> TableWriter:
        return TableWriter(self, key, table, tuple(keys))

    def json(self, obj: Any) -> None:
        """A whole JSON document the command built itself (its --json form)."""
        self.raw(json.dumps(obj, indent=2, sort_keys=False))

    def raw(self, text: str) -> None:
        """Text written as is, in any mode: a command's own JSON, streamed."""
        self._emitted = True
        self._lines.append(safe_text(text))
        if len(self._lines) >= self._chunk or time.monotonic() >= self._due:
            self._pass_on()

    # -- the end ------------------------------------------------------------------------

    def finish(self) -> None:
        """The command ended: write the structured document (if any) and hand everything over."""
        if self.structured and not self._emitted:
            self._lines.extend(self._document())
        self.flush()

    def _document(self) -> list[str]:
        from .formats import render_document
        return render_document(self.mode, self.command, self._fields, self._tables, self._text)

    def _paint(self, text: str) -> str:
        if self._colorize is None or not text:
            return text
        self._painted += 1
        if self._painted > COLOR_LINES_MAX:
            self._colorize = None
            return text
        return self._colorize(text)

    def _pass_on(self) -> None:
        check_interrupt()  # raises with the chunk still held: the failure path prints it
        self.flush()

    def discard(self) -> None:
        self._lines = []

    def flush(self) -> None:
        """Hand every held line to the host now (no checks: also used on the way out of a failure)."""
        if self._lines:
            lines, self._lines = self._lines, []
            self._write("\n".join(lines))
        self._due = time.monotonic() + self._interval


def hint(out: Output, text: str) -> None:
    """A next-step suggestion after a command that starts a hunt, for a person at a terminal
    only: never in a pipe, a test or a structured form (--json, csv …). SOSEXT_HINTS=1 forces
    it on, SOSEXT_HINTS=0 off."""
    forced = os.environ.get("SOSEXT_HINTS", "")
    if out.structured or forced == "0" or (forced == "" and not os.isatty(1)):
        return
    out.line()
    out.line(f"Next: {text}")
