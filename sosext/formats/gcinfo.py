"""The GC info the JIT writes for each method on x64 and arm64 (the runtime's GcInfoEncoder
format): which registers and stack slots can hold references, where the code can be
stopped for a GC, and how the frame is laid out.

The blob is a bit stream read least significant bit first, byte after byte. Most numbers
are variable-length: chunks of ``base`` bits, each followed by a bit saying whether another
chunk follows; signed ones are sign-extended from the last chunk. In order:

* header: one bit "fat"; a slim header then has one bit "frame pointer is rbp/fp" and the
  code length; a fat one has ten flag bits, the code length, then only what the flags say
  exist (prolog/epilog sizes for a GS cookie or a generics context, the GS cookie slot, the
  PSPSym slot (format 3), the generics context slot, the frame register, the
  edit-and-continue area, the reverse P/Invoke frame slot), then the outgoing argument
  area. Format 3 (.NET 9 and older) also has the return kind after the flags.
* the number of safe points and (fat) of interruptible ranges; each safe point as a code
  offset in ceil(log2(code length)) bits (the return address of a call); each
  range as a start delta and a length (in code offsets, divided by the instruction size on arm64).
* the slot table: registers, tracked stack slots, untracked stack slots, each kind's count
  behind a presence bit; a slot after one without flags is a delta from it (a register
  number grows by delta + 1, a stack offset by delta), after one with flags it is whole.

* which tracked slots are live at each safe point: a bit per slot per safe point, or an
  offset table into run-length coded live states.

* where in the fully interruptible ranges each tracked slot becomes live or dead: the
  ranges end to end cut into chunks of 64 code offsets, each with its possibly-live slots,
  their state at its end and the offsets where they flip.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import SosError


class GcInfoError(SosError):
    """GC info that cannot be decoded (truncated, or not GC info)."""


@dataclass(frozen=True)
class Encoding:
    """An architecture's encoding bases and scalings (gcinfotypes.h)."""

    code_length_base: int
    stack_base_register_base: int
    size_of_stack_area_base: int
    enc_preserved_area_base: int
    reverse_pinvoke_base: int
    num_registers_base: int
    num_stack_slots_base: int
    num_untracked_base: int
    prolog_base: int
    epilog_base: int
    range_delta1_base: int
    range_delta2_base: int
    register_base: int
    register_delta_base: int
    stack_slot_base: int
    stack_slot_delta_base: int
    num_safe_points_base: int
    num_ranges_base: int
    stack_slot_shift: int  # stack offsets are stored divided by the pointer size
    code_shift: int  # code offsets and length are stored divided by the instruction size
    frame_register_xor: int  # the frame register is stored xor-ed with this (rbp/fp is 0)
    return_kind_bits_slim: int
    return_kind_bits_fat: int
    registers: tuple[str, ...]
    enc_fixed_frame_base: int = 0  # arm64 only


AMD64 = Encoding(8, 3, 3, 4, 6, 2, 2, 1, 5, 3, 6, 6, 3, 2, 6, 4, 2, 1, 3, 0, 5, 2, 4,
                 ("rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12",
                  "r13", "r14", "r15"))
ARM64 = Encoding(8, 2, 3, 4, 6, 3, 2, 1, 5, 3, 6, 6, 3, 2, 6, 4, 3, 1, 3, 2, 29, 2, 4,
                 tuple(f"X{i}" for i in range(29)) + ("Fp", "Lr", "Sp"), enc_fixed_frame_base=4)
ENCODINGS = {"x86_64": AMD64, "aarch64": ARM64}

# header flags (GcInfoHeaderFlags)
IS_VARARG, HAS_GS_COOKIE, HAS_PSP_SYM = 0x1, 0x4, 0x8
GENERICS_MASK, GENERICS_MT, GENERICS_MD = 0x30, 0x10, 0x20
HAS_STACK_BASE_REGISTER, WANTS_REPORT_ONLY_LEAF, HAS_ENC_INFO, REVERSE_PINVOKE = 0x40, 0x80, 0x100, 0x200
FLAG_BITS = 10
# slot flags and stack slot bases (GcSlotFlags, GcStackSlotBase)
SLOT_INTERIOR, SLOT_PINNED, SLOT_UNTRACKED = 0x1, 0x2, 0x4
STACK_BASES = ("caller.sp", "sp", "frame")
RETURN_KINDS = {0: "Scalar", 1: "Object", 2: "ByRef", 3: "UNSET", 4: "{Scalar, Object}", 5: "{Object, Object}",
                6: "{ByRef, Object}", 8: "{Scalar, ByRef}", 9: "{Object, ByRef}", 10: "{ByRef, ByRef}"}
