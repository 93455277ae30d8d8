"""The standalone command line: the ``sosext`` command (``python3 -m sosext`` from a checkout).

    sosext analyze CORE [-c CMD]... [--clr-path DIR]   every sosext command over a core file, no debugger
    sosext collect PID [--type heap|full|mini|triage] [-o FILE]
    sosext ps                         .NET processes with a diagnostics socket
    sosext counters PID [--interval S] [--duration S] [--format table|csv|json]
    sosext gcdump PID [-o FILE]       GC heap snapshot over EventPipe; gcdump-stat FILE; diff OLD NEW
    sosext diff OLD NEW [opts]        heap diff of two cores or two gcdump snapshots (heapdiff);
                                      opts may hold --clr-path DIR
    sosext leaks OLD NEW [opts]       growth report with retention paths (cores or snapshots)
    sosext report CORE [--baseline OLD] [-o FILE] [--format html|folded|json]
                                      self-contained HTML heap report, or folded stacks
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


# Commands whose first search reads the core's mapping in place (clr/roots/rootsearch.py).
_SEARCH_IN_PLACE = frozenset({"gcroot", "pathto"})


def _command_name(line: str) -> str:
    return line.strip().split(" ", 1)[0].lstrip("!").lower()


def _print(text: str) -> None:
    # Paths and command lines come from elsewhere: escaped. A command's output comes a chunk
    # at a time (render/output.py): show each at once.
    sys.stdout.write(safe_text(text) + "\n")
    sys.stdout.flush()


def _print_output(text: str) -> None:
    # A command's output: render/output.py escaped every line already (and may have added
    # colour after that, which a second escape would spoil).
    sys.stdout.write(text + "\n")
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
    return execute(session, name, rest, _print_output, _eprint, color=_stdout_is_terminal(),
                   progress_stream=sys.stderr)


def _stdout_is_terminal() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def _apply_clr_path(args: argparse.Namespace) -> None:
    """--clr-path DIR: the user's explicit choice of DAC directory (as setclrpath in a debugger)."""
    if getattr(args, "clr_path", None):
        from .clr.runtime import set_clr_path
        set_clr_path(os.path.abspath(os.path.expanduser(args.clr_path)))
    if getattr(args, "reader", None):
        # --reader: as setreader; children (diff/leaks baselines) inherit it through the environment.
        from .clr.runtime import set_reader
        set_reader(args.reader)
        os.environ["SOSEXT_READER"] = args.reader


def _add_clr_path(p: argparse.ArgumentParser) -> None:
    p.add_argument("--clr-path", metavar="DIR",
                   help="load the DAC (libmscordaccore.so) from DIR, a copy of the target's runtime; "
                        "trusted because you chose it (as setclrpath DIR in LLDB/GDB)")
    p.add_argument("--reader", choices=("dac", "contracts", "auto"),
                   help="how to read the runtime: its DAC, or its data contracts in pure Python "
                        "(loads no DAC); default auto: the DAC when found and trusted (as setreader)")


def _analyze_snapshot(args: argparse.Namespace) -> int:
    """``analyze SNAPSHOT``: a gcdump snapshot holds each object's type, size and references,
    not memory: ``dumpheap -stat`` (with -type, --json) answers from it; anything else says
    so in one line."""
    from .commands.base import split_words
    ok = True
    for line in args.command or []:
        words = split_words(line)
        stat, as_json, type_text, other = False, False, None, False
        rest = iter(words[1:])
        for w in rest:
            if w.lower() == "-stat":
                stat = True
            elif w.lower() == "--json":
                as_json = True
            elif w.lower() == "-type":
                type_text = next(rest, None)
                other = other or type_text is None
            else:
                other = True
        if words and words[0].lstrip("!").lower() == "dumpheap" and stat and not other:
            ok = cmd_gcdump_stat(argparse.Namespace(snapshot=args.core, type=type_text, min_count=None,
                                                    json=as_json)) == 0 and ok
        else:
            _eprint(f"error: {words[0] if words else 'nothing'}: {args.core} is a gcdump snapshot (types, sizes and "
                    "references only, no memory, fields or stacks): it answers dumpheap -stat [-type T] [--json]; "
                    "compare two with 'sosext diff' or 'sosext leaks'")
            ok = False
        if args.separator is not None:
            sys.stderr.flush()
            _print(args.separator)
    if not args.command:
        _eprint(f"error: {args.core} is a gcdump snapshot: use -c \"dumpheap -stat\" (no interactive analyzer)")
        return 1
    return 0 if ok else 1


