"""Compiled kernels for the loops that touch every object.

Python decides *what* to do per segment or region; the kernels do it per object: the heap
walk, per-type statistics, the reference scan, marking and root-path search. They take and
fill numpy arrays only, and are declared in ``heapwalk.py`` and ``refs.py`` as plain
Python with typed signatures (``registry.py``). ``bind()`` then replaces each one, in its
module, by the fastest form this machine has:

1. **aot** — a CPython extension compiled ahead of time by numba (``python3 -m
   sosext.clr.kernels``, which the README's set-up runs). Importing it takes a
   millisecond and needs no numba at run time: the ~0.5 s import of numba and the
   loading of cached machine code are gone from every command. Its wrappers do not check
   argument types (a wrong dtype would read memory wrongly), so every call goes through
   a check of each array's dtype, shape and writability first.
2. **jit** — numba's ``njit(cache=True)``: compiled on first use, cached per user.
3. **python** — no numba: the heap walk and graph build take the older numpy path
   (``walk.py``, ``graph.py``) and the other kernels run as Python or numpy.

``SOSEXT_KERNELS=jit|python`` forces a form (tests compare them). Binding happens when
this package is first imported, which only the code paths that walk the heap do.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .registry import DTYPES, KERNELS, KernelSpec

SOURCES = ("heapwalk", "refs", "dominators", "reach", "components", "rootwalk")
AOT_NAME = "_sosext_kernels"
_mode: str | None = None
_why_slow = ""


def source_hash() -> str:
    """What the compiled extension was built from: a stale one is never used."""
    h = hashlib.sha256()
    here = Path(__file__).parent
    for name in (*SOURCES, "registry", "hints", "__main__"):  # __main__: how they are compiled
        h.update((here / f"{name}.py").read_bytes())
    h.update(f"{sys.version_info[:2]} {np.__version__}".encode())
    return h.hexdigest()[:16]


def aot_dirs() -> list[Path]:
    """Where the extension may be: beside this file (a checkout), else the user's cache."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sosext" / "kernels"
    return [Path(__file__).parent, cache]


def _load_sources() -> list[Any]:
    return [importlib.import_module(f"{__name__}.{m}") for m in SOURCES]


def mode() -> str:
    """'aot', 'jit' or 'python', binding the kernels on first call."""
    if _mode is None:
        bind()
    return _mode  # type: ignore[return-value]


def compiled() -> bool:
    return mode() != "python"


def bind(force: str | None = None) -> str:
    """Bind every kernel to its fastest form (or to ``force``: 'jit' or 'python')."""
    global _mode, _why_slow
    if _mode is not None and force is None:
        return _mode
    modules = {m.__name__: m for m in _load_sources()}
    forced = force or os.environ.get("SOSEXT_KERNELS", "")
    if forced not in ("jit", "python"):
        aot = _import_aot()
        if aot is not None:
            for spec in KERNELS.values():
                setattr(modules[spec.module], spec.name, _checked(spec, getattr(aot, spec.name)))
            _mode = "aot"
            return _mode
    if forced != "python":
        try:
            import numba
        except ImportError as e:
            _why_slow = f"numba is not available ({e})"
        else:
            for m in modules.values():
                for name, make in getattr(m, "JIT_FORMS", {}).items():
                    setattr(m, name, make())
            for spec in KERNELS.values():
                setattr(modules[spec.module], spec.name,
                        numba.njit(cache=True, nogil=True)(spec.function))
            _mode = "jit"
            return _mode
    for m in modules.values():
        for name, fn in getattr(m, "NUMPY_FORMS", {}).items():
            setattr(m, name, fn)
    _mode = "python"
    return _mode


def note_slow_path() -> None:
    """One line on stderr, once per process, when numba is missing."""
    global _why_slow
    if _why_slow:
        sys.stderr.write(f"sosext: {_why_slow}; using the slower numpy path (apt-get install python3-numba)\n")
        _why_slow = ""


def _import_aot() -> Any | None:
    want = source_hash()
    for d in aot_dirs():
        stamp = d / f"{AOT_NAME}.hash"
        try:
            if stamp.read_text().strip() != want:
                continue
        except OSError:
            continue
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = d / f"{AOT_NAME}{suffix}"
            if path.is_file():
                spec = importlib.util.spec_from_file_location(AOT_NAME, path)
                if spec is None or spec.loader is None:
                    continue
                try:
                    module = importlib.util.module_from_spec(spec)
                    spec.loader.exec_module(module)
                except ImportError:
                    continue
                return module
    return None


def _checked(spec: KernelSpec, fn: Callable) -> Callable:
    """``fn`` behind a check of every array argument against the declared signature."""
    checks = []
    for i, a in enumerate(spec.args):
        if "[]" in a:
            checks.append((i, np.dtype(DTYPES[a[:2]]), not a.endswith("r")))
    name = spec.name

    def call(*args: Any) -> Any:
        for i, dt, writes in checks:
            x = args[i]
            if (not isinstance(x, np.ndarray) or x.dtype != dt or x.ndim != 1
                    or not x.flags.c_contiguous or (writes and not x.flags.writeable)):
                got = getattr(x, "dtype", type(x).__name__)
                raise TypeError(f"kernel {name}: argument {i} must be a contiguous {dt} array, not {got}")
        return fn(*args)
    call.__name__ = name
    call.__doc__ = spec.function.__doc__
    return call


bind()