MAX_COUNT = 1 << 20  # more safe points, ranges or slots than this is not GC info
VARLEN_MAX_BITS = 64


class BitReader:
    """Bits of ``data``, least significant first; reading past the end raises GcInfoError."""

    def __init__(self, data: bytes) -> None:
        self.value = int.from_bytes(data, "little")
        self.size = len(data) * 8
        self.pos = 0

    def read(self, n: int) -> int:
        if self.pos + n > self.size:
            raise GcInfoError("the GC info ends early")
        v = (self.value >> self.pos) & ((1 << n) - 1)
        self.pos += n
        return v

    def _chunks(self, base: int) -> tuple[int, int]:
        """A variable-length number's bits and how many there are."""
        result, shift = 0, 0
        while True:
            chunk = self.read(base + 1)
            result |= (chunk & ((1 << base) - 1)) << shift
            shift += base
            if not chunk >> base:
                return result, shift
            if shift > VARLEN_MAX_BITS:
                raise GcInfoError("a number in the GC info does not end")

    def unsigned(self, base: int) -> int:
        return self._chunks(base)[0]

    def signed(self, base: int) -> int:
        """Sign-extended from the top bit of the last chunk."""
        result, bits = self._chunks(base)
        return result - (1 << bits) if result >> (bits - 1) & 1 else result


@dataclass(frozen=True, slots=True)
class GcSlot:
    register: int | None  # a register number, or None for a stack slot
    stack_base: int  # 0 caller.sp, 1 sp, 2 the frame register
    offset: int  # stack slots: bytes from the base
    flags: int
    untracked: bool

    def text(self, enc: Encoding, frame_register: int | None) -> str:
        """The slot as SOS's GC dump names it: ``rax``, ``rbp-10``, ``sp+20``, ``caller.sp-8``."""
        if self.register is not None:
            name = enc.registers[self.register] if self.register < len(enc.registers) else "???"
        else:
            base = STACK_BASES[self.stack_base] if self.stack_base < 3 else "???"
            if self.stack_base == 2:
                base = enc.registers[frame_register] if frame_register is not None and \
                    frame_register < len(enc.registers) else "???"
            sign = "-" if self.offset < 0 else "+"
            name = f"{base}{sign}{abs(self.offset):x}"
        return name + "".join(w for bit, w in ((SLOT_PINNED, "(pinned)"), (SLOT_INTERIOR, "(interior)"))
                              if self.flags & bit)


