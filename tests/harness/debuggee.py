"""Build, run and dump the C# debuggee (tests/debuggees/SosextDebuggee).

The debuggee prints `SOSEXT-TRUTH <json>` (possibly more than once: the last one counts), then
`SOSEXT-READY`, then waits for commands on stdin. The truth comes from the runtime itself
(MethodTables, sizes, addresses, generations), never from sosext, so tests can assert exact equality.

Stdlib only: this runs under Debian's /usr/bin/python3 next to LLDB and GDB.
"""
from __future__ import annotations

import atexit
import contextlib
import ctypes
import fcntl
import glob
import hashlib
import json
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Literal

REPO_ROOT = Path(__file__).resolve().parents[2]
DEBUGGEE_SRC = REPO_ROOT / "tests" / "debuggees" / "SosextDebuggee"
DEBUGGEE_DLL = "SosextDebuggee.dll"
BPMD_APP_SRC = REPO_ROOT / "tests" / "debuggees" / "BpmdApp"
DEFAULT_TFM = "net10.0"

TRUTH_PREFIX = "SOSEXT-TRUTH "
READY_LINE = "SOSEXT-READY"
FATAL_PREFIX = "SOSEXT-FATAL"

GcKind = Literal["wks", "svr"]
GcFlavor = Literal["regions", "segments"]
CoreKind = Literal["full", "heap", "triage"]

# GC settings the harness owns: inherited values would silently change what a test runs under.
_GC_ENV_NAMES = ("gcServer", "GCName", "GCgen0size", "GCHeapCount", "GCDynamicAdaptationMode")
_QUIET_DOTNET_ENV = {
    "DOTNET_CLI_TELEMETRY_OPTOUT": "1",
    "DOTNET_NOLOGO": "1",
    "DOTNET_SKIP_FIRST_TIME_EXPERIENCE": "1",
}


class DebuggeeError(RuntimeError):
    """The debuggee could not be built, started, or dumped; the message carries its output."""


def dotnet_path() -> str | None:
    """The `dotnet` host on PATH, or None (tests skip then)."""
    return shutil.which("dotnet")


def work_dir() -> Path:
    """Scratch space for builds: $SOSEXT_WORK_DIR, else <repo>/.work (git-ignored)."""
    return Path(os.environ.get("SOSEXT_WORK_DIR") or REPO_ROOT / ".work")


def _source_files(src_dir: Path = DEBUGGEE_SRC) -> list[Path]:
    return sorted(
        p for p in src_dir.rglob("*")
        if p.is_file() and not ({"bin", "obj"} & set(p.relative_to(src_dir).parts))
    )


def source_hash(src_dir: Path = DEBUGGEE_SRC) -> str:
    """sha256 over the debuggee's source files (relative names and contents)."""
    h = hashlib.sha256()
    for p in _source_files(src_dir):
        h.update(p.relative_to(src_dir).as_posix().encode() + b"\0")
        h.update(p.read_bytes() + b"\0")
    return h.hexdigest()


def runtime_installed(tfm: str) -> bool:
    """Whether the machine's dotnet has a Microsoft.NETCore.App runtime for `tfm` (net8.0 -> 8.x)."""
    dotnet = dotnet_path()
    if dotnet is None:
        return False
    major = tfm.removeprefix("net").split(".")[0]
    out = subprocess.run([dotnet, "--list-runtimes"], stdout=subprocess.PIPE, text=True).stdout
    return any(ln.startswith(f"Microsoft.NETCore.App {major}.") for ln in out.splitlines())


def runtime_pack_env(tfm: str, dll: Path) -> dict[str, str]:
    """The environment that names the runtime pack published with a `tfm` debuggee when the
    machine has no such runtime: the pack lies in the work directory, which sosext does not
    trust for a DAC by itself (under CI's world-writable /tmp it is refused), so it is named,
    as a user would name it."""
    return {} if runtime_installed(tfm) else {"SOSEXT_CLR_PATH": str(dll.parent)}


@contextlib.contextmanager
def runtime_pack_named(env: dict[str, str], monkeypatch: Any) -> Iterator[None]:
    """With ``env`` (runtime_pack_env's) set for the CLI processes a test starts and, in this
    process, the DAC directory chosen as ``setclrpath`` chooses it (SOSEXT_CLR_PATH is read once,
    when sosext is imported, so setting it later would not count); the choice is undone after."""
    from sosext.clr.runtime import clr_path, set_clr_path
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    before = clr_path()
    if "SOSEXT_CLR_PATH" in env:
        set_clr_path(env["SOSEXT_CLR_PATH"])
    try:
        yield
    finally:
        set_clr_path(before)


