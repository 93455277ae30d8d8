"""The command registry and SOS-style option parsing.

A command is a class with its names, a one-line summary, a help text with an example, and
declared options; ``run`` gets a :class:`CommandContext` and the parsed options. Hosts
look commands up here and call :func:`execute`, so each command is written once for LLDB,
GDB and the CLI.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar

from ..errors import UsageError

if TYPE_CHECKING:
    from .context import CommandContext


def parse_address(text: str) -> int:
    """A pointer as SOS accepts it: hex with or without 0x, WinDbg's ` separator allowed."""
    t = text.strip().replace("`", "").replace("_", "")
    if t.lower().startswith("0x"):
        t = t[2:]
    try:
        value = int(t, 16)
    except ValueError:
        raise UsageError(f"invalid address: {text}") from None
    if value < 0 or value >= 1 << 64:
        raise UsageError(f"invalid address: {text}")
    return value


def address_or(text: str | None, invalid: str, missing: str | None = None) -> int:
    """An address argument; SOS words its complaint differently per command, so the caller
    gives the whole message for garbage (``invalid``) and for no argument (``missing``)."""
    if text is None:
        raise UsageError(missing or invalid)
    try:
        return parse_address(text)
    except UsageError:
        raise UsageError(invalid) from None


def parse_mt(text: str) -> int:
    return address_or(text, f"Invalid MethodTable: {text}")


COUNT_MAX = (1 << 63) - 1
"""The largest size or count we take: what a signed 64-bit column (numpy, the DAC) can hold."""

THREAD_ID_MAX = (1 << 32) - 1
"""OS thread ids (Linux tids) are 32-bit."""


def parse_count(text: str) -> int:
    """A size or count: decimal, or hex with 0x; 0 to :data:`COUNT_MAX`."""
    t = text.strip().replace(",", "").replace("_", "")
    try:
        value = int(t, 16) if t.lower().startswith("0x") else int(t, 10)
    except ValueError:
        raise UsageError(f"invalid number: {text}") from None
    if value < 0:
        raise UsageError(f"invalid number: {text} (must not be negative)")
    if value > COUNT_MAX:
        raise UsageError(f"number out of range: {text} (at most {COUNT_MAX:#x})")
    return value


def parse_thread_id(text: str) -> int:
    """An OS thread id as dso/setthread take it: hex with 0x, else hex (SOS's habit)."""
    t = text.strip()
    try:
        value = int(t[2:], 16) if t.lower().startswith("0x") else int(t, 16)
    except ValueError:
        raise UsageError(f"invalid thread id: {text}") from None
    if not 0 < value <= THREAD_ID_MAX:
        raise UsageError(f"invalid thread id: {text} (an OS thread id is 1 to {THREAD_ID_MAX:#x})")
    return value


def add_length(start: int, length: int, text: str) -> int:
    """``start + length`` for an ``L<length>`` range end, refused past the address space."""
    end = start + length
    if end >= 1 << 64:
        raise UsageError(f"range {start:#x} L{text} runs past the end of the address space")
    return end


@dataclass(frozen=True)
class Option:
    """``-name`` flag (``parse`` None) or ``-name <value>`` option."""

    name: str
    help: str
    parse: Callable[[str], Any] | None = None
    metavar: str = "value"
    aliases: tuple[str, ...] = ()
    dest: str = ""
    repeat: bool = False  # collect every occurrence in a list

    @property
    def key(self) -> str:
        return self.dest or self.name.lstrip("-").replace("-", "_").lower()


@dataclass(frozen=True)
class Positional:
    name: str
    help: str
    parse: Callable[[str], Any] = str
    required: bool = False
    rest: bool = False  # swallow every remaining word


@dataclass
class Parsed:
    values: dict[str, Any] = field(default_factory=dict)

    def __getattr__(self, name: str) -> Any:
        try:
            return self.values[name]
        except KeyError:
            raise AttributeError(name) from None


def parse_format(text: str) -> str:
    t = text.strip().lower()
    if t not in ("text", "json", "csv", "markdown"):
        raise UsageError(f"unknown format: {text} (text, json, csv or markdown)")
    return t


# Options every command takes; render/ does the work (see render/output.py).
COMMON_OPTIONS = (
    Option("--json", "print the result as one JSON document (same as --format json)", dest="json"),
    Option("--format", "text (SOS's, the default), json, csv or markdown", parse_format, "format"),
    Option("--no-color", "no colour even on a terminal (NO_COLOR=1 does the same)", dest="no_color"),
)


