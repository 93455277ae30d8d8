"""The code formats on fabricated bytes: IL bodies and instructions (ECMA-335 II.25.4,
III.1), the GC info bit stream, and SOS's signature text. Real code is in test_parity_code.py;
here hypothesis writes bodies and GC info with an encoder of the test's own and checks that
decoding gives back what was written, and that any bytes at all end in a result or one
error of the format's own kind.
"""
from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from sosext.formats.gcinfo import AMD64, ARM64, GcInfoError, GcSlot, decode_gcinfo, decode_gcinfo_header
from sosext.clr.code.il import CLAUSE_FILTER, CLAUSE_FINALLY, ILClause, ILError, Operand, decode, encode, opcodes, parse_body
from sosext.clr.code.iltext import il_lines
from sosext.formats.metadata import SigType
from sosext.formats.metadata.signatures import MethodSig
from sosext.clr.typesystem.sigtext import element_text, method_sig_text

OPCODES = opcodes()


# -- IL --------------------------------------------------------------------------------------

def test_opcode_table_has_every_ecma_opcode() -> None:
    assert OPCODES[0x28] == ("call", Operand.TOKEN) and OPCODES[0xFE06] == ("ldftn", Operand.TOKEN)
    assert OPCODES[0x45][1] is Operand.SWITCH and OPCODES[0xDE] == ("leave.s", Operand.BR8)


@st.composite
def instruction_lists(draw):  # type: ignore[no-untyped-def]
    n = draw(st.integers(0, 40))
    out = []
    for _ in range(n):
        op = draw(st.sampled_from(sorted(OPCODES)))
        kind = OPCODES[op][1]
        value: int | float | None = None
        targets: tuple[int, ...] = ()
        if kind is Operand.VAR8:
            value = draw(st.integers(0, 255))
        elif kind is Operand.I8:
            value = draw(st.integers(-128, 127))
        elif kind is Operand.VAR16:
            value = draw(st.integers(0, 0xFFFF))
        elif kind is Operand.I32:
            value = draw(st.integers(-2**31, 2**31 - 1))
        elif kind is Operand.I64:
            value = draw(st.integers(-2**63, 2**63 - 1))
        elif kind is Operand.TOKEN:
            value = draw(st.integers(0, 0xFFFFFFFF))
        elif kind is Operand.R32:
            value = struct.unpack("<f", struct.pack("<f", draw(st.floats(width=32, allow_nan=False))))[0]
        elif kind is Operand.R64:
            value = draw(st.floats(allow_nan=False))
        elif kind in (Operand.BR8, Operand.BR32, Operand.SWITCH):
            value = None  # targets are fixed up below, once offsets are known
        out.append([op, value, targets, kind])
    return out


def _with_targets(draw_targets: list[int], ins: list) -> list[tuple]:  # type: ignore[type-arg]
    """Branch targets that fit their encoding: short branches stay within -128..127."""
    out = []
    offset = 0
    for i, (op, v, t, k) in enumerate(ins):
        size = 1 + (op > 0xFF) + {Operand.NONE: 0, Operand.VAR8: 1, Operand.I8: 1, Operand.BR8: 1, Operand.VAR16: 2,
                                   Operand.I32: 4, Operand.BR32: 4, Operand.TOKEN: 4, Operand.R32: 4, Operand.I64: 8,
                                   Operand.R64: 8}.get(k, 0)
        if k is Operand.SWITCH:
            t = tuple(draw_targets[i % len(draw_targets)] + j for j in range(i % 3))
            size += 4 + 4 * len(t)
        end = offset + size
        if k is Operand.BR8:
            v = end + (draw_targets[i % len(draw_targets)] % 256 - 128)
        elif k is Operand.BR32:
            v = end + draw_targets[i % len(draw_targets)]
        out.append((op, v, t))
        offset = end
    return out


@given(instruction_lists(), st.lists(st.integers(-1000, 1000), min_size=1, max_size=8))
@settings(max_examples=300, deadline=None)
def test_il_decode_gives_back_what_was_encoded(ins: list, targets: list[int]) -> None:
    triples = _with_targets(targets, ins)
    code = encode(triples)
    decoded = decode(code)
    assert [(d.opcode, d.value, d.targets) for d in decoded] == \
        [(op, v if not isinstance(v, float) else d.value, t) for (op, v, t), d in zip(triples, decoded)]
    assert sum(d.size for d in decoded) == len(code)
    assert [d.name for d in decoded] == [OPCODES[op][0] for op, _v, _t in triples]


