"""clrstack -i in frames of shared generic code: the exact instantiation, from the frame's
generic context (sosext/clr/threads/genericcontext.py).

The `parity` debuggee blocks its thread "sosext-generic" in ParityHolder<string>.Wait, a struct's
method whose code every reference-type instantiation shares (its context: a hidden MethodTable),
called from ParityGeneric.Park<string>, a shared generic method (its context: a hidden
MethodDesc). Both take a second argument typed by the generic parameter that is null, which the
debugger API types by the declared type. Its thread "sosext-generic-async" is blocked inside
ParityRunner<string>.RunAsync before the first await: the kickoff method (a class's instance
method: its context is `this`), AsyncMethodBuilderCore.Start<the state machine> (a MethodDesc)
and the state machine's MoveNext (a struct's method: a MethodTable), the shape of an ASP.NET
server's accept loop on a socket thread. The truth prints the threads' OS ids,
typeof(ParityHolder<string>).TypeHandle.Value, Park<string>'s MethodHandle.Value,
typeof(ParityRunner<string>) and the state machine's instantiation over string. What SOS prints
for the same frames is compared in tests/test_sos_parity.py (test_clrstack_i_on_every_thread).

Each test runs on a core of the --tfm runtime and on cores of .NET 8 and .NET 9 (their runtime
packs restored from NuGet, as tests/test_versions.py does), whose GC info measures the slot from
the frame's caller's stack pointer rather than from its own frame (GC info format 4, .NET 10).
The contracts reader walks no stack before .NET 10 (.NET 9's descriptor has no ExecutionManager
contract, .NET 8 has none), so those cores are read by the DAC reader; on them SOS (dotnet-dump)
is the second opinion here (test_clrstack_i_on_old_runtimes_is_sos_s).
"""
from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import drivers
import sosref
from harness import Debuggee, DebuggeeError, build_debuggee
from harness.debuggee import runtime_pack_env, runtime_pack_named

pytestmark = pytest.mark.slow

READERS = ["dac", "contracts"]
OLD_RUNTIMES = ["net8.0", "net9.0"]  # GC info formats 2 and 3: the slot is measured from the caller's SP


@dataclass(frozen=True)
class Case:
    core: Path
    truth: dict
    major: int  # the runtime's major version
    env: dict   # what sosext needs to open the core (a runtime pack's place, named to trust it)


@pytest.fixture(scope="module", params=["--tfm", *OLD_RUNTIMES])
def case(tmp_path_factory, request) -> Case:  # type: ignore[no-untyped-def]
    if shutil.which("dotnet") is None:
        pytest.skip("dotnet is not on PATH: the debuggee needs the .NET SDK")
    tfm = request.config.getoption("--tfm") if request.param == "--tfm" else request.param
    if request.param != "--tfm" and tfm == request.config.getoption("--tfm"):
        pytest.skip(f"{tfm} is the --tfm runtime, tested as such")
    try:
        dll = build_debuggee(tfm)
    except DebuggeeError as e:
        pytest.skip(f"no {tfm} debuggee (its runtime pack could not be restored): {str(e).splitlines()[0]}")
    cores = tmp_path_factory.mktemp(f"generic-context-{tfm}")
    with Debuggee("parity", tfm=tfm, dll=dll, core_dir=cores) as d:
        core = d.write_core("full", cores / "parity.core")
        truth = d.truth
    request.addfinalizer(lambda: core.unlink(missing_ok=True))
    return Case(core, truth, int(tfm.removeprefix("net").split(".")[0]), runtime_pack_env(tfm, dll))


@pytest.fixture
def opened(case: Case, monkeypatch: pytest.MonkeyPatch) -> Iterator[Case]:
    """``case``, with this process able to open its core in process (runtime_pack_named)."""
    with runtime_pack_named(case.env, monkeypatch):
        yield case


def _walks(case: Case, reader: str) -> None:
    if reader == "contracts" and case.major < 10:
        why = "its data descriptor has no ExecutionManager contract" if case.major == 9 else "it has no data descriptor"
        pytest.skip(f"the contracts reader walks no .NET {case.major} stack ({why})")


def _runtime(case: Case, reader: str):  # type: ignore[no-untyped-def]
    from sosext.clr.runtime import ClrRuntime
    from sosext.targets.elfcore import CoreTarget
    _walks(case, reader)
    return ClrRuntime(CoreTarget(case.core), reader=reader)


def _frames(case: Case, reader: str):  # type: ignore[no-untyped-def]
    """(runtime, Wait's frame, Park's frame) of the generic thread, read by ``reader``."""
    rt = _runtime(case, reader)
    stack = rt.reader.stack_frames(case.truth["generic"]["osTid"], arguments=True)
    wait = next(f for f in stack.frames if f.is_managed and ".ParityHolder`1[[" in f.method_name
                and "].Wait(" in f.method_name)
    park = next(f for f in stack.frames if f.is_managed and ".ParityGeneric.Park[[" in f.method_name)
    return rt, wait, park