class Command:
    names: ClassVar[tuple[str, ...]] = ()
    summary: ClassVar[str] = ""
    usage: ClassVar[str] = ""
    details: ClassVar[str] = ""  # longer help; include an example
    options: ClassVar[tuple[Option, ...]] = ()
    positionals: ClassVar[tuple[Positional, ...]] = ()
    needs_runtime: ClassVar[bool] = True

    def run(self, ctx: "CommandContext", args: Parsed) -> None:
        raise NotImplementedError

    # -- parsing -------------------------------------------------------------------

    @classmethod
    def all_options(cls) -> tuple[Option, ...]:
        """The command's own options, then the common ones it does not declare itself."""
        own = {o.name for o in cls.options}
        return cls.options + tuple(o for o in COMMON_OPTIONS if o.name not in own)

    @classmethod
    def output_format(cls, args: Parsed) -> str:
        """text, json, csv or markdown, from --json / --format."""
        fmt = args.values.get("format") or "text"
        return "json" if args.values.get("json") else fmt

    @classmethod
    def parse(cls, words: list[str]) -> Parsed:
        by_name: dict[str, Option] = {}
        options = cls.all_options()
        for opt in options:
            for n in (opt.name, *opt.aliases):
                by_name[n.lower()] = opt
        out = Parsed({opt.key: ([] if opt.repeat else (None if opt.parse else False)) for opt in options})
        free: list[str] = []
        i = 0
        while i < len(words):
            w = words[i]
            opt = by_name.get(w.lower()) if w.startswith("-") and len(w) > 1 else None
            if opt is None and w.startswith("-") and len(w) > 1 and not _looks_numeric(w):
                if w == "--":
                    free.extend(words[i + 1:])
                    break
                raise UsageError(f"unknown option {w} (see: soshelp {cls.names[0]})")
            if opt is None:
                free.append(w)
            elif opt.parse is None:
                out.values[opt.key] = True
            else:
                if i + 1 >= len(words):
                    # dotnet-dump's words (SOS's DumpGen script checks them), then what is wanted.
                    raise UsageError(f"Required argument missing for option: '{w}'. ({opt.name} <{opt.metavar}>)")
                i += 1
                value = opt.parse(words[i])
                if opt.repeat:
                    out.values[opt.key].append(value)
                else:
                    out.values[opt.key] = value
            i += 1
        cls._bind_positionals(free, out)
        if out.values.get("format") == "json":
            out.values["json"] = True  # commands with a JSON form of their own look at args.json
        return out

    @classmethod
    def _bind_positionals(cls, free: list[str], out: Parsed) -> None:
        pos = list(cls.positionals)
        for p in pos:
            if p.rest:
                out.values[p.name] = [p.parse(w) for w in free]
                free = []
            elif free:
                out.values[p.name] = p.parse(free.pop(0))
            elif p.required:
                raise UsageError(f"missing argument <{p.name}> (usage: {cls.usage or cls.names[0]})")
            else:
                out.values[p.name] = None
        if free:
            raise UsageError(f"unexpected argument: {free[0]} (usage: {cls.usage or cls.names[0]})")

    @classmethod
    def help_text(cls) -> str:
        lines = [f"{cls.usage or cls.names[0]}", "", cls.summary]
        if len(cls.names) > 1:
            lines.append(f"Aliases: {', '.join(cls.names[1:])}")
        if cls.options:
            lines.append("")
            lines.append("Options:")
            width = max(len(_opt_usage(o)) for o in cls.options)
            for o in cls.options:
                lines.append(f"  {_opt_usage(o).ljust(width)}  {o.help}")
        if cls.details:
            lines.append("")
            lines.append(cls.details.strip("\n"))
        lines.append("")
        lines.append("Output: --json (or --format json|csv|markdown) for scripts; --no-color (see docs/commands.md).")
        return "\n".join(lines)


def _opt_usage(o: Option) -> str:
    names = " | ".join((o.name, *o.aliases))
    return names if o.parse is None else f"{names} <{o.metavar}>"


def _looks_numeric(word: str) -> bool:
    try:
        int(word, 0)
        return True
    except ValueError:
        return False


REGISTRY: dict[str, type[Command]] = {}


def register(cls: type[Command]) -> type[Command]:
    for n in cls.names:
        if n in REGISTRY and REGISTRY[n] is not cls:
            raise RuntimeError(f"command name {n} registered twice")
        REGISTRY[n] = cls
    return cls


def split_words(line: str) -> list[str]:
    try:
        return shlex.split(line, posix=True)
    except ValueError as e:
        raise UsageError(f"cannot parse arguments: {e}") from None


def lookup(name: str) -> type[Command] | None:
    """The command called ``name``; for an SOS name sosext lacks, a placeholder that says so."""
    found = REGISTRY.get(name) or REGISTRY.get(name.lower())
    if found is None:
        from .sos_names import placeholder  # it builds on this module
        found = placeholder(name)
    return found


def primary_commands() -> list[type[Command]]:
    """Each command once, sorted by its main name."""
    seen: dict[int, type[Command]] = {}
    for cls in REGISTRY.values():
        seen[id(cls)] = cls
    return sorted(seen.values(), key=lambda c: c.names[0])
