"""Every shell and debugger block of README.md and docs/*.md runs, and prints what the doc shows.

The conventions for the docs (block kinds, `<!-- not-run: reason -->`, what the comparison masks)
are in tests/docblocks.py. Each doc's session blocks run in order, as a reader would type them,
in one shell (so `pid=$!` in one block is `$pid` in the next) with the checkout as the working
directory, Debian's /usr/bin/python3 first on PATH, a private HOME where the README's set-up ran
as for a user who is not root (the `sosext` command in ~/.local/bin) and /tmp/lk a private directory;
debugger blocks run in lldb-16 / gdb with the block's own command line. A doc address in a typed
command (an MT, an object) is replaced by the address the run printed on the matching line. LLDB
is typed into one command at a time, so a command gets the addresses printed just before it;
consecutive or not, the blocks on one debuggee core share one LLDB (each starts on thread 1).
With SOSEXT_DOCS_DUMP=FILE, each mismatch's exact output is appended to FILE as a JSON line
(where, command, real), to paste into the doc; with SOSEXT_DOCS_DUMP_EVERY=1 too, every step's
output is, matched or not, so that tests/docs_update.py makes a doc's every number one run's
(docs/leak-hunting.md is made so: tests/test_doc_consistency.py checks its numbers agree).
"""
from __future__ import annotations

import json
import os
import queue
import re
import shlex
import shutil
import signal
import subprocess
import threading
from pathlib import Path

import pytest

import drivers
from docblocks import (DOCS, KINDS, PROMPTS, REPO, SESSIONS, Block, Step, bind, blocks, first_hex, learn, match,
                       rebind, shorter_sleep, steps)

MARK = "@@SOSEXT-DOC@@"
# LLDB's own thread status after `thread select` arrives asynchronously (before or after the next
# command's output): it is LLDB's, not sosext's, so the docs show it as nothing.
_LLDB_STOP = re.compile(r"^(\* thread #\d+, |    frame #\d+: )")
TIMEOUT = 600


def test_every_block_is_classified() -> None:
    problems = []
    for doc in DOCS:
        for b in blocks(doc):
            if b.kind not in KINDS:
                problems.append(f"{b.where}: fence kind {b.kind!r} is not one of {sorted(KINDS)}")
            elif b.kind in SESSIONS - {"bash"} and b.not_run is None:
                try:
                    st = steps(b)
                except ValueError as e:
                    problems.append(str(e))
                    continue
                if not st:
                    problems.append(f"{b.where}: a {b.kind} block with nothing typed")
                if b.kind == "sosext" and b.debuggee is None:
                    problems.append(f"{b.where}: a sosext-analyze session runs on a debuggee core: name its scenario")
            if b.kind == "text" and any(ln.startswith(tuple(PROMPTS.values())) for ln in b.text):
                problems.append(f"{b.where}: a session (prompt lines) marked as text")
            if b.not_run is not None and (b.kind not in SESSIONS or not b.not_run.strip()):
                problems.append(f"{b.where}: not-run needs a session block and a reason")
    assert not problems, "\n".join(problems)


def _runnable(doc: Path) -> list[Block]:
    return [b for b in blocks(doc) if b.kind in SESSIONS and b.not_run is None]


def _pump(stream, lines: "queue.Queue[str | None]") -> None:  # type: ignore[no-untyped-def]
    """A typed-into process's output, line by line, then None at its end (a thread's work)."""
    for ln in stream:
        lines.put(ln.rstrip("\n"))
    lines.put(None)


def _to_mark(lines: "queue.Queue[str | None]", command: str, who: str) -> tuple[str, list[str]]:
    """The lines ``command`` printed up to MARK's line, and that line."""
    out: list[str] = []
    while True:
        try:
            ln = lines.get(timeout=TIMEOUT)
        except queue.Empty:
            raise AssertionError(f"no end of {command!r} after {TIMEOUT}s; output so far:\n" + "\n".join(out))
        if ln is None:
            raise AssertionError(f"{who} ended during {command!r}:\n" + "\n".join(out))
        if ln.startswith(MARK):
            return ln, out
        out.append(ln)


