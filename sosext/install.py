"""``sosext install`` / ``uninstall``: the debuggers' init files load sosext at start.

Like ``dotnet-sos install`` for LLDB, plus GDB. What install adds is one block between a
begin and an end marker line; uninstall removes that block and nothing else, and install
run twice changes nothing. The init file is edited where it really is (a symlinked
``~/.lldbinit`` stays a symlink, its target is edited) and keeps its permissions and owner.
A file that install created and that holds nothing else is removed again by uninstall.

    # >>> sosext (added by 'sosext install'; 'sosext uninstall' removes this block) >>>
    command script import "/opt/sosext/lldbinit/sosext.py"
    # <<< sosext <<<
"""
from __future__ import annotations

import os
import stat
import tempfile
from dataclasses import dataclass

from .errors import SosError

BEGIN = "# >>> sosext (added by 'sosext install'; 'sosext uninstall' removes this block) >>>"
CREATED = "# (sosext install created this file; uninstall deletes it when nothing else is left)"
END = "# <<< sosext <<<"
LEGACY_MARKER = "# added by 'sosext install'"  # earlier versions: this line, then the command line
PACKAGE = os.path.dirname(os.path.realpath(__file__))
ROOT = os.path.dirname(PACKAGE)


def entry_point(debugger: str, root: str = ROOT) -> str:
    """The file ``debugger`` ("lldb" or "gdb") loads: the checkout's ``lldbinit/sosext.py``
    when sosext runs from a checkout, else the copy installed inside the package (pip)."""
    in_checkout = os.path.join(root, f"{debugger}init", "sosext.py")
    if os.path.isfile(in_checkout) or root != ROOT:
        return in_checkout
    return os.path.join(PACKAGE, "hosts", f"{debugger}_entry.py")


@dataclass(frozen=True)
class InitFile:
    debugger: str
    path: str  # as the user names it (~/.lldbinit); may be a symlink
    command: str  # the line that loads sosext


def _lldb_command(entry: str) -> str:
    # LLDB splits arguments at blanks unless quoted; inside double quotes \ and " are special
    # and a backtick starts an expression, so such paths are refused rather than escaped.
    if any(c in entry for c in '"\\`\n'):
        raise SosError(f"cannot install from {entry!r}: LLDB's command line cannot name a path "
                       "holding \", \\, ` or a newline; move the checkout")
    return f'command script import "{entry}"'


def _gdb_command(entry: str) -> str:
    # GDB's `source` takes the rest of the line as the file name, blanks included, and does
    # not remove quotes; only trailing blanks (GDB strips them) and newlines cannot be said.
    if "\n" in entry or entry != entry.rstrip():
        raise SosError(f"cannot install from {entry!r}: GDB's source command cannot name a path "
                       "ending in a blank or holding a newline; move the checkout")
    return f"source {entry}"


def init_files(root: str = ROOT) -> list[InitFile]:
    lldb_entry = entry_point("lldb", root)
    gdb_entry = entry_point("gdb", root)
    for entry in (lldb_entry, gdb_entry):
        if not os.path.isfile(entry):
            raise SosError(f"{entry} is missing: run 'sosext install' from a checkout of sosext "
                           "(the debugger entry points live next to the package)")
    return [InitFile("LLDB", os.path.expanduser("~/.lldbinit"), _lldb_command(lldb_entry)),
            InitFile("GDB", os.path.expanduser("~/.gdbinit"), _gdb_command(gdb_entry))]


# -- reading and splitting -------------------------------------------------------------------

def _real(path: str) -> str:
    """The file to edit: a symlink's target (followed to the end), else the path itself."""
    return os.path.realpath(path)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="surrogateescape", newline="") as f:
            return f.read()
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise SosError(f"{path} is a directory, not an init file") from None
    except OSError as e:
        raise SosError(f"cannot read {path}: {e.strerror or e}") from None


@dataclass
class _Split:
    before: list[str]
    block: list[str] | None  # the lines between the markers, None when there is no block
    after: list[str]
    created: bool  # the block says install created the file


def _is_ours(line: str) -> bool:
    s = line.strip()
    return (s.startswith("command script import") or s.startswith("source ")) and "sosext.py" in s


