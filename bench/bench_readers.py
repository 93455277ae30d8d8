"""Reader benchmark: cold `dumpheap -stat` with the DAC reader and with the contracts reader.

    /usr/bin/python3 bench/bench_readers.py [--objects 20000000] [--runs 3] [--core CORE]

Writes a with-heap core of the test debuggee's `bigheap N mixed` scenario (or takes --core),
then runs, alternating the readers, whole cold CLI processes:

    python3 -m sosext analyze CORE --reader dac|contracts --no-index-cache -c "dumpheap -stat"

(runtime opened, heap model built, walk, statistics, text; no heap index read or written).
Per reader, the best of --runs by wall time: seconds, objects/s, peak anonymous memory
(RssAnon of the process and its children, sampled from /proc: without the core's
file-backed pages; the CLI forks a child that walks half of a large heap) and peak RSS
(wait4's ru_maxrss), each also per object; then the contracts/dac ratio and whether the
outputs are identical. Nothing is asserted (the machine may be shared: compare best-of-N,
alternating, and note the load).
"""
from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from bench_scale import PY, Run  # noqa: E402  (also puts tests/ on sys.path)

READERS = ("dac", "contracts")


def make_core(objects: int, where: Path) -> Path:
    from harness import Debuggee, build_debuggee
    with Debuggee("bigheap", str(objects), "mixed", dll=build_debuggee(), core_dir=where) as d:
        return d.write_core("heap", where / "bigheap.core", timeout=1800)


class ColdRun(Run):
    """A Run whose sampled peak anonymous memory adds the process's children's: the CLI forks
    one to walk half of a large core's heap (clr/parallel.py)."""

    def _sample(self, pid: int, done) -> None:  # type: ignore[no-untyped-def]
        while not done.is_set():
            try:
                with open(f"/proc/{pid}/task/{pid}/children") as f:
                    pids = [pid, *map(int, f.read().split())]
            except OSError:
                return
            total = 0
            for p in pids:
                try:
                    with open(f"/proc/{p}/status") as f:
                        total += next((int(line.split()[1]) * 1024 for line in f if line.startswith("RssAnon:")), 0)
                except OSError:
                    pass
            self.peak_anon = max(self.peak_anon, total)
            time.sleep(0.005)


def cold(core: Path, reader: str) -> Run:
    return ColdRun([PY, "-m", "sosext", "analyze", str(core), "--reader", reader, "--no-index-cache",
                "-c", "dumpheap -stat"], env={"SOSEXT_QUIET": "1", "SOSEXT_PROGRESS_INTERVAL": "1e9",
                                             "SOSEXT_READER": "", "SOSEXT_CLR_PATH": ""})


def objects_of(stat: str) -> int:
    """The object count of `dumpheap -stat`'s Total line."""
    m = re.search(r"^Total ([\d,]+) objects", stat, re.M)
    return int(m.group(1).replace(",", "")) if m else 0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--objects", type=int, default=20_000_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--core", type=Path, help="an existing core instead of a new bigheap core")
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="sosext-bench-readers-") as tmp:
        core = a.core or make_core(a.objects, Path(tmp))
        runs: dict[str, list[Run]] = {r: [] for r in READERS}
        for i in range(a.runs):
            for reader in READERS:
                r = cold(core, reader)
                runs[reader].append(r)
                print(f"run {i + 1} {reader:9} {r.wall:7.2f} s  cpu {r.cpu:7.2f} s  anon {r.peak_anon / 2**20:6.0f} MiB"
                      f"  rss {r.rss / 2**20:6.0f} MiB", flush=True)
        load = os.getloadavg()
        print(f"\n## cold dumpheap -stat, {core.name} ({core.stat().st_size / 2**20:,.0f} MiB), best of {a.runs}, "
              f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
        best = {reader: min(rs, key=lambda r: r.wall) for reader, rs in runs.items()}
        digest = {reader: {hashlib.sha256(r.text.encode()).hexdigest() for r in rs} for reader, rs in runs.items()}
        for reader, r in best.items():
            n = objects_of(r.text) or 1
            print(f"{reader:9} {r.wall:7.2f} s  {n / r.wall:12,.0f} objects/s  "
                  f"anon {r.peak_anon / 2**20:6.0f} MiB {r.peak_anon / n:5.1f} B/obj  "
                  f"rss {r.rss / 2**20:6.0f} MiB {r.rss / n:5.1f} B/obj  ({n:,} objects)")
        same = digest["dac"] == digest["contracts"] and len(digest["dac"]) == 1
        print(f"contracts/dac {best['contracts'].wall / best['dac'].wall:.3f}  "
              f"output {'identical' if same else 'DIFFERS'}")


if __name__ == "__main__":
    main()
