"""The real SOS as a second opinion: one batch of commands through `dotnet-dump analyze` and the
same batch through `sosext analyze`, on the same core, split per command and compared.

dotnet-dump (the pinned version below, installed by `scripts/setup.sh --test` under the work
directory) is driven on stdin, not with `-c`: a `-c` chain stops at the first command that fails
("Invalid parameter 0" ends the session), and bad input is part of what we compare. With its input
redirected dotnet-dump echoes each command as "> CMD" and ends its output with a line
<END_COMMAND_OUTPUT> (or <END_COMMAND_ERROR> when the command failed), which splits the session
exactly. A session costs seconds to tens of seconds of start-up, so callers batch. When SOS takes
dotnet-dump down in the middle of a batch (its dumpobj does on .NET 10 heap-only cores), that
command is marked `crashed` and the rest of the batch runs in a new session.

sosext runs the batch as `python3 -m sosext analyze CORE -c ... --separator MARK`.

Only trailing whitespace is normalised (each line's, and blank lines at the end of an output):
everything else must match or be a listed difference (tests/test_sos_parity.py).
"""
from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from harness import work_dir

REPO = Path(__file__).resolve().parents[1]
PYTHON = "/usr/bin/python3"
DOTNET_DUMP_VERSION = "10.0.750501"
MARK = "@@SOSEXT-SOSREF@@"
_END_OK = "<END_COMMAND_OUTPUT>"
_END_ERROR = "<END_COMMAND_ERROR>"
# No banner and no progress lines in sosext's output (progress would show after 2 s of a walk).
_QUIET = {"SOSEXT_QUIET": "1", "SOSEXT_PROGRESS_INTERVAL": "1e9"}

Status = Literal["ok", "error", "crashed"]


@dataclass(frozen=True, slots=True)
class Answer:
    """What one debugger printed for one command, and whether it called that a failure."""
    command: str
    text: str
    status: Status

    @property
    def normalised(self) -> str:
        return normalise(self.text)


