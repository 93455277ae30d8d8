"""GDB entry point shipped inside the package (for pip installs):
``source <site-packages>/sosext/hosts/gdb_entry.py`` (``sosext install`` writes it).

GDB runs a sourced file in its ``__main__`` namespace; this one only makes sure that
``import sosext`` finds the package this file belongs to, then registers the commands,
leaving no names behind in the user's ``python`` namespace.
"""


def _sosext_load() -> None:
    import os
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
    loaded = sys.modules.get("sosext")
    if loaded is not None and not hasattr(loaded, "__path__"):
        del sys.modules["sosext"]  # a stray module of that name, not the package
    if root not in sys.path:
        sys.path.insert(0, root)
    from sosext.hosts.gdb_host import gdb_init
    gdb_init()


_sosext_load()
del _sosext_load
