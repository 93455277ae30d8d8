"""Code inspection: clru (u), dumpil, ehinfo, gcinfo, dumpsig, dumpsigelem.

SOS's shapes: clru prints the JIT kind, the method's name and "Begin <start>, size <size>",
then each instruction as address, bytes and text, with calls named (a managed method with
its mdToken, a JIT helper); dumpil the IL as ``IL_xxxx: opcode operand`` in ildasm's
spelling; ehinfo the MethodDesc (as dumpmd) then one block per clause with native
addresses and offsets; dumpsig/dumpsigelem one line, the signature as text.
"""
from __future__ import annotations

import re
from collections.abc import Callable

from ..clr.addresses import AddressKind, classifier
from ..clr.code.il import decode, parse_body
from ..clr.code.iltext import ILDasmNames, il_lines
from ..clr.code.dynamicil import DynamicInfoMissing, dynamic_token_text, read_dynamic_il
from ..formats.gcinfo import GcInfoError
from ..clr.code.jitcode import (EHClause, MethodCode, callee_name, code_of, eh_clauses, gc_info_of, il_body_address,
                           il_native_map, method_of, method_or_none)
from ..formats.metadata import MetadataError, MetadataReader, decode_member_sig, decode_type_sig
from ..formats.metadata.signatures import MethodSig
from ..clr.typesystem.sigtext import element_text, field_sig_text, method_sig_text, sos_type_namer
from ..clr.code.sourcelines import source_lines
from ..errors import SosAnswer, SosError, UsageError
from ..render.numbers import P16, p16
from ..render.output import Address
from ..targets.disasm import Instruction, NoDisassembler
from .base import Command, Option, Parsed, Positional, address_or, register
from .context import CommandContext

MAX_CODE = 1 << 20  # a method's code is far smaller; a larger size in a header is not believed
IL_READ = 1 << 16  # bytes read for an IL body before its header says how long it is


def _code_or_say(ctx: CommandContext, text: str | None, usage: str, none: str,
                 not_method: Callable[[int], str]) -> tuple[MethodCode, int] | None:
    """(code, MethodDesc) of a MethodDesc-or-IP argument; None, after SOS's line ``none``,
    when the method has no code. An address that names no method is SOS's answer
    ``not_method(address)``, not a failure."""
    addr = _address_arg(text, usage)
    rt = ctx.runtime
    found = method_or_none(rt, addr)
    if found is None:
        raise SosAnswer(not_method(addr))
    method, ip = found
    code = code_of(rt, method, ip)
    if code is None:
        ctx.out.line(none)
        return None
    return code, method.method_desc


def _address_arg(text: str | None, usage: str) -> int:
    return address_or(text, f"Invalid address: {text}", f"Missing MethodDesc or code address (usage: {usage})")


def _method_and_code(ctx: CommandContext, text: str | None, usage: str) -> tuple[MethodCode | None, int, int]:
    """(code, the address asked for, the MethodDesc) for a MethodDesc-or-IP argument."""
    addr = _address_arg(text, usage)
    rt = ctx.runtime
    method, ip = method_of(rt, addr)
    return code_of(rt, method, ip), ip, method.method_desc


# -- clru -------------------------------------------------------------------------------------

_RIP_CELL = re.compile(r"(?i)\[rip\s*([+-])\s*(0x[0-9a-f]+|\d+)\]")
_IMMEDIATE = re.compile(r"(?i)^(?:0x)?([0-9a-f]+)$")


def _operand_target(ins: Instruction) -> str:
    """The operand text without the host's own comment (``# 0x…``, ``<symbol>``)."""
    return ins.operands.split("#", 1)[0].split("<", 1)[0].strip()


