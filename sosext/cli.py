"""The standalone command line: ``python3 -m sosext`` (or the ``sosext`` script).

    sosext analyze CORE [-c CMD]... [--clr-path DIR]   every sosext command over a core file, no debugger
    sosext collect PID [--type heap|full|mini|triage] [-o FILE]
    sosext ps                         .NET processes with a diagnostics socket
    sosext diff OLD NEW [opts]        heap diff of two cores (heapdiff); opts may hold --clr-path DIR
    sosext leaks OLD NEW [opts]       growth report with retention paths
    sosext install | uninstall        add/remove the import line in ~/.lldbinit and ~/.gdbinit
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Sequence

from .errors import SosError
from .render.text import safe_line, safe_text


def _session_for_core(path: str, search_dirs: Sequence[str] = ()):  # type: ignore[no-untyped-def]
    from .session import Session
    from .targets.elfcore import CoreTarget
    target = CoreTarget(path, search_dirs=list(search_dirs) or None)
    target.key = ("core", os.path.realpath(path))  # type: ignore[attr-defined]
    session = Session(lambda: target)
    # Walk big cores on two processes (SOSEXT_WORKERS=1 turns it off).
    session.settings["workers"] = int(os.environ.get("SOSEXT_WORKERS", min(2, os.cpu_count() or 1)))
    return session


def _print(text: str) -> None:
    # Paths and command lines come from elsewhere: escaped. A command's output comes a chunk
    # at a time (render/output.py): show each at once.
    sys.stdout.write(safe_text(text) + "\n")
    sys.stdout.flush()


def _progress(text: str) -> None:
    """A line on stdout before a long wait (stderr carries only the error, if one follows)."""
    _print(text)


def _eprint(text: str) -> None:
    sys.stderr.write(safe_line(text) + "\n")


def run_command_line(session, line: str) -> bool:  # type: ignore[no-untyped-def]
    from .hosts.common import execute
    line = line.strip()
    if not line:
        return True
    name, _, rest = line.partition(" ")
    if name.startswith("!"):
        name = name[1:]  # WinDbg habit: !dumpheap
    return execute(session, name, rest, _print, _eprint, color=False, progress_stream=sys.stderr)


def _apply_clr_path(args: argparse.Namespace) -> None:
    """--clr-path DIR: the user's explicit choice of DAC directory (as setclrpath in a debugger)."""
    if getattr(args, "clr_path", None):
        from .dac.loader import set_clr_path
        set_clr_path(os.path.abspath(os.path.expanduser(args.clr_path)))


def _add_clr_path(p: argparse.ArgumentParser) -> None:
    p.add_argument("--clr-path", metavar="DIR",
                   help="load the DAC (libmscordaccore.so) from DIR, a copy of the target's runtime; "
                        "trusted because you chose it (as setclrpath DIR in LLDB/GDB)")


def cmd_analyze(args: argparse.Namespace) -> int:
    from .clr.progress import set_interrupt_source
    _apply_clr_path(args)
    if args.symbols:
        from .clr.sourcelines import set_symbol_directories
        set_symbol_directories(args.symbols)
    session = _session_for_core(args.core, args.search_dir)
    flag = {"hit": False}

    def on_sigint(signum, frame):  # type: ignore[no-untyped-def]
        flag["hit"] = True
        raise KeyboardInterrupt
    set_interrupt_source(lambda: flag["hit"])
    signal.signal(signal.SIGINT, on_sigint)
    if args.command:
        ok = True
        import time
        for line in args.command:
            flag["hit"] = False
            t0 = time.perf_counter()
            ok = run_command_line(session, line) and ok
            if args.timing:
                sys.stderr.write(f"sosext-timing {time.perf_counter() - t0:.4f} {line}\n")
            if args.separator is not None:
                sys.stderr.flush()
                _print(args.separator)
        return 0 if ok else 1
    from .repl import repl
    return repl(session, lambda line: run_command_line(session, line), flag)


def cmd_snapshot(args: argparse.Namespace) -> int:
    _apply_clr_path(args)
    session = _session_for_core(args.core)
    return 0 if run_command_line(session, "heapsnapshot") else 1


def cmd_compare(args: argparse.Namespace) -> int:
    """sosext diff|leaks OLD NEW [options]: the heapdiff/leaks command on NEW against OLD."""
    import shlex
    args.options, clr_path = _take_clr_path(list(args.options))
    args.clr_path = clr_path or args.clr_path
    _apply_clr_path(args)
    session = _session_for_core(args.new)
    line = " ".join([args.command_name, shlex.quote(args.old), *map(shlex.quote, args.options)])
    return 0 if run_command_line(session, line) else 1


def _take_clr_path(options: list[str]) -> tuple[list[str], str | None]:
    """Pull ``--clr-path DIR`` (or ``--clr-path=DIR``) out of diff/leaks's pass-through options."""
    rest: list[str] = []
    found = None
    it = iter(options)
    for opt in it:
        if opt == "--clr-path":
            found = next(it, None)
            if found is None:
                raise SosError("--clr-path needs a directory")
        elif opt.startswith("--clr-path="):
            found = opt.split("=", 1)[1]
        else:
            rest.append(opt)
    return rest, found


