"""The contract descriptor parser on synthetic and fuzzed bytes: untrusted input from a core.

A descriptor record (DNCCDAC header, JSON, pointer data) is laid out in a fake target's memory;
the parser must read what is well formed and refuse anything else with one ContractError line,
never another exception, never a hang, whatever the bytes. The real-runtime counterpart is
tests/test_readers.py (the .NET 10 descriptor of the scenario cores, against the DAC).
"""
from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sosext.contracts import descriptor as d  # noqa: E402
from sosext.errors import ContractError, MemoryReadError  # noqa: E402
from sosext.targets.base import TargetBase  # noqa: E402

BASE = 0x10_0000
JSON_AT = 0x20_0000
DATA_AT = 0x30_0000


class Memory(TargetBase):
    """A target whose memory is a few byte blocks."""

    def __init__(self, blocks: dict[int, bytes], pointer_size: int = 8) -> None:
        self.blocks = blocks
        self.pointer_size = pointer_size

    def read_partial(self, address: int, size: int) -> bytes:
        for start, data in self.blocks.items():
            if start <= address < start + len(data):
                return data[address - start:address - start + size]
        return b""

    def read(self, address: int, size: int) -> bytes:
        data = self.read_partial(address, size)
        if len(data) != size:
            raise MemoryReadError(address, size)
        return data


def record(text: bytes, pointers: tuple[int, ...] = (), *, magic: int = d.MAGIC, flags: int = 1,
           size: int | None = None, count: int | None = None) -> Memory:
    header = struct.pack("<QIIQII", magic, flags, len(text) if size is None else size, JSON_AT,
                         len(pointers) if count is None else count, 0) + struct.pack("<Q", DATA_AT)
    return Memory({BASE: header, JSON_AT: text, DATA_AT: struct.pack(f"<{len(pointers)}Q", *pointers)})


DOC = {
    "version": 0, "baseline": "empty",
    "types": {"Thread": {"Id": 16, "LinkNext": [112, "pointer"]}, "GCHandle": {"!": 8}, "Empty": {}},
    "globals": {"Hex": ["0x10", "uint32"], "Plain": 7, "Negative": "-3", "Indirect": [[1], "pointer"],
                "Bare": [0], "Arch": ["x64", "string"]},
    "contracts": {"Thread": 1, "GC": "2"},
}


def test_reads_types_globals_and_contracts() -> None:
    desc = d.read_descriptor_at(record(json.dumps(DOC).encode(), (0xAAAA, 0xBBBB)), BASE)
    assert desc.contracts == {"Thread": 1, "GC": 2}
    assert desc.pointer_size == 8 and desc.address == BASE
    assert desc.field_offset("Thread", "Id") == 16 and desc.field_offset("Thread", "LinkNext") == 112
    assert desc.type_size("GCHandle") == 8 and desc.type_size("Thread") is None and desc.has_type("Empty")
    assert desc.has_field("Thread", "Id") and not desc.has_field("Thread", "Nope") and not desc.has_field("X", "Id")
    assert desc.global_value("Hex") == 16 and desc.global_value("Plain") == 7 and desc.global_value("Negative") == -3
    assert desc.global_value("Indirect") == 0xBBBB and desc.global_value("Bare") == 0xAAAA
    assert desc.global_string("Arch") == "x64" and not desc.has_global("Arch") and not desc.has_global("Missing")


@pytest.mark.parametrize("call", [lambda x: x.field_offset("Thread", "Nope"), lambda x: x.field_offset("Nope", "Id"),
                                  lambda x: x.global_value("Missing"), lambda x: x.global_value("Arch")])
def test_absent_names_are_contract_errors(call) -> None:  # type: ignore[no-untyped-def]
    desc = d.read_descriptor_at(record(json.dumps(DOC).encode(), (1, 2)), BASE)
    with pytest.raises(ContractError):
        call(desc)


@pytest.mark.parametrize("memory, words", [
    (record(b"{}", magic=0x1234), "bad magic"),
    (record(b"{}", flags=0), "lack bit 0"),
    (record(b"{}", flags=3), "32-bit pointers"),
    (record(b"{}", size=0), "out of bounds"),
    (record(b"{}", size=d.MAX_JSON + 1), "out of bounds"),
    (record(b"{}", count=d.MAX_POINTER_DATA + 1), "too many"),
    (record(b"{}", size=4096), "the dump lacks it"),
    (record(b"[1, 2]"), "not an object"),
    (record(b"{not json"), "damaged"),
    (record(b"[" * 100_000), "damaged"),
    (record(b"\xff\xfe{}"), "damaged"),
    (record(json.dumps({"types": {"T": {"f": "x"}}}).encode()), "offset of T.f is not an integer"),
    (record(json.dumps({"types": {"T": {"f": True}}}).encode()), "not an integer"),
    (record(json.dumps({"types": {"T": {"f": 1 << 70}}}).encode()), "out of range"),
    (record(json.dumps({"types": []}).encode()), "types is not an object"),
    (record(json.dumps({"globals": {"g": [[5], "pointer"]}}).encode(), (1,)), "pointer slot 5 of 1"),
    (record(json.dumps({"globals": {"g": ["x" * 300, "string"]}}).encode()), "not a short string"),
    (record(json.dumps({"contracts": {"C": None}}).encode()), "not an integer"),
    (record(json.dumps({"types": {f"T{i}": {} for i in range(d.MAX_TYPES + 1)}}).encode()), "too many"),
])
def test_damage_is_one_contract_error_line(memory: Memory, words: str) -> None:
    with pytest.raises(ContractError) as e:
        d.read_descriptor_at(memory, BASE)
    message = str(e.value)
    assert words in message and "\n" not in message, message


