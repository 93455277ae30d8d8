"""clrstack -i: the stack in the layout of SOS's ICorDebug walk (ClrStackFromPublicInterface).

SOS prints, between two rules of '=' signs, one row per stop of the debugger API's walk: a
[NativeStackFrame] where the thread runs native code, the runtime's transition frames as
"<Frame address> (null) [<kind>: <address>]", and managed frames as
"<SP> <ip> [DEFAULT] [hasThis] Void Ns.Type.Method(I4,String) (<module path>)", each followed
(with -a/-p/-l) by a blank line, PARAMETERS: and LOCALS: with "  + <type> <name>" rows. Our walk
is the DAC's; the rows are built from its frames in that layout.
"""
from __future__ import annotations

from ..clr.threads.frames import (FieldExpansion, FieldValue, FrameVariable, FrameVariables, expand, expand_fields,
                          has_il, icordebug_method)
from ..clr.threads.stacks import ClrStack
from ..render.output import Address
from ..render.table import Cells
from ..render.text import safe_line
from .context import CommandContext

RULE = "=" * 77

# Runtime Frame → the kind of internal frame the debugger API reports for it: the right side's
# DacDbiInterfaceImpl::GetInternalFrameType, which decides by the Frame's transition type,
# interception and frame type (.NET 10's frames.h). None: the API does not report the Frame.
_INTERNAL_KINDS: dict[str, str | None] = {
    "InlinedCallFrame": "Managed to Unmanaged transition",
    "PInvokeCalliFrame": "Managed to Unmanaged transition",
    "CallCountingHelperFrame": "Managed to Unmanaged transition",
    "ExternalMethodFrame": "Managed to Unmanaged transition",
    "DebuggerExitFrame": "Managed to Unmanaged transition",
    "CLRToCOMMethodFrame": "Managed to Unmanaged transition",
    "ComPlusMethodFrame": "Managed to Unmanaged transition",
    "DebuggerU2MCatchHandlerFrame": "Unmanaged to Managed transition",
    "ComMethodFrame": "Unmanaged to Managed transition",
    "UMThkCallFrame": "Unmanaged to Managed transition",
    "FuncEvalFrame": "Function evaluation",
    "DynamicHelperFrame": "Internal call",
    "DebuggerClassInitMarkFrame": "Class initialization",
    "FaultingExceptionFrame": "Exception",
    "SoftwareExceptionFrame": "Exception",
    "PrestubMethodFrame": "JIT Compilation",
    "ComPrestubMethodFrame": "JIT Compilation",
    # TT_NONE frames of no interception, and a virtual stub dispatch (special-cased).
    "StubDispatchFrame": None,
    "ResumableFrame": None,
    "RedirectedThreadFrame": None,
    "HijackFrame": None,
    "ProtectValueClassFrame": None,
    "ExceptionFilterFrame": None,
    "TailCallFrame": None,
}


def internal_kind(frame_name: str) -> str | None:
    """SOS's name of the Frame's kind, or None where the debugger API does not report it.
    HelperMethodFrames (before .NET 10) are internal calls, or exceptions by an attribute the
    DAC does not give: they are internal calls here."""
    if frame_name in _INTERNAL_KINDS:
        return _INTERNAL_KINDS[frame_name]
    if frame_name.startswith("HelperMethodFrame"):
        return "Internal call"
    return "Unknown internal frame."


# The HRESULTs the debugger API gives for a variable it cannot produce: one whose home the
# runtime does not describe at this instruction, and one whose memory cannot be read.
CORDBG_E_IL_VAR_NOT_AVAILABLE = 0x80131304
CORDBG_E_READVIRTUAL_FAILURE = 0x80131C49
E_FAIL = 0x80004005  # SOS's own failure to find a local by its PDB name


def retrieval_error(v: FrameVariable, what: str) -> str:
    """SOS's line for an argument or local ICorDebug could not retrieve (``what``: "parameter"
    or "local variable"): it stands instead of the "  + <type> <name>" line."""
    hr = E_FAIL if getattr(v, "by_name_failed", False) else \
        CORDBG_E_READVIRTUAL_FAILURE if v.raw.read_failed else CORDBG_E_IL_VAR_NOT_AVAILABLE
    return f"  + (Error 0x{hr:x} retrieving {what} '{safe_line(v.name)}')"


def value_text(v: "FrameVariable | FieldValue") -> str:
    """What follows "<type> <name>" in SOS's PrintValue."""
    if v.kind == "primitive":
        value = v.value
        if isinstance(value, bool):
            return "  = " + ("true" if value else "false")
        if isinstance(value, float):
            return f"  = {value:f}"
        if v.type_name == "char" and isinstance(value, int):
            return f"  = '{chr(value)}'" if 0x20 <= value < 0x7F else f"  = {value}"
        return f"  = {value}"
    if v.kind == "string":
        return f' = "{safe_line(str(v.value))}"'
    if v.kind == "reference":
        return " = null" if not v.address else f" @ 0x{v.address:x}"
    if v.kind == "array":
        n = int(v.value or 0)
        return "   (empty)" if n == 0 else "   (1 element)" if n == 1 else f"   ({n} elements)"
    if v.kind == "pointer":
        return "  = <pointer>"
    if v.kind == "enum":
        return str(v.value)
    if v.kind == "struct":
        return f" @ 0x{v.address:x}" if v.address is not None else ""
    n = v.raw.value if isinstance(v, FrameVariable) else None
    return f"  = 0x{n:016x}" if n is not None else "  <no data>"


