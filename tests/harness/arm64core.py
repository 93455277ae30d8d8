"""linux-arm64 cores of the C# debuggee, made on this x86-64 machine with qemu-user.

There is no arm64 machine here, yet sosext must open arm64 cores (docs/readers.md). So the
debuggee is published for linux-arm64 (self-contained: the arm64 runtime comes from NuGet),
run under `qemu-aarch64-static -L /` (the arm64 C runtime through Debian's multiarch), and
asked to die of SIGABRT once it printed its truth. qemu-user itself then writes the guest's
core, an AArch64 ELF core (the kernel does not: for it the process is x86-64 qemu).

qemu 7.2's core lacks two things a kernel's core has, which ClrMD, LLDB and sosext use to find
modules: an NT_FILE note (which file is mapped where) and the first page of each mapping that
starts with an ELF header (qemu leaves out whole executable ELF mappings). `make_kernel_like`
adds both: NT_FILE from the process's map, read from the host's /proc/<qemu pid>/maps while the
guest still lives (qemu-user maps the guest at the same addresses, guest_base 0; checked
against the core's PT_LOADs), and each header page from the file itself.

Built apps and cores are cached per source hash under $SOSEXT_WORK_DIR, like the other
debuggee builds: `arm64_core("heap")` publishes and dumps once, then returns the cached core.

The recipe (docs/readers.md, "arm64 cores"): the runtime's SIGABRT handler swallows the first
signal, so it is sent twice; `ulimit -c` applies to qemu's guest core; a directory named `core`
in the working directory stops the kernel from also writing qemu's own x86-64 core under this
machine's core_pattern=core. createdump cannot run under qemu-user (no ptrace).

Stdlib only, like the rest of the harness. `python3 tests/harness/arm64core.py [scenario
[command ...]]` makes (or finds) a core and prints where it is and how long each step took.
"""
from __future__ import annotations

import fcntl
import json
import os
import resource
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from harness.debuggee import (DEBUGGEE_SRC, READY_LINE, TRUTH_PREFIX, FATAL_PREFIX, REPO_ROOT,
                                  DebuggeeError, _QUIET_DOTNET_ENV, _GC_ENV_NAMES, _source_files,
                                  dotnet_path, source_hash, work_dir)
else:
    from .debuggee import (DEBUGGEE_SRC, READY_LINE, TRUTH_PREFIX, FATAL_PREFIX, REPO_ROOT,
                           DebuggeeError, _QUIET_DOTNET_ENV, _GC_ENV_NAMES, _source_files,
                           dotnet_path, source_hash, work_dir)

RID = "linux-arm64"
APP = "SosextDebuggee"
QEMU = "qemu-aarch64-static"
# What qemu needs to run the arm64 apphost and runtime with -L /: Debian multiarch paths.
ARM64_LIBS = ("/lib/ld-linux-aarch64.so.1", "/usr/lib/aarch64-linux-gnu/libstdc++.so.6",
              "/usr/lib/aarch64-linux-gnu/libgcc_s.so.1", "/usr/lib/aarch64-linux-gnu/libz.so.1")
SETUP = REPO_ROOT / "scripts" / "setup.sh"
# Bump when the core-making steps change: cached cores made the old way are then remade.
RECIPE_VERSION = 1


class Arm64Unavailable(RuntimeError):
    """This machine cannot make arm64 cores (tools missing and not installable); tests skip."""


def missing_tools() -> list[str]:
    """What is missing to run arm64 .NET apps here (empty when all is there)."""
    missing = [] if shutil.which(QEMU) else [QEMU]
    missing += [p for p in ARM64_LIBS if not os.path.exists(p)]
    return missing


