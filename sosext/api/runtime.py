"""The front door: open a core or a process, or take the debugger's, and get a Runtime."""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from typing import TYPE_CHECKING, Sequence

from ..errors import SosError, TargetError, UsageError
from .heap import Heap
from .threads import Thread

if TYPE_CHECKING:
    from ..clr.runtime import ClrRuntime
    from ..targets.base import Target


class Runtime:
    """The .NET runtime inside one core or process: its heap and its threads.

    Get one from :func:`sosext.open` or :func:`sosext.current`. A runtime opened by
    ``open`` holds the core's mapping and the runtime's DAC: use it as a context manager or
    call :meth:`close` when done.
    """

    def __init__(self, model: "ClrRuntime", *, has_registers: bool = True, owned: bool = False,
                 cleanup: str | None = None) -> None:
        self._model = model
        self._has_registers = has_registers
        self._owned = owned
        self._cleanup = cleanup  # a private directory holding a snapshot dump: removed on close
        self._heap: Heap | None = None

    def __repr__(self) -> str:
        return f"<Runtime .NET {self.version} in {self._model.target.describe()}>"

    def __enter__(self) -> "Runtime":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def model(self) -> "ClrRuntime":
        """The underlying ``sosext.clr`` model (the commands' view; less stable than this API)."""
        return self._model

    @property
    def version(self) -> str:
        """The runtime's file version, e.g. "10.0.1226.42308"."""
        return self._model.info.version

    @property
    def runtime_path(self) -> str:
        """Where libcoreclr.so was loaded from, in the target."""
        return self._model.info.runtime_path

    @property
    def dac_path(self) -> str:
        """The libmscordaccore.so reading this runtime (beside libcoreclr.so, or from clr_path)."""
        return self._model.info.dac_path

    @property
    def reader(self) -> str:
        """Which reader answers: "dac" or "contracts" (``reader_reason`` says why)."""
        return self._model.reader_name

    @property
    def reader_reason(self) -> str:
        """One line: which reader answers and why it was chosen."""
        return self._model.reader_reason

    @property
    def is_live(self) -> bool:
        """True for a running process, False for a core."""
        return bool(self._model.target.is_live)

    @property
    def has_stacks(self) -> bool:
        """Whether thread registers are available: stack roots, liveness and call stacks need
        them. False only for ``sosext.open(pid=...)`` without ``snapshot=True``."""
        return self._has_registers

    @property
    def heap(self) -> Heap:
        """The GC heap (walked on first use; walked again after a live target has run)."""
        model_heap = self._model.heap
        if self._heap is None or self._heap._model is not model_heap:
            self._heap = Heap(model_heap, has_stacks=self._has_registers)
        return self._heap

    @property
    def threads(self) -> list[Thread]:
        """Every thread the runtime knows, in its thread store's order."""
        from ..clr.threads.threads import clr_threads
        return [Thread(self._model, t, has_registers=self._has_registers) for t in clr_threads(self._model)]

    def refresh(self) -> None:
        """Forget the heap and everything read so far, so that the next question reads the
        process again. For ``open(pid=...)``, whose process keeps running; a no-op on cores
        (and inside a debugger, which already refreshes whenever the process has run)."""
        target = self._model.target
        if target.is_live and self._owned:
            target._generation = target.generation + 1  # every model cache keys on it
        self._model.refresh()

    def close(self) -> None:
        """Release the core's mapping or the process's /proc file (and a snapshot dump)."""
        if self._owned:
            close = getattr(self._model.target, "close", None)
            if close is not None:
                close()
        if self._cleanup:
            shutil.rmtree(self._cleanup, ignore_errors=True)
            self._cleanup = None