def should_expand(wanted: str | None, path: str) -> bool:
    """SOS's ShouldExpandVariable: ``path`` (name.field.field) is the variable named on the
    command line or one on the way to it."""
    return wanted is not None and (wanted == path or wanted.startswith(path + "."))


def write_expansion(ctx: CommandContext, value: "FrameVariable | FieldValue", path: str, wanted: str | None,
                    indent: int) -> None:
    """The fields under ``value`` when the variable named on the command line is ``path`` or
    lies below it, as SOS's ProcessFields prints them (four spaces per level, then " |- ")."""
    if not should_expand(wanted, path):
        return
    exp = expand(ctx.runtime, value)
    if exp is not None:
        _write_fields(ctx, exp, path, wanted, indent)


def _write_fields(ctx: CommandContext, exp: FieldExpansion, path: str, wanted: str | None, indent: int) -> None:
    out = ctx.out
    pad = "    " * indent
    if exp.base_type:
        base_path = f"{path}.[basetype]"
        out.line(f"{pad} |- {safe_line(exp.base_type)} [basetype]")
        if should_expand(wanted, base_path):
            base = expand_fields(ctx.runtime, exp.base_mt, exp.address, exp.value_class)
            if base is not None:
                _write_fields(ctx, base, base_path, wanted, indent + 1)
    for f in exp.fields:
        if not f.has_data:
            out.line(f"{pad} |- < unknown type > {safe_line(f.name)}")
            continue
        out.line(f"{pad} |- {safe_line(f.type_name)} {safe_line(f.name)}{value_text(f)}")
        write_expansion(ctx, f, f"{path}.{f.name}", wanted, indent + 1)


NOT_IN_TRIAGE_DUMP = "(not in this dump: a triage dump does not hold what locates arguments and locals)"


def write_variables(ctx: CommandContext, fv: FrameVariables, params: bool, local_vars: bool,
                    wanted: str | None = None) -> None:
    """PARAMETERS: and LOCALS: of one frame; the fields of the variable named ``wanted``
    (name or name.field...) are listed under it, as SOS expands a variable named on its
    command line."""
    out = ctx.out
    for title, what, show, values in (("PARAMETERS:", "parameter", params, fv.arguments),
                                      ("LOCALS:", "local variable", local_vars, fv.locals)):
        if not show:
            continue
        if not values:
            out.line()
            # A triage dump lacks what locates them: "(none)" would claim the method has none.
            out.line(f"{title} (none)" if ctx.runtime.has_gc_heap else f"{title} {NOT_IN_TRIAGE_DUMP}")
            continue
        out.line()
        out.line(title)
        for v in values:
            if not v.has_data:
                out.line(retrieval_error(v, what))
                continue
            type_name = f"{v.type_name} " if v.type_name else ""
            if v.kind == "print_error":  # SOS reached the value but could not print it
                out.line(f"  + {type_name}{v.name}  + (Error 0x{v.value:x} printing {what} {v.index})")
                continue
            out.line(f"  + {type_name}{v.name}{value_text(v)}")
            write_expansion(ctx, v, v.name, wanted, 1)
    if params or local_vars:
        out.line()


