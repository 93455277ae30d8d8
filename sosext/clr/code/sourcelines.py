"""Source file and line of a code address: native IP -> IL offset -> document and line.

The first step is the JIT's native-to-IL map, which the DAC answers for a method instance
(IXCLRDataMethodInstance::GetILOffsetsByAddress). The second is the module's portable PDB:
the nearest visible sequence point at or before the IL offset. The PDB comes from, in order:
the assembly itself (an EmbeddedPortablePdb debug entry), the directory of the module's file,
the directories given with ``setsymbolserver -directory`` / ``--symbols`` (flat, or in the
symbol-server layout ``name.pdb/<guid><stamp>FFFF/name.pdb``). The build-time path the CodeView
entry records (obj/...) is not tried: what is found must not depend on which machine analyzes a
core. Only local files are read, never the network. A PDB counts only when
its id (GUID and stamp) equals the one in the assembly's CodeView entry.

A return address (every frame but an active leaf) points after its call instruction, often
at the next statement's first instruction, so it is looked up one byte earlier.
"""
from __future__ import annotations

import os
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

from ...readers.records import IL_OFFSET_EPILOG, IL_OFFSET_NO_MAPPING, IL_OFFSET_PROLOG
from ...errors import ReaderUnsupported, SosError
from ...formats.metadata.errors import MetadataError
from ...formats.metadata.pdb import CodeViewInfo, PortablePdb, SourceLocation, codeview, debug_directory, embedded_pdb

if TYPE_CHECKING:
    from ..typesystem.modules import ClrModule
    from ..runtime import ClrRuntime

__all__ = ["SourceLines", "SourceLocation", "PdbLookup", "set_symbol_directories", "symbol_directories"]

_MAX_PDB_FILE = 512 << 20
_symbol_directories: list[str] = []


def set_symbol_directories(directories: Sequence[str]) -> None:
    """Local directories searched for PDBs (``setsymbolserver -directory``); replaces the list."""
    dirs = [os.path.abspath(os.path.expanduser(d)) for d in directories]
    for d in dirs:
        if not os.path.isdir(d):
            raise SosError(f"not a directory: {d}")
    _symbol_directories[:] = dirs


def add_symbol_directory(directory: str) -> str:
    d = os.path.abspath(os.path.expanduser(directory))
    if not os.path.isdir(d):
        raise SosError(f"not a directory: {d}")
    if d not in _symbol_directories:
        _symbol_directories.append(d)
    return d


def symbol_directories() -> tuple[str, ...]:
    return tuple(_symbol_directories)


@dataclass(frozen=True, slots=True)
class PdbLookup:
    """The outcome of looking for one module's PDB."""

    module: int
    module_name: str
    pdb: PortablePdb | None
    source: str  # "embedded", or the file the PDB came from; "" when none was found
    reason: str = ""  # why there is none: "no debug directory", "no matching PDB found" ...


_caches: "weakref.WeakKeyDictionary[object, dict]" = weakref.WeakKeyDictionary()


