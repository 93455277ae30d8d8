"""DAC trust without a debuggee: how a path is judged (owners, modes, symbolic links), what
makes an ELF file complete, and the DotNetRuntimeInfo check on a gcc-built stand-in runtime
(the shared/self-contained libcoreclr.so of .NET 8-10 on Linux does not export it)."""
from __future__ import annotations

import os
import pwd
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from sosext.dac import loader  # noqa: E402
from sosext.targets import elfsymbols  # noqa: E402
from sosext.dac.trust import (check_elf_image, declared_runtime_info, parse_runtime_info,  # noqa: E402
                              untrusted_reason)
from sosext.errors import DacError  # noqa: E402
from sosext.targets.base import Module, TargetBase  # noqa: E402

GCC = shutil.which("gcc")
needs_gcc = pytest.mark.skipif(GCC is None, reason="gcc is not installed: no test library can be built")


@pytest.fixture
def trusted(tmp_path: Path):
    """A scratch directory whose whole path is trusted (tmp_path is under /tmp, which is not)."""
    sys.path.insert(0, str(REPO / "tests"))
    from harness.scratch import trusted_scratch
    root, why = trusted_scratch(f"unit-trust-{os.getpid()}")
    if root is None:
        pytest.skip(f"neither the repository's .work/ nor ~/.cache is a trusted location here: {why}")
    yield root
    for dirpath, dirnames, _ in os.walk(root):
        for d in dirnames:
            os.chown(os.path.join(dirpath, d), os.geteuid(), -1)
            os.chmod(os.path.join(dirpath, d), 0o755)
    shutil.rmtree(root, ignore_errors=True)


def test_trusted_file_and_dot_dot(trusted: Path) -> None:
    (trusted / "rt").mkdir()
    (trusted / "rt" / "lib.so").write_bytes(b"x")
    assert untrusted_reason(str(trusted / "rt" / "lib.so")) is None
    assert untrusted_reason(str(trusted / "rt" / ".." / "rt" / "lib.so")) is None


def test_tmp_is_not_trusted(tmp_path: Path) -> None:
    if not str(tmp_path).startswith("/tmp/") or os.stat("/tmp").st_mode & 0o7777 != 0o1777:
        pytest.skip("pytest's tmp_path is not under a sticky world-writable /tmp here")
    f = tmp_path / "lib.so"
    f.write_bytes(b"x")
    assert untrusted_reason(str(f)) == "/tmp is world-writable"


def test_group_or_world_writable_file_or_directory(trusted: Path) -> None:
    d = trusted / "rt"
    d.mkdir()
    f = d / "lib.so"
    f.write_bytes(b"x")
    os.chmod(f, 0o664)
    assert untrusted_reason(str(f)) == f"{f} is group-writable"
    os.chmod(f, 0o644)
    os.chmod(d, 0o1777)  # sticky does not help
    assert untrusted_reason(str(f)) == f"{d} is world-writable"


def test_foreign_owner(trusted: Path) -> None:
    nobody = pwd.getpwnam("nobody").pw_uid
    if os.geteuid() != 0 or nobody == os.geteuid():
        pytest.skip("needs root to give a directory to another user")
    d = trusted / "rt"
    d.mkdir()
    (d / "lib.so").write_bytes(b"x")
    os.chown(d, nobody, -1)
    assert untrusted_reason(str(d / "lib.so")) == f"{d} is owned by uid {nobody}, not by root or by you"


