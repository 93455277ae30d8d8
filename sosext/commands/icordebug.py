"""clrstack -i: the stack in the layout of SOS's ICorDebug walk (ClrStackFromPublicInterface).

SOS prints, between two rules of '=' signs, one row per stop of the debugger API's walk: a
[NativeStackFrame] where the thread runs native code, the runtime's transition frames as
"<Frame address> (null) [<kind>: <address>]", and managed frames as
"<SP> <ip> [DEFAULT] [hasThis] Void Ns.Type.Method(I4,String) (<module path>)", each followed
(with -a/-p/-l) by a blank line, PARAMETERS: and LOCALS: with "  + <type> <name>" rows. Our walk
is the DAC's; the rows are built from its frames in that layout.
"""
from __future__ import annotations

from ..clr.frames import FrameVariable, FrameVariables, icordebug_method
from ..clr.stacks import ClrStack
from ..render.output import Address
from ..render.table import Cells
from ..render.text import safe_line
from .context import CommandContext

RULE = "=" * 77

# Runtime Frame → the kind of internal frame the debugger API reports for it.
_INTERNAL_KINDS = (
    ("InlinedCallFrame", "Managed to Unmanaged transition"),
    ("PInvoke", "Managed to Unmanaged transition"),
    ("U2M", "Unmanaged to Managed transition"),
    ("UMThk", "Unmanaged to Managed transition"),
    ("FuncEval", "Function evaluation"),
    ("ExceptionFrame", "Exception"),
    ("HelperMethodFrame", "Internal call"),
    ("Prestub", "JIT Compilation"),
)


def internal_kind(frame_name: str) -> str:
    return next((kind for part, kind in _INTERNAL_KINDS if part in frame_name), "Unknown internal frame.")


def value_text(v: FrameVariable) -> str:
    """What follows "  + <type> <name>" in SOS's PrintValue."""
    if not v.has_data:
        return "  <unable to retrieve data>"
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
    if v.kind == "pointer":
        return "  = <pointer>"
    if v.kind == "struct":
        return f" @ 0x{v.address:x}" if v.address is not None else ""
    n = v.raw.value
    return f"  = 0x{n:016x}" if n is not None else "  <no data>"


def _field_value(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "  = " + ("true" if value else "false")
    if isinstance(value, float):
        return f"  = {value:f}"
    return f"  = {value}"


def write_variables(ctx: CommandContext, fv: FrameVariables, params: bool, local_vars: bool) -> None:
    out = ctx.out
    for title, wanted, values in (("PARAMETERS:", params, fv.arguments), ("LOCALS:", local_vars, fv.locals)):
        if not wanted:
            continue
        if not values:
            out.line()
            out.line(f"{title} (none)")
            continue
        out.line()
        out.line(title)
        for v in values:
            type_name = f"{v.type_name} " if v.type_name else ""
            out.line(f"  + {type_name}{v.name}{value_text(v)}")
            # A struct's fields, as SOS expands a variable named on its command line.
            for fld in v.fields:
                ftype = f"{fld.type_name} " if fld.type_name else ""
                out.line(f"     |- {ftype}{fld.name}{_field_value(fld.value)}")
    if params or local_vars:
        out.line()


def write_icordebug_stack(ctx: CommandContext, tid: int, stack: ClrStack, thread_sp: int | None,
                          thread_ip: int | None, in_managed_code: bool, params: bool, local_vars: bool,
                          max_rows: int, variables) -> None:  # type: ignore[no-untyped-def]
    """The rows of ``stack`` in SOS's -i layout; ``variables(frame, index)`` gives a managed
    frame's FrameVariables; at most ``max_rows`` rows (0: all)."""
    out = ctx.out
    runtime = ctx.runtime
    out.line("Dumping managed stack and managed variables using ICorDebug.")
    out.line(RULE)
    rows = out.table("frames", Cells((16, -1), (False, False)),
                     ("os_thread_id", "sp", "ip", "call_site", "module", "kind"))
    if not out.structured:
        out.line(f"{'Child SP':<16} {'IP':<16} Call Site")
    printed = 0

    def full() -> bool:
        return bool(max_rows) and printed >= max_rows

    if thread_ip is not None and not in_managed_code and not full():
        rows.row(f"{thread_sp or 0:016X}", f"{thread_ip:016x}", "[NativeStackFrame]",
                 data=(tid, Address(thread_sp or 0), Address(thread_ip), "[NativeStackFrame]", None, "native"))
        printed += 1
    shown: set[int] = set()
    for i, f in enumerate(stack.frames):
        if full():
            break
        if not f.is_managed and f.frame_address in shown:
            continue  # the DAC's walk can stop twice at one Frame; the debugger API lists it once
        printed += 1
        if not f.is_managed:
            shown.add(f.frame_address)
            site = f"[{internal_kind(f.frame_name)}: {f.frame_address:016X}]"
            rows.row(f"{f.frame_address:016X}", "(null)", site,
                     data=(tid, Address(f.frame_address), None, site, None, "internal"))
            continue
        text, module = icordebug_method(runtime, f.method_desc)
        site = (text or f.method_name or "<unknown>") + f" ({module})"
        rows.row(f"{f.sp:016X}", f"{f.ip:016x}", site,
                 data=(tid, Address(f.sp), Address(f.ip), text or f.method_name, module, "managed"))
        if (params or local_vars) and not out.structured:
            write_variables(ctx, variables(f, i), params, local_vars)
    if stack.interrupted:
        out.line("<interrupted>")
    elif not stack.complete:
        out.line("<failed>")
    elif not full() and not stack.truncated:
        out.line("Stack walk complete.")
    out.line(RULE)