class Session:
    """What a reader's terminal holds while following one doc: a shell, paths, an environment."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.lk = tmp / "lk"
        home = self.home = tmp / "home"
        home.mkdir()
        real_home = os.path.expanduser("~")
        dotnet_dir = os.path.dirname(drivers.DOTNET_HOST or "/usr/bin/dotnet")
        self.env = {**os.environ, "HOME": str(home), "PATH": f"/usr/bin:/bin:{dotnet_dir}",
                    "DOTNET_CLI_HOME": real_home, "NUGET_PACKAGES": os.path.join(real_home, ".nuget", "packages"),
                    "DOTNET_CLI_TELEMETRY_OPTOUT": "1", "DOTNET_NOLOGO": "1", "TERM": "dumb"}
        self.env.pop("PYTHONPATH", None)
        # The README's set-up, as a user who is not root: `sosext` on PATH, `import sosext` anywhere.
        self.env = drivers.link_front_door(home) | {k: v for k, v in self.env.items() if k not in ("HOME", "PATH")}
        self.mapping: dict[str, str] = {}
        self.cores: dict[tuple[str, ...], tuple[Path, str]] = {}
        self.lldbs: dict[str, Lldb] = {}
        self.shell = subprocess.Popen(["bash", "--norc", "--noprofile"], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      cwd=REPO, env=self.env, start_new_session=True)
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=_pump, args=(self.shell.stdout, self.lines), daemon=True).start()
        self.sh("exec 2>&1")

    def lldb(self, start: str, keep: bool) -> "Lldb":
        """An LLDB session for a block: the core's open one when blocks on the same core share it."""
        if keep and start in self.lldbs:
            return self.lldbs[start]
        dbg = Lldb(shlex.split(self.to_run(start)), self.env)
        if keep:
            self.lldbs[start] = dbg
        return dbg

    def debuggee_core(self, scenario: list[str]) -> tuple[Path, str]:
        """A heap core of the test debuggee in that scenario (one per scenario), and its executable."""
        key = tuple(scenario)
        if key not in self.cores:
            from harness import DEFAULT_TFM, Debuggee, build_debuggee
            # NAME=VALUE words are the debuggee's environment (DOTNET_StressLog=1 ...).
            env = dict(w.split("=", 1) for w in scenario if "=" in w)
            words = [w for w in scenario if "=" not in w]
            d = Debuggee(words[0], *words[1:], env=env, dll=build_debuggee(DEFAULT_TFM), core_dir=self.tmp / "debuggee")
            try:
                d.start()
                exe = str(d.executable)
                self.cores[key] = (d.write_core("heap", self.tmp / f"{'-'.join(key)}.core"), exe)
            finally:
                d.stop()
        return self.cores[key]

    def close(self) -> None:
        for dbg in self.lldbs.values():
            dbg.close()
        # The shell and what the doc started in the background (the service) share its group.
        try:
            os.killpg(self.shell.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.shell.wait()

    # Paths as the doc writes them <-> as this run has them.
    def to_run(self, text: str) -> str:
        return text.replace("/tmp/lk", str(self.lk)).replace("/path/to/sosext", str(REPO))

    def to_doc(self, text: str) -> str:
        from harness import work_dir
        return (text.replace(str(self.lk), "/tmp/lk").replace(str(self.home), "~")
                .replace(str(work_dir()), "/path/to/sosext/.work").replace(str(REPO), "/path/to/sosext"))

    def sh(self, command: str) -> list[str]:
        self.shell.stdin.write(command + f"\necho {MARK}$?\n")
        self.shell.stdin.flush()
        ln, out = _to_mark(self.lines, command, "the shell")
        self.status = int(ln[len(MARK):] or 0)
        return [self.to_doc(x) for x in out]

    def analyze(self, core: Path, commands: list[str]) -> list[list[str]]:
        """One `sosext analyze CORE` run of these commands; each command's output lines. An
        unknown command between two commands marks where one output ends (its one error line)."""
        argv = ["sosext", "analyze", str(core)]
        for c in commands:
            argv += ["-c", c, "-c", MARK]
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
                              env={**self.env, "SOSEXT_QUIET": "1"}, timeout=TIMEOUT)
        outs: list[list[str]] = [[]]
        for ln in self.to_doc(proc.stdout).splitlines():
            if MARK in ln:
                outs.append([])
            else:
                outs[-1].append(ln)
        if len(outs) <= len(commands):
            raise AssertionError(f"sosext analyze ended early:\n{proc.stdout[-3000:]}")
        return outs[:len(commands)]

    def debugger(self, kind: str, start: str | None, commands: list[str]) -> list[list[str]]:
        """One run of a debugger session; each command's output lines."""
        if kind == "sosext":
            return self.analyze(Path(start), commands)
        args = shlex.split(self.to_run(start)) if start else [kind]
        assert kind == "gdb", kind   # LLDB is typed into (class Lldb)
        assert drivers.GDB, "gdb is not installed"
        argv = [drivers.GDB, "-nx", "-batch", *args[1:], "-ex", "set pagination off", "-ex", "set confirm off",
                "-ex", f"echo {MARK}\\n"]
        for c in commands:
            if c not in ("quit", "q"):
                argv += ["-ex", c, "-ex", f"echo {MARK}\\n"]
        proc = subprocess.run(argv, input="", stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              cwd=REPO, env=self.env, timeout=TIMEOUT)
        parts = self.to_doc(proc.stdout).split(MARK + "\n")[1:]
        outs = [p.splitlines() for p in parts]
        typed = [c for c in commands if c not in ("quit", "q")]
        if len(outs) < len(typed):
            raise AssertionError(f"{kind} ended early:\n{proc.stdout[-3000:]}")
        res, k = [], 0
        for c in commands:
            if c in ("quit", "q"):
                res.append([])
            else:
                res.append(outs[k])
                k += 1
        return res


