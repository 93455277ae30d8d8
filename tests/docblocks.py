"""Fenced blocks of the docs, and the comparison of the output they show with the output of a run.

The conventions (the docs' authors follow these; tests/test_docs.py enforces them):

Every fenced block names its kind after the opening fence:
  console   a shell session: `$ ` lines are typed, the lines after one are its output
  lldb/gdb  a debugger session: an optional `$ lldb-16 …` / `$ gdb …` line that starts the debugger,
            then `(lldb) ` / `(gdb) ` lines typed, each followed by its output
  sosext    a `sosext analyze` session: `> ` lines typed, each followed by its output
  bash      commands only (no output shown): each line is run, all must succeed
  text      not a session: a synopsis, an excerpt of output, a layout, an error line
  python    an API example (the scripts in examples/scripts are run by tests/test_api.py)
A session block that cannot run here carries the reason on the line before its fence:
  <!-- not-run: a template: MyService and core.1234 stand for your own -->
A debugger block about the test debuggee (tests/debuggees/SosextDebuggee) names its scenario
there instead; it runs on a heap core of that scenario. An address its first command names is
bound to this run's by a command run first (unseen): the first hex number it prints.
  <!-- run: debuggee heap -->
  <!-- run: debuggee fields | 7f06d5810830 = dumpheap -type SosextDebuggee.FieldsHolder -short -->
Words NAME=VALUE after the scenario set the debuggee's environment:
  <!-- run: debuggee stresslog DOTNET_StressLog=1 DOTNET_LogLevel=6 -->
`@ TEXT` after the command takes the first hex number of the first line holding TEXT instead,
`@last TEXT` the last one on that line (a field's value in dumpobj); a final ` +N` adds N to
the address found (an interior pointer).

Output shown is compared line by line after normalising both sides: hex numbers (0x…, or six
digits or more: addresses, MethodTables), decimal numbers (counts, sizes, pids, times) and
short hex (thread ids) all become N, the noun after a number its singular (1 group, 2 groups), runs of
blanks one blank, and trailing blank lines are dropped. Type names, command
names, messages and the number of lines must match. A line that is just `...` stands for any
number of lines (the docs cut long output there). Paths: /tmp/lk (the tutorial's directory) is
a private directory in the test, /path/to/sosext the checkout. The counts that matter (the
leak's) are checked against the service's own log by tests/test_tutorial.py.
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
KINDS = {"console", "lldb", "gdb", "sosext", "bash", "text", "python"}
SESSIONS = {"console", "lldb", "gdb", "sosext", "bash"}
PROMPTS = {"console": "$ ", "lldb": "(lldb) ", "gdb": "(gdb) ", "sosext": "> "}

_FENCE = re.compile(r"^```(\S*)\s*$")
_NOT_RUN = re.compile(r"^<!--\s*not-run:\s*(.*?)\s*-->\s*$")
_RUN_ON = re.compile(r"^<!--\s*run:\s*debuggee\s+(.*?)\s*-->\s*$")
_HEX = re.compile(r"(?<![\w.])(?:0x[0-9a-fA-F]+|(?=[0-9a-fA-F]*\d)[0-9a-fA-F]{6,})(?![\w])")
# After _HEX: signed grouped decimals (1,050), then standalone short hex or decimal tokens (thread
# ids such as 36ca, small counts), then digits left inside words (gen0, Int32, 2.236).
_NUM = re.compile(r"[+-]?(?:(?<![\w.])\d{1,3}(?:,\d{3})+(?![\w])|(?<![\w.])(?=[0-9a-fA-F]*\d)[0-9a-fA-F]+(?![\w])|\d+)")


@dataclass
class Block:
    doc: Path
    line: int          # 1-based line of the opening fence
    kind: str
    text: list[str]
    not_run: str | None = None
    debuggee: list[str] | None = None   # scenario and its arguments
    binds: list[tuple[str, str]] = field(default_factory=list)   # (doc address, command printing it)

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(REPO)}:{self.line}"


@dataclass
class Step:
    """One typed line and the output the doc shows after it."""
    prompt: str        # "$ ", "(lldb) ", "(gdb) "
    command: str
    output: list[str] = field(default_factory=list)
    binds: str | None = None   # a hidden step: the doc address its first printed address stands for
    on: str | None = None      # ... on the first line that holds this text


def blocks(doc: Path) -> list[Block]:
    lines = doc.read_text().splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        prev = next((lines[k] for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        nr, on = _NOT_RUN.match(prev), _RUN_ON.match(prev)
        scenario, binds = None, []
        if on:
            first, *rest = on.group(1).split(" | ")
            scenario = first.split()
            binds = [tuple(x.strip() for x in b.split("=", 1)) for b in rest]
        out.append(Block(doc, i + 1, m.group(1), lines[i + 1:j], nr.group(1) if nr else None, scenario, binds))
        i = j + 1
    return out


def steps(block: Block) -> list[Step]:
    """The typed lines of a session block with the output shown after each."""
    prompts = ("$ ", PROMPTS.get(block.kind, "$ "))
    out: list[Step] = []
    for ln in block.text:
        p = next((p for p in prompts if ln.startswith(p)), None)
        if p is not None:
            cmd = ln[len(p):]
            # A trailing shell comment explains the line to the reader; it is not typed output.
            out.append(Step(p, cmd))
        elif out:
            out[-1].output.append(ln)
        else:
            raise ValueError(f"{block.where}: output before the first prompt: {ln!r}")
    return out


_THREAD = re.compile(r"^(\s*Thread )[0-9a-fA-F]+:")  # gcroot's OS thread id, e.g. "fde": no digit
# leaks' holder ("…(strong handle); thread bbd: …") and a stress log row's thread ("aed  0.063 …").
_THREAD_IN = re.compile(r"(\bthread )[0-9a-f]+:")
# clrthreads -managedexception: "Found managed exception on thread 40e7".
_EXCEPTION_THREAD = re.compile(r"^(Found managed exception on thread )[0-9a-f]+$")
_STRESS_ROW = re.compile(r"^[0-9a-f]{1,8}(\s+\d+\.\d{9} )")
# clrthreads' OSID column (DBG, ID, OSID, ThreadOBJ): an OS thread id with no digit ("aeb").
_THREAD_ROW = re.compile(r"^(\s*(?:\d+|XXXX)\s+\d+\s+)[0-9a-f]+(\s+[0-9A-F]{16}\s)")
# dumpobj's thread-static rows ("        bae:0", under "Thread static values"): an OS thread id.
_THREAD_STATIC = re.compile(r"^( {8})[0-9a-f]{1,8}(:\S+)$")
# syncblk's owner (Index, SyncBlock, MonitorHeld, Recursion, Thread, OSID, DBG): an OS thread id.
_SYNCBLK_OWNER = re.compile(r"^(\s*\d+ [0-9A-F]{16}\s+\d+\s+\d+ [0-9A-F]{16} +)[0-9a-f]+(\s+\d+\s)")
# pstacks' thread list ("~~~~ 705,706,707"): OS thread ids, which _NUM would read as one grouped
# decimal when each has three digits, and not at all when one has no digit ("abc").
_PSTACKS_THREADS = re.compile(r"^(\s*~~~~ )[0-9a-f]+(?:,[0-9a-f]+)*$")
# A masked count's noun, in the singular: sosext's own sentences agree with the number ("1 more
# group", "2 more groups", "1 collection"), and the number is masked, so its grammar is too.
_COUNTED = re.compile(r"\bN ((?:more |growing )?)([A-Za-z]+?)(ies|s)?\b")


_SLEEP = re.compile(r"^sleep (\d+)$")


def shorter_sleep(command: str) -> str:
    """A doc's `sleep 20` between two dumps lets the service grow for its reader; the tests wait
    a quarter of it: the same growth, smaller (the suite's length: docs/design.md, Tests)."""
    m = _SLEEP.match(command.strip())
    return f"sleep {max(1, int(m.group(1)) // 4)}" if m else command


def normalise(line: str) -> str:
    # One mask for both: 266240 and 0x41000 are the same kind of thing as 4096 and 0x1000.
    line = _THREAD.sub(r"\1N:", line)
    line = _THREAD_ROW.sub(r"\1N\2", line)
    line = _THREAD_IN.sub(r"\1N:", line)
    line = _STRESS_ROW.sub(r"N\1", line)
    line = _THREAD_STATIC.sub(r"\1N\2", line)
    line = _PSTACKS_THREADS.sub(r"\1N", line)
    line = _SYNCBLK_OWNER.sub(r"\1N\2", line)
    line = _EXCEPTION_THREAD.sub(r"\1N", line)
    line = _HEX.sub("N", line)
    line = _NUM.sub("N", line)
    line = _COUNTED.sub(lambda m: f"N {m.group(1)}{m.group(2)}{'y' if m.group(3) == 'ies' else ''}", line)
    return " ".join(line.split())


def hex_tokens(line: str) -> list[str]:
    return [_key(t) for t in _HEX.findall(line)]


def _key(token: str) -> str:
    return token.lower().removeprefix("0x").lstrip("0") or "0"


def match(shown: list[str], real: list[str]) -> list[tuple[str, str]] | None:
    """Aligns the doc's lines with the run's; None if they differ. Pairs are (shown, real)."""
    shown, real = _trim(shown), _trim(real)   # a trailing blank line is not worth a mismatch
    want = tuple(None if s.strip() == "..." else normalise(s) for s in shown)
    got = tuple(normalise(r) for r in real)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 4 * (len(got) + len(want)) + 1000))

    @lru_cache(maxsize=None)
    def go(i: int, j: int) -> tuple[tuple[int, int], ...] | None:
        if i == len(want):
            return () if j == len(got) else None
        if want[i] is None:
            for k in range(j, len(got) + 1):   # lazily: the fewest lines first
                rest = go(i + 1, k)
                if rest is not None:
                    return rest
            return None
        if j < len(got) and want[i] == got[j]:
            rest = go(i + 1, j + 1)
            if rest is not None:
                return ((i, j),) + rest
        return None

    pairs = go(0, 0)
    go.cache_clear()
    return None if pairs is None else [(shown[i], real[j]) for i, j in pairs]


