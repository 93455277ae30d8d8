"""Type and method commands: dumpmt, dumpclass, dumpmd, name2ee, token2ee.

dumpmt/dumpclass/dumpmd are SOS's native commands (labels padded, pointers as 16 hex
digits); name2ee/token2ee are its C# ones (lowercase 16-digit numbers, modules separated
by 38 dashes, matches inside a module by 23).
"""
from __future__ import annotations

from ..clr.addresses import AddressKind, classifier
from ..formats.metadata import MetadataError, MetadataReader
from ..formats.metadata.records import TYPE_INTERFACE
from ..clr.typesystem.modules import ClrModule
from ..clr.runtime import ClrRuntime
from ..errors import SosAnswer, SosError, UsageError
from ..render.numbers import P16, p16
from ..render.output import Address, label_fields
from ..render.table import Column, Table, Text
from .base import Command, Option, Parsed, Positional, address_or, parse_mt, register
from .context import CommandContext
from .objects import NOTES_HELP, FieldTable, module_file, prefers_canonical_mt

MODULE_RULE = "-" * 38
MATCH_RULE = "-" * 23
_TD_ABSTRACT, _TD_SEALED, _TD_IMPORT = 0x80, 0x100, 0x1000


def _label(label: str, value: str, width: int = 20) -> str:
    """A row of SOS's two-column TableOutput: label padded, value as is."""
    return f"{label:<{width}} {value}"


# -- dumpmt -----------------------------------------------------------------------------------


