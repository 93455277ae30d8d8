"""Whether the runtime counts the calls to a method's first JIT-compiled code, from what a
.NET 10 core shows without the runtime's CallCountingManager table.

The DAC gives the tier of a tiered method's first (default) native code version as
``TieredCompilationManager::GetInitialOptimizationTier``: *optimized* where the method's call
counting was disabled (an entry of the loader allocator's CallCountingManager table), else tier
0, instrumented when EEConfig's TieredPGO is on and ``TieredPGO_InstrumentOnlyHotCode`` off
(for JIT-compiled code). The .NET 9/10 descriptors describe neither the table nor EEConfig;
later descriptors do (dotnet/runtime docs/design/datacontracts/CodeVersions.md). Two facts of
the core settle it in the common case, without a guess:

- **Call counting is on.** The runtime sends a method's calls through a call-counting stub
  (``CallCountingManager::SetCodeEntryPoint``) only while it counts the calls to that code
  version; a version whose counting was disabled is called directly, final. So a method whose
  entry point (its FixupPrecode, found as the PrecodeStubs contract finds one, from the
  descriptor's ``FixupBytes``) jumps to a stub that decrements a counter and jumps on to the
  method's first code is counted: not *optimized*. The stub is recognised by what it does,
  instruction by instruction (the runtime's x64 ``CallCountingStubCode`` template:
  ``mov rax,[rip+cell]; dec word [rax]; je …; jmp [rip+cell]``) and the pointer its jump
  reads must be the method's code. An entry point that jumps straight to the code proves
  nothing (tier 0 still waiting for the tiering delay, or optimized): not answered, unless
  the method has later native code versions, which the runtime makes only from code that is
  not final (methoddescs.py).
- **The code has patchpoints.** Its debug info starts with PatchpointInfo (debuginfo.py),
  which the JIT writes only for tier-0 code that OSR may replace: not *optimized*.
- **The first tier-0 code is not instrumented.** ``TieredPGO_InstrumentOnlyHotCode`` is a
  CLRConfig value that comes from the process environment only (``DOTNET_`` or ``COMPlus_``
  prefix; default 1). The environment is libc's ``__environ`` (the runtime's PAL copies it at
  start-up, before EEConfig reads it). Absent, or 1: tier 0. Any other value: not answered.

x86-64 targets only: an AArch64 stub is other instructions (not answered there yet).
Every read is bounded; any doubt is "not known" (None), which the caller turns into its
one-line refusal.
"""
from __future__ import annotations

import struct

from ..errors import SosError
from .descriptor import export_address
from .targetdata import TargetData

# x64 instruction bytes (Intel SDM): FF /4 with ModRM 0x25 is ``jmp qword ptr [rip+disp32]``.
_JMP_RIP = b"\xff\x25"
# CallCountingStubCode (amd64): mov rax,[rip+d32] / dec word ptr [rax] / je rel8 / jmp [rip+d32]
_STUB_MOV_RAX_RIP = b"\x48\x8b\x05"
_STUB_DEC_WORD_RAX = b"\x66\xff\x08"
_STUB_JE_REL8 = 0x74
_STUB_SIZE = 18  # through the jmp to the method's code
_ENV_NAMES = (b"DOTNET_TieredPGO_InstrumentOnlyHotCode=", b"COMPlus_TieredPGO_InstrumentOnlyHotCode=")
MAX_ENV_ENTRIES = 65_536
MAX_ENV_STRING = 1 << 16
MAX_ENV_BYTES = 4 << 20  # all of the environment read: past this, damage (not answered)
MAX_PRECODE_BYTES = 256


def _fixup_precode_target(data: TargetData, entry_point: int) -> int | None:
    """Where the FixupPrecode at ``entry_point`` jumps (None: not a FixupPrecode, or unknown)."""
    desc = data.desc
    if not desc.has_global("PlatformMetadata") or not desc.has_field("PrecodeMachineDescriptor", "FixupBytes"):
        return None
    machine = desc.global_value("PlatformMetadata") + data.offset("PlatformMetadata", "PrecodeMachineDescriptor")
    size = data.u8(machine + data.offset("PrecodeMachineDescriptor", "FixupStubPrecodeSize"))
    if not 6 <= size <= MAX_PRECODE_BYTES:
        return None
    pattern = data.read(machine + data.offset("PrecodeMachineDescriptor", "FixupBytes"), size)
    ignored = data.read(machine + data.offset("PrecodeMachineDescriptor", "FixupIgnoredBytes"), size)
    code = data.read(entry_point, size)
    # PrecodeStubs version 3: the bytes not ignored are the FixupPrecode's own.
    if any(not ignored[i] and code[i] != pattern[i] for i in range(size)):
        return None
    # Its first instruction must be the jump through its data (what the pattern itself says).
    if pattern[:2] != _JMP_RIP or any(ignored[:6]):
        return None
    cell = entry_point + 6 + struct.unpack_from("<i", pattern, 2)[0]
    return data.pointer(cell)


