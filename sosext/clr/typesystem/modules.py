"""AppDomains, assemblies and modules, and each module's metadata.

The DAC lists domains, their assemblies and the assemblies' modules; a module knows its
file, image base and where its metadata lies in the target. The catalog is built once
per target generation (``runtime.modules``); metadata readers are kept for the runtime's
whole life, since a loaded module's metadata never changes.

A heap-only core may lack an image's pages. The core reader already serves file-backed
pages from the file on disk when it can; if the metadata still cannot be read whole, the
module file named by the target is opened and its metadata found through its PE headers.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

from ...dac.structs import AppDomainData, AssemblyData, ModuleData
from ...errors import ReaderUnsupported, SosError
from ...formats.metadata import MetadataError, MetadataReader, metadata_from_pe

if TYPE_CHECKING:
    from ..parts import RuntimeParts

# DacpAppDomainData stage values (dacprivate.h) as SOS names them.
DOMAIN_STAGES = ("CREATING", "READYFORMANAGEDCODE", "ACTIVE", "OPEN", "UNLOAD_REQUESTED", "EXITING",
                 "EXITED", "FINALIZING", "FINALIZED", "HANDLETABLE_NOACCESS", "CLEARED", "COLLECTED",
                 "CLOSED")
_METADATA_SIGNATURE = b"BSJB"
_MAX_METADATA = 256 << 20  # a metadata blob larger than this is a corrupt size


@dataclass(frozen=True, slots=True)
class ClrModule:
    """A loaded module (one file of an assembly; on .NET Core the assembly's only one)."""

    address: int
    data: ModuleData
    path: str  # "" for dynamic (Reflection.Emit) or unnamed modules
    assembly: int
    # What SOS shows for a module whose PEAssembly names no file (loaded from bytes): the
    # module's own file name (IXCLRDataModule), e.g. "Foo.dll"; "" when there is none either.
    loaded_name: str = ""

    @property
    def shown_name(self) -> str:
        """SOS's FileNameForModule: the path, else the name the module itself reports."""
        return self.path or self.loaded_name

    @property
    def file_name(self) -> str:
        return os.path.basename(self.path) if self.path else ""

    @property
    def image_base(self) -> int:
        return self.data.il_base

    @property
    def is_dynamic(self) -> bool:
        return bool(self.data.is_reflection)

    def matches(self, name: str) -> bool:
        """SOS's module matching: file name (any case), file name without extension, or full path."""
        if not self.path:
            return False
        n = name.lower()
        fname = self.file_name.lower()
        return n in (fname, os.path.splitext(fname)[0], self.path.lower())


@dataclass(frozen=True, slots=True)
class ClrAssembly:
    address: int
    domain: int
    name: str  # what the DAC reports: the assembly's file path on Linux
    data: AssemblyData
    modules: tuple[ClrModule, ...]

    @property
    def is_dynamic(self) -> bool:
        return bool(self.data.is_dynamic)


@dataclass(frozen=True, slots=True)
class ClrAppDomain:
    address: int
    kind: str  # "system", "shared" or "domain"
    name: str
    data: AppDomainData
    assemblies: tuple[ClrAssembly, ...]

    @property
    def id(self) -> int:
        return self.data.id

    @property
    def stage(self) -> str:
        s = self.data.stage
        return DOMAIN_STAGES[s] if 0 <= s < len(DOMAIN_STAGES) else "UNKNOWN"


class ModuleCatalog:
    """Every domain, assembly and module of one runtime, read once per target generation."""

    def __init__(self, runtime: "RuntimeParts") -> None:
        self.runtime = runtime
        self.reader = runtime.reader
        self._domains: list[ClrAppDomain] | None = None
        self._modules: dict[int, ClrModule] = {}
        self._typedef_maps: dict[int, dict[int, int]] = {}
        self._typeref_maps: dict[int, dict[int, int]] = {}

    # -- domains and assemblies ----------------------------------------------------------

    def app_domains(self) -> list[ClrAppDomain]:
        """The system domain (and shared domain on old runtimes) first, then the others."""
        if self._domains is None:
            store = self.reader.app_domain_store_data()
            found: list[ClrAppDomain] = []
            if store.system_domain:
                d = self._domain(store.system_domain, "system")
                if d is not None:
                    found.append(d)
            if store.shared_domain:
                d = self._domain(store.shared_domain, "shared")
                if d is not None:
                    found.append(d)
            for addr in self.reader.app_domain_list(max(store.domain_count, 0)):
                d = self._domain(addr, "domain")
                if d is not None:
                    found.append(d)
            self._domains = found
        return self._domains

    def app_domain(self, address: int) -> ClrAppDomain | None:
        for d in self.app_domains():
            if d.address == address:
                return d
        kind = "domain"
        return self._domain(address, kind)

    def _domain(self, address: int, kind: str) -> ClrAppDomain | None:
        data = self.reader.app_domain_data(address)
        if data is None:
            return None
        name = self.reader.app_domain_name(address) or ""
        assemblies: list[ClrAssembly] = []
        if data.assembly_count > 0:
            for a in self.reader.assembly_list(address, data.assembly_count):
                asm = self.assembly(a, address)
                if asm is not None:
                    assemblies.append(asm)
        return ClrAppDomain(address, kind, name, data, tuple(assemblies))

    def assembly(self, address: int, domain: int = 0) -> ClrAssembly | None:
        data = self.reader.assembly_data(domain, address)
        if data is None:
            return None
        name = self.reader.assembly_name(address) or ""
        mods = []
        if data.module_count > 0:
            for m in self.reader.assembly_module_list(address, data.module_count):
                mod = self.module(m)
                if mod is not None:
                    mods.append(mod)
        return ClrAssembly(address, data.parent_domain or domain, name, data, tuple(mods))

    # -- modules -------------------------------------------------------------------------

    def modules(self) -> list[ClrModule]:
        """Every module once, in domain and assembly order."""
        seen: dict[int, ClrModule] = {}
        for d in self.app_domains():
            for a in d.assemblies:
                for m in a.modules:
                    seen.setdefault(m.address, m)
        return list(seen.values())

    def module(self, address: int) -> ClrModule | None:
        """The module at ``address`` (any module the DAC knows, listed or not)."""
        mod = self._modules.get(address)
        if mod is None:
            data = self.reader.module_data(address)
            if data is None:
                return None
            path = self._module_path(data)
            loaded = ""
            if not path and data.pe_assembly:
                try:
                    loaded = self.reader.module_file_name(address) or ""
                except ReaderUnsupported:
                    pass  # IXCLRDataModule is the DAC's alone: such a module stays unnamed there
            mod = ClrModule(address, data, path, data.assembly, loaded)
            self._modules[address] = mod
        return mod

    def _module_path(self, data: ModuleData) -> str:
        # The PEAssembly knows the file; IXCLRDataModule would too, but the DAC's PE name
        # is what SOS shows first.
        if not data.pe_assembly:
            return ""
        return self.reader.pe_file_name(data.pe_assembly) or ""

    def find(self, name: str) -> list[ClrModule]:
        """Modules matching ``name`` as name2ee/token2ee match them; ``*`` is every module."""
        mods = self.modules()
        if name == "*":
            return mods
        return [m for m in mods if m.matches(name)]

    def type_def_map(self, module: int) -> dict[int, int]:
        """TypeDef token -> MethodTable for the module's loaded types, in token order."""
        m = self._typedef_maps.get(module)
        if m is None:
            m = {0x02000000 | rid: mt for rid, mt in self.reader.traverse_module_map(module, 0) if mt}
            self._typedef_maps[module] = m
        return m

    def type_ref_map(self, module: int) -> dict[int, int]:
        """TypeRef token -> MethodTable for the TypeRefs the module has resolved."""
        m = self._typeref_maps.get(module)
        if m is None:
            m = {0x01000000 | rid: mt for rid, mt in self.reader.traverse_module_map(module, 1) if mt}
            self._typeref_maps[module] = m
        return m

    # -- metadata --------------------------------------------------------------------------

    def metadata(self, module: ClrModule | int) -> MetadataReader | None:
        """The module's metadata, read from the target (or its file); None if unreadable."""
        mod = self.module(module) if isinstance(module, int) else module
        if mod is None:
            return None
        cache = self.runtime.metadata_cache
        key = (mod.address, mod.data.metadata_start)
        if key not in cache:
            cache[key] = self._read_metadata(mod)
        return cache[key]

    def require_metadata(self, module: ClrModule | int) -> MetadataReader:
        md = self.metadata(module)
        if md is None:
            addr = module if isinstance(module, int) else module.address
            raise SosError(f"the metadata of module {addr:#x} cannot be read from the target or its file")
        return md

    def _read_metadata(self, mod: ClrModule) -> MetadataReader | None:
        start, size = mod.data.metadata_start, mod.data.metadata_size
        if start and 0 < size <= _MAX_METADATA:
            blob = self.runtime.target.read_partial(start, size)
            if len(blob) == size and bytes(blob[:4]) == _METADATA_SIGNATURE:
                try:
                    return MetadataReader(blob)
                except MetadataError:
                    pass
        return self._metadata_from_file(mod)

    def _metadata_from_file(self, mod: ClrModule) -> MetadataReader | None:
        """The module file on disk, when the target's copy of the image is missing."""
        path = self.local_file(mod.path)
        if path is None:
            return None
        try:
            with open(path, "rb") as f:
                image = f.read()
            reader = MetadataReader(metadata_from_pe(image, mapped=False))
        except (OSError, MetadataError):
            return None
        size = mod.data.metadata_size
        if size and len(reader.data) != size:
            return None  # another build of the file than the one the target loaded
        return reader

    def local_file(self, path: str) -> str | None:
        """Where a module file the target names can be read here (a core's files may have moved)."""
        if not path:
            return None
        finder = getattr(self.runtime.target, "core", None)
        local = getattr(finder, "local_path", None)
        if callable(local):
            return local(path)
        return path if os.path.isfile(path) else None

    def iter_loaded_types(self, module: ClrModule) -> Iterator[tuple[int, int]]:
        """(TypeDef token, MethodTable) of every loaded type of ``module``, in token order."""
        yield from sorted(self.type_def_map(module.address).items())
