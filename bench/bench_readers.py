"""Reader benchmark: cold `dumpheap -stat` with the DAC reader and with the contracts reader.

    /usr/bin/python3 bench/bench_readers.py [--objects 5000000] [--runs 3] [--core CORE]

Writes a with-heap core of the test debuggee's `bigheap N mixed` scenario (or takes --core),
then times, each in a fresh process and with no heap index cache, alternating the readers, a
cold `dumpheap -stat` (runtime opened, heap model built, walk, statistics, text):

* `dac`: the DAC reader;
* `contracts`: the contracts reader (`--reader contracts`), when it answers the command;
* `gc-half`: every GC, thread and handle answer from the contracts reader and the type answers
  from the DAC: what the contracts reader changes (segment and region discovery, allocation
  contexts), measured while the type-system half is not there.

Prints each run, the best of each, their ratio, and whether the outputs were identical.
Nothing is asserted (the machine may be shared: compare best-of-N, alternating).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

GC_HALF = ("gc_heap_data", "gc_heap_list", "gc_heap_details", "gc_heap_static_data", "heap_segment_data",
           "number_generations", "generation_table", "finalization_fill_pointers", "global_allocation_context",
           "gc_dynamic_adaptation_mode", "oom_data", "useful_globals", "thread_store_data", "thread_data",
           "threads", "handles")

CHILD = r"""
import hashlib, sys, time
t0 = time.perf_counter()
sys.path.insert(0, sys.argv[3])
from sosext.cli import _session_for_core
from sosext.clr.runtime import set_reader
from sosext.errors import SosError
from sosext.hosts.common import execute
mode = sys.argv[2]
set_reader("contracts" if mode == "contracts" else "dac")
session = _session_for_core(sys.argv[1])
rt = session.runtime()
if mode == "gc-half":
    from sosext.contracts.reader import ContractReader
    half = set(sys.argv[4].split(","))

    class Split:
        name = "dac"

        def __init__(self, dac, contracts):
            self.dac, self.contracts = dac, contracts

        def __getattr__(self, name):
            return getattr(self.contracts if name in half else self.dac, name)
    rt.reader = Split(rt.reader, ContractReader(rt.target, rt.location.runtime))
out = []
execute(session, "dumpheap", "-stat", out.append, out.append, color=False)
text = "\n".join(out)
ok = not any(line.startswith("error") for line in out)
print(f"{time.perf_counter() - t0:.3f} {int(ok)} {hashlib.sha256(text.encode()).hexdigest()[:12]}")
"""


def make_core(objects: int, where: Path) -> Path:
    from harness import Debuggee, build_debuggee
    with Debuggee("bigheap", str(objects), "mixed", dll=build_debuggee(), core_dir=where) as d:
        return d.write_core("heap", where / "bigheap.core", timeout=900)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--objects", type=int, default=5_000_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--core", type=Path, help="an existing core instead of a new bigheap core")
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="sosext-bench-readers-") as tmp:
        core = a.core or make_core(a.objects, Path(tmp))
        env = {**os.environ, "SOSEXT_NO_INDEX_CACHE": "1", "SOSEXT_READER": "", "SOSEXT_CLR_PATH": ""}
        results: dict[str, list[tuple[float, bool, str]]] = {"dac": [], "contracts": [], "gc-half": []}
        for i in range(a.runs):
            for mode in results:
                done = subprocess.run(["/usr/bin/python3", "-c", CHILD, str(core), mode, str(ROOT), ",".join(GC_HALF)],
                                      capture_output=True, text=True, env=env, cwd=ROOT)
                seconds, ok, digest = done.stdout.split()[-3:]
                results[mode].append((float(seconds), ok == "1", digest))
                print(f"run {i + 1} {mode:9} {float(seconds):.3f} s {'ok' if ok == '1' else 'error'} {digest}",
                      flush=True)
        best = {m: min(s for s, ok, _ in r if ok) for m, r in results.items() if any(ok for _, ok, _ in r)}
        digests = {m: {d for _, ok, d in r if ok} for m, r in results.items()}
        print(f"\n## cold dumpheap -stat, {core.name} ({core.stat().st_size / 2**20:,.0f} MiB), best of {a.runs}")
        for mode, seconds in best.items():
            same = digests[mode] == digests["dac"]
            print(f"{mode:9} {seconds:.3f} s  x{seconds / best['dac']:.2f} of dac  output {'identical' if same else 'DIFFERS'}")
        for mode in results:
            if mode not in best:
                print(f"{mode:9} does not answer dumpheap -stat yet")


if __name__ == "__main__":
    main()