def _not_a_pid(path: str | None, command: str = "analyze") -> None:
    """``analyze 1234``: a process id where a core file belongs gets the way to a core (or, for
    the commands that also read them, to a gcdump snapshot)."""
    if not path or not (path.isascii() and path.isdigit()) or os.path.lexists(path):
        return
    from .ipc.client import pid_exists
    if not pid_exists(int(path)):
        return
    if command == "analyze":
        way = (f"analyze takes a core file: write one with 'sosext collect {path}', or attach a debugger "
               f"(lldb-16 -p {path}, gdb -p {path})")
    elif command == "snapshot":
        way = f"snapshot takes a core file: write one with 'sosext collect {path}'"
    elif command == "gcdump-stat":
        raise SosError(f"cannot read {path}: No such file or directory; {path} is a running process: gcdump-stat "
                       f"takes a gcdump snapshot: write one with 'sosext gcdump {path}'")
    else:  # diff, leaks, report
        way = (f"{command} takes core files or gcdump snapshots: write one with 'sosext collect {path}' "
               f"or 'sosext gcdump {path}'")
    raise SosError(f"cannot open core file {path}: No such file or directory; {path} is a running process: {way}")


def cmd_analyze(args: argparse.Namespace) -> int:
    from . import interrupts
    from .clr.snapshots.gcdumpformat import is_gcdump
    _not_a_pid(args.core)
    if is_gcdump(args.core):
        return _analyze_snapshot(args)
    _apply_clr_path(args)
    if args.symbols:
        from .clr.code.sourcelines import set_symbol_directories
        set_symbol_directories(args.symbols)
    session = _session_for_core(args.core, args.search_dir)
    def on_sigint(signum, frame):  # type: ignore[no-untyped-def]
        interrupts.request()
        raise KeyboardInterrupt
    signal.signal(signal.SIGINT, on_sigint)
    import time
    if args.command:
        ok = True
        from .clr.roots import background
        for k, line in enumerate(args.command):
            background.allow(k < len(args.command) - 1)  # nothing builds for a command that ends the run
            interrupts.clear()
            t0 = time.perf_counter()
            ok = run_command_line(session, line) and ok
            if args.timing:
                sys.stderr.write(f"sosext-timing {time.perf_counter() - t0:.4f} {line}\n")
            if args.separator is not None:
                sys.stderr.flush()
                _print(args.separator)
        return 0 if ok else 1
    from .repl import repl

    def run(line: str) -> bool:
        t0 = time.perf_counter()
        ok = run_command_line(session, line)
        if args.timing:
            sys.stderr.write(f"sosext-timing {time.perf_counter() - t0:.4f} {line.strip()}\n")
        return ok
    return repl(session, run)


def cmd_snapshot(args: argparse.Namespace) -> int:
    _not_a_pid(args.core, "snapshot")
    _apply_clr_path(args)
    session = _session_for_core(args.core)
    return 0 if run_command_line(session, "heapsnapshot -live" if args.live else "heapsnapshot") else 1


