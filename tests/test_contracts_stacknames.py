"""The names clrstack prints for MethodDescs when the contracts reader answers (what an arm64
core's stacks show, tests/test_arm64.py) are the DAC's GetMethodDescName text: checked here on
x86-64 cores, where both readers run, for every managed frame of every thread."""
from __future__ import annotations

import pytest

import drivers
from harness import Debuggee, build_debuggee

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("scenario", ["threads", "heap"])
def test_method_desc_names_equal_the_dacs(scenario: str, tmp_path) -> None:
    drivers.require_dotnet_and_lldb()
    import sosext
    from sosext.clr.threads.stacks import NotManagedThread, walk_stack
    from sosext.contracts.reader import ContractReader
    with Debuggee(scenario, dll=build_debuggee(), core_dir=tmp_path) as d:
        core = d.write_core("heap", tmp_path / f"{scenario}.core")
    rt = sosext.open(str(core), reader="dac")
    try:
        model = rt.model
        names: dict[int, str] = {}
        for _addr, t in model.thread_records():
            try:
                stack = walk_stack(model, t.os_thread_id)
            except NotManagedThread:
                continue
            names.update((f.method_desc, f.method_name) for f in stack.frames if f.is_managed and f.method_desc)
        contracts = ContractReader(model.target, model.target.find_module("libcoreclr.so"))
        ours = {md: contracts.method_desc_name(md) for md in names}
    finally:
        rt.close()
    named = {md: n for md, n in ours.items() if n is not None}
    print(f"{scenario}: {len(named)} of {len(names)} names compared; unnamed: {[names[md] for md in names if md not in named]}")
    assert {md: names[md] for md in named} == named
    # Only the kinds methoddescs.py leaves unnamed (IL stubs, generic method instantiations) may be None.
    assert len(named) >= len(names) - 3 and len(named) >= 8, {hex(md): names[md] for md in names if md not in named}
