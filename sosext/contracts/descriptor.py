"""The runtime's own description of itself: the ``DotNetRuntimeContractDescriptor`` export.

.NET 9 and later build into libcoreclr.so a record that says which data contracts the runtime
satisfies and where the fields and globals those contracts read are (dotnet/runtime
``docs/design/datacontracts/contract-descriptor.md`` and ``data_descriptor.md``). In target
memory, at the export's address::

    u64    magic               "DNCCDAC\\0" (little endian: 0x0043414443434e44)
    u32    flags               bit 0 always set; bit 1 set: a 32-bit target
    u32    descriptor_size     bytes of the JSON text
    ptr    descriptor          UTF-8 JSON (the "compact" physical format)
    u32    pointer_data_count  slots of the auxiliary array
    u32    (padding)
    ptr    pointer_data        pointer-size values, the targets of indirect globals

The JSON is ``{"version": 0, "baseline": ..., "types": {T: {"!": size, field: offset |
[offset, type]}}, "globals": {g: value | [value, type]}, "contracts": {name: version}}``
where a value is a number or a string holding a decimal or ``0x`` hex integer (or, typed
``string``, a text such as the architecture), and ``[[i], type]`` / ``[i]`` names slot ``i``
of ``pointer_data`` (an address known only when the process runs). Later runtimes add
``subDescriptors`` ({name: global-like value}): the address of a pointer to another
descriptor of the same shape (the GC's own, when the GC describes itself); they are merged in.

Everything here comes from an untrusted core: every size and count is bounded before it is
read, the JSON's shape is checked before use, and any damage is one ``ContractError`` line.
The baseline named by the JSON is not applied: the runtimes shipped so far (9, 10) name the
empty baseline and put every type and global in memory.
"""
from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field

from ..errors import ContractError, SosError
from ..targets.base import Module, Target
from ..targets.elfsymbols import exported_symbol, file_build_id

DESCRIPTOR_SYMBOL = "DotNetRuntimeContractDescriptor"
MAGIC = 0x0043414443434E44  # "DNCCDAC\0" read as a little-endian u64

# Bounds on what a (possibly hostile) core may make us read and parse. The .NET 10 descriptor
# is ~11 KB of JSON with 24 pointer slots; these leave room for a hundredfold growth.
MAX_JSON = 4 << 20
MAX_POINTER_DATA = 1 << 16
MAX_TYPES = 10_000
MAX_FIELDS = 10_000
MAX_GLOBALS = 100_000
MAX_CONTRACTS = 10_000
MAX_SUB_DEPTH = 2


@dataclass(slots=True)
class ContractDescriptor:
    """The merged logical descriptor of one runtime: types, globals, contracts.

    ``types`` maps a type name to (size or None, {field: offset}); ``globals`` maps a name to
    its resolved value (an int, or a str for ``string`` globals)."""

    pointer_size: int
    contracts: dict[str, int] = field(default_factory=dict)
    types: dict[str, tuple[int | None, dict[str, int]]] = field(default_factory=dict)
    globals: dict[str, int | str] = field(default_factory=dict)
    address: int = 0  # where the descriptor record is in the target
    sub_descriptors: tuple[str, ...] = ()  # names of the merged sub-descriptors ("GC" ...)

    def has_type(self, name: str) -> bool:
        return name in self.types

    def type_size(self, name: str) -> int | None:
        """The type's size in bytes; None when the type is absent or of indeterminate size."""
        entry = self.types.get(name)
        return entry[0] if entry is not None else None

    def has_field(self, type_name: str, field_name: str) -> bool:
        entry = self.types.get(type_name)
        return entry is not None and field_name in entry[1]

    def field_offset(self, type_name: str, field_name: str) -> int:
        entry = self.types.get(type_name)
        if entry is None:
            raise ContractError(f"the runtime's data descriptor has no type {type_name}")
        try:
            return entry[1][field_name]
        except KeyError:
            raise ContractError(f"the runtime's data descriptor has no field {type_name}.{field_name}") from None

    def has_global(self, name: str) -> bool:
        return isinstance(self.globals.get(name), int)

    def global_value(self, name: str) -> int:
        value = self.globals.get(name)
        if not isinstance(value, int):
            raise ContractError(f"the runtime's data descriptor has no global {name}")
        return value

    def global_string(self, name: str) -> str | None:
        """A ``string`` global ("Architecture": "x64", "RID" ...), None when absent."""
        value = self.globals.get(name)
        return value if isinstance(value, str) else None

    def contract_version(self, name: str) -> int | None:
        return self.contracts.get(name)


# --- finding the export ---------------------------------------------------------------------

def export_address(target: Target, runtime: Module, name: str) -> int | None:
    """The target address of ``runtime``'s exported symbol ``name`` (None: not exported).

    The symbol table is read from the runtime's file on this machine (by the path the target
    mapped it from), which must be the target's build: with both build ids known and
    different, the file's offsets mean nothing for the target and we refuse."""
    path = runtime.path
    if not os.path.isfile(path):
        raise ContractError(f"cannot read the runtime's symbols: {_escaped(path)} is not on this machine")
    if runtime.build_id:
        have = file_build_id(path)
        if have is not None and have != runtime.build_id:
            raise ContractError(f"{_escaped(path)} is not the target's runtime build "
                                f"(build id {have.hex()}, the target's {runtime.build_id.hex()})")
    found = exported_symbol(path, name)
    if found is None:
        return None
    value, first_vaddr = found
    return runtime.base - (first_vaddr & ~0xFFF) + value


