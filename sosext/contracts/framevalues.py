"""Arguments and locals of a managed frame, as the DAC's IXCLRDataFrame gives them (clrstack -a).

The DAC (debug/daccess/stack.cpp, ClrDataFrame::ValueFromDebugInfo) counts a method's
arguments from its signature (``this`` first) and its locals from the IL header's local
signature; each value's place comes from the JIT's native variable info (debuginfo.py): the
first entry for the variable's number (arguments first, then locals) whose native range
holds the frame's code offset. A register's value is the frame's CONTEXT's (the walk's
registers); a stack place is a register of the CONTEXT plus an offset. A pointer-sized
place is read whole, except for a primitive type, which reads only its own size.
Where the runtime has no place for a value, it has no data (SOS: ``<no data>``).
"""
from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from ..errors import ContractError, MemoryReadError, ReaderUnsupported, SosError
from ..formats.metadata.errors import MetadataError
from ..formats.metadata.signatures import SIG_GENERIC, ElementType as ET, MethodSig, SigType
from ..readers.stacks import FrameValue
from .debuginfo import (VLT_FIXED_VA, VLT_FPSTK, VLT_INVALID, VLT_REG, VLT_REG_BYREF, VLT_REG_FP, VLT_REG_REG,
                        VLT_REG_STK, VLT_STK, VLT_STK2, VLT_STK_BYREF, VLT_STK_REG, NativeVar, code_vars)
from .methoddescs import MC_ARRAY, MC_DYNAMIC, MC_IL, MC_INSTANTIATED

if TYPE_CHECKING:
    from .executionmanager import CodeBlock, ExecutionManager
    from .typeanswers import TypeAnswers

# ICorDebugInfo::RegNum -> the walk's register names.
_REGISTERS = {
    "x86_64": ("rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12", "r13", "r14",
               "r15", "rsp"),  # 16: REGNUM_AMBIENT_SP, the CONTEXT's Rsp
    "aarch64": tuple(f"x{i}" for i in range(29)) + ("x29", "x30", "sp", "pc", "sp"),  # 33: AMBIENT_SP
}
# Sizes of the primitive element types (CorTypeInfo's primitives); other types read a whole place.
_PRIMITIVE_SIZES = {ET.BOOLEAN: 1, ET.CHAR: 2, ET.I1: 1, ET.U1: 1, ET.I2: 2, ET.U2: 2, ET.I4: 4, ET.U4: 4,
                    ET.I8: 8, ET.U8: 8, ET.R4: 4, ET.R8: 8, ET.I: 8, ET.U: 8}


