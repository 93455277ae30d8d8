"""Scale benchmark: sosext against ClrMD 4.2 and dotnet-dump (the real SOS) on the same big
cores, in one run.

    /usr/bin/python3 bench/bench_scale.py [--objects 5000000,20000000,50000000] [--repeat 3] [--no-lldb]
                                          [--shape bigheap|leakheap|both] [--no-dotnet-dump]
                                          [--only gcroot] [--keep-cores DIR | --core DIR/bigN.core]

Two heap shapes (``--shape``, default both), each dumped with createdump from the test
debuggee (which then exits, so it does not compete for memory):

* ``bigheap N mixed``: N small objects in 1,000-long chains, leaf arrays and byte arrays,
  interleaved; no cycles, so a search's bookkeeping stays small;
* ``leakheap N``: a leak's heap, ~N objects nearly all alive, held by a never-evicting LRU
  session cache (a Dictionary and a LinkedList whose nodes, sessions and items point back
  at each other: one strongly connected component of most of the heap), allocated in a
  random order of touches, so references run across the whole heap.

On that core, whole processes are timed, alternating sosext, ClrMD and dotnet-dump within
each round, best of ``--repeat`` rounds:

* cold `dumpheap -stat` (no index cache) in the CLI and as a whole LLDB run, against ClrMD
  enumerating every object and grouping by type;
* `dumpheap -stat` in a second process, with the index the first one cached on disk;
  dotnet-dump's `dumpheap -stat` beside them (installed, pinned, under the work directory);
* cold `gcroot -limit 1` of a deep object (bigheap: the last node of a 1,000-long chain;
  leakheap: an item's label in the session at the middle of the LRU list; both named by the
  debuggee) against ClrMD's first root path; cold full `gcroot` of it against ClrMD
  enumerating every root path and dotnet-dump's `gcroot`; later `gcroot`s of another object in the same session (typed
  at a human pace in the interactive session, each 1-2 s after the answer before it, and all at once in a -c
  list); `gcroot -shortest` typed 10 s after a default gcroot's answer (the graph built after the root forest answers it); and
  `gcroot` in a second process once the index, the graph and its reverse are cached.
* "cold" runs use --no-index-cache; "first" is a user's first run, which writes the index.

``--only gcroot`` runs the gcroot rows alone; ``--keep-cores DIR`` keeps each core (and the
debuggee's truth beside it, ``bigN.json``) so that ``--core`` can measure it again later.

Each process's peak RSS and CPU time (user + sys, as /usr/bin/time reports them) come from
wait4, which a loaded machine distorts less than wall time; its peak *anonymous* memory (RssAnon: without the
core's and the index file's pages, which are mapped files) is sampled every 5 ms from
/proc/PID/status. Printed: seconds, objects/s, MiB and bytes/object, and ClrMD/sosext and
dotnet-dump/sosext time ratios (above 1: sosext is faster), with the machine's load average
at the start and the end of each shape. Nothing is asserted.
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
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from harness import Debuggee, build_debuggee  # noqa: E402
from harness.debuggee import work_dir  # noqa: E402

PY = "/usr/bin/python3"
LLDB = shutil.which("lldb-16")


class Run:
    """One whole process: wall time, peak RSS, sampled peak anonymous memory, output."""

    def __init__(self, args: list[str], env: dict | None = None, typed: list[tuple[str, float]] | None = None) -> None:
        """``typed``: lines written to the process's stdin, each once the answer to the one
        before has been printed (its ``sosext-timing`` line) and then that many seconds of
        pause have passed (a user at the interactive prompt, reading)."""
        self.peak_anon = 0
        t0 = time.perf_counter()
        with tempfile.NamedTemporaryFile("w+") as out:
            p = subprocess.Popen(args, stdin=subprocess.PIPE if typed else subprocess.DEVNULL, stdout=out,
                                 stderr=subprocess.STDOUT, text=True, cwd=ROOT, env={**os.environ, **(env or {})})
            done = threading.Event()
            if typed:
                threading.Thread(target=self._type, args=(p, typed, out.name, done), daemon=True).start()
            sampler = threading.Thread(target=self._sample, args=(p.pid, done), daemon=True)
            sampler.start()
            _, status, usage = os.wait4(p.pid, 0)
            self.wall = time.perf_counter() - t0
            done.set()
            sampler.join()
            self.rss = usage.ru_maxrss * 1024
            self.cpu = usage.ru_utime + usage.ru_stime
            out.seek(0)
            self.text = out.read()
        if status != 0:
            raise RuntimeError(f"{args[:4]} failed ({status}): {self.text[-800:]}")

    @staticmethod
    def _type(p: subprocess.Popen, typed: list[tuple[str, float]], output: str, ended: threading.Event) -> None:
        # ``ended``, not p.poll(): poll reaps the process, and then the wait4 that measures it fails
        for k, (line, pause) in enumerate(typed):
            p.stdin.write(line + "\n")
            p.stdin.flush()
            while not ended.is_set() and Path(output).read_text(errors="replace").count("sosext-timing ") <= k:
                time.sleep(0.01)  # the answer is not printed yet
            time.sleep(pause)
        p.stdin.close()

    def _sample(self, pid: int, done: threading.Event) -> None:
        path = f"/proc/{pid}/status"
        while not done.is_set():
            try:
                with open(path) as f:
                    for line in f:
                        if line.startswith("RssAnon:"):
                            self.peak_anon = max(self.peak_anon, int(line.split()[1]) * 1024)
                            break
            except OSError:
                return
            time.sleep(0.005)


def sosext_cli(core: Path, commands: list[str], cache: bool, index_dir: Path) -> Run:
    args = [PY, "-m", "sosext", "analyze", str(core), "--timing", "--index-dir", str(index_dir)]
    if not cache:
        args.append("--no-index-cache")
    return Run(args + sum((["-c", c] for c in commands), []))


def sosext_typed(core: Path, typed: list[tuple[str, float]], index_dir: Path) -> Run:
    """The CLI's interactive session, commands typed with pauses."""
    return Run([PY, "-m", "sosext", "analyze", str(core), "--timing", "--index-dir", str(index_dir),
                "--no-index-cache"], typed=typed + [("quit", 0)])