def build_debuggee(tfm: str = DEFAULT_TFM) -> Path:
    """Builds the debuggee for `tfm` once per source hash; returns the path of its dll."""
    return _build_project(DEBUGGEE_SRC, "SosextDebuggee", tfm, "Release", f"{tfm}-")


def build_bpmd_app(tfm: str = DEFAULT_TFM) -> Path:
    """Builds tests/debuggees/BpmdApp (Debug, as SOS's SymbolTestApp) once per source hash; its dll."""
    return _build_project(BPMD_APP_SRC, "BpmdApp", tfm, "Debug", f"bpmdapp-{tfm}-")


def _build_project(src_dir: Path, name: str, tfm: str, configuration: str, prefix: str) -> Path:
    """Builds project ``name`` of ``src_dir`` for `tfm` once per source hash; returns its dll.

    Builds a private copy of the sources under <work>/debuggees/<tfm>-<hash>/ so that the source
    tree gets no bin/obj and builds for different target frameworks never share obj/. A file lock
    serialises parallel test processes; a finished build is marked by a stamp file.
    """
    dotnet = dotnet_path()
    if dotnet is None:
        raise DebuggeeError("dotnet is not on PATH")
    root = work_dir() / "debuggees"
    root.mkdir(parents=True, exist_ok=True)
    dest = root / f"{prefix}{source_hash(src_dir)[:16]}"
    dll = dest / "out" / f"{name}.dll"
    stamp = dest / "build.ok"
    with open(root / f".{dest.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists() and dll.exists():
            return dll
        shutil.rmtree(dest, ignore_errors=True)
        src = dest / "src"
        src.mkdir(parents=True)
        for p in _source_files(src_dir):
            target = src / p.relative_to(src_dir)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, target)
        project = str(src / f"{name}.csproj")
        # No MSBuild nodes or compiler servers left running after the tests.
        common = [f"-p:TargetFramework={tfm}", "--disable-build-servers", "-nodeReuse:false", "-nologo"]
        # Restore separately: `dotnet build`'s implicit restore drops a TargetFramework global property,
        # so a -p:TargetFramework other than the project's would find no assets for it.
        if runtime_installed(tfm):
            steps = [
                [dotnet, "restore", project, *common],
                [dotnet, "build", project, "--no-restore", "-c", configuration, "-o", str(dest / "out"), *common],
            ]
        else:
            # That runtime is not installed: publish self-contained, with the runtime pack (runtime,
            # DAC, createdump, libclrgc.so) restored from NuGet next to the app.
            sc = [*common, "-r", "linux-x64", "-p:SelfContained=true", "-p:UseAppHost=true"]
            steps = [
                [dotnet, "restore", project, *sc],
                [dotnet, "publish", project, "--no-restore", "-c", configuration, "-o", str(dest / "out"), *sc],
            ]
        env = {**os.environ, **_QUIET_DOTNET_ENV, "MSBUILDDISABLENODEREUSE": "1"}
        started = time.monotonic()
        log: list[str] = []
        for cmd in steps:
            proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, env=env, text=True, timeout=600)
            log.append(f"$ {' '.join(cmd)}\n{proc.stdout}")
            (dest / "build.log").write_text("\n".join(log))
            if proc.returncode != 0:
                raise DebuggeeError(f"debuggee build failed (exit {proc.returncode}):\n{log[-1]}")
        if not dll.exists():
            raise DebuggeeError(f"debuggee build made no {dll}:\n" + "\n".join(log))
        stamp.write_text(f"{time.monotonic() - started:.1f} s\n")
        return dll


# --- process bookkeeping ------------------------------------------------------------------------

_live_pids: set[int] = set()
_live_lock = threading.Lock()


def _kill_leftovers() -> None:
    """atexit: no debuggee outlives the test session, whatever the tests did."""
    with _live_lock:
        pids = list(_live_pids)
        _live_pids.clear()
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


atexit.register(_kill_leftovers)

_PR_SET_PDEATHSIG = 1
try:
    _libc: ctypes.CDLL | None = ctypes.CDLL(None, use_errno=True)
