"""Full cores of real .NET programs, made at test time and cached under the work directory.

- ``webapi``: the SDK's own ``dotnet new webapi`` template app (server GC, as every ASP.NET app),
  dumped while a client in this process sends it requests on 127.0.0.1;
- ``msbuild``: ``dotnet build`` of a ``classlib`` template project, dumped while the build's
  last target waits in an Exec (MSBuild runs in the dotnet CLI's process);
- ``vbcscompiler``: the Roslyn compiler server that ``dotnet build`` starts with build servers
  on, after it compiled the project, under a pipe name of our own (SharedCompilationId) so no
  other build on the machine shares it.

A core is kept as ``<work>/realapps/<name>-<sdk>-<recipe>.core`` (the recipe's version changes
when what it makes changes) and made once per machine under a file lock. Every process started
here is ended by its pid, with the processes it started. Stdlib only.
"""
from __future__ import annotations

import fcntl
import http.client
import os
import signal
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path

from .debuggee import dotnet_path, is_elf_core, work_dir

RECIPE = 1
APPS = ("webapi", "msbuild", "vbcscompiler")
_QUIET = {"DOTNET_CLI_TELEMETRY_OPTOUT": "1", "DOTNET_NOLOGO": "1", "DOTNET_SKIP_FIRST_TIME_EXPERIENCE": "1",
          "DOTNET_CLI_WORKLOAD_UPDATE_NOTIFY_DISABLE": "1", "DOTNET_GENERATE_ASPNET_CERTIFICATE": "false"}
_why: dict[str, str] = {}


def why_not(name: str) -> str:
    """Why core(name) gave None."""
    return _why.get(name, "not tried")


def _sdk_version() -> str:
    return subprocess.run([dotnet_path() or "dotnet", "--version"], stdout=subprocess.PIPE, text=True,
                          env={**os.environ, **_QUIET}).stdout.strip() or "unknown"


def core(name: str) -> Path | None:
    """The cached full core of app ``name``, made now if missing; None (see why_not) if it cannot be."""
    if name not in APPS:
        raise ValueError(f"unknown app {name!r}; one of {APPS}")
    if dotnet_path() is None:
        _why[name] = "dotnet is not on PATH"
        return None
    root = work_dir() / "realapps"
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{name}-{_sdk_version()}-r{RECIPE}.core"
    with open(root / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.exists() and is_elf_core(path):
            return path
        try:
            made = {"webapi": _webapi, "msbuild": _msbuild, "vbcscompiler": _vbcscompiler}[name](root, path)
        except (OSError, subprocess.SubprocessError, RuntimeError) as e:
            _why[name] = f"{type(e).__name__}: {e}"
            path.unlink(missing_ok=True)
            return None
        return made


# -- processes ---------------------------------------------------------------------------------

def _run(args: list[str], cwd: Path, timeout: float = 600) -> str:
    proc = subprocess.run(args, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout, env={**os.environ, **_QUIET})
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}")
    return proc.stdout