class Lldb:
    """LLDB typed into one command at a time, as a reader does: a command is sent with the
    addresses learnt from the outputs before it, so no block runs twice. Blocks on the same
    debuggee core share one (each then starts on thread 1), which saves LLDB's start and
    sosext's import per block."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        assert drivers.LLDB, "lldb-16 is not installed"
        self.proc = subprocess.Popen([drivers.LLDB, "--no-lldbinit", *args[1:]], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
                                     env=env, start_new_session=True)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.imported = False
        threading.Thread(target=_pump, args=(self.proc.stdout, self.lines), daemon=True).start()
        self.run("settings set auto-confirm true")

    def run(self, command: str) -> list[str]:
        """The command's output lines, without LLDB's echo of what was typed."""
        self.proc.stdin.write(f"{command}\nscript print('{MARK}')\n")
        self.proc.stdin.flush()
        _, out = _to_mark(self.lines, command, "lldb")
        return [ln for ln in out if not ln.startswith("(lldb) ") and not _LLDB_STOP.match(ln)]

    def close(self) -> None:
        # `quit` detaches from a live process; the kill is for an LLDB that does not end.
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


def _check(block: Block, step: Step, real: list[str], session: Session, ran: str | None = None) -> None:
    pairs = match(step.output, real)
    every = bool(os.environ.get("SOSEXT_DOCS_DUMP_EVERY"))
    if (pairs is None or every) and os.environ.get("SOSEXT_DOCS_DUMP"):
        # For whoever updates the docs (tests/docs_update.py): what this run printed, exactly,
        # one JSON line per mismatch, with the command as typed in this run (its addresses).
        with open(os.environ["SOSEXT_DOCS_DUMP"], "a") as f:
            f.write(json.dumps({"where": block.where, "command": step.command,
                                "ran": session.to_doc(ran) if ran else step.command, "real": real}) + "\n")
        if os.environ.get("SOSEXT_DOCS_DUMP_ALL"):   # collect every mismatch of a doc in one run
            learn(session.mapping, list(zip(step.output, real)))
            return
    if pairs is None:
        raise AssertionError(f"{block.where}: `{step.command}` printed what the doc does not show.\n"
                             f"--- doc shows:\n" + "\n".join(step.output) + "\n--- this run printed:\n" + "\n".join(real))
    learn(session.mapping, pairs)


def _run_console(block: Block, session: Session) -> None:
    for st in steps(block):
        out = session.sh(shorter_sleep(session.to_run(rebind(st.command, session.mapping))))
        assert session.status == 0, f"{block.where}: `{st.command}` failed ({session.status}):\n" + "\n".join(out)
        _check(block, st, out, session)


def _run_bash(block: Block, session: Session) -> None:
    for ln in block.text:
        cmd = ln.split("  #")[0].strip()
        if cmd and not cmd.startswith("#"):
            out = session.sh(shorter_sleep(session.to_run(cmd)))
            assert session.status == 0, f"{block.where}: `{cmd}` failed ({session.status}):\n" + "\n".join(out)


def _learn_bound(block: Block, session: Session, s: Step, out: list[str], offsets: dict[str, int]) -> None:
    """A hidden step's first printed address is what its doc address stands for in this run."""
    real = first_hex(out, s.on)
    assert real, f"{block.where}: `{s.command}` printed no address for {s.binds}:\n" + "\n".join(out)
    if s.binds in offsets:
        real = f"{int(real, 16) + offsets[s.binds]:x}"
    bind(session.mapping, s.binds, real)