def cmd_compare(args: argparse.Namespace) -> int:
    """sosext diff|leaks OLD NEW [options]: the heapdiff/leaks command on NEW against OLD."""
    import shlex
    for path in (args.old, args.new):
        _not_a_pid(path, "diff" if args.command_name == "heapdiff" else "leaks")
    args.options, clr_path = _take_clr_path(list(args.options))
    args.clr_path = clr_path or args.clr_path
    _apply_clr_path(args)
    from .clr.snapshots.gcdumpsnap import is_gcdump
    old_is_snapshot, new_is_snapshot = is_gcdump(args.old), is_gcdump(args.new)
    if new_is_snapshot:
        # A core as the baseline of a snapshot: the core's live objects, matched by name.
        return cmd_gcdump_diff(args) if args.command_name == "heapdiff" else cmd_gcdump_leaks(args)
    # (A snapshot as the baseline of a core: heapdiff and leaks read it themselves.)
    session = _session_for_core(args.new)
    line = " ".join([args.command_name, shlex.quote(args.old), *map(shlex.quote, args.options)])
    return 0 if run_command_line(session, line) else 1


def cmd_report(args: argparse.Namespace) -> int:
    """sosext report CORE: the report command on CORE (docs/report.md)."""
    import shlex
    for path in (args.core, args.baseline):
        _not_a_pid(path, "report")
    _apply_clr_path(args)
    from .clr.snapshots.gcdumpsnap import is_gcdump
    if is_gcdump(args.core):
        return _report_of_snapshot(args)
    words = ["report", "--format", args.format]
    for flag, value in (("-o", args.output), ("--baseline", args.baseline)):
        if value:
            words += [flag, value]
    words += ["--force"] if args.force else []
    session = _session_for_core(args.core)
    return 0 if run_command_line(session, " ".join(map(shlex.quote, words))) else 1


def _report_of_snapshot(args: argparse.Namespace) -> int:
    """sosext report SNAPSHOT: the report of a gcdump snapshot (report/snapshot.py)."""
    import json
    from .clr.snapshots.gcdumpsnap import GcDump, is_gcdump
    from .commands.report import FORMATS
    from .files import write_new
    from .report.snapshot import folded_lines, snapshot_report, with_event_names
    fmt = (args.format or "html").lower()
    if fmt not in FORMATS:
        raise SosError(f"unknown format {args.format} (html, folded or json)")
    if args.baseline and fmt == "folded":
        raise SosError("--baseline colours the HTML report; folded stacks have no baseline")
    output = args.output or ("report.html" if fmt == "html" else "-")
    if output != "-" and os.path.lexists(output) and not args.force:
        raise SosError(f"{output} exists; choose another name or add --force")
    dump = GcDump.load(args.core)
    if fmt == "folded":
        text = "\n".join(folded_lines(dump)) + "\n"
    else:
        doc = snapshot_report(dump, dump.source())
        if args.baseline:
            from .report.baseline import BaselineReport
            from .report.data import add_growth
            job = BaselineReport(args.baseline)
            try:
                old = job.result()
            finally:
                job.cancel()
            add_growth(doc, old if is_gcdump(args.baseline) else with_event_names(old))
        if fmt == "json":
            text = json.dumps(doc, separators=(",", ":")) + "\n"
        else:
            from .report.html import render_html
            text = render_html(doc)
    if output == "-":
        _print(text.rstrip("\n"))
        return 0
    write_new(output, text, args.force)
    if fmt == "html":
        _print(f"Wrote {output}: {dump.object_count:,} objects, {len(doc['paths']):,} paths, "
               f"{len(doc['types']):,} types")
    return 0


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


def cmd_counters(args: argparse.Namespace) -> int:
    """sosext counters PID: System.Runtime counters over an EventPipe session (no .NET tool)."""
    from .ipc.client import parse_pid
    from .ipc.counters import monitor
    from .render.counters import CounterWriter
    args.pid = parse_pid(args.pid)  # a bad pid in collect's words
    if args.duration is not None and not args.duration > 0:
        raise SosError(f"invalid duration {args.duration!r} (seconds, > 0)")
    from . import interrupts
    interrupts.clear()

    def on_sigint(signum, frame):  # type: ignore[no-untyped-def]
        interrupts.request()  # the loop sends StopTracing and drains; a second Ctrl-C aborts
        signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGINT, on_sigint)
    writer = CounterWriter(sys.stdout, args.format, tty=sys.stdout.isatty(), pid=args.pid, interval=args.interval)
    readings = monitor(args.pid, source=args.source, interval=args.interval, duration=args.duration,
                       stop_flag=interrupts.recorded)
    try:
        for interval in readings:
            writer.write(interval)
    except BrokenPipeError:  # `| head`: stop the session quietly
        readings.close()
        sys.stdout = open(os.devnull, "w")
    return 0


