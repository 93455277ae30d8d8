"""Is this Python able to run sosext? One line that names the interpreter to use when not.

sosext needs numpy, which Debian packages for its own Python (``/usr/bin/python3``, the one
``lldb-16`` and ``gdb`` embed). A different ``python3`` first on PATH (pyenv, a venv, a
self-built one) or ``python3 -S`` (no site-packages) cannot import it; without this check the
user sees a 30-line traceback from deep inside a command module. Stdlib only: this must
work exactly when the rest cannot.
"""
from __future__ import annotations

import os
import sys

DEBIAN_PYTHON = "/usr/bin/python3"
REQUIRED = ("numpy",)


_reasons: dict[str, str] = {}


def _importable(name: str) -> bool:
    try:
        __import__(name)
    except Exception as e:  # noqa: BLE001 - an ImportError or a broken package alike
        _reasons[name] = f"{type(e).__name__}: {e}".splitlines()[0]
        return False
    return True


def missing_modules() -> list[str]:
    """The modules sosext needs that this interpreter cannot import."""
    return [name for name in REQUIRED if not _importable(name)]


def _is_debian_python(path: str) -> bool:
    try:
        return os.path.samefile(path, DEBIAN_PYTHON)
    except OSError:
        return False


def problem(host: str = "") -> str | None:
    """None when this interpreter can run sosext, else a one-line explanation.

    ``host`` names the embedding debugger ("LLDB", "GDB"); empty for ``python3 -m sosext``.
    """
    missing = missing_modules()
    if not missing:
        return None
    what = ", ".join(missing)
    if host:
        return (f"sosext cannot load in {host}: its Python ({sys.version.split()[0]}) cannot import {what} "
                f"({_reasons.get(missing[0], '?')}); install it with 'apt-get install python3-{missing[0]}' "
                "and check PYTHONPATH/PYTHONHOME")
    exe = sys.executable or "this Python"
    if _is_debian_python(exe) and sys.flags.no_site:
        return (f"sosext needs {what}, which {exe} cannot import with -S (site-packages off): "
                f"run it as '{DEBIAN_PYTHON} -m sosext'")
    if _is_debian_python(exe):
        return f"sosext needs {what}: install it with 'apt-get install python3-{missing[0]}'"
    return (f"sosext needs {what}, which {exe} (Python {sys.version.split()[0]}) cannot import: "
            f"run it with Debian's Python as '{DEBIAN_PYTHON} -m sosext', or as 'sosext' after scripts/setup.sh "
            "(that command is pinned to it)")


def exit_unless_usable() -> None:
    """For ``python3 -m sosext``: print the problem as one ``error:`` line and exit 1."""
    text = problem()
    if text is not None:
        sys.stderr.write(f"error: {text}\n")
        sys.exit(1)