def _type_into_lldb(block: Block, session: Session, start: str | None, typed: list[Step],
                    offsets: dict[str, int]) -> None:
    quits = any(s.command in ("quit", "q") for s in typed)
    # sosstatus shows what the session has built so far (graph, forest): the doc's is a fresh one.
    stateful = any(s.command.split()[:1] == ["sosstatus"] for s in typed)
    shared = bool(block.debuggee) and not quits and not stateful
    dbg = session.lldb(start or "lldb", keep=shared)
    try:
        if shared:
            if dbg.imported:   # the core's session has sosext: the block starts where a fresh one would
                typed = typed[1:]
                dbg.run("thread select 1")
            dbg.imported = True
        for s in typed:
            if s.command in ("quit", "q"):
                _check(block, s, [], session)
                continue
            cmd = session.to_run(rebind(s.command, session.mapping))
            out = [session.to_doc(x) for x in dbg.run(cmd)]
            if s.binds:
                _learn_bound(block, session, s, out, offsets)
            else:
                _check(block, s, out, session, cmd)
    finally:
        if not shared:
            dbg.close()


def _run_debugger(block: Block, session: Session) -> None:
    st = steps(block)
    start = st[0].command if st and st[0].prompt == "$ " else None
    typed = st[1:] if start else st
    offsets: dict[str, int] = {}   # `… +3` bindings: the printed address plus 3
    if block.debuggee:
        core, exe = session.debuggee_core(block.debuggee)
        start = f"{block.kind} " + (f"--core {core} {exe}" if block.kind == "lldb" else f"{exe} {core}")
        if block.kind == "sosext":
            start = str(core)
        hidden = []
        for addr, cmd in block.binds:
            plus = re.search(r"\s\+(\d+)$", cmd)   # `… +3`: the printed address plus 3 (an interior pointer)
            if plus:
                offsets[addr] = int(plus.group(1))
                cmd = cmd[:plus.start()]
            cmd, _, on = cmd.partition(" @")
            on = on.removeprefix(" ")
            hidden.append(Step(f"({block.kind}) ", cmd, ["..."], binds=addr, on=on or None))
        if block.kind == "lldb":
            hidden.insert(0, Step("(lldb) ", f"command script import {REPO / 'lldbinit' / 'sosext.py'}", ["..."]))
        typed = hidden + typed
    if block.kind == "lldb":
        _type_into_lldb(block, session, start, typed, offsets)
        return
    # A command may name an address printed by an earlier one: run, learn the addresses, run
    # again with them, until every command names only addresses of this run.
    for _ in range(len(typed) + 1):
        ran = [session.to_run(rebind(s.command, session.mapping)) for s in typed]
        outs = session.debugger(block.kind, start, ran)
        for s, cmd, out in zip(typed, ran, outs):
            if session.to_run(rebind(s.command, session.mapping)) != cmd:
                break   # an address learnt in this run: run again with it
            if s.binds:
                _learn_bound(block, session, s, out, offsets)
                continue
            _check(block, s, out, session, cmd)
        else:
            return
    raise AssertionError(f"{block.where}: addresses in the commands never matched an earlier output")


# docs/leak-hunting.md is played whole, every output checked the same way, by
# tests/test_tutorial.py (in a terminal, which is how a reader follows it): here it runs only
# for tests/docs_update.py, which takes its outputs from this test's pipes.
PLAYED_ELSEWHERE = set() if os.environ.get("SOSEXT_DOCS_DUMP") else {"leak-hunting.md"}


@pytest.mark.slow
@pytest.mark.parametrize("doc", [d for d in DOCS if _runnable(d) and d.name not in PLAYED_ELSEWHERE],
                         ids=lambda d: d.name)
def test_doc_runs(doc: Path, tmp_path: Path) -> None:
    if drivers.DOTNET_HOST is None:
        pytest.skip("dotnet is not on PATH: the docs' blocks build and run the bundled service")
    session = Session(tmp_path)
    failures: list[str] = []
    try:
        for b in _runnable(doc):
            try:
                {"console": _run_console, "bash": _run_bash}.get(b.kind, _run_debugger)(b, session)
            except AssertionError as e:
                if b.kind in ("console", "bash"):
                    raise      # later shell blocks build on this one
                failures.append(str(e))
    finally:
        session.close()
    assert not failures, "\n\n".join(failures)


