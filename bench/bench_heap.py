"""Heap benchmark: cold dumpheap -stat, repeated queries and gcroot on a big heap, in every host.

    /usr/bin/python3 bench/bench_heap.py [--objects 5000000] [--layout runs|mixed|both] [--no-live]

Starts the test debuggee's `bigheap` scenario (N small objects of a few unique types; `runs`
allocates each type in one long run, `mixed` interleaves them), writes a with-heap core with
the runtime's createdump, then measures on that core, each in a fresh process:

* the floor: reading the heap's segments' bytes once (sosext's core reader, in bulk);
* the CLI (`sosext analyze`), LLDB and GDB: cold `dumpheap -stat`, then in the same session a
  `dumpheap -type` query, `gcroot` of an object, and `dumpheap -live -stat`;
* ClrMD (the library dotnet-dump's commands use; dotnet-dump itself is not installable here):
  the same cold statistics, a type query and gcroot, if its NuGet package restores;
* LLDB attached to the live process (cold `dumpheap -stat`), as a ratio to the core;
* the in-process heap index's and graph's bytes per object.

Each figure is printed; ratios compare numbers from this one run. Nothing is asserted.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from harness import Debuggee, build_debuggee  # noqa: E402
from harness.debuggee import work_dir  # noqa: E402

PY = "/usr/bin/python3"
LLDB = shutil.which("lldb-16")
GDB = shutil.which("gdb")
MARK = "@@BENCH@@"


def run_with_rusage(args: list[str], stdin: str | None = None) -> tuple[str, float, int]:
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out:
        p = subprocess.Popen(args, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                             stdout=out, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
        if stdin is not None:
            p.stdin.write(stdin)
            p.stdin.close()
        _, _, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        out.seek(0)
        return out.read(), wall, usage.ru_maxrss * 1024


def timestamps(text: str) -> list[float]:
    return [float(m) for m in re.findall(rf"{MARK} ([0-9.]+)", text)]


def queries(truth: dict) -> list[str]:
    node = truth["objects"]["firstNode"]["address"]
    return ["dumpheap -stat", "dumpheap -type SosextDebuggee.BigLeaf -stat", f"gcroot {node}", "dumpheap -live -stat"]


def bench_cli(core: Path, cmds: list[str]) -> dict:
    args = [PY, "-m", "sosext", "analyze", str(core), "--timing"] + sum((["-c", c] for c in cmds), [])
    out, wall, rss = run_with_rusage(args)
    times = [float(m) for m in re.findall(r"^sosext-timing ([0-9.]+) ", out, re.M)]
    return {"wall": wall, "rss": rss, "times": times}


def bench_debugger(kind: str, cmds: list[str], *, core: Path | None = None, pid: int | None = None,
                   exe: str = "") -> dict:
    if kind == "lldb":
        stamp = f"script print('{MARK}', __import__('time').time())"
        script = ["settings set auto-confirm true", f"command script import {ROOT / 'lldbinit' / 'sosext.py'}", stamp]
        for c in cmds:
            script += [c, stamp]
        script += (["process detach"] if pid else []) + ["quit"]
        args = [LLDB, "--no-lldbinit"] + (["-p", str(pid)] if pid else ["--core", str(core), exe])
        out, wall, rss = run_with_rusage(args, "\n".join(script) + "\n")
    else:
        stamp = f"python print('{MARK}', __import__('time').time())"
        args = [GDB, "-nx", "-q", "-batch", "-ex", "set pagination off", "-ex", f"source {ROOT / 'gdbinit' / 'sosext.py'}",
                "-ex", stamp]
        for c in cmds:
            args += ["-ex", c, "-ex", stamp]
        args[1:1] = ["-p", str(pid)] if pid else [exe, str(core)]
        out, wall, rss = run_with_rusage(args)
    ts = timestamps(out)
    return {"wall": wall, "rss": rss, "times": [b - a for a, b in zip(ts, ts[1:])], "errors": out.count("error:")}


def bench_clrmd(core: Path, node: str) -> dict | None:
    src = ROOT / "bench" / "clrmd-baseline"
    out_dir = work_dir() / "clrmd-baseline"
    dll = out_dir / "ClrmdBaseline.dll"
    if not dll.exists():
        r = subprocess.run(["dotnet", "build", "-c", "Release", "-o", str(out_dir), "--nologo", "-v", "q", str(src)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            print(f"  ClrMD baseline unavailable (its NuGet package did not restore): {r.stdout.strip()[-300:]}")
            return None
    out, wall, rss = run_with_rusage(["dotnet", str(dll), str(core), "stat", "type", "SosextDebuggee.BigLeaf",
                                      "gcroot", node, "stat"])
    lines = [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]
    by = {}
    for d in lines:
        by.setdefault(d["query"], []).append(d)
    return {"wall": wall, "rss": rss, "open": by["open"][0]["seconds"], "stat": by["stat"][0]["seconds"],
            "stat2": by["stat"][1]["seconds"], "type": by["type"][0]["seconds"], "gcroot": by["gcroot"][0]["seconds"],
            "objects": by["stat"][0]["objects"]}


def floor_read(core: Path) -> tuple[float, int]:
    """Seconds to read every heap segment's object range once, and the bytes read."""
    code = f"""
import sys, time
sys.path.insert(0, {str(ROOT)!r})
from sosext.targets.elfcore import CoreTarget
from sosext.clr.runtime import ClrRuntime
t = CoreTarget({str(core)!r}); h = ClrRuntime(t).heap
t0 = time.perf_counter(); n = 0
for s in h.segments:
    buf = bytearray(s.end - s.start)
    n += t.core.read_into(s.start, memoryview(buf))
print(time.perf_counter() - t0, n)
"""
    out = subprocess.run([PY, "-c", code], stdout=subprocess.PIPE, text=True, check=True).stdout.split()
    return float(out[0]), int(out[1])