except OSError:
    _libc = None


def _child_setup() -> None:
    """In the child before exec: die with the parent even if it is SIGKILLed (atexit would not run)."""
    if _libc is not None:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def is_elf_core(path: Path) -> bool:
    """True if `path` starts with an ELF header of type ET_CORE."""
    with open(path, "rb") as f:
        header = f.read(18)
    return len(header) == 18 and header[:4] == b"\x7fELF" and int.from_bytes(header[16:18], "little") == 4


class Debuggee:
    """One run of the debuggee. Use as a context manager, or call start() and stop().

    gc="svr" sets DOTNET_gcServer=1 (and turns DATAS off unless datas=True); gc_flavor="segments"
    sets DOTNET_GCName=libclrgc.so. Cores and the stderr log go to `core_dir` (default: a temporary
    directory removed by stop()). Start it from the main thread: the child is tied to the starting
    thread's life with PR_SET_PDEATHSIG.

        with Debuggee("heap", gc="svr", gc_flavor="segments") as d:   # starts, waits for READY
            mt = d.truth["types"]["SosextDebuggee.HeapItemA"]["mt"]
            core = d.write_core("heap")
    """

    def __init__(self, scenario: str, *args: str | int, env: dict[str, str] | None = None,
                 gc: GcKind = "wks", gc_flavor: GcFlavor = "regions", tfm: str = DEFAULT_TFM,
                 datas: bool = False, core_dir: Path | None = None, dll: Path | None = None) -> None:
        if gc not in ("wks", "svr"):
            raise ValueError(f"gc must be 'wks' or 'svr', not {gc!r}")
        if gc_flavor not in ("regions", "segments"):
            raise ValueError(f"gc_flavor must be 'regions' or 'segments', not {gc_flavor!r}")
        self.scenario = scenario
        self.args = [str(a) for a in args]
        self.gc = gc
        self.gc_flavor = gc_flavor
        self.tfm = tfm
        self.datas = datas
        self.extra_env = dict(env or {})
        self._dll = dll
        self._own_dir = core_dir is None
        # Made on start() when not given, and then removed by stop().
        self.core_dir: Path | None = core_dir
        self.proc: subprocess.Popen[bytes] | None = None
        self.truth: dict[str, Any] = {}
        self.truth_line: str = ""
        self.lines: list[str] = []          # every stdout line, in order
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._reader: threading.Thread | None = None
        self._stderr_file: Any = None
        self.stderr_path: Path | None = None
        self._core_count = 0

    # -- environment ---------------------------------------------------------------------------

    def environment(self) -> dict[str, str]:
        """The child's environment: ours minus inherited GC knobs, plus the requested GC, plus `env`."""
        env = {k: v for k, v in os.environ.items()
               if not any(k in (f"DOTNET_{n}", f"COMPlus_{n}") for n in _GC_ENV_NAMES)}
        env.update(_QUIET_DOTNET_ENV)
        if self.gc == "svr":
            env["DOTNET_gcServer"] = "1"
            # DATAS (on by default for server GC since .NET 9) changes the heap count whenever it likes,
            # even after SOSEXT-READY, reusing memory that held dead objects: the truth would not hold.
            env["DOTNET_GCDynamicAdaptationMode"] = "1" if self.datas else "0"
        if self.gc_flavor == "segments":
            # The standalone GC shipped next to libcoreclr.so uses segments instead of regions.
            env["DOTNET_GCName"] = "libclrgc.so"
        env.update(self.extra_env)
        return env

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise DebuggeeError("debuggee not started")
        return self.proc.pid

    def start(self, timeout: float = 120) -> "Debuggee":
        """Launches the debuggee and waits for SOSEXT-READY; `.truth` is the last truth printed."""
        if self.proc is not None:
            return self  # idempotent: `with Debuggee(...) as d: d.start()` is fine
        dotnet = dotnet_path()
        if dotnet is None:
            raise DebuggeeError("dotnet is not on PATH")
        dll = self._dll or build_debuggee(self.tfm)
        if self.core_dir is None:
            self.core_dir = Path(tempfile.mkdtemp(prefix="sosext-debuggee-"))
        self.core_dir.mkdir(parents=True, exist_ok=True)
        self.stderr_path = self.core_dir / f"debuggee-{self.scenario}-{os.getpid()}-{id(self):x}.stderr"
        self._stderr_file = open(self.stderr_path, "wb")
        # A self-contained build (another runtime version) runs through its own apphost.
        apphost = dll.with_suffix("")
        self_contained = apphost.exists() and (dll.parent / "libcoreclr.so").exists()
        command = [str(apphost)] if self_contained else [dotnet, str(dll)]
        self.proc = subprocess.Popen(
            [*command, self.scenario, *self.args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr_file,
            env=self.environment(), cwd=self.core_dir, close_fds=True,
            # PDEATHSIG fires when the *thread* that forked exits: only use it from the main thread.
            preexec_fn=_child_setup if threading.current_thread() is threading.main_thread() else None,
        )
        with _live_lock:
            _live_pids.add(self.proc.pid)
        self._reader = threading.Thread(target=self._read_stdout, name=f"debuggee-{self.proc.pid}", daemon=True)
        self._reader.start()
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _read_stdout(self) -> None:
        # Keeps draining stdout for the debuggee's whole life, so it never blocks on a full pipe.
        assert self.proc is not None and self.proc.stdout is not None
        for raw in self.proc.stdout:
            self._queue.put(raw.decode("utf-8", "replace").rstrip("\r\n"))
        self._queue.put(None)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            line = self._next_line(deadline)
            if line is None:
                raise DebuggeeError(self._failure(f"exited (code {self.proc.wait()}) before {READY_LINE}"))
            if line.startswith(TRUTH_PREFIX):
                self.truth_line = line[len(TRUTH_PREFIX):]
            elif line == READY_LINE:
                break
            elif line.startswith(FATAL_PREFIX):
                # The debuggee exits right after; give stderr (the stack trace) a moment to land.
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
                raise DebuggeeError(self._failure("reported a fatal error"))
        if not self.truth_line:
            raise DebuggeeError(self._failure(f"printed {READY_LINE} without a truth line"))
        try:
            self.truth = json.loads(self.truth_line)
        except json.JSONDecodeError as e:
            raise DebuggeeError(self._failure(f"printed malformed truth JSON: {e}")) from None
        self._wait_reading_stdin()

    def _wait_reading_stdin(self, timeout: float = 5.0) -> None:
        """Waits (best effort) until the main thread blocks in read(0, …) after the ready line.

        Until then it may still be inside the console write of that line, and a live stack
        (pstacks, clrstack of the main thread) taken in that moment shows Write instead of
        ReadLine: the truth and the docs describe the process waiting for a command."""
        read_nr = {"x86_64": 0, "aarch64": 63}.get(os.uname().machine)
        if read_nr is None or self.proc is None:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with open(f"/proc/{self.proc.pid}/syscall") as f:
                    words = f.read().split()
            except OSError:
                return
            if len(words) > 1 and words[0] == str(read_nr) and _same_file(self.proc.pid, int(words[1], 16), 0):
                return
            time.sleep(0.01)

    def _next_line(self, deadline: float) -> str | None:
        """The next stdout line (also recorded in .lines); None at EOF; raises at the deadline."""
        remaining = deadline - time.monotonic()
        try:
            line = self._queue.get(timeout=max(remaining, 0))
        except queue.Empty:
            raise DebuggeeError(self._failure("timed out waiting for output")) from None
        if line is not None:
            self.lines.append(line)
        return line

    def _failure(self, what: str) -> str:
        out = "\n".join(l if len(l) < 400 else l[:400] + " ..." for l in self.lines[-50:])
        err = ""
        if self.stderr_path is not None and self.stderr_path.exists():
            err = self.stderr_path.read_text(errors="replace")[-4000:]
        return (f"debuggee {self.scenario} {' '.join(self.args)} (pid {self.proc.pid if self.proc else '-'}, "
                f"gc={self.gc}/{self.gc_flavor}, tfm={self.tfm}) {what}\n--- stdout ---\n{out}\n--- stderr ---\n{err}")

    def send(self, line: str) -> None:
        """Writes one command line to the debuggee's stdin."""
        if self.proc is None or self.proc.stdin is None:
            raise DebuggeeError("debuggee not started")
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def read_line(self, timeout: float = 30) -> str | None:
        """The next stdout line after the ones already consumed; None at EOF."""
        return self._next_line(time.monotonic() + timeout)

    def command(self, line: str, timeout: float = 30) -> str:
        """Sends a command and returns its first reply line (skipping SOSEXT-LOG lines)."""
        self.send(line)
        while True:
            reply = self.read_line(timeout)
            if reply is None:
                raise DebuggeeError(self._failure(f"exited while answering {line!r}"))
            if not reply.startswith("SOSEXT-LOG"):
                return reply

    @property
    def runtime_dir(self) -> Path:
        """Directory of the libcoreclr.so mapped into the process (from /proc/<pid>/maps)."""
        with open(f"/proc/{self.pid}/maps") as maps:
            for entry in maps:
                path = entry.split(maxsplit=5)[-1].strip()
                if path.endswith("/libcoreclr.so"):
                    return Path(path).parent
        raise DebuggeeError(f"libcoreclr.so is not mapped into pid {self.pid}")

    def write_core(self, kind: CoreKind = "full", path: Path | None = None, timeout: float = 300) -> Path:
        """Dumps the live debuggee with the runtime's own createdump (--full, --withheap or --triage:
        a triage dump holds threads, stacks and the runtime's own data, but no GC heap)."""
        if kind not in ("full", "heap", "triage"):
            raise ValueError(f"kind must be 'full', 'heap' or 'triage', not {kind!r}")
        if path is None:
            assert self.core_dir is not None
            self._core_count += 1
            path = self.core_dir / f"core.{self.scenario}.{kind}.{self.pid}.{self._core_count}"
        path = Path(path)
        # createdump expands %p, %e, %h, %t in the name.
        if "%" in str(path):
            raise ValueError(f"core path must not contain '%': {path}")
        createdump = self.runtime_dir / "createdump"
        cmd = [str(createdump), "-f", str(path), {"full": "--full", "heap": "--withheap", "triage": "--triage"}[kind], str(self.pid)]
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=timeout)
        if proc.returncode != 0:
            raise DebuggeeError(f"createdump failed (exit {proc.returncode}):\n$ {' '.join(cmd)}\n{proc.stdout}")
        if not path.exists() or not is_elf_core(path):
            raise DebuggeeError(f"createdump did not write an ELF core at {path}:\n{proc.stdout}")
        return path

    @property
    def executable(self) -> Path:
        """The process's executable (the dotnet host, or the apphost of a self-contained app)."""
        return Path(os.readlink(f"/proc/{self.pid}/exe"))

    def read_memory(self, address: int, size: int) -> bytes:
        """Reads the live process's memory through /proc/<pid>/mem (the process must be stopped or idle)."""
        with open(f"/proc/{self.pid}/mem", "rb", buffering=0) as mem:
            mem.seek(address)
            return mem.read(size)

    def stop(self, timeout: float = 5) -> int | None:
        """Asks the debuggee to exit, then SIGKILLs it by pid; returns its exit status."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            try:
                self.send("exit")
                proc.wait(timeout=timeout)
            except (OSError, DebuggeeError, subprocess.TimeoutExpired):
                pass
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        code = proc.wait()
        with _live_lock:
            _live_pids.discard(proc.pid)
        # A killed runtime leaves its diagnostics socket behind; `sosext ps` would list it as stale.
        for stale in glob.glob(os.path.join(os.environ.get("TMPDIR", "/tmp"), f"dotnet-diagnostic-{proc.pid}-*-socket")):
            try:
                os.unlink(stale)
            except OSError:
                pass
        # The reader sees EOF once the process is gone; close the pipes only after it has finished.
        if self._reader is not None:
            self._reader.join(timeout=5)
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
        if self._stderr_file is not None:
            self._stderr_file.close()
            self._stderr_file = None
        if self._own_dir and self.core_dir is not None:
            shutil.rmtree(self.core_dir, ignore_errors=True)
        return code

    def __enter__(self) -> "Debuggee":
        """Starts the debuggee (if not yet started) and stops it on exit, whatever happens."""
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def _same_file(pid: int, fd: int, other: int) -> bool:
    """Whether two descriptors of a process name the same file (the runtime reads stdin through a dup)."""
    try:
        return os.readlink(f"/proc/{pid}/fd/{fd}") == os.readlink(f"/proc/{pid}/fd/{other}")
    except OSError:
        return False


DebuggeeFactory = Callable[..., Debuggee]
"""What the `debuggee_factory` fixture returns: (scenario, *args, timeout=..., **Debuggee kwargs) -> started Debuggee."""
