"""Which runtime reader answers for a target: the DAC reader or the contracts reader.

Both implement readers/protocol.py's RuntimeReader and give the same answers on the runtimes
both read; the choice is about what can run:

* asked for (``--reader``, ``sosext.open(..., reader=)``, ``setreader``, ``SOSEXT_READER``):
  that reader, or its one-line refusal. Asking for ``contracts`` never loads the DAC.
* automatic: the DAC reader when the target's DAC is found, trusted and loads; the contracts
  reader when the core is of another architecture (a DAC runs only on its own), or the DAC
  is missing, untrusted or fails to load (but a DAC directory the user named with
  ``setclrpath`` is a choice of the DAC: its refusal stands); the one line that says why is kept in
  ``ReaderChoice.reason`` (sosstatus and eeversion show it; a fallback is printed once).
"""
from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import ContractError, DacError, UsageError
from ..targets.base import Target

if TYPE_CHECKING:
    from ..dac.loader import DacLocation
    from ..readers.protocol import RuntimeReader

READERS = ("dac", "contracts")
_HOST_ARCH = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


def _valid(name: str | None, where: str) -> str | None:
    if name in (None, "", "auto"):
        return None
    name = name.lower()
    if name not in READERS:
        raise UsageError(f"{where}: unknown reader {name!r} (choose dac, contracts or auto)")
    return name


# The user's choice, the one place every entry point reads: --reader, setreader, or
# SOSEXT_READER in the environment (the same choice made once, for scripts). None: automatic.
_choice: str | None = None
_env_checked = False


def set_reader(name: str | None) -> None:
    """``setreader``/``--reader``: answer with ``name`` ("dac" or "contracts"; None/"auto": choose)."""
    global _choice, _env_checked
    _choice = _valid(name, "setreader")
    _env_checked = True


def reader_choice() -> str | None:
    """The reader the user asked for (None: automatic)."""
    global _choice, _env_checked
    if not _env_checked:
        _env_checked = True
        _choice = _valid(os.environ.get("SOSEXT_READER"), "SOSEXT_READER")
    return _choice


@dataclass(frozen=True, slots=True)
class ReaderChoice:
    reader: "RuntimeReader"
    location: "DacLocation"  # the runtime module (and, for the DAC reader, the DAC file)
    reason: str  # one line: which reader answers and why
    fallback: bool = False  # the DAC was wanted but could not run: worth telling the user


def host_arch() -> str:
    machine = platform.machine().lower()
    return _HOST_ARCH.get(machine, machine)


def open_reader(target: Target, choice: str | None = None, location: "DacLocation | None" = None) -> ReaderChoice:
    """The reader for ``target``: the one asked for, or the automatic choice."""
    choice = _valid(choice, "--reader") if choice is not None else reader_choice()
    if choice == "contracts":
        return _contracts(target, "asked for (setreader, --reader or SOSEXT_READER)")
    if choice == "dac":
        return _dac(target, location, "asked for (setreader, --reader or SOSEXT_READER)")
    arch = getattr(target, "arch", "x86_64")
    if arch != host_arch():
        return _contracts(target, f"the target is {arch} and a DAC runs only on its own architecture ({host_arch()})",
                          fallback=True, instead=f"a {host_arch()} DAC cannot read an {arch} target")
    from ..dac.loader import clr_path_override
    if clr_path_override():
        # A DAC directory the user named is a choice of the DAC: its refusal stands.
        return _dac(target, location, "its DAC is in the directory you chose (setclrpath)")
    try:
        return _dac(target, location, "its DAC is found and trusted")
    except DacError as dac_error:
        try:
            return _contracts(target, f"the DAC cannot be used: {dac_error}", fallback=True)
        except ContractError as contract_error:
            raise DacError(f"{dac_error} (and the contracts reader cannot read this runtime: {contract_error})",
                           dac_error.hr) from None


def _dac(target: Target, location: "DacLocation | None", why: str) -> ReaderChoice:
    from ..dac.loader import locate_dac
    from ..dac.sos import open_dac
    location = location or locate_dac(target)
    return ReaderChoice(open_dac(target, location), location, f"the DAC reader answers: {why}")


def _contracts(target: Target, why: str, fallback: bool = False,
               instead: str = "--reader dac reads it") -> ReaderChoice:
    from ..contracts.reader import ContractReader
    from ..contracts.runtime import runtime_location
    location = runtime_location(target)
    try:
        reader = ContractReader(target, location.runtime)
    except ContractError as e:
        raise ContractError(f"the contracts reader cannot read this runtime: {e}; {instead}") from None
    return ReaderChoice(reader, location, f"the contracts reader answers: {why}", fallback)
