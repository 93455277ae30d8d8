"""sosext: SOS-style .NET memory debugging for LLDB, GDB and core files, in Python.

Besides the debugger commands (``soshelp`` in LLDB or GDB) and the command line
(``sosext analyze CORE``), sosext is a library for scripting a hunt:

    import sosext

    with sosext.open("core.1234") as rt:        # or sosext.open(pid=1234); in LLDB/GDB: sosext.current()
        heap = rt.heap
        for row in heap.stats()[-10:]:          # dumpheap -stat: ascending total size
            print(row.type.name, row.count, row.total_size)
        for obj in heap.objects(type="System.String", gen=2, live=True):
            print(hex(obj.address), obj.size, obj.as_string(40))
        for path in heap.gcroot(obj):           # gcroot: root first, obj last
            print(path.root.kind, path.root.name, [o.type.name for o in path.objects])
        for thread in rt.threads:
            print(thread.os_id, [f.method for f in thread.frames])
        for r in heap.dominators(3):            # dominators; heap.retained(obj) is one object's
            print(r.retained, r.object.type.name)
        report = sosext.leaks("core.1200", rt)  # sosext leaks OLD NEW; sosext.diff(old, new) too
        for h in report.holders:
            print(h.object.type.name, h.retained, h.retained_delta, h.held_by)

Type names are C#'s, as dumpheap prints them (``type.runtime_name`` keeps the runtime's).
After the README's set-up (scripts/setup.sh), ``import sosext`` works in /usr/bin/python3 from
any directory.

Everything returned is made of ints, strs and small classes; heap-wide queries are lazy.
docs/api.md has the full tour.
"""

from .version import VERSION as __version__

__all__ = ["open", "current", "diff", "leaks", "Runtime", "Heap", "HeapObject", "ClrType", "TypeStats", "Root",
           "RootPath", "Thread", "Frame", "Generation", "Retention", "HeldBy", "HeapDiff", "TypeGrowth", "Holder",
           "Leaks", "GrownType", "PathGroup", "SosError"]

# The API loads on first use (PEP 562): `sosext ps`, `sosext install` and the
# debugger entry points do not pay for numpy and the DAC bindings they may not need.


def __getattr__(name: str):  # type: ignore[no-untyped-def]
    if name == "SosError":
        from .errors import SosError
        return SosError
    if name in __all__:
        from . import api
        return getattr(api, name)
    raise AttributeError(f"module 'sosext' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