def write_icordebug_stack(ctx: CommandContext, tid: int, stack: ClrStack, thread_sp: int | None,
                          thread_ip: int | None, in_managed_code: bool, params: bool, local_vars: bool,
                          max_rows: int, variables, wanted: str | None = None,
                          only_frame: int | None = None,
                          base_native: tuple[int, int] | None = None) -> None:  # type: ignore[no-untyped-def]
    """The rows of ``stack`` in SOS's -i layout; ``variables(frame, index)`` gives a managed
    frame's FrameVariables; at most ``max_rows`` rows (0: all). ``wanted`` names the variable
    whose fields are listed; ``only_frame`` the one frame whose variables are shown, numbered
    as SOS numbers the debugger API's frames: every native and managed row from 0, the
    internal (runtime transition) frames not counted. ``base_native``: (SP, IP) of the native
    code the outermost managed frame returns to, when no runtime Frame stands there."""
    out = ctx.out
    runtime = ctx.runtime
    out.line("Dumping managed stack and managed variables using ICorDebug.")
    out.line(RULE)
    rows = out.table("frames", Cells((16, -1), (False, False)),
                     ("os_thread_id", "sp", "ip", "call_site", "module", "kind"))
    if not out.structured:
        out.line(f"{'Child SP':<16} {'IP':<16} Call Site")
    printed = 0
    number = 0  # SOS's frame number: the rows of the debugger API's walk (not its internal frames)

    def full() -> bool:
        return bool(max_rows) and printed >= max_rows

    # The debugger API's walk, in order of stack address: the native code the thread stands in, each
    # managed frame, each runtime Frame it reports as an internal frame (once), and, where a Frame's
    # context returns into native code, that native code as a [NativeStackFrame] at the context's SP.
    entries: list[tuple[int, int, str, object]] = []  # (stack address, walk order, kind, payload)
    natives: set[tuple[int, int]] = set()

    def native(sp: int, ip: int) -> None:
        if (sp, ip) not in natives:
            natives.add((sp, ip))
            entries.append((sp, len(entries), "native", (sp, ip)))

    if thread_ip is not None and not in_managed_code:
        native(thread_sp or 0, thread_ip)
    shown: set[int] = set()
    for i, f in enumerate(stack.frames):
        if f.is_managed:
            entries.append((f.sp, len(entries), "managed", (i, f)))
            continue
        regs = f.registers or {}
        sp, ip = regs.get("rsp", regs.get("sp")), regs.get("rip", regs.get("pc"))
        if sp is not None and ip and not runtime.method_desc_at(ip):
            native(sp, ip)
        # The DAC's walk can stop twice at one Frame; the API lists it once, and never the
        # debugger's own catch-handler Frame at the thread's base.
        if (f.frame_address in shown or f.frame_name == "DebuggerU2MCatchHandlerFrame"
                or internal_kind(f.frame_name) is None):
            continue
        shown.add(f.frame_address)
        entries.append((f.frame_address, len(entries), "internal", f))
    if base_native is not None:
        native(*base_native)
    # An internal frame is printed before a frame only when it is closer to the leaf (SOS's
    # IsCloserToLeaf): at a managed frame's own SP it follows that frame.
    entries.sort(key=lambda e: (e[0], e[2] != "managed", e[1]))
    # SOS prints a frame with no IL frame (a P/Invoke run by its stub) as its SP and IP with no
    # end of line: what it prints next continues that line.
    pending = ""

    def row(values: tuple[str, str, str], data: tuple) -> None:  # type: ignore[type-arg]
        nonlocal pending
        if out.structured or rows.table is None:
            rows.row(*values, data=data)
        else:
            out.line(pending + rows.table.row(*values))
            pending = ""

    # SOS prints the internal frames closer to the leaf than a managed frame just before that
    # frame, never before a native one: those after the walk's last managed frame (a thread
    # blocked under a HelperMethodFrame with no managed caller on .NET 8/9) are not printed.
    waiting: list[tuple[int, int, str, object]] = []
    ordered: list[tuple[int, int, str, object]] = []
    for e in entries:
        if e[2] == "internal":
            waiting.append(e)
            continue
        if e[2] == "managed":
            ordered += waiting
            waiting = []
        ordered.append(e)
    if stack.truncated:  # the walk stopped early (-c): managed frames follow beyond it
        ordered += waiting
    for _sp, _order, kind, payload in ordered:
        if full():
            break
        printed += 1
        if kind == "native":
            sp, ip = payload  # type: ignore[misc]
            row((f"{sp:016X}", f"{ip:016x}", "[NativeStackFrame]"),
                (tid, Address(sp), Address(ip), "[NativeStackFrame]", None, "native"))
            number += 1
            continue
        if kind == "internal":
            f = payload  # type: ignore[assignment]
            site = f"[{internal_kind(f.frame_name)}: {f.frame_address:016X}]"
            row((f"{f.frame_address:016X}", "(null)", site),
                (tid, Address(f.frame_address), None, site, None, "internal"))
            continue
        i, f = payload  # type: ignore[misc]
        text, module = icordebug_method(runtime, f.method_desc)
        if not has_il(runtime, f.method_desc):
            if out.structured:
                rows.row(f"{f.sp:016X}", f"{f.ip:016x}", "",
                         data=(tid, Address(f.sp), Address(f.ip), text or f.method_name, module, "managed"))
            else:
                pending += f"{f.sp:016X} {f.ip:016x} "
            number += 1
            continue
        site = (text or f.method_name or "<unknown>") + f" ({module})"
        row((f"{f.sp:016X}", f"{f.ip:016x}", site),
            (tid, Address(f.sp), Address(f.ip), text or f.method_name, module, "managed"))
        if (params or local_vars) and not out.structured and only_frame in (None, number):
            write_variables(ctx, variables(f, i), params, local_vars, wanted)
        number += 1
    if stack.interrupted:
        out.line(pending + "<interrupted>")
    elif not stack.complete and stack.frames:
        # (A walk that found nothing to stop at is a thread with no managed code on its stack:
        # the debugger API's walk ends after its native frame.)
        out.line(pending + "<failed>")
    elif not full() and not stack.truncated:
        out.line(pending + "Stack walk complete.")
    elif pending:
        out.line(pending)
    out.line(RULE)
