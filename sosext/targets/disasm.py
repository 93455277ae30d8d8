"""Disassembly as a host capability: each debugger has a disassembler, the CLI borrows
binutils' objdump when it is installed.

Targets hand back :class:`Instruction` records (address, bytes, Intel-syntax text); the
commands annotate them with managed names. Nothing here knows the CLR.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

OBJDUMP_MACHINES = {"x86_64": "i386:x86-64", "aarch64": "aarch64"}
_OBJDUMP_LINE = re.compile(r"^\s*([0-9a-f]+):\t((?:[0-9a-f]{2} )+)\s*\t?(.*)$")


@dataclass(frozen=True, slots=True)
class Instruction:
    address: int
    raw: bytes
    text: str  # mnemonic and operands, Intel syntax on x86-64 ("call qword ptr [rip+0x1234]")

    @property
    def mnemonic(self) -> str:
        return self.text.split(None, 1)[0] if self.text else ""

    @property
    def operands(self) -> str:
        parts = self.text.split(None, 1)
        return parts[1].strip() if len(parts) > 1 else ""


class NoDisassembler(Exception):
    """The host has no disassembler (the CLI without binutils)."""


def objdump_disassemble(address: int, code: bytes, arch: str) -> list[Instruction]:
    """``code`` (read from ``address``) disassembled by objdump, Intel syntax on x86-64."""
    tool = shutil.which("objdump")
    machine = OBJDUMP_MACHINES.get(arch)
    if tool is None or machine is None:
        raise NoDisassembler("no disassembler: install binutils (objdump) or use LLDB or GDB")
    fd, path = tempfile.mkstemp(prefix="sosext-code-")  # 0600, a fresh name: nothing followed or overwritten
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(code)
        cmd = [tool, "-D", "-b", "binary", "-m", machine, f"--adjust-vma={address:#x}", "--insn-width=16",
               "-z", path]
        if arch == "x86_64":
            cmd[1:1] = ["-M", "intel"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    finally:
        os.unlink(path)
    if done.returncode != 0:
        raise NoDisassembler(f"objdump failed: {done.stderr.strip().splitlines()[-1:] or done.returncode}")
    out: list[Instruction] = []
    for line in done.stdout.splitlines():
        m = _OBJDUMP_LINE.match(line)
        if m is None:
            continue
        addr = int(m.group(1), 16)
        raw = bytes.fromhex(m.group(2).replace(" ", ""))
        text = " ".join(m.group(3).split())
        out.append(Instruction(addr, raw, text))
    return out
