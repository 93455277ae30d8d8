"""DAC trust: a libmscordaccore.so that a core (or a process) names must never run in the debugger
unless its location is trusted, and an explicit setclrpath/--clr-path always gets the user going.

The debuggee runs on a copy of the machine's .NET runtime in a directory these tests control (under
the repository's .work/, whose parents are trusted), so its cores' NT_FILE and its live maps name
that directory. After the core is written (createdump itself loads the DAC beside it), the DAC
there is replaced by a tiny library whose constructor writes a marker file: if any host ever
dlopens it, the marker appears. Planted: (a) in a world-writable directory, (b) in a directory
owned by another user, (c) with the genuine DAC's build id copied in. Each refusal must be one
line naming the path and the way out, the debugger must stay alive, and `setclrpath` to the
genuine runtime must then give dumpheap -stat equal to the debuggee's truth.
"""
from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

import drivers
import sosparse as sp
from harness import DEFAULT_TFM, Debuggee, build_debuggee, dotnet_path
from harness import debuggee as harness_debuggee
from harness.debuggee import runtime_installed

pytestmark = pytest.mark.slow

DAC = "libmscordaccore.so"
GCC = shutil.which("gcc")
needs_lldb = pytest.mark.skipif(drivers.LLDB is None, reason="lldb-16 is not installed")
needs_gdb = pytest.mark.skipif(drivers.GDB is None, reason="gdb is not installed")
HOSTS = ["cli", pytest.param("lldb", marks=needs_lldb), pytest.param("gdb", marks=needs_gdb)]

PLANT_C = r"""
#include <stdio.h>
/* What a planted DAC would do: run code in the debugger the moment it is dlopened. */
__attribute__((constructor)) static void planted(void) {
    FILE *f = fopen(MARKER, "w");
    if (f) { fputs("planted DAC ran\n", f); fclose(f); }
}
const char version_marker[] = VERSION_MARKER;
int CLRDataCreateInstance(void *iid, void *target, void **out) { return 0x80004005; }
"""


def build_id(path: Path) -> bytes:
    sys.path.insert(0, str(drivers.REPO))
    from sosext.targets.elfsymbols import file_build_id
    bid = file_build_id(str(path))
    assert bid, f"{path} has no GNU build id"
    return bid


@dataclass
class World:
    root: Path            # trusted scratch directory (root/euid-owned chain, mode 0755)
    runtime_dir: Path     # the copied runtime the debuggee ran on; holds the DAC the core names
    genuine_dir: Path     # the machine's runtime: the trusted setclrpath choice
    core: Path
    exe: str
    truth: dict
    debuggee: Debuggee    # still running on the copied runtime (for the live test)
    planted: dict[str, Path]
    markers: dict[str, Path]

    @property
    def dac(self) -> Path:
        return self.runtime_dir / DAC

    def no_marker(self) -> None:
        ran = [k for k, m in self.markers.items() if m.exists()]
        assert not ran, f"a planted DAC ran: {ran}"

    @contextmanager
    def planted_dac(self, kind: str, *, mode: int = 0o755, owner: int = 0):
        """The copied runtime directory with the planted DAC ``kind``, ``mode`` and ``owner``."""
        genuine = self.runtime_dir / (DAC + ".genuine")
        shutil.copyfile(self.planted[kind], self.dac)
        os.chmod(self.dac, 0o755)
        os.chmod(self.runtime_dir, mode)
        os.chown(self.runtime_dir, owner, -1)
        try:
            yield self.dac
        finally:
            os.chown(self.runtime_dir, 0, -1)
            os.chmod(self.runtime_dir, 0o755)
            shutil.copyfile(genuine, self.dac)
            for m in self.markers.values():
                m.unlink(missing_ok=True)


