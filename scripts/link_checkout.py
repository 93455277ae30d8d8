#!/usr/bin/python3
"""Make this checkout the ``sosext`` of Debian's Python: a ``sosext`` command and ``import sosext``.

scripts/setup.sh runs it (so ./demo.sh and ./run-tests.sh do). Two small files, both naming
this checkout by its absolute path, both replaced when set-up runs again from here or from
another checkout (the last one set up wins, and the change is said in one line):

* ``sosext-checkout.pth`` in a site directory of ``/usr/bin/python3`` (the Python lldb-16
  and gdb embed): its one path line puts the checkout on ``sys.path``, so ``import sosext``
  works from any directory, in scripts and in the debuggers' ``script`` alike. As root the
  directory is /usr/local/lib/python3.X/dist-packages (where Debian's pip installs too),
  otherwise the user's site directory (~/.local/lib/python3.X/site-packages).
* ``sosext``, a launcher in /usr/local/bin (root) or ~/.local/bin (others): a Python script
  whose first line is ``#!/usr/bin/python3 -P`` (pinned to that Python whatever ``python3``
  is first on PATH; ``-P`` keeps the current directory off ``sys.path``). It runs this
  checkout's ``sosext.cli:main``, as the console script of ``pip install .`` runs the
  installed copy's.

A file at either place that set-up did not write (``pip install .`` as root writes its own
``/usr/local/bin/sosext``) is left alone and named; ``--user`` chooses the user's places even
as root; ``--check`` only says where ``sosext`` and ``import sosext`` lead. Standard library
only: this runs before anything else is known to work.
"""
from __future__ import annotations

import argparse
import os
import shutil
import site
import subprocess
import sys
import tempfile

PYTHON = "/usr/bin/python3"
PTH = "sosext-checkout.pth"
MARK = "# sosext's command, written by scripts/setup.sh"
PTH_MARK = "# written by sosext's scripts/setup.sh"
ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))

LAUNCHER = '''#!{python} -P
{mark} of {root_comment}
# (run scripts/setup.sh again, from this or another checkout, to replace it). Pinned to Debian's
# Python, the one lldb-16 and gdb embed, whatever python3 comes first on PATH.
import os
import sys

ROOT = {root!r}
if not os.path.isfile(os.path.join(ROOT, "sosext", "cli.py")):
    sys.stderr.write(f"error: the sosext checkout {{ROOT}} is gone: run scripts/setup.sh from a checkout\\n")
    sys.exit(1)
sys.path.insert(0, ROOT)
from sosext.cli import main  # noqa: E402

sys.exit(main())
'''


def places(user: bool) -> tuple[str, str]:
    """(site directory, bin directory) for this user: the system's as root, else the user's."""
    if not user and os.geteuid() == 0:
        local = [d for d in site.getsitepackages() if d.startswith("/usr/local/")]
        if local:
            return local[0], "/usr/local/bin"
    return site.getusersitepackages(), os.path.join(site.getuserbase(), "bin")


def _ours(path: str, mark: str) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return mark in f.read(4096)
    except OSError:
        return False


def _points_to(path: str) -> str | None:
    """The checkout a file we wrote names (its last non-comment line for a .pth, ROOT = for the launcher)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read(8192).splitlines()
    except OSError:
        return None
    for ln in lines:
        if ln.startswith("ROOT = "):
            return ln[len("ROOT = "):].strip().strip("'\"")
    paths = [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]
    return paths[-1] if paths else None


def _write(path: str, text: str, mode: int) -> None:
    """Replace ``path`` atomically (a symlink there is replaced, not followed)."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".sosext-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def link(user: bool) -> int:
    if any(c in ROOT for c in "\n\r"):
        print(f"sosext setup: cannot link {ROOT!r}: a path holding a newline cannot be a .pth line", file=sys.stderr)
        return 1
    site_dir, bin_dir = places(user)
    pth, launcher = os.path.join(site_dir, PTH), os.path.join(bin_dir, "sosext")
    said: list[str] = []
    before = _points_to(pth) if os.path.exists(pth) else None
    _write(pth, f"{PTH_MARK} of {ROOT}: 'import sosext' finds that checkout\n{ROOT}\n", 0o644)
    if before and before != ROOT:
        said.append(f"import sosext now finds {ROOT} (was {before})")
    if os.path.lexists(launcher) and not _ours(launcher, MARK):
        said.append(f"left {launcher} alone: set-up did not write it (pip's console script?), and it runs "
                    "whichever sosext it was installed with")
    else:
        was = _points_to(launcher) if os.path.exists(launcher) else None
        _write(launcher, LAUNCHER.format(python=PYTHON, mark=MARK, root_comment=ROOT.replace("\n", " "), root=ROOT),
               0o755)
        if was and was != ROOT:
            said.append(f"the sosext command now runs {ROOT} (was {was})")
        on_path = [os.path.realpath(p) for p in os.environ.get("PATH", "").split(os.pathsep) if p]
        if os.path.realpath(bin_dir) not in on_path:
            said.append(f"{bin_dir} is not on PATH: add it (export PATH=\"{bin_dir}:$PATH\") to type sosext")
    shadow = _imported_from(cwd=tempfile.gettempdir(), env_extra={})
    if shadow is None:
        said.append(f"{PYTHON} still cannot import sosext from {site_dir} (PYTHONNOUSERSITE set?); "
                    f"run it with PYTHONPATH={ROOT}")
    elif os.path.realpath(shadow) != os.path.realpath(ROOT):
        said.append(f"import sosext finds {shadow} before this checkout (pip install? PYTHONPATH?); "
                    f"'pip uninstall sosext' to use this checkout")
    for line in said:
        print(f"sosext setup: {line}", file=sys.stderr)
    return 0


def _imported_from(cwd: str, env_extra: dict[str, str]) -> str | None:
    """Where a fresh /usr/bin/python3 in ``cwd`` imports sosext from (the checkout, not the package dir)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(env_extra)
    res = subprocess.run([PYTHON, "-P", "-c", "import sosext, os; print(os.path.dirname(os.path.dirname(sosext.__file__)))"],
                         cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return res.stdout.strip() or None if res.returncode == 0 else None


def check() -> int:
    found = _imported_from(cwd=tempfile.gettempdir(), env_extra={})
    command = shutil.which("sosext")
    print(f"import sosext: {found or 'not found'}")
    print(f"sosext command: {command or 'not on PATH'}" + (f" -> {_points_to(command)}" if command and
                                                            _ours(command, MARK) else ""))
    return 0 if found and command else 1


def main() -> int:
    ap = argparse.ArgumentParser(description="Link this checkout as Debian's Python's sosext (a command and a .pth).")
    ap.add_argument("--user", action="store_true", help="the user's site and bin directories, even as root")
    ap.add_argument("--check", action="store_true", help="only say where sosext and import sosext lead")
    args = ap.parse_args()
    return check() if args.check else link(args.user)


if __name__ == "__main__":
    sys.exit(main())
