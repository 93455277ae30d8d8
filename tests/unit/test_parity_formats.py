"""Pure formatting pieces of the SOS-parity commands: C#-style generic names, SOS's
human-readable sizes, task state flags, and the bordered table's frame."""
from __future__ import annotations

import pytest

from sosext.clr.features.asyncstacks import box_description, describe_task_flags, is_state_machine_box
from sosext.clr.typesystem.typenames import csharp_name
from sosext.render.bordered import BorderedTable, human_size
from sosext.render.table import Column, Integer


@pytest.mark.parametrize("runtime_name, expected", [
    ("System.String", "System.String"),
    ("System.Int32[]", "System.Int32[]"),
    ("System.Collections.Generic.List`1[[System.String, System.Private.CoreLib]]",
     "System.Collections.Generic.List<System.String>"),
    ("System.Collections.Generic.Dictionary`2+Entry[[System.String, System.Private.CoreLib],"
     "[System.Object, System.Private.CoreLib]][]",
     "System.Collections.Generic.Dictionary<System.String, System.Object>+Entry[]"),
    ("System.Runtime.CompilerServices.AsyncTaskMethodBuilder`1+AsyncStateMachineBox`1"
     "[[System.Threading.Tasks.VoidTaskResult, System.Private.CoreLib],[App.C+<RunAsync>d__3, App]]",
     "System.Runtime.CompilerServices.AsyncTaskMethodBuilder<System.Threading.Tasks.VoidTaskResult>"
     "+AsyncStateMachineBox<App.C+<RunAsync>d__3>"),
    ("Outer`1[[System.Collections.Generic.List`1[[System.Int32[], System.Private.CoreLib]], System.Private.CoreLib]]",
     "Outer<System.Collections.Generic.List<System.Int32[]>>"),
    # Too few arguments: ClrMD names the missing ones T1, T2 … of their segment (test_typenames
    # holds this to ClrMD's own parser); malformed names are left as the runtime wrote them.
    ("Broken`2[[System.Int32, System.Private.CoreLib]]", "Broken<System.Int32, T2>"),
    ("Broken`1[[System.Int32, System.Private.CoreLib],[System.Int32, System.Private.CoreLib]]",
     "Broken`1[[System.Int32, System.Private.CoreLib],[System.Int32, System.Private.CoreLib]]"),
    ("Unterminated`1[[System.Int32", "Unterminated`1[[System.Int32"),
])
def test_csharp_name(runtime_name: str, expected: str) -> None:
    assert csharp_name(runtime_name) == expected


def test_state_machine_box_names() -> None:
    box = csharp_name("System.Runtime.CompilerServices.AsyncTaskMethodBuilder`1+AsyncStateMachineBox`1"
                      "[[System.Int32, System.Private.CoreLib],[App.C+<M>d__0, App]]")
    assert is_state_machine_box(box)
    assert box_description(box) == "App.C+<M>d__0"
    assert not is_state_machine_box("System.Threading.Tasks.Task<System.Int32>")


@pytest.mark.parametrize("flags, text", [
    (0, " "), (0x2000000, " "), (0x10000 | 0x20000, "Started|DelegateInvoked"),
    (0x1000000, "RanToCompletion"), (0x200000 | 0x80000, "ExceptionObservedByParent|Faulted"),
])
def test_task_flags(flags: int, text: str) -> None:
    assert describe_task_flags(flags) == text


@pytest.mark.parametrize("size, text", [
    (0, "0.00kb"), (4096, "4.00kb"), (1023 * 1024, "1023.00kb"), (1 << 20, "1.00mb"),
    (3 << 30, "3.00gb"), (1536, "1.50kb"),
])
def test_human_size(size: int, text: str) -> None:
    assert human_size(size) == text


def test_bordered_table_frame() -> None:
    t = BorderedTable(Column(6, False, str), Integer())
    head = t.header("Memory Type", "Count")
    # "Memory Type" is longer than the number of columns: it widens its column, as SOS's does.
    assert head[1] == " | Memory Type |          Count | "
    assert head[0] == head[2] == " +-" + "-" * 11 + "---" + "-" * 14 + "-+ "
    assert len(head[0]) == len(head[1])
    assert t.row("GCHeap", 1234) == " | GCHeap      |          1,234 | "


