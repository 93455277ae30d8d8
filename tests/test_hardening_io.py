"""Hardening of what sosext reads and writes around the commands: the escaping rule itself,
`sosext install`/`uninstall` (HOME pointed at a temporary directory), the interpreter check
(`python3 -m sosext` and the LLDB/GDB entry points under a Python that cannot import numpy),
and the one-line messages for cores that cannot be analyzed (truncated, AArch64, a device,
a directory).
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import drivers
from sosext.render.output import Output
from sosext.render.text import safe_line, safe_text

REPO = drivers.REPO
PY = drivers.PYTHON


def run(args: list[str], *, env: dict | None = None, cwd: Path = REPO, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


# -- the escaping rule ----------------------------------------------------------------------------

def test_safe_text_escapes_every_control_character():
    for code in [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)]:
        c = chr(code)
        if c == "\n":
            continue
        out = safe_text(f"a{c}b")
        assert c not in out and out.isascii() and out.startswith("a\\") and out.endswith("b")
    assert safe_text("\x1b]0;pwned\x07") == "\\x1b]0;pwned\\x07"
    assert safe_text("\u009b2J\t\r\x7f") == "\\u009b2J\\t\\r\\x7f"
    assert safe_text("lone \ud800 \udcff") == "lone \\ud800 \\udcff"
    assert safe_text("line1\nline2") == "line1\nline2"  # newlines of multi-line blocks stay
    assert safe_line("one\ntwo\x1b") == "one\\ntwo\\x1b"
    keep = "héllo ✓ 日本 \u00a0 System.Collections.Generic.List`1[[System.String]] C:\\path"
    assert safe_text(keep) is keep  # printable text (and backslashes) untouched, no copy


def test_output_escapes_lines_and_json_stays_valid():
    got: list[str] = []
    out = Output(got.append)
    out.line("String: \x1b[2J")
    out.json({"s": "\x1b]0;x\x07\u009b\ud800"})
    out.flush()
    text = "\n".join(got)
    assert "\x1b" not in text and "\x07" not in text and "\u009b" not in text
    assert text.splitlines()[0] == "String: \\x1b[2J"
    assert json.loads(text.split("\n", 1)[1]) == {"s": "\x1b]0;x\x07\u009b\ud800"}


# -- install / uninstall ----------------------------------------------------------------------------

def sosext_in(home: Path, *args: str, root: Path = REPO) -> subprocess.CompletedProcess:
    return run([PY, "-m", "sosext", *args], env={"HOME": str(home)}, cwd=root)


def test_install_fresh_home_idempotent_and_clean_uninstall(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    lldb_cmd = f'command script import "{REPO}/lldbinit/sosext.py"'
    gdb_cmd = f"source {REPO}/gdbinit/sosext.py"
    res = sosext_in(home, "install")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [f"Added to {home}/.lldbinit (new file): {lldb_cmd}",
                                       f"Added to {home}/.gdbinit (new file): {gdb_cmd}"]
    before = {p: (home / p).read_bytes() for p in (".lldbinit", ".gdbinit")}
    assert lldb_cmd in before[".lldbinit"].decode() and gdb_cmd in before[".gdbinit"].decode()
    res = sosext_in(home, "install")
    assert res.stdout.splitlines() == [f"Already installed in {home}/.lldbinit: {lldb_cmd}",
                                       f"Already installed in {home}/.gdbinit: {gdb_cmd}"]
    assert {p: (home / p).read_bytes() for p in before} == before
    res = sosext_in(home, "uninstall")
    assert res.stdout.splitlines() == [f"Removed {home}/.lldbinit (sosext install had created it)",
                                       f"Removed {home}/.gdbinit (sosext install had created it)"]
    assert os.listdir(home) == []
    res = sosext_in(home, "uninstall")
    assert res.returncode == 0 and "Nothing to remove" in res.stdout


def test_install_keeps_symlinks_permissions_and_foreign_lines(tmp_path):
    home = tmp_path / "home"
    dots = tmp_path / "dotfiles"
    home.mkdir()
    dots.mkdir()
    original = ("settings set target.x-86-disassembly-flavor intel\n"
                "# added by 'sosext install'\n"       # an old marker above a line that is not ours
                "command alias bt2 thread backtrace\n")
    (dots / "lldbinit").write_text(original)
    (dots / "lldbinit").chmod(0o640)
    (home / ".lldbinit").symlink_to(dots / "lldbinit")
    gdb_original = "set history save on\n"  # no trailing newline cases are covered below
    (home / ".gdbinit").write_text(gdb_original)
    (home / ".gdbinit").chmod(0o600)

    res = sosext_in(home, "install")
    assert res.returncode == 0, res.stderr
    assert (home / ".lldbinit").is_symlink() and os.readlink(home / ".lldbinit") == str(dots / "lldbinit")
    assert stat.S_IMODE((dots / "lldbinit").stat().st_mode) == 0o640
    assert stat.S_IMODE((home / ".gdbinit").stat().st_mode) == 0o600
    text = (dots / "lldbinit").read_text()
    assert "command alias bt2 thread backtrace\n" in text and text.startswith("settings set")
    assert text.count("command script import") == 1
    assert res.stdout.splitlines()[0].startswith(f"Updated in {home}/.lldbinit (-> {dots}/lldbinit): ")
    assert res.stdout.splitlines()[1].startswith(f"Added to {home}/.gdbinit: ")

    res = sosext_in(home, "uninstall")
    assert res.returncode == 0, res.stderr
    assert (home / ".lldbinit").is_symlink()
    # Only the block went: the foreign line after the old marker is still there.
    assert (dots / "lldbinit").read_text() == ("settings set target.x-86-disassembly-flavor intel\n"
                                               "command alias bt2 thread backtrace\n")
    assert (home / ".gdbinit").read_text() == gdb_original
    assert stat.S_IMODE((dots / "lldbinit").stat().st_mode) == 0o640


def test_uninstall_removes_an_old_marker_with_our_line(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gdbinit").write_text(f"set pagination off\n# added by 'sosext install'\nsource {REPO}/gdbinit/sosext.py\n"
                                   "set confirm off")
    res = sosext_in(home, "uninstall")
    assert res.returncode == 0, res.stderr
    assert (home / ".gdbinit").read_text() == "set pagination off\nset confirm off"


def test_broken_block_is_refused_in_one_line(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    from sosext.install import BEGIN
    broken = f"before\n{BEGIN}\nsource /x/gdbinit/sosext.py\nafter\n"
    (home / ".lldbinit").write_text(broken)
    for action in ("install", "uninstall"):
        res = sosext_in(home, action)
        assert res.returncode == 1 and res.stderr.splitlines() == [
            f"error: {home}/.lldbinit line 2 has sosext's begin marker but no end marker ('# <<< sosext <<<'); "
            "fix the file by hand"]
        assert (home / ".lldbinit").read_text() == broken


@pytest.mark.slow
def test_install_from_a_path_with_spaces_loads_in_both_debuggers(tmp_path):
    """A checkout under "dir with spaces": LLDB gets a quoted path, GDB the bare rest of the line,
    and both really load sosext from ~/.lldbinit and ~/.gdbinit."""
    if drivers.LLDB is None or drivers.GDB is None:
        pytest.skip("needs both lldb-16 and gdb")
    root = tmp_path / "dir with spaces" / "sosext checkout"
    root.mkdir(parents=True)
    for part in ("sosext", "lldbinit", "gdbinit"):
        shutil.copytree(REPO / part, root / part, ignore=shutil.ignore_patterns("__pycache__"))
    home = tmp_path / "home"
    home.mkdir()
    res = sosext_in(home, "install", root=root)
    assert res.returncode == 0, res.stderr
    assert f'command script import "{root}/lldbinit/sosext.py"' in (home / ".lldbinit").read_text()
    env = {"HOME": str(home)}
    lldb = run([drivers.LLDB, "-b", "-o", "soshelp dumpheap"], env=env, cwd=tmp_path)
    assert "Display the objects on the managed heap" in lldb.stdout, lldb.stdout + lldb.stderr
    gdb = run([drivers.GDB, "-q", "-batch", "-ex", "soshelp dumpheap"], env=env, cwd=tmp_path)
    assert "Display the objects on the managed heap" in gdb.stdout, gdb.stdout + gdb.stderr
    assert "error" not in (lldb.stderr + gdb.stderr).lower()


# -- the interpreter check ------------------------------------------------------------------------

@pytest.fixture
def fake_numpy(tmp_path) -> Path:
    """A directory whose `numpy` package fails to import, as on a Python without numpy."""
    pkg = tmp_path / "fake" / "numpy"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text('raise ImportError("No module named numpy (simulated)")\n')
    return tmp_path / "fake"


def one_line(res: subprocess.CompletedProcess) -> str:
    lines = (res.stdout + res.stderr).splitlines()
    assert res.returncode != 0 and len(lines) == 1 and lines[0].startswith("error: "), res.stdout + res.stderr
    return lines[0]


def test_python_without_site_packages_is_one_line():
    line = one_line(run([PY, "-S", "-m", "sosext", "analyze", "/nonexistent"]))
    assert line == ("error: sosext needs numpy, which /usr/bin/python3 cannot import with -S (site-packages off): "
                    "run it as '/usr/bin/python3 -m sosext'")


def test_python_without_numpy_is_one_line(fake_numpy):
    line = one_line(run([PY, "-m", "sosext", "ps"], env={"PYTHONPATH": str(fake_numpy)}))
    assert line == "error: sosext needs numpy: install it with 'apt-get install python3-numpy'"


def test_another_python_names_the_one_to_use():
    """The python3 first on PATH on this machine is another build without numpy (RULES.md)."""
    other = shutil.which("python3")
    if other is None or os.path.realpath(other) == os.path.realpath(PY):
        pytest.skip("the python3 on PATH is Debian's: no other interpreter to try")
    if run([other, "-c", "import numpy"]).returncode == 0:
        pytest.skip(f"{other} can import numpy: sosext runs there")
    exe = run([other, "-c", "import sys; print(sys.executable)"]).stdout.strip()
    line = one_line(run([other, "-m", "sosext", "ps"], env={"PYTHONPATH": ""}))
    assert line.startswith(f"error: sosext needs numpy, which {exe} (Python ")
    assert line.endswith("cannot import: run it with Debian's Python as '/usr/bin/python3 -m sosext', or as "
                         "'sosext' after scripts/setup.sh (that command is pinned to it)")


@pytest.mark.parametrize("debugger", ["lldb", "gdb"])
def test_debugger_load_failure_is_one_line(debugger, fake_numpy):
    env = {"PYTHONPATH": str(fake_numpy)}
    if debugger == "lldb":
        if drivers.LLDB is None:
            pytest.skip("lldb-16 is not installed")
        res = run([drivers.LLDB, "--no-lldbinit", "-b", "-o", f"command script import {REPO}/lldbinit/sosext.py"], env=env)
    else:
        if drivers.GDB is None:
            pytest.skip("gdb is not installed")
        res = run([drivers.GDB, "-nx", "-q", "-batch", "-ex", f"source {REPO}/gdbinit/sosext.py"], env=env)
    text = res.stdout + res.stderr
    errors = [ln for ln in text.splitlines() if "error" in ln.lower() or "Traceback" in ln]
    host = debugger.upper()
    assert errors == [f"error: sosext cannot load in {host}: its Python ({sys.version.split()[0]}) cannot import numpy "
                      "(ImportError: No module named numpy (simulated)); install it with 'apt-get install python3-numpy' "
                      "and check PYTHONPATH/PYTHONHOME"], text


# -- cores that cannot be analyzed ----------------------------------------------------------------

@pytest.fixture(scope="module")
def real_core(tmp_path_factory):
    from harness import Debuggee, build_debuggee, dotnet_path
    if dotnet_path() is None:
        pytest.skip("dotnet is not on PATH: no core can be written")
    tmp = tmp_path_factory.mktemp("hardening-core")
    with Debuggee("hostile", dll=build_debuggee(), core_dir=tmp) as d:
        core = d.write_core("heap", tmp / "heap.core")
        exe = str(d.executable)
    yield core, exe
    Path(core).unlink(missing_ok=True)


def analyze(path: str | Path) -> subprocess.CompletedProcess:
    return run([PY, "-m", "sosext", "analyze", str(path), "-c", "dumpheap -stat"])


@pytest.mark.slow
def test_truncated_core_says_so(real_core, tmp_path):
    core, exe = real_core
    size = os.path.getsize(core)
    cut = tmp_path / "cut.core"
    with open(core, "rb") as src:
        cut.write_bytes(src.read(size // 2))
    line = one_line(analyze(cut))
    assert line.startswith(f"error: truncated core file: {cut} is {size // 2:,} bytes, but its memory segments need ")
    assert "cut short" in line
    if drivers.LLDB:
        out = drivers.run_lldb(["dumpheap -stat"], core=cut, exe=exe)[0]
        assert len(out.errors) == 1 and out.errors[0].startswith(f"error: truncated core file: {cut} is "), out.text


@pytest.mark.slow
def test_aarch64_core_says_so(real_core, tmp_path):
    core, _exe = real_core
    arm = tmp_path / "arm.core"
    shutil.copyfile(core, arm)
    with open(arm, "r+b") as f:
        f.seek(18)
        f.write((183).to_bytes(2, "little"))  # e_machine = EM_AARCH64
    line = one_line(analyze(arm))
    assert line.startswith(f"error: unsupported core file: {arm} (an aarch64 core; this machine is x86_64, and the "
                           "runtime's DAC, which sosext loads as native code, runs only on the core's own architecture")


def test_device_and_directory_are_not_cores(tmp_path):
    assert one_line(analyze("/dev/zero")) == "error: not a core file: /dev/zero is a character device, not a regular file"
    assert one_line(analyze(tmp_path)) == f"error: not a core file: {tmp_path} is a directory"
