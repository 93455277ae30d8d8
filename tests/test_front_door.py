"""The front door after the README's set-up (scripts/link_checkout.py, which scripts/setup.sh runs):
a `sosext` command pinned to /usr/bin/python3 whatever `python3` comes first on PATH, and
`import sosext` from any directory; the docs and examples say `sosext …`, never `python3 -m sosext`.

The set-up is exercised as a user who is not root does it, into a private HOME (its
~/.local/bin and user site directory), so the test neither needs nor touches the system's
/usr/local; the root variant differs only in those two directories.
"""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

import drivers
from harness import Debuggee, build_debuggee, dotnet_path

REPO = drivers.REPO
LINK = REPO / "scripts" / "link_checkout.py"
STAT_ROW = re.compile(r"^\s*([0-9a-f]+) +([\d,]+) +([\d,]+) \S")


def run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=120)


def test_command_and_import_from_any_directory(tmp_path: Path) -> None:
    env = drivers.link_front_door(tmp_path / "home")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    res = run(["sosext", "--help"], env, elsewhere)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("usage: sosext") and "analyze" in res.stdout
    res = run([drivers.PYTHON, "-c", "import sosext; print(sosext.__file__)"], env, elsewhere)
    assert res.returncode == 0, res.stderr
    assert Path(res.stdout.strip()) == REPO / "sosext" / "__init__.py"
    # One line in the user's site directory names the checkout; the command is an executable script.
    pth = next((tmp_path / "home" / ".local" / "lib").glob("python3*/site-packages/sosext-checkout.pth"))
    assert [ln for ln in pth.read_text().splitlines() if not ln.startswith("#")] == [str(REPO)]
    launcher = tmp_path / "home" / ".local" / "bin" / "sosext"
    assert launcher.read_text().splitlines()[0] == "#!/usr/bin/python3 -P" and os.access(launcher, os.X_OK)


def test_command_is_pinned_to_debian_python(tmp_path: Path) -> None:
    """A python3 first on PATH that cannot run sosext (pyenv, a venv, a self-built one) changes nothing."""
    env = drivers.link_front_door(tmp_path / "home")
    fake = tmp_path / "pyenv-shims"
    fake.mkdir()
    (fake / "python3").write_text("#!/bin/sh\necho 'not this python' >&2\nexit 3\n")
    (fake / "python3").chmod(0o755)
    env["PATH"] = f"{fake}:{env['PATH']}"
    assert run(["python3", "-c", "pass"], env, tmp_path).returncode == 3
    res = run(["sosext", "ps"], env, tmp_path)
    assert res.returncode == 0, res.stderr
    assert "not this python" not in res.stderr


def test_current_directory_does_not_shadow_the_checkout(tmp_path: Path) -> None:
    """`-P`: a directory named sosext where the command is typed is not imported instead."""
    env = drivers.link_front_door(tmp_path / "home")
    decoy = tmp_path / "work"
    (decoy / "sosext").mkdir(parents=True)
    (decoy / "sosext" / "__init__.py").write_text("raise SystemExit('the decoy was imported')\n")
    res = run(["sosext", "--help"], env, decoy)
    assert res.returncode == 0 and "decoy" not in res.stderr, res.stderr