def ensure_tools() -> None:
    """Installs the arm64 tools with `scripts/setup.sh --arm64` when they are missing and we
    are root (what CI and this machine are); raises Arm64Unavailable otherwise."""
    missing = missing_tools()
    if not missing:
        return
    if os.geteuid() != 0:
        raise Arm64Unavailable(f"arm64 cores need {', '.join(missing)}: run `sudo scripts/setup.sh --arm64`")
    proc = subprocess.run(["bash", str(SETUP), "--arm64"], stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    missing = missing_tools()
    if proc.returncode != 0 or missing:
        raise Arm64Unavailable(f"scripts/setup.sh --arm64 failed (exit {proc.returncode}); still missing "
                               f"{', '.join(missing) or 'nothing'}:\n{proc.stdout[-2000:]}")


@dataclass
class Arm64Core:
    """A cached arm64 core of one debuggee scenario and what it takes to open it."""

    scenario: str
    core: Path            # the kernel-like core (NT_FILE, ELF header pages)
    exe: Path             # the arm64 apphost (LLDB opens an AArch64 core only with it)
    out_dir: Path         # the publish folder: libcoreclr.so, libmscordaccore.so (arm64) ...
    truth: dict[str, Any]
    timings: dict[str, float] = field(default_factory=dict)  # seconds per step of the making

    @property
    def dac(self) -> Path:
        return self.out_dir / "libmscordaccore.so"


def _lock(path: Path):
    f = open(path, "w")
    fcntl.flock(f, fcntl.LOCK_EX)
    return f


def publish(src_dir: Path = DEBUGGEE_SRC) -> Path:
    """Publishes the debuggee for linux-arm64, self-contained, once per source hash; its apphost."""
    dotnet = dotnet_path()
    if dotnet is None:
        raise DebuggeeError("dotnet is not on PATH")
    root = work_dir() / "debuggees"
    root.mkdir(parents=True, exist_ok=True)
    dest = root / f"{RID}-{source_hash(src_dir)[:16]}"
    exe = dest / "out" / APP
    stamp = dest / "build.ok"
    with _lock(root / f".{dest.name}.lock"):
        if stamp.exists() and exe.exists():
            return exe
        shutil.rmtree(dest, ignore_errors=True)
        src = dest / "src"
        for p in _source_files(src_dir):
            target = src / p.relative_to(src_dir)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, target)
        # ReadyToRun off: every method is JIT-compiled, as in the x86-64 debuggee's runs.
        cmd = [dotnet, "publish", str(src / f"{APP}.csproj"), "-c", "Release", "-r", RID,
               "-p:SelfContained=true", "-p:UseAppHost=true", "-p:PublishReadyToRun=false",
               "-p:InvariantGlobalization=true", "--disable-build-servers", "-nodeReuse:false",
               "-nologo", "-o", str(dest / "out")]
        env = {**os.environ, **_QUIET_DOTNET_ENV, "MSBUILDDISABLENODEREUSE": "1"}
        started = time.monotonic()
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, env=env, text=True, timeout=900)
        (dest / "build.log").write_text(f"$ {' '.join(cmd)}\n{proc.stdout}")
        if proc.returncode != 0 or not exe.exists():
            raise DebuggeeError(f"arm64 publish failed (exit {proc.returncode}):\n{proc.stdout[-4000:]}")
        stamp.write_text(f"{time.monotonic() - started:.1f} s\n")
        return exe


def _guest_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not any(k in (f"DOTNET_{n}", f"COMPlus_{n}") for n in _GC_ENV_NAMES)}
    env.update(_QUIET_DOTNET_ENV)
    env.pop("QEMU_LD_PREFIX", None)
    return env


def _unlimited_core() -> None:
    # In the child before exec: qemu applies RLIMIT_CORE (size included) to the guest's core.
    resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))


