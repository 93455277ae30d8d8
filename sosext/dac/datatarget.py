"""The data target we hand to the DAC: a COM object implemented in Python.

The DAC pulls everything it knows about the debuggee through this object: memory
(ReadVirtual), module bases (GetImageBase), the runtime's base (ICLRRuntimeLocator) and
thread register contexts (GetThreadContext, for stack walks). It is read-only by design:
every write-like slot answers E_FAIL so the DAC can never change its target.
"""
from __future__ import annotations

import ctypes
import logging
import struct
from typing import Any, Callable

from .. import interrupts
from ..targets.base import Target
from .com import E_FAIL, E_NOINTERFACE, E_NOTIMPL, GUID, HRESULT, S_OK

log = logging.getLogger(__name__)

IID_IUnknown = GUID.parse("00000000-0000-0000-C000-000000000046")
IID_ICLRDataTarget = GUID.parse("3E11CCEE-D08B-43e5-AF01-32717A64DA03")
IID_ICLRDataTarget2 = GUID.parse("6d05fae3-189c-4630-a6dc-1c251e1c01ab")
IID_ICLRRuntimeLocator = GUID.parse("b760bf44-9377-4597-8be7-58083bdc5146")

IMAGE_FILE_MACHINE = {"x86_64": 0x8664, "aarch64": 0xAA64}

# AMD64 CONTEXT (winnt.h): offsets of the integer and control registers.
AMD64_CONTEXT_SIZE = 0x4D0
AMD64_CONTEXT_FLAGS = 0x100000
_AMD64_GPR_OFFSETS = {
    "rax": 0x78, "rcx": 0x80, "rdx": 0x88, "rbx": 0x90, "rsp": 0x98, "rbp": 0xA0,
    "rsi": 0xA8, "rdi": 0xB0, "r8": 0xB8, "r9": 0xC0, "r10": 0xC8, "r11": 0xD0,
    "r12": 0xD8, "r13": 0xE0, "r14": 0xE8, "r15": 0xF0, "rip": 0xF8,
}
# ARM64 CONTEXT: ContextFlags u32 @0, Cpsr u32 @4, X0..X28 @8, Fp @0xF0, Lr @0xF8, Sp @0x100, Pc @0x108.
ARM64_CONTEXT_SIZE = 0x390
ARM64_CONTEXT_FLAGS = 0x400000

_P = ctypes.c_void_p
_ADDR = ctypes.c_uint64
_U32 = ctypes.c_uint32
_PU32 = ctypes.POINTER(ctypes.c_uint32)
_PU64 = ctypes.POINTER(ctypes.c_uint64)
_PGUID = ctypes.POINTER(GUID)

_QueryInterface = ctypes.CFUNCTYPE(HRESULT, _P, _PGUID, ctypes.POINTER(_P))
_AddRef = ctypes.CFUNCTYPE(_U32, _P)
_GetMachineType = ctypes.CFUNCTYPE(HRESULT, _P, _PU32)
_GetPointerSize = ctypes.CFUNCTYPE(HRESULT, _P, _PU32)
_GetImageBase = ctypes.CFUNCTYPE(HRESULT, _P, ctypes.POINTER(ctypes.c_uint16), _PU64)
_ReadVirtual = ctypes.CFUNCTYPE(HRESULT, _P, _ADDR, _P, _U32, _PU32)
_WriteVirtual = ctypes.CFUNCTYPE(HRESULT, _P, _ADDR, _P, _U32, _PU32)
_GetTLSValue = ctypes.CFUNCTYPE(HRESULT, _P, _U32, _U32, _PU64)
_SetTLSValue = ctypes.CFUNCTYPE(HRESULT, _P, _U32, _U32, _ADDR)
_GetCurrentThreadID = ctypes.CFUNCTYPE(HRESULT, _P, _PU32)
_GetThreadContext = ctypes.CFUNCTYPE(HRESULT, _P, _U32, _U32, _U32, _P)
_SetThreadContext = ctypes.CFUNCTYPE(HRESULT, _P, _U32, _U32, _P)
_Request = ctypes.CFUNCTYPE(HRESULT, _P, _U32, _U32, _P, _U32, _P)
_AllocVirtual = ctypes.CFUNCTYPE(HRESULT, _P, _ADDR, _U32, _U32, _U32, _PU64)
_FreeVirtual = ctypes.CFUNCTYPE(HRESULT, _P, _ADDR, _U32, _U32)
_GetRuntimeBase = ctypes.CFUNCTYPE(HRESULT, _P, _PU64)