def _trim(lines: list[str]) -> list[str]:
    end = len(lines)
    while end and not lines[end - 1].strip():
        end -= 1
    return list(lines[:end])


def learn(mapping: dict[str, str], pairs: list[tuple[str, str]]) -> None:
    """Doc address -> this run's address, from lines that matched (same number of hex tokens)."""
    for shown, real in pairs:
        a, b = _HEX.findall(shown), _HEX.findall(real)
        if len(a) == len(b):
            for x, y in zip(a, b):
                mapping.setdefault(_key(x), y.lower().removeprefix("0x"))


def rebind(command: str, mapping: dict[str, str]) -> str:
    """The command with the doc's addresses replaced by this run's (those learnt so far)."""
    def sub(m: re.Match) -> str:
        t = m.group(0)
        real = mapping.get(_key(t))
        if real is None:
            return t
        return ("0x" if t.lower().startswith("0x") else "") + real
    return _HEX.sub(sub, command)


def first_hex(lines: list[str], on: str | None = None) -> str | None:
    last = on is not None and on.startswith("last ")
    if last:
        on = on[len("last "):]
    for ln in lines:
        if on is not None and on not in ln:
            continue
        found = _HEX.findall(ln)
        if found:
            return found[-1 if last else 0].lower().removeprefix("0x")
    return None


def bind(mapping: dict[str, str], doc_address: str, real: str) -> None:
    """A block's `run:` binding names the address its own debuggee printed, so it replaces what
    an earlier block (maybe another scenario's core) taught for the same doc address."""
    mapping[_key(doc_address)] = real


def unbound(command: str, mapping: dict[str, str]) -> list[str]:
    return [t for t in _HEX.findall(command) if _key(t) not in mapping]
