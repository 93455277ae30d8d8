"""docs/leak-hunting.md, played as a new user would: typed into an interactive shell on a terminal.

tmux gives the shell a real pseudo-terminal (job control, a foreground process group, LLDB's and
GDB's line editors), so a step that would stop on SIGTTIN, wait for input or page its output
hangs here too. Only what the doc says is typed, in its order (a `sleep` a quarter as long): every
`$` line of its runnable console blocks, and its LLDB and GDB sessions (started by their
`$ lldb-16 …` / `$ gdb …` line); an address the doc shows is replaced by the one this run
printed on the matching line, as a reader copies theirs. The leak found must be the service's truth: its log names the
CacheEntry and worker MethodTables and counts its cache entries every tick.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

import drivers
from docblocks import REPO, Block, blocks, learn, match, rebind, shorter_sleep, steps

DOC = REPO / "docs" / "leak-hunting.md"
PROMPT = "DOCSHELL$ "
pytestmark = pytest.mark.slow


class Terminal:
    """An interactive bash in a tmux pane; type a line, wait for the next prompt, read what it printed."""

    def __init__(self, tmp: Path) -> None:
        self.sock = str(tmp / "tmux.sock")
        self.home = tmp / "home"
        self.home.mkdir()
        conf = tmp / "tmux.conf"
        conf.write_text("set -g history-limit 200000\n")
        real_home = os.path.expanduser("~")
        # The README's set-up as a user who is not root: `sosext` in ~/.local/bin, first on PATH.
        path = drivers.link_front_door(self.home)["PATH"]
        env = {"HOME": str(self.home), "PATH": path, "TERM": "xterm", "PS1": PROMPT,
               "DOTNET_CLI_HOME": real_home, "NUGET_PACKAGES": os.path.join(real_home, ".nuget", "packages"),
               "DOTNET_CLI_TELEMETRY_OPTOUT": "1", "DOTNET_NOLOGO": "1", "LANG": "C.UTF-8",
               "SOSEXT_INDEX_DIR": os.environ.get("SOSEXT_INDEX_DIR", str(tmp / "index"))}
        shell = "env -i " + " ".join(f"{k}='{v}'" for k, v in env.items()) + " bash --norc --noprofile -i"
        self._tmux("-f", str(conf), "new-session", "-d", "-s", "doc", "-x", "240", "-y", "50", "-c", str(REPO), shell)
        self.seen = 0
        self.wait_for(PROMPT.rstrip())

    def _tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-S", self.sock, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, check=True, timeout=30).stdout

    def screen(self) -> list[str]:
        return self._tmux("capture-pane", "-p", "-J", "-S", "-", "-E", "-", "-t", "doc").rstrip("\n").splitlines()

    def wait_for(self, prompt: str, timeout: float = 180) -> list[str]:
        """Lines printed since the last call, once the pane's last line is `prompt` again."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            lines = self.screen()
            if len(lines) > self.seen and lines[-1].rstrip() == prompt.rstrip():
                new = lines[self.seen:-1]
                self.seen = len(lines) - 1
                return new
            time.sleep(0.3)
        raise AssertionError(f"no {prompt!r} prompt within {timeout}s (a hang); screen ends:\n"
                             + "\n".join(self.screen()[-30:]))

    def type(self, line: str, prompt: str) -> list[str]:
        self._tmux("send-keys", "-t", "doc", "-l", line)
        self._tmux("send-keys", "-t", "doc", "Enter")
        time.sleep(0.2)
        out = self.wait_for(prompt)
        # The first line is the echo of what was typed.
        return out[1:] if out and out[0].endswith(line) else out

    def close(self) -> None:
        subprocess.run(["tmux", "-S", self.sock, "kill-server"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _cache_entry_count(output: list[str], mt: str) -> int:
    row = next(ln for ln in output if ln.split()[:1] == [mt] and ln.rstrip().endswith(" LeakyService.CacheEntry"))
    return int(row.split()[1].replace(",", ""))


def _ticks(log: Path) -> list[dict]:
    out = []
    for ln in log.read_text(errors="replace").splitlines():
        if ln.startswith("LEAKY "):
            out.append(json.loads(ln[6:]))
    return out


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (apt-get install tmux)")
def test_leak_hunting_in_a_terminal(tmp_path: Path) -> None:
    if drivers.DOTNET_HOST is None or drivers.LLDB is None or drivers.GDB is None:
        pytest.skip("the tutorial needs dotnet, lldb-16 and gdb")
    lk = tmp_path / "lk"
    to_run = lambda s: s.replace("/tmp/lk", str(lk)).replace("/path/to/sosext", str(REPO))
    to_doc = lambda s: s.replace(str(lk), "/tmp/lk").replace(str(REPO), "/path/to/sosext")
    term = Terminal(tmp_path)
    mapping: dict[str, str] = {}
    found: dict[str, list[str]] = {}     # host -> output of its dumpheap -stat
    log = lk / "service.log"
    service_pid = None
    collects: dict[str, tuple[int, int]] = {}   # core -> ticks logged before, after its collect
    try:
        for b in (b for b in blocks(DOC) if b.kind in ("console", "lldb", "gdb") and b.not_run is None):
            st = steps(b)
            prompt = PROMPT
            for s in st:
                typed = shorter_sleep(to_run(rebind(s.command, mapping)))
                if s.prompt == "$ " and b.kind in ("lldb", "gdb"):
                    prompt = "(lldb) " if b.kind == "lldb" else "(gdb) "
                    term.type(typed, prompt)
                    continue
                if s.command.strip() in ("quit", "q"):
                    out = term.type(typed, PROMPT)
                    prompt = PROMPT
                    continue
                core = re.search(r"collect \$pid -o (\S+)", s.command)
                before = len(_ticks(log)) if core else 0
                # Job-control notices ("[1] 8766", "[1]+  Killed …") are the terminal's, not the command's.
                raw = term.type(typed, prompt)
                stopped = [x for x in raw if re.match(r"\[\d+\][+-]? +Stopped", x)]
                assert not stopped, f"{b.where}: a job the doc started was stopped by the terminal: {stopped}"
                out = [to_doc(x) for x in raw if not re.match(r"\[\d+\][+-]? ", x)]
                # On a terminal the hunt's commands end with a "Next: …" hint (not in a pipe, so the
                # doc, checked by test_docs through pipes, does not show it).
                # The hint may wrap on the terminal: drop from its first line to the end.
                hint = [i for i, x in enumerate(out) if x.startswith("Next: ")]
                if hint:
                    del out[hint[-1]:]
                while out and not out[-1].strip():
                    out.pop()
                # ... and the first command in a debugger names the runtime once.
                out = [x for x in out if not x.startswith("sosext: .NET runtime ")]
                if core:
                    collects[core.group(1)] = (before, len(_ticks(log)))
                assert not [x for x in out if x.startswith("error:")], f"{b.where}: `{typed}`:\n" + "\n".join(out)
                pairs = match(s.output, out)
                assert pairs is not None, (f"{b.where}: `{s.command}` printed what the doc does not show\n--- doc:\n"
                                           + "\n".join(s.output) + "\n--- terminal:\n" + "\n".join(out))
                learn(mapping, pairs)
                if service_pid is None and log.exists() and _ticks(log):
                    service_pid = _ticks(log)[0]["pid"]
                if s.command.startswith("sosext leaks") and "after.core" in s.command:
                    found["leaks"] = out
                if "dumpheap -stat" in s.command and "after.core" in (s.command + b.text[0]):
                    found[b.kind if b.kind != "console" else "cli"] = out
        ticks = _ticks(log)
        truth = ticks[0]
        leaks = found.pop("leaks")
        assert set(found) == {"lldb", "gdb", "cli"}, f"the doc's dumpheap -stat ran in {sorted(found)}"
        lo, hi = collects["/tmp/lk/after.core"]
        # The dump was taken between these log lines: its count is one the service logged then.
        possible = {t["cacheEntries"] for t in ticks[max(lo - 1, 0):hi]}
        for host, out in found.items():
            mt = truth["cacheEntryMT"].removeprefix("0x")
            count = _cache_entry_count(out, mt)
            assert count in possible, f"{host}: {count} CacheEntry objects; the service logged {sorted(possible)} around the dump"
            assert any(ln.split()[:1] == [truth["workerMT"].removeprefix("0x")] and ln.endswith("LeakyService.CacheWarmupWorker")
                       for ln in out), f"{host}: the worker's MethodTable {truth['workerMT']} is not in:\n" + "\n".join(out)
        # The payloads are held as the source says: one per cache entry, by the static s_worker.
        count = _cache_entry_count(found["cli"], truth["cacheEntryMT"].removeprefix("0x"))
        held = f"  {count:,} objects, "
        assert any(ln.startswith(held) and "held by static LeakyService.Program.s_worker" in ln for ln in leaks), \
            f"leaks does not show {count:,} payloads held by s_worker:\n" + "\n".join(leaks)
    finally:
        term.close()
        if service_pid is not None:
            try:
                os.kill(service_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
