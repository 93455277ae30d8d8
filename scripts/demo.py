"""The demo behind ./demo.sh: a leaking service, two of its dumps, and what sosext shows.

Builds examples/LeakyService, starts it, makes it leak, writes a heap dump with
`sosext collect` (no .NET tools needed: the runtime's diagnostics socket), stops the
service, and runs `dumpheap -stat` on the dump inside LLDB.
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


def step(text: str) -> None:
    print(f"\n=== {text}", flush=True)


def main() -> int:
    WORK.mkdir(parents=True, exist_ok=True)
    step("Building the bundled leaking service (examples/LeakyService)")
    app = WORK / "app"
    subprocess.run(["dotnet", "build", "-c", "Release", "-o", str(app), "--nologo", "-v", "q",
                    str(ROOT / "examples" / "LeakyService")], check=True, stdout=subprocess.DEVNULL)
    step("Starting it and making its cache leak 2,000 entries of 10,000 bytes")
    proc = subprocess.Popen(["dotnet", str(app / "LeakyService.dll")], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        started = json.loads(proc.stdout.readline().split(" ", 1)[1])
        proc.stdin.write("leak 2000\n")
        proc.stdin.flush()
        leaked = json.loads(proc.stdout.readline().split(" ", 1)[1])
        print(f"pid {started['pid']}: {leaked['cacheEntries']:,} cache entries held")
        core = WORK / "leaky.core"
        core.unlink(missing_ok=True)
        step(f"sosext collect {started['pid']} -o {core}")
        subprocess.run([PY, "-m", "sosext", "collect", str(started["pid"]), "-o", str(core)], check=True, cwd=ROOT)
    finally:
        proc.kill()
        proc.wait()
    step("lldb-16 --core leaky.core dotnet  →  (lldb) dumpheap -stat")
    lldb = shutil.which("lldb-16") or "lldb"
    dotnet = os.path.realpath(shutil.which("dotnet"))
    script = (f"command script import {ROOT / 'lldbinit' / 'sosext.py'}\n"
              "dumpheap -stat\nquit\n")
    out = subprocess.run([lldb, "--no-lldbinit", "--core", str(core), dotnet], input=script,
                         text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT).stdout
    text = out.split("(lldb) dumpheap -stat", 1)[-1].split("(lldb) quit", 1)[0].strip("\n")
    print(text)
    step("Next: gcroot <address of a LeakyService.CacheEntry>, or see docs/leak-hunting.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