def run_and_dump(exe: Path, scenario: str, run_dir: Path, timeout: float = 300,
                 commands: tuple[str, ...] = ()) -> tuple[dict, Path, str, dict]:
    """Runs ``scenario`` under qemu in ``run_dir``, waits for its truth, sends each of
    ``commands`` on stdin and keeps its one-line reply (``truth["replies"]``, in order), kills it
    with SIGABRT; (truth, qemu's raw core, the process map at the abort, timings)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "core").mkdir(exist_ok=True)  # no x86-64 core of qemu itself (core_pattern=core)
    for old in run_dir.glob("qemu_*.core"):
        old.unlink()
    timings: dict[str, float] = {}
    started = time.monotonic()
    err = open(run_dir / "stderr.log", "wb")
    proc = subprocess.Popen([QEMU, "-L", "/", str(exe), scenario], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=err, cwd=run_dir, env=_guest_env(),
                            preexec_fn=_unlimited_core, close_fds=True)
    lines: list[str] = []
    truth_line = ""

    def fail(what: str) -> DebuggeeError:
        tail = "\n".join(l[:400] for l in lines[-30:])
        return DebuggeeError(f"arm64 debuggee {scenario} under qemu {what}\n--- stdout ---\n{tail}\n"
                             f"--- stderr ---\n{(run_dir / 'stderr.log').read_text(errors='replace')[-3000:]}")

    timer = threading.Timer(timeout, proc.kill)  # a hung guest cannot hang the tests
    timer.start()
    try:
        assert proc.stdout is not None and proc.stdin is not None
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            lines.append(line)
            if line.startswith(TRUTH_PREFIX):
                truth_line = line[len(TRUTH_PREFIX):]
            elif line == READY_LINE:
                break
            elif line.startswith(FATAL_PREFIX):
                raise fail("reported a fatal error")
        else:
            raise fail(f"exited (code {proc.wait()}) before {READY_LINE}")
        timings["run to ready"] = time.monotonic() - started
        truth = json.loads(truth_line)
        # Settle as the x86-64 harness does: the main thread blocks reading stdin.
        proc.stdin.write(b"ping\n")
        proc.stdin.flush()
        while (line := proc.stdout.readline().decode().strip()) and line != "SOSEXT-PONG":
            pass
        truth["replies"] = []
        for command in commands:  # each reply is one line starting "SOSEXT-"
            proc.stdin.write(command.encode() + b"\n")
            proc.stdin.flush()
            while (line := proc.stdout.readline().decode()) and not line.startswith("SOSEXT-"):
                pass
            if not line:
                raise fail(f"ended before it answered {command!r}")
            truth["replies"].append(line.strip())
        time.sleep(0.5)
        dump_started = time.monotonic()
        # The runtime's handler takes the first SIGABRT (and the process lives on); the map is
        # read after it, so it is the map of the moment the core is written.
        os.kill(proc.pid, signal.SIGABRT)
        time.sleep(1.0)
        maps = Path(f"/proc/{proc.pid}/maps").read_text() if proc.poll() is None else ""
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGABRT)
        code = proc.wait(timeout=120)
        timings["abort and core"] = time.monotonic() - dump_started
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for s in (proc.stdin, proc.stdout):
            if s is not None:
                try:
                    s.close()
                except OSError:
                    pass
        err.close()
    cores = sorted(run_dir.glob("qemu_*.core"))
    if code != -signal.SIGABRT or len(cores) != 1 or not maps:
        raise fail(f"ended with status {code} and left {len(cores)} qemu core(s)"
                   + ("" if maps else " (it died at the first SIGABRT: no process map)"))
    return truth, cores[0], maps, timings


# --- making qemu's core kernel-like ------------------------------------------------------------

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_PHDR = struct.Struct("<IIQQQQQQ")
_NHDR = struct.Struct("<III")
PT_LOAD, PT_NOTE = 1, 4
NT_FILE = 0x46494C45
PAGE = 4096


@dataclass(frozen=True)
class _Mapping:
    start: int
    end: int
    offset: int
    path: str


def parse_maps(text: str) -> list[_Mapping]:
    """File-backed entries of a /proc/<pid>/maps text."""
    out = []
    for line in text.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) < 6 or not parts[5].startswith("/"):
            continue
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        out.append(_Mapping(lo, hi, int(parts[2], 16), parts[5]))
    return out


def _note(name: bytes, ntype: int, desc: bytes) -> bytes:
    name0 = name + b"\0"
    pad = lambda b: b + bytes(-len(b) % 4)  # noqa: E731
    return _NHDR.pack(len(name0), len(desc), ntype) + pad(name0) + pad(desc)


def nt_file_note(mappings: list[_Mapping]) -> bytes:
    """An NT_FILE note as the kernel writes it: count, page size, (start, end, page offset)
    triples, then the NUL-terminated paths."""
    desc = struct.pack("<QQ", len(mappings), PAGE)
    desc += b"".join(struct.pack("<QQQ", m.start, m.end, m.offset // PAGE) for m in mappings)
    desc += b"".join(m.path.encode("utf-8", "surrogateescape") + b"\0" for m in mappings)
    return _note(b"CORE", NT_FILE, desc)


def make_kernel_like(raw: Path, maps_text: str, out: Path, qemu: str | None = None) -> dict[str, int]:
    """Writes ``out``: ``raw`` (qemu's core) plus an NT_FILE note of the guest's file mappings
    and the ELF header page of each mapped ELF file that qemu left out. Returns counts."""
    qemu_path = os.path.realpath(qemu or shutil.which(QEMU) or QEMU)
    with open(raw, "rb") as f:
        ehdr = _EHDR.unpack(f.read(_EHDR.size))
        ident, e_type, e_machine, e_version, e_entry, e_phoff, e_shoff, e_flags, e_ehsize, \
            e_phentsize, e_phnum, e_shentsize, e_shnum, e_shstrndx = ehdr
        if ident[:4] != b"\x7fELF" or e_type != 4 or e_phentsize != _PHDR.size or e_phnum == 0xFFFF:
            raise DebuggeeError(f"{raw} is not a core qemu writes")
        f.seek(e_phoff)
        phdrs = [list(_PHDR.unpack(f.read(_PHDR.size))) for _ in range(e_phnum)]
        notes = b""
        for p in phdrs:
            if p[0] == PT_NOTE:
                f.seek(p[2])
                notes += f.read(p[5])
    loads = [p for p in phdrs if p[0] == PT_LOAD]
    starts = {p[3]: p for p in loads}

    def in_guest(m: _Mapping) -> bool:
        return any(p[3] <= m.start and m.end <= p[3] + p[6] for p in loads)

    # The guest's file mappings: those of the host map inside the core's segments (qemu's own
    # mappings and host threads lie elsewhere).
    mappings = [m for m in parse_maps(maps_text) if m.path != qemu_path and in_guest(m)]
    if not any(m.start in starts for m in mappings):
        raise DebuggeeError("the host's map of qemu does not match the core's segments (guest_base != 0?)")
    header_pages: dict[int, bytes] = {}
    for m in mappings:
        p = starts.get(m.start)
        if m.offset != 0 or p is None or p[5] != 0:
            continue
        try:
            with open(m.path, "rb") as f:
                page = f.read(PAGE)
        except OSError:
            continue
        if page[:4] == b"\x7fELF":
            header_pages[m.start] = page + bytes(PAGE - len(page))

    notes += nt_file_note(mappings)
    # Layout as the kernel's: headers, notes, then each segment's bytes from a page boundary.
    others = [p for p in phdrs if p[0] not in (PT_NOTE, PT_LOAD)]
    new_phdrs = [[PT_NOTE, 0, 0, 0, 0, len(notes), 0, 0]] + [list(p) for p in others] + [list(p) for p in loads]
    data_start = _EHDR.size + len(new_phdrs) * _PHDR.size
    new_phdrs[0][2] = data_start
    pos = (data_start + len(notes) + PAGE - 1) & ~(PAGE - 1)
    copies: list[tuple[int, int, int, bytes | None]] = []  # (new offset, old offset, size, bytes)
    for p in new_phdrs[1 + len(others):]:
        page = header_pages.get(p[3])
        if page is not None:
            copies.append((pos, 0, PAGE, page))
            p[2], p[5] = pos, min(PAGE, p[6])
        elif p[5]:
            copies.append((pos, p[2], p[5], None))
            p[2] = pos
        else:
            p[2] = pos
        pos += (p[5] + PAGE - 1) & ~(PAGE - 1)
    tmp = out.with_name(out.name + ".tmp")
    with open(raw, "rb") as src, open(tmp, "wb") as dst:
        os.fchmod(dst.fileno(), 0o600)
        dst.write(_EHDR.pack(ident, e_type, e_machine, e_version, e_entry, _EHDR.size, 0, e_flags,
                             e_ehsize, _PHDR.size, len(new_phdrs), 0, 0, 0))
        for p in new_phdrs:
            dst.write(_PHDR.pack(*p))
        dst.write(notes)
        for new_off, old_off, size, data in copies:
            dst.seek(new_off)
            if data is not None:
                dst.write(data)
                continue
            done = 0
            while done < size:
                n = os.copy_file_range(src.fileno(), dst.fileno(), size - done, old_off + done, new_off + done)
                if n <= 0:
                    raise DebuggeeError(f"{raw} ends inside a segment at {old_off + done:#x}")
                done += n
        dst.truncate(pos)
    os.replace(tmp, out)
    return {"file mappings": len(mappings), "header pages": len(header_pages), "segments": len(loads)}


# --- the cached core -----------------------------------------------------------------------------

def arm64_core(scenario: str = "heap", commands: tuple[str, ...] = (), attempt: int = 0) -> Arm64Core:
    """The arm64 core of ``scenario`` for the current debuggee sources, after ``commands``
    (``run_and_dump``): made once (publish, run under qemu, abort, fix up) and cached under
    $SOSEXT_WORK_DIR/arm64-cores/. ``attempt`` > 0: another core of the same, for a state a core
    catches only sometimes (a thread mid-suspension)."""
    ensure_tools()
    made = time.monotonic()
    exe = publish()
    publish_s = time.monotonic() - made
    root = work_dir() / "arm64-cores"
    root.mkdir(parents=True, exist_ok=True)
    name = "-".join((scenario,) + commands + ((f"try{attempt}",) if attempt else ()))
    dest = root / f"{source_hash()[:16]}-{name}-r{RECIPE_VERSION}"
    core, truth_file, stamp = dest / f"core.{scenario}", dest / "truth.json", dest / "core.ok"
    with _lock(root / f".{dest.name}.lock"):
        if not (stamp.exists() and core.exists() and truth_file.exists()):
            shutil.rmtree(dest, ignore_errors=True)
            truth, raw, maps, timings = run_and_dump(exe, scenario, dest / "run", commands=commands)
            fixed = time.monotonic()
            counts = make_kernel_like(raw, maps, core)
            timings["fix-up"] = time.monotonic() - fixed
            timings["publish (cached or not)"] = publish_s
            (dest / "maps.txt").write_text(maps)
            truth_file.write_text(json.dumps(truth))
            raw.unlink()
            stamp.write_text(json.dumps({"timings": timings, "counts": counts,
                                         "core bytes": os.path.getsize(core)}, indent=1))
        info = json.loads(stamp.read_text())
        return Arm64Core(scenario, core, exe, exe.parent, json.loads(truth_file.read_text()),
                         info.get("timings", {}))


# --- the second opinion: ClrMD under qemu ------------------------------------------------------

CLRMD_SRC = REPO_ROOT / "tests" / "clrmd-arm64"
CLRMD_APP = "ClrmdArm64"


@dataclass
class ClrmdOpinion:
    """What ClrMD 4.2, run as an arm64 program under qemu with the core's own arm64 DAC, reads."""

    types: dict[int, tuple[int, int, str]]   # MethodTable -> (count, total size, name)
    threads: dict[int, int]                  # OS thread id -> managed thread id
    frames: dict[int, list[tuple[str, str, int, int, int]]]  # OS thread id -> [(kind, name, ip, sp, MethodDesc)]
    roots: dict[int, list[tuple[int, int, bool]]]  # OS thread id -> [(slot address, object, interior)]
    seconds: float
    no_roots: set[int] = field(default_factory=set)  # threads whose roots were not asked for


def publish_clrmd() -> Path:
    """tests/clrmd-arm64 published for linux-arm64 (self-contained), once per source hash."""
    dotnet = dotnet_path()
    if dotnet is None:
        raise DebuggeeError("dotnet is not on PATH")
    root = work_dir() / "debuggees"
    root.mkdir(parents=True, exist_ok=True)
    dest = root / f"clrmd-{RID}-{source_hash(CLRMD_SRC)[:16]}"
    exe = dest / "out" / CLRMD_APP
    with _lock(root / f".{dest.name}.lock"):
        if (dest / "build.ok").exists() and exe.exists():
            return exe
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(CLRMD_SRC, dest / "src", ignore=shutil.ignore_patterns("bin", "obj"))
        cmd = [dotnet, "publish", str(dest / "src" / f"{CLRMD_APP}.csproj"), "-c", "Release", "-r", RID,
               "-p:SelfContained=true", "-p:UseAppHost=true", "--disable-build-servers",
               "-nodeReuse:false", "-nologo", "-o", str(dest / "out")]
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              env={**os.environ, **_QUIET_DOTNET_ENV, "MSBUILDDISABLENODEREUSE": "1"},
                              text=True, timeout=900)
        if proc.returncode != 0 or not exe.exists():
            raise DebuggeeError(f"ClrMD for linux-arm64 did not publish (its NuGet package?):\n{proc.stdout[-3000:]}")
        (dest / "build.ok").write_text("ok\n")
        return exe