def sosext_lldb(core: Path, exe: str, commands: list[str]) -> Run:
    args = [LLDB, "--no-lldbinit", "--batch", "--core", str(core), exe,
            "-o", f"command script import {ROOT / 'lldbinit' / 'sosext.py'}"]
    for c in commands:
        args += ["-o", c]
    return Run(args, {"SOSEXT_NO_INDEX_CACHE": "1"})


def clrmd_dll() -> Path:
    out = work_dir() / "clrmd-baseline-4.2"
    dll = out / "ClrmdBaseline.dll"
    if not dll.exists():
        subprocess.run(["dotnet", "build", "-c", "Release", "-o", str(out), "--nologo", "-v", "q",
                        str(ROOT / "bench" / "clrmd-baseline")], check=True, stdout=subprocess.DEVNULL)
    return dll


def clrmd(core: Path, *queries: str) -> tuple[Run, dict]:
    r = Run(["dotnet", str(clrmd_dll()), str(core), *queries])
    lines = [json.loads(ln) for ln in r.text.splitlines() if ln.startswith("{")]
    return r, {d["query"]: d for d in lines}


DOTNET_DUMP_VERSION = "10.0.750501"


def dotnet_dump_exe() -> Path | None:
    """dotnet-dump, pinned, where scripts/setup.sh --test puts it (installed here if missing)."""
    where = work_dir() / "tools" / f"dotnet-dump-{DOTNET_DUMP_VERSION}"
    exe = where / "dotnet-dump"
    if not exe.exists():
        subprocess.run(["dotnet", "tool", "install", "dotnet-dump", "--tool-path", str(where), "--version",
                        DOTNET_DUMP_VERSION], env={**os.environ, "DOTNET_CLI_TELEMETRY_OPTOUT": "1", "DOTNET_NOLOGO": "1"},
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return exe if exe.exists() else None


def dotnet_dump(exe: Path, core: Path, *commands: str) -> Run:
    return Run([str(exe), "analyze", str(core)] + sum((["-c", c] for c in commands), []) + ["-c", "exit"])


def load() -> str:
    return "load " + " ".join(f"{x:.2f}" for x in os.getloadavg())


_PAGE_CACHE = """
import mmap, sys
from sosext.targets.prewarm import pmd_mapped_whole
with open(sys.argv[1], "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
    folded, size = pmd_mapped_whole(mm)
    print(folded / max(1, size))
"""


def page_cache(core: Path) -> str:
    """How the page cache holds the core: the share in 2 MiB folios, which the search's random
    reads need (sosext's first gcroot process refolds a core held in 4 KiB pages:
    sosext/targets/prewarm.py). Measured by mapping it whole, without marking the mapping, in
    a process of its own: the processes this one starts inherit its peak RSS (ru_maxrss)."""
    out = subprocess.run([PY, "-c", _PAGE_CACHE, str(core)], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        return f"page cache: {100 * float(out.stdout):.0f}% of the core in 2 MiB folios"
    except ValueError:
        return "page cache: unknown"


def timings(r: Run) -> list[float]:
    return [float(m) for m in re.findall(r"^sosext-timing ([0-9.]+) ", r.text, re.M)]


def objects_in(r: Run) -> int:
    m = re.search(r"^Total ([0-9,]+) objects", r.text, re.M)
    return int(m.group(1).replace(",", "")) if m else 0


def best(runs: list[Run]) -> Run:
    return min(runs, key=lambda r: r.wall)


def make_core(n: int, tmp: Path, keep: Path | None, shape: str) -> tuple[Path, dict, str]:
    where = keep or tmp
    args = (str(n), "mixed") if shape == "bigheap" else (str(n),)
    name = "big" if shape == "bigheap" else "leak"
    d = Debuggee(shape, *args, dll=build_debuggee(), core_dir=where)
    d.start(timeout=3600)  # 100M objects take minutes to allocate
    with d:
        core = d.write_core("heap", where / f"{name}{n}.core", timeout=3600)
        core.with_suffix(".json").write_text(json.dumps({"truth": d.truth, "exe": str(d.executable)}))
        return core, d.truth, str(d.executable)


def kept_core(core: Path) -> tuple[Path, dict, str]:
    kept = json.loads(core.with_suffix(".json").read_text())
    return core, kept["truth"], kept["exe"]


def measure(n: int, repeat: int, lldb: bool, only: str, keep: Path | None, given: Path | None,
            shape: str = "bigheap", dd: Path | None = None) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="sosext-bench-scale-"))
    everything = only == "all"
    try:
        t0 = time.perf_counter()
        core, truth, exe = kept_core(given) if given else make_core(n, tmp, keep, shape)
        n = n or int(truth["requested"])
        shape = truth.get("scenario", shape)
        deep = truth["objects"]["deepNode"]["address"]
        other = truth["objects"]["firstLeaf"]["address"]
        print(f"\n## {shape} {n:,} objects{' (mixed)' if shape == 'bigheap' else ''}; core "
              f"{core.stat().st_size / 2**20:,.0f} MiB, made in {time.perf_counter() - t0:.0f} s; {load()}; "
              f"{page_cache(core)}")
        index_dir = tmp / "index"
        rows: dict[str, list] = {k: [] for k in ("stat", "stat_first", "stat_cached", "lldb", "limit1", "gcroot",
                                                  "later", "later_batch", "later_shortest", "gcroot_cached", "c_stat", "c_limit1", "c_gcroot",
                                                  "retained", "d_stat", "d_gcroot")}
        for _ in range(repeat):
            # Alternating: each round runs every sosext measure next to its ClrMD and dotnet-dump counterparts.
            rows["stat"].append(sosext_cli(core, ["dumpheap -stat"], False, index_dir))
            if everything or not rows["c_stat"]:
                rows["c_stat"].append(clrmd(core, "stat"))
            if dd is not None and everything:
                rows["d_stat"].append(dotnet_dump(dd, core, "dumpheap -stat"))
            shutil.rmtree(index_dir, ignore_errors=True)
            if everything:
                rows["stat_first"].append(sosext_cli(core, ["dumpheap -stat"], True, index_dir))  # writes the index
                rows["stat_cached"].append(sosext_cli(core, ["dumpheap -stat"], True, index_dir))
            if everything and lldb and LLDB:
                rows["lldb"].append(sosext_lldb(core, exe, ["dumpheap -stat"]))
            rows["limit1"].append(sosext_cli(core, [f"gcroot -limit 1 {deep}"], False, index_dir))
            rows["c_limit1"].append(clrmd(core, "gcroot1", deep))
            rows["gcroot"].append(sosext_cli(core, [f"gcroot {deep}"], False, index_dir))
            rows["c_gcroot"].append(clrmd(core, "gcroot", deep))
            if dd is not None:
                rows["d_gcroot"].append(dotnet_dump(dd, core, f"gcroot {deep}"))
            # Later gcroots in one session: typed at a human pace (2 s after the first answer
            # is printed, to read it; 1 s after each of the others) the root forest built in the
            # background, from where the first gcroot's search met its target, answers them;
            # typed all at once (a -c list), the second waits for that build.
            rows["later"].append(sosext_typed(core, [(f"gcroot {deep}", 2.0)] + [(f"gcroot {other}", 1.0)] * 4,
                                              index_dir))
            rows["later_batch"].append(sosext_cli(core, [f"gcroot {deep}"] + [f"gcroot {other}"] * 4, False,
                                                  index_dir))
            # -shortest after a default gcroot: answered by the graph the background builds
            # after the root forest, once both are done (10 s to read the first answer).
            rows["later_shortest"].append(sosext_typed(
                core, [(f"gcroot {deep}", 10.0), (f"gcroot -shortest {other}", 1.0), (f"gcroot -shortest {deep}", 1.0)],
                index_dir))
            if everything:
                sosext_cli(core, [f"gcroot {deep}"], True, index_dir)  # caches the graph and its reverse
                rows["gcroot_cached"].append(sosext_cli(core, [f"gcroot {deep}"], True, index_dir))
                # Dominators (issue 16): ClrMD has none to compare with; the walk and graph included.
                rows["retained"].append(sosext_cli(core, ["dumpheap -stat -retained"], False, index_dir))
        objects = objects_in(rows["stat"][0])
        c_objects = rows["c_stat"][0][1]["stat"]["objects"]

        def line(name: str, r: Run, extra: str = "") -> None:
            print(f"  {name:<34} {r.wall:8.3f} s {objects / r.wall / 1e6:7.2f}M obj/s "
                  f"anon {r.peak_anon / 2**20:7.0f} MiB {r.peak_anon / objects:6.1f} B/obj  "
                  f"RSS {r.rss / 2**20:7.0f} MiB {r.rss / objects:6.1f} B/obj  CPU {r.cpu:7.3f} s {extra}")

        print(f"  objects: sosext {objects:,}, ClrMD {c_objects:,}; best of {repeat}, whole processes")
        s, c = best(rows["stat"]), best([r for r, _ in rows["c_stat"]])
        line("sosext cli dumpheap -stat (cold)", s)
        line("ClrMD enumerate + group", c)
        print(f"  ratio cold -stat cli: {c.wall / s.wall:.2f} (CPU time: {c.cpu / s.cpu:.2f})")
        if rows["d_stat"]:
            d = best(rows["d_stat"])
            line("dotnet-dump dumpheap -stat", d)
            print(f"  ratio cold -stat cli to dotnet-dump: {d.wall / s.wall:.2f} (CPU time: {d.cpu / s.cpu:.2f})")
        if everything:
            line("sosext cli -stat, first (writes index)", best(rows["stat_first"]))
            line("sosext cli dumpheap -stat (cached)", best(rows["stat_cached"]))
        if rows["lldb"]:
            lw = best(rows["lldb"])
            line("sosext lldb whole run -stat (cold)", lw)
            print(f"  ratio cold -stat lldb: {c.wall / lw.wall:.2f}; lldb/cli time {lw.wall / s.wall:.2f}")
        s1, c1 = best(rows["limit1"]), best([r for r, _ in rows["c_limit1"]])
        line("sosext gcroot -limit 1 (cold)", s1)
        line("ClrMD first root path", c1)
        print(f"  ratio gcroot -limit 1: {c1.wall / s1.wall:.2f} (CPU time: {c1.cpu / s1.cpu:.2f})")
        g, cg = best(rows["gcroot"]), best([r for r, _ in rows["c_gcroot"]])
        later = min(rows["later"], key=lambda r: sum(timings(r)[1:]))
        line("sosext gcroot, all roots (cold)", g)
        batch = min(rows["later_batch"], key=lambda r: sum(timings(r)[1:]))
        print(f"  later gcroots in the session, typed 1-2 s after each answer (2nd..5th): "
              + ", ".join(f"{t * 1000:.0f} ms" for t in timings(later)[1:])
              + f"; the first there {timings(later)[0] * 1000:.0f} ms (recording the forest's prefix)")
        print("  later gcroots in the session, all at once (-c list; 2nd..5th): "
              + ", ".join(f"{t * 1000:.0f} ms" for t in timings(batch)[1:]))
        shortest = min(rows["later_shortest"], key=lambda r: sum(timings(r)[1:]))
        print("  later gcroot -shortest after a default gcroot, typed 10 s after its answer (2nd, 3rd): "
              + ", ".join(f"{t * 1000:.0f} ms" for t in timings(shortest)[1:]))
        line("ClrMD every root path", cg)
        print(f"  ratio full gcroot: {cg.wall / g.wall:.2f} (CPU time: {cg.cpu / g.cpu:.2f})")
        if rows["d_gcroot"]:
            dg = best(rows["d_gcroot"])
            line("dotnet-dump gcroot", dg)
            print(f"  ratio full gcroot to dotnet-dump: {dg.wall / g.wall:.2f} (CPU time: {dg.cpu / g.cpu:.2f})")
        if everything:
            line("sosext gcroot, second process (cached)", best(rows["gcroot_cached"]))
            r = best(rows["retained"])
            line("sosext dumpheap -stat -retained (cold)", r, "(walk, graph and dominators)")
        print(f"  {load()}; {page_cache(core)}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--objects", default="5000000,20000000,50000000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-lldb", action="store_true")
    ap.add_argument("--only", choices=("all", "gcroot"), default="all",
                    help="gcroot: the gcroot rows only (and one cold -stat to count the objects)")
    ap.add_argument("--keep-cores", type=Path, help="write the cores (and truths) here, and keep them")
    ap.add_argument("--core", type=Path, help="measure this kept core instead of making one")
    ap.add_argument("--shape", choices=("bigheap", "leakheap", "both"), default="both",
                    help="bigheap: chains, no cycles; leakheap: a leak's heap, one huge cycle (default both)")
    ap.add_argument("--no-dotnet-dump", action="store_true", help="leave dotnet-dump (the real SOS) out")
    a = ap.parse_args()
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed: bytecode cached
    from sosext.clr import kernels
    print(f"sosext scale benchmark: {os.cpu_count()} cores, kernels {kernels.mode()}, "
          f"Python {sys.version.split()[0]}")
    dd = None if a.no_dotnet_dump else dotnet_dump_exe()
    if dd is None and not a.no_dotnet_dump:
        print(f"dotnet-dump {DOTNET_DUMP_VERSION} could not be installed (NuGet unreachable?): left out")
    if a.core:
        measure(0, a.repeat, not a.no_lldb, a.only, None, a.core, dd=dd)
        return 0
    shapes = ("bigheap", "leakheap") if a.shape == "both" else (a.shape,)
    for n in (int(x) for x in a.objects.split(",")):
        for shape in shapes:
            measure(n, a.repeat, not a.no_lldb, a.only, a.keep_cores, None, shape, dd)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
