"""Module commands: dumpmodule, dumpdomain, dumpassembly (SOS's native layouts)."""
from __future__ import annotations

from ..clr.addresses import AddressKind, classifier
from ..clr.typesystem.modules import ClrAppDomain, ClrAssembly
from ..errors import SosError, UsageError
from .base import Command, Option, Parsed, Positional, address_or, parse_address, register
from .context import CommandContext
from ..render.numbers import P16, p16
from ..render.output import Address
from ..render.table import Cells

# DacpModuleData.dwTransientFlags bit SOS reports.
_IS_EDIT_AND_CONTINUE = 0x8


def _address(text: str | None, what: str) -> int:
    return address_or(text, f"Invalid {what} address: {text}", f"Missing {what} address")


@register
class DumpModule(Command):
    names = ("dumpmodule", "DumpModule")
    summary = "Display a module: file, assembly, image base, lookup maps and metadata location."
    usage = "dumpmodule [-mt] <Module address>"
    details = """\
Module addresses come from dumpmt's "Module:", name2ee's "Module:" or dumpdomain. -mt
lists the loaded types the module defines and the ones it references, with their
MethodTables and tokens.

Examples:
  dumpmodule 00007f3a1c320668
  dumpmodule -mt 00007f3a1c320668"""
    options = (
        Option("-mt", "list the MethodTables of the types defined and referenced"),
        Option("-prof", "methods with profiler-modified IL (not supported by sosext)"),
    )
    positionals = (Positional("module", "the Module address"),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        if args.module is None:
            raise UsageError("Usage: DumpModule [-mt] <Module Address>")
        addr = _address(args.module, "Module")
        rt = ctx.runtime
        classifier(rt).require(addr, AddressKind.MODULE, "a Module", P16(addr))
        mod = rt.catalog.module(addr)
        if mod is None:
            raise SosError(f"Fail to fill Module {P16(addr)}")
        d = mod.data
        out = ctx.out
        out.record_line(f"Name: {mod.shown_name or 'Unknown Module'}")
        attrs = "".join(w for on, w in ((d.is_pe_file, "PEFile "), (d.is_reflection, "Reflection "),
                                        (d.transient_flags & _IS_EDIT_AND_CONTINUE, "EditAndContinue ")) if on)
        load = rt.module_load_info(addr)
        if load is not None:
            attrs += "".join(w for on, w in ((load.is_dynamic, "IsDynamic "), (load.is_in_memory, "IsInMemory "),
                                            (load.is_file_layout, "IsFileLayout ")) if on)
        out.record_line(f"Attributes:              {attrs}")
        out.record_line(f"Assembly:                {p16(d.assembly)}")
        for label, value in (("BaseAddress:", d.il_base), ("LoaderHeap:", d.loader_allocator),
                             ("TypeDefToMethodTableMap:", d.type_def_to_method_table_map),
                             ("TypeRefToMethodTableMap:", d.type_ref_to_method_table_map),
                             ("MethodDefToDescMap:", d.method_def_to_desc_map),
                             ("FieldDefToDescMap:", d.field_def_to_desc_map),
                             ("MemberRefToDescMap:", d.member_ref_to_desc_map),
                             ("FileReferencesMap:", d.file_references_map),
                             ("AssemblyReferencesMap:", d.manifest_module_references_map)):
            out.record_line(f"{label:<24} {P16(value)}")
        if d.il_base and d.metadata_start:
            out.record_line(f"MetaData start address:  {P16(d.metadata_start)} ({d.metadata_size} bytes)")
        if args.mt:
            names = ctx.heap.types
            for key, title, header, table in (
                    ("type_defs", "Types defined in this module", f"{'MT':>16} {'TypeDef':>16} Name",
                     rt.catalog.type_def_map(addr)),
                    ("type_refs", "Types referenced in this module", f"{'MT':>16}   {'TypeRef':>16} Name",
                     rt.catalog.type_ref_map(addr))):
                rows = out.table(key, Cells((), ()), ("mt", "token", "name"))
                out.record_line()
                out.record_line(title)
                out.record_line()
                out.record_line(header)
                out.record_line("-" * 78)
                for token, mt in sorted(table.items()):
                    rows.row(f"{p16(mt)} 0x{token:08x} {names.name_of(mt)}",
                             data=(Address(mt), token, names.name_of(mt)))
        if args.prof:
            out.record_line()
            out.record_line("Listing methods with profiler-modified IL is not supported by sosext.")


def assembly_lines(asm: ClrAssembly) -> list[str]:
    """SOS's AssemblyInfo: the module list of an assembly."""
    out = []
    if asm.data.assembly_sec_desc:
        out.append(f"SecurityDescriptor: {P16(asm.data.assembly_sec_desc)}")
    out.append("  Module")
    for m in asm.modules:
        name = m.shown_name or ("Dynamic Module" if m.is_dynamic else "Unknown Module")
        out.append(f"  {p16(m.address)}    {name}")
    return out


def domain_lines(d: ClrAppDomain) -> list[str]:
    """SOS's DomainInfo: heaps, stage, name and the assemblies of a domain."""
    data = d.data
    out = [f"LowFrequencyHeap:   {P16(data.low_frequency_heap)}",
           f"HighFrequencyHeap:  {P16(data.high_frequency_heap)}",
           f"StubHeap:           {P16(data.stub_heap)}",
           f"Stage:              {d.stage}"]
    if data.app_sec_desc:
        out.append(f"SecurityDescriptor: {P16(data.app_sec_desc)}")
    out.append(f"Name:               {d.name or 'None'}")
    if not d.assemblies:
        return out
    for i, a in enumerate(d.assemblies):
        if i:
            out.append("")
        dyn = " (Dynamic)" if a.is_dynamic else ""
        out.append(f"Assembly:           {p16(a.address)}{dyn} [{a.name}]")
        out.extend(assembly_lines(a))
    out.append("")
    return out


def domain_rows(out, d: ClrAppDomain) -> None:  # type: ignore[no-untyped-def]
    """The structured forms of dumpdomain: rows of "domains", "assemblies" and "modules"."""
    out.table("domains", None, ("address", "kind", "id", "name", "stage")).row(
        data=(Address(d.address), d.kind, d.id, d.name, d.stage))
    assemblies = out.table("assemblies", None, ("domain", "address", "name", "dynamic"))
    modules = out.table("modules", None, ("assembly", "address", "path", "dynamic"))
    for a in d.assemblies:
        assemblies.row(data=(Address(d.address), Address(a.address), a.name, bool(a.is_dynamic)))
        for m in a.modules:
            modules.row(data=(Address(a.address), Address(m.address), m.path, bool(m.is_dynamic)))


def domain_title(d: ClrAppDomain) -> str:
    if d.kind == "system":
        return f"System Domain:      {p16(d.address)}"
    if d.kind == "shared":
        return f"Shared Domain:      {p16(d.address)}"
    return f"Domain {d.id}:{'' if d.id >= 10 else ' '}          {p16(d.address)}"


@register
class DumpDomain(Command):
    names = ("dumpdomain", "DumpDomain")
    summary = "Display the AppDomains with their assemblies and modules."
    usage = "dumpdomain [<Domain address>]"
    details = """\
Without an address, every domain: the system domain, then the application's domain with
each loaded assembly's address, path and modules.

Example:
  dumpdomain"""
    positionals = (Positional("domain", "an AppDomain address"),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        catalog = ctx.runtime.catalog
        out = ctx.out
        if args.domain is not None:
            addr = _address(args.domain, "AppDomain")
            # Only a domain the runtime lists: the DAC reads anything else as one and faults
            # or invents a domain.
            classifier(ctx.runtime).require(addr, AddressKind.APP_DOMAIN, "an AppDomain", P16(addr))
            d = catalog.app_domain(addr)
            if d is None:
                raise SosError("Fail to fill AppDomain")
            if out.structured:
                domain_rows(out, d)
                return
            out.line("-" * 38)
            out.line(domain_title(d))
            out.lines(domain_lines(d))
            return
        domains = catalog.app_domains()
        if not domains:
            raise SosError("Unable to get AppDomain information")
        for d in domains:
            if out.structured:
                domain_rows(out, d)
                continue
            out.line("-" * 38)
            out.line(domain_title(d))
            out.lines(domain_lines(d))


@register
class DumpAssembly(Command):
    names = ("dumpassembly", "DumpAssembly")
    summary = "Display an assembly: its domain, name and modules."
    usage = "dumpassembly <Assembly address>"
    details = """\
Assembly addresses come from dumpdomain ("Assembly:") or dumpmodule.

Example:
  dumpassembly 00005611e30fc810"""
    positionals = (Positional("assembly", "the Assembly address"),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        try:
            addr = parse_address(args.assembly) if args.assembly is not None else 0
        except UsageError:
            addr = 0
        if not addr:
            raise UsageError(f"Invalid Assembly {args.assembly or ''}".rstrip())
        c = classifier(ctx.runtime).require(addr, AddressKind.ASSEMBLY, "an Assembly", P16(addr))
        asm = next((a for d in ctx.runtime.catalog.app_domains() for a in d.assemblies if a.address == c.address),
                   None)
        if asm is None:
            raise SosError("Fail to fill Assembly")
        out = ctx.out
        out.record_line(f"Parent Domain:      {p16(asm.data.parent_domain)}")
        out.record_line(f"Name:               {asm.name or 'Unknown'}")
        out.record(assembly_lines(asm))
