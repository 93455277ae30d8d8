"""Contract EcmaMetadata: where a module's ECMA-335 metadata lies in the target.

dotnet/runtime ``docs/design/datacontracts/EcmaMetadata.md`` (version 1): ``Module.Base`` is
the loaded PE image; its CLI header (data directory 14) gives the metadata's RVA and size.
An image may lie in memory as mapped (an RVA is an offset from the base) or as the flat file
(an RVA goes through the section table): bit 0 of the module's ``PEImageLayout.Flags``
(reached through ``Module.PEAssembly``, ``PEAssembly.PEImage``, ``PEImage.LoadedImageLayout``)
says it is mapped, as the Loader contract's ``GetILAddr`` reads it. IL-only assemblies are
opened flat on Linux, ReadyToRun ones mapped. A reflection-emit module keeps a saved copy behind
``Module.DynamicMetadata`` (``DynamicMetadata.Size``, ``.Data``). The blob is parsed by
sosext's own reader (``clr/metadata``), which bounds every table and heap.
"""
from __future__ import annotations

import struct

from ..errors import ContractError, SosError
from ..formats.metadata import MetadataReader
from .targetdata import TargetData

_PE_HEADER_PROBE = 0x400
_CLI_DIRECTORY = 14
_LAYOUT_MAPPED = 0x1
_MAX_SECTIONS = 96
MAX_METADATA = 256 << 20  # a metadata blob larger than this is damage


class EcmaMetadata:
    def __init__(self, data: TargetData) -> None:
        self.data = data
        self._readers: dict[int, MetadataReader | None] = {}

    def _is_mapped(self, module: int) -> bool:
        d = self.data
        pe_assembly = d.field_pointer(module, "Module", "PEAssembly")
        image = d.field_pointer(pe_assembly, "PEAssembly", "PEImage") if pe_assembly else 0
        layout = d.field_pointer(image, "PEImage", "LoadedImageLayout") if image else 0
        if not layout:
            return True
        return bool(d.field_u32(layout, "PEImageLayout", "Flags") & _LAYOUT_MAPPED)

    def image_range(self, module: int) -> tuple[int, int]:
        """(base, size) of the module's loaded image layout; (0, 0) without one."""
        d = self.data
        pe_assembly = d.field_pointer(module, "Module", "PEAssembly")
        image = d.field_pointer(pe_assembly, "PEAssembly", "PEImage") if pe_assembly else 0
        layout = d.field_pointer(image, "PEImage", "LoadedImageLayout") if image else 0
        if not layout:
            return 0, 0
        return d.field_pointer(layout, "PEImageLayout", "Base"), d.field_u32(layout, "PEImageLayout", "Size")

    def rva_to_address(self, module: int, rva: int) -> int:
        """Where ``rva`` of the module's image is in the target (0: no image)."""
        base, head, sections = self._image(module)
        if not base:
            return 0
        if sections is None:
            return base + rva
        for va, vsize, raw_size, raw_ptr in sections:
            if va <= rva < va + max(vsize, raw_size):
                return base + raw_ptr + (rva - va)
        raise ContractError(f"module {module:#x}: RVA {rva:#x} is in no section")

    def _image(self, module: int) -> tuple[int, bytes, list[tuple[int, int, int, int]] | None]:
        """(base, PE headers, sections when the image is flat else None)."""
        d = self.data
        base = d.field_pointer(module, "Module", "Base")
        if not base:
            return 0, b"", None
        head = bytes(d.target.read_partial(base, _PE_HEADER_PROBE))
        if len(head) < 0x40 or head[:2] != b"MZ":
            raise ContractError(f"module {module:#x}: no PE image at {base:#x}")
        (pe,) = struct.unpack_from("<I", head, 0x3C)
        if pe + 0x18 + 2 > len(head) or head[pe:pe + 4] != b"PE\0\0":
            raise ContractError(f"module {module:#x}: bad PE header at {base:#x}")
        if self._is_mapped(module):
            return base, head, None
        count, opt_size = struct.unpack_from("<H", head, pe + 6)[0], struct.unpack_from("<H", head, pe + 20)[0]
        first = pe + 0x18 + opt_size
        if count > _MAX_SECTIONS or first + 40 * count > len(head):
            raise ContractError(f"module {module:#x}: bad section table")
        sections = [struct.unpack_from("<IIII", head, first + 40 * i + 8) for i in range(count)]
        return base, head, [(va, vs, rs, rp) for vs, va, rs, rp in sections]

    def read_only_metadata(self, module: int) -> tuple[int, int]:
        """(address, size) of the module's metadata in its loaded image; (0, 0) without one."""
        d = self.data
        base, head, _ = self._image(module)
        if not base:
            return 0, 0
        (pe,) = struct.unpack_from("<I", head, 0x3C)
        opt = pe + 0x18
        (magic,) = struct.unpack_from("<H", head, opt)
        entry = opt + (0x70 if magic == 0x20B else 0x60) + 8 * _CLI_DIRECTORY
        if entry + 8 > len(head):
            raise ContractError(f"module {module:#x}: PE header too short")
        cli_rva, _ = struct.unpack_from("<II", head, entry)
        if not cli_rva:
            return 0, 0
        md_rva, md_size = struct.unpack("<II", d.read(self.rva_to_address(module, cli_rva) + 8, 8))
        if not md_rva or not 16 <= md_size <= MAX_METADATA:
            return 0, 0
        return self.rva_to_address(module, md_rva), md_size

    def _saved_dynamic(self, module: int) -> tuple[int, int]:
        d = self.data
        dyn = d.field_pointer(module, "Module", "DynamicMetadata")
        if not dyn:
            return 0, 0
        size = d.field_u32(dyn, "DynamicMetadata", "Size")
        if size > MAX_METADATA:
            raise ContractError(f"module {module:#x}: dynamic metadata of {size} bytes")
        return dyn + d.offset("DynamicMetadata", "Data"), size

    def metadata(self, module: int) -> MetadataReader | None:
        """The module's metadata reader (cached), or None when it has none we can read."""
        if module in self._readers:
            return self._readers[module]
        reader = None
        try:
            address, size = self._saved_dynamic(module)
            if not address:
                address, size = self.read_only_metadata(module)
            if address and size:
                reader = MetadataReader(self.data.read(address, size))
        except SosError:
            reader = None
        self._readers[module] = reader
        return reader
