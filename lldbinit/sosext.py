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
    from sosext.hosts.lldb_host import lldb_init
    lldb_init(debugger, "sosext.hosts.lldb_host")


_package.__lldb_init_module = __lldb_init_module