@dataclass
class GcInfo:
    arch: str
    version: int
    fat: bool
    flags: int
    code_length: int
    return_kind: int | None = None
    prolog_size: int = 0
    valid_range_end: int = 0
    gs_cookie: int | None = None
    psp_sym: int | None = None
    generics_context: int | None = None
    frame_register: int | None = None
    enc_preserved_area: int | None = None
    reverse_pinvoke_frame: int | None = None
    stack_parameter_area: int = 0
    safe_points: list[int] = field(default_factory=list)  # code offsets (calls' return addresses)
    interruptible_ranges: list[tuple[int, int]] = field(default_factory=list)  # [start, end)
    slots: list[GcSlot] = field(default_factory=list)  # registers, tracked stack slots, untracked ones
    live_at_safe_points: list[list[int]] = field(default_factory=list)  # per safe point: tracked slot indexes
    # in the fully interruptible ranges: (code offset, tracked slot index, becomes live)
    lifetimes: list[tuple[int, int, bool]] = field(default_factory=list)
    size_bits: int = 0  # how far into the blob the decoded part reaches

    @property
    def encoding(self) -> Encoding:
        return ENCODINGS[self.arch]

    def lines(self) -> list[str]:
        """The header as SOS's GC dump prints it, then the safe points, the interruptible
        ranges and the slot table."""
        enc = self.encoding
        out = []
        if self.generics_context is not None or self.gs_cookie is None:
            out.append(f"Prolog size: {self.prolog_size}")
        if self.gs_cookie is None:
            out.append("GS cookie: <none>")
        else:
            out.append(f"GS cookie: caller.sp{_signed_hex(self.gs_cookie)}")
            out.append(f"GS cookie valid range: [{self.prolog_size:x};{self.valid_range_end:x})")
        psp = "<none>" if self.psp_sym is None else f"initial.sp{_signed_hex(self.psp_sym)}"
        out.append(f"PSPSym: {psp}")
        ctx = "<none>" if self.generics_context is None else f"caller.sp{_signed_hex(self.generics_context)}"
        out.append(f"Generics inst context: {ctx}")
        out.append(f"PSP slot: {'<none>' if self.psp_sym is None else f'caller.sp{_signed_hex(self.psp_sym)}'}")
        if self.generics_context is None:
            out.append("GenericInst slot: <none>")
        else:
            kind = {GENERICS_MD: "GENERIC_PARAM_CONTEXT_METHODDESC", GENERICS_MT: "GENERIC_PARAM_CONTEXT_METHODHANDLE"}
            out.append(f"GenericInst slot: caller.sp{_signed_hex(self.generics_context)} "
                       f"({kind.get(self.flags & GENERICS_MASK, 'GENERIC_PARAM_CONTEXT_THIS')})")
        out.append(f"Varargs: {1 if self.flags & IS_VARARG else 0}")
        frame = "<none>" if self.frame_register is None else (
            enc.registers[self.frame_register] if self.frame_register < len(enc.registers) else "???")
        out.append(f"Frame pointer: {frame}")
        if self.arch == "x86_64":
            out.append(f"Wants Report Only Leaf: {1 if self.flags & WANTS_REPORT_ONLY_LEAF else 0}")
        else:
            out.append(f"Has tailcalls: {1 if self.flags & WANTS_REPORT_ONLY_LEAF else 0}")
        out.append(f"Size of parameter area: {self.stack_parameter_area:x}")
        if self.return_kind is not None:
            out.append(f"Return Kind: {RETURN_KINDS.get(self.return_kind, '!Impossible!')}")
        out.append(f"Code size: {self.code_length:x}")
        out.extend(self.body_lines())
        return [ln.rstrip() for ln in out]

    def body_lines(self) -> list[str]:
        """The untracked slots, then by code offset: each safe point with its live slots, each
        interruptible range with the offsets where slots become live or dead (what clru
        -gcinfo puts before the instructions)."""
        enc = self.encoding
        untracked = [s.text(enc, self.frame_register) for s in reversed(self.slots) if s.untracked]
        tracked = [s.text(enc, self.frame_register) for s in self.slots if not s.untracked]
        out = ["Untracked: " + " ".join(f"+{t}" for t in untracked)] if untracked else []
        by_offset: list[tuple[int, int, str]] = []  # (offset, order at that offset, line)
        # SOS lists a line's slots from the highest slot number down (the slots that die first,
        # then those that become live), each after a space.
        for offset, live in zip(self.safe_points, self.live_at_safe_points):
            slots = "".join(f" +{tracked[i]}" for i in sorted(live, reverse=True))
            if self.version < 4 and self.arch == "x86_64":
                # Before .NET 10 a safe point is recorded at the call's last byte: SOS names the
                # return address the safe point and lists the live slots at the recorded offset.
                by_offset.append((offset, 1, f"{offset + 1:08x} is a safepoint: "))
                if slots:
                    by_offset.append((offset, 2, f"{offset:08x}{slots}"))
                continue
            by_offset.append((offset, 1, f"{offset:08x} is a safepoint: " + slots))
        changes: dict[int, list[tuple[int, str]]] = {}
        for offset, slot, live in self.lifetimes:
            changes.setdefault(offset, []).append((slot, ("+" if live else "-") + tracked[slot]))
        for a, b in self.interruptible_ranges:
            by_offset.append((a, 0, f"{a:08x} interruptible"))
            # The slots still live at a range's end die there, after its "not interruptible".
            by_offset.extend((o, 1, f"{o:08x} " + " ".join(t for _s, t in sorted(changes[o], key=lambda c: (
                c[1][0] == "+", -c[0])))) for o in changes if a <= o <= b)
            by_offset.append((b, 0, f"{b:08x} not interruptible"))
        by_offset.sort(key=lambda x: (x[0], x[1]))
        return [ln.rstrip() for ln in out + [line for _o, _k, line in by_offset]]