def _children(pid: int) -> list[int]:
    """Every descendant of pid (from /proc/*/stat's parent pid), deepest first."""
    parent: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    stat = f.read()
                parent[int(d)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out = kids + out
        todo += kids
    return out


def _end(proc: subprocess.Popen) -> None:
    """Ends proc and what it started, each by its pid."""
    for pid in [*_children(proc.pid), proc.pid]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def _createdump(pid: int, path: Path) -> Path:
    """A full core of pid by the runtime's own createdump (found beside the libcoreclr it maps)."""
    with open(f"/proc/{pid}/maps") as maps:
        runtime = next((Path(ln.split(maxsplit=5)[-1].strip()).parent for ln in maps
                        if ln.rstrip().endswith("/libcoreclr.so")), None)
    if runtime is None:
        raise RuntimeError(f"pid {pid} has no libcoreclr.so mapped")
    tmp = path.with_suffix(".tmp")
    out = subprocess.run([str(runtime / "createdump"), "-f", str(tmp), "--full", str(pid)], stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    if out.returncode != 0 or not is_elf_core(tmp):
        raise RuntimeError(f"createdump of pid {pid} failed:\n{out.stdout[-2000:]}")
    os.chmod(tmp, 0o600)
    tmp.rename(path)
    return path


def _createdump_walkable(pid: int, path: Path, tries: int = 4) -> Path:
    """A core of pid on which SOS (ClrMD) and sosext walk the same heap: taken again while a GC
    runs (SOS and sosext then refuse or guess differently what is in flux) or while an
    allocation context is in a state ClrMD misreads (see _unsettled_allocation). A program
    under load is dumped in such a state about once in ten."""
    for attempt in range(tries):
        core = _createdump(pid, path)
        where = _unsettled_allocation(core)
        if where is None or attempt == tries - 1:
            return core
        time.sleep(0.3)
    return core


def _unsettled_allocation(core: Path) -> int | None:
    """-1 for a core dumped during a GC; else the pointer of an allocation context ClrMD
    misreads, if any (docs/sos-users.md, "Where
    sosext and SOS differ"): an empty one (pointer == limit) whose reserved tail is unwritten,
    or one just below whose pointer a thread's new object has no MethodTable yet. ClrMD reads
    either zero header as an object of no type and steps past the next real object."""
    import sys
    repo = str(Path(__file__).resolve().parents[2])
    if repo not in sys.path:
        sys.path.insert(0, repo)
    from sosext.clr.runtime import ClrRuntime
    from sosext.targets.elfcore import CoreTarget
    heap = ClrRuntime(CoreTarget(str(core))).heap
    if not heap.can_walk:
        return -1  # dumped during a GC
    ix = heap.index()
    ends = {limit + 24 for _ptr, limit in heap.alloc_contexts}
    for ptr, limit in heap.alloc_contexts:
        seg = heap.segment_of(ptr)
        if seg is None:
            continue
        if ptr == limit and heap.runtime.target.read_partial(ptr, 8) == bytes(8):
            return ptr
        if ptr > seg.start and ptr not in ends and ix.containing(ptr - 8) is None:
            return ptr
    return None


def _new_project(root: Path, template: str, name: str) -> Path:
    """A fresh `dotnet new <template>` project, restored and built (Release) into out/."""
    proj = root / f"{name}-src"
    if not (proj / "out" / f"{name}.dll").exists():
        subprocess.run(["rm", "-rf", str(proj)], check=False)
        proj.mkdir(parents=True)
        _run([dotnet_path() or "dotnet", "new", template, "-n", name, "-o", str(proj), "--force"], root)
        _run([dotnet_path() or "dotnet", "build", str(proj), "-c", "Release", "-o", str(proj / "out"),
              "--disable-build-servers", "-nodeReuse:false", "-nologo"], proj)
    return proj


# -- webapi --------------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(port: int, path: str, timeout: float = 5) -> int:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        r.read()
        return r.status
    finally:
        c.close()


def _webapi(root: Path, path: Path) -> Path:
    proj = _new_project(root, "webapi", "SosWebApi")
    port = _free_port()
    env = {**os.environ, **_QUIET, "ASPNETCORE_ENVIRONMENT": "Production", "ASPNETCORE_URLS": f"http://127.0.0.1:{port}"}
    app = subprocess.Popen([dotnet_path() or "dotnet", str(proj / "out" / "SosWebApi.dll")], cwd=proj,
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    stop = threading.Event()
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if _get(port, "/weatherforecast") == 200:
                    break
            except OSError:
                pass
            if app.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the webapi app did not answer on 127.0.0.1")
            time.sleep(0.2)

        def load() -> None:
            # Bounded in count and time; keep-alive connections, as a real client.
            end = time.monotonic() + 120
            for _ in range(20000):
                if stop.is_set() or time.monotonic() > end:
                    return
                try:
                    _get(port, "/weatherforecast")
                except OSError:
                    time.sleep(0.05)

        clients = [threading.Thread(target=load, daemon=True) for _ in range(4)]
        for t in clients:
            t.start()
        time.sleep(3)  # under load when dumped
        return _createdump_walkable(app.pid, path)
    finally:
        stop.set()
        _end(app)


# -- msbuild ------------------------------------------------------------------------------------

_WAIT_TARGET = """
  <Target Name="SosextWait" AfterTargets="Build">
    <Message Importance="high" Text="SOSEXT-MSBUILD-WAITING" />
    <Exec Command="sleep 300" />
  </Target>
</Project>"""


def _msbuild(root: Path, path: Path) -> Path:
    proj = root / "msbuild-src"
    subprocess.run(["rm", "-rf", str(proj)], check=False)
    proj.mkdir(parents=True)
    _run([dotnet_path() or "dotnet", "new", "classlib", "-n", "SosLib", "-o", str(proj), "--force"], root)
    csproj = proj / "SosLib.csproj"
    csproj.write_text(csproj.read_text().replace("</Project>", _WAIT_TARGET, 1))
    _run([dotnet_path() or "dotnet", "restore", str(proj), "--disable-build-servers"], proj)
    build = subprocess.Popen([dotnet_path() or "dotnet", "build", str(proj), "--no-restore", "-m:1",
                              "--disable-build-servers", "-nodeReuse:false", "-nologo", "-v:m"],
                             cwd=proj, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, env={**os.environ, **_QUIET})
    try:
        assert build.stdout is not None
        seen = []
        deadline = time.monotonic() + 300
        for line in build.stdout:
            seen.append(line)
            if "SOSEXT-MSBUILD-WAITING" in line:
                break
            if time.monotonic() > deadline:
                break
        else:
            raise RuntimeError("the build ended before its waiting target:\n" + "".join(seen[-40:]))
        time.sleep(1)
        return _createdump_walkable(build.pid, path)
    finally:
        _end(build)


# -- vbcscompiler -------------------------------------------------------------------------------

def _vbcscompiler(root: Path, path: Path) -> Path:
    proj = root / "vbcs-src"
    subprocess.run(["rm", "-rf", str(proj)], check=False)
    proj.mkdir(parents=True)
    _run([dotnet_path() or "dotnet", "new", "classlib", "-n", "SosVbcs", "-o", str(proj), "--force"], root)
    pipe = f"sosext-{uuid.uuid4().hex[:12]}"
    build = subprocess.Popen([dotnet_path() or "dotnet", "build", str(proj), "-nodeReuse:false", "-nologo",
                              "-p:UseSharedCompilation=true", f"-p:SharedCompilationId={pipe}"],
                             cwd=proj, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, env={**os.environ, **_QUIET}, start_new_session=True)
    server: int | None = None
    try:
        out, _ = build.communicate(timeout=600)
        if build.returncode != 0:
            raise RuntimeError(f"dotnet build failed:\n{out[-3000:]}")
        server = _process_with_arg(f"-pipename:{pipe}")
        if server is None:
            raise RuntimeError(f"no VBCSCompiler with pipe {pipe} after the build:\n{out[-2000:]}")
        time.sleep(1)
        return _createdump_walkable(server, path)
    finally:
        _end(build)
        if server is not None:
            try:
                os.kill(server, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _process_with_arg(arg: str) -> int | None:
    """The pid of the one process whose command line holds ``arg`` (our unique pipe name)."""
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if any(a.decode(errors="replace").strip('"') == arg for a in argv):
            return int(d)
    return None