def test_a_descriptor_nowhere_is_one_line() -> None:
    with pytest.raises(ContractError, match="the dump lacks it"):
        d.read_descriptor_at(Memory({}), BASE)
    with pytest.raises(ContractError, match="bad address"):
        d.read_descriptor_at(Memory({}), 0)


def test_sub_descriptors_are_merged_and_bounded() -> None:
    sub_at, sub_json, slot = 0x40_0000, 0x50_0000, 0x60_0000
    sub_text = json.dumps({"types": {"Thread": {"Extra": 8}, "GCHeap": {"!": 64}}, "globals": {"NumHeaps": 4},
                           "contracts": {"GC": 1}}).encode()
    sub = struct.pack("<QIIQII", d.MAGIC, 1, len(sub_text), sub_json, 0, 0) + struct.pack("<Q", 0)
    main = dict(DOC, subDescriptors={"GC": [[2], "pointer"], "Absent": [[3], "pointer"]})
    memory = record(json.dumps(main).encode(), (1, 2, slot, 0))
    memory.blocks.update({sub_at: sub, sub_json: sub_text, slot: struct.pack("<Q", sub_at)})
    desc = d.read_descriptor_at(memory, BASE)
    assert desc.sub_descriptors == ("GC",)
    assert desc.field_offset("Thread", "Id") == 16 and desc.field_offset("Thread", "Extra") == 8
    assert desc.type_size("GCHeap") == 64 and desc.global_value("NumHeaps") == 4 and desc.contracts["GC"] == 1
    # A descriptor naming itself as its sub-descriptor stops at the depth bound.
    loop = dict(DOC, subDescriptors={"Self": [[2], "pointer"]})
    memory = record(json.dumps(loop).encode(), (1, 2, slot))
    memory.blocks[slot] = struct.pack("<Q", BASE)
    with pytest.raises(ContractError, match="too deeply"):
        d.read_descriptor_at(memory, BASE)


json_values = st.recursive(st.none() | st.booleans() | st.integers(-(1 << 70), 1 << 70) | st.text(max_size=12),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                                        max_size=4),
                           max_leaves=20)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=st.dictionaries(st.sampled_from(["types", "globals", "contracts", "subDescriptors", "version"]),
                           json_values, max_size=5),
       pointers=st.lists(st.integers(0, (1 << 64) - 1), max_size=4))
def test_fuzzed_json_parses_or_is_one_line(doc: dict, pointers: list[int]) -> None:
    try:
        desc = d.read_descriptor_at(record(json.dumps(doc).encode(), tuple(pointers)), BASE)
    except ContractError as e:
        assert "\n" not in str(e)
        return
    for name in desc.types:
        assert isinstance(desc.types[name][1], dict)
    assert all(isinstance(v, int) for v in desc.contracts.values())


@settings(max_examples=300, deadline=None)
@given(header=st.binary(min_size=0, max_size=48), text=st.binary(max_size=256))
def test_fuzzed_records_parse_or_are_one_line(header: bytes, text: bytes) -> None:
    memory = Memory({BASE: header, JSON_AT: text, DATA_AT: bytes(64)})
    try:
        d.read_descriptor_at(memory, BASE)
    except ContractError as e:
        assert "\n" not in str(e)


# -- the GC's DAC variables (contracts/gcvars.py) on synthetic memory ------------------------------

from sosext.contracts import gcvars  # noqa: E402

VARS_AT = 0x70_0000


def gc_vars(major: int = 2, minor: int = 4, generation_size: int = 256, generations: int = 5,
            variables: tuple[int, ...] = ()) -> Memory:
    count = len(gcvars.GC_VARS)
    values = list(variables) + [0] * (count - len(variables))
    raw = struct.pack("<BB6xQQ", major, minor, generation_size, generations) + struct.pack(f"<{count}Q", *values)
    return Memory({VARS_AT: raw})


def test_gc_dac_vars_are_read_by_name_and_version() -> None:
    v = gcvars.GcDacVars(gc_vars(variables=(0, 0, 0, 0x1234)), VARS_AT)
    assert (v.major, v.minor, v.generation_size, v.total_generation_count) == (2, 4, 256, 5)
    assert v.var("generation_table") == 0x1234 and v.var("dynamic_adaptation_mode") == 0
    old = gcvars.GcDacVars(gc_vars(minor=1), VARS_AT)
    assert old.uses_regions is None and old.var("dynamic_adaptation_mode") == 0


@pytest.mark.parametrize("memory, words", [
    (gc_vars(major=3), "version 3.4"),
    (gc_vars(generation_size=0), "damaged"),
    (gc_vars(generations=100), "damaged"),
    (Memory({VARS_AT: b"\x02\x04"}), "the dump lacks it"),
])
def test_damaged_gc_dac_vars_are_one_line(memory: Memory, words: str) -> None:
    with pytest.raises(ContractError) as e:
        gcvars.GcDacVars(memory, VARS_AT)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_server_heap_counts_are_bounded() -> None:
    n_heaps_at = 0x80_0000
    names = list(gcvars.GC_VARS)
    variables = [0] * len(names)
    variables[names.index("n_heaps")] = n_heaps_at
    memory = gc_vars(variables=tuple(variables))
    memory.blocks[n_heaps_at] = struct.pack("<i", 1_000_000)
    with pytest.raises(ContractError, match="1000000 server heaps"):
        gcvars.GcDacVars(memory, VARS_AT).server_heaps()