class SourceLines:
    """Source locations of code addresses in one runtime. PDBs are cached for the runtime's
    life (a loaded module never changes); the lookups per address per target generation."""

    def __init__(self, runtime: "ClrRuntime") -> None:
        self.runtime = runtime
        self._pdbs: dict[tuple[int, tuple[str, ...]], PdbLookup] = _caches.setdefault(runtime, {})

    # -- IL offsets ------------------------------------------------------------------------

    def il_offset(self, ip: int, *, return_address: bool = True) -> int | None:
        """The IL offset native ``ip`` belongs to (``return_address``: the call just before it)."""
        addr = ip - 1 if return_address and ip else ip
        self.runtime.refresh()
        offsets = self.runtime.reader.il_offsets(addr)
        if not offsets:
            return None
        for off in offsets:
            if off == IL_OFFSET_PROLOG:
                return 0
            if off not in (IL_OFFSET_NO_MAPPING, IL_OFFSET_EPILOG):
                return off
        # An epilog stands, as in SOS (GetLastMethodIlOffset), for the method's last IL offset.
        return self._last_il_offset(addr) if IL_OFFSET_EPILOG in offsets else None

    def _last_il_offset(self, ip: int) -> int | None:
        """The highest IL offset the JIT's map of the code at ``ip`` names (0 when none does)."""
        try:
            return self.runtime.reader.last_il_offset(ip)
        except ReaderUnsupported:
            return None

    # -- PDBs --------------------------------------------------------------------------------

    def pdb(self, module: int) -> PdbLookup:
        key = (module, symbol_directories())
        found = self._pdbs.get(key)
        if found is None:
            found = self._find_pdb(module)
            self._pdbs[key] = found
        return found

    def codeview(self, address: int) -> CodeViewInfo | None:
        """The CodeView entry of module ``address``'s image (the PDB it names: GUID, age, path)."""
        mod = self.runtime.catalog.module(address)
        if mod is None or mod.is_dynamic:  # a module loaded from bytes has its image in the target
            return None
        try:
            entries = self._debug_entries(mod)
        except MetadataError:
            return None
        return codeview(entries) if entries is not None else None

    def _find_pdb(self, address: int) -> PdbLookup:
        mod = self.runtime.catalog.module(address)
        if mod is None:
            return PdbLookup(address, "", None, "", "module unreadable")
        name = mod.file_name or f"{address:016x}"
        if mod.is_dynamic or not mod.path:
            return PdbLookup(address, name, None, "", "dynamic module")
        try:
            entries = self._debug_entries(mod)
        except MetadataError as e:
            return PdbLookup(address, name, None, "", f"bad PE debug directory: {e}")
        if entries is None:
            return PdbLookup(address, name, None, "", "image unreadable")
        cv = codeview(entries)
        if cv is None:
            return PdbLookup(address, name, None, "", "no CodeView entry")
        try:
            blob = embedded_pdb(entries)
            if blob is not None:
                pdb = PortablePdb(blob)
                if pdb.id == cv.pdb_id:
                    return PdbLookup(address, name, pdb, "embedded")
        except MetadataError:
            pass  # a corrupt embedded PDB: a file may still match
        mismatched = False
        for path in self._candidates(mod, cv):
            try:
                with open(path, "rb") as f:
                    data = f.read(_MAX_PDB_FILE)
                pdb = PortablePdb(data)
            except (OSError, MetadataError):
                continue
            if pdb.id == cv.pdb_id:
                return PdbLookup(address, name, pdb, path)
            mismatched = True
        why = "only PDBs of another build were found" if mismatched else "no matching PDB found"
        return PdbLookup(address, name, None, "", why)

    def _debug_entries(self, mod: "ClrModule") -> list | None:
        """The debug directory, from the module file on disk or else from the image in the target."""
        local = self.runtime.catalog.local_file(mod.path) if mod.path else None
        if local is not None:
            try:
                with open(local, "rb") as f:
                    image = f.read()
                return debug_directory(lambda off, n: image[off : off + n], mapped=False)
            except (OSError, MetadataError):
                pass
        base = mod.image_base
        if not base:
            return None
        target = self.runtime.target

        def read(off: int, n: int) -> bytes:
            try:
                return bytes(target.read_partial(base + off, n))
            except SosError:
                return b""

        # The runtime maps an image flat or section by section; try the loader's layout first.
        errors: list[MetadataError] = []
        for mapped in (True, False):
            try:
                entries = debug_directory(read, mapped)
                if codeview(entries) is not None:
                    return entries
            except MetadataError as e:
                errors.append(e)
        if errors:
            raise errors[0]
        return []

    @staticmethod
    def _candidates(mod: "ClrModule", cv: CodeViewInfo) -> list[str]:
        pdb_name = os.path.basename(cv.path.replace("\\", "/")) or os.path.splitext(mod.file_name)[0] + ".pdb"
        stem_name = os.path.splitext(mod.file_name)[0] + ".pdb"
        names = list(dict.fromkeys((pdb_name, stem_name)))
        key = f"{cv.guid.hex.upper()}{cv.stamp:08X}FFFF"
        out = [os.path.join(os.path.dirname(mod.path), n) for n in names]
        for d in symbol_directories():
            for n in names:
                out.append(os.path.join(d, n))
                out.append(os.path.join(d, n.lower(), key, n.lower()))
                out.append(os.path.join(d, n, key, n))
        return [p for p in dict.fromkeys(out) if os.path.isfile(p)]

    # -- addresses -> source ------------------------------------------------------------------

    def location(self, ip: int, method_desc: int = 0, *, return_address: bool = True,
                 missing: Callable[[PdbLookup], None] | None = None) -> SourceLocation | None:
        """Source file and line of code address ``ip`` (in ``method_desc`` if known); None when
        the JIT's map or the PDB cannot tell. ``missing`` hears about a module without a PDB."""
        dac = self.runtime.reader
        try:
            if not method_desc:
                method_desc = dac.method_desc_from_ip(ip) or 0
            if not method_desc:
                return None
            module_token = dac.method_module_token(method_desc)
        except ReaderUnsupported:
            return None
        if module_token is None:
            return None
        module, token = module_token
        lookup = self.pdb(module)
        if lookup.pdb is None:
            if missing is not None:
                missing(lookup)
            return None
        il = self.il_offset(ip, return_address=return_address)
        if il is None:
            return None
        try:
            return lookup.pdb.source_location(token, il)
        except MetadataError:
            return None


def source_lines(runtime: "ClrRuntime") -> SourceLines:
    return runtime.cache("sourcelines", lambda: SourceLines(runtime))