@given(st.binary(max_size=300))
@settings(max_examples=500, deadline=None)
def test_any_bytes_decode_or_raise_il_error(data: bytes) -> None:
    for fn in (decode, parse_body):
        try:
            fn(data)
        except ILError:
            pass


def test_tiny_and_fat_bodies_with_small_and_fat_clauses() -> None:
    code = bytes([0x00, 0x2A])  # nop, ret
    tiny = parse_body(bytes([len(code) << 2 | 2]) + code + b"\xff" * 8)
    assert (tiny.header_size, tiny.code, tiny.clauses, tiny.fat) == (1, code, (), False)
    body = bytes(range(16))
    header = struct.pack("<HHII", 0x3000 | 0x8 | 0x3, 5, len(body), 0x11000002)
    small = struct.pack("<BBH", 0x01, 4 + 12 * 2, 0) + struct.pack("<HHBHBI", 0, 1, 3, 4, 5, 0x01000007) \
        + struct.pack("<HHBHBI", CLAUSE_FINALLY, 1, 3, 9, 2, 0)
    parsed = parse_body(header + body + small)
    assert parsed.max_stack == 5 and parsed.local_sig_token == 0x11000002 and parsed.code == body
    assert parsed.clauses == (ILClause(0, 1, 3, 4, 5, 0x01000007, 0x01000007), ILClause(2, 1, 3, 9, 2, 0, 0))
    odd = body + b"\x00"  # sections start at the next 4-byte boundary
    header = struct.pack("<HHII", 0x3000 | 0x8 | 0x3, 2, len(odd), 0)
    fat = struct.pack("<I", 0x41 | (4 + 24) << 8) + struct.pack("<IIIIII", CLAUSE_FILTER, 0, 10, 12, 4, 11)
    parsed = parse_body(header + odd + b"\x00" * 3 + fat)
    assert parsed.clauses == (ILClause(CLAUSE_FILTER, 0, 10, 12, 4, 11, 11),) and parsed.clauses[0].kind == "FILTER"


def test_listing_opens_one_try_per_protected_range_and_balances() -> None:
    code = encode([(0x00, None, ())] * 12 + [(0x2A, None, ())])
    clauses = (ILClause(0, 1, 4, 5, 2, 0x01000001, 0), ILClause(0, 1, 4, 7, 2, 0x01000002, 0),
               ILClause(CLAUSE_FINALLY, 1, 8, 9, 3, 0, 0))
    lines = list(il_lines(decode(code), clauses, lambda t: f"T{t:x}"))
    assert [ln.strip() for ln in lines].count(".try") == 2
    assert sum(ln.strip() == "{" for ln in lines) == sum(ln.strip().startswith("} // end") for ln in lines) == 5
    assert lines[-1] == "IL_000c: ret"


# -- GC info ----------------------------------------------------------------------------------

