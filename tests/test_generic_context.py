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
"""
from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

import drivers
from harness import Debuggee, build_debuggee

pytestmark = pytest.mark.slow

READERS = ["dac", "contracts"]


@dataclass(frozen=True)
class Case:
    core: Path
    truth: dict


@pytest.fixture(scope="module")
def case(tmp_path_factory, request) -> Case:  # type: ignore[no-untyped-def]
    if shutil.which("dotnet") is None:
        pytest.skip("dotnet is not on PATH: the debuggee needs the .NET SDK")
    tfm = request.config.getoption("--tfm")
    cores = tmp_path_factory.mktemp("generic-context")
    with Debuggee("parity", tfm=tfm, dll=build_debuggee(tfm), core_dir=cores) as d:
        core = d.write_core("full", cores / "parity.core")
        truth = d.truth
    request.addfinalizer(lambda: core.unlink(missing_ok=True))
    return Case(core, truth)


def _frames(case: Case, reader: str):  # type: ignore[no-untyped-def]
    """(runtime, Wait's frame, Park's frame) of the generic thread, read by ``reader``."""
    from sosext.clr.runtime import ClrRuntime
    from sosext.targets.elfcore import CoreTarget
    rt = ClrRuntime(CoreTarget(case.core), reader=reader)
    stack = rt.reader.stack_frames(case.truth["generic"]["osTid"], arguments=True)
    wait = next(f for f in stack.frames if f.is_managed and ".ParityHolder`1[[" in f.method_name
                and "].Wait(" in f.method_name)
    park = next(f for f in stack.frames if f.is_managed and ".ParityGeneric.Park[[" in f.method_name)
    return rt, wait, park


@pytest.mark.parametrize("reader", READERS)
def test_generic_context_names_the_debuggees_instantiation(case: Case, reader: str) -> None:
    """The MethodTable in Wait's generic context slot is typeof(ParityHolder<string>)'s, the
    MethodDesc in Park's is Park<string>'s: the frames run the canonical code (their MethodDescs
    are the __Canon ones), their contexts name what the debuggee called."""
    from sosext.clr.threads.genericcontext import exact_instantiation
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
    _select, out = drivers.run_cli([f"setthread -t {g['osTid']}", "clrstack -i -a"], core=case.core,
                                   env={"SOSEXT_READER": reader})
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



def _moved(rt, frame, address: int):  # type: ignore[no-untyped-def]
    """``frame`` with its stack pointer or frame register (whichever its GC info measures the
    generic context slot from) moved so that the slot is at ``address``."""
    from dataclasses import replace
    from sosext.formats.gcinfo import HAS_STACK_BASE_REGISTER, decode_gcinfo_header
    head = decode_gcinfo_header(bytes(rt.target.read_partial(rt.reader.code_gc_info(frame.ip), 64)), rt.target.arch)
    assert head.generics_context is not None
    base = address - head.generics_context
    return replace(frame, frame_pointer=base) if head.flags & HAS_STACK_BASE_REGISTER else replace(frame, sp=base)


def test_a_slot_that_names_no_instantiation_leaves_the_canonical_one(case: Case) -> None:
    """The slot's content is target data: an unreadable slot, a missing frame register, a slot
    holding an object, a MethodDesc where a MethodTable belongs or the reverse, give no exact
    instantiation (clrstack -i then prints System.__Canon, as the debugger API does without a
    context), and nothing raises."""
    from dataclasses import replace
    from sosext.clr.addresses import AddressKind, classifier
    from sosext.clr.threads.genericcontext import exact_instantiation
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
    park_fp = _moved(rt, park, holding["md"]).frame_pointer
    assert exact_instantiation(rt, _moved(rt, park, holding["md"]), park_mdd, from_this=False) is not None
    assert exact_instantiation(rt, replace(park, frame_pointer=0), park_mdd, from_this=False) is None
    assert exact_instantiation(rt, replace(park, frame_pointer=park_fp - 0x10 ** 12), park_mdd, from_this=False) is None
    for where in ("mt", "object"):
        assert exact_instantiation(rt, _moved(rt, park, holding[where]), park_mdd, from_this=False) is None, where
    for where in ("md", "object"):
        assert exact_instantiation(rt, _moved(rt, wait, holding[where]), wait_mdd, from_this=False) is None, where


@pytest.mark.parametrize("reader", READERS)
def test_an_async_state_machine_in_shared_code_is_named_exactly(case: Case, reader: str) -> None:
    """On the async thread: MoveNext's context is the state machine's instantiation over string
    (a MethodTable), the kickoff method's is its `this` (ParityRunner<string>), and clrstack -i
    names the state machine's `this` <RunAsync>d__N<string>& and the runner's ParityRunner`1<string>."""
    from sosext.clr.runtime import ClrRuntime
    from sosext.clr.threads.genericcontext import exact_instantiation
    from sosext.targets.elfcore import CoreTarget
    g = case.truth["generic"]
    rt = ClrRuntime(CoreTarget(case.core), reader=reader)
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
                                   env={"SOSEXT_READER": reader})
    machine = re.escape(g["stateMachineType"])
    assert re.search(rf"^  \+ SosextDebuggee\.ParityRunner`1\+{machine}&lt;string&gt;& this @ 0x[0-9a-f]+$",
                     out.text, re.M), out.text
    assert re.search(r"^  \+ SosextDebuggee\.ParityRunner`1&lt;string&gt; this @ 0x[0-9a-f]+$", out.text, re.M), out.text
    assert "__Canon" not in out.text