def _copy_runtime(dest: Path) -> Path:
    """dotnet muxer + hostfxr + the newest Microsoft.NETCore.App of the default TFM, copied."""
    host = Path(os.path.realpath(dotnet_path() or "")).parent
    major = DEFAULT_TFM.removeprefix("net").split(".")[0] + "."
    versions = sorted((p for p in (host / "shared" / "Microsoft.NETCore.App").iterdir() if p.name.startswith(major)),
                      key=lambda p: [int(x) if x.isdigit() else 0 for x in p.name.split(".")])
    if not versions:
        pytest.skip(f"no Microsoft.NETCore.App {major}x beside {host}")
    source = versions[-1]
    shutil.copy2(host / "dotnet", dest / "dotnet")
    shutil.copytree(host / "host", dest / "host")
    runtime = dest / "shared" / "Microsoft.NETCore.App" / source.name
    shutil.copytree(source, runtime)
    shutil.copyfile(runtime / DAC, runtime / (DAC + ".genuine"))
    return source


def _gcc(source: Path, out: Path, *flags: str) -> None:
    subprocess.run([GCC, "-shared", "-fPIC", "-O1", "-o", str(out), str(source), *flags], check=True,
                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


@pytest.fixture(scope="module")
def world() -> World:
    if dotnet_path() is None:
        pytest.skip("dotnet is not on PATH: no debuggee can be built")
    if not runtime_installed(DEFAULT_TFM):
        pytest.skip(f"the machine has no {DEFAULT_TFM} runtime to copy")
    if GCC is None:
        pytest.skip("gcc is not installed: no planted DAC can be built")
    sys.path.insert(0, str(drivers.REPO))
    # The copied runtime must sit where sosext trusts it: the checkout's .work, or, when the
    # checkout itself lives under a directory others can write (a clone in /tmp), the home.
    from harness.scratch import trusted_scratch
    root, why = trusted_scratch(f"dac-trust-{os.getpid()}")
    if root is None:
        pytest.skip(f"no trusted scratch directory for a copied runtime ({why})")
    genuine_dir = _copy_runtime(root)
    runtime_dir = root / "shared" / "Microsoft.NETCore.App" / genuine_dir.name
    # The planted DACs: plain, with the genuine DAC's build id, and claiming another version.
    src = root / "plant.c"
    src.write_text(PLANT_C)
    markers, planted = {}, {}
    no_marker = '"(no version marker)"'
    for kind, flags in (("plain", []),
                        ("same-id", [f"-Wl,--build-id=0x{build_id(genuine_dir / DAC).hex()}"]),
                        ("other-version", [])):
        markers[kind] = root / f"MARKER-{kind}"
        planted[kind] = root / f"planted-{kind}.so"
        version = '"@(#)Version 10.0.9999.1 @Commit: 0123456789abcdef"' if kind == "other-version" else no_marker
        _gcc(src, planted[kind], f'-DMARKER="{markers[kind]}"', f"-DVERSION_MARKER={version}", *flags)
    assert build_id(planted["same-id"]) == build_id(genuine_dir / DAC)

    dll = build_debuggee(DEFAULT_TFM)
    cores = root / "cores"
    cores.mkdir()
    mp = pytest.MonkeyPatch()
    mp.setattr(harness_debuggee, "dotnet_path", lambda: str(root / "dotnet"))
    d = Debuggee("heap", dll=dll, core_dir=cores)
    try:
        d.start()
    finally:
        mp.undo()
    try:
        assert d.runtime_dir == runtime_dir, d.runtime_dir
        # createdump loads the DAC beside it: write the core before anything is planted.
        core = d.write_core("heap", cores / "heap.core")
        yield World(root, runtime_dir, genuine_dir, core, str(d.executable), d.truth, d, planted, markers)
    finally:
        d.stop()
        for dirpath, dirnames, _files in os.walk(root):
            for name in dirnames:
                os.chown(os.path.join(dirpath, name), 0, -1)
                os.chmod(os.path.join(dirpath, name), 0o755)
        shutil.rmtree(root, ignore_errors=True)


# No explicit DAC directory inherited from the environment: these tests make every choice
# themselves. They ask for the DAC reader: without it an untrusted DAC is not refused but
# replaced by the contracts reader (test_untrusted_dac_falls_back_to_the_contracts_reader).
NO_CHOICE = {"SOSEXT_CLR_PATH": "", "SOSEXT_READER": "dac"}


def run(host: str, w: World, commands: list[str], live: bool = False) -> list[drivers.Output]:
    if host == "cli":
        return drivers.run_cli(commands, core=w.core, timeout=300, env=NO_CHOICE)
    runner = drivers.run_lldb if host == "lldb" else drivers.run_gdb
    if live:
        return runner(commands, pid=w.debuggee.pid, timeout=300, env=NO_CHOICE)
    return runner(commands, core=w.core, exe=w.exe, timeout=300, env=NO_CHOICE)


def assert_stat_is_truth(out: drivers.Output, truth: dict) -> None:
    assert not out.errors, out.text[-2000:]
    rows = sp.stat_rows(out.text)
    populated = {k: v for k, v in truth["types"].items() if v["count"] + v["deadCount"] > 0}
    assert populated
    for name, t in populated.items():
        row = rows.get(int(t["mt"], 16))
        assert row is not None, f"{name} missing from dumpheap -stat"
        assert (row.count, row.total) == (t["count"] + t["deadCount"],
                                          t["unalignedSize"] + t["deadUnalignedSize"]), name


def assert_refused(out: drivers.Output, dac: Path, reason: str) -> None:
    """One error line naming the DAC path, the reason, and how to trust a directory explicitly."""
    assert len(out.errors) == 1, out.text[-2000:]
    line = out.errors[0]
    assert line.startswith(f"error: refusing to load the DAC {dac} "), line
    assert reason in line and "setclrpath DIR" in line and "--clr-path DIR" in line, line
    assert "Traceback" not in out.text


def test_the_planted_library_runs_when_loaded(world: World) -> None:
    """The marker check can fail: dlopen of each planted DAC writes its marker."""
    for kind, lib in world.planted.items():
        subprocess.run([drivers.PYTHON, "-c", f"import ctypes; ctypes.CDLL({str(lib)!r})"], check=True)
        assert world.markers[kind].exists(), kind
        world.markers[kind].unlink()


@pytest.mark.parametrize("host", HOSTS)
def test_world_writable_runtime_dir_is_refused_then_setclrpath_works(world: World, host: str) -> None:
    with world.planted_dac("plain", mode=0o777) as dac:
        outs = run(host, world, ["dumpheap -stat", "soshelp", f"setclrpath {world.genuine_dir}", "dumpheap -stat"])
        assert_refused(outs[0], dac, f"{world.runtime_dir} is world-writable")
        assert "sosext commands" in outs[1]
        assert_stat_is_truth(outs[3], world.truth)
        world.no_marker()


@pytest.mark.parametrize("host", ["cli", pytest.param("gdb", marks=needs_gdb)])
def test_runtime_dir_owned_by_another_user_is_refused(world: World, host: str) -> None:
    nobody = pwd.getpwnam("nobody").pw_uid
    if nobody == os.geteuid():
        pytest.skip("running as nobody: no other user to own the directory")
    with world.planted_dac("plain", owner=nobody) as dac:
        outs = run(host, world, ["dumpheap -stat", "soshelp", f"setclrpath {world.genuine_dir}", "dumpheap -stat"])
        assert_refused(outs[0], dac, f"{world.runtime_dir} is owned by uid {nobody}, not by root or by you")
        assert "sosext commands" in outs[1]
        assert_stat_is_truth(outs[3], world.truth)
        world.no_marker()


@pytest.mark.parametrize("host", ["cli", pytest.param("lldb", marks=needs_lldb)])
def test_a_copied_build_id_does_not_make_a_dac_trusted(world: World, host: str) -> None:
    with world.planted_dac("same-id", mode=0o777) as dac:
        outs = run(host, world, ["dumpheap -stat", "soshelp", f"setclrpath {world.genuine_dir}", "dumpheap -stat"])
        assert_refused(outs[0], dac, "is world-writable")
        assert "sosext commands" in outs[1]
        assert_stat_is_truth(outs[3], world.truth)
        world.no_marker()


@needs_lldb
def test_live_process_with_planted_dac_in_lldb(world: World) -> None:
    with world.planted_dac("plain", mode=0o777) as dac:
        outs = run("lldb", world, ["dumpheap -stat", "script print('STILL-ALIVE')",
                                   f"setclrpath {world.genuine_dir}", "dumpheap -stat"], live=True)
        assert_refused(outs[0], dac, f"{world.runtime_dir} is world-writable")
        assert "STILL-ALIVE" in outs[1]
        assert_stat_is_truth(outs[3], world.truth)
        world.no_marker()
    assert world.debuggee.alive


def test_cli_clr_path_and_the_diff_leaks_child(world: World) -> None:
    """--clr-path is the CLI's setclrpath, and the baseline child of diff/leaks gets it too (the
    child runs on the same planted core: without the path it would refuse it)."""
    with world.planted_dac("plain", mode=0o777) as dac:
        base = [drivers.PYTHON, "-m", "sosext"]
        sub = lambda *a: subprocess.run([*base, *map(str, a)], cwd=drivers.REPO, text=True,  # noqa: E731
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300,
                                        env={**os.environ, **NO_CHOICE})
        plain = sub("analyze", world.core, "-c", "dumpheap -stat")
        assert plain.returncode == 1
        lines = plain.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: refusing to load the DAC {dac} "), plain.stderr
        trusted = sub("analyze", world.core, "--clr-path", world.genuine_dir, "-c", "dumpheap -stat")
        assert trusted.returncode == 0, trusted.stderr
        assert_stat_is_truth(drivers.Output(trusted.stdout), world.truth)
        for command in ("diff", "leaks"):
            refused = sub(command, world.core, world.core)
            assert refused.returncode == 1 and len(refused.stderr.splitlines()) == 1, refused.stderr
            assert "refusing to load the DAC" in refused.stderr
            ok = sub(command, world.core, world.core, "--clr-path", world.genuine_dir)
            assert ok.returncode == 0, ok.stderr
        # Same core on both sides: nothing grew, and the totals (free space aside) are dumpheap's.
        live = [r for r in sp.stat_rows(trusted.stdout).values() if r.name != "Free"]
        count, size = sum(r.count for r in live), sum(r.total for r in live)
        assert f"Total {count:,} objects (+0), {size:,} bytes (+0)" in sub(
            "diff", world.core, world.core, "--clr-path", world.genuine_dir).stdout
        world.no_marker()


def test_sosext_clr_path_environment_is_the_same_choice(world: World) -> None:
    with world.planted_dac("plain", mode=0o777):
        out = drivers.run_cli(["setclrpath", "dumpheap -stat"], core=world.core,
                              env={"SOSEXT_CLR_PATH": str(world.genuine_dir)})
        assert out[0].lines == [f"Load path for DAC/DBI: '{world.genuine_dir}'"]
        assert_stat_is_truth(out[1], world.truth)
        world.no_marker()


@needs_lldb
def test_heapdiff_child_in_lldb_gets_setclrpath(world: World) -> None:
    with world.planted_dac("plain", mode=0o777):
        outs = run("lldb", world, [f"setclrpath {world.genuine_dir}", f"heapdiff {world.core} -top 1"])
        assert not outs[1].errors, outs[1].text
        assert "(+0)" in outs[1].text and "Heap growth from" in outs[1].text
        world.no_marker()


@pytest.mark.parametrize("host", HOSTS)
def test_truncated_dac_under_setclrpath_is_one_line(world: World, host: str, tmp_path: Path) -> None:
    """A damaged DAC in a directory the user chose: one line, not SIGBUS inside dlopen."""
    chosen = tmp_path / "runtime"
    shutil.copytree(world.genuine_dir, chosen)
    size = (chosen / DAC).stat().st_size
    with open(chosen / DAC, "r+b") as f:
        f.truncate(size // 2)
    outs = run(host, world, [f"setclrpath {chosen}", "dumpheap -stat", "soshelp"])
    assert len(outs[1].errors) == 1, outs[1].text[-2000:]
    assert outs[1].errors[0].startswith(f"error: refusing to load {chosen / DAC}: not a complete ELF shared "
                                        f"library (segment "), outs[1].errors[0]
    assert f"file is {size // 2:,} bytes" in outs[1].errors[0]
    assert "sosext commands" in outs[2]


@pytest.mark.parametrize("host", ["cli", pytest.param("gdb", marks=needs_gdb)])
def test_dac_of_another_build_under_setclrpath_is_refused(world: World, host: str, tmp_path: Path) -> None:
    chosen = tmp_path / "runtime"
    shutil.copytree(world.genuine_dir, chosen)
    shutil.copyfile(world.planted["other-version"], chosen / DAC)
    outs = run(host, world, [f"setclrpath {chosen}", "dumpheap -stat", "soshelp"])
    assert len(outs[1].errors) == 1, outs[1].text[-2000:]
    line = outs[1].errors[0]
    assert line.startswith(f"error: DAC mismatch: {chosen / DAC} is Version 10.0.9999.1, commit 0123456789abcdef, "
                           "the target's runtime is Version "), line
    assert "sosext commands" in outs[2]
    world.no_marker()


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the foreign machine used here is AArch64")
def test_foreign_architecture_dac_is_refused(world: World, tmp_path: Path) -> None:
    chosen = tmp_path / "runtime"
    shutil.copytree(world.genuine_dir, chosen)
    data = bytearray((chosen / DAC).read_bytes())
    data[18:20] = (183).to_bytes(2, "little")  # e_machine: AArch64
    (chosen / DAC).write_bytes(bytes(data))
    out = drivers.run_cli([f"setclrpath {chosen}", "dumpheap -stat"], core=world.core)
    assert out[1].errors == [f"error: refusing to load {chosen / DAC}: built for ELF machine 183, not x86-64 "
                             "(the DAC must match the debugger's architecture)"]


@pytest.mark.parametrize("host", HOSTS)
def test_untrusted_dac_falls_back_to_the_contracts_reader(world: World, host: str) -> None:
    """Without a choice of reader, a DAC in an untrusted place is not loaded and not refused: the
    contracts reader answers, one note line says so and why, and the GC heap it reports is the
    one the genuine DAC reports (eeheap -gc, byte for byte)."""
    auto = {"SOSEXT_CLR_PATH": "", "SOSEXT_READER": ""}
    with world.planted_dac("plain", mode=0o777) as dac:
        if host == "cli":
            outs = drivers.run_cli(["eeheap -gc", "eeversion -reader", "dumpheap -stat"], core=world.core, timeout=300,
                                   env=auto)
        else:
            runner = drivers.run_lldb if host == "lldb" else drivers.run_gdb
            outs = runner(["eeheap -gc", "eeversion -reader", "dumpheap -stat"], core=world.core, exe=world.exe,
                          timeout=300, env=auto)
        notes = [ln for o in outs for ln in o.text.splitlines() if ln.startswith("note: ")]
        assert len(notes) == 1, [o.text[-800:] for o in outs]
        assert notes[0].startswith("note: the contracts reader answers: the DAC cannot be used: refusing to load "
                                   f"the DAC {dac} "), notes[0]
        assert "is world-writable" in notes[0]
        assert "Reader: the contracts reader answers" in outs[1].text
        # The types half may not be there yet: then one line naming the DAC reader, else the truth.
        if outs[2].errors:
            assert len(outs[2].errors) == 1 and "--reader dac" in outs[2].errors[0], outs[2].text[-2000:]
        else:
            assert_stat_is_truth(outs[2], world.truth)
        world.no_marker()
    genuine = drivers.run_cli([f"setclrpath {world.genuine_dir}", "eeheap -gc"], core=world.core, timeout=300,
                              env=auto)
    strip = lambda o: "\n".join(ln for ln in o.text.splitlines() if not ln.startswith("note: ")).strip()  # noqa: E731
    assert strip(outs[0]) == strip(genuine[1]) and "GC Allocated Heap Size" in genuine[1].text
    world.no_marker()
