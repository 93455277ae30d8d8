"""LLDB entry point shipped inside the package (for pip installs):
``command script import <site-packages>/sosext/hosts/lldb_entry.py`` (``sosext install`` writes it).

LLDB imports this file as the module ``lldb_entry`` and puts its directory on sys.path;
that directory is taken off again (its modules are not top-level modules), and the directory
holding the ``sosext`` package goes first, so a ``pip install --prefix`` that Python's path
does not know still loads.
"""
import os
import sys

_here = os.path.dirname(os.path.realpath(__file__))
_root = os.path.dirname(os.path.dirname(_here))
sys.path[:] = [p for p in sys.path if os.path.realpath(p or ".") != _here]
if _root not in sys.path:
    sys.path.insert(0, _root)


def __lldb_init_module(debugger, internal_dict):  # noqa: N807 - LLDB's hook name
    import sosext
    from sosext.hosts.lldb_host import lldb_init
    # LLDB resolves "sosext.hosts.lldb_host.Cmd_x" from its session dictionary, where this
    # file is bound as "lldb_entry": bind the package there too.
    internal_dict["sosext"] = sosext
    lldb_init(debugger, "sosext.hosts.lldb_host")