@pytest.mark.parametrize("value, expected", [
    (288, "288"),
    # A webapi core's P/Invoke stub under an InlinedCallFrame: its MethodDesc reports no code
    # start (-1), so the displacement is ip + 1; SOS printed "+ 432339026" for ip 0x7FCD19C4F851.
    ((0x7FCD19C4F851 - 0xFFFFFFFFFFFFFFFF) & 0xFFFFFFFFFFFFFFFF, "432339026"),
    (0x80000000, "-2147483648"),
    (0xFFFFFFFF, "-1"),
])
def test_displacements_print_as_sos_printf_d(value: int, expected: str) -> None:
    from sosext.render.numbers import printf_d
    assert printf_d(value) == expected


def test_dso_lists_registers_in_the_context_order():
    """dotnet-dump numbers registers as ClrMD's AMD64Context / Arm64Context declare them and dso
    lists register rows by number: a webapi core's pool thread had rbx before r14."""
    from sosext.commands.roots import _dso_register_order
    assert sorted(["r14", "rip", "rbx", "r8", "rax"], key=_dso_register_order) == ["rax", "rbx", "r8", "r14", "rip"]
    assert sorted(["lr", "x19", "x2", "fp"], key=_dso_register_order) == ["x2", "x19", "fp", "lr"]


def test_pstacks_names_a_dynamic_method_without_its_type():
    """dotnet-dump's parallelstacks printed `lambda_method1(Closure, Object, HttpContext)` for a
    webapi core's expression-tree frame (ClrMD gives LCG's DynamicClass no name)."""
    from sosext.commands.stacks import pstacks_frame_text
    assert pstacks_frame_text("DynamicClass.lambda_method1(System.Runtime.CompilerServices.Closure, System.Object, "
                              "Microsoft.AspNetCore.Http.HttpContext)") == "lambda_method1(Closure, Object, HttpContext)"


def test_pstacks_keeps_a_generic_types_constructor_dot():
    """dotnet-dump printed `KestrelConnection<System.__Canon>..ctor(Int64, ...)` for a webapi core's
    thread stopped on a generic type's constructor; the name's own dot was lost after the
    type's instantiation."""
    from sosext.commands.stacks import pstacks_frame_text
    assert pstacks_frame_text(
        "Microsoft.AspNetCore.Server.Kestrel.Core.Internal.Infrastructure.KestrelConnection`1[[System.__Canon, "
        "System.Private.CoreLib]]..ctor(Int64, System.Func`2<System.__Canon,System.Threading.Tasks.Task>)") == \
        "Microsoft.AspNetCore.Server.Kestrel.Core.Internal.Infrastructure.KestrelConnection<System.__Canon>..ctor(" \
        "Int64, Func<__Canon,Task>)"
    assert pstacks_frame_text("System.Text.StringBuilder..ctor(Int32)") == "System.Text.StringBuilder..ctor(Int32)"


def test_pstacks_names_a_generic_explicit_implementation_by_its_type():
    """dotnet-dump printed `TransportConnection.Get()` for a webapi frame in
    TransportConnection's `IFeatureCollection.Get<TFeature>`: a generic method keeps its type's
    name, not the interface's, which only the declaring type's name tells apart."""
    from sosext.commands.stacks import pstacks_frame_text
    frame = ("Microsoft.AspNetCore.Connections.TransportConnection.Microsoft.AspNetCore.Http.Features."
             "IFeatureCollection.Get[[Microsoft.AspNetCore.Http.Features.IHttpRequestFeature, "
             "Microsoft.AspNetCore.Http.Features]]()")
    assert pstacks_frame_text(frame, "Microsoft.AspNetCore.Connections.TransportConnection") == \
        "Microsoft.AspNetCore.Connections.TransportConnection.Get()"
