"""clrstack -i's lines for variables ICorDebug cannot give, and its argument rules (SOS's forms)."""
from __future__ import annotations

import pytest

from sosext.clr.threads.frames import FrameVariable
from sosext.clr.threads.stacks import FrameValue
from sosext.commands.base import Parsed
from sosext.commands.icordebug import retrieval_error, should_expand
from sosext.commands.threads import icordebug_arguments
from sosext.errors import UsageError


def test_a_variable_without_a_home_is_not_available() -> None:
    v = FrameVariable(0, "this", "", "unknown", FrameValue("", None, True, None))
    assert retrieval_error(v, "parameter") == "  + (Error 0x80131304 retrieving parameter 'this')"


def test_a_variable_whose_memory_cannot_be_read_is_a_read_failure() -> None:
    v = FrameVariable(2, "localBig", "long", "unknown", FrameValue("", 0x7FFC0000, False, b"", read_failed=True))
    assert retrieval_error(v, "local variable") == "  + (Error 0x80131c49 retrieving local variable 'localBig')"


def test_expansion_follows_the_named_path() -> None:
    assert should_expand("point", "point")
    assert should_expand("point.Inner.X", "point") and should_expand("point.Inner.X", "point.Inner")
    assert not should_expand("point", "point.X")  # a field of the named variable is listed, not expanded
    assert not should_expand("points", "point") and not should_expand("point", "points")
    assert not should_expand(None, "point")


def args(i: bool, variable: str | None, frame: str | None = None) -> Parsed:
    return Parsed({"i": i, "variable": variable, "frame": frame})


@pytest.mark.parametrize("words, want", [
    ((None, None), (None, None)),
    (("point", None), ("point", None)),
    (("3", None), (None, 3)),
    (("10", None), (None, 0x10)),  # alone, a number is an expression: hex, as SOS evaluates it
    (("point", "10"), ("point", 10)),  # after a name, decimal
    (("3", "5"), ("3", 5)),  # two arguments: the first is a name whatever it looks like
    (("0x3", None), ("0x3", None)),
])
def test_clrstack_i_arguments_are_read_as_sos_reads_them(words, want) -> None:  # type: ignore[no-untyped-def]
    assert icordebug_arguments(args(True, *words)) == want


def test_clrstack_arguments_need_i() -> None:
    with pytest.raises(UsageError):
        icordebug_arguments(args(False, "point"))
    with pytest.raises(UsageError):
        icordebug_arguments(args(True, "point", "x"))


@pytest.mark.parametrize("frame, kind", [
    ("InlinedCallFrame", "Managed to Unmanaged transition"),
    ("ExternalMethodFrame", "Managed to Unmanaged transition"),   # TT_M2U from FramedMethodFrame
    ("DynamicHelperFrame", "Internal call"),                      # TT_InternalCall
    ("SoftwareExceptionFrame", "Exception"),                      # TT_InternalCall, INTERCEPTION_EXCEPTION
    ("FaultingExceptionFrame", "Exception"),                      # TT_NONE, INTERCEPTION_EXCEPTION
    ("PrestubMethodFrame", "JIT Compilation"),
    ("DebuggerClassInitMarkFrame", "Class initialization"),
    ("StubDispatchFrame", None),                                  # special-cased out by the DAC
    ("ResumableFrame", None), ("HijackFrame", None), ("ProtectValueClassFrame", None),
    ("HelperMethodFrame_1OBJ", "Internal call"),                  # runtimes before .NET 10
    ("SomeFutureFrame", "Unknown internal frame."),               # SOS's default
])
def test_internal_frame_kinds_follow_the_debugger_api(frame: str, kind: str | None) -> None:
    from sosext.commands.icordebug import internal_kind
    assert internal_kind(frame) == kind


def _frames_in(handler: tuple[int, int], ips: list[tuple[int, int]]):  # type: ignore[no-untyped-def]
    """A fake runtime whose one method's code at 0x1000 has a finally handler at ``handler``
    (native offsets), and frames (method desc, ip) on a stack."""
    from types import SimpleNamespace
    from sosext.readers.stacks import ClrStackFrame, FrameKind
    clause = SimpleNamespace(clause_type=1, handler_start_offset=handler[0], handler_end_offset=handler[1],
                             filter_offset=0)
    reader = SimpleNamespace(
        code_header_data=lambda ip: SimpleNamespace(method_start=0x1000) if 0x1000 <= ip < 0x2000 else None,
        traverse_eh_info=lambda start: [clause])
    frames = tuple(ClrStackFrame(FrameKind.MANAGED, 0x100 * (k + 1), ip, md, "") for k, (md, ip) in enumerate(ips))
    # No descriptor to read beside the DAC: funclets are told by the DAC's EH clauses.
    return SimpleNamespace(reader=reader, contracts_beside=lambda: None), frames


def test_a_funclets_variables_are_its_parents() -> None:
    """ICorDebug looks a funclet's variables up at its parent's IP (GetInspectionIP): a webapi
    core showed a finally funclet of DoSend.MoveNext whose `int local_0` SOS printed (-1, its
    parent's) where the funclet's own IP locates nothing."""
    from sosext.clr.threads.frames import inspection_frame
    # frame 0: the finally funclet; frame 1: another method; frame 2: the parent body, in its try.
    runtime, frames = _frames_in((0x5a8, 0x627), [(0xA, 0x1000 + 0x5c0), (0xB, 0x3000), (0xA, 0x1000 + 0x4ec)])
    assert inspection_frame(runtime, frames, 0) == 2
    assert [inspection_frame(runtime, frames, i) for i in (1, 2)] == [1, 2]