def clrmd_opinion(core: Arm64Core, no_roots: tuple[int, ...] = ()) -> ClrmdOpinion:
    """ClrMD's reading of ``core`` (cached beside the core: a core never changes); the threads
    ``no_roots`` names get no stack roots (the arm64 DAC faults on a thread dispatching an
    exception, as the x86-64 one does, and ClrMD's process dies with it)."""
    exe = publish_clrmd()
    skip = ",".join(str(t) for t in sorted(no_roots))
    cache = core.core.parent / f"clrmd-{exe.parent.parent.name}{'-' + skip if skip else ''}.txt"
    started = time.monotonic()
    with _lock(core.core.parent / ".clrmd.lock"):
        if not cache.exists():
            proc = subprocess.run([QEMU, "-L", "/", str(exe), str(core.core), str(core.dac)] + ([skip] if skip else []),
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  env=_guest_env(), text=True, timeout=600)
            if proc.returncode != 0:
                raise DebuggeeError(f"ClrMD under qemu failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
            cache.write_text(proc.stdout)
    text = cache.read_text()
    types: dict[int, tuple[int, int, str]] = {}
    threads: dict[int, int] = {}
    frames: dict[int, list[tuple[str, str, int, int, int]]] = {}
    roots: dict[int, list[tuple[int, int, bool]]] = {}
    no_roots: set[int] = set()
    for line in text.splitlines():
        kind, *rest = line.split("\t")
        if kind == "type":
            types[int(rest[0], 16)] = (int(rest[1]), int(rest[2]), rest[3])
        elif kind == "thread":
            threads[int(rest[0])] = int(rest[1])
        elif kind == "root":
            roots.setdefault(int(rest[0]), []).append((int(rest[1], 16), int(rest[2], 16), rest[3] == "1"))
        elif kind == "noroots":
            no_roots.add(int(rest[0]))
        elif kind == "frame":
            frames.setdefault(int(rest[0]), []).append((rest[1], rest[2], *(int(v, 16) for v in rest[3:6])))
    return ClrmdOpinion(types, threads, frames, roots, time.monotonic() - started, no_roots)


if __name__ == "__main__":
    t0 = time.monotonic()
    names = [a for a in sys.argv[1:] if not a.startswith("--")]
    c = arm64_core(names[0] if names else "heap", tuple(names[1:]))  # scenario, then stdin commands
    print(f"core {c.core} ({os.path.getsize(c.core):,} bytes)\nexe  {c.exe}")
    print(json.dumps(c.timings, indent=1))
    print(f"total {time.monotonic() - t0:.1f} s")
    if "--clrmd" in sys.argv:
        t0 = time.monotonic()
        o = clrmd_opinion(c)
        print(f"ClrMD under qemu: {len(o.types)} types, {len(o.threads)} threads in {time.monotonic() - t0:.1f} s")