def _wide_string(p: Any) -> str:
    chars = []
    i = 0
    while i < 4096:
        c = p[i]
        if c == 0:
            break
        chars.append(c)
        i += 1
    return struct.pack(f"<{len(chars)}H", *chars).decode("utf-16-le", errors="replace")


def _guarded(fn: Callable[..., int]) -> Callable[..., int]:
    """An exception must never unwind into the DAC's C++ frames: report E_FAIL instead.

    A Ctrl-C (KeyboardInterrupt) arriving inside a callback would be swallowed by ctypes
    with the call reporting success; it is answered with E_FAIL and remembered so the
    command stops as soon as control is back in Python.
    """
    def wrapper(*args: Any) -> int:
        try:
            return fn(*args)
        except KeyboardInterrupt:
            interrupts.request()
            return E_FAIL
        except BaseException:  # noqa: BLE001 - the boundary to native code
            log.debug("data target callback %s failed", fn.__name__, exc_info=True)
            return E_FAIL
    wrapper.__name__ = fn.__name__
    return wrapper


class _Face(ctypes.Structure):
    """One COM interface of the data target: just a vtable pointer."""
    _fields_ = [("vtbl", _P)]


class DataTarget:
    """ICLRDataTarget(2) + ICLRRuntimeLocator over a sosext Target.

    ``runtime_base`` is the load address of libcoreclr.so; ``read_hook`` lets the caller
    observe reads (tests, statistics). The object must stay alive as long as the DAC does.
    """

    def __init__(self, target: Target, runtime_base: int) -> None:
        self.target = target
        self.runtime_base = runtime_base
        self.reads = 0
        self._keep: list[Any] = []
        self._faces: dict[bytes, _Face] = {}
        self._build()

    # -- construction -------------------------------------------------------------

    def _vtable(self, fns: list[Any]) -> _Face:
        vt = (_P * len(fns))(*[ctypes.cast(f, _P) for f in fns])
        face = _Face(ctypes.cast(vt, _P))
        self._keep.extend(fns)
        self._keep.extend([vt, face])
        return face

    def _build(self) -> None:
        unknown = [_QueryInterface(self._query_interface), _AddRef(self._add_ref), _AddRef(self._release)]
        data_target = unknown + [
            _GetMachineType(_guarded(self._get_machine_type)),
            _GetPointerSize(_guarded(self._get_pointer_size)),
            _GetImageBase(_guarded(self._get_image_base)),
            _ReadVirtual(_guarded(self._read_virtual)),
            _WriteVirtual(self._refuse5),
            _GetTLSValue(self._not_impl4),
            _SetTLSValue(self._refuse4),
            _GetCurrentThreadID(self._not_impl2),
            _GetThreadContext(_guarded(self._get_thread_context)),
            _SetThreadContext(self._refuse4),
            _Request(self._not_impl6),
            _AllocVirtual(self._refuse6),
            _FreeVirtual(self._refuse4),
        ]
        main = self._vtable(data_target)
        locator = self._vtable(unknown + [_GetRuntimeBase(_guarded(self._get_runtime_base))])
        for iid in (IID_IUnknown, IID_ICLRDataTarget, IID_ICLRDataTarget2):
            self._faces[bytes(iid.data)] = main
        self._faces[bytes(IID_ICLRRuntimeLocator.data)] = locator
        self._main = main

    @property
    def pointer(self) -> int:
        """The ICLRDataTarget* to pass to CLRDataCreateInstance."""
        return ctypes.addressof(self._main)

    # -- IUnknown -----------------------------------------------------------------

    def _query_interface(self, this: int, iid: Any, out: Any) -> int:
        try:
            face = self._faces.get(bytes(iid.contents.data))
            if face is None:
                out[0] = None
                return E_NOINTERFACE
            out[0] = ctypes.addressof(face)
            return S_OK
        except Exception:  # noqa: BLE001
            return E_FAIL

    @staticmethod
    def _add_ref(this: int) -> int:
        return 1

    @staticmethod
    def _release(this: int) -> int:
        return 1

    # -- ICLRDataTarget -------------------------------------------------------------

    def _get_machine_type(self, this: int, out: Any) -> int:
        out[0] = IMAGE_FILE_MACHINE[self.target.arch]
        return S_OK

    def _get_pointer_size(self, this: int, out: Any) -> int:
        out[0] = self.target.pointer_size
        return S_OK

    def _get_image_base(self, this: int, name: Any, out: Any) -> int:
        wanted = _wide_string(name).rsplit("/", 1)[-1]
        for m in self.target.modules():
            if m.name == wanted:
                out[0] = m.base
                return S_OK
        return E_FAIL

    def _read_virtual(self, this: int, address: int, buf: int, size: int, done: Any) -> int:
        self.reads += 1
        data = self.target.read_partial(address, size)
        n = len(data)
        if done:
            done[0] = n
        if n == 0:
            return E_FAIL
        ctypes.memmove(buf, bytes(data), n)
        return S_OK

    def _get_thread_context(self, this: int, tid: int, flags: int, size: int, ctx: int) -> int:
        regs = self.target.registers(tid)
        if not regs:
            return E_FAIL
        blob = fill_context(self.target.arch, regs, flags, size)
        if blob is None:
            return E_FAIL
        ctypes.memmove(ctx, blob, len(blob))
        return S_OK

    def _get_runtime_base(self, this: int, out: Any) -> int:
        out[0] = self.runtime_base
        return S_OK

    # Write-like and unsupported slots: the target is never changed.
    @staticmethod
    def _refuse4(*_: Any) -> int:
        return E_FAIL

    @staticmethod
    def _refuse5(*_: Any) -> int:
        return E_FAIL

    @staticmethod
    def _refuse6(*_: Any) -> int:
        return E_FAIL

    @staticmethod
    def _not_impl2(*_: Any) -> int:
        return E_NOTIMPL

    @staticmethod
    def _not_impl4(*_: Any) -> int:
        return E_NOTIMPL

    @staticmethod
    def _not_impl6(*_: Any) -> int:
        return E_NOTIMPL


