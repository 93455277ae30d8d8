"""GDB entry point: ``source /path/to/gdbinit/sosext.py`` (at the prompt or in ~/.gdbinit).

GDB runs a sourced Python file in its ``__main__`` namespace, so this file is never the
module ``sosext``; it only has to make sure that ``import sosext`` finds the package in the
repository root (this file's grandparent), not this file, and to leave no names behind in
the user's ``python`` namespace.
"""


def _sosext_load() -> None:
    import os
    import sys

    here = os.path.dirname(os.path.realpath(__file__))
    root = os.path.dirname(here)
    # A directory holding this file on sys.path would make `import sosext` import it.
    sys.path[:] = [p for p in sys.path if os.path.realpath(p or ".") != here]
    loaded = sys.modules.get("sosext")
    if loaded is not None and not hasattr(loaded, "__path__"):
        del sys.modules["sosext"]  # a stray module of that name, not the package
    if root not in sys.path:
        sys.path.insert(0, root)
    # A failure here is one line, not a traceback (and then no command is registered).
    import gdb
    from sosext.pycheck import problem
    text = problem("GDB")
    try:
        if text is None:
            from sosext.hosts.gdb_host import gdb_init
            gdb_init()
    except Exception as e:  # noqa: BLE001 - GDB would print a traceback
        if os.environ.get("SOSEXT_DEBUG", "") not in ("", "0"):
            import traceback
            gdb.write(traceback.format_exc(), gdb.STDERR)
        text = f"sosext failed to load: {type(e).__name__}: {e} (SOSEXT_DEBUG=1 shows a traceback)"
    if text is not None:
        gdb.write(f"error: {text}\n", gdb.STDERR)


_sosext_load()
del _sosext_load
