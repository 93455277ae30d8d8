"""The DAC's data structures as ctypes structures, built from the neutral records.

``readers/records.py`` defines every record (field names and C layout, in header order); this
module builds, for each, the matching ctypes Structure (as ``record.C``), checks its size
against the header's static_assert, and gives the record ``from_c`` to convert a filled
structure into the record of plain Python ints. Only the DAC reader needs ctypes.
"""
import ctypes
from typing import Any

from ..readers.records import *  # noqa: F401,F403 - the records, under their old home too
from ..readers.records import LAYOUTS

_CTYPES = {"Q": ctypes.c_uint64, "I": ctypes.c_uint32, "i": ctypes.c_int32, "H": ctypes.c_uint16}
_RECORD_OF_C: dict[type, Any] = {}  # ctypes Structure -> record class, for nested structs


def _convert(v: Any) -> Any:
    if isinstance(v, ctypes.Array):
        return tuple(_convert(x) for x in v)
    rec = _RECORD_OF_C.get(type(v))
    return rec.from_c(v) if rec is not None else v


def _ctype(spec: Any) -> Any:
    if isinstance(spec, tuple):
        element, count = spec
        return _ctype(element) * count
    if isinstance(spec, str):
        return _CTYPES[spec]
    return spec.C  # a nested record, built before (records are defined in dependency order)


def _build(rec: Any, size: int, layout: list) -> None:
    cstruct = type(rec.__name__ + "C", (ctypes.Structure,), {"_fields_": [(n, _ctype(t)) for n, t in layout]})
    if ctypes.sizeof(cstruct) != size:
        raise AssertionError(f"{rec.__name__}: size {ctypes.sizeof(cstruct):#x}, header says {size:#x}")
    names = [n for n, _ in layout]

    def from_c(c: Any, _names: list[str] = names) -> Any:
        return rec(*[_convert(getattr(c, n)) for n in _names])

    rec.C = cstruct
    rec.from_c = staticmethod(from_c)
    _RECORD_OF_C[cstruct] = rec


for _rec, (_size, _layout) in LAYOUTS.items():
    _build(_rec, _size, _layout)
