"""Finding and loading the runtime's DAC (libmscordaccore.so).

The DAC must be the exact build of the target's runtime. It lives next to the target's
libcoreclr.so, a directory the target (an untrusted core, or a process's maps) names: it is
loaded from there only if ``trust.untrusted_reason`` finds the location safe. ``setclrpath``
(``--clr-path``, ``SOSEXT_CLR_PATH``) names another directory, trusted by that choice. Either
way the file must be a complete ELF for this host and the target runtime's build; every
refusal is one line (docs/install.md, "Which DAC is loaded").
"""
from __future__ import annotations

import ctypes
import os
import re
import struct
import threading

from ..errors import DacError
from ..readers.location import RUNTIME_MODULE, RuntimeLocation, find_runtime
from ..targets.base import Module, Target
from ..targets.elfsections import read_section, sections
from ..targets.elfsymbols import elf_build_id, file_build_id
from .trust import check_elf_image, declared_runtime_info, printable, untrusted_reason

DAC_NAME = "libmscordaccore.so"
_VERSION_MARKER = re.compile(rb"@\(#\)Version ([0-9][0-9.]*)")
_MARKER = re.compile(rb"@\(#\)Version [0-9][0-9.]*(?: @Commit: [0-9a-f]+)?")

_lock = threading.Lock()
_loaded: dict[str, ctypes.CDLL] = {}  # path -> library; never unloaded (see dac.md)
# The user's explicit choice of DAC directory, the one place every entry point reads: setclrpath,
# --clr-path, or SOSEXT_CLR_PATH in the environment (the same choice made once, for scripts).
_clr_path_override: str | None = (os.path.abspath(os.environ["SOSEXT_CLR_PATH"])
                                  if os.environ.get("SOSEXT_CLR_PATH") else None)


def set_clr_path(directory: str | None) -> None:
    """``setclrpath``: look for the DAC in ``directory`` instead of beside libcoreclr.so."""
    global _clr_path_override
    if directory is not None and not os.path.isdir(directory):
        raise DacError(f"not a directory: {directory}")
    _clr_path_override = directory


def clr_path_override() -> str | None:
    return _clr_path_override


# The DAC reader's name for where the runtime and its DAC are (readers/location.py).
DacLocation = RuntimeLocation


# A runtime binary is a few MB; a path a core names could be anything (a huge sparse file).
_MAX_SCAN = 256 << 20
# The runtime's build puts the marker in an initialised variable (``sccsid``): try that
# section before reading the whole file (elfsections.py says why).
_MARKER_SECTIONS = (".data", ".rodata")


def _marker_match(path: str, pattern: "re.Pattern[bytes]") -> "re.Match[bytes] | None":
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        for section in sections(fd) or ():
            if section.name in _MARKER_SECTIONS:
                data = read_section(fd, section)
                m = pattern.search(data) if data is not None and b"@(#)Version " in data else None
                if m:
                    return m
        data = os.pread(fd, _MAX_SCAN, 0)
    except OSError:
        return None
    finally:
        os.close(fd)
    return pattern.search(data)


def file_version(path: str) -> str | None:
    """The ``@(#)Version x.y.z.w`` marker the runtime's build embeds in every native binary."""
    m = _marker_match(path, _VERSION_MARKER)
    return m.group(1).decode() if m else None


def _target_build_id(target: Target, runtime: Module) -> bytes | None:
    if runtime.build_id:
        return runtime.build_id
    try:
        head = target.read_partial(runtime.base, 1 << 16)
    except Exception:  # noqa: BLE001 - a missing page only means "unknown"
        return None
    return elf_build_id(head)


TRUST_HINT = "trust a directory explicitly with setclrpath DIR (LLDB/GDB) or --clr-path DIR (CLI)"


def _runtime_marker(path: str) -> str | None:
    """The full ``@(#)Version x @Commit: y`` marker of a native runtime file."""
    m = _marker_match(path, _MARKER)
    return m.group(0).decode() if m else None


def runtime_marker(path: str) -> str | None:
    """The ``@(#)Version x @Commit: y`` marker of a native runtime file (None if it has none)."""
    return _runtime_marker(path)


def locate_dac(target: Target) -> DacLocation:
    """The DAC for ``target``'s runtime (see ``_locate``); paths in a refusal shown escaped."""
    try:
        return _locate(target)
    except DacError as e:
        raise DacError(printable(str(e))) from None