def _split(path: str, text: str) -> _Split:
    lines = text.splitlines(keepends=True)
    starts = [i for i, ln in enumerate(lines) if ln.rstrip("\r\n") == BEGIN]
    if len(starts) > 1:
        raise SosError(f"{path} holds sosext's block {len(starts)} times; remove the extra ones by hand")
    if not starts:
        # An earlier version's marker: remove it, and the line after it only if that is ours.
        kept: list[str] = []
        legacy = False
        i = 0
        while i < len(lines):
            if lines[i].strip() == LEGACY_MARKER:
                legacy = True
                if i + 1 < len(lines) and _is_ours(lines[i + 1]):
                    i += 1
            else:
                kept.append(lines[i])
            i += 1
        return _Split(kept, [] if legacy else None, [], False)
    b = starts[0]
    ends = [i for i in range(b + 1, len(lines)) if lines[i].rstrip("\r\n") == END]
    if not ends:
        raise SosError(f"{path} line {b + 1} has sosext's begin marker but no end marker "
                       f"({END!r}); fix the file by hand")
    e = ends[0]
    inner = [ln.rstrip("\r\n") for ln in lines[b + 1:e]]
    created = CREATED in inner
    return _Split(lines[:b], [ln for ln in inner if ln != CREATED], lines[e + 1:], created)


# -- writing ---------------------------------------------------------------------------------

def _write(path: str, text: str, like: os.stat_result | None) -> None:
    """Replace ``path`` (a real file, not a symlink) atomically, keeping its mode and owner."""
    directory = os.path.dirname(path) or "."
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".sosext-tmp", dir=directory)
    except OSError as e:
        raise SosError(f"cannot write {path}: {e.strerror or e} (in {directory})") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape", newline="") as f:
            f.write(text)
            if like is not None:
                os.fchmod(f.fileno(), stat.S_IMODE(like.st_mode))
                if (like.st_uid, like.st_gid) != (os.geteuid(), os.getegid()):
                    try:
                        os.fchown(f.fileno(), like.st_uid, like.st_gid)
                    except PermissionError:
                        pass  # only root can give a file away; the mode is kept regardless
            else:
                os.fchmod(f.fileno(), 0o644 & ~_umask())
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise SosError(f"cannot write {path}: {e.strerror or e}") from None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _block(command: str, created: bool) -> str:
    return "".join(f"{ln}\n" for ln in (BEGIN, *([CREATED] if created else []), command, END))


def _join(before: list[str], block: str, after: list[str]) -> str:
    head = "".join(before)
    if head and not head.endswith("\n"):
        head += "\n"
    return head + block + "".join(after)


# -- the two commands ------------------------------------------------------------------------

def install(root: str = ROOT) -> list[str]:
    """Add (or refresh) sosext's block in each init file; one report line per file."""
    report = []
    for f in init_files(root):
        real = _real(f.path)
        text = _read(real)
        shown = f.path if real == f.path else f"{f.path} (-> {real})"
        if text is None:
            _write(real, _block(f.command, created=True), None)
            report.append(f"Added to {shown} (new file): {f.command}")
            continue
        parts = _split(real, text)
        if parts.block == [f.command]:
            report.append(f"Already installed in {shown}: {f.command}")
            continue
        new = _join(parts.before, _block(f.command, parts.created), parts.after)
        _write(real, new, os.stat(real))
        verb = "Added to" if parts.block is None else "Updated in"
        report.append(f"{verb} {shown}: {f.command}")
    return report


def uninstall(root: str = ROOT) -> list[str]:
    """Remove sosext's block (and nothing else) from each init file; one report line per file."""
    report = []
    for path in (os.path.expanduser("~/.lldbinit"), os.path.expanduser("~/.gdbinit")):
        real = _real(path)
        shown = path if real == path else f"{path} (-> {real})"
        text = _read(real)
        if text is None:
            report.append(f"Nothing to remove: {shown} does not exist")
            continue
        parts = _split(real, text)
        if parts.block is None:
            report.append(f"Nothing to remove in {shown}")
            continue
        rest = "".join(parts.before) + "".join(parts.after)
        if parts.created and not rest.strip() and not os.path.islink(path):
            try:
                os.unlink(real)
            except OSError as e:
                raise SosError(f"cannot remove {real}: {e.strerror or e}") from None
            report.append(f"Removed {shown} (sosext install had created it)")
            continue
        _write(real, rest, os.stat(real))
        report.append(f"Removed sosext from {shown}")
    return report