@pytest.mark.parametrize("reader", READERS)
def test_generic_context_names_the_debuggees_instantiation(opened: Case, reader: str) -> None:
    """The MethodTable in Wait's generic context slot is typeof(ParityHolder<string>)'s, the
    MethodDesc in Park's is Park<string>'s: the frames run the canonical code (their MethodDescs
    are the __Canon ones), their contexts name what the debuggee called."""
    from sosext.clr.threads.genericcontext import exact_instantiation
    case = opened
    rt, wait, park = _frames(case, reader)
    g = case.truth["generic"]
    assert "System.__Canon" in wait.method_name and "System.__Canon" in park.method_name
    exact = exact_instantiation(rt, wait, rt.reader.method_desc_data(wait.method_desc), from_this=False)
    assert exact is not None and exact.class_mt == int(g["holderMt"], 16)
    assert exact.method_desc == wait.method_desc  # a MethodTable context: the method stays the shared one
    exact = exact_instantiation(rt, park, rt.reader.method_desc_data(park.method_desc), from_this=False)
    assert exact is not None and exact.method_desc == int(g["parkMd"], 16)
    assert rt.types.name_of(exact.class_mt) == "SosextDebuggee.ParityGeneric"


@pytest.mark.parametrize("reader", READERS)
def test_clrstack_i_types_shared_frames_exactly(case: Case, reader: str) -> None:
    """clrstack -i -a names the struct's `this` ParityHolder`1<string>& and types the null
    arguments declared !0 and !!0 as string, as the debugger API does with the frames' contexts."""
    g = case.truth["generic"]
    _walks(case, reader)
    _select, out = drivers.run_cli([f"setthread -t {g['osTid']}", "clrstack -i -a"], core=case.core,
                                   env={"SOSEXT_READER": reader, **case.env})
    text = out.text
    frames = re.split(r"\n(?=[0-9A-F]{16} [0-9a-f]{16} )", text)
    wait = next(f for f in frames if "SosextDebuggee.ParityHolder`1.Wait(!0,!0," in f)
    park = next(f for f in frames if "SosextDebuggee.ParityGeneric.Park(!!0,!!0," in f)
    assert re.search(r"^  \+ SosextDebuggee\.ParityHolder`1&lt;string&gt;& this @ 0x[0-9a-f]+$", wait, re.M), wait
    assert re.search(r'^  \+ string item = "parked"$', wait, re.M), wait
    assert re.search(r"^  \+ string missing = null$", wait, re.M), wait
    assert re.search(r'^  \+ string value = "parked"$', park, re.M), park
    assert re.search(r"^  \+ string missing = null$", park, re.M), park
    assert "__Canon" not in wait + park



def _base(rt, frame) -> str:  # type: ignore[no-untyped-def]
    """Which of ``frame``'s registers its GC info measures the generic context slot from: the
    caller's stack pointer before .NET 10 (GC info formats 2 and 3), else the frame register
    when the method has one, else its stack pointer."""
    from sosext.formats.gcinfo import HAS_STACK_BASE_REGISTER, decode_gcinfo_header, gc_info_version
    version = gc_info_version(int(rt.info.version.split(".")[0]))
    head = decode_gcinfo_header(bytes(rt.target.read_partial(rt.reader.code_gc_info(frame.ip), 64)), rt.target.arch,
                                version)
    assert head.generics_context is not None
    if version < 4:
        return "caller_sp"
    return "frame_pointer" if head.flags & HAS_STACK_BASE_REGISTER else "sp"


def _moved(rt, frame, address: int):  # type: ignore[no-untyped-def]
    """``frame`` with the register its GC info measures the generic context slot from (_base)
    moved so that the slot is at ``address``."""
    from dataclasses import replace
    from sosext.formats.gcinfo import decode_gcinfo_header, gc_info_version
    version = gc_info_version(int(rt.info.version.split(".")[0]))
    head = decode_gcinfo_header(bytes(rt.target.read_partial(rt.reader.code_gc_info(frame.ip), 64)), rt.target.arch,
                                version)
    return replace(frame, **{_base(rt, frame): address - head.generics_context})


def test_a_slot_that_names_no_instantiation_leaves_the_canonical_one(opened: Case) -> None:
    """The slot's content is target data: an unreadable slot, a missing base register (the frame
    register; before .NET 10 the caller's stack pointer, which the walk's last frame lacks), a
    slot holding an object, a MethodDesc where a MethodTable belongs or the reverse, give no exact
    instantiation (clrstack -i then prints System.__Canon, as the debugger API does without a
    context), and nothing raises."""
    from dataclasses import replace
    from sosext.clr.addresses import AddressKind, classifier
    from sosext.clr.threads.genericcontext import exact_instantiation
    case = opened
    rt, wait, park = _frames(case, "dac")
    g = case.truth["generic"]
    wait_mdd, park_mdd = rt.reader.method_desc_data(wait.method_desc), rt.reader.method_desc_data(park.method_desc)
    words = {a: rt.target.read_pointer(a) for a in range(wait.sp, park.sp + 0x100, 8)}
    holding = {}
    for a, w in words.items():
        if w == int(g["holderMt"], 16):
            holding.setdefault("mt", a)
        elif w == int(g["parkMd"], 16):
            holding.setdefault("md", a)
        elif w and classifier(rt).classify(w).kind is AddressKind.OBJECT:
            holding.setdefault("object", a)
    assert set(holding) == {"mt", "md", "object"}, holding
    base = _base(rt, park)
    park_base = getattr(_moved(rt, park, holding["md"]), base)
    assert exact_instantiation(rt, _moved(rt, park, holding["md"]), park_mdd, from_this=False) is not None
    assert exact_instantiation(rt, replace(park, **{base: 0}), park_mdd, from_this=False) is None
    assert exact_instantiation(rt, replace(park, **{base: park_base - 0x10 ** 12}), park_mdd, from_this=False) is None
    for where in ("mt", "object"):
        assert exact_instantiation(rt, _moved(rt, park, holding[where]), park_mdd, from_this=False) is None, where
    for where in ("md", "object"):
        assert exact_instantiation(rt, _moved(rt, wait, holding[where]), wait_mdd, from_this=False) is None, where