def cmd_collect(args: argparse.Namespace) -> int:
    from .ipc import DumpType, collect_dump
    from .ipc.client import parse_pid
    kinds = {"heap": DumpType.WITH_HEAP, "full": DumpType.FULL, "mini": DumpType.NORMAL,
             "triage": DumpType.TRIAGE}
    pid = parse_pid(args.pid)
    if not args.timeout > 0:
        raise SosError(f"invalid --timeout {args.timeout:g} (seconds, > 0)")
    out = args.output or f"core_{pid}_%t".replace("%t", _stamp())
    path = collect_dump(pid, out, kinds[args.type], force=args.force, timeout=args.timeout,
                        on_start=lambda: _progress(f"Writing {args.type} dump of process {pid} "
                                                   f"(waiting up to {args.timeout:g} s) ..."))
    _print(f"Wrote {args.type} dump to {path}")
    _print(f"Complete: {os.path.getsize(path):,} bytes (mode 0600)")
    return 0


def _stamp() -> str:
    import time
    return time.strftime("%Y%m%d_%H%M%S")


def cmd_ps(args: argparse.Namespace) -> int:
    from .ipc import list_processes
    rows = list_processes()
    if not rows:
        _print("No .NET processes with a diagnostics socket were found.")
        return 0
    width = max(len(str(r.pid)) for r in rows)
    for r in rows:
        name = r.name or "?"
        version = r.runtime_version or "?"
        _print(f"{str(r.pid).rjust(width)} {name:<16} {version:<10} {r.command_line}")
    return 0


def cmd_install(args: argparse.Namespace) -> int:
    from .install import install, uninstall
    for line in (uninstall() if args.action == "uninstall" else install()):
        _print(line)
    return 0


def _index_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--index-dir", metavar="DIR",
                        help="keep the heap index of cores here (default $XDG_CACHE_HOME/sosext)")
    parser.add_argument("--no-index-cache", action="store_true",
                        help="neither read nor write a heap index file for the core")


def _apply_index_options(args: argparse.Namespace) -> None:
    """Through the environment, so that baseline child processes follow the same choice."""
    if getattr(args, "no_index_cache", False):
        os.environ["SOSEXT_NO_INDEX_CACHE"] = "1"
    if getattr(args, "index_dir", None):
        os.environ["SOSEXT_INDEX_DIR"] = os.path.abspath(args.index_dir)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sosext", description="SOS-style .NET heap analysis for Linux cores and processes.")
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("analyze", help="analyze a core file (REPL, or -c commands)")
    a.add_argument("core")
    a.add_argument("-c", "--command", action="append", help="run this command and exit (repeatable)")
    a.add_argument("--separator", help="print this line after each -c command's output (for scripts)")
    a.add_argument("--timing", action="store_true", help="print each -c command's wall time on stderr")
    a.add_argument("--search-dir", action="append", default=[],
                   help="directory to look for module files the core names but this machine lacks")
    _index_options(a)
    _add_clr_path(a)
    a.add_argument("--symbols", action="append", default=[], metavar="DIR",
                   help="local directory to search for portable PDBs (source lines), as setsymbolserver -directory")
    a.set_defaults(func=cmd_analyze)
    c = sub.add_parser("collect", help="write a dump of a .NET process through its diagnostics socket")
    c.add_argument("pid", help="process id")  # checked by collect, in one line
    c.add_argument("--type", choices=["heap", "full", "mini", "triage"], default="heap")
    c.add_argument("-o", "--output", help="dump file path (default core_<pid>_<time> here); "
                   "%%p %%e %%h %%t as for createdump; never overwritten without --force")
    c.add_argument("--force", action="store_true", help="replace an existing file at -o (a symlink itself, "
                   "never what it points to)")
    c.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the dump (default 120)")
    c.set_defaults(func=cmd_collect)
    ps = sub.add_parser("ps", help="list .NET processes that can be collected")
    ps.set_defaults(func=cmd_ps)
    snap = sub.add_parser("snapshot", help="per-type statistics of a core as JSON (heapdiff's baseline)")
    snap.add_argument("core")
    _index_options(snap)
    _add_clr_path(snap)
    snap.set_defaults(func=cmd_snapshot)
    for name, cmd, what in (("diff", "heapdiff", "which types grew from OLD to NEW"),
                            ("leaks", "leaks", "growth report: what holds the types that grew")):
        d = sub.add_parser(name, help=what, description=f"{what}. Options as for the '{cmd}' command "
                           "(-top N, -type TEXT, -min-delta BYTES, --json) and --clr-path DIR.")
        _add_clr_path(d)
        _index_options(d)
        d.add_argument("old")
        d.add_argument("new")
        d.add_argument("options", nargs=argparse.REMAINDER)
        d.set_defaults(func=cmd_compare, command_name=cmd)
    for action in ("install", "uninstall"):
        i = sub.add_parser(action, help=f"{action} the import line in ~/.lldbinit and ~/.gdbinit")
        i.set_defaults(func=cmd_install, action=action)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from .pycheck import exit_unless_usable
    exit_unless_usable()  # one line naming the Python to use, not a traceback from a command module
    parser = build_parser()
    args = parser.parse_args(argv)
    _apply_index_options(args)
    try:
        return args.func(args)
    except SosError as e:
        _eprint(f"error: {e}")
        return 1
    except KeyboardInterrupt:
        _eprint("error: interrupted")
        return 130