class ImageBackedMemory:
    """Target memory, with the runtime module's own pages rebuilt from its file where the dump
    left them out (a heap dump keeps what the DAC reads, not the descriptor's ``.data`` page
    nor its JSON in ``.rodata``): see targets/elfimage.py. The file is the target's build
    (``export_address`` checked its build id)."""

    def __init__(self, target: Target, runtime: Module) -> None:
        self.target = target
        self.pointer_size = target.pointer_size
        self.runtime = runtime
        self._image = None
        self._image_checked = False

    def read(self, address: int, size: int) -> bytes:
        try:
            return bytes(self.target.read(address, size))
        except SosError:
            if not self._image_checked:
                from ..targets.elfimage import file_image
                self._image_checked = True
                self._image = file_image(self.runtime.path)
            data = self._image.read(self.runtime.base, address, size) if self._image is not None else None
            if data is None:
                raise
            return data


def _escaped(text: str) -> str:
    return text.encode("unicode_escape", "backslashreplace").decode("ascii")


# --- reading and parsing ----------------------------------------------------------------------

def read_descriptor(target: Target, runtime: Module) -> ContractDescriptor:
    """The contract descriptor of the runtime module ``runtime`` (libcoreclr.so) in ``target``.

    Raises ContractError (one line) when the runtime exports none (.NET 8 and older) or the
    record is damaged."""
    address = export_address(target, runtime, DESCRIPTOR_SYMBOL)
    if address is None:
        raise ContractError("the runtime has no contract descriptor (DotNetRuntimeContractDescriptor: "
                            ".NET 9 and later export one)")
    return read_descriptor_at(ImageBackedMemory(target, runtime), address)  # type: ignore[arg-type]


def read_descriptor_at(target: Target, address: int, depth: int = 0) -> ContractDescriptor:
    """The descriptor record at ``address`` (and the sub-descriptors it names)."""
    ps = target.pointer_size
    header = _read(target, address, 16 + 2 * ps + 8, "the contract descriptor")
    magic, flags, json_size = struct.unpack_from("<QII", header, 0)
    if magic != MAGIC:
        raise ContractError(f"no contract descriptor at {address:#x} (bad magic {magic:#x})")
    if not flags & 1:
        raise ContractError(f"contract descriptor at {address:#x}: flags {flags:#x} lack bit 0")
    described_ps = 4 if flags & 2 else 8
    if described_ps != ps:
        raise ContractError(f"contract descriptor at {address:#x} is for {described_ps * 8}-bit pointers, "
                            f"the target has {ps * 8}-bit")
    pfmt = "<Q" if ps == 8 else "<I"
    json_ptr, = struct.unpack_from(pfmt, header, 16)
    count_at = 16 + ps
    pointer_count, = struct.unpack_from("<I", header, count_at)
    data_at = (count_at + 8 + ps - 1) & ~(ps - 1)
    if len(header) < data_at + ps:
        header += _read(target, address + len(header), data_at + ps - len(header), "the contract descriptor")
    pointer_data_ptr, = struct.unpack_from(pfmt, header, data_at)
    if not 0 < json_size <= MAX_JSON:
        raise ContractError(f"contract descriptor at {address:#x}: JSON size {json_size} out of bounds")
    if pointer_count > MAX_POINTER_DATA:
        raise ContractError(f"contract descriptor at {address:#x}: {pointer_count} pointer slots (too many)")
    text = _read(target, json_ptr, json_size, "the contract descriptor's JSON")
    pointer_data: tuple[int, ...] = ()
    if pointer_count:
        raw = _read(target, pointer_data_ptr, pointer_count * ps, "the contract descriptor's pointer data")
        pointer_data = struct.unpack(f"<{pointer_count}{pfmt[1]}", raw)
    doc = _load_json(text)
    desc = ContractDescriptor(pointer_size=ps, address=address)
    _merge(desc, doc, pointer_data)
    _merge_sub_descriptors(target, desc, doc, pointer_data, depth)
    return desc


def _esc(text: str) -> str:
    """A name from the target's JSON as it may appear in a one-line error: escapes, not controls."""
    return text.encode("unicode_escape").decode("ascii")


def _read(target: Target, address: int, size: int, what: str) -> bytes:
    if address <= 0 or address + size > (1 << (8 * target.pointer_size)):
        raise ContractError(f"{_esc(what)} is at a bad address ({address:#x})")
    try:
        return bytes(target.read(address, size))
    except SosError as e:
        raise ContractError(f"cannot read {_esc(what)} ({size} bytes at {address:#x}): the dump lacks it") from e