def call_target(ctx: CommandContext, ins: Instruction) -> int | None:
    """Where a call instruction goes: its immediate target, or the pointer in the cell a
    ``call [rip+disp]`` reads (how jitted code calls other methods and helpers)."""
    if ins.mnemonic.lower() not in ("call", "bl"):  # SOS names call targets only
        return None
    operand = _operand_target(ins)
    m = _IMMEDIATE.match(operand)
    if m:
        return int(m.group(1), 16)
    cell = _RIP_CELL.search(operand)
    if cell is None or not operand.lower().startswith("qword"):
        return None
    disp = int(cell.group(2), 0)
    if disp >= 1 << 63:  # objdump and GDB write a negative displacement as its 64-bit two's complement
        disp -= 1 << 64
    disp *= 1 if cell.group(1) == "+" else -1
    raw = ctx.runtime.target.read_partial(ins.address + len(ins.raw) + disp, 8)
    return int.from_bytes(raw, "little") if len(raw) == 8 else None


def _value_name(ctx: CommandContext, ins: Instruction) -> str | None:
    """A MethodTable or MethodDesc an instruction loads as an immediate (SOS's HandleValue)."""
    if ins.mnemonic.lower() not in ("mov", "movabs"):
        return None
    parts = _operand_target(ins).split(",")
    m = _IMMEDIATE.match(parts[-1].strip()) if len(parts) == 2 else None
    if m is None:
        return None
    value = int(m.group(1), 16)
    if value < 1 << 16:
        return None
    c = classifier(ctx.runtime).classify(value)
    if c.kind is AddressKind.METHOD_TABLE:
        return f"MT: {c.name}"
    if c.kind is AddressKind.METHOD_DESC:
        return f"MD: {c.name}"
    return None


def eh_marks(clauses: list[EHClause], offset: int) -> list[str]:
    """SOS's EH lines before the instruction at ``offset``: ends (innermost first), then
    beginnings (outermost first); duplicate clauses only as cloned finallys."""
    out = [f"EHHandler {c.index}: CLONED FINALLY END" for c in clauses
           if c.cloned_finally and offset == c.handler_end]
    for c in clauses:
        if c.duplicate:
            continue
        if offset == c.try_end:
            out.append(f"EHHandler {c.index}: {c.kind} CLAUSE END")
        if offset == c.handler_end:
            out.append(f"EHHandler {c.index}: {c.kind} HANDLER END")
    for c in reversed(clauses):
        if c.cloned_finally and offset == c.handler_start:
            out.append(f"EHHandler {c.index}: CLONED FINALLY BEGIN")
        if c.duplicate:
            continue
        catch = f" catch({c.catch_type}) " if c.catch_type is not None else ""
        if offset == c.try_start:
            out.append(f"EHHandler {c.index}: {c.kind} CLAUSE BEGIN{catch}")
        if offset == c.handler_start:
            out.append(f"EHHandler {c.index}: {c.kind} HANDLER BEGIN{catch}")
        if c.kind == "FILTER" and offset == c.filter_offset:
            out.append(f"EHHandler {c.index}: {c.kind} FILTER BEGIN")
    return out