@register
class DumpMT(Command):
    names = ("dumpmt", "DumpMT")
    summary = "Display a MethodTable: name, module, sizes, method count; -md lists its methods."
    usage = "dumpmt [-md] [-all] [-notes] <MethodTable>"
    details = """\
BaseSize is the size of an instance without elements (the size dumpheap shows for
fixed-size objects); ComponentSize the bytes per element of arrays and strings.
-md adds each slot's entry point, MethodDesc, JIT state (JIT, PreJIT, FCALL, NONE), slot
number and name; -all also the class details and the field list (as dumpclass; -notes
adds what a static's value means, as dumpobj -notes). The GC's filler type (Free) prints
"Free MethodTable" alone, as SOS does.

Examples:
  dumpmt 00007f3a1c2d4e80
  dumpmt -md 00007f3a1c2d4e80"""
    options = (
        Option("-md", "list the methods (MethodDesc table)", aliases=("-MD",)),
        Option("-all", "also show the class details and fields"),
        Option("-notes", "with -all, " + NOTES_HELP),
    )
    positionals = (Positional("mt", "the MethodTable address"),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        if args.mt is None:
            raise UsageError("Missing MethodTable address")
        original = parse_mt(args.mt)
        mt = original & ~3
        rt = ctx.runtime
        classifier(rt).require(mt, AddressKind.METHOD_TABLE, "a MethodTable", P16(original))
        t = ctx.heap.types.get(mt)
        if t is None:
            raise SosError(f"{P16(original)} is not a MethodTable")
        if t.is_free:
            # SOS's one line for the GC's filler type: what the MethodTable is, not a failure.
            ctx.out.record_line("Free MethodTable")
            return
        out = ctx.out
        out.field("mt", Address(mt))
        out.field("parent", Address(t.parent), _label("Parent:", p16(t.parent)))
        prefer, canon = prefers_canonical_mt(rt, t.canonical)
        if prefer:
            if canon and canon != mt:
                out.field("canonical", Address(canon), _label("Canonical:", p16(canon)))
        else:
            out.field("eeclass", Address(t.canonical), _label("EEClass:", P16(t.canonical)))
        out.field("module", Address(t.module), _label("Module:", P16(t.module)))
        out.field("name", t.name, _label("Name:", t.name))
        out.field("token", t.token, _label("mdToken:", P16(t.token)))
        out.field("file", module_file(rt, t.module), _label("File:", module_file(rt, t.module)))
        coll = rt.collectible_data(mt)
        if coll is not None and coll.loader_allocator_object_handle:
            raw = rt.target.read_partial(coll.loader_allocator_object_handle, 8)
            if len(raw) == 8:
                la = int.from_bytes(raw, "little")
                out.field("loader_allocator", Address(la), _label("LoaderAllocator:", P16(la)))
        alc = rt.assembly_load_context(mt)
        if alc is not None:
            out.field("assembly_load_context", Address(alc), _label("AssemblyLoadContext:", P16(alc) if alc else
                      "Default ALC - The managed instance of this context doesn't exist yet."))
        data = rt.method_table_data(mt)
        out.field("base_size", data.base_size, _label("BaseSize:", f"0x{data.base_size:x}"))
        out.field("component_size", data.component_size,
                  _label("ComponentSize:", f"0x{data.component_size:x}") if data.component_size else None)
        out.field("has_gc_pointers", bool(data.contains_pointers),
                  _label("Has GC Pointers:", "true" if data.contains_pointers else "false"))
        out.field("methods", data.num_methods, _label("Number of Methods:", str(data.num_methods)))
        out.field("interfaces", data.num_interfaces,
                  _label("Number of IFaces in IFaceMap:", str(data.num_interfaces), 29))
        if args.md or args.all:
            out.line("-" * 38)
            out.line("MethodDesc Table")
            rows = out.table("method_descs", Table(Column(16, True, P16), Column(16, True, P16), Column(6, True, str),
                                                   Column(16, False, P16), Text()),
                             ("entry", "method_desc", "jit", "slot", "name"))
            rows.header("Entry", "MethodDesc", "JIT", "Slot", "Name")
            methods = rt.methods
            for s in methods.slots(mt):
                jit = methods.jit_kind(s.entry_point, s.method_desc)
                m = methods.get(s.method_desc) if s.method_desc else None
                name = m.name if m else _token_name(rt, s.defining_module, s.token)
                rows.row(s.entry_point, s.method_desc, jit, s.slot, name,
                         data=(Address(s.entry_point), Address(s.method_desc), jit, s.slot, name))
        if args.all:
            out.line("-" * 38)
            out.line("Additional Details")
            out.record(class_details(ctx, mt, notes=args.notes))


def _token_name(rt: ClrRuntime, module: int, token: int) -> str:
    md = rt.catalog.metadata(module) if module else None
    if md is None:
        return f"Unknown Module!{token:08x}"
    try:
        return md.method_signature_text(token)
    except MetadataError:
        return f"Unknown Module!{token:08x}"


def class_details(ctx: CommandContext, mt: int, *, notes: bool = False) -> list[str]:
    """Attributes, slot counts and the field list (dumpclass, dumpmt -all)."""
    rt = ctx.runtime
    data = rt.method_table_data(mt)
    words = "".join(w for bit, w in ((TYPE_INTERFACE, "Interface "), (_TD_ABSTRACT, "Abstract "),
                                     (_TD_IMPORT, "ComImport "), (_TD_SEALED, "Sealed ")) if data.attr_class & bit)
    out = [f"Class Attributes:    {data.attr_class:08x}  {words}"]
    if data.num_virtuals:
        out.append(f"Vtable Slots:    {data.num_virtuals}")
    if data.num_vtable_slots:
        out.append(f"Total Method Slots:  {data.num_vtable_slots}")
    fdata = rt.field_counts(mt)
    if fdata is not None:
        out.append(f"NumInstanceFields:   {fdata.num_instance_fields}")
        out.append(f"NumStaticFields:     {fdata.num_static_fields}")
        if fdata.num_thread_static_fields:
            out.append(f"NumThreadStaticFields: {fdata.num_thread_static_fields}")
        if fdata.context_statics_size:
            out.append(f"ContextStaticOffset: 0x{fdata.context_static_offset:x}")
            out.append(f"ContextStaticsSize:  {fdata.context_statics_size}")
        if fdata.num_instance_fields + fdata.num_static_fields > 0:
            out.extend(FieldTable(ctx, notes=notes).lines(mt, None, False))
    return out


# -- dumpclass --------------------------------------------------------------------------------


@register
class DumpClass(Command):
    names = ("dumpclass", "DumpClass")
    summary = "Display a class: name, token, parent, attributes and fields with static values."
    usage = "dumpclass [-notes] <EEClass or canonical MethodTable>"
    details = """\
On .NET 9 and later the runtime has no separate EEClass address: pass a MethodTable (the
canonical one, dumpmt's "Canonical:", or an instantiation's, which is then shown with its
"Canonical:" MethodTable, as SOS does). On older
runtimes pass the EEClass (dumpmt's "EEClass:"); sosext also accepts a MethodTable there.
Instance fields are listed without values; statics with their values (-notes adds what a
static's value means, as dumpobj -notes).

Example:
  dumpclass 00007f3a1c2d4e80"""
    options = (Option("-notes", NOTES_HELP),)
    positionals = (Positional("eeclass", "an EEClass or canonical MethodTable address"),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        addr = address_or(args.eeclass, f"Invalid EEClass address: {args.eeclass}", "Missing EEClass address")
        rt = ctx.runtime
        mt = _eeclass_method_table(ctx, addr)
        if mt is None:
            c = classifier(rt).classify(addr)
            if c.kind is AddressKind.METHOD_TABLE:
                # Before .NET 9 SOS wants the EEClass; a MethodTable given instead leads to it.
                given = ctx.heap.types.get(addr)
                if given is not None:
                    mt = _eeclass_method_table(ctx, given.canonical)
                    addr = given.canonical
            elif c.description():
                raise c.error("an EEClass or canonical MethodTable")
        if not mt:
            raise SosError("Invalid EEClass address")
        prefer = mt == addr
        t = ctx.heap.types.get(mt)
        if t is None:
            raise SosError("EEClass has an invalid MethodTable address")
        out = ctx.out
        out.record_line(f"Class Name:      {t.name}")
        out.record_line(f"mdToken:         {P16(t.token)}")
        out.record_line(f"File:            {module_file(rt, t.module)}")
        if prefer:
            out.record_line(f"Parent:    {p16(t.parent)}")
        else:
            parent = ctx.heap.types.get(t.parent) if t.parent else None
            out.record_line(f"Parent Class:    {p16(parent.canonical if parent else 0)}")
        out.record_line(f"Module:          {p16(t.module)}")
        out.record_line(f"Method Table:    {p16(mt)}")
        if prefer and mt != t.canonical:
            out.record_line(f"Canonical:    {p16(t.canonical)}")
        out.record(class_details(ctx, mt, notes=args.notes))


def _eeclass_method_table(ctx: CommandContext, addr: int) -> int | None:
    """The MethodTable whose class is ``addr`` (an EEClass, or on .NET 9+ a canonical
    MethodTable), found without handing ``addr`` itself to the DAC."""
    cls = classifier(ctx.runtime)
    c = cls.classify(addr)
    if c.kind is AddressKind.METHOD_TABLE:
        t = ctx.heap.types.get(addr)
        if t is None:
            return None
        if t.canonical == addr:
            return addr
        # With no EEClass (.NET 9+: a MethodTable's "Class" is its canonical MethodTable) the
        # runtime takes any MethodTable as the class: SOS then shows that exact instantiation,
        # with its canonical MethodTable beside it.
        return addr if cls.classify(t.canonical).kind is AddressKind.METHOD_TABLE else None
    if c.kind is AddressKind.EECLASS:
        return cls.eeclass_method_table(addr)
    return None


# -- dumpmd -----------------------------------------------------------------------------------


@register
class DumpMD(Command):
    names = ("dumpmd", "DumpMD")
    summary = "Display a MethodDesc: name, class, token, module, JIT state and code versions."
    usage = "dumpmd <MethodDesc>"
    details = """\
IsJitted tells whether the method has code; Version History lists the IL version and
each native code version with its tier (QuickJitted, OptimizedTier1, Optimized ...).
An address that is no MethodDesc gets SOS's answer "<address> is not a MethodDesc".

Example:
  dumpmd 00007f3a1c2d6c78"""
    positionals = (Positional("md", "the MethodDesc address"),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        md = address_or(args.md, f"Invalid MethodDesc address: {args.md}",
                        "Missing MethodDesc address (usage: dumpmd <MethodDesc>)")
        self.show(ctx, md)

    @staticmethod
    def show(ctx: CommandContext, md: int, ip: int = 0) -> None:
        """dumpmd's lines; with ``ip`` (ip2md) "Current CodeAddr" is the code version holding it."""
        rt = ctx.runtime
        # SOS's answer for anything the DAC does not take as a MethodDesc; sosext asks the
        # DAC only about what the classifier calls one.
        m = rt.methods.get(md) if classifier(rt).classify(md).kind is AddressKind.METHOD_DESC else None
        if m is None:
            raise SosAnswer(f"{P16(md)} is not a MethodDesc")
        d = m.data
        out = ctx.out
        pad = 22
        out.record_line(f"{'Method Name:':<{pad}}{m.name}")
        t = ctx.heap.types.get(m.method_table)
        if t is not None:
            out.record_line(f"{'Class:':<{pad}}{p16(t.canonical)}")
        out.record_line(f"{'MethodTable:':<{pad}}{p16(m.method_table)}")
        out.record_line(f"{'mdToken:':<{pad}}{P16(m.token)}")
        out.record_line(f"{'Module:':<{pad}}{p16(m.module)}")
        out.record_line(f"{'IsJitted:':<{pad}}{'yes' if d.has_native_code else 'no'}")
        current = (rt.method_code_start_at(md, ip) if ip else None) or d.native_code_addr
        out.record_line(f"{'Current CodeAddr:':<{pad}}{p16(current)}")
        out.record_line("Version History:")
        v = rt.methods.code_versions(m)
        if v.pending is not None:
            rid, node, il = v.pending
            out.record_line(f"  ILCodeVersion:      {P16(node)} (pending)")
            out.record_line(f"  ReJIT ID:           {rid}")
            out.record_line(f"  IL Addr:            {p16(il)}")
        out.record_line(f"  ILCodeVersion:      {P16(v.il_code_version_node)}")
        out.record_line(f"  ReJIT ID:           {v.rejit_id}")
        out.record_line(f"  IL Addr:            {p16(v.il_address)}")
        for cv in reversed(v.native):
            out.record_line(f"     CodeAddr:           {p16(cv.native_code)}  ({cv.tier})")
            out.record_line(f"     NativeCodeVersion:  {P16(cv.native_code_version_node)}")


# -- name2ee / token2ee -------------------------------------------------------------------------

_NAME2EE_USAGE = ("Usage: name2ee <module> <type or method>, or name2ee <module>!<type or method>; "
                  "* for every module (e.g. name2ee *!System.String, name2ee System.Private.CoreLib.dll "
                  "System.String.ToString)")


def _module_header(mod: ClrModule) -> list[str]:
    return [f"Module:      {p16(mod.address)}", f"Assembly:    {mod.file_name or '<unknown>'}"]


def _method_lines(rt: ClrRuntime, module: int, token: int, method_table: int, fallback_name: str,
                  token_width: int = 16) -> list[str]:
    """Token, MethodDesc, name and JIT state of a method (name2ee/token2ee)."""
    out = [f"Token:       {token:0{token_width}x}"]
    md = rt.methods.desc_from_token(module, token, method_table)
    if not md:
        return out + ["MethodDesc:  <not loaded yet>", f"Name:        {fallback_name}", "Not JITTED yet."]
    m = rt.methods.get(md)
    if m is None:
        # The DAC names it but cannot read its code state (e.g. a heap dump without the
        # ReadyToRun image's pages): say so rather than guess.
        name = rt.method_desc_name(md) or fallback_name
        return out + [f"MethodDesc:  {p16(md)}", f"Name:        {name}",
                      "JIT state unknown: the runtime's data for this method cannot be read."]
    out += [f"MethodDesc:  {p16(m.method_desc)}", f"Name:        {m.name}"]
    code = m.native_code
    if code:
        out.append(f"JITTED Code Address: {p16(code)}")
    else:
        out.append(f"Not JITTED yet. Use !bpmd -md {p16(m.method_desc)} to break on run.")
    return out


def _type_lines(token: int, mt: int, name: str, token_width: int = 16) -> list[str]:
    return [f"Token:       {token:0{token_width}x}",
            f"MethodTable: {p16(mt)}" if mt else "MethodTable: <not loaded yet>",
            f"Name:        {name}"]


def _split_member(name: str) -> tuple[str, str] | None:
    """'Ns.Type.Method' -> ('Ns.Type', 'Method'); '..' kept for explicit interface methods."""
    dot = name.rfind(".")
    if dot <= 0:
        return None
    if name[dot - 1] == ".":
        dot -= 1
    return name[:dot], name[dot + 1:]


def _find_in_module(ctx: CommandContext, mod: ClrModule, item: str) -> list[list[str]]:
    """Each match in ``mod`` as a block of lines, as SOS's name2ee finds them: per loaded type
    (TypeDef order), the type itself when its name (ClrMD's, e.g. ``List<T1>``) contains
    ``item`` in any case; else, when it contains the part before the last dot, the first
    method of the type's slots with that name (exact case), else its first instance field
    (inherited ones first), else its first static field of that name: one block per type."""
    rt = ctx.runtime
    types = ctx.heap.types
    wanted = item.replace("/", "+")
    low = wanted.lower()
    member = _split_member(wanted)
    blocks: list[list[str]] = []
    for token, mt in rt.catalog.iter_loaded_types(mod):
        name = types.csharp_name_of(mt)
        lname = name.lower()
        if low in lname:
            blocks.append(_type_lines(token, mt, name))
        elif member is not None and member[0].lower() in lname:
            block = _member_block(ctx, mod, token, mt, name, member[1])
            if block:
                blocks.append(block)
    return blocks


def _member_block(ctx: CommandContext, mod: ClrModule, type_token: int, mt: int, type_name: str,
                  member: str) -> list[str] | None:
    rt = ctx.runtime
    methods = rt.methods
    for s in methods.slots(mt):
        # ClrMD's ClrType.Methods: the slots that hold an entry point, and the MethodDesc it leads to.
        if not s.entry_point or not s.method_desc:
            continue
        m = methods.get(s.method_desc)
        if m is not None and m.name and _short_method_name(m.name) == member:
            return _method_lines(rt, m.module, m.token, m.method_table, m.name)
    fields = rt.fields
    instance = [f for f in fields.all_fields(mt) or () if f.is_instance]
    statics = [f for f in fields.own_fields(mt) or () if not f.is_instance and not f.is_thread_static
               and not f.is_context_static]
    for f in (*instance, *statics):
        if f.name == member:
            return [f"Field {f.name} (mdToken {f.token:08x}) of"] + _type_lines(type_token, mt, type_name)
    return None


def _short_method_name(full: str) -> str:
    """'Ns.Type.Method(args)' -> 'Method' (ClrMD's ClrMethod.Name); '..ctor' -> '.ctor'."""
    head = full.split("(", 1)[0]
    if "<" in head:
        head = head.split("<", 1)[0] if not head.endswith(">") else head[:head.index("<")]
    dot = head.rfind(".")
    if dot > 0 and head[dot - 1] == ".":
        dot -= 1
    return head[dot + 1:]


def _signature(md: MetadataReader, token: int) -> str:
    try:
        return md.method_signature_text(token)
    except MetadataError:
        return "<unknown>"


def _write_module_results(ctx: CommandContext, results: list[tuple[ClrModule, list[list[str]]]],
                          wildcard: bool, pattern: str) -> None:
    out = ctx.out
    printed = 0
    misses = 0
    if out.structured:  # one row per match: the module's and the match's labelled lines
        rows = out.table("matches", None, ())
        for mod, blocks in results:
            for block in blocks:
                found: dict = {}
                label_fields(_module_header(mod) + block, found)
                rows.rows.append(found)
        out.field("modules_without_match", sum(1 for _m, b in results if not b))
        return
    for mod, blocks in results:
        if not blocks and wildcard:
            misses += 1
            continue
        if printed:
            out.line(MODULE_RULE)
        out.lines(_module_header(mod))
        for i, block in enumerate(blocks):
            if i:
                out.line(MATCH_RULE)
            out.lines(block)
        printed += 1
    if wildcard and misses:
        if printed:
            out.line(MODULE_RULE)
        out.line()
        out.line(f"Scanned {misses} module{'' if misses == 1 else 's'} which had no matches.")


def _modules_matching(ctx: CommandContext, name: str) -> list[ClrModule]:
    mods = ctx.runtime.catalog.find(name)
    if not mods:
        raise SosError(f"Failed to find module matching '{name}'.")
    return mods


@register
class Name2EE(Command):
    names = ("name2ee", "Name2EE")
    summary = "Find a type or method by name in a module (or every module with *)."
    usage = "name2ee <module|*> <Namespace.Type | Namespace.Type.Method | Namespace.Type.field>  (or <module>!<name>)"
    details = """\
The module is a file name (with or without .dll) or a full path; * searches every module.
As SOS's: a type matches when its name (ClrMD's form, `List<T1>`) contains the text (any case;
Outer/Inner or Outer+Inner for nested types): its TypeDef token, MethodTable and name are
printed. Otherwise, in each type whose name contains the part before the last dot,
Type.Method finds the first method of that name (exact case) among the MethodTable's slots
that hold an entry point: token, MethodDesc, name, and the JIT-compiled code's address or
"Not JITTED yet"; Type.field names the field (inherited instance fields, then statics) and
its type. Only loaded types are searched; a named module without a match prints its header.

Examples:
  name2ee MyApp.dll MyApp.Cache
  name2ee MyApp MyApp.Cache.Evict
  name2ee *!System.String"""
    positionals = (Positional("words", "module and name", rest=True),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        words = args.words
        if len(words) == 1 and "!" in words[0].strip("!") and words[0].count("!") == 1:
            module_name, item = words[0].split("!")
        elif len(words) == 2:
            module_name, item = words
        else:
            raise UsageError(_NAME2EE_USAGE)
        if not module_name or not item:
            raise UsageError(_NAME2EE_USAGE)
        wildcard = module_name == "*"
        mods = ctx.runtime.catalog.find(module_name)
        if not mods:
            # SOS answers this (it is not a failure of the command): so does sosext.
            ctx.out.line(f"Failed to find module matching '{module_name}'.")
            return
        # A named module without a match still gets its header, as SOS prints it.
        results = [(m, _find_in_module(ctx, m, item)) for m in mods]
        _write_module_results(ctx, results, wildcard, item)


@register
class Token2EE(Command):
    names = ("token2ee", "Token2EE")
    summary = "Find the MethodTable or MethodDesc of a metadata token in a module (or every module)."
    usage = "token2ee <module|*> <token>"
    details = """\
Accepts TypeDef (02xxxxxx), TypeRef (01xxxxxx), MethodDef (06xxxxxx) and FieldDef
(04xxxxxx) tokens, in hex with or without 0x. A type is named as SOS names it (ClrMD's
form: a generic definition is `Dictionary<T1, T2>`).

Examples:
  token2ee MyApp.dll 02000004
  token2ee * 0x06000123"""
    positionals = (Positional("module", "module name or *"), Positional("token", "metadata token (hex)"))

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        usage = "Usage: token2ee <module|*> <mdToken> (you can pass * for the module to search all modules)"
        if args.module is None or args.token is None:
            raise UsageError(usage)
        text = args.token[2:] if args.token.lower().startswith("0x") else args.token
        try:
            token = int(text, 16)
            if not 0 <= token <= 0xFFFFFFFF:
                raise ValueError
        except ValueError:
            raise UsageError(f"Invalid token: {args.token}") from None
        kind = token >> 24
        if kind not in (0x01, 0x02, 0x04, 0x06):
            raise SosError("This token type is not supported")
        wildcard = args.module == "*"
        mods = _modules_matching(ctx, args.module)
        results = []
        for mod in mods:
            block = self._lookup(ctx, mod, token, strict=wildcard)
            if block is None and not wildcard:
                block = [f"Token:       {token:08x}", "<invalid module token>"]
            results.append((mod, [block] if block else []))
        _write_module_results(ctx, results, wildcard, args.token)

    @staticmethod
    def _lookup(ctx: CommandContext, mod: ClrModule, token: int, strict: bool) -> list[str] | None:
        """The token's block, or None if the module has no such token. ``strict`` (with *)
        counts a method or field only if its type is loaded, so that every module's row
        numbers do not all match."""
        rt = ctx.runtime
        kind = token >> 24
        if kind in (0x01, 0x02):
            table = rt.catalog.type_def_map(mod.address) if kind == 0x02 else rt.catalog.type_ref_map(mod.address)
            mt = table.get(token)
            if not mt:
                # SOS names no type it cannot find loaded (a token of one module only: with *
                # such a module is left out).
                return None if strict else [f"Token:       {token:08x}", "MethodTable: <not loaded yet>",
                                            "EEClass:     <not loaded yet>", "Name:        <unknown>"]
            return _type_lines(token, mt, ctx.heap.types.csharp_name_of(mt), 8)
        md = rt.catalog.metadata(mod)
        if kind == 0x06:
            owner_mt = 0
            name = None
            if md is not None:
                try:
                    name = _signature(md, token) if md.method(token) else None
                    owner = md.declaring_type(token)
                except MetadataError:
                    owner = None
                owner_mt = rt.catalog.type_def_map(mod.address).get(owner, 0) if owner else 0
            if not rt.methods.desc_from_token(mod.address, token, owner_mt) and (strict or name is None):
                return None
            return _method_lines(rt, mod.address, token, owner_mt, name or "<unknown>", 8)
        if md is None:
            return None
        try:
            name = md.field(token).name
            owner = md.declaring_type(token)
        except MetadataError:
            return None
        if strict and (owner is None or owner not in rt.catalog.type_def_map(mod.address)):
            return None
        return [f"Token:       {token:08x}", f"Field name:  {name}"]