def test_symlink_is_judged_where_it_lives_and_where_it_points(trusted: Path) -> None:
    good = trusted / "good"
    bad = trusted / "bad"
    good.mkdir()
    bad.mkdir()
    (good / "lib.so").write_bytes(b"x")
    (bad / "lib.so").write_bytes(b"x")
    os.chmod(bad, 0o777)
    # A link in an untrusted directory to a trusted file: anyone could have pointed it anywhere.
    os.symlink(good / "lib.so", bad / "link.so")
    assert untrusted_reason(str(bad / "link.so")) == f"{bad} is world-writable"
    # A link in a trusted directory into an untrusted one, absolute and relative.
    os.symlink(bad / "lib.so", good / "abs.so")
    os.symlink("../bad/lib.so", good / "rel.so")
    assert untrusted_reason(str(good / "abs.so")) == f"{bad} is world-writable"
    assert untrusted_reason(str(good / "rel.so")) == f"{bad} is world-writable"
    # A directory link in a trusted place to a trusted place is fine.
    os.symlink(good, trusted / "alias")
    assert untrusted_reason(str(trusted / "alias" / "lib.so")) is None
    os.symlink("loop2", good / "loop1")
    os.symlink("loop1", good / "loop2")
    assert untrusted_reason(str(good / "loop1")).startswith("too many symbolic links")


def test_not_a_regular_file_or_missing(trusted: Path) -> None:
    assert untrusted_reason(str(trusted)) == f"{trusted} is not a regular file"
    assert untrusted_reason(str(trusted / "nope.so")).startswith(f"cannot examine {trusted / 'nope.so'}: ")


def test_elf_checks_on_bytes(tmp_path: Path) -> None:
    f = tmp_path / "x.so"
    f.write_bytes(b"hello")
    with pytest.raises(DacError, match=r"^refusing to load .*x\.so: not a complete ELF shared library "
                                       r"\(no ELF header, file is 5 bytes\)$"):
        check_elf_image(str(f))
    f.write_bytes(b"\x7fELF\x01\x01" + bytes(58))
    with pytest.raises(DacError, match="not a little-endian ELF64 file"):
        check_elf_image(str(f))


# --- DotNetRuntimeInfo ---------------------------------------------------------------------------

RUNTIME_C = """
struct runtime_info {
    char signature[18];
    int version;
    unsigned char runtime_index[24], dac_index[24], dbi_index[24];
};
__attribute__((visibility("default"))) struct runtime_info DotNetRuntimeInfo = {
    "DotNetRuntimeInfo", 1, {0}, {%s}, {0}
};
int pad[4096] = {1};  /* push .data away from file offset == vaddr */
"""


class MappedFile(TargetBase):
    """A stand-in target: one ELF file mapped at ``base`` as the loader would (PT_LOADs)."""

    def __init__(self, path: Path, base: int) -> None:
        from elftools.elf.elffile import ELFFile
        self.path, self.base = path, base
        self.data = path.read_bytes()
        with open(path, "rb") as fh:
            self.loads = [(s["p_vaddr"], s["p_offset"], s["p_filesz"]) for s in ELFFile(fh).iter_segments()
                          if s["p_type"] == "PT_LOAD"]
        self.build_id = elfsymbols.elf_build_id(self.data)

    def read_partial(self, address: int, size: int) -> bytes:
        rva = address - self.base
        for vaddr, offset, filesz in self.loads:
            if vaddr <= rva < vaddr + filesz:
                start = offset + rva - vaddr
                return self.data[start:start + min(size, vaddr + filesz - rva)]
        return b""

    def modules(self) -> list[Module]:
        return [Module("libcoreclr.so", str(self.path), self.base, 1 << 20, self.build_id)]

    def describe(self) -> str:
        return f"stand-in for {self.path}"