def test_a_frame_outside_handlers_and_a_funclet_without_parent_are_their_own() -> None:
    from sosext.clr.threads.frames import inspection_frame
    runtime, frames = _frames_in((0x5a8, 0x627), [(0xA, 0x1000 + 0x100), (0xA, 0x1000 + 0x200)])
    assert inspection_frame(runtime, frames, 0) == 0  # recursion, not a funclet
    runtime, frames = _frames_in((0x5a8, 0x627), [(0xA, 0x1000 + 0x5b0), (0xA, 0x1000 + 0x600)])
    assert inspection_frame(runtime, frames, 0) == 0  # a nested funclet, and no body below


def test_a_dynamic_method_has_no_il_frame() -> None:
    """An expression tree's lambda_method1 has no MethodDef row (token 0x06000000): the debugger
    API gives it no IL frame, and SOS prints its SP and IP alone (a fresh webapi core showed it)."""
    from types import SimpleNamespace
    from sosext.clr.threads.frames import has_il
    runtime = SimpleNamespace(reader=SimpleNamespace(method_desc_data=lambda md: SimpleNamespace(
        token=0x06000000, module_ptr=0x10)), catalog=SimpleNamespace(metadata=lambda m: None))
    assert not has_il(runtime, 0x7F0000001000)


def test_a_reference_to_no_object_is_a_bad_reference() -> None:
    """DacDbi's CheckRef: a stale reference (a webapi core's `local_0` held 0x3) cannot be
    dereferenced; SOS prints CORDBG_E_BAD_REFERENCE_VALUE for it."""
    from types import SimpleNamespace
    from sosext.clr.threads.frames import _bad_reference
    memory = {0x7F00_0000_1000: (0x7F00_0000_2000).to_bytes(8, "little")}
    target = SimpleNamespace(read_partial=lambda a, n: memory.get(a, b"")[:n])
    checks = SimpleNamespace(method_table_or_none=lambda mt: mt if mt == 0x7F00_0000_2000 else None)
    runtime = SimpleNamespace(target=target, cache=lambda key, make: checks)
    assert _bad_reference(runtime, 0x3)               # unreadable
    assert not _bad_reference(runtime, 0x7F00_0000_1000)  # a MethodTable
    assert not _bad_reference(runtime, 0)             # null is printed as null
    memory[0x7F00_0000_1000] = (0x1234).to_bytes(8, "little")
    assert _bad_reference(runtime, 0x7F00_0000_1000)  # readable, but no MethodTable


def test_a_generic_struct_argument_is_a_value_type_by_its_definition() -> None:
    """A shared async method's struct state machine (`<SerializeAsync>d__15<WeatherForecast[]>`,
    a fresh webapi core's `ref TStateMachine stateMachine`) has no MethodTable to look up by name;
    its TypeDef's base type says it is a struct, so clrstack -i prints `@ 0x<address>` as SOS."""
    from types import SimpleNamespace
    from sosext.clr.threads.framegenerics import _defined_as_value_type
    from sosext.clr.typesystem.debuggernames import TypeArgument
    bases = {0x02000005: 0x01000001, 0x02000006: 0x01000002}
    names = {0x01000001: "System.ValueType", 0x01000002: "System.Object"}
    types = {"Ns.Json`1+<SerializeAsync>d__15": 0x02000005, "Ns.Box`1": 0x02000006}
    md = SimpleNamespace(find_type=types.get, type_def=lambda t: SimpleNamespace(extends=bases[t]),
                         type_name=lambda t: names[t])
    runtime = SimpleNamespace(catalog=SimpleNamespace(find=lambda a: [1] if a == "Lib" else [], metadata=lambda m: md))

    def arg(runtime_name: str, assembly: str = "Lib") -> TypeArgument:
        return TypeArgument(runtime_name, runtime_name, assembly)
    assert _defined_as_value_type(runtime, arg("Ns.Json`1+<SerializeAsync>d__15[[WeatherForecast[], App]]")) is True
    assert _defined_as_value_type(runtime, arg("Ns.Box`1[[System.String, System.Private.CoreLib]]")) is False
    assert _defined_as_value_type(runtime, arg("Ns.Missing`1[[X, Y]]")) is None
    assert _defined_as_value_type(runtime, arg("Ns.NotGeneric")) is None


def test_the_debugger_api_excludes_a_ranges_end_but_for_the_last() -> None:
    """FindNativeInfoInILVariableArray: [start, end) holds the variable; at a range's end only
    the variable's last-starting range counts. A fresh webapi core's socket frame returned to
    offset 0x5b where `this` lived in [0x38, 0x5b] and again later: SOS printed it as not
    available, where the DAC (ends included) gives it."""
    from types import SimpleNamespace
    from sosext.clr.threads.frames import icordebug_finds
    r = [SimpleNamespace(number=0, start=0x38, end=0x5b), SimpleNamespace(number=0, start=0x70, end=0x90),
         SimpleNamespace(number=1, start=0x10, end=0x40)]
    assert icordebug_finds(r, 0, 0x40) and icordebug_finds(r, 0, 0x38)
    assert not icordebug_finds(r, 0, 0x5b)      # an end, and not of the last-starting range
    assert icordebug_finds(r, 0, 0x90)          # the end of the last-starting range
    assert icordebug_finds(r, 1, 0x40)          # its only range is its last
    assert not icordebug_finds(r, 2, 0x40)      # no range at all