def cmd_gcdump(args: argparse.Namespace) -> int:
    """sosext gcdump PID -o FILE: a GC heap snapshot over EventPipe (like dotnet-gcdump)."""
    from .clr.snapshots.gcdumpsnap import GcDump
    from .ipc.client import check_not_stopped, find_socket, parse_pid
    args.pid = parse_pid(args.pid)  # a bad pid in collect's words
    out = args.output or f"{args.pid}_{_stamp()}.gcdump.npz"
    if os.path.lexists(out):
        raise SosError(f"{out} exists; choose another name (snapshots are never overwritten)")
    from . import interrupts
    interrupts.clear()

    def on_sigint(signum, frame):  # type: ignore[no-untyped-def]
        interrupts.request()
    signal.signal(signal.SIGINT, on_sigint)
    find_socket(args.pid)  # no such process, no socket, stopped: said before announcing a collection
    check_not_stopped(args.pid)
    _eprint(f"Collecting a GC heap dump of process {args.pid} (this runs a full blocking GC)...")
    dump = GcDump.collect(args.pid, timeout=args.timeout, stop_flag=interrupts.recorded)
    dump.save(out)
    _print(f"Wrote {dump.object_count:,} objects of {len(dump.type_ids):,} types, {dump.total_size:,} bytes, "
           f"{dump.edge_target.size:,} references, {dump.root_address.size:,} roots to {out}")
    return 0


def cmd_gcdump_stat(args: argparse.Namespace) -> int:
    """sosext gcdump-stat FILE: dumpheap -stat over a gcdump snapshot."""
    import json
    from .clr.snapshots.gcdumpsnap import GcDump
    from .render.table import Column, Integer, Table, TypeName
    _not_a_pid(args.snapshot, "gcdump-stat")
    dump = GcDump.load(args.snapshot)
    rows = dump.stats()
    if args.type:
        from .clr.typesystem.typekeys import name_contains
        rows = [r for r in rows if args.type in r.name or name_contains(args.type, r.event_name)]
    if args.min_count:
        rows = [r for r in rows if r.count >= args.min_count]
    if args.json:
        _print(json.dumps({"command": "gcdump-stat", "snapshot": args.snapshot, "pid": dump.pid,
                           "runtime": dump.runtime, "types": [
                               {"mt": f"0x{r.type_id:x}", "name": r.name, "count": r.count, "size": r.size}
                               for r in rows],
                           "total_objects": sum(r.count for r in rows), "total_size": sum(r.size for r in rows)},
                          indent=2))
        return 0
    from .render.counters import clean
    t = Table(Column(16, True, lambda v: f"{int(v):012x}"), Integer(), Integer(), TypeName())
    _print(f"GC heap snapshot of process {dump.pid} ({dump.runtime or 'runtime ?'}), "
           f"taken {_local_time(dump.time)}; objects live after GC #{dump.gc_number}")
    _print("Statistics:")
    _print(t.header("MT", "Count", "TotalSize", "Class Name"))
    for r in rows:
        _print(t.row(r.type_id, r.count, r.size, clean(r.name)))
    _print(f"Total {sum(r.count for r in rows):,} objects, {sum(r.size for r in rows):,} bytes")
    return 0