# The comparison itself (no debuggee): what it masks, what it does not.

def test_match_masks_addresses_and_numbers_only() -> None:
    shown = ["7fddff959d68 1,200    48,000 LeakyService.CacheEntry", "Total 1,206 objects, 126,952 bytes"]
    real = ["7f3e87729d68 1,050 42,000 LeakyService.CacheEntry", "Total 1,056 objects, 120,952 bytes"]
    assert match(shown, real) == list(zip(shown, real))
    assert match(shown, ["7f3e87729d68 1,050 42,000 LeakyService.CacheEntryX", real[1]]) is None
    assert match(shown, real + ["one line more"]) is None
    assert match(shown, real[:1]) is None
    assert match([], []) == [] and match([], ["anything"]) is None


def test_match_masks_an_os_thread_id_without_digits() -> None:
    """clrthreads' OSID can be all hex letters (a CI run's thread "aeb"); thread names stay words."""
    shown = ["   1    1     36ca 0000558A43B37480    20020 Preemptive  00007FE27D00CD48:00007FE27D00E430 "
             "0000558A43B11E60 -00001 Ukn "]
    real = ["   1    1      aeb 00005619AD660360    20020 Preemptive  00007F774100E630:00007F774100E720 "
            "00005619AD63AD40 -00001 Ukn "]
    assert match(shown, real) is not None
    assert match(["Thread 36ca: a"], ["Thread fde: a"]) is not None
    assert match(["   1 added"], ["   1 faced"]) is None
    # leaks' holder and a stress log row (two CI runs' threads "bbd" and "aed")
    assert match(["(strong handle); thread 4fd: Program.Main"], ["(strong handle); thread bbd: Program.Main"])
    assert match(["4780   0.044463912 `GC`GCROOTS` GC Root"], ["aed    0.063064444 `GC`GCROOTS` GC Root"])
    assert match(["the thread fade: stop"], ["the thread 4fd: stop"]) is not None
    assert match(["faded 0.5 x"], ["bead 0.5 x"]) is None  # words, not a row's thread id
    # dumpobj's thread-static values, one row per thread (a CI run's thread "bae")
    assert match(["        26cd:0", "        26c6:77"], ["        bae:0", "        ba8:77"]) is not None
    assert match(["    face:0"], ["    bead:0"]) is None  # only such a row


def test_match_masks_the_grammatical_number_of_a_count() -> None:
    assert match(["  ... 1 more group (-groups <n> shows more)"], ["  ... 5 more groups (-groups <n> shows more)"])
    assert match(["1 entry, 2 collections"], ["3 entries, 1 collection"])
    assert match(["1 more group"], ["2 more grapes"]) is None


def test_match_dots_stand_for_any_lines() -> None:
    shown = ["Statistics:", "...", "Total 3 objects"]
    assert match(shown, ["Statistics:", "Total 3 objects"]) is not None
    assert match(shown, ["Statistics:", "a", "b", "Total 9 objects"]) is not None
    assert match(shown, ["Statistics:", "a", "Total 9 objects", "c"]) is None


def test_addresses_learnt_from_output_rebind_commands() -> None:
    mapping: dict[str, str] = {}
    learn(mapping, [("7fddff959d68 1,200 LeakyService.CacheEntry", "7f3e87729d68 1,050 LeakyService.CacheEntry")])
    assert rebind("dumpheap -mt 7fddff959d68 -short", mapping) == "dumpheap -mt 7f3e87729d68 -short"
    assert rebind("dumpobj 0x7fddff959d68", mapping) == "dumpobj 0x7f3e87729d68"
    assert rebind("gcroot 7fd22500cb90", mapping) == "gcroot 7fd22500cb90"


def test_a_run_binding_replaces_an_address_learnt_in_another_block() -> None:
    # commands.md shows one Assembly address in a block on the heap debuggee and binds the same
    # doc address on the fields debuggee: dumpassembly must get the fields core's address.
    mapping: dict[str, str] = {}
    learn(mapping, [("Assembly: 000055ea24e6f810 [x.dll]", "Assembly: 000055e0a7510070 [x.dll]")])
    bind(mapping, "55ea24e6f810", "5569d107aed0")
    assert rebind("dumpassembly 55ea24e6f810", mapping) == "dumpassembly 5569d107aed0"


def test_tutorial_blocks_all_run() -> None:
    runnable = _runnable(REPO / "docs" / "leak-hunting.md")
    assert {b.kind for b in runnable} == {"console", "lldb", "gdb"}