def normalise(text: str) -> str:
    """Trailing whitespace off every line, and trailing blank lines off the end."""
    lines = [ln.rstrip() for ln in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def tool_dir() -> Path:
    """Where scripts/setup.sh --test installs dotnet-dump (SOSEXT_DOTNET_DUMP may name the binary)."""
    return work_dir() / "tools" / f"dotnet-dump-{DOTNET_DUMP_VERSION}"


def dotnet_dump() -> Path | None:
    """The pinned dotnet-dump, or None when it is not installed."""
    given = os.environ.get("SOSEXT_DOTNET_DUMP")
    path = Path(given) if given else tool_dir() / "dotnet-dump"
    return path if path.is_file() and os.access(path, os.X_OK) else None


def _env() -> dict[str, str]:
    return {**os.environ, "DOTNET_CLI_TELEMETRY_OPTOUT": "1", "DOTNET_NOLOGO": "1"}


def _sos_session(tool: Path, core: Path, commands: list[str], timeout: float) -> list[Answer]:
    """One dotnet-dump session; the answers of the commands it finished (fewer when it died)."""
    script = "".join(f"{c}\n" for c in commands) + "exit\n"
    proc = subprocess.run([str(tool), "analyze", str(core)], input=script, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout, env=_env())
    lines = proc.stdout.splitlines()
    # The banner ("Loading core dump …", "Ready to process …") ends with the first end marker.
    try:
        start = next(i for i, ln in enumerate(lines) if ln in (_END_OK, _END_ERROR)) + 1
    except StopIteration:
        raise AssertionError(f"dotnet-dump did not start on {core}:\n{proc.stdout[-4000:]}") from None
    answers: list[Answer] = []
    body: list[str] = []
    for ln in lines[start:]:
        # A command whose output has no final newline (dumpdelegate of a non-delegate) leaves
        # the marker at the end of its last line.
        marker = next((m for m in (_END_OK, _END_ERROR) if ln.endswith(m)), None)
        if marker is not None:
            if ln != marker:
                body.append(ln[:-len(marker)])
            command = commands[len(answers)]
            if body and body[0] == f"> {command}":
                body = body[1:]
            answers.append(Answer(command, "\n".join(body) + ("\n" if body else ""),
                                  "ok" if marker == _END_OK else "error"))
            body = []
            if len(answers) == len(commands):
                break
        else:
            body.append(ln)
    if len(answers) < len(commands) and proc.returncode == 0 and not body:
        raise AssertionError(f"dotnet-dump ended early without failing:\n{proc.stdout[-4000:]}")
    return answers


# Lines SOS prints only when a walk runs longer than a few seconds (ProgressReporter's scan of
# the heap, LiveObjectService's count every 15 s): they say how busy the machine was, not what
# the core holds, and sosext's progress lines are off here (_QUIET), so they are left out.
_PROGRESS = re.compile(r"^(Scanning heap: [\d,]+ MB / [\d,]+ MB \(\d+%\)\.\.\."
                       r"|Calculating live objects: [\d,]+ found( - [\d.]+% complete)?)$")


def _without_progress(text: str) -> str:
    return "".join(ln for ln in text.splitlines(keepends=True) if not _PROGRESS.match(ln.rstrip("\r\n")))


def run_sos(core: Path, commands: list[str], *, timeout: float = 900) -> list[Answer]:
    """Each command's answer from the real SOS (dotnet-dump) on `core`, in order."""
    tool = dotnet_dump()
    if tool is None:
        raise FileNotFoundError(f"dotnet-dump {DOTNET_DUMP_VERSION} is not installed in {tool_dir()} "
                                "(scripts/setup.sh --test installs it)")
    answers: list[Answer] = []
    said: set[str] = set()  # SOS's once-a-session notices printed so far
    while len(answers) < len(commands):
        rest = commands[len(answers):]
        got = _sos_session(tool, core, rest, timeout)
        answers += [Answer(a.command, _without_repeated_notices(_without_progress(a.text), said), a.status)
                    for a in got]
        if len(got) < len(rest):
            # The session died in the next command: record it, go on with a fresh session.
            answers.append(Answer(rest[len(got)], "", "crashed"))
    return answers


# Printed once per session, before its first root enumeration: a fresh session started after
# dotnet-dump died would print them again where one session (sosext's) does not.
_SESSION_NOTICES = ("Caching GC roots, this may take a while.\nSubsequent runs of this command will be faster.\n\n",
                    "Caching GC stack roots, this may take a while.\nSubsequent runs of this command will be faster.\n\n")


def _without_repeated_notices(text: str, said: set[str]) -> str:
    for notice in _SESSION_NOTICES:
        if notice in text:
            if notice in said:
                text = text.replace(notice, "", 1)
            said.add(notice)
    return text


def run_sosext(core: Path, commands: list[str], *, timeout: float = 900,
               env: dict[str, str] | None = None) -> list[Answer]:
    """Each command's answer from `sosext analyze` on `core`, in order."""
    args = [PYTHON, "-m", "sosext", "analyze", str(core), "--separator", MARK]
    for c in commands:
        args += ["-c", c]
    proc = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout, cwd=REPO, env={**_env(), **_QUIET, **(env or {})})
    parts = proc.stdout.split(MARK + "\n")
    if len(parts) != len(commands) + 1:
        raise AssertionError(f"sosext gave {len(parts) - 1} outputs for {len(commands)} commands:\n"
                             f"{proc.stdout[-4000:]}")
    return [Answer(c, t, "error" if any(ln.startswith("error:") for ln in t.splitlines()) else "ok")
            for c, t in zip(commands, parts[:-1])]


def run_both(core: Path, commands: list[str], **kw) -> list[tuple[Answer, Answer]]:  # type: ignore[no-untyped-def]
    """(SOS's answer, sosext's answer) for each command."""
    return list(zip(run_sos(core, commands, **kw), run_sosext(core, commands, **kw)))