def _local_time(t: float) -> str:
    import time
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def cmd_gcdump_diff(args: argparse.Namespace) -> int:
    """sosext diff OLD NEW where both are gcdump snapshots: heapdiff without cores."""
    import types
    from .clr.snapshots.gcdumpsnap import GcDump
    from .clr.snapshots.snapshot import diff_snapshots, filter_deltas
    from .commands.diff import deltas_json, write_deltas
    from .render.json import emit_json
    from .render.output import Output
    opts = argparse.ArgumentParser(prog="sosext diff", add_help=False)
    opts.add_argument("-top", type=int)
    opts.add_argument("-type")
    opts.add_argument("-min-delta", type=int, dest="min_delta")
    opts.add_argument("--json", action="store_true")
    o, unknown = opts.parse_known_args(args.options)
    if unknown:
        raise SosError(f"unknown option for diff: {' '.join(unknown)}")
    old, new = _baseline_of_snapshot(args.old, GcDump.load(args.new).heap_snapshot())
    rows = filter_deltas(diff_snapshots(old, new), type_substring=o.type, min_delta=o.min_delta, top=o.top)
    out = Output(_print)
    if o.json:
        emit_json(out, {"command": "heapdiff", "old": old.source, "new": new.source,
                        **({"note": new.note} if new.note else {}),
                        "types": [deltas_json(r) for r in rows],
                        "old_total": {"count": old.total_count, "size": old.total_size},
                        "new_total": {"count": new.total_count, "size": new.total_size}})
    else:
        write_deltas(types.SimpleNamespace(out=out), old, new, rows)  # type: ignore[arg-type]
    out.flush()
    return 0


def _baseline_of_snapshot(old_path: str, new: "HeapSnapshot") -> tuple["HeapSnapshot", "HeapSnapshot"]:
    """(old, new) for a comparison whose newer side is a gcdump snapshot: the older one is
    another snapshot, or a core whose live objects a child process counts (names aligned)."""
    from .clr.snapshots.gcdumpsnap import GcDump, is_gcdump
    from .clr.snapshots.snapshot import BaselineJob, align
    if is_gcdump(old_path):
        return GcDump.load(old_path).heap_snapshot(), new
    job = BaselineJob(old_path, live_only=True)
    try:
        core = job.result()
    finally:
        job.cancel()
    old, new = align(core, new, prefer_core=False)   # the snapshot's names: its retention paths use them
    return old, new


def cmd_gcdump_leaks(args: argparse.Namespace) -> int:
    """sosext leaks OLD NEW over two gcdump snapshots: the growing types and the paths holding them."""
    import json
    from .clr.snapshots.gcdumpsnap import GcDump
    from .clr.snapshots.snapshot import diff_snapshots, filter_deltas
    from .commands.diff import deltas_json
    from .render.counters import clean
    from .render.numbers import counted
    opts = argparse.ArgumentParser(prog="sosext leaks", add_help=False)
    opts.add_argument("-top", type=int, default=3)
    opts.add_argument("-type")
    opts.add_argument("-groups", type=int, default=5)
    opts.add_argument("--json", action="store_true")
    o, unknown = opts.parse_known_args(args.options)
    if unknown:
        raise SosError(f"unknown option for leaks: {' '.join(unknown)}")
    new_dump = GcDump.load(args.new)
    old, new = _baseline_of_snapshot(args.old, new_dump.heap_snapshot())
    grown = [r for r in filter_deltas(diff_snapshots(old, new), type_substring=o.type)
             if r.size_delta > 0 and r.count_delta > 0][: o.top]
    report = [(r, *new_dump.retention(r.name, exact=True, groups=o.groups)) for r in grown]
    if o.json:
        _print(json.dumps({"sosext": 1, "command": "leaks", "old": old.source, "new": new.source,
                           **({"note": new.note} if new.note else {}), "types": [
            {**deltas_json(r), "unreachable_instances": unreached, "group_count": ngroups,
             "groups": [{"root": g.root, "path": list(g.types), "count": g.count, "size": g.size,
                         "example": f"0x{g.example:x}"} for g in groups]}
            for r, groups, ngroups, unreached in report]}, indent=2))
        return 0
    _print(f"Growth from {old.source} to {new.source}:")
    from .clr.snapshots.snapshot import swapped_note
    for note in (swapped_note(old, new), new.note):
        if note:
            _print(note)
    if not grown:
        _print("No type grew.")
    for r, groups, ngroups, unreached in report:
        _print("")
        _print(f"{clean(r.name)}: {counted(r.count_delta, 'object', signed=True)}, "
               f"{counted(r.size_delta, 'byte', signed=True)} "
               f"(now {counted(r.new_count, 'object')}, {counted(r.new_size, 'byte')})")
        for g in groups:
            _print(f"  {counted(g.count, 'object')}, {counted(g.size, 'byte')}, held by {clean(g.root)}:")
            for k, name in enumerate(g.types):
                _print(f"      {'   ' if k == 0 else '-> '}{clean(name)}")
            _print(f"      e.g. {g.example:x}")
        if ngroups > len(groups):
            _print(f"  ... {counted(ngroups - len(groups), 'more group')} (-groups <n> shows more)")
        if unreached:
            _print(f"  {counted(unreached, 'object')} with no path from a reported root (the runtime holds some itself "
                   "without reporting a root: interned strings, System.RuntimeType objects)")
    return 0