def _signed_hex(v: int) -> str:
    return f"-{-v:x}" if v < 0 else f"+{v:x}"


def gc_info_version(runtime_major: int) -> int:
    """The GC info format a runtime writes: 4 from .NET 10 (no return kind, no PSPSym), 3 before."""
    return 4 if runtime_major >= 10 else 3


def decode_gcinfo(data: bytes, arch: str, version: int = 4) -> GcInfo:
    """Decode the header, safe points, interruptible ranges and slot table of a GC info blob."""
    r = BitReader(data)
    info = _header(r, arch, version)
    enc = info.encoding
    info.safe_points, info.interruptible_ranges = _safe_points_and_ranges(r, enc, info)
    info.slots = _slot_table(r, enc)
    tracked = sum(1 for sl in info.slots if not sl.untracked)
    info.live_at_safe_points = _live_at_safe_points(r, len(info.safe_points), tracked)
    info.lifetimes = _lifetimes(r, info, tracked)
    info.size_bits = r.pos
    return info


def decode_gcinfo_header(data: bytes, arch: str, version: int = 4) -> GcInfo:
    """Decode only the header of a GC info blob (flags, code length, the special stack slots,
    the frame register): what a stack walk asks of it; a few dozen bytes hold it."""
    r = BitReader(data)
    info = _header(r, arch, version)
    info.size_bits = r.pos
    return info


def _header(r: BitReader, arch: str, version: int) -> GcInfo:
    enc = ENCODINGS.get(arch)
    if enc is None:
        raise GcInfoError(f"no GC info decoder for {arch}")
    fat = bool(r.read(1))
    info = GcInfo(arch, version, fat, 0, 0)
    if not fat:
        if r.read(1):
            info.flags = HAS_STACK_BASE_REGISTER
            info.frame_register = 0 ^ enc.frame_register_xor
        if version < 4:
            info.return_kind = r.read(enc.return_kind_bits_slim)
        info.code_length = r.unsigned(enc.code_length_base) << enc.code_shift
    else:
        _fat_header(r, enc, info)
    return info


POINTER_SIZE_BASE, RLE_SKIP_BASE, RLE_RUN_BASE = 3, 4, 2


def _slot_set(r: BitReader, num_tracked: int) -> list[int]:
    """A set of tracked slots: a 0 bit then one bit per slot, or a 1 bit then runs (a run of
    slots not in the set, then alternately runs in and out; which of the two run-length bases
    the out-runs use is the next bit)."""
    if not r.read(1):
        bits = r.read(num_tracked)
        return [i for i in range(num_tracked) if bits >> i & 1]
    members: list[int] = []
    skip = not r.read(1)
    done = r.unsigned(RLE_SKIP_BASE if skip else RLE_RUN_BASE)  # the first run: not in the set
    inside = True
    skip = not skip
    while done < num_tracked:
        count = r.unsigned(RLE_SKIP_BASE if skip else RLE_RUN_BASE) + 1
        if inside:
            members.extend(range(done, min(done + count, num_tracked)))
        done += count
        skip, inside = not skip, not inside
    return members


def _live_at_safe_points(r: BitReader, num_safe_points: int, num_tracked: int) -> list[list[int]]:
    """For each safe point, the indexes of the tracked slots live there.

    Either one bit per tracked slot per safe point, in a row; or (a leading 1 bit) a table of
    bit offsets, one per safe point, into byte-aligned live states, each a slot set."""
    if not num_tracked or not num_safe_points:
        return [[] for _ in range(num_safe_points)]
    if not r.read(1):
        out = []
        for _ in range(num_safe_points):
            bits = r.read(num_tracked)
            out.append([i for i in range(num_tracked) if bits >> i & 1])
        return out
    width = r.unsigned(POINTER_SIZE_BASE) + 1
    if width > 32:
        raise GcInfoError(f"live-state offsets of {width} bits: not GC info")
    table = r.pos
    offsets = [r.read(width) for _ in range(num_safe_points)]
    start = (table + num_safe_points * width + 7) & ~7
    out = []
    for off in offsets:
        r.pos = start + off
        out.append(_slot_set(r, num_tracked))
    # what follows is found the runtime's way: past one bit per slot per safe point from the table
    r.pos = table + num_safe_points * num_tracked
    return out


