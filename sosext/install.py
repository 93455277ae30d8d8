"""``sosext install`` / ``uninstall``: the debuggers' init files load sosext at start.

Like ``dotnet-sos install`` for LLDB, plus GDB. Each added line carries a marker comment
so that uninstall removes exactly what install added, and install run twice adds nothing.
"""
from __future__ import annotations

import os

MARKER = "# added by 'sosext install'"
PACKAGE = os.path.dirname(os.path.realpath(__file__))
ROOT = os.path.dirname(PACKAGE)


def entry_point(debugger: str) -> str:
    """The file ``debugger`` ("lldb" or "gdb") loads: the checkout's ``lldbinit/sosext.py``
    when sosext runs from a checkout, else the copy installed inside the package (pip)."""
    in_checkout = os.path.join(ROOT, f"{debugger}init", "sosext.py")
    if os.path.isfile(in_checkout):
        return in_checkout
    return os.path.join(PACKAGE, "hosts", f"{debugger}_entry.py")


def _lines() -> dict[str, str]:
    # GDB's `source` takes the rest of the line as the file name, so the marker is a comment
    # line of its own, just above the command it belongs to.
    return {
        os.path.expanduser("~/.lldbinit"): f"command script import {entry_point('lldb')}",
        os.path.expanduser("~/.gdbinit"): f"source {entry_point('gdb')}",
    }


def _without_ours(lines: list[str]) -> list[str]:
    """Remove each marker comment and the line after it."""
    out: list[str] = []
    skip = False
    for ln in lines:
        if skip:
            skip = False
            continue
        if ln.strip() == MARKER:
            skip = True
            continue
        out.append(ln)
    return out


def _read(path: str) -> list[str]:
    try:
        with open(path) as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []


def _write(path: str, lines: list[str]) -> None:
    tmp = path + ".sosext-tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + ("\n" if lines else ""))
    os.replace(tmp, path)


def install() -> list[str]:
    from .errors import SosError
    for path, line in _lines().items():
        entry = line.split(" ", 1)[1].split(" ")[-1]
        if not os.path.isfile(entry):
            raise SosError(f"{entry} is missing: run 'sosext install' from a checkout of sosext "
                           "(the debugger entry points live next to the package)")
    report = []
    for path, line in _lines().items():
        lines = _without_ours(_read(path))
        lines += [MARKER, line]
        _write(path, lines)
        report.append(f"Added to {path}: {line}")
    return report


def uninstall() -> list[str]:
    report = []
    for path in _lines():
        lines = _read(path)
        kept = _without_ours(lines)
        if len(kept) != len(lines):
            _write(path, kept)
            report.append(f"Removed sosext from {path}")
        else:
            report.append(f"Nothing to remove in {path}")
    return report