def test_setup_again_is_quiet_and_says_what_changed(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = drivers.link_front_door(home)
    res = run([drivers.PYTHON, str(LINK), "--user"], env, tmp_path)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    # Set up from another checkout last: both files named it; this one's set-up says it takes them back.
    pth = next((home / ".local" / "lib").glob("python3*/site-packages/sosext-checkout.pth"))
    launcher = home / ".local" / "bin" / "sosext"
    other = str(tmp_path / "other-checkout")
    pth.write_text(pth.read_text().replace(str(REPO), other))
    launcher.write_text(launcher.read_text().replace(repr(str(REPO)), repr(other)))
    res = run(["sosext", "--help"], env, tmp_path)
    assert res.returncode == 1 and res.stderr == (f"error: the sosext checkout {other} is gone: "
                                                  "run scripts/setup.sh from a checkout\n")
    res = run([drivers.PYTHON, str(LINK), "--user"], env, tmp_path)
    assert res.returncode == 0
    assert res.stderr.splitlines() == [f"sosext setup: import sosext now finds {REPO} (was {other})",
                                       f"sosext setup: the sosext command now runs {REPO} (was {other})"]
    assert run(["sosext", "--help"], env, tmp_path).returncode == 0


def test_a_command_setup_did_not_write_is_left_alone(tmp_path: Path) -> None:
    """`pip install .` as root writes its own /usr/local/bin/sosext: set-up keeps it and says so."""
    home = tmp_path / "home"
    launcher = home / ".local" / "bin" / "sosext"
    launcher.parent.mkdir(parents=True)
    launcher.write_text("#!/bin/sh\necho pip's\n")
    env = drivers.link_front_door(home)
    assert launcher.read_text() == "#!/bin/sh\necho pip's\n"
    res = run([drivers.PYTHON, str(LINK), "--user"], env, tmp_path)
    assert res.returncode == 0 and f"left {launcher} alone" in res.stderr


def test_setup_runs_the_link_and_root_gets_the_system_places() -> None:
    text = (REPO / "scripts" / "setup.sh").read_text()
    assert "scripts/link_checkout.py" in text
    res = subprocess.run([drivers.PYTHON, "-c", "import sys; sys.path.insert(0, sys.argv[1]); import link_checkout, os; "
                          "print(os.geteuid(), *link_checkout.places(False))", str(REPO / "scripts")],
                         stdout=subprocess.PIPE, text=True, check=True)
    euid, site_dir, bin_dir = res.stdout.split()
    if euid == "0":  # where Debian's pip installs too
        assert re.fullmatch(r"/usr/local/lib/python3\.\d+/dist-packages", site_dir) and bin_dir == "/usr/local/bin"
    else:
        assert site_dir.startswith(os.path.expanduser("~/.local/")) and bin_dir == os.path.expanduser("~/.local/bin")


def test_docs_and_examples_say_sosext() -> None:
    """Every doc and example types `sosext …`; `python3 -m sosext` is named only where install.md
    explains what the command runs without set-up (its other sections, the cache's, say `sosext`)."""
    files = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "examples").rglob("*.py")),
             REPO / "demo.sh", *sorted((REPO / "scripts").glob("*.py"))]
    found = []
    for f in files:
        if f.name == "link_checkout.py":
            continue
        for n, ln in enumerate(f.read_text().splitlines(), 1):
            if f.name == "install.md" and ln.startswith("- Without set-up, `/usr/bin/python3 -m sosext …`"):
                continue
            if re.search(r"python3? -m sosext\b(?!\.)", ln):
                found.append(f"{f.relative_to(REPO)}:{n}: {ln.strip()}")
    assert not found, "\n".join(found)


def test_example_scripts_run_with_debian_python_as_typed(tmp_path: Path) -> None:
    """`examples/scripts/x.py …` as the docs type it: executable, pinned to /usr/bin/python3."""
    env = drivers.link_front_door(tmp_path / "home")
    for script in sorted((REPO / "examples" / "scripts").glob("*.py")):
        assert script.read_text().splitlines()[0] == "#!/usr/bin/python3", script
        assert os.access(script, os.X_OK), script
        res = run([str(script), "--help"], env, tmp_path)
        assert res.returncode == 0 and "usage:" in res.stdout, (script, res.stderr)
        # as issue 27 typed it (ModuleNotFoundError then): through Debian's Python, from elsewhere
        res = run([drivers.PYTHON, str(script), "--help"], env, tmp_path)
        assert res.returncode == 0 and "usage:" in res.stdout, (script, res.stderr)


@pytest.mark.slow
def test_analyze_a_core_from_another_directory(tmp_path: Path) -> None:
    """The done-when of issue 27: `cd /tmp && sosext analyze CORE -c "dumpheap -stat"` after the
    set-up, with no PYTHONPATH: every type of the debuggee's own counted as it counted them."""
    if dotnet_path() is None:
        pytest.skip("dotnet is not on PATH: no debuggee can be built")
    with Debuggee("heap", dll=build_debuggee(), core_dir=tmp_path) as d:
        core = d.write_core("heap", tmp_path / "heap.core")
        truth = d.truth
    env = drivers.link_front_door(tmp_path / "home")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    res = run(["sosext", "analyze", str(core), "-c", "dumpheap -stat"], env | drivers.QUIET, elsewhere)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    rows = {int(m.group(1), 16): (int(m.group(2).replace(",", "")), int(m.group(3).replace(",", "")))
            for ln in res.stdout.splitlines() if (m := STAT_ROW.match(ln))}
    mine = {n: t for n, t in truth["types"].items() if n.startswith("SosextDebuggee.")}
    assert mine
    for name, t in mine.items():
        assert rows.get(int(t["mt"], 16), (0, 0)) == (t["count"] + t["deadCount"],
                                                     t["unalignedSize"] + t["deadUnalignedSize"]), name
