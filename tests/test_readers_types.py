"""The type-system and loader half of the contracts reader answers as the DAC does.

Cores of the heap scenario (workstation/regions and server/segments) and of the fields
scenario. Two checks, each against the runtime's own DAC on the same core:

* records: for every MethodTable on the heap, ``method_table_data``, ``method_table_name``,
  ``method_table_field_data``, every FieldDesc's ``field_desc_data``, the slot rows
  (``method_table_slots``), each slot's method name, MethodDescData, ReJIT and tier record
  and token lookup; for objects of every
  kind, ``object_data``, strings and class names; the AppDomain, its assemblies and modules
  (``module_data``, lookup maps, PE names); statics bases. Field for field, name for name.
* commands: in process, a reader that takes these answers from the contracts reader and
  every other answer (GC heap, threads, handles, code) from the DAC prints byte for byte
  what the DAC reader alone prints: dumpheap -stat/-type/-mt, dumpobj (fields, statics,
  thread statics), dumparray, dumpvc, dumpmt, dumpclass, name2ee (types and methods),
  dumpmd, dumpil, dumpmodule, dumpdomain, objsize, gcroot. The commands' arguments come
  from the debuggee's printed truth.

tests/test_readers.py runs the whole contracts reader against the DAC reader in the CLI.
"""
from __future__ import annotations

import io
import random
import sys
from contextlib import redirect_stderr
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import drivers
from sosext.errors import ReaderUnsupported
from harness import Debuggee, build_debuggee

pytestmark = pytest.mark.slow

CORES = [("heap", "wks", "regions"), ("heap", "svr", "segments"), ("fields", "wks", "regions")]


def _heap_commands(truth: dict) -> list[str]:
    objs, types = truth["objects"], truth["types"]
    out = ["dumpheap -stat", "dumpheap -strings", "dumpdomain", "dumpheap -type SosextDebuggee. -stat"]
    for o in objs.values():
        out += [f"dumpobj {o['address']}", f"objsize {o['address']}"]
        if o.get("rank"):
            out.append(f"dumparray {o['address']}")
    for name, t in types.items():
        out += [f"dumpmt {t['mt']}", f"dumpclass {t['mt']}", f"dumpheap -mt {t['mt']}", f"name2ee *!{name}"]
    out.append(f"dumpobj {truth['itemE']['address']}")
    out.append(f"gcroot {truth['rootChain']['path'][-1]['address']}")
    return out


def _fields_commands(truth: dict) -> list[str]:
    pair_mt = truth["types"]["SosextDebuggee.FieldPair"]["mt"]
    out = [f"dumpobj {truth['holder']['address']}", f"dumpvc {pair_mt} {truth['pair']['address']}"]
    for t in truth["types"].values():
        out += [f"dumpmt {t['mt']}", f"dumpclass {t['mt']}", f"name2ee *!{t['sosName']}"]
    for o in truth["objects"].values():
        out.append(f"dumpobj {o['address']}")
    for p in truth["arrays"]["pairs"]:
        out.append(f"dumpvc {pair_mt} {p['address']}")
    for m in truth["methods"].values():  # one jitted method, one never run
        out += [f"dumpmd {m['methodDesc']}", f"dumpil {m['methodDesc']}",
                f"name2ee *!SosextDebuggee.FieldsHolder.{m['name']}"]
    return out


@dataclass
class Case:
    scenario: str
    truth: dict
    core: Path
    commands: list[str] = field(default_factory=list)


@pytest.fixture(scope="module", params=CORES, ids=lambda c: "-".join(c))
def case(request, tmp_path_factory) -> Case:
    from harness import dotnet_path
    if dotnet_path() is None:
        pytest.skip("dotnet is not on PATH: these tests need the .NET SDK to build the debuggee")
    tfm = request.config.getoption("--tfm")
    scenario, gc, flavor = request.param
    cores = tmp_path_factory.mktemp(f"cores-types-{scenario}-{gc}-{flavor}")
    with Debuggee(scenario, gc=gc, gc_flavor=flavor, tfm=tfm, dll=build_debuggee(tfm), core_dir=cores) as d:
        c = Case(scenario, d.truth, d.write_core("full", cores / "core"))
    c.commands = _heap_commands(c.truth) if scenario == "heap" else _fields_commands(c.truth)
    return c


def _readers(core: Path):  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(drivers.REPO))
    from sosext.contracts.reader import ContractReader
    from sosext.dac.loader import locate_dac
    from sosext.dac.sos import open_dac
    from sosext.targets.elfcore import CoreTarget
    target = CoreTarget(str(core))
    location = locate_dac(target)
    return target, open_dac(target, location), ContractReader(target, location.runtime)