@register
class ClrU(Command):
    names = ("clru", "u", "U")
    summary = "Disassemble a managed method, with calls to other methods and JIT helpers named."
    usage = "clru [-n] [-o] [-il] [-map] [-ehinfo] [-gcinfo] <MethodDesc | code address>"
    details = """\
Takes a MethodDesc (its current code) or any address inside jitted code (that code version;
the instruction at the address is marked >>>). Prints SOS's header (JIT kind, method name,
"Begin <start>, size <size>"), the source file and line before each line's instructions
(when the module's PDB is found; -n leaves them out), then each instruction: address,
bytes and text (Intel syntax on x86-64), with calls named as SOS does: "(<method>, mdToken:
<token>)" for managed code or a method's stub, "(JitHelp: <name>)" for a JIT helper.
-o adds each instruction's offset; -ehinfo marks where exception clauses begin and end;
-gcinfo puts gcinfo's lines (safe points, interruptible ranges, slots becoming live or
dead) before the instruction at their offset. The disassembler is the host's: LLDB's,
GDB's, or binutils' objdump in the CLI. -il puts the IL (as dumpil writes it) before the
code the JIT made of it; -map prints the JIT's IL-to-native map first (IL offset, native
start and end per entry; ffffffff, fffffffe and fffffffd mark no IL, prolog and epilog).

Example:
  clru 00007f3a1c2d6c78
  u -o 7fb5acc94ecd"""
    options = (
        Option("-n", "no source lines"),
        Option("-o", "show each instruction's offset from the method's start"),
        Option("-ehinfo", "mark the exception clauses in the listing"),
        Option("-gcinfo", "the GC info's safe points and slot lifetimes before the instructions they reach"),
        Option("-il", "the IL each stretch of code was made from, before it"),
        Option("-map", "the JIT's IL-to-native map first: IL offset, native start and end"),
    )
    positionals = (Positional("address", "a MethodDesc or an address in jitted code"),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        code, ip, md = _method_and_code(ctx, args.address, self.usage)
        rt = ctx.runtime
        if code is None:
            raise SosError("Not jitted yet")
        out = ctx.out
        clauses = (eh_clauses(rt, code) or []) if args.ehinfo else []
        gc_lines = _gc_lines(rt, code) if args.gcinfo else []
        il = _ILByOffset(rt, code.method) if args.il else None
        out.field("method_desc", Address(md))
        out.field("method", code.method.name)
        out.line(code.kind_text)
        out.line(code.method.name)
        if code.cold_start:
            out.field("begin", Address(code.start),
                      f"Begin {P16(code.start)}, size {code.hot_size:x}. "
                      f"Cold region begin {P16(code.cold_start)}, size {code.cold_size:x}")
        else:
            out.field("begin", Address(code.start), f"Begin {P16(code.start)}, size {code.size:x}")
        out.field("size", code.size)
        if args.map:
            entries = il_native_map(rt, code)
            if entries is None:
                out.line("Failed to get IL address map")
            else:
                out.lines(f"{il:08x} {p16(start)} {p16(end)}" for il, start, end in entries)
                out.field("map", [[il, Address(start), Address(end)] for il, start, end in entries])
        rows = out.table("instructions", None, ("address", "offset", "bytes", "text", "callee"))
        lines = None if args.n else source_lines(rt)
        ranges = code.ranges()
        for i, (start, end) in enumerate(ranges):
            if len(ranges) > 1:
                out.line("Hot region:" if i == 0 else "Cold region:")
            size = end - start
            if not 0 < size <= MAX_CODE:
                raise SosError(f"the code header's size ({size:#x}) is not believable")
            data = bytes(rt.target.read(start, size))
            try:
                instructions = rt.target.disassemble(start, data)
            except NoDisassembler as e:
                out.line(str(e))
                return
            base_offset = 0 if i == 0 else code.hot_size
            il_map = il.map([ins.address for ins in instructions]) if il is not None else {}
            current_line = None
            for ins in instructions:
                offset = ins.address - start + base_offset
                if lines is not None:
                    loc = lines.location(ins.address, md, return_address=False)
                    if loc is not None and loc.line != current_line:
                        current_line = loc.line
                        out.line()
                        out.line(f"{loc.path} @ {loc.line}:")
                if il is not None:
                    out.lines(il.lines_for(il_map.get(ins.address)))
                while gc_lines and gc_lines[0][0] <= offset:  # SOS prints each GC info line once reached
                    out.line(gc_lines.pop(0)[1])
                out.lines(eh_marks(clauses, offset))
                target = call_target(ctx, ins)
                name = callee_name(rt, target) if target else None
                if name is None:
                    name = _value_name(ctx, ins)
                prefix = (">>> " if ip and ins.address == ip else "") + (f"{offset:04x} " if args.o else "")
                mnemonic, _, operands = ins.text.partition(" ")
                text = f"{mnemonic:<7} {operands}".rstrip()
                out.line(f"{prefix}{ins.address:016x} {ins.raw.hex():<20} {text}" + (f" ({name})" if name else ""))
                rows.row(data=(Address(ins.address), offset, ins.raw.hex(), ins.text, name))
        out.lines(line for _offset, line in gc_lines)  # what lies at the code's end (a range's end)


class _ILByOffset:
    """clru -il: the IL instructions a stretch of native code was made from, each printed
    once, before the first native instruction the JIT's map gives their IL offset: from that
    offset up to the next offset the map names."""

    def __init__(self, rt, method) -> None:  # type: ignore[no-untyped-def]
        self.lines = source_lines(rt)
        self.listing: list[tuple[int, str]] = []
        self.starts: list[int] = []
        self.shown: set[int] = set()
        try:
            il_addr, _rva = il_body_address(rt, method)
            body = parse_body(rt.target.read_partial(il_addr, IL_READ))
            names = ILDasmNames(rt.catalog.require_metadata(method.module))
            instructions = decode(body.code)
        except SosError:
            return  # an IL stub or unreadable IL: the code alone, as SOS does
        texts = il_lines(instructions, (), names.token_text)
        self.listing = [(ins.offset, text) for ins, text in zip(instructions, texts)]

    def map(self, addresses: list[int]) -> dict[int, int]:
        """Each native address's IL offset (where the JIT's map names one)."""
        found = {}
        for a in addresses:
            off = self.lines.il_offset(a, return_address=False) if self.listing else None
            if off is not None:
                found[a] = off
        self.starts = sorted(set(found.values()))
        return found

    def lines_for(self, offset: int | None) -> list[str]:
        if offset is None or offset in self.shown:
            return []
        self.shown.add(offset)
        end = next((o for o in self.starts if o > offset), None)
        return [text for il_offset, text in self.listing if il_offset >= offset and (end is None or il_offset < end)]


def _gc_lines(rt, code: MethodCode) -> list[tuple[int, str]]:  # type: ignore[no-untyped-def]
    """The GC info's body lines keyed by the code offset they start with (-1: at once)."""
    try:
        info = gc_info_of(rt, code)
    except GcInfoError as e:
        return [(-1, f"GC info not decoded: {e}")]
    out = []
    for line in info.body_lines():
        word = line.split(" ", 1)[0]
        out.append((int(word, 16) if len(word) == 8 and all(ch in "0123456789abcdef" for ch in word) else -1, line))
    return out


# -- dumpil -----------------------------------------------------------------------------------


@register
class DumpIL(Command):
    names = ("dumpil", "DumpIL")
    summary = "Display the IL of a method (MethodDesc), or of the IL body at an address (/i)."
    usage = "dumpil <MethodDesc | DynamicMethod object> | dumpil /i <IL address>"
    details = """\
The IL comes from the module's image in the target (the method's RVA in its metadata);
tokens are named in ildasm's style (call int32 Ns.Type::M(string), ldstr "text"), and
.try/.catch/.finally blocks are shown around the protected ranges. With /i (or -i) the
address is an IL method body (its header first), decoded without names. A DynamicMethod
object (or its MethodDesc) shows the IL its resolver keeps, tokens named through its
token list. SOS's answers: "Must pass a valid expression" for 0, "<address> is not a
MethodDesc", "Error gathering dynamic info from object at <address>." for another object.

Examples:
  dumpil 00007f3a1c2d6c78
  dumpil /i 00007f3a1b0a2250"""
    options = (Option("-i", "the address is an IL body, not a MethodDesc (SOS also spells it /i)"),)
    positionals = (Positional("address", "a MethodDesc (or an IL address with /i)"),)

    @classmethod
    def parse(cls, words: list[str]) -> Parsed:
        # SOS's WinDbg spelling /i; its /d (DML links) means nothing outside WinDbg
        return super().parse(["-i" if w.lower() == "/i" else w for w in words if w.lower() != "/d"])

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        if args.address is None:
            raise SosAnswer("Must pass a valid expression")  # SOS's answer, as for 0
        addr = address_or(args.address, f"Invalid address: {args.address}")
        if not addr:
            raise SosAnswer("Must pass a valid expression")
        rt = ctx.runtime
        out = ctx.out
        names: ILDasmNames | None = None
        if args.i:
            c = classifier(rt).classify(addr)
            if c.kind not in (AddressKind.UNKNOWN, AddressKind.UNALIGNED):
                raise c.error("an IL method body")
            il_addr = addr
        else:
            c = classifier(rt).classify(addr)
            if c.is_object:  # SOS's dumpil of a DynamicMethod object
                self.dynamic(ctx, addr)
                return
            # SOS asks the DAC; sosext asks only about what the classifier calls a MethodDesc.
            method = rt.methods.get(addr) if c.kind is AddressKind.METHOD_DESC else None
            if method is None:
                raise SosAnswer(f"{P16(addr)} is not a MethodDesc")
            if method.data.is_dynamic:
                dynamic_method = rt.methods.dynamic_method_object(method)
                if not dynamic_method:
                    raise SosError(f"Unable to print IL for DynamicMethodDesc {p16(addr)}")
                self.dynamic(ctx, dynamic_method)
                return
            il_addr, _rva = il_body_address(rt, method)
            # SOS adds "pImport is <its own IMetaDataImport>", an address in the debugger, not the target.
            out.field("il_address", Address(il_addr), f"ilAddr is {il_addr:016X}")
            names = ILDasmNames(rt.catalog.require_metadata(method.module))
        raw = rt.target.read_partial(il_addr, IL_READ)
        body = parse_body(raw)
        out.field("il_address", Address(il_addr), f"ilAddr = {il_addr:016X}")
        instructions = decode(body.code)
        token_text = names.token_text if names is not None else (lambda t: f"TOKEN {t:x}")
        rows = out.table("instructions", None, ("offset", "opcode", "operand"))
        for text in il_lines(instructions, body.clauses, token_text):
            out.line(text)
        for ins in instructions:
            rows.row(data=(ins.offset, ins.name, ins.value if ins.operand != 10 else token_text(int(ins.value or 0))))
        clause_rows = out.table("clauses", None, ("kind", "try_offset", "try_length", "handler_offset",
                                                  "handler_length", "class_token", "filter_offset"))
        for c in body.clauses:
            clause_rows.row(data=(c.kind, c.try_offset, c.try_length, c.handler_offset, c.handler_length,
                                  c.class_token if c.kind == "TYPED" else None,
                                  c.filter_offset if c.kind == "FILTER" else None))


    @staticmethod
    def dynamic(ctx: CommandContext, obj: int) -> None:
        """SOS's listing of a DynamicMethod's IL: no header, no exception clauses, tokens
        resolved through the method's token list."""
        rt = ctx.runtime
        try:
            il = read_dynamic_il(rt, obj)
        except DynamicInfoMissing:
            raise SosAnswer(f"Error gathering dynamic info from object at {p16(obj)}.") from None
        out = ctx.out
        out.field("dynamic_method", Address(obj))
        out.field("token_array", Address(il.token_array))
        out.lines(["This is dynamic IL. Exception info is not reported at this time.",
                   'If a token is unresolved, run "dumpobj <addr>" on the addr given',
                   "in parenthesis. You can also look at the token table yourself, by",
                   f'running "dumparray {p16(il.token_array)}".', ""])
        instructions = decode(il.code)
        rows = out.table("instructions", None, ("offset", "opcode", "operand"))
        for text in il_lines(instructions, (), lambda t: dynamic_token_text(rt, il, t)):
            out.line(text)
        for ins in instructions:
            rows.row(data=(ins.offset, ins.name, ins.value if ins.operand != 10
                           else dynamic_token_text(rt, il, int(ins.value or 0))))


# -- ehinfo -----------------------------------------------------------------------------------


def _ticked(address: int) -> str:
    """An address as SOS's ehinfo prints it, WinDbg style: 00007f9a`4ae84ddf."""
    return f"{address >> 32:08x}`{address & 0xFFFFFFFF:08x}"


def _range(code: MethodCode, start: int, end: int) -> str:
    a, b = code.start + start, code.start + end
    return f"[{_ticked(a)}, {_ticked(b)}] [{start:x}, {end:x}]"


@register
class EHInfo(Command):
    names = ("ehinfo", "EHInfo")
    summary = "Display the exception clauses of a method's jitted code."
    usage = "ehinfo <MethodDesc | code address>"
    details = """\
Prints the MethodDesc as dumpmd does, then each clause: its kind (TYPED with the caught
type, FILTER, FINALLY, FAULT), the protected range and the handler as native addresses and
offsets from the code's start ([start, end] [offset, offset]); FILTER clauses also the
filter's start. An address that names no method gets SOS's answer "0000000000000000 is not
a MethodDesc" (the MethodDesc SOS's lookup found: none).

Example:
  ehinfo 00007f3a1c2d6c78"""
    positionals = (Positional("address", "a MethodDesc or an address in jitted code"),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        from .types import DumpMD

        # SOS names the MethodDesc its IP lookup found, which is none: always 0.
        found = _code_or_say(ctx, args.address, self.usage, "No EH info available",
                             lambda _address: f"{P16(0)} is not a MethodDesc")
        if found is None:
            return
        code, md = found
        rt = ctx.runtime
        out = ctx.out
        out.record_line(f"MethodDesc:   {p16(md)}")
        DumpMD().run(ctx, Parsed({"md": f"{md:x}"}))
        out.line()
        clauses = eh_clauses(rt, code)
        if clauses is None:
            raise SosError("Failed to perform EHInfo traverse")
        rows = out.table("clauses", None, ("index", "kind", "catch_type", "try_start", "try_end", "handler_start",
                                           "handler_end", "filter", "duplicate"))
        for c in clauses:
            tail = "(cloned finally)" if c.cloned_finally else "(duplicate)" if c.duplicate else ""
            catch = f"catch({c.catch_type}) " if c.catch_type is not None else ""
            out.line(f"EHHandler {c.index}: {c.kind} {catch}{tail}".rstrip())
            out.line(f"Clause:  {_range(code, c.try_start, c.try_end)}")
            out.line(f"Handler: {_range(code, c.handler_start, c.handler_end)}")
            if c.filter_offset is not None:
                out.line(f"Filter: [{_ticked(code.start + c.filter_offset)}] [{c.filter_offset:x}]")
            out.line()
            rows.row(data=(c.index, c.kind, c.catch_type, c.try_start, c.try_end, c.handler_start, c.handler_end,
                           c.filter_offset, c.duplicate))


# -- gcinfo -----------------------------------------------------------------------------------


@register
class GCInfo(Command):
    names = ("gcinfo", "GCInfo")
    summary = "Display the GC info of a method's jitted code: frame, safe points, interruptible ranges, slots."
    usage = "gcinfo <MethodDesc | code address>"
    details = """\
Decodes the GC info the JIT wrote for the code (the runtime's GcInfoEncoder format, x64 and
arm64): SOS's header lines (prolog size, GS cookie, generics context, varargs, frame
pointer, parameter area, code size), the untracked stack slots, each safe point (the return
address of a call where a GC can happen in partially interruptible code) with the slots
live there (before .NET 10 the live slots follow on a line at the call's last byte, as SOS
prints them), each fully interruptible range with the offsets where slots become live (+) or
dead (-), and the tracked registers and stack slots. Slots a filter reports for its parent
frame show as (pinned). An address that names no method gets SOS's answer "<address> is not
a valid MethodDesc".

Example:
  gcinfo 00007f3a1c2d6c78"""
    positionals = (Positional("address", "a MethodDesc or an address in jitted code"),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        found = _code_or_say(ctx, args.address, self.usage, "No GC info available",
                             lambda address: f"{P16(address)} is not a valid MethodDesc")
        if found is None:
            return
        code, _md = found
        out = ctx.out
        # SOS prints these two addresses in upper case (%p), then "Pointer table:" over the rest.
        out.field("entry_point", Address(code.start), f"entry point {code.start:016X}")
        out.field("jit", code.kind_text, code.kind_text)
        out.field("gc_info", Address(code.gc_info), f"GC info {code.gc_info:016X}")
        out.line("Pointer table:")
        try:
            info = gc_info_of(ctx.runtime, code)
        except GcInfoError as e:
            raise SosError(f"the GC info at {p16(code.gc_info)} cannot be decoded: {e}") from None
        out.lines(info.lines())
        enc = info.encoding
        out.field("code_size", info.code_length)
        out.field("frame_register", None if info.frame_register is None else enc.registers[info.frame_register])
        out.field("safe_points", info.safe_points)
        tracked = [sl.text(enc, info.frame_register) for sl in info.slots if not sl.untracked]
        out.field("live_at_safe_points", [[tracked[i] for i in live] for live in info.live_at_safe_points])
        out.field("lifetimes", [[offset, tracked[i], live] for offset, i, live in info.lifetimes])
        out.field("interruptible_ranges", [list(r) for r in info.interruptible_ranges])
        rows = out.table("slots", None, ("slot", "register", "untracked", "interior", "pinned"))
        for s in info.slots:
            rows.row(data=(s.text(enc, info.frame_register).split("(")[0], s.register is not None, s.untracked,
                           bool(s.flags & 1), bool(s.flags & 2)))


# -- dumpsig / dumpsigelem -----------------------------------------------------------------------

SIG_READ = 4096  # SOS reads 256 bytes at a time until the signature parses; one read of this does


def _sig_module(ctx: CommandContext, text: str | None) -> MetadataReader | None:
    if text is None:
        return None
    module = address_or(text, f"Invalid parameter {text}")
    rt = ctx.runtime
    classifier(rt).require(module, AddressKind.MODULE, "a Module", "dumpmodule")
    return rt.catalog.require_metadata(module)


def _sig_blob(ctx: CommandContext, args: Parsed, name: str) -> bytes:
    if args.sig is None:
        raise UsageError(f"{name} <sigaddr> [<moduleaddr>]?")
    addr = address_or(args.sig, f"Invalid parameter {args.sig}")
    if addr == 0:
        raise UsageError(f"Invalid parameter {args.sig}")
    c = classifier(ctx.runtime).classify(addr)
    if c.kind in (AddressKind.NULL, AddressKind.LOW, AddressKind.NOT_USER, AddressKind.UNMAPPED):
        raise c.error("a signature")
    return bytes(ctx.runtime.target.read_partial(addr, SIG_READ))


_SIG_POSITIONALS = (Positional("sig", "the signature's address"), Positional("module", "the Module that owns it"))


@register
class DumpSig(Command):
    names = ("dumpsig", "DumpSig")
    summary = "Decode a method or field signature blob at an address (types named by its module)."
    usage = "dumpsig <sigaddr> [<moduleaddr>]"
    details = """\
The signature is read from the target and decoded (ECMA-335 II.23.2) in SOS's words:
"[DEFAULT] [hasThis] <return> (<parameters>)" with element types as I4, String, Object,
SZArray <type>, ByRef <type>, Class <name>, ValueType <name>; a field's as "[FIELD] <type>".
With the Module that owns it (dumpmd's Module:), type tokens are named from its metadata.

Example:
  dumpsig 00007f3a1b0a2250 00007f3a1c2d0000
    [DEFAULT] I4 (String,I4,Class System.Collections.Generic.List`1<I4>,ByRef I8)"""
    positionals = _SIG_POSITIONALS

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        blob = _sig_blob(ctx, args, "dumpsig")
        name = sos_type_namer(_sig_module(ctx, args.module))
        try:
            sig = decode_member_sig(blob)
            text = method_sig_text(sig, name) if isinstance(sig, MethodSig) else field_sig_text(sig, name)
        except MetadataError:
            raise SosError("Invalid signature") from None
        ctx.out.field("signature", text, text)


@register
class DumpSigElem(Command):
    names = ("dumpsigelem", "DumpSigElem")
    summary = "Decode one type element of a signature blob at an address."
    usage = "dumpsigelem <sigaddr> [<moduleaddr>]"
    details = """\
Like dumpsig, for a single type of a signature (a parameter, a field's type, an array's
element) rather than a whole method signature.

Example:
  dumpsigelem 00007f3a1b0a2253 00007f3a1c2d0000
    String"""
    positionals = _SIG_POSITIONALS

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        blob = _sig_blob(ctx, args, "dumpsigelem")
        name = sos_type_namer(_sig_module(ctx, args.module))
        try:
            text = element_text(decode_type_sig(blob), name)
        except MetadataError:
            raise SosError("Invalid signature") from None
        ctx.out.field("signature", text, text)
