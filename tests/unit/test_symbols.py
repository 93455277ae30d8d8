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