class FrameValues:
    """Values of one managed frame (``block`` the code it runs, ``regs`` its CONTEXT's registers)."""

    def __init__(self, types: "TypeAnswers", manager: "ExecutionManager", arch: str, block: "CodeBlock", ip: int,
                 regs: dict[str, int], read_vars: bool = True) -> None:
        self.types = types
        self.methods = types.methods
        self.target = types.data.target
        self.registers = _REGISTERS.get(arch)
        if self.registers is None:
            raise ReaderUnsupported(f"the contracts reader cannot answer arguments and locals on {arch} yet; "
                                    "--reader dac (or setreader dac) does")
        self.regs = regs
        self.md = self.methods.method_desc(block.method_desc)
        self.module = self.methods.module(self.md)
        self.metadata = None
        if self.md.classification in (MC_DYNAMIC, MC_ARRAY):
            # an IL stub, a DynamicMethod or an array's accessor: its signature is stored with
            # it, its types may be TypeHandles (ELEMENT_TYPE_INTERNAL); no metadata names its
            # parameters
            blob = self.methods.stored_signature(self.md)
            if blob is None:
                raise ContractError(f"MethodDesc {self.md.address:#x}: a dynamic method without a signature")
            self.signature = _StoredSig(blob, types.data.pointer_size).method()
        elif self.md.token & 0xFFFFFF:  # IL, generic instantiations, P/Invoke, FCalls …
            self.metadata = types.metadata.metadata(self.module)
            if self.metadata is None:
                raise ContractError(f"MethodDesc {self.md.address:#x}: its module has no readable metadata")
            try:
                self.signature = self.metadata.method(self.md.token).signature
            except MetadataError as e:
                raise ContractError(f"MethodDesc {self.md.address:#x}: {e}") from None
        else:
            raise ContractError(f"MethodDesc {self.md.address:#x} has neither a token nor a stored signature")
        self.manager = manager
        # How many IL arguments and locals the method has (what a PatchpointInfo's count must cover).
        try:
            self.il_variables: int | None = self.count + len(self._local_types() or ())
        except (MemoryReadError, ContractError):
            self.il_variables = None
        # The DAC reads the variable infos when asked for the first value: where they cannot be
        # read, its first answer fails and SOS lists nothing more of the frame.
        self.vars: list[NativeVar] | None = None
        if read_vars:
            try:
                self.vars = self._vars(block)
            except (MemoryReadError, ContractError):
                self.vars = None
        self.code_offset = (ip - block.start) & 0xFFFFFFFF

    def _vars(self, block: "CodeBlock") -> list[NativeVar]:
        found = code_vars(self.manager, block, self.il_variables)
        if found is None:
            raise _unsupported("arguments and locals of a tier-0 method with patchpoints (its debug info starts with a "
                               "PatchpointInfo this runtime's descriptor does not size, and no known layout of it fits)")
        return found

    # -- the questions ----------------------------------------------------------------------

    @property
    def count(self) -> int:
        return len(self.signature.params) + self.signature.has_this

    def arguments(self) -> tuple[FrameValue, ...]:
        """Every argument (``this`` first); none once the variable infos cannot be read."""
        if self.vars is None:
            return ()
        sig = self.signature
        names = self._param_names()
        out = []
        if sig.has_this:
            out.append(self._value("this", None, 0))
        for i, param in enumerate(sig.params):
            out.append(self._value(names[i] if i < len(names) else "", param, len(out)))
        return tuple(out)

    def locals(self) -> tuple[FrameValue, ...] | None:
        """None where the DAC cannot count them (no local signature: a tiny IL header)."""
        types = self._local_types()
        if types is None:
            return None
        if self.vars is None:
            return ()
        return tuple(self._value("", t, self.count + i) for i, t in enumerate(types))

    def _param_names(self) -> list[str]:
        if self.metadata is None:
            return []
        try:
            return self.metadata.param_names(self.md.token)
        except MetadataError:
            return []

    def _local_types(self) -> tuple[SigType, ...] | None:
        if self.md.classification not in (MC_IL, MC_INSTANTIATED) or self.metadata is None:
            return None  # not IL: the DAC counts no locals
        header = self.methods.il_header(self.md)
        if not header:
            return None
        raw = self.target.read(header, 12)
        if raw[0] & 0x3 != 0x3:  # a tiny header has no local signature
            return None
        (token,) = struct.unpack_from("<I", raw, 8)
        if token >> 24 != 0x11 or not token & 0xFFFFFF:
            return None
        try:
            sig = self.metadata.stand_alone_sig(token)
        except MetadataError as e:
            raise ContractError(f"MethodDesc {self.md.address:#x}: {e}") from None
        if not isinstance(sig, tuple):
            raise ContractError(f"MethodDesc {self.md.address:#x}: its local signature is a method signature")
        return sig

    # -- one value --------------------------------------------------------------------------

    def _value(self, name: str, sig: SigType | None, number: int) -> FrameValue:
        var = next((v for v in self.vars or () if v.start <= self.code_offset <= v.end and v.number == number
                    and v.kind != VLT_INVALID), None)
        places = self._places(var) if var is not None else []
        if not places:
            return FrameValue(name, None, False, None)
        primitive = self._primitive_size(sig) if sig is not None else None
        if primitive is not None and len(places) == 1 and primitive < places[0][2]:
            places = [(places[0][0], places[0][1], primitive)]
        data = b""
        ok = True
        for in_register, where, size in places:
            if in_register:
                data += where.to_bytes(8, "little")[:size]
                continue
            try:
                data += bytes(self.target.read(where, size))
            except SosError:
                ok = False
        single = places[0] if len(places) == 1 else None
        location = single[1] if single is not None and not single[0] else None
        in_register = single is not None and single[0]
        return FrameValue(name, location, in_register, data if ok else None, read_failed=not ok)

    def _register(self, number: int) -> int:
        if number >= len(self.registers):
            raise ContractError(f"debug info names register {number}")
        return self.regs.get(self.registers[number], 0)

    def _places(self, var: NativeVar) -> list[tuple[bool, int, int]]:
        """(in a register, the register's value or the memory address, size) per piece, as the
        DAC's NativeVarLocations lays them out."""
        k = var.kind
        if k == VLT_REG:
            return [(True, self._register(var.registers[0]), 8)]
        if k == VLT_STK:
            return [(False, (self._register(var.base_register) + var.offset) & 0xFFFFFFFFFFFFFFFF, 8)]
        if k == VLT_STK2:
            return [(False, (self._register(var.base_register) + var.offset) & 0xFFFFFFFFFFFFFFFF, 16)]
        if k == VLT_REG_REG:
            return [(True, self._register(var.registers[0]), 8), (True, self._register(var.registers[1]), 8)]
        if k == VLT_REG_STK:
            return [(True, self._register(var.registers[0]), 8),
                    (False, (self._register(var.base_register) + var.offset) & 0xFFFFFFFFFFFFFFFF, 8)]
        if k == VLT_STK_REG:
            return [(False, (self._register(var.base_register) + var.offset) & 0xFFFFFFFFFFFFFFFF, 8),
                    (True, self._register(var.registers[0]), 8)]
        if k in (VLT_REG_FP, VLT_FPSTK, VLT_FIXED_VA):
            # the DAC has no place for them (NativeVarLocations knows no floating-point
            # register): SOS prints <no data>, and ICorDebug's error in clrstack -i
            return []
        # by-reference places (the DAC dereferences them in its own memory)
        what = {VLT_REG_BYREF: "passed by reference in a register (the ABI's implicit by-reference place)",
                VLT_STK_BYREF: "passed by reference on the stack (the ABI's implicit by-reference place)"}.get(
                    k, f"in a place of kind {k}")
        raise _unsupported(f"an argument or local {what}")

    def _primitive_size(self, sig: SigType) -> int | None:
        """The size of a primitive type (the DAC reads only that much of a place); None for
        any other type."""
        et = sig.element_type
        if et in _PRIMITIVE_SIZES:
            return _PRIMITIVE_SIZES[et]
        if et == ET.INTERNAL and sig.token:
            return _PRIMITIVE_SIZES.get(self.types.rts.signature_element_type(sig.token))
        if et in (ET.VAR, ET.MVAR):
            args = (self.types.rts.instantiation(self.md.method_table) if et == ET.VAR
                    else self.methods.method_instantiation(self.md))
            if sig.index >= len(args):
                return None
            return _PRIMITIVE_SIZES.get(self.types.rts.signature_element_type(args[sig.index]))
        return None