def cmd_install(args: argparse.Namespace) -> int:
    from .install import install, uninstall
    for line in (uninstall() if args.action == "uninstall" else install()):
        _print(line)
    return 0


def cmd_cache(args: argparse.Namespace) -> int:
    import time
    from pathlib import Path
    from .clr.heap import cachedir
    from .clr.heap.indexcache import cache_directory, cache_listing
    directory = Path(cache_directory())
    if not directory.is_dir():
        _print(f"{directory}: no index cache yet")
        return 0
    if args.action == "clear":
        wanted = {os.path.realpath(c) for c in args.cores}
        freed = removed = 0
        for e, core, _objects in cache_listing(directory):
            if not wanted or core in wanted:
                freed += cachedir.remove(e)
                removed += 1
        if not wanted:
            for t in cachedir.temporary_files(directory):
                try:
                    t.unlink()
                except OSError:
                    pass
        _print(f"removed {removed} entr{'y' if removed == 1 else 'ies'}, {cachedir.fmt_size(freed)} freed ({directory})")
        return 0
    listing = cache_listing(directory)
    _print(f"{'size':>10}  {'objects':>13}  {'last used':<16}  files  core")
    for e, core, objects in listing:
        used = time.strftime("%Y-%m-%d %H:%M", time.localtime(e.used))
        count = f"{objects:,}" if objects is not None else "?"
        _print(f"{cachedir.fmt_size(e.bytes):>10}  {count:>13}  {used:<16}  {len(e.files):>5}  {core or '(unreadable)'}")
    total = sum(e.bytes for e, _c, _o in listing)
    _print(f"{len(listing)} entr{'y' if len(listing) == 1 else 'ies'}, {cachedir.fmt_size(total)} of a {cachedir.fmt_size(cachedir.cap_for(directory))} "
           f"cap ({directory})")
    return 0


def _index_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--index-dir", metavar="DIR",
                        help="keep the heap index of cores here (default $XDG_CACHE_HOME/sosext)")
    parser.add_argument("--no-index-cache", action="store_true",
                        help="neither read nor write a heap index file for the core")
    parser.add_argument("--cache-max", metavar="SIZE", type=_size,
                        help="keep the index cache within SIZE bytes (K/M/G suffixes; default the smaller "
                        "of 10G and a tenth of its disk; $SOSEXT_CACHE_MAX)")