def _counting_stub_target(data: TargetData, stub: int) -> int | None:
    """Where a call-counting stub at ``stub`` sends a call while its count lasts (None: the code
    at ``stub`` is not such a stub)."""
    code = data.read(stub, _STUB_SIZE)
    if code[0:3] != _STUB_MOV_RAX_RIP or code[7:10] != _STUB_DEC_WORD_RAX or code[10] != _STUB_JE_REL8 \
            or code[12:14] != _JMP_RIP:
        return None
    cell = stub + _STUB_SIZE + struct.unpack_from("<i", code, 14)[0]
    return data.pointer(cell)


def counts_calls(data: TargetData, entry_point: int, native_code: int) -> bool:
    """True when the method's entry point sends its calls through a call-counting stub that
    counts ``native_code``: call counting of that code version is on. False: not shown."""
    if data.target.arch != "x86_64" or not entry_point or not native_code:
        return False
    try:
        target = _fixup_precode_target(data, entry_point)
        if target is None or target == native_code:
            return False
        return _counting_stub_target(data, target) == native_code
    except SosError:
        return False


def compiled_with_patchpoints(data: TargetData, native_code: int) -> bool:
    """True when the JIT-compiled code at ``native_code`` carries patchpoint info (the flag
    byte of its debug info): the JIT writes it only for tier-0 code (with OSR), so that code
    was not compiled *optimized*, nor was its call counting disabled (the runtime disables it
    before the first code is compiled, or when the JIT switched to optimizing it)."""
    from .debuginfo import jitted_debug_info
    from .executionmanager import ExecutionManager
    if not native_code or not data.desc.contract_version("ExecutionManager"):
        return False
    try:
        block = ExecutionManager(data).code_block(native_code)
        if block is None or block.ready_to_run or not block.code_header or block.start != native_code:
            return False
        at = jitted_debug_info(data, block.code_header)
        return bool(at) and bool(data.read(at, 1)[0] & 0x01)
    except SosError:
        return False


def instruments_first_tier0(data: TargetData) -> bool | None:
    """Whether the runtime instruments a method's first tier-0 code (TieredPGO with
    ``TieredPGO_InstrumentOnlyHotCode`` 0): False when the environment leaves that setting at
    its default or sets it to 1; None when it sets it otherwise or cannot be read."""
    try:
        libc = next((m for m in data.target.modules() if m.name.startswith("libc.so")), None)
        if libc is None:
            return None
        at = export_address(data.target, libc, "__environ")
        if at is None:
            return None
        entry = data.pointer(at)
        found: dict[bytes, bytes] = {}
        total = 0
        for _ in range(MAX_ENV_ENTRIES):
            text = data.pointer(entry)
            if not text:
                break
            line = _c_string(data, text)
            if line is None:
                return None
            total += len(line) + 1
            if total > MAX_ENV_BYTES:
                return None
            for name in _ENV_NAMES:
                if line.startswith(name):
                    found.setdefault(name, line[len(name):])
            entry += data.pointer_size
        else:
            return None
    except SosError:
        return None
    # CLRConfig looks for the DOTNET_ name first, then the COMPlus_ one.
    value = next((found[name] for name in _ENV_NAMES if name in found), None)
    return False if value in (None, b"1") else None


def _c_string(data: TargetData, address: int) -> bytes | None:
    out = b""
    while len(out) < MAX_ENV_STRING:
        chunk_size = 256 - address % 256
        try:
            chunk = data.read(address, chunk_size)
        except SosError:
            return None
        end = chunk.find(b"\0")
        if end >= 0:
            return out + chunk[:end]
        out += chunk
        address += chunk_size
    return None