def _load_json(text: bytes) -> dict:
    try:
        doc = json.loads(text.rstrip(b"\0").decode("utf-8"))
    except (ValueError, RecursionError, UnicodeDecodeError) as e:
        raise ContractError(f"the contract descriptor's JSON is damaged ({type(e).__name__})") from None
    if not isinstance(doc, dict):
        raise ContractError("the contract descriptor's JSON is not an object")
    return doc


def parse_descriptor_json(text: bytes, pointer_data: tuple[int, ...] = (), pointer_size: int = 8) -> ContractDescriptor:
    """The descriptor of one JSON text (compact format), its indirect globals resolved from
    ``pointer_data``. Sub-descriptors are left to the caller (they need target reads)."""
    doc = _load_json(text)
    desc = ContractDescriptor(pointer_size=pointer_size)
    _merge(desc, doc, pointer_data)
    return desc


def _merge(desc: ContractDescriptor, doc: dict, pointer_data: tuple[int, ...]) -> None:
    types = _mapping(doc.get("types", {}), "types", MAX_TYPES)
    for name, fields in types.items():
        fields = _mapping(fields, f"type {name}", MAX_FIELDS)
        size, offsets = desc.types.get(name, (None, {}))
        offsets = dict(offsets)
        for fname, spec in fields.items():
            if fname == "!":
                size = _integer(spec, f"size of {name}")
                continue
            if isinstance(spec, list) and len(spec) == 2 and isinstance(spec[1], str):
                spec = spec[0]
            offsets[fname] = _integer(spec, f"offset of {name}.{fname}")
        desc.types[name] = (size, offsets)

    for name, spec in _mapping(doc.get("globals", {}), "globals", MAX_GLOBALS).items():
        desc.globals[name] = _global(spec, name, pointer_data)

    for name, version in _mapping(doc.get("contracts", {}), "contracts", MAX_CONTRACTS).items():
        desc.contracts[name] = _integer(version, f"version of contract {name}")


def _mapping(value: object, what: str, limit: int) -> dict:
    if not isinstance(value, dict):
        raise ContractError(f"the contract descriptor's {_esc(what)} is not an object")
    if len(value) > limit:
        raise ContractError(f"the contract descriptor's {_esc(what)} has {len(value)} entries (too many)")
    return value


def _integer(value: object, what: str) -> int:
    """A JSON number, or a string holding a decimal or 0x-hex integer (data_descriptor.md)."""
    if isinstance(value, bool):
        raise ContractError(f"the contract descriptor's {_esc(what)} is not an integer")
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and 0 < len(value) <= 24:
        try:
            number = int(value, 0)
        except ValueError:
            raise ContractError(f"the contract descriptor's {_esc(what)} is not an integer") from None
    else:
        raise ContractError(f"the contract descriptor's {_esc(what)} is not an integer")
    if not -(1 << 63) <= number < (1 << 64):
        raise ContractError(f"the contract descriptor's {_esc(what)} is out of range")
    return number


def _global(spec: object, name: str, pointer_data: tuple[int, ...]) -> int | str:
    kind = None
    if isinstance(spec, list) and len(spec) == 2 and isinstance(spec[1], str):
        spec, kind = spec  # [value, type]
    if isinstance(spec, list) and len(spec) == 1:  # [index]: a slot of the pointer data
        index = _integer(spec[0], f"index of global {name}")
        if not 0 <= index < len(pointer_data):
            raise ContractError(f"the contract descriptor's global {_esc(name)} names pointer slot {index} "
                                f"of {len(pointer_data)}")
        return pointer_data[index]
    if kind == "string":
        if not isinstance(spec, str) or len(spec) > 256:
            raise ContractError(f"the contract descriptor's global {_esc(name)} is not a short string")
        return spec
    return _integer(spec, f"global {name}")


def _merge_sub_descriptors(target: Target, desc: ContractDescriptor, doc: dict,
                           pointer_data: tuple[int, ...], depth: int) -> None:
    """Merge every ``subDescriptors`` entry: the address of a pointer to a descriptor record
    (null when that part of the runtime does not describe itself, e.g. no GC loaded yet)."""
    subs = doc.get("subDescriptors")
    if subs is None:
        return
    names = []
    for name, spec in _mapping(subs, "subDescriptors", 64).items():
        where = _global(spec, f"subDescriptors.{name}", pointer_data)
        if not isinstance(where, int) or where == 0:
            continue
        if depth >= MAX_SUB_DEPTH:
            raise ContractError("the contract descriptor nests sub-descriptors too deeply")
        record = int.from_bytes(_read(target, where, target.pointer_size, f"sub-descriptor {name}"), "little")
        if record == 0:
            continue
        sub = read_descriptor_at(target, record, depth + 1)
        for tname, (size, offsets) in sub.types.items():
            old_size, old = desc.types.get(tname, (None, {}))
            desc.types[tname] = (size if size is not None else old_size, {**old, **offsets})
        desc.globals.update(sub.globals)
        desc.contracts.update(sub.contracts)
        names.append(name)
        names.extend(f"{name}.{n}" for n in sub.sub_descriptors)
    desc.sub_descriptors = tuple(names)