def index_footprint(core: Path) -> dict:
    code = f"""
import sys, time, json
sys.path.insert(0, {str(ROOT)!r})
from sosext.targets.elfcore import CoreTarget
from sosext.clr.runtime import ClrRuntime
h = ClrRuntime(CoreTarget({str(core)!r})).heap
t0 = time.perf_counter(); ix = h.index(); t1 = time.perf_counter(); g = h.graph(); t2 = time.perf_counter()
idx = sum(a.nbytes for a in (ix.addresses, ix.type_ids, ix.sizes, ix.generations, ix.method_tables))
gr = g.offsets.nbytes + g.targets.nbytes
print(json.dumps({{"objects": len(ix), "walk": t1 - t0, "graph": t2 - t1, "index_bytes": idx, "graph_bytes": gr,
                  "edges": g.edge_count}}))
"""
    return json.loads(subprocess.run([PY, "-c", code], stdout=subprocess.PIPE, text=True, check=True).stdout)


def median_of(runs: list[dict]) -> dict:
    """Per-query median over repeated runs (this machine's timings vary a lot run to run);
    peak RSS is the largest seen."""
    import statistics
    n = min(len(r["times"]) for r in runs)
    return {"times": [statistics.median(r["times"][i] for r in runs) for i in range(n)],
            "rss": max(r["rss"] for r in runs), "wall": statistics.median(r["wall"] for r in runs),
            "spread": [(min(r["times"][i] for r in runs), max(r["times"][i] for r in runs)) for i in range(n)]}


def fmt_rate(objects: int, seconds: float) -> str:
    return f"{objects / seconds / 1e6:5.2f}M obj/s" if seconds > 0 else "-"