def test_records_equal_the_dacs(case: Case) -> None:
    from sosext.clr.runtime import ClrRuntime
    target, dac, contracts = _readers(case.core)
    rt = ClrRuntime(target, reader="dac")
    index = rt.heap.index()
    mts = [int(m) for m in index.method_tables]
    assert len(mts) > 50
    fields = 0
    for mt in mts:
        data = dac.method_table_data(mt)
        assert contracts.method_table_data(mt) == data, hex(mt)
        assert contracts.method_table_name(mt) == dac.method_table_name(mt), hex(mt)
        fd = dac.method_table_field_data(mt)
        assert contracts.method_table_field_data(mt) == fd, hex(mt)
        if data.is_free:
            continue  # the DAC faults on some questions about the free MethodTable
        assert contracts.static_base_address(mt) == dac.static_base_address(mt), hex(mt)
        assert contracts.method_table_initialization_flags(mt) == dac.method_table_initialization_flags(mt)
        assert contracts.assembly_load_context(mt) == dac.assembly_load_context(mt)
        addr = fd.first_field if fd else 0
        for _ in range(fd.num_static_fields + fd.num_instance_fields if fd else 0):
            want = dac.field_desc_data(addr)
            if want is None:
                break
            assert contracts.field_desc_data(addr) == want, f"FieldDesc {addr:#x} of {dac.method_table_name(mt)}"
            fields += 1
            addr = want.next_field
    assert fields > 200
    # Slots, method names, token lookups.
    names = 0
    for mt in mts:
        if dac.method_table_data(mt).is_free:
            continue
        rows = dac.method_table_slots(mt)
        assert contracts.method_table_slots(mt) == rows, dac.method_table_name(mt)
        for row in rows or ():
            assert contracts.method_desc_name(row.method_desc) == dac.method_desc_name(row.method_desc), \
                hex(row.method_desc)
            assert contracts.method_desc_data(row.method_desc) == dac.method_desc_data(row.method_desc), \
                hex(row.method_desc)
            assert contracts.rejit_information(row.method_desc, 0) == dac.rejit_information(row.method_desc, 0)
            try:
                versions = contracts.tiered_versions(row.method_desc, 0)
            except ReaderUnsupported:
                continue  # a tiered method: its versions' tiers are the DAC reader's
            assert versions == dac.tiered_versions(row.method_desc, 0), hex(row.method_desc)
            names += 1
            if row.token:
                assert contracts.method_desc_from_token(row.defining_module, row.token) == \
                    dac.method_desc_from_token(row.defining_module, row.token)
    assert names > 1000
    # Objects: every kind, strings and class names (the DAC's GetObjectClassName is not asked
    # about free blocks: it faults on some).
    addresses = [int(a) for a in index.addresses]
    random.seed(24)
    for a in random.sample(addresses, min(len(addresses), 3000)):
        od = dac.object_data(a)
        assert contracts.object_data(a) == od, hex(a)
        if od.object_type == 0:
            assert contracts.object_string(a) == dac.object_string(a), hex(a)
        if od.object_type != 1:
            assert contracts.object_class_name(a) == dac.object_class_name(a), hex(a)
    # Domains, assemblies, modules.
    store = dac.app_domain_store_data()
    assert contracts.app_domain_store_data() == store
    domains = dac.app_domain_list(store.domain_count)
    assert contracts.app_domain_list(store.domain_count) == domains
    for d in domains + [store.system_domain]:
        assert contracts.app_domain_data(d) == dac.app_domain_data(d)
        assert contracts.app_domain_name(d) == dac.app_domain_name(d)
        assert contracts.domain_loader_allocator(d) == dac.domain_loader_allocator(d)
    assemblies = dac.assembly_list(domains[0])
    assert contracts.assembly_list(domains[0]) == assemblies and len(assemblies) >= 5
    for a in assemblies:
        assert contracts.assembly_data(domains[0], a) == dac.assembly_data(domains[0], a)
        assert contracts.assembly_name(a) == dac.assembly_name(a)
        modules = dac.assembly_module_list(a)
        assert contracts.assembly_module_list(a) == modules
        for m in modules:
            assert contracts.module_data(m) == dac.module_data(m), hex(m)
            assert contracts.pe_file_name(m) == dac.pe_file_name(m)
            assert contracts.pe_file_base(m) == dac.pe_file_base(m)
            for kind in (0, 1):
                assert contracts.traverse_module_map(m, kind) == dac.traverse_module_map(m, kind)
    # Thread statics, where the scenario has them.
    if case.scenario == "fields":
        holder = int(case.truth["holder"]["mt"], 16)
        for thread, _ in dac.threads():
            assert contracts.thread_static_base_address(holder, thread) == \
                dac.thread_static_base_address(holder, thread)


class TypesHalfReader:
    """The contracts reader's type-system answers, the DAC's for everything else."""

    name = "dac"

    def __init__(self, dac, contracts) -> None:  # type: ignore[no-untyped-def]
        from sosext.contracts.reader import _TYPE_ANSWERS
        self._dac, self._types, self._names = dac, contracts.types, _TYPE_ANSWERS

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self._types if name in self._names else self._dac, name)


def _run_in_process(core: Path, commands: list[str], split: bool) -> list[str]:
    sys.path.insert(0, str(drivers.REPO))
    from sosext.cli import _session_for_core
    from sosext.clr.runtime import set_reader
    from sosext.contracts.reader import ContractReader
    from sosext.hosts.common import execute
    set_reader("dac")
    try:
        session = _session_for_core(str(core))
        session.settings["workers"] = 1
        rt = session.runtime()
        if split:
            rt.reader = TypesHalfReader(rt.reader, ContractReader(rt.target, rt.location.runtime))
        texts = []
        for command in commands:
            out: list[str] = []
            name, _, rest = command.partition(" ")
            with redirect_stderr(io.StringIO()):
                execute(session, name, rest, out.append, out.append, color=False)
            texts.append("\n".join(out))
        return texts
    finally:
        set_reader(None)


def test_types_half_under_the_dacs_gc_prints_what_the_dac_prints(case: Case) -> None:
    _, reader, _ = _readers(case.core)
    # dumpmodule of the debuggee's module (the DAC names it: the truth has only its path).
    mt = int(next(iter(case.truth["types"].values()))["mt"], 16)
    commands = case.commands + [f"dumpmodule {reader.method_table_data(mt).module:#x}"]
    dac = _run_in_process(case.core, commands, split=False)
    split = _run_in_process(case.core, commands, split=True)
    assert len(commands) > 20
    differing = [c for c, a, b in zip(commands, dac, split) if a != b]
    assert not differing, differing
    failed = [c for c, t in zip(commands, dac) if t.startswith("error")]
    assert len(failed) <= len(commands) // 10, failed
