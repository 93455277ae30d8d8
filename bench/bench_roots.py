"""Root-query benchmark: gcroot, dumpheap -live and objsize, cold and repeated, on big and deep heaps.

    /usr/bin/python3 bench/bench_roots.py [--objects 5000000] [--deep 1000000]

Two debuggees, each dumped with createdump and analyzed in the CLI, LLDB and GDB (one session
per host, so the second query of a kind reuses the index and graph the first one built):
* `bigheap N` (mixed layout): gcroot of a chained node, dumpheap -live -stat, each twice;
* `deeplist M`: one M-long linked list closed into a cycle — gcroot of its head (every node
  reaches it, so the backwards search visits all M), -live, objsize of the head; each twice.
Prints seconds per query and each process's peak RSS. Nothing is asserted.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_heap import GDB, LLDB, bench_cli, bench_debugger  # noqa: E402
from harness import Debuggee, build_debuggee  # noqa: E402


def run(title: str, scenario: list[str], pick) -> None:  # type: ignore[no-untyped-def]
    tmp = Path(tempfile.mkdtemp(prefix="sosext-bench-roots-"))
    try:
        with Debuggee(*scenario, dll=build_debuggee(), core_dir=tmp) as d:
            cmds, objects = pick(d.truth)
            core = d.write_core("heap", tmp / "heap.core")
            exe = str(d.executable)
        print(f"\n## {title}: {objects:,} objects of the test types")
        hosts = [("cli (core)", bench_cli(core, cmds))]
        if LLDB:
            hosts.append(("lldb (core)", bench_debugger("lldb", cmds, core=core, exe=exe)))
        if GDB:
            hosts.append(("gdb (core)", bench_debugger("gdb", cmds, core=core, exe=exe)))
        width = max(len(c) for c in cmds)
        print(f"{'query':<{width}} " + " ".join(f"{h:>12}" for h, _ in hosts))
        for i, c in enumerate(cmds):
            print(f"{c:<{width}} " + " ".join(f"{r['times'][i]:>10.3f} s" if i < len(r["times"]) else f"{'-':>12}"
                                                for _h, r in hosts))
        print(f"{'peak RSS':<{width}} " + " ".join(f"{r['rss'] / 2**20:>8.0f} MiB" for _h, r in hosts))
        for h, r in hosts:
            if r.get("errors"):
                print(f"  note: {h} printed {r['errors']} error lines")
        print(f"{'peak RSS per object':<{width}} " + " ".join(f"{r['rss'] / objects:>10.0f} B" for _h, r in hosts))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--objects", type=int, default=5_000_000)
    ap.add_argument("--deep", type=int, default=1_000_000)
    a = ap.parse_args()
    print(f"sosext root-query benchmark on {os.cpu_count()} cores, Python {sys.version.split()[0]}")

    def big(truth: dict):  # type: ignore[no-untyped-def]
        node = truth["objects"]["firstNode"]["address"]
        return (["dumpheap -stat", f"gcroot {node}", f"gcroot {node}", "dumpheap -live -stat",
                 "dumpheap -live -stat", "dumpheap -dead -stat"], truth["testTypeTotals"]["count"])

    def deep(truth: dict):  # type: ignore[no-untyped-def]
        t = truth["deepList"]
        return (["dumpheap -stat", f"gcroot {t['head']}", f"gcroot {t['head']}", "dumpheap -live -stat",
                 "dumpheap -live -stat", f"objsize -stat {t['head']}", f"objsize -stat {t['head']}"], t["length"])

    run(f"bigheap {a.objects:,} mixed", ["bigheap", str(a.objects), "mixed"], big)
    run(f"deeplist {a.deep:,} (one cycle)", ["deeplist", str(a.deep)], deep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