@pytest.mark.parametrize("reader", READERS)
def test_an_async_state_machine_in_shared_code_is_named_exactly(opened: Case, reader: str) -> None:
    """On the async thread: MoveNext's context is the state machine's instantiation over string
    (a MethodTable), the kickoff method's is its `this` (ParityRunner<string>), and clrstack -i
    names the state machine's `this` <RunAsync>d__N<string>& and the runner's ParityRunner`1<string>."""
    from sosext.clr.threads.genericcontext import exact_instantiation
    case = opened
    g = case.truth["generic"]
    rt = _runtime(case, reader)
    frames = [f for f in rt.reader.stack_frames(g["asyncOsTid"], arguments=True).frames if f.is_managed]
    move_next = next(f for f in frames if ".MoveNext()" in f.method_name and "ParityRunner`1+" in f.method_name)
    kickoff = next(f for f in frames if "ParityRunner`1[[" in f.method_name and "].RunAsync(" in f.method_name)
    exact = exact_instantiation(rt, move_next, rt.reader.method_desc_data(move_next.method_desc), from_this=False)
    assert exact is not None and exact.class_mt == int(g["stateMachineMt"], 16)
    exact = exact_instantiation(rt, kickoff, rt.reader.method_desc_data(kickoff.method_desc), from_this=True)
    assert exact is not None and exact.class_mt == int(g["runnerMt"], 16)
    # Where the slot holds nothing, the `this` argument (in the frame's variables) stands in, as
    # the debugger API's does for a method that takes its context from `this`.
    zero = next(a for a in range(kickoff.sp, kickoff.sp + 0x1000, 8) if rt.target.read_pointer(a) == 0)
    moved = _moved(rt, kickoff, zero)
    assert kickoff.arguments and kickoff.arguments[0].value
    exact = exact_instantiation(rt, moved, rt.reader.method_desc_data(kickoff.method_desc), from_this=True)
    assert exact is not None and exact.class_mt == int(g["runnerMt"], 16)
    assert exact_instantiation(rt, moved, rt.reader.method_desc_data(kickoff.method_desc), from_this=False) is None
    _select, out = drivers.run_cli([f"setthread -t {g['asyncOsTid']}", "clrstack -i -a"], core=case.core,
                                   env={"SOSEXT_READER": reader, **case.env})
    machine = re.escape(g["stateMachineType"])
    assert re.search(rf"^  \+ SosextDebuggee\.ParityRunner`1\+{machine}&lt;string&gt;& this @ 0x[0-9a-f]+$",
                     out.text, re.M), out.text
    assert re.search(r"^  \+ SosextDebuggee\.ParityRunner`1&lt;string&gt; this @ 0x[0-9a-f]+$", out.text, re.M), out.text
    assert "__Canon" not in out.text


def test_clrstack_i_on_old_runtimes_is_sos_s(case: Case) -> None:
    """On .NET 8 and 9 cores, SOS (dotnet-dump) prints the two generic threads' clrstack -i -a
    exactly as sosext does, and neither leaves System.__Canon in them: the exact instantiations
    come from the slots at the callers' stack pointers. (On .NET 10, tests/test_sos_parity.py's
    test_clrstack_i_names_shared_generic_frames_as_sos_does compares them.)"""
    if case.major >= 10:
        pytest.skip("compared on .NET 10 by tests/test_sos_parity.py")
    if sosref.dotnet_dump() is None:
        pytest.skip(f"dotnet-dump {sosref.DOTNET_DUMP_VERSION} is not installed (scripts/setup.sh --test)")
    g = case.truth["generic"]
    commands = [c for tid in (g["osTid"], g["asyncOsTid"]) for c in (f"setthread -t {tid}", "clrstack -i -a")]
    sos = [a.normalised for a in sosref.run_sos(case.core, commands)[1::2]]
    ours = [a.normalised for a in sosref.run_sosext(case.core, commands, env=case.env)[1::2]]
    assert ours == sos
    assert re.search(r"^  \+ SosextDebuggee\.ParityHolder`1&lt;string&gt;& this @ 0x[0-9a-f]+$", sos[0], re.M), sos[0]
    assert "__Canon" not in sos[0] + sos[1]
