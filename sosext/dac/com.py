"""Minimal COM plumbing over ctypes: GUIDs, calling vtable slots, HRESULTs.

The DAC speaks COM-style interfaces (a pointer to a vtable of function pointers, the
first three slots IUnknown's). On Linux x64/arm64 the calling convention is plain C, so
``ctypes.CFUNCTYPE`` describes every slot.
"""
from __future__ import annotations

import ctypes
import threading
import uuid
from typing import Any

from ..errors import DacError

# The DAC and the DBI are not thread-safe: every call into them holds this lock, so that a
# background build (clr/roots/background.py) and the user's command never run in them at once.
# Re-entrant: the DAC calls back into our data target, which may call the DAC no more, but
# a call made while the lock is held by the same thread must not deadlock.
CALL_LOCK = threading.RLock()

HRESULT = ctypes.c_int32
S_OK = 0
S_FALSE = 1
E_NOTIMPL = 0x80004001
E_NOINTERFACE = 0x80004002
E_FAIL = 0x80004005
E_INVALIDARG = 0x80070057
CORDBG_E_READVIRTUAL_FAILURE = 0x80131C49
CORDBG_E_MISSING_DATA = 0x80131C4F  # the dump lacks memory the DAC needs

KNOWN_HRESULTS = {
    E_NOTIMPL: "not implemented",
    E_NOINTERFACE: "interface not supported",
    E_FAIL: "unspecified failure",
    E_INVALIDARG: "invalid argument",
    CORDBG_E_READVIRTUAL_FAILURE: "target memory could not be read",
    CORDBG_E_MISSING_DATA: "the dump lacks data the DAC needs",
}


class GUID(ctypes.Structure):
    _fields_ = [("data", ctypes.c_ubyte * 16)]

    @classmethod
    def parse(cls, text: str) -> "GUID":
        g = cls()
        ctypes.memmove(g.data, uuid.UUID(text).bytes_le, 16)
        return g

    def as_uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes_le=bytes(self.data))


def hresult_text(hr: int) -> str:
    hr &= 0xFFFFFFFF
    meaning = KNOWN_HRESULTS.get(hr)
    return f"{hr:#010x} ({meaning})" if meaning else f"{hr:#010x}"


def failed(hr: int) -> bool:
    return bool(hr & 0x80000000)  # works for signed and unsigned HRESULTs alike


def slot_table(*names: str) -> dict[str, int]:
    """Vtable slot of each method, listed in IDL declaration order after IUnknown's three."""
    return {n: i + 3 for i, n in enumerate(names)}


# Argument types of the interfaces' methods, shared by the wrappers.
ADDR = ctypes.c_uint64  # CLRDATA_ADDRESS
P_ADDR = ctypes.POINTER(ctypes.c_uint64)
U32 = ctypes.c_uint32
P_U32 = ctypes.POINTER(ctypes.c_uint32)
I32 = ctypes.c_int32
P_I32 = ctypes.POINTER(ctypes.c_int32)
PTR = ctypes.c_void_p
P_PTR = ctypes.POINTER(ctypes.c_void_p)
P_WCHAR = ctypes.POINTER(ctypes.c_uint16)


class ComPtr:
    """A reference to a COM interface in the DAC; calls slots by number.

    Prototypes are cached per (slot, argtypes) so a hot call costs one ctypes call.
    """

    __slots__ = ("ptr", "name", "_vtbl", "_fns")

    def __init__(self, ptr: int, name: str) -> None:
        if not ptr:
            raise DacError(f"{name}: null interface pointer")
        self.ptr = ptr
        self.name = name
        self._vtbl = ctypes.cast(ctypes.c_void_p(ptr), ctypes.POINTER(ctypes.POINTER(ctypes.c_void_p)))[0]
        self._fns: dict[tuple[int, tuple[Any, ...]], Any] = {}

    def fn(self, slot: int, *argtypes: Any) -> Any:
        key = (slot, argtypes)
        f = self._fns.get(key)
        if f is None:
            proto = ctypes.CFUNCTYPE(HRESULT, ctypes.c_void_p, *argtypes)
            f = proto(self._vtbl[slot])
            self._fns[key] = f
        return f

    def call(self, slot: int, argtypes: tuple[Any, ...], *args: Any) -> int:
        """Call a slot and return its HRESULT as an unsigned 32-bit value."""
        with CALL_LOCK:
            return self.fn(slot, *argtypes)(self.ptr, *args) & 0xFFFFFFFF

    def check(self, what: str, slot: int, argtypes: tuple[Any, ...], *args: Any) -> int:
        hr = self.call(slot, argtypes, *args)
        if hr & 0x80000000:
            raise DacError(f"{what} failed: {hresult_text(hr)}", hr & 0xFFFFFFFF)
        return hr

    def query(self, iid: GUID, name: str) -> "ComPtr | None":
        out = ctypes.c_void_p()
        hr = self.call(0, (ctypes.POINTER(GUID), ctypes.POINTER(ctypes.c_void_p)),
                       ctypes.byref(iid), ctypes.byref(out))
        if hr & 0x80000000 or not out.value:
            return None
        return ComPtr(out.value, name)

    def release(self) -> None:
        if self.ptr:
            with CALL_LOCK:
                self.fn(2)(self.ptr)
            self.ptr = 0


def utf16_buffer(count: int) -> ctypes.Array:
    """A WCHAR buffer: the DAC's WCHAR is 2 bytes on every platform (ctypes.c_wchar is 4 on Linux)."""
    return (ctypes.c_uint16 * max(count, 1))()


def utf16_text(buf: ctypes.Array, count: int | None = None) -> str:
    raw = bytes(memoryview(buf).cast("B"))
    if count is not None:
        raw = raw[: 2 * count]
    text = raw.decode("utf-16-le", errors="replace")
    nul = text.find("\x00")
    return text if nul < 0 else text[:nul]