CHUNK = 64  # code offsets (normalized) per chunk of lifetime transitions
CHUNK_LOG2 = 6
MAX_CHUNKS = 1 << 16


def _lifetimes(r: BitReader, info: "GcInfo", num_tracked: int) -> list[tuple[int, int, bool]]:
    """(code offset, tracked slot index, becomes live) where, inside the fully interruptible
    ranges, a slot's liveness changes; at the first offset of each range, every slot live there.

    The ranges, joined end to end, are cut into chunks of 64 code offsets. A table gives each
    chunk's bit position (0: no data, the last chunk with data holds at its end). A chunk
    holds the set of slots that can be live in it, their liveness at its end, and per slot the
    offsets (1..63) from which it flips: at offset p a slot's liveness is its end state flipped
    once per listed offset above p."""
    enc = info.encoding
    ranges = [(a >> enc.code_shift, b >> enc.code_shift) for a, b in info.interruptible_ranges]
    length = sum(b - a for a, b in ranges)
    if not ranges or not num_tracked:
        return []
    num_chunks = (length + CHUNK - 1) // CHUNK
    if num_chunks > MAX_CHUNKS:
        raise GcInfoError(f"{num_chunks} lifetime chunks: not GC info")
    width = r.unsigned(POINTER_SIZE_BASE)
    if not width:
        return []
    if width > 32:
        raise GcInfoError(f"chunk pointers of {width} bits: not GC info")
    table = r.pos
    pointers = [r.read(width) for _ in range(num_chunks)]
    start = (table + num_chunks * width + 7) & ~7
    live_at: list[frozenset[int]] = []  # per pseudo offset (the ranges end to end)
    carried: frozenset[int] = frozenset()
    for chunk, pointer in enumerate(pointers):
        size = min(CHUNK, length - chunk * CHUNK)
        if not pointer:
            live_at.extend([carried] * size)
            continue
        r.pos = start + pointer - 1
        slots = _slot_set(r, num_tracked)
        finals = [bool(r.read(1)) for _ in slots]
        flips = []
        for _ in slots:
            offsets = []
            while r.read(1):
                offsets.append(r.read(CHUNK_LOG2))
            flips.append(offsets)
        for p in range(size):
            live_at.append(frozenset(slot for slot, final, offs in zip(slots, finals, flips)
                                     if final ^ (sum(1 for t in offs if t > p) & 1 == 1)))
        carried = frozenset(slot for slot, final in zip(slots, finals) if final)
    out: list[tuple[int, int, bool]] = []
    pseudo = 0
    for a, b in ranges:
        before: frozenset[int] = frozenset()
        for p in range(b - a):
            now = live_at[pseudo + p]
            offset = (a + p) << enc.code_shift
            out.extend((offset, i, True) for i in sorted(now - before))
            out.extend((offset, i, False) for i in sorted(before - now))
            before = now
        # Outside the range nothing is tracked: what is live at its end dies at its end.
        out.extend((b << enc.code_shift, i, False) for i in sorted(before))
        pseudo += b - a
    return out


