"""LLDB entry point: ``command script import /path/to/lldbinit/sosext.py``.

LLDB imports this file as a module named "sosext", the same name as the package it
loads. So it hands the name over: it removes itself from sys.modules, imports the real
package from the repository root, and installs ``__lldb_init_module`` on it; Python's
import then returns the package, and LLDB calls the hook from there.
"""
import os
import sys

_root = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
_here = os.path.dirname(os.path.realpath(__file__))
sys.modules.pop(__name__, None)
sys.path[:] = [p for p in sys.path if os.path.realpath(p or ".") != _here]
if _root not in sys.path:
    sys.path.insert(0, _root)

import importlib  # noqa: E402

_package = importlib.import_module("sosext")


def __lldb_init_module(debugger, internal_dict):  # noqa: N807 - LLDB's hook name
    # A failure here is one line, not a traceback (and then no command is registered).
    from sosext.pycheck import problem
    text = problem("LLDB")
    try:
        if text is None:
            from sosext.hosts.lldb_host import lldb_init
            lldb_init(debugger, "sosext.hosts.lldb_host")
    except Exception as e:  # noqa: BLE001 - LLDB would print a traceback
        if os.environ.get("SOSEXT_DEBUG", "") not in ("", "0"):
            import traceback
            traceback.print_exc()
        text = f"sosext failed to load: {type(e).__name__}: {e} (SOSEXT_DEBUG=1 shows a traceback)"
    if text is not None:
        sys.stderr.write(f"error: {text}\n")


_package.__lldb_init_module = __lldb_init_module
