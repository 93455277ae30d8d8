"""The call-instruction check dumpstack uses to tell return addresses from other stack words."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sosext.clr.threads.rawstack import is_call_before


def ends(code: bytes) -> bytes:
    """Eight bytes of code that end with ``code`` (what is read before a return address)."""
    return (b"\x90" * 8 + code)[-8:]


def test_x64_calls_are_recognised() -> None:
    assert is_call_before(ends(bytes.fromhex("e8 10 20 30 40")), "x86_64")  # call rel32
    assert is_call_before(ends(bytes.fromhex("ff d0")), "x86_64")  # call rax
    assert is_call_before(ends(bytes.fromhex("41 ff d3")), "x86_64")  # call r11
    assert is_call_before(ends(bytes.fromhex("ff 15 00 10 00 00")), "x86_64")  # call [rip+0x1000]
    assert is_call_before(ends(bytes.fromhex("ff 50 08")), "x86_64")  # call [rax+8]
    assert is_call_before(ends(bytes.fromhex("41 ff 53 10")), "x86_64")  # call [r11+0x10]
    assert is_call_before(ends(bytes.fromhex("ff 10")), "x86_64")  # call [rax]
    assert is_call_before(ends(bytes.fromhex("41 ff 13")), "x86_64")  # call [r11]


def test_x64_non_calls_are_not() -> None:
    assert not is_call_before(ends(bytes.fromhex("90 90 90 90 90")), "x86_64")
    assert not is_call_before(ends(bytes.fromhex("ff e0")), "x86_64")  # jmp rax
    assert not is_call_before(ends(bytes.fromhex("90 ff 20")), "x86_64")  # jmp [rax]
    assert not is_call_before(ends(bytes.fromhex("48 89 c7")), "x86_64")  # mov rdi, rax
    assert not is_call_before(b"", "x86_64")


def test_arm64_bl_and_blr() -> None:
    assert is_call_before(ends((0x94000010).to_bytes(4, "little")), "aarch64")  # bl +0x40
    assert is_call_before(ends((0xD63F0200).to_bytes(4, "little")), "aarch64")  # blr x16
    assert not is_call_before(ends((0xD61F0200).to_bytes(4, "little")), "aarch64")  # br x16
    assert not is_call_before(b"\x00\x00", "aarch64")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=16), st.sampled_from(["x86_64", "aarch64"]))
def test_any_bytes_answer_a_bool(code: bytes, arch: str) -> None:
    assert is_call_before(code, arch) in (True, False)