def _fat_header(r: BitReader, enc: Encoding, info: GcInfo) -> None:
    flags = info.flags = r.read(FLAG_BITS)
    if info.version < 4:
        info.return_kind = r.read(enc.return_kind_bits_fat)
    info.code_length = r.unsigned(enc.code_length_base) << enc.code_shift
    if flags & HAS_GS_COOKIE:
        info.prolog_size = (r.unsigned(enc.prolog_base) + 1) << enc.code_shift
        epilog = r.unsigned(enc.epilog_base)
        info.valid_range_end = ((info.code_length >> enc.code_shift) - epilog) << enc.code_shift
    elif flags & GENERICS_MASK:
        info.prolog_size = (r.unsigned(enc.prolog_base) + 1) << enc.code_shift
        info.valid_range_end = info.prolog_size + 1
    if flags & HAS_GS_COOKIE:
        info.gs_cookie = r.signed(6) << enc.stack_slot_shift
    if info.version < 4 and flags & HAS_PSP_SYM:
        info.psp_sym = r.signed(6) << enc.stack_slot_shift
    if flags & GENERICS_MASK:
        info.generics_context = r.signed(6) << enc.stack_slot_shift
    if flags & HAS_STACK_BASE_REGISTER:
        info.frame_register = r.unsigned(enc.stack_base_register_base) ^ enc.frame_register_xor
    if flags & HAS_ENC_INFO:
        info.enc_preserved_area = r.unsigned(enc.enc_preserved_area_base)
        if enc.enc_fixed_frame_base:
            r.unsigned(enc.enc_fixed_frame_base)
    if flags & REVERSE_PINVOKE:
        info.reverse_pinvoke_frame = r.signed(enc.reverse_pinvoke_base) << enc.stack_slot_shift
    info.stack_parameter_area = r.unsigned(enc.size_of_stack_area_base) << enc.stack_slot_shift


def _count(n: int, what: str) -> int:
    if n > MAX_COUNT:
        raise GcInfoError(f"{n} {what}: not GC info")
    return n


def ceil_log2(x: int) -> int:
    return (x - 1).bit_length() if x > 1 else 0


def _safe_points_and_ranges(r: BitReader, enc: Encoding, info: GcInfo) -> tuple[list[int], list[tuple[int, int]]]:
    num_safe_points = _count(r.unsigned(enc.num_safe_points_base), "safe points")
    num_ranges = _count(r.unsigned(enc.num_ranges_base), "interruptible ranges") if info.fat else 0
    bits = ceil_log2(info.code_length >> enc.code_shift)
    # each the offset of a call's return address (what the x64 JIT of .NET 10 records: checked
    # against the disassembly by tests/test_parity_code.py)
    safe_points = [(r.read(bits) if bits else 0) << enc.code_shift for _ in range(num_safe_points)]
    ranges = []
    last_stop = 0
    for _ in range(num_ranges):
        start = last_stop + r.unsigned(enc.range_delta1_base)
        stop = start + r.unsigned(enc.range_delta2_base) + 1
        ranges.append((start << enc.code_shift, stop << enc.code_shift))
        last_stop = stop
    return safe_points, ranges


def _slot_table(r: BitReader, enc: Encoding) -> list[GcSlot]:
    num_registers = _count(r.unsigned(enc.num_registers_base), "registers") if r.read(1) else 0
    num_stack = num_untracked = 0
    if r.read(1):
        num_stack = _count(r.unsigned(enc.num_stack_slots_base), "stack slots")
        num_untracked = _count(r.unsigned(enc.num_untracked_base), "untracked slots")
    slots: list[GcSlot] = []
    if num_registers:
        reg = r.unsigned(enc.register_base)
        flags = r.read(2)
        slots.append(GcSlot(reg, 0, 0, flags, False))
        for _ in range(1, num_registers):
            if flags:
                reg = r.unsigned(enc.register_base)
                flags = r.read(2)
            else:
                reg += r.unsigned(enc.register_delta_base) + 1
            slots.append(GcSlot(reg, 0, 0, flags, False))
    for count, untracked in ((num_stack, False), (num_untracked, True)):
        if not count:
            continue
        base = r.read(2)
        norm = r.signed(enc.stack_slot_base)
        flags = r.read(2)
        slots.append(GcSlot(None, base, norm << enc.stack_slot_shift, flags, untracked))
        for _ in range(1, count):
            base = r.read(2)
            if flags:  # after a slot with flags: a whole offset and flags of its own
                norm = r.signed(enc.stack_slot_base)
                flags = r.read(2)
            else:  # after one without: an increase of the offset, the same (no) flags
                norm += r.unsigned(enc.stack_slot_delta_base)
            slots.append(GcSlot(None, base, norm << enc.stack_slot_shift, flags, untracked))
    return slots
