"""`pip install --no-deps .` works offline (the in-tree build backend needs nothing from PyPI), and
an installed copy works on its own: the API from another directory against a real core, the
`sosext` script, and `sosext install` wiring LLDB and GDB to the installed entry points.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import drivers

REPO = drivers.REPO
sys.path.insert(0, str(REPO / "backend"))


def offline_env(**extra: str) -> dict[str, str]:
    """No index and a proxy that goes nowhere: any download attempt fails."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL")}
    env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", http_proxy="http://127.0.0.1:9",
               https_proxy="http://127.0.0.1:9", **extra)
    return env


def pip_available() -> None:
    if subprocess.run([drivers.PYTHON, "-m", "pip", "--version"], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL).returncode != 0:
        pytest.skip("pip is not installed for /usr/bin/python3 (apt-get install python3-pip)")


def test_backend_builds_a_complete_wheel(tmp_path: Path) -> None:
    import sosext_build
    name = sosext_build.build_wheel(str(tmp_path))
    assert name == "sosext-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(tmp_path / name) as z:
        names = set(z.namelist())
        record = z.read("sosext-0.1.0.dist-info/RECORD").decode().splitlines()
        entry = z.read("sosext-0.1.0.dist-info/entry_points.txt").decode()
        meta = z.read("sosext-0.1.0.dist-info/METADATA").decode()
    tracked = subprocess.run(["git", "ls-files", "sosext"], cwd=REPO, stdout=subprocess.PIPE, text=True).stdout.split()
    assert tracked and set(tracked) <= names, set(tracked) - names
    assert {"sosext/hosts/lldb_entry.py", "sosext/hosts/gdb_entry.py", "sosext/api/__init__.py"} <= names
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)
    assert {ln.split(",")[0] for ln in record} == names
    assert "sosext = sosext.cli:main" in entry
    assert "Name: sosext" in meta and "Requires-Dist: numpy" in meta


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A venv that sees Debian's packages, with sosext installed by pip, offline."""
    pip_available()
    # (paths with spaces in init files are the install hardening's business: tests/test_bad_input.py)
    root = tmp_path_factory.mktemp("venv") / "venv"
    subprocess.run([drivers.PYTHON, "-m", "venv", "--system-site-packages", str(root)], check=True)
    res = subprocess.run([str(root / "bin" / "python"), "-m", "pip", "install", "--no-deps", "."], cwd=REPO,
                         env=offline_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    assert res.returncode == 0, res.stdout
    assert "Successfully installed sosext-0.1.0" in res.stdout
    return root


def site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def test_installed_copy_is_self_contained(venv: Path, tmp_path: Path) -> None:
    code = "import sosext, sosext.api, sosext.hosts.lldb_entry; print(sosext.__file__); print(sosext.__version__)"
    res = subprocess.run([str(venv / "bin" / "python"), "-c", code], cwd=tmp_path, env=offline_env(),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert res.returncode == 0, res.stderr
    path, version = res.stdout.split()
    assert Path(path).is_relative_to(site_packages(venv)) and version == "0.1.0"
    res = subprocess.run([str(venv / "bin" / "sosext"), "--help"], cwd=tmp_path, stdout=subprocess.PIPE, text=True)
    assert res.returncode == 0 and "analyze" in res.stdout


def test_prefix_install_with_break_system_packages(tmp_path: Path) -> None:
    """The other way Debian's pip allows: --break-system-packages into a prefix of one's own."""
    pip_available()
    prefix = tmp_path / "prefix"
    res = subprocess.run([drivers.PYTHON, "-m", "pip", "install", "--no-deps", "--break-system-packages",
                          "--prefix", str(prefix), "."], cwd=REPO, env=offline_env(), stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, timeout=600)
    assert res.returncode == 0, res.stdout
    init = next(prefix.glob("**/sosext/__init__.py"))
    res = subprocess.run([drivers.PYTHON, "-c", "import sosext; print(sosext.__file__)"], cwd=tmp_path,
                         env={**offline_env(), "PYTHONPATH": str(init.parent.parent)}, stdout=subprocess.PIPE, text=True)
    assert Path(res.stdout.strip()) == init


@pytest.mark.slow
def test_installed_api_and_debuggers_on_a_core(venv: Path, tmp_path: Path, debuggee_factory) -> None:
    drivers.require_dotnet_and_lldb()
    d = debuggee_factory("heap")
    core = d.write_core("heap")
    truth = d.truth
    code = ("import json, sys, sosext\n"
            "rt = sosext.open(sys.argv[1])\n"
            "print(json.dumps({'file': sosext.__file__, "
            "'rows': {hex(r.type.method_table): r.count for r in rt.heap.stats()}}))\n")
    res = subprocess.run([str(venv / "bin" / "python"), "-c", code, str(core)], cwd=tmp_path, env=offline_env(),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert Path(doc["file"]).is_relative_to(site_packages(venv))
    for name, t in truth["types"].items():
        assert doc["rows"].get(hex(int(t["mt"], 16)), 0) == t["count"] + t["deadCount"], name

    home = tmp_path / "home"
    home.mkdir()
    env = offline_env(HOME=str(home))
    res = subprocess.run([str(venv / "bin" / "sosext"), "install"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert res.returncode == 0, res.stderr
    lldbinit = (home / ".lldbinit").read_text()
    gdbinit = (home / ".gdbinit").read_text()
    installed = site_packages(venv) / "sosext" / "hosts"
    assert str(installed / "lldb_entry.py") in lldbinit and str(REPO) not in lldbinit
    assert str(installed / "gdb_entry.py") in gdbinit and str(REPO) not in gdbinit
    mt = truth["types"]["SosextDebuggee.HeapItemA"]["mt"]
    want = truth["types"]["SosextDebuggee.HeapItemA"]["count"]
    # The debuggers' own Python does not know the venv: the entry points must find the package.
    out = subprocess.run([drivers.LLDB, "-b", "-o", "soshelp", "--core", str(core), drivers.DOTNET_HOST,
                          "-o", f"dumpheap -mt {mt} -short"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, timeout=300).stdout
    assert "sosext commands" in out and "error" not in out.lower(), out[-3000:]
    assert len([ln for ln in out.splitlines() if ln.strip() in {a[2:].lower() for a in truth["types"]["SosextDebuggee.HeapItemA"]["addresses"]}]) == want
    if drivers.GDB:
        out = subprocess.run([drivers.GDB, "-batch", "-ex", "soshelp", "-ex", f"dumpheap -mt {mt} -short",
                              drivers.DOTNET_HOST, str(core)], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, timeout=300).stdout
        assert "sosext commands" in out, out[-3000:]
        addresses = {a[2:].lower() for a in truth["types"]["SosextDebuggee.HeapItemA"]["addresses"]}
        assert len([ln for ln in out.splitlines() if ln.strip() in addresses]) == want
    res = subprocess.run([str(venv / "bin" / "sosext"), "uninstall"], cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True)
    # install created ~/.lldbinit, so uninstall removes it whole (nothing else was in it)
    assert res.returncode == 0 and not (home / ".lldbinit").exists()
    shutil.rmtree(home)


def test_editable_install(tmp_path: Path) -> None:
    """pip install -e . (PEP 660): the installed name points at this checkout."""
    pip_available()
    root = tmp_path / "venv"
    subprocess.run([drivers.PYTHON, "-m", "venv", "--system-site-packages", str(root)], check=True)
    res = subprocess.run([str(root / "bin" / "python"), "-m", "pip", "install", "--no-deps", "-e", "."], cwd=REPO,
                         env=offline_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    assert res.returncode == 0, res.stdout
    res = subprocess.run([str(root / "bin" / "python"), "-c", "import sosext; print(sosext.__file__)"], cwd=tmp_path,
                         env=offline_env(), stdout=subprocess.PIPE, text=True)
    assert Path(res.stdout.strip()) == REPO / "sosext" / "__init__.py"


def test_sdist_builds_the_same_wheel(tmp_path: Path) -> None:
    import tarfile
    import sosext_build
    name = sosext_build.build_sdist(str(tmp_path))
    assert name == "sosext-0.1.0.tar.gz"
    with tarfile.open(tmp_path / name) as tar:
        tar.extractall(tmp_path / "src")  # our own archive, just built
    src = tmp_path / "src" / "sosext-0.1.0"
    assert (src / "PKG-INFO").is_file() and (src / "lldbinit" / "sosext.py").is_file()
    out = tmp_path / "wheels"
    out.mkdir()
    code = "import sys; sys.path.insert(0, 'backend'); import sosext_build; print(sosext_build.build_wheel(sys.argv[1]))"
    res = subprocess.run([drivers.PYTHON, "-c", code, str(out)], cwd=src, stdout=subprocess.PIPE, text=True, check=True)
    direct = tmp_path / "direct"
    direct.mkdir()
    sosext_build.build_wheel(str(direct))
    with zipfile.ZipFile(out / res.stdout.strip()) as a, zipfile.ZipFile(direct / res.stdout.strip()) as b:
        assert sorted(a.namelist()) == sorted(b.namelist())
        assert all(a.read(n) == b.read(n) for n in a.namelist())