def _locate(target: Target) -> DacLocation:
    """The DAC for ``target``'s runtime, after every trust and integrity check (one-line refusals).

    Beside the runtime (a path the target names): only if its location is trusted, see
    ``trust.untrusted_reason``. In the user's ``setclrpath`` directory: trusted by that choice.
    Either way it must be a complete ELF for this host, and the right build: the DAC build id
    the runtime declares (``DotNetRuntimeInfo``) when it declares one, and always the runtime's
    build id beside the DAC and the runtime's version and commit marker."""
    runtime = find_runtime(target)
    explicit = _clr_path_override
    directory = explicit or os.path.dirname(runtime.path)
    dac_path = os.path.join(directory, DAC_NAME)
    if not os.path.isfile(dac_path):
        hint = "" if explicit else " (use setclrpath <dir> to name a copy of the target's runtime)"
        raise DacError(f"DAC not found: {dac_path}{hint}")
    if not explicit:
        why = untrusted_reason(dac_path)
        if why is not None:
            raise DacError(f"refusing to load the DAC {dac_path} (named by {target.describe()}): {why}; "
                           f"{TRUST_HINT}")
    real_dac = os.path.realpath(dac_path)
    check_elf_image(real_dac)

    want = _target_build_id(target, runtime)
    local_runtime = os.path.join(directory, RUNTIME_MODULE)
    have = file_build_id(local_runtime)
    if want and have and want != have:
        raise DacError(
            f"DAC mismatch: the target's {RUNTIME_MODULE} has build id {want.hex()}, "
            f"but {local_runtime} has {have.hex()}; setclrpath <dir> to the target's runtime")
    same_build = _same_build_file(want, (local_runtime, runtime.path))

    dac_id = file_build_id(real_dac)
    declared = declared_runtime_info(target, runtime, same_build)
    if declared is not None and declared.dac_build_id and dac_id != declared.dac_build_id:
        raise DacError(f"DAC mismatch: {dac_path} has build id {dac_id.hex() if dac_id else 'none'}, but the "
                       f"target's runtime declares {declared.dac_build_id.hex()} (DotNetRuntimeInfo); "
                       "setclrpath <dir> to the target's runtime")

    dac_marker = _runtime_marker(real_dac)
    runtime_marker = _runtime_marker(same_build) if same_build else None
    if runtime_marker and dac_marker != runtime_marker:
        raise DacError(f"DAC mismatch: {dac_path} is {_short(dac_marker)}, the target's runtime is "
                       f"{_short(runtime_marker)}; setclrpath <dir> to the target's runtime")
    version = file_version(real_dac) or "unknown"
    return DacLocation(dac_path=real_dac, runtime=runtime, version=version,
                       trusted_by="setclrpath" if explicit else "location")


def _same_build_file(build_id: bytes | None, candidates: tuple[str, ...]) -> str | None:
    """The first candidate file that is the target's runtime build (any, if its id is unknown)."""
    for path in candidates:
        if os.path.isfile(path) and (build_id is None or file_build_id(path) == build_id):
            return path
    return None


def _short(marker: str | None) -> str:
    if not marker:
        return "no .NET build (no @(#)Version marker)"
    return marker.removeprefix("@(#)").replace(" @Commit: ", ", commit ")


def load_dac(path: str) -> ctypes.CDLL:
    """dlopen the DAC once per path and run its PAL initialisation."""
    with _lock:
        lib = _loaded.get(path)
        if lib is not None:
            return lib
        try:
            lib = ctypes.CDLL(path, mode=os.RTLD_NOW)
        except OSError as e:
            raise DacError(f"cannot load {path}: {e}") from None
        # A DAC built with its own PAL initialises it from DllMain(PROCESS_ATTACH).
        has_pal = any(hasattr(lib, n) for n in ("DAC_PAL_InitializeDLL", "PAL_InitializeDLL"))
        dllmain = getattr(lib, "DllMain", None)
        if has_pal and dllmain is not None:
            dllmain.restype = ctypes.c_int
            dllmain.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p]
            dllmain(lib._handle, 1, None)  # DLL_PROCESS_ATTACH
        _loaded[path] = lib
        return lib
