"""Native symbol names (sosext.targets.symbols) against binutils' nm on a library we compile:
every sized function symbol nm lists is found at its start, inside, and not past its end."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from sosext.targets.base import Module
from sosext.targets.symbols import native_symbol

SOURCE = """
int sosext_first(int x) { return x * 3 + 1; }
static int sosext_hidden(int x) { return x ^ 0x55; }
int sosext_second(int x) { int s = 0; for (int i = 0; i < x; i++) s += sosext_hidden(i); return s; }
"""


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> Path:
    if not (shutil.which("gcc") and shutil.which("nm")):
        pytest.skip("gcc and nm are needed")
    d = tmp_path_factory.mktemp("symbols")
    (d / "lib.c").write_text(SOURCE)
    lib = d / "libsosextsym.so"
    subprocess.run(["gcc", "-O0", "-shared", "-fPIC", "-Wl,--build-id", "-o", str(lib), str(d / "lib.c")], check=True)
    return lib


def nm_functions(lib: Path) -> dict[str, tuple[int, int]]:
    out = subprocess.run(["nm", "-S", "--defined-only", str(lib)], check=True, capture_output=True, text=True).stdout
    funcs = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[2] in "Tt" and parts[3].startswith("sosext_"):
            funcs[parts[3]] = (int(parts[0], 16), int(parts[1], 16))
    return funcs


def test_every_function_is_named_inside_it_and_not_past_it(library: Path) -> None:
    funcs = nm_functions(library)
    assert set(funcs) == {"sosext_first", "sosext_second", "sosext_hidden"}
    base = 0x7F0000000000
    module = Module(library.name, str(library), base, 0x10000)
    for name, (start, size) in funcs.items():
        assert native_symbol(module, base + start) == (name, 0)
        assert native_symbol(module, base + start + size - 1) == (name, size - 1)
        end = native_symbol(module, base + start + size)
        assert end is None or end[0] != name


def test_another_build_of_the_file_is_not_used(library: Path) -> None:
    start, _size = nm_functions(library)["sosext_first"]
    module = Module(library.name, str(library), 0x1000000, 0x10000, build_id=b"\x01" * 20)
    assert native_symbol(module, 0x1000000 + start) is None


def test_a_missing_file_has_no_names() -> None:
    assert native_symbol(Module("libnone.so", "/nonexistent/libnone.so", 0x1000, 0x1000), 0x1010) is None


def test_cfi_unwinds_a_call_at_every_functions_entry(library: Path) -> None:
    """At a function's first instruction the return address is at [rsp] and the caller's stack
    pointer is rsp + 8: the .eh_frame rules found through .eh_frame_hdr must say so."""
    from sosext.targets.cfi import unwind_step

    base, sp, ret = 0x7F0000000000, 0x7FFE00001000, 0x7F0000123456
    memory = {sp: ret}
    module = Module(library.name, str(library), base, 0x10000)
    for name, (start, _size) in nm_functions(library).items():
        regs = {"rip": base + start, "rsp": sp, "rbp": 0x1234, "rbx": 7}
        step = unwind_step(module, regs, memory.__getitem__, leaf=True)
        assert step is not None, name
        assert (step.sp, step.ip, step.regs["rbp"], step.regs["rbx"]) == (sp + 8, ret, 0x1234, 7), name