def open(core: str | os.PathLike[str] | None = None, *, pid: int | None = None,
         clr_path: str | None = None, search_dirs: Sequence[str] = (), snapshot: bool = False,
         reader: str | None = None) -> Runtime:
    """Open a core file, or a running local process, for reading.

    ``sosext.open("core.1234")``: a core written by createdump, ``sosext collect`` or the
    kernel. ``search_dirs`` are directories to look in for module files the core names but
    this machine does not have at that path.

    ``sosext.open(pid=1234)``: reads the process's memory through ``/proc/1234/mem``. The
    process is neither stopped nor traced, nothing is written to it; the answers are those of
    the moment they are read (call :meth:`Runtime.refresh` to read again). Without ptrace
    there are no thread registers, so stack roots, ``live=`` filters and call stacks are not
    available (``rt.has_stacks`` is False). ``snapshot=True`` instead asks the runtime
    itself for a heap dump over its diagnostics socket (as ``sosext collect``), into a
    private temporary directory that ``close()`` removes, and opens that: everything works,
    on a consistent picture of the process.

    ``clr_path`` is a directory holding the target's runtime (libcoreclr.so and
    libmscordaccore.so), as ``setclrpath``: for a core from another machine.

    ``reader`` chooses how the runtime is read (docs/readers.md): ``"dac"`` (the runtime's
    own DAC, native code), ``"contracts"`` (pure Python from the runtime's data contracts;
    loads no DAC), or None (``SOSEXT_READER``, else automatic: the DAC when it is found and
    trusted, the contracts reader otherwise). ``rt.reader`` says which one answers.
    """
    if (core is None) == (pid is None):
        raise UsageError("sosext.open() takes a core file or pid=, not both or neither")
    if pid is not None and snapshot:
        return _open_snapshot(int(pid), clr_path, reader)
    if pid is not None:
        from ..targets.procfs import ProcessTarget
        try:
            target: "Target" = ProcessTarget(int(pid))
        except OSError as e:
            raise TargetError(f"cannot read process {pid}: {e.strerror or e}") from None
        return _runtime(target, clr_path, has_registers=False, reader=reader)
    from ..targets.elfcore import CoreTarget
    path = os.fspath(core)
    from ..targets.elfcore import check_core_file
    check_core_file(path)  # in analyze's words
    target = CoreTarget(path, search_dirs=list(search_dirs) or None)
    return _runtime(target, clr_path, has_registers=True, workers=_workers(), reader=reader)


def _workers() -> int:
    # As the CLI: walk big cores on two processes (SOSEXT_WORKERS=1 turns it off).
    return int(os.environ.get("SOSEXT_WORKERS", min(2, os.cpu_count() or 1)))


def _in_lldb() -> bool:
    lldb = sys.modules.get("lldb")
    return lldb is not None and getattr(lldb, "debugger", None) is not None


def _keep_lldb_output() -> None:
    """In LLDB's ``script``, what a command prints after the DAC is first loaded (its PAL
    initialisation) is lost unless flushed: make that command's stdout flush per line."""
    if _in_lldb():
        try:
            sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
        except (AttributeError, ValueError):
            pass


def _runtime(target: "Target", clr_path: str | None, *, has_registers: bool, workers: int = 1,
             cleanup: str | None = None, reader: str | None = None) -> Runtime:
    from ..clr.runtime import ClrRuntime, clr_path as chosen_clr_path, set_clr_path
    _keep_lldb_output()
    try:
        if clr_path is not None:
            previous = chosen_clr_path()
            set_clr_path(os.fspath(clr_path))
            try:
                model = ClrRuntime(target, reader=reader)
            finally:
                set_clr_path(previous)
        else:
            model = ClrRuntime(target, reader=reader)
    except BaseException:
        close = getattr(target, "close", None)
        if close is not None:
            close()
        if cleanup:
            shutil.rmtree(cleanup, ignore_errors=True)
        raise
    model.workers = workers
    return Runtime(model, has_registers=has_registers, owned=True, cleanup=cleanup)


def _open_snapshot(pid: int, clr_path: str | None, reader: str | None = None) -> Runtime:
    from ..ipc import DumpType, collect_dump
    from ..targets.elfcore import CoreTarget
    directory = tempfile.mkdtemp(prefix=f"sosext-{pid}-")
    try:
        path = collect_dump(pid, os.path.join(directory, "snapshot.core"), DumpType.WITH_HEAP)
        target = CoreTarget(path)
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return _runtime(target, clr_path, has_registers=True, workers=_workers(), cleanup=directory, reader=reader)


def current() -> Runtime:
    """Inside LLDB or GDB (with sosext loaded or not): the runtime of the debugger's
    selected process or core, the one sosext's commands use.

    >>> (lldb) script import sosext; rt = sosext.current(); print(rt.heap.stats()[-1])
    """
    if _in_lldb():
        from ..hosts.lldb_host import current_session
        _keep_lldb_output()
        return Runtime(current_session().runtime())
    if "gdb" in sys.modules:
        from ..hosts.gdb_host import session
        return Runtime(session().runtime())
    raise SosError("sosext.current() works inside LLDB or GDB; elsewhere use sosext.open(core) "
                   "or sosext.open(pid=...)")
