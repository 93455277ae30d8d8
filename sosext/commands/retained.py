"""What freeing an object would free: retained (dominator chain of one object) and dominators."""
from __future__ import annotations

from ..clr.roots.dominators import DominatorTree, HeldBy
from ..clr.heap.heap import ClrHeap
from ..clr.typesystem.typekeys import name_contains
from ..clr.heap.segments import Generation
from ..errors import UsageError
from ..render.json import emit_json
from ..render.table import Integer, Pointer, Table, TypeName
from .base import Command, Option, Parsed, Positional, parse_count, register
from .context import CommandContext
from .roots import parse_object_address, require_object


def type_name(heap: ClrHeap, row: int) -> str:
    ix = heap.index()
    return heap.types.csharp_name_of(int(ix.method_tables[ix.type_ids[row]]))  # dumpheap's spelling


def chain_json(heap: ClrHeap, tree: DominatorTree, chain: list[int]) -> list[dict]:
    ix = heap.index()
    return [{"address": f"0x{int(ix.addresses[r]):x}", "mt": f"0x{int(ix.method_tables[ix.type_ids[r]]):x}",
             "size": ix.size_of(r), "retained": int(tree.retained[r]), "name": type_name(heap, r)} for r in chain]


def held_json(held: list[HeldBy]) -> list[dict]:
    return [{"kind": h.kind, "root": h.label, "address": f"0x{h.address:x}", "direct": h.direct,
             "root_object": f"0x{int(h.root.object):x}"} for h in held]


def write_chain(ctx: CommandContext, heap: ClrHeap, tree: DominatorTree, chain: list[int], indent: str = "") -> None:
    ix = heap.index()
    t = Table(Pointer(), Pointer(), Integer(), Integer(), TypeName(), indent=indent)
    ctx.out.line(t.header("Address", "MT", "Size", "Retained", "Class Name"))
    for r in chain:
        ctx.out.line(t.row(int(ix.addresses[r]), int(ix.method_tables[ix.type_ids[r]]), ix.size_of(r),
                           int(tree.retained[r]), type_name(heap, r)))


def write_held(ctx: CommandContext, held: list[HeldBy], top_is_root: bool, indent: str = "") -> None:
    """Roots of the chain's top: "Held by" a root that refers to it, "Reached from" one whose
    references lead to it (several such roots: none of them alone retains it)."""
    if not held:
        ctx.out.line(f"{indent}Held by: no root found")
        return
    for h in held:
        where = f" {h.address:x}" if h.address else ""
        ctx.out.line(f"{indent}{'Held by' if h.direct else 'Reached from'}: {h.label} [{h.kind}{where}]")


@register
class Retained(Command):
    names = ("retained",)
    summary = "An object's retained size (what a GC would free without it) and its dominator chain."
    usage = "retained <address> [--json]"
    details = """\
The retained size is the object's own size plus that of every object only reachable
through it (those it dominates). The chain lists the object, its immediate dominator, that
one's, and so on up to the object just under the roots, each with its retained size; then
the roots holding that object (the static field's name when a static holds it). When
several roots reach the top object independently, none of them alone retains it: all are
listed. Sizes are dumpheap's.

Examples:
  retained 7f3a14005678
  retained 7f3a14005678 --json"""
    options = (Option("--json", "print the result as JSON", dest="json"),)
    positionals = (Positional("address", "the object", required=True),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        heap = ctx.heap
        address = parse_object_address(args.address)
        row = require_object(heap, address)
        tree = heap.dominators(ctx.progress)
        chain = tree.chain(row)
        held = tree.root_of(row) if chain else []
        top_is_root = bool(chain) and chain[-1] in tree.root_rows()
        if args.json:
            emit_json(ctx.out, {"command": "retained", "address": f"0x{address:x}", "name": type_name(heap, row),
                                "reachable": bool(chain), "size": heap.index().size_of(row),
                                "retained": int(tree.retained[row]), "chain": chain_json(heap, tree, chain),
                                "top_is_root": top_is_root, "held_by": held_json(held)})
            return
        out = ctx.out
        if not chain:
            if heap.index().generations[row] == Generation.FROZEN:
                out.line(f"{address:x} ({type_name(heap, row)}) is on the frozen (NonGC) heap: never collected, "
                         "it retains nothing")
            else:
                out.line(f"{address:x} ({type_name(heap, row)}): no root reaches it; it retains nothing "
                         "(garbage not yet collected)")
            return
        out.line(f"{address:x} ({type_name(heap, row)}) retains {int(tree.retained[row]):,} bytes "
                 f"(its own size {heap.index().size_of(row):,})")
        out.line()
        out.line("Dominator chain (the object first, then each immediate dominator):")
        write_chain(ctx, heap, tree, chain)
        out.line()
        write_held(ctx, held, top_is_root)


@register
class Dominators(Command):
    names = ("dominators",)
    summary = "The objects retaining the most memory, with their dominator chains and roots."
    usage = "dominators [-top <n>] [-type <partial name>] [--json]"
    details = """\
Ranks every reachable object by retained size (its own size plus everything only it keeps
alive) and shows the largest, each with its dominator chain up to the roots and the roots
holding it. -type keeps objects whose type name contains the text (case-sensitive), in any
spelling: C#'s as printed (Dictionary<System.String, MyApp.Entry>+Entry[]), the runtime's
(Dictionary`2+Entry[[...]]) or a gcdump's (Entry[System.String,MyApp.Entry][]). Sizes are dumpheap's.

Examples:
  dominators
  dominators -top 3 -type MemoryCache
  dominators -top 20 --json"""
    options = (Option("-top", "how many objects (default 10)", parse_count, "n"),
               Option("-type", "only objects whose type name contains this text", str, "partial name"),
               Option("--json", "print the result as JSON", dest="json"))

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        heap = ctx.heap
        ix = heap.index(ctx.progress)
        n = 10 if args.top is None else args.top
        if n < 1:
            raise UsageError(f"-top must be at least 1: {args.top}")
        tree = heap.dominators(ctx.progress)
        if args.type is not None:
            ids = [i for i, m in enumerate(ix.method_tables.tolist()) if name_contains(args.type, heap.types.name_of(m))]
            rows = tree.top(n, mask=ix.mask_type_ids(ids)) if ids else []
        else:
            rows = tree.top(n)
        entries = []
        for r in rows:
            chain = tree.chain(r)
            entries.append((r, chain, tree.root_of(r), chain[-1] in tree.root_rows()))
        if args.json:
            emit_json(ctx.out, {"command": "dominators", "objects": [
                {"address": f"0x{int(ix.addresses[r]):x}", "name": type_name(heap, r), "size": ix.size_of(r),
                 "retained": int(tree.retained[r]), "chain": chain_json(heap, tree, chain),
                 "top_is_root": is_root, "held_by": held_json(held)} for r, chain, held, is_root in entries]})
            return
        out = ctx.out
        if not entries:
            out.line("No reachable object matches.")
            return
        t = Table(Pointer(), Integer(), Integer(), TypeName())
        out.line("Objects retaining the most:")
        out.line(t.header("Address", "Size", "Retained", "Class Name"))
        for r, _c, _h, _i in entries:
            out.line(t.row(int(ix.addresses[r]), ix.size_of(r), int(tree.retained[r]), type_name(heap, r)))
        for r, chain, held, is_root in entries:
            out.line()
            out.line(f"{int(ix.addresses[r]):x} ({type_name(heap, r)}) retains {int(tree.retained[r]):,} bytes:")
            write_chain(ctx, heap, tree, chain, indent="    ")
            write_held(ctx, held, is_root, indent="    ")