class _StoredSig:
    """A runtime-stored method signature: ECMA-335's, plus ELEMENT_TYPE_INTERNAL (a TypeHandle
    inline). Only what the values need is kept: each parameter's outer type."""

    def __init__(self, blob: bytes, pointer_size: int) -> None:
        self.blob, self.pos, self.pointer_size = blob, 0, pointer_size

    def _byte(self) -> int:
        if self.pos >= len(self.blob):
            raise ContractError("a stored method signature ends early")
        b = self.blob[self.pos]
        self.pos += 1
        return b

    def _compressed(self) -> int:
        b = self._byte()
        if not b & 0x80:
            return b
        if not b & 0x40:
            return (b & 0x3F) << 8 | self._byte()
        return (b & 0x1F) << 24 | self._byte() << 16 | self._byte() << 8 | self._byte()

    def method(self) -> MethodSig:
        convention = self._byte()
        generic = self._compressed() if convention & SIG_GENERIC else 0
        count = self._compressed()
        if count > 0xFFFF:
            raise ContractError(f"a stored method signature of {count} parameters")
        returns = self._type(0)
        params = tuple(self._type(0) for _ in range(count))
        return MethodSig(convention, generic, returns, params)

    def _type(self, depth: int) -> SigType:
        if depth > 64:
            raise ContractError("a stored method signature nests too deeply")
        et = self._byte()
        while et in (ET.CMOD_REQD, ET.CMOD_OPT, ET.PINNED, ET.SENTINEL):
            if et in (ET.CMOD_REQD, ET.CMOD_OPT):
                self._compressed()
            et = self._byte()
        if et in (ET.PTR, ET.BYREF, ET.SZARRAY):
            self._type(depth + 1)
        elif et in (ET.VALUETYPE, ET.CLASS, ET.VAR, ET.MVAR):
            return SigType(et, index=self._compressed())
        elif et == ET.ARRAY:
            self._type(depth + 1)
            self._compressed()
            for _ in range(self._compressed()):
                self._compressed()
            for _ in range(self._compressed()):
                self._compressed()
        elif et == ET.GENERICINST:
            self._byte()
            self._compressed()
            for _ in range(self._compressed()):
                self._type(depth + 1)
        elif et == ET.FNPTR:
            self.method()
        elif et == ET.INTERNAL:
            raw = self.blob[self.pos:self.pos + self.pointer_size]
            if len(raw) != self.pointer_size:
                raise ContractError("a stored method signature ends early")
            self.pos += self.pointer_size
            return SigType(et, token=int.from_bytes(raw, "little"))
        return SigType(et)


def _unsupported(what: str) -> ReaderUnsupported:
    return ReaderUnsupported(f"the contracts reader cannot answer {what} yet; --reader dac (or setreader dac) does")