def _size(text: str) -> str:
    from .clr.heap.cachedir import parse_size
    try:
        parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def _apply_index_options(args: argparse.Namespace) -> None:
    """Through the environment, so that baseline child processes follow the same choice."""
    if getattr(args, "no_index_cache", False):
        os.environ["SOSEXT_NO_INDEX_CACHE"] = "1"
    if getattr(args, "index_dir", None):
        os.environ["SOSEXT_INDEX_DIR"] = os.path.abspath(args.index_dir)
    if getattr(args, "cache_max", None):
        os.environ["SOSEXT_CACHE_MAX"] = args.cache_max


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sosext", description="SOS-style .NET heap analysis for Linux cores and processes.")
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("analyze", help="analyze a core file (REPL, or -c commands)")
    a.add_argument("core")
    a.add_argument("-c", "--command", action="append", help="run this command and exit (repeatable)")
    a.add_argument("--separator", help="print this line after each -c command's output (for scripts)")
    a.add_argument("--timing", action="store_true", help="print each command's wall time on stderr")
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
    snap.add_argument("--live", action="store_true", help="only objects reachable from a root")
    _index_options(snap)
    _add_clr_path(snap)
    snap.set_defaults(func=cmd_snapshot)
    for name, cmd, what in (("diff", "heapdiff", "which types grew from OLD to NEW"),
                            ("leaks", "leaks", "growth report: what holds the types that grew")):
        d = sub.add_parser(name, help=what, description=f"{what}. OLD and NEW are two cores or two "
                           f"'sosext gcdump' snapshots. Options as for the '{cmd}' command "
                           "(-top N, -type TEXT, -min-delta BYTES, --json) and --clr-path DIR.")
        _add_clr_path(d)
        _index_options(d)
        d.add_argument("old")
        d.add_argument("new")
        d.add_argument("options", nargs=argparse.REMAINDER)
        d.set_defaults(func=cmd_compare, command_name=cmd)
    r = sub.add_parser("report", help="write a heap report: one self-contained HTML file, or folded stacks",
                       description="One HTML file, nothing fetched: summary, an icicle of retained bytes along "
                       "dominator paths grouped by type, a treemap by type, holders and sortable tables; with "
                       "--baseline coloured by growth. --format folded: 'root kind;Type;Type;... bytes' lines "
                       "for flamegraph.pl or speedscope. See docs/report.md.")
    r.add_argument("core")
    r.add_argument("-o", "--output", help="file to write (default report.html; folded/json: stdout); '-' for stdout")
    r.add_argument("--baseline", metavar="OLD_CORE", help="an older core of the same program: colour by growth")
    r.add_argument("--format", choices=["html", "folded", "json"], default="html")
    r.add_argument("--force", action="store_true", help="replace an existing output file")
    _add_clr_path(r)
    _index_options(r)
    r.set_defaults(func=cmd_report)
    ct = sub.add_parser(
        "counters", help="watch a process's System.Runtime counters (GC heap, gen sizes, GCs, thread pool…)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="The runtime's System.Runtime counters over an EventPipe session, like\n"
        "'dotnet-counters monitor', with no .NET tool installed. On a terminal the table is\n"
        "refreshed in place; in a pipe every reading is one line. Ctrl-C (or --duration)\n"
        "stops the session.",
        epilog="source: 'metrics' reads the System.Runtime meter (.NET 9+): absolute values such as\n"
        "  dotnet.gc.collections per generation since start, dotnet.gc.last_collection.heap.size\n"
        "  per generation; one metrics session per process at a time.\n"
        "  'eventcounters' reads the System.Runtime EventCounters (every runtime): gc-heap-size\n"
        "  in MB, gen-N-gc-count as increments per interval. 'auto' picks metrics on .NET 9+.\n\n"
        "examples:\n  sosext counters 1234\n  sosext counters 1234 --interval 5 --format csv > counters.csv\n"
        "  sosext counters 1234 --duration 10 --format json | jq '.counters[]'")
    ct.add_argument("pid", help="process id")  # checked as collect checks it, in one line
    ct.add_argument("--interval", type=float, default=1.0, help="seconds between readings (default 1)")
    ct.add_argument("--duration", type=float, help="stop after this many seconds (default: until Ctrl-C)")
    ct.add_argument("--format", choices=["table", "csv", "json"], default="table")
    ct.add_argument("--source", choices=["auto", "metrics", "eventcounters"], default="auto")
    ct.set_defaults(func=cmd_counters)
    g = sub.add_parser(
        "gcdump", help="take a GC heap snapshot of a process over EventPipe (like dotnet-gcdump)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Has the runtime walk its heap during a full blocking GC and report every live\n"
        "object (address, size, type), reference and root, and saves that as a snapshot file\n"
        "(docs/commands.md describes its format). No .NET tool, no dump, no ptrace; but no\n"
        "field values, no strings' contents and no stacks either.",
        epilog="examples:\n  sosext gcdump 1234 -o before.gcdump.npz\n  sosext gcdump-stat before.gcdump.npz\n"
        "  sosext diff before.gcdump.npz after.gcdump.npz -top 10")
    g.add_argument("pid", help="process id")  # checked as collect checks it, in one line
    g.add_argument("-o", "--output", help="snapshot file (default <pid>_<time>.gcdump.npz here); never overwritten")
    g.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the dump (default 300)")
    g.set_defaults(func=cmd_gcdump)
    gs = sub.add_parser("gcdump-stat", help="per-type statistics of a gcdump snapshot (dumpheap -stat)",
                        description="dumpheap -stat over a snapshot written by 'sosext gcdump': MethodTable, "
                        "count, total size and name per type, ascending by total size.",
                        epilog="example: sosext gcdump-stat before.gcdump.npz -type MyApp.")
    gs.add_argument("snapshot")
    gs.add_argument("-type", help="only types whose name contains this text")
    gs.add_argument("-min", type=int, dest="min_count", help="only types with at least this many objects")
    gs.add_argument("--json", action="store_true", help="print the result as JSON")
    gs.set_defaults(func=cmd_gcdump_stat)
    ca = sub.add_parser("cache", help="list or clear the heap index cache (bounded in bytes)",
                        description="The heap index cache: one entry per core (its index, and the reference "
                        "graph, its reverse, dominators and statistics when they were built), with the disk "
                        "space each uses. 'list' (the default) shows them, least recently used first, with the "
                        "total and the cap; 'clear' removes them (all, or those of the cores named).",
                        epilog="examples: sosext cache list; sosext cache clear; sosext cache clear core.1234; "
                        "sosext cache list --cache-max 2G")
    # Bare `sosext cache` lists: a user asking about the cache wants to see it, not a usage error.
    ca.add_argument("action", nargs="?", choices=("list", "clear"), default="list")
    ca.add_argument("cores", nargs="*", help="clear: only the entries of these cores")
    ca.add_argument("--index-dir", metavar="DIR", help="the cache directory (default $XDG_CACHE_HOME/sosext)")
    ca.add_argument("--cache-max", metavar="SIZE", type=_size, help="the cap to show (default as analyze's)")
    ca.set_defaults(func=cmd_cache)
    for action in ("install", "uninstall"):
        i = sub.add_parser(action, help=f"{action} the import line in ~/.lldbinit and ~/.gdbinit")
        i.set_defaults(func=cmd_install, action=action)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.func is cmd_analyze and any(_command_name(c) in _SEARCH_IN_PLACE for c in args.command or ()):
        from .targets.prewarm import prewarm
        prewarm(args.core)  # the core's pages are mapped on another core while Python starts
    from .pycheck import exit_unless_usable
    exit_unless_usable()  # one line naming the Python to use, not a traceback from a command module
    _apply_index_options(args)
    try:
        status = args.func(args)
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        return _reader_gone()
    except SosError as e:
        _eprint(f"error: {e}")
        return 1
    except KeyboardInterrupt:
        _eprint("error: interrupted")
        return 130


def _reader_gone() -> int:
    """The reader of our output went away (``| head``): stop quietly, as other CLI tools do.
    Standard output is pointed at /dev/null so the interpreter's last flush cannot fail too."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 141  # 128 + SIGPIPE, as a shell reports a process the pipe ended