def run_layout(n: int, layout: str, live: bool, repeat: int = 3) -> None:
    print(f"\n## bigheap {n:,} objects, layout '{layout}'")
    dll = build_debuggee()
    tmp = Path(tempfile.mkdtemp(prefix="sosext-bench-"))
    args = [str(n)] + (["mixed"] if layout == "mixed" else [])
    with Debuggee("bigheap", *args, dll=dll, core_dir=tmp) as d:
        truth = d.truth
        core = d.write_core("heap", tmp / "big.core")
        exe = str(d.executable)
        cmds = queries(truth)
        live_lldb = median_of([bench_debugger("lldb", cmds[:1], pid=d.pid) for _ in range(repeat)]) \
            if live and LLDB else None
    try:
        fp = index_footprint(core)
        objects = fp["objects"]
        floor_s, floor_b = floor_read(core)
        print(f"heap: {objects:,} objects, {floor_b / 2**20:,.0f} MiB in segments, core {core.stat().st_size / 2**20:,.0f} MiB")
        print(f"floor: raw read of the segments {floor_s:.3f} s ({floor_b / floor_s / 2**20:,.0f} MiB/s)")
        print(f"index: {fp['index_bytes'] / objects:.1f} bytes/object; with the reference graph "
              f"{(fp['index_bytes'] + fp['graph_bytes']) / objects:.1f} bytes/object ({fp['edges']:,} references); "
              f"in-process walk {fp['walk']:.3f} s ({fmt_rate(objects, fp['walk'])}), graph {fp['graph']:.3f} s")
        rows = []
        cli = median_of([bench_cli(core, cmds) for _ in range(repeat)])
        rows.append(("cli (core)", cli))
        if LLDB:
            rows.append(("lldb (core)", median_of([bench_debugger("lldb", cmds, core=core, exe=exe)
                                                   for _ in range(repeat)])))
        if GDB:
            rows.append(("gdb (core)", median_of([bench_debugger("gdb", cmds, core=core, exe=exe)
                                                  for _ in range(repeat)])))
        print(f"{'host':<12} {'dumpheap -stat':>15} {'rate':>14} {'-type (2nd)':>12} {'gcroot':>8} {'-live -stat':>12}"
              f" {'2nd/cold':>9} {'peak RSS':>10} {'B/object':>9}")
        for name, r in rows:
            t = r["times"] + [float("nan")] * 4
            print(f"{name:<12} {t[0]:>13.3f} s {fmt_rate(objects, t[0]):>14} {t[1]:>10.3f} s {t[2]:>6.3f} s"
                  f" {t[3]:>10.3f} s {t[0] / t[1] if t[1] else 0:>8.1f}x {r['rss'] / 2**20:>7.0f} MiB"
                  f" {r['rss'] / objects:>9.0f}")
        print(f"(medians of {repeat} runs; cold dumpheap -stat ranged " + ", ".join(
            f"{name} {r['spread'][0][0]:.2f}-{r['spread'][0][1]:.2f} s" for name, r in rows) + ")")
        clrmds = [bench_clrmd(core, truth["objects"]["firstNode"]["address"]) for _ in range(repeat)]
        clrmd = None if clrmds[0] is None else {
            k: sorted(c[k] for c in clrmds)[len(clrmds) // 2] for k in clrmds[0]}
        if clrmd:
            print(f"{'clrmd':<12} {clrmd['stat']:>13.3f} s {fmt_rate(clrmd['objects'], clrmd['stat']):>14}"
                  f" {clrmd['type']:>10.3f} s {clrmd['gcroot']:>6.3f} s {'':>12} {clrmd['stat'] / clrmd['stat2']:>8.1f}x"
                  f" {clrmd['rss'] / 2**20:>7.0f} MiB {clrmd['rss'] / objects:>9.0f}"
                  f"   (open {clrmd['open']:.3f} s, process wall {clrmd['wall']:.2f} s)")
            print(f"ratios vs ClrMD (>1: sosext faster): cold stat cli {clrmd['stat'] / cli['times'][0]:.2f}, "
                  f"type query cli {clrmd['type'] / cli['times'][1]:.2f}, gcroot cli {clrmd['gcroot'] / cli['times'][2]:.2f}")
        if live_lldb and live_lldb["times"]:
            print(f"lldb live ranged {live_lldb['spread'][0][0]:.2f}-{live_lldb['spread'][0][1]:.2f} s")
            lldb_core = next(r for n_, r in rows if n_ == "lldb (core)")
            print(f"lldb live: cold dumpheap -stat {live_lldb['times'][0]:.3f} s ({fmt_rate(objects, live_lldb['times'][0])}),"
                  f" {live_lldb['times'][0] / lldb_core['times'][0]:.2f}x the core's time")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--objects", type=int, default=5_000_000)
    ap.add_argument("--layout", choices=["runs", "mixed", "both"], default="both")
    ap.add_argument("--no-live", action="store_true", help="skip the live LLDB measurement")
    ap.add_argument("--repeat", type=int, default=3, help="runs per host; medians are printed")
    a = ap.parse_args()
    # Measure what users get: Python's bytecode cache on (some environments turn it off).
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    print(f"sosext heap benchmark on {os.cpu_count()} cores, Python {sys.version.split()[0]}")
    for layout in (["runs", "mixed"] if a.layout == "both" else [a.layout]):
        run_layout(a.objects, layout, not a.no_live, a.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
