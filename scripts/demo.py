"""The demo behind ./demo.sh: docs/leak-hunting.md's steps 1 to 5 on the bundled leaking service.

1. builds examples/LeakyService and starts it; 2. makes its cache leak, writes a heap dump with
`sosext collect` (no .NET tools needed: the runtime's diagnostics socket), lets it leak more and
writes a second dump; 3. `sosext diff`: which types grew; 4. `sosext leaks`: what holds them;
5. LLDB on the second dump: `dumpheap -stat -type LeakyService` and `gcroot` of one leaked entry.
The service is stopped before the analysis; the dumps stay in the work directory.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORK = Path(os.environ.get("SOSEXT_WORK_DIR", ROOT / ".work")) / "demo"
PY = "/usr/bin/python3"
STEPS = (1, 2, 3, 4, 5)  # of docs/leak-hunting.md; README says which (tests/test_doc_consistency.py)
LEAK = 1000  # cache entries of 10,000 bytes added before each dump

USAGE = f"""\
usage: ./demo.sh [-h]

Builds the bundled leaking service (examples/LeakyService) and plays docs/leak-hunting.md's
steps 1 to 5 on it: two heap dumps through its diagnostics socket ({LEAK:,} cache entries leaked
before each), the types that grew between them (sosext diff), what holds them (sosext leaks),
and the second dump in LLDB (dumpheap -stat, gcroot). Installs what is missing first
(scripts/setup.sh). The dumps go to $SOSEXT_WORK_DIR/demo (default .work/demo in the checkout).
"""


def step(n: int | None, text: str) -> None:
    print(f"\n=== {f'Step {n}: ' if n else ''}{text}", flush=True)


def sosext(*args: str) -> str:
    out = subprocess.run([PY, "-m", "sosext", *args], check=True, cwd=ROOT, text=True,
                         stdout=subprocess.PIPE).stdout
    print(out, end="", flush=True)
    return out


def main(argv: list[str]) -> int:
    if argv in (["-h"], ["--help"]):
        print(USAGE, end="")
        return 0
    if argv:
        sys.stderr.write(f"./demo.sh: unknown argument: {argv[0]} (./demo.sh takes none; --help says what it does)\n")
        return 2
    WORK.mkdir(parents=True, exist_ok=True)
    step(1, "building the bundled leaking service (examples/LeakyService) and starting it")
    app = WORK / "app"
    subprocess.run(["dotnet", "build", "-c", "Release", "-o", str(app), "--nologo", "-v", "q",
                    str(ROOT / "examples" / "LeakyService")], check=True, stdout=subprocess.DEVNULL)
    proc = subprocess.Popen(["dotnet", str(app / "LeakyService.dll")], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    cores = [WORK / "before.core", WORK / "after.core"]
    try:
        pid = _answer(proc)["pid"]
        print(f"pid {pid}")
        step(2, f"two heap dumps, {LEAK:,} more cache entries of 10,000 bytes leaked before each")
        for core in cores:
            proc.stdin.write(f"leak {LEAK}\n")
            proc.stdin.flush()
            held = _answer(proc)["cacheEntries"]
            print(f"the service holds {held:,} cache entries")
            core.unlink(missing_ok=True)
            print(f"$ sosext collect {pid} -o {core}", flush=True)
            sosext("collect", str(pid), "-o", str(core))
    finally:
        proc.kill()
        proc.wait()
    before, after = map(str, cores)
    step(3, "which types grew?")
    print(f"$ sosext diff {before} {after} -top 6 -holders 1", flush=True)
    sosext("diff", before, after, "-top", "6", "-holders", "1")
    step(4, "what holds the growth?")
    print(f"$ sosext leaks {before} {after} -top 1 -groups 1 -holders 1", flush=True)
    sosext("leaks", before, after, "-top", "1", "-groups", "1", "-holders", "1")
    step(5, "the second dump in LLDB: dumpheap -stat -type LeakyService, gcroot of one cache entry")
    lldb = shutil.which("lldb-16") or "lldb"
    dotnet = os.path.realpath(shutil.which("dotnet") or "dotnet")
    entry = _first_cache_entry(after)
    commands = ["dumpheap -stat -type LeakyService"] + ([f"gcroot {entry}"] if entry else [])
    script = f"command script import {ROOT / 'lldbinit' / 'sosext.py'}\n" + "\n".join(commands) + "\nquit\n"
    out = subprocess.run([lldb, "--no-lldbinit", "--core", after, dotnet], input=script, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         env={**os.environ, "SOSEXT_QUIET": "1"}).stdout
    shown = out.split(f"(lldb) {commands[0]}", 1)[-1].split("(lldb) quit", 1)[0]
    print(f"$ {lldb} --core {after} {dotnet}\n(lldb) command script import {ROOT / 'lldbinit' / 'sosext.py'}\n"
          f"(lldb) {commands[0]}{shown}".rstrip("\n"))
    step(None, "next: docs/leak-hunting.md explains each step and goes on (retained sizes, the report, GDB)")
    return 0


def _answer(proc: subprocess.Popen) -> dict:
    """The service's next "LEAKY {json}" line (createdump writes its own lines there too)."""
    for line in proc.stdout:
        if line.startswith("LEAKY "):
            return json.loads(line.split(" ", 1)[1])
    raise SystemExit("demo: the service ended early")


def _first_cache_entry(core: str) -> str | None:
    """A LeakyService.CacheEntry of the dump (by its MethodTable: -type matches the Dictionary too)."""
    def analyze(command: str) -> list[str]:
        return subprocess.run([PY, "-m", "sosext", "analyze", core, "-c", command], cwd=ROOT, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL).stdout.splitlines()
    mt = next((ln.split()[0] for ln in analyze("dumpheap -stat -type LeakyService.CacheEntry")
               if ln.endswith(" LeakyService.CacheEntry")), None)
    objects = analyze(f"dumpheap -mt {mt} -short") if mt else []
    return objects[0].strip() if objects else None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