def fill_context(arch: str, regs: dict[str, int], flags: int, size: int) -> bytes | None:
    """A Windows CONTEXT record for ``arch`` built from Linux register names."""
    if arch == "x86_64":
        if size < AMD64_CONTEXT_SIZE:
            return None
        ctx = bytearray(size)
        struct.pack_into("<I", ctx, 0x30, flags or (AMD64_CONTEXT_FLAGS | 0xB))
        struct.pack_into("<I", ctx, 0x34, regs.get("mxcsr", 0x1F80) & 0xFFFFFFFF)
        struct.pack_into("<H", ctx, 0x38, regs.get("cs", 0x33) & 0xFFFF)
        struct.pack_into("<H", ctx, 0x42, regs.get("ss", 0x2B) & 0xFFFF)
        struct.pack_into("<I", ctx, 0x44, regs.get("eflags", 0x246) & 0xFFFFFFFF)
        for name, off in _AMD64_GPR_OFFSETS.items():
            struct.pack_into("<Q", ctx, off, regs.get(name, 0) & 0xFFFFFFFFFFFFFFFF)
        return bytes(ctx)
    if arch == "aarch64":
        if size < ARM64_CONTEXT_SIZE:
            return None
        ctx = bytearray(size)
        struct.pack_into("<I", ctx, 0, flags or (ARM64_CONTEXT_FLAGS | 0x3))
        struct.pack_into("<I", ctx, 4, regs.get("pstate", regs.get("cpsr", 0)) & 0xFFFFFFFF)
        for i in range(29):
            struct.pack_into("<Q", ctx, 8 + 8 * i, regs.get(f"x{i}", 0) & 0xFFFFFFFFFFFFFFFF)
        struct.pack_into("<Q", ctx, 0xF0, regs.get("x29", regs.get("fp", 0)))
        struct.pack_into("<Q", ctx, 0xF8, regs.get("x30", regs.get("lr", 0)))
        struct.pack_into("<Q", ctx, 0x100, regs.get("sp", 0))
        struct.pack_into("<Q", ctx, 0x108, regs.get("pc", 0))
        return bytes(ctx)
    return None