def _build(tmp: Path, name: str, source: str, build_id: bytes) -> Path:
    src = tmp / f"{name}.c"
    src.write_text(source)
    out = tmp / name
    subprocess.run([GCC, "-shared", "-fPIC", "-o", str(out), str(src), f"-Wl,--build-id=0x{build_id.hex()}"],
                   check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return out


def test_parse_runtime_info() -> None:
    blob = b"DotNetRuntimeInfo\0" + bytes(2) + struct.pack("<i", 2) + bytes([3, 1, 2, 3]) + bytes(20) \
        + bytes([2, 9, 9]) + bytes(21) + bytes(24)
    info = parse_runtime_info(blob)
    assert info is not None and (info.version, info.runtime_build_id, info.dac_build_id, info.dbi_build_id) == \
        (2, b"\1\2\3", b"\x09\x09", b"")
    assert parse_runtime_info(b"DotNetRuntimeInfX\0" + blob[18:]) is None
    assert parse_runtime_info(blob[:40]) is None


@needs_gcc
def test_dac_build_id_must_equal_the_declared_one(tmp_path: Path) -> None:
    dac_id = bytes(range(1, 21))
    other_id = bytes(range(101, 121))
    runtime_dir = tmp_path / "runtime"
    runtime_dir.mkdir()
    index = ", ".join(str(b) for b in [len(dac_id), *dac_id])
    runtime = _build(runtime_dir, "libcoreclr.so", RUNTIME_C % index, bytes(range(50, 70)))
    target = MappedFile(runtime, 0x7F0000000000)
    declared = declared_runtime_info(target, target.modules()[0], str(runtime))
    assert declared is not None and declared.version == 1 and declared.dac_build_id == dac_id

    marker = tmp_path / "MARKER"
    dac_c = f'#include <stdio.h>\n__attribute__((constructor)) static void c(void) {{ fclose(fopen("{marker}", "w")); }}\n'
    try:
        # setclrpath: trusted by choice, so only integrity is checked (and nothing is loaded).
        loader.set_clr_path(str(runtime_dir))
        _build(runtime_dir, "libmscordaccore.so", dac_c, other_id)
        with pytest.raises(DacError) as e:
            loader.locate_dac(target)
        assert str(e.value) == (f"DAC mismatch: {runtime_dir / 'libmscordaccore.so'} has build id {other_id.hex()}, "
                                f"but the target's runtime declares {dac_id.hex()} (DotNetRuntimeInfo); "
                                "setclrpath <dir> to the target's runtime")
        _build(runtime_dir, "libmscordaccore.so", dac_c, dac_id)
        location = loader.locate_dac(target)
        assert location.dac_path == str(runtime_dir / "libmscordaccore.so")
        assert location.trusted_by == "setclrpath"
    finally:
        loader.set_clr_path(None)
    assert not marker.exists()


@needs_gcc
def test_a_refusal_escapes_what_the_target_names(trusted: Path) -> None:
    """The directory comes from the target: a terminal escape in its name is shown escaped."""
    runtime_dir = trusted / "rt\x1b[2J\x07"
    runtime_dir.mkdir()
    runtime = _build(runtime_dir, "libcoreclr.so", RUNTIME_C % "0", bytes(range(50, 70)))
    marker = trusted / "MARKER"
    _build(runtime_dir, "libmscordaccore.so",
           f'#include <stdio.h>\n__attribute__((constructor)) static void c(void) {{ fclose(fopen("{marker}", "w")); }}\n',
           bytes(range(1, 21)))
    os.chmod(runtime_dir, 0o777)
    with pytest.raises(DacError) as e:
        loader.locate_dac(MappedFile(runtime, 0x7F0000000000))
    shown = f"{trusted}/rt\\x1b[2J\\x07"
    assert str(e.value) == (f"refusing to load the DAC {shown}/libmscordaccore.so (named by stand-in for "
                            f"{shown}/libcoreclr.so): {shown} is world-writable; trust a directory explicitly "
                            "with setclrpath DIR (LLDB/GDB) or --clr-path DIR (CLI)")
    assert not marker.exists()


def _pyelftools_symbol(path: str, name: str) -> tuple[int, int] | None:
    """The same question answered by pyelftools, an independent ELF parser."""
    from elftools.elf.elffile import ELFFile
    with open(path, "rb") as f:
        elf = ELFFile(f)
        loads = [seg["p_vaddr"] for seg in elf.iter_segments() if seg["p_type"] == "PT_LOAD"]
        dynsym = elf.get_section_by_name(".dynsym")
        for sym in (dynsym.get_symbol_by_name(name) if dynsym is not None else None) or ():
            if sym["st_shndx"] != "SHN_UNDEF" and sym["st_value"]:
                return int(sym["st_value"]), int(min(loads))
    return None


def test_exported_symbol_agrees_with_pyelftools() -> None:
    import glob
    from sosext.targets.elfsymbols import exported_symbol
    runtime = os.path.dirname(os.path.realpath(shutil.which("dotnet") or "/usr/bin/dotnet"))
    libs = glob.glob(f"{runtime}/shared/Microsoft.NETCore.App/*/lib*.so")
    libc = [p for p in ("/lib/x86_64-linux-gnu/libc.so.6", "/lib/aarch64-linux-gnu/libc.so.6") if os.path.exists(p)]
    assert libs and libc
    found = 0
    for path in libs + libc:
        # "malloc" in libc shares its bytes with the tail of longer names: the case a plain
        # "\0name\0" search gets wrong.
        for name in ("DotNetRuntimeInfo", "coreclr_initialize", "g_dacTable", "CLRDataCreateInstance",
                     "malloc", "free", "no_such_symbol_anywhere"):
            mine = exported_symbol(path, name)
            assert mine == _pyelftools_symbol(path, name), (path, name)
            found += mine is not None
    assert found >= 4


def test_exported_symbol_on_damaged_files(tmp_path: Path) -> None:
    from sosext.targets.elfsymbols import exported_symbol
    libc = "/lib/x86_64-linux-gnu/libc.so.6"
    if not os.path.exists(libc):
        pytest.skip("needs an x86-64 libc to damage")
    data = Path(libc).read_bytes()
    bad = tmp_path / "bad.so"
    for cut in (0, 4, 63, 64, 4096, len(data) // 2, len(data) - 1):
        bad.write_bytes(data[:cut])
        assert exported_symbol(str(bad), "malloc") in (None, _pyelftools_symbol(libc, "malloc"))
    flipped = bytearray(data)
    flipped[0x28:0x30] = b"\xff" * 8  # e_shoff far beyond the file
    bad.write_bytes(bytes(flipped))
    assert exported_symbol(str(bad), "malloc") is None
    assert exported_symbol(str(tmp_path / "missing.so"), "malloc") is None


def _runtime_files() -> list[str]:
    import glob
    runtime = os.path.dirname(os.path.realpath(shutil.which("dotnet") or "/usr/bin/dotnet"))
    return sorted(glob.glob(f"{runtime}/shared/Microsoft.NETCore.App/*/libcoreclr.so")
                  + glob.glob(f"{runtime}/shared/Microsoft.NETCore.App/*/libmscordaccore.so"))


def test_version_marker_from_its_section_equals_the_whole_file_scan(tmp_path: Path) -> None:
    """The marker read from .data (a few KB) is the one a scan of the whole file finds first;
    a file whose sections cannot be read (cut, not ELF) is still scanned whole."""
    import re
    from sosext.dac import loader
    files = _runtime_files()
    assert files, "the .NET runtime's native files"
    pattern = re.compile(rb"@\(#\)Version [0-9][0-9.]*(?: @Commit: [0-9a-f]+)?")
    for path in files:
        whole = pattern.search(Path(path).read_bytes())
        assert whole is not None
        assert loader._runtime_marker(path) == whole.group(0).decode()
        assert loader.file_version(path) == whole.group(0).decode().split()[1]
    data = Path(files[0]).read_bytes()
    at = data.find(b"@(#)Version ")
    cut = tmp_path / "cut.so"
    cut.write_bytes(data[:at + 200])  # section headers (at the end) gone: whole-file scan
    assert loader._runtime_marker(str(cut)) == pattern.search(data).group(0).decode()
    plain = tmp_path / "plain.bin"
    plain.write_bytes(b"x" * 1000 + b"@(#)Version 9.9.9.9 @Commit: abc123" + b"\0")
    assert loader.file_version(str(plain)) == "9.9.9.9"
    plain.write_bytes(b"\x7fELF" + b"\xff" * 200)
    assert loader.file_version(str(plain)) is None
    assert loader.file_version(str(tmp_path / "missing.so")) is None