class BitWriter:
    def __init__(self) -> None:
        self.value = 0
        self.pos = 0

    def write(self, v: int, n: int) -> None:
        assert 0 <= v < 1 << n
        self.value |= v << self.pos
        self.pos += n

    def unsigned(self, v: int, base: int) -> None:
        while True:
            chunk = v & ((1 << base) - 1)
            v >>= base
            self.write(chunk | ((1 << base) if v else 0), base + 1)
            if not v:
                return

    def signed(self, v: int, base: int) -> None:
        while True:
            chunk = v & ((1 << base) - 1)
            rest = v >> base
            done = (rest == 0 and not chunk >> (base - 1) & 1) or (rest == -1 and chunk >> (base - 1) & 1)
            self.write(chunk | (0 if done else 1 << base), base + 1)
            if done:
                return
            v = rest

    def bytes(self) -> bytes:
        return self.value.to_bytes((self.pos + 7) // 8 + 8, "little")


def ceil_log2(x: int) -> int:
    return (x - 1).bit_length() if x > 1 else 0


@st.composite
def gc_infos(draw):  # type: ignore[no-untyped-def]
    arch = draw(st.sampled_from(["x86_64", "aarch64"]))
    enc = AMD64 if arch == "x86_64" else ARM64
    unit = 1 << enc.code_shift
    code_units = draw(st.integers(1, 5000))
    fat = draw(st.booleans())
    frame = draw(st.booleans())
    regs = sorted(draw(st.lists(st.integers(0, 15), unique=True, max_size=6)))
    reg_flags = [draw(st.integers(0, 3)) for _ in regs]
    stack = sorted(draw(st.lists(st.integers(-60, 60), unique=True, max_size=5)))
    stack_flags = [draw(st.integers(0, 3)) for _ in stack]
    untracked = sorted(draw(st.lists(st.integers(-60, 60), unique=True, max_size=3)))
    safe = sorted(draw(st.lists(st.integers(0, code_units - 1), unique=True, max_size=8)))
    ranges = []
    if fat:
        cuts = sorted(draw(st.lists(st.integers(0, code_units), unique=True, max_size=6)))
        ranges = [(a, b) for a, b in zip(cuts[::2], cuts[1::2]) if a < b]
    n_tracked = len(regs) + len(stack)
    live = [sorted(draw(st.sets(st.integers(0, n_tracked - 1)))) if n_tracked else [] for _ in safe]
    length = sum(b - a for a, b in ranges)
    range_live: list[frozenset] = []
    current: frozenset = frozenset()
    for _ in range(length if n_tracked else 0):  # liveness per offset, changing now and then
        if draw(st.integers(0, 9)) == 0:
            current = frozenset(draw(st.sets(st.integers(0, n_tracked - 1))))
        range_live.append(current)
    # the decoder (as the runtime's) finds the lifetimes past one bit per slot per safe point:
    # where both exist, this encoder writes the live states as plain rows
    indirect = draw(st.booleans()) and not ranges
    return dict(range_live=range_live, skip_quiet=draw(st.booleans()), live=live, indirect=indirect, rle=[draw(st.booleans()) for _ in safe],
                rle_first=[draw(st.integers(0, 1)) for _ in safe],
                arch=arch, enc=enc, unit=unit, code_units=code_units, fat=fat, frame=frame, regs=regs,
                reg_flags=reg_flags, stack=stack, stack_flags=stack_flags, untracked=untracked, safe=safe,
                ranges=ranges, area=draw(st.integers(0, 40)), ctx=draw(st.one_of(st.none(), st.integers(-30, 30))))


def write_gcinfo(g: dict) -> bytes:
    enc = g["enc"]
    w = BitWriter()
    w.write(1 if g["fat"] else 0, 1)
    if not g["fat"]:
        w.write(1 if g["frame"] else 0, 1)
        w.unsigned(g["code_units"], enc.code_length_base)
    else:
        flags = (0x40 if g["frame"] else 0) | (0x10 if g["ctx"] is not None else 0)
        w.write(flags, 10)
        w.unsigned(g["code_units"], enc.code_length_base)
        if g["ctx"] is not None:
            w.unsigned(0, enc.prolog_base)  # prolog size 1 unit
            w.signed(g["ctx"], 6)
        if g["frame"]:
            w.unsigned(0, enc.stack_base_register_base)  # the frame pointer is 0 after the xor
        w.unsigned(g["area"], enc.size_of_stack_area_base)
    w.unsigned(len(g["safe"]), enc.num_safe_points_base)
    if g["fat"]:
        w.unsigned(len(g["ranges"]), enc.num_ranges_base)
    bits = ceil_log2(g["code_units"])
    for s in g["safe"]:
        w.write(s, bits)
    last = 0
    for a, b in g["ranges"]:
        w.unsigned(a - last, enc.range_delta1_base)
        w.unsigned(b - a - 1, enc.range_delta2_base)
        last = b
    w.write(1 if g["regs"] else 0, 1)
    if g["regs"]:
        w.unsigned(len(g["regs"]), enc.num_registers_base)
    has_stack = bool(g["stack"] or g["untracked"])
    w.write(1 if has_stack else 0, 1)
    if has_stack:
        w.unsigned(len(g["stack"]), enc.num_stack_slots_base)
        w.unsigned(len(g["untracked"]), enc.num_untracked_base)
    prev_flags, prev = None, 0
    for r, f in zip(g["regs"], g["reg_flags"]):
        if prev_flags is None or prev_flags:
            w.unsigned(r, enc.register_base)
            w.write(f, 2)
            prev_flags = f
        else:
            w.unsigned(r - prev - 1, enc.register_delta_base)
        prev = r
    for offsets, flag_list in ((g["stack"], g["stack_flags"]), (g["untracked"], [0] * len(g["untracked"]))):
        prev_flags, prev = None, 0
        for o, f in zip(offsets, flag_list):
            w.write(2, 2)  # frame-register relative
            if prev_flags is None or prev_flags:
                w.signed(o, enc.stack_slot_base)
                w.write(f, 2)
                prev_flags = f
            else:
                w.unsigned(o - prev, enc.stack_slot_delta_base)
            prev = o
    write_live_states(w, g)
    write_lifetimes(w, g)
    return w.bytes()


def write_lifetimes(w: BitWriter, g: dict) -> None:
    """Chunks of 64 offsets of the ranges end to end: pointer table, then per chunk the
    possibly-live slots, their end states and their flip offsets."""
    n = len(g["regs"]) + len(g["stack"])
    live = g["range_live"]  # per pseudo offset: the set of live tracked slots
    if not n or not live:
        return
    chunks = [live[i:i + 64] for i in range(0, len(live), 64)]
    carried: frozenset = frozenset()
    bodies: list[BitWriter | None] = []
    for chunk in chunks:
        if all(s == carried for s in chunk) and g["skip_quiet"]:
            bodies.append(None)  # nothing changes: pointer 0, the last data holds
            continue
        cw = BitWriter()
        slots = sorted(set().union(*chunk))
        cw.write(0, 1)
        cw.write(sum(1 << i for i in slots), n)
        for i in slots:
            cw.write(1 if i in chunk[-1] else 0, 1)
        for i in slots:
            for t in range(1, len(chunk)):
                if (i in chunk[t]) != (i in chunk[t - 1]):
                    cw.write(1, 1)
                    cw.write(t, 6)
            cw.write(0, 1)
        bodies.append(cw)
        carried = frozenset(chunk[-1])
    offsets, at = [], 0
    for b in bodies:
        offsets.append(0 if b is None else at + 1)
        at += 0 if b is None else b.pos
    width = max(at.bit_length() + 1, 1)
    w.unsigned(width, 3)
    for o in offsets:
        w.write(o, width)
    w.write(0, -w.pos % 8)
    for b in bodies:
        if b is not None:
            w.write(b.value, b.pos)


def write_live_states(w: BitWriter, g: dict) -> None:
    """The live slots at each safe point: plain bit rows, or an offset table into
    byte-aligned states, each plain or run-length coded."""
    n = len(g["regs"]) + len(g["stack"])
    if not n or not g["safe"]:
        return
    w.write(1 if g["indirect"] else 0, 1)
    if not g["indirect"]:
        for live in g["live"]:
            w.write(sum(1 << i for i in live), n)
        return
    states = []
    for live, rle, first in zip(g["live"], g["rle"], g["rle_first"]):
        sw = BitWriter()
        if not rle:
            sw.write(0, 1)
            sw.write(sum(1 << i for i in live), n)
        else:
            sw.write(1, 1)
            sw.write(first, 1)
            dead_base, live_base = (4, 2) if first == 0 else (2, 4)
            flags = [i in live for i in range(n)]
            lead = next((i for i, f in enumerate(flags) if f), n)
            sw.unsigned(lead, dead_base)
            i, want_live = lead, True
            while i < n:
                j = i
                while j < n and flags[j] == want_live:
                    j += 1
                sw.unsigned(j - i - 1, live_base if want_live else dead_base)
                i, want_live = j, not want_live
        states.append(sw)
    offsets, at = [], 0
    for sw in states:
        offsets.append(at)
        at += sw.pos
    width = max(at.bit_length(), 1)
    w.unsigned(width - 1, 3)
    for o in offsets:
        w.write(o, width)
    w.write(0, -w.pos % 8)  # the states start at a byte boundary
    for sw in states:
        w.write(sw.value, sw.pos)


def expected_flags(flags: list[int]) -> list[int]:
    """A slot after one without flags is written as a delta and takes no flags of its own."""
    out: list[int] = []
    for f in flags:
        out.append(f if not out or out[-1] else 0)
    return out


@given(gc_infos())
@settings(max_examples=400, deadline=None)
def test_gcinfo_decodes_what_was_encoded(g: dict) -> None:
    info = decode_gcinfo(write_gcinfo(g), g["arch"], 4)
    enc, unit = g["enc"], g["unit"]
    # The header alone (what a stack walk decodes for a frame's generic context) says the same.
    head = decode_gcinfo_header(write_gcinfo(g), g["arch"], 4)
    assert (head.flags, head.code_length, head.generics_context, head.frame_register, head.stack_parameter_area) == \
        (info.flags, info.code_length, info.generics_context, info.frame_register, info.stack_parameter_area)
    assert info.code_length == g["code_units"] * unit
    assert info.frame_register == ((0 ^ enc.frame_register_xor) if g["frame"] else None)
    assert info.safe_points == [s * unit for s in g["safe"]]
    assert info.interruptible_ranges == [(a * unit, b * unit) for a, b in g["ranges"]]
    if g["fat"]:
        assert info.stack_parameter_area == g["area"] << enc.stack_slot_shift
        assert info.generics_context == (None if g["ctx"] is None else g["ctx"] << enc.stack_slot_shift)
    reg_flags = expected_flags(g["reg_flags"])
    stack_flags = expected_flags(g["stack_flags"])
    assert info.slots == [GcSlot(r, 0, 0, f, False) for r, f in zip(g["regs"], reg_flags)] + \
        [GcSlot(None, 2, o << enc.stack_slot_shift, f, False) for o, f in zip(g["stack"], stack_flags)] + \
        [GcSlot(None, 2, o << enc.stack_slot_shift, 0, True) for o in g["untracked"]]
    assert info.live_at_safe_points == (g["live"] if g["regs"] or g["stack"] else [[] for _ in g["safe"]])
    expected = []
    pseudo = 0
    for a, b in g["ranges"]:  # the changes, each range starting from nothing live
        before: frozenset = frozenset()
        for p in range(b - a):
            now = g["range_live"][pseudo + p] if g["range_live"] else frozenset()
            expected += [((a + p) * unit, i, True) for i in sorted(now - before)]
            expected += [((a + p) * unit, i, False) for i in sorted(before - now)]
            before = now
        expected += [(b * unit, i, False) for i in sorted(before)]  # nothing tracked past a range's end
        pseudo += b - a
    assert info.lifetimes == expected
    # SOS's layout (no slot table line): the header ends at the code size, then the body:
    # one line per safe point, each range's bounds (offsets as SOS's 8-digit hex).
    lines, body = info.lines(), info.body_lines()
    assert lines[len(lines) - len(body) - 1] == f"Code size: {info.code_length:x}"
    assert lines[len(lines) - len(body):] == body
    assert [ln[:8] for ln in body if "is a safepoint" in ln] == [f"{s * unit:08x}" for s in g["safe"]]
    assert [ln for ln in body if ln.endswith("interruptible")] == [
        f"{o * unit:08x} {w}" for a, b in g["ranges"] for o, w in ((a, "interruptible"), (b, "not interruptible"))]


@given(st.binary(max_size=64), st.sampled_from(["x86_64", "aarch64"]), st.sampled_from([3, 4]))
@settings(max_examples=500, deadline=None)
def test_any_bytes_decode_or_raise_gcinfo_error(data: bytes, arch: str, version: int) -> None:
    try:
        decode_gcinfo(data, arch, version).lines()
    except GcInfoError:
        pass


# -- signatures as SOS writes them -----------------------------------------------------------

def test_sos_signature_words() -> None:
    names = {0x01000018: "System.Collections.Generic.List`1", 0x02000005: "Ns.Point"}.get
    i4, s = SigType(0x08), SigType(0x0E)
    lst = SigType(0x15, token=0x01000018, args=(i4,))
    sig = MethodSig(0x20, 0, SigType(0x01), (s, SigType(0x10, element=SigType(0x0A)), lst,
                                             SigType(0x1D, element=SigType(0x11, token=0x02000005)),
                                             SigType(0x13, index=1)))
    assert method_sig_text(sig, lambda t: names(t) or f"0x{t:08x}") == \
        "[DEFAULT] [hasThis] Void (String,ByRef I8,Class System.Collections.Generic.List`1<I4>," \
        "SZArray ValueType Ns.Point,!1)"
    assert element_text(SigType(0x1C), str) == "Object"


def test_gcinfo_before_net10_shows_the_return_address_as_the_safe_point():
    """dotnet-dump's gcinfo of String.Concat on a .NET 9 core (GC info version 3, safe points
    recorded at the call's last byte): `0000004f is a safepoint: ` then `0000004e +r15 +rbx
    +rax`, and a safe point with nothing live on its line alone; on .NET 10 (version 4, the
    return address recorded) one line: `0000004e is a safepoint:  +r15 …`."""
    from sosext.formats.gcinfo import GcInfo
    slots = [GcSlot(0, 0, 0, 0, False), GcSlot(3, 0, 0, 0, False), GcSlot(15, 0, 0, 0, False)]
    v3 = GcInfo("x86_64", 3, True, 0, 0xe9, safe_points=[0x4e, 0xce], slots=slots, live_at_safe_points=[[0, 1, 2], []])
    assert v3.body_lines() == ["0000004f is a safepoint:", "0000004e +r15 +rbx +rax", "000000cf is a safepoint:"]
    v4 = GcInfo("x86_64", 4, True, 0, 0xe9, safe_points=[0x4e, 0xce], slots=slots, live_at_safe_points=[[0, 1, 2], []])
    assert v4.body_lines() == ["0000004e is a safepoint:  +r15 +rbx +rax", "000000ce is a safepoint:"]
