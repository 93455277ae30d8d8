"""Which reader answers (clr/readerchoice.py), on targets that need no debuggee.

A target whose "libcoreclr.so" exports no contract descriptor stands for .NET 8: asked for the
contracts reader it says so in one line naming the DAC reader; an aarch64 core is given the
contracts reader without looking for a DAC; a bad choice is a usage error.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sosext.clr import readerchoice  # noqa: E402
from sosext.errors import ContractError, UsageError  # noqa: E402
from sosext.targets.base import Module, TargetBase  # noqa: E402

# Any ELF shared library without the export stands for an old runtime's libcoreclr.so.
OLD_RUNTIME = next((p for p in ("/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6",
                                "/lib/aarch64-linux-gnu/libc.so.6") if Path(p).exists()), None)


class OldRuntime(TargetBase):
    def __init__(self, arch: str = "x86_64") -> None:
        self.arch = arch

    def modules(self) -> list[Module]:
        return [Module("libcoreclr.so", str(OLD_RUNTIME), 0x7F0000000000, 0x100000)]

    def read_partial(self, address: int, size: int) -> bytes:
        return b""

    def describe(self) -> str:
        return "a test target"


needs_lib = pytest.mark.skipif(OLD_RUNTIME is None, reason="no libc.so.6 to stand for an old libcoreclr.so")


@needs_lib
def test_a_runtime_without_a_descriptor_names_the_dac_reader() -> None:
    with pytest.raises(ContractError) as e:
        readerchoice.open_reader(OldRuntime(), "contracts")
    message = str(e.value)
    assert "\n" not in message and "no contract descriptor" in message and "--reader dac" in message, message


@needs_lib
def test_a_core_of_another_architecture_never_looks_for_the_dac(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    def no_dac(*_a, **_k):  # type: ignore[no-untyped-def]
        raise AssertionError("the DAC was looked for")
    monkeypatch.setattr("sosext.dac.loader.locate_dac", no_dac)
    other = "aarch64" if readerchoice.host_arch() != "aarch64" else "x86_64"
    with pytest.raises(ContractError, match="no contract descriptor"):
        readerchoice.open_reader(OldRuntime(arch=other))


def test_choices_are_checked(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UsageError, match="unknown reader 'sos'"):
        readerchoice.set_reader("sos")
    monkeypatch.setenv("SOSEXT_READER", "Contracts")
    monkeypatch.setattr(readerchoice, "_env_checked", False)
    assert readerchoice.reader_choice() == "contracts"
    readerchoice.set_reader("auto")
    assert readerchoice.reader_choice() is None
