"""Every command name of SOS on Linux (LLDB plug-in, dotnet-dump and the managed extension
commands), with its aliases, in one place.

Hosts register each of these names so a name typed from SOS habit always reaches sosext: in
LLDB an unregistered name would be taken as a prefix of another command (``dumpstack`` would
run ``dumpstackobjects``). A name sosext has no command for yet gets a placeholder that says
so in one line and points to the nearest sosext command. A real command registered under the
same name wins: :func:`lookup` in base.py asks the registry before it asks here, so adding a
command needs no change in this file.
"""
from __future__ import annotations

from typing import ClassVar

from ..errors import UsageError
from . import base
from .base import Command, Parsed, Positional

SOS_NAMES: dict[str, tuple[str, ...]] = {
    # main name: aliases (SOS's spellings; its CamelCase forms are accepted too)
    "analyzeoom": (),
    "bpmd": (),
    "clrmodules": (),
    "clrstack": (),
    "clrthreads": (),  # WinDbg's `!threads`; on Linux `threads` is the managed command below
    "clru": ("u",),
    "crashinfo": (),
    "dbgout": (),
    "dumpalc": (),
    "dumparray": ("da",),
    "dumpasync": (),
    "dumpassembly": (),
    "dumpclass": (),
    "dumpconcurrentdictionary": ("dcd",),
    "dumpconcurrentqueue": ("dcq",),
    "dumpdelegate": (),
    "dumpdomain": (),
    "dumpexceptions": (),
    "dumpgcdata": (),
    "dumpgen": ("dg",),
    "dumphttp": (),
    "dumpheap": (),
    "dumpil": (),
    "dumplog": (),
    "dumpmd": (),
    "dumpmodule": (),
    "dumpmt": (),
    "dumpobj": ("do",),
    "dumpobjgcrefs": (),
    "dumprequests": (),
    "dumpruntimetypes": (),
    "dumpsig": (),
    "dumpsigelem": (),
    "dumpstack": (),
    "dumpstackobjects": ("dso",),
    "dumpvc": (),
    "eeheap": (),
    "eestack": (),
    "eeversion": (),
    "ehinfo": (),
    "finalizequeue": ("fq",),
    "findappdomain": (),
    "findephemeralreferencestoloh": (),
    "findpointersin": (),
    "findreferencestoephemeral": (),
    "findroots": (),
    "gchandleleaks": (),
    "gchandles": (),
    "gcheapstat": (),
    "gcinfo": (),
    "gcroot": (),
    "gctonative": (),
    "gcwhere": (),
    "histclear": (),
    "histinit": (),
    "histobj": (),
    "histobjfind": (),
    "histroot": (),
    "histstats": (),
    "ip2md": (),
    "listnearobj": ("lno",),
    "loadsymbols": (),
    "logclose": (),
    "logging": (),
    "logopen": (),
    "maddress": (),
    "name2ee": (),
    "notreachableinrange": (),
    "objsize": (),
    "parallelstacks": ("pstacks",),
    "pathto": (),
    "printexception": ("pe",),
    "runtimes": (),
    "setclrpath": (),
    "setsymbolserver": (),
    "sizestats": (),
    "sosflush": (),
    "soshelp": (),
    "sosstatus": (),
    "stoponcatch": (),
    "syncblk": (),
    "taskstate": ("tks",),
    "threadpool": (),
    "threadpoolqueue": ("tpq",),
    "threads": ("setthread",),  # SOS's managed host command (dotnet-dump, `sos threads`)
    "threadstate": (),
    "timerinfo": ("ti",),
    "token2ee": (),
    "traverseheap": (),
    "verifyheap": (),
    "verifyobj": (),
}

NEAREST: dict[str, str] = {
    # an SOS command sosext lacks: the sosext command that answers part of it
    "dumpstack": "clrstack",
    "eestack": "clrstack -all",
    "dumpgen": "dumpheap -gen <n>",
    "verifyobj": "verifyheap",
    "gchandleleaks": "gchandles",
    "sizestats": "dumpheap -stat",
    "listnearobj": "gcwhere",
}


WHY_NOT: dict[str, str] = {
    # an SOS command sosext will not have: the one line that says why, instead of "not yet"
    "stoponcatch": ("stoponcatch needs the runtime's debugger notifications (exception catch events), which "
                    "sosext does not turn on (it never writes the target); use bpmd on the catching method"),
}


def all_names() -> list[str]:
    """Every SOS main name and alias, sorted."""
    return sorted({n for main, aliases in SOS_NAMES.items() for n in (main, *aliases)})


def main_name(name: str) -> str | None:
    """The SOS main name that ``name`` (a main name or alias, any case) stands for."""
    low = name.lower()
    for main, aliases in SOS_NAMES.items():
        if low == main or low in aliases:
            return main
    return None


class _Placeholder(Command):
    """An SOS command sosext does not have yet: one line saying so, and what to use."""

    needs_runtime = False
    positionals = (Positional("arguments", "ignored", rest=True),)
    instead: ClassVar[str] = ""

    @classmethod
    def parse(cls, words: list[str]) -> Parsed:
        parsed = super().parse([])  # the defaults every command has (output format …)
        parsed.values["arguments"] = words  # whatever SOS would take: never an error of its own
        return parsed

    def run(self, ctx, args: Parsed) -> None:  # type: ignore[no-untyped-def]
        if self.names[0] in WHY_NOT:
            raise UsageError(WHY_NOT[self.names[0]])
        hint = f"; try: {self.instead}" if self.instead else ""
        raise UsageError(f"{self.names[0]} is an SOS command sosext does not have yet{hint} "
                         "(soshelp lists sosext's commands)")


_placeholders: dict[str, type[Command]] = {}


def placeholder(name: str) -> type[Command] | None:
    """The placeholder command for SOS name ``name``, or None when it is no SOS name or a
    real command is registered under it or under its main name."""
    main = main_name(name)
    if main is None:
        return None
    real = base.REGISTRY.get(main)
    if real is not None:
        return real  # e.g. `ClrThreads` typed for a registered clrthreads
    cls = _placeholders.get(main)
    if cls is None:
        near = NEAREST.get(main, "")
        if near == main or (near and near.split()[0] not in base.REGISTRY):
            near = ""
        cls = type(f"Placeholder_{main}", (_Placeholder,), {
            "names": (main, *SOS_NAMES[main]), "instead": near,
            "summary": f"(SOS command not in sosext yet{'; try: ' + near if near else ''})",
            "usage": main})
        _placeholders[main] = cls
    return cls
