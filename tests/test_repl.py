"""The analyzer's prompt as a person uses it: typed commands, Tab completion, help, history, quit."""
from __future__ import annotations

import os
import pty
import re
import time

import pytest

import drivers
from harness import Debuggee, build_debuggee, dotnet_path

pytestmark = pytest.mark.slow


def test_prompt_completion_help_and_history(tmp_path) -> None:
    if dotnet_path() is None:
        pytest.skip("dotnet is not on PATH: no debuggee can be built")
    with Debuggee("heap", dll=build_debuggee(), core_dir=tmp_path) as d:
        core = d.write_core("heap", tmp_path / "heap.core")
        mt = d.truth["types"]["SosextDebuggee.HeapItemD"]["mt"]
    home = tmp_path / "home"
    home.mkdir()
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(drivers.REPO)
        os.environ["HOME"] = str(home)
        os.execv(drivers.PYTHON, [drivers.PYTHON, "-m", "sosext", "analyze", str(core)])

    def until(token: str, timeout: float = 60) -> str:
        return drivers.read_pty_until(fd, token, timeout)

    try:
        banner = until("\n> ")
        assert f"sosext analyzer: core file {core}" in banner
        os.write(fd, f"dumphe\t -sta\t -mt {mt}\n".encode())  # completes to: dumpheap -stat -mt ... (dumph: dumphttp too)
        out = until("\n> ")
        assert "SosextDebuggee.HeapItemD" in out and "Total 7 objects" in out
        # -type completes from the names the last command read (only HeapItemD's): typed
        # as is, "HeapIt" would match every HeapItem type.
        os.write(fd, b"dumpheap -stat -type SosextDebuggee.HeapIt\t\n")
        out = until("\n> ")
        assert "dumpheap -stat -type SosextDebuggee.HeapItemD" in out, out  # the echo of the completed line
        plain = re.sub(r"\x1b\[[0-9;]*m", "", out)  # the prompt colours a terminal's output
        assert f"Next: dumpheap -mt {int(str(mt), 16):x} lists the biggest type's objects" in plain  # a terminal
        os.write(fd, b"help gcroot\n")
        assert "gcroot [-nostacks]" in until("\n> ")
        os.write(fd, b"dumpheap -gen bogus\n")
        assert "error: Unknown generation: bogus." in until("\n> ")
        os.write(fd, b"quit\n")
        until("$", timeout=5)
    finally:
        for _ in range(50):  # a failed assertion leaves the prompt running: end it
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.1)
        else:
            os.kill(pid, 9)
            _, status = os.waitpid(pid, 0)
        os.close(fd)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    history = (home / ".sosext_history").read_text()
    assert f"dumpheap -stat -mt {mt}" in history and "help gcroot" in history
