"""The object walk and per-type statistics.

A segment's objects lie back to back: each starts with its MethodTable pointer, and its
size is the type's base size plus, for arrays and strings, the element count (the u32 at
offset 8) times the component size, rounded up to 8. The walk looks each header word up
in an open-addressing table of the MethodTables met so far (``MethodTableTable``) and
records the object's address, type id and size. A header it does not know stops the
kernel so that Python can ask the DAC about it and start the kernel again at that word.
"""
from __future__ import annotations

import numpy as np

from .registry import kernel

# Kernel return codes
DONE = 0  # reached ``stop``
FULL = 1  # the output arrays are full
UNKNOWN = 2  # a header word not in the table: learn it, then call again at the same word
INVALID = 3  # a header word known not to be a MethodTable, or an object cut off by the end

MIN_OBJECT_SIZE = 24
SIZE_OVERFLOW = 0xFFFFFFFF  # a size that does not fit in u32: the index keeps it aside
_LOW3 = np.uint64(0xFFFFFFFFFFFFFFF8)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@kernel("(i8,i8,i8)", "u8[]r", "i8", "i8", "u8", "u8[]r", "i4[]r", "u8[]r", "u8[]r", "u8[]", "u4[]", "u4[]", "i8")
def walk(words: np.ndarray, first: int, stop: int, base_address: np.uint64,
         keys: np.ndarray, values: np.ndarray, base_sizes: np.ndarray, component_sizes: np.ndarray,
         out_address: np.ndarray, out_type: np.ndarray, out_size: np.ndarray, n: int):
    """Walk objects from word ``first`` while their start is below word ``stop``.

    Appends each object at output position ``n`` onwards. Returns (word reached, objects
    written so far, one of DONE/FULL/UNKNOWN/INVALID).
    """
    cap = out_address.size
    count = words.size
    mask = keys.size - 1
    i = first
    while i < stop:
        if n >= cap:
            return i, n, FULL
        w = words[i] & _LOW3
        slot = np.int64((w * _GOLDEN) >> np.uint64(40)) & mask
        while True:
            k = keys[slot]
            if k == w or k == 0:
                break
            slot = (slot + 1) & mask
        if keys[slot] == 0 or w == 0:
            return i, n, UNKNOWN
        t = values[slot]
        if t < 0:
            return i, n, INVALID
        size = np.uint64(base_sizes[t])
        comp = np.uint64(component_sizes[t])
        if comp != 0:
            if i + 1 >= count:
                return i, n, INVALID
            size += comp * (words[i + 1] & np.uint64(0xFFFFFFFF))
        out_address[n] = base_address + np.uint64(i) * np.uint64(8)
        out_type[n] = t
        sos = size if size >= MIN_OBJECT_SIZE else np.uint64(MIN_OBJECT_SIZE)
        out_size[n] = sos if sos < SIZE_OVERFLOW else SIZE_OVERFLOW
        n += 1
        i += np.int64((size + np.uint64(7)) >> np.uint64(3))
    return i, n, DONE


@kernel("(i8[],i8[],i8[])", "u4[]r", "u4[]r", "b1[]r", "i8")
def type_stats(type_ids: np.ndarray, sizes: np.ndarray, mask: np.ndarray, ntypes: int):
    """(count, total size, first position) per type id, over the objects ``mask`` keeps
    (an empty mask keeps all). First positions order ties as the walk met them."""
    counts = np.zeros(ntypes, dtype=np.int64)
    totals = np.zeros(ntypes, dtype=np.int64)
    first = np.full(ntypes, -1, dtype=np.int64)
    use_mask = mask.size != 0
    for i in range(type_ids.size):
        if use_mask and not mask[i]:
            continue
        t = type_ids[i]
        if first[t] < 0:
            first[t] = i
        counts[t] += 1
        totals[t] += sizes[i]
    return counts, totals, first


@kernel("void", "u4[]", "u4[]r")
def remap(type_ids: np.ndarray, mapping: np.ndarray) -> None:
    """type_ids[i] = mapping[type_ids[i]], in place."""
    for i in range(type_ids.size):
        type_ids[i] = mapping[type_ids[i]]


@kernel("b1", "u8[]r", "u4[]r", "i8")
def check_index(addresses: np.ndarray, type_ids: np.ndarray, ntypes: int) -> bool:
    """An index read back from disk: ascending addresses and type ids in range."""
    prev = np.uint64(0)
    for i in range(addresses.size):
        a = addresses[i]
        if a <= prev and i > 0:
            return False
        prev = a
        if type_ids[i] >= ntypes:
            return False
    return True


@kernel("i8[]", "u8[]r", "u4[]r", "u4[]r", "b1[]r", "i8", "i8")
def free_blocks(addresses: np.ndarray, type_ids: np.ndarray, sizes: np.ndarray, mask: np.ndarray,
                free_id: int, min_size: int) -> np.ndarray:
    """Positions of Free objects of at least ``min_size`` bytes directly followed by a
    kept object that is not Free (dumpheap's fragmentation list); ``mask`` as in type_stats."""
    out = []
    prev = -1
    use_mask = mask.size != 0
    for i in range(type_ids.size):
        if use_mask and not mask[i]:
            continue
        if prev >= 0 and type_ids[prev] == free_id and sizes[prev] >= min_size and type_ids[i] != free_id:
            if addresses[prev] + ((np.uint64(sizes[prev]) + np.uint64(7)) & np.uint64(0xFFFFFFFFFFFFFFF8)) == addresses[i]:
                out.append(prev)
        prev = i
    result = np.empty(len(out), dtype=np.int64)
    for k in range(len(out)):
        result[k] = out[k]
    return result


# -- without numba: the same answers with numpy, still vectorised ---------------------------

def _type_stats_numpy(type_ids, sizes, mask, ntypes):
    ids = type_ids if mask.size == 0 else type_ids[mask]
    positions = np.arange(len(type_ids), dtype=np.int64) if mask.size == 0 else np.nonzero(mask)[0]
    counts = np.bincount(ids, minlength=ntypes).astype(np.int64)
    # float64 sums are exact below 2**53 bytes (8 PiB): far beyond any heap.
    totals = np.bincount(ids, weights=(sizes if mask.size == 0 else sizes[mask]).astype(np.float64),
                         minlength=ntypes).astype(np.int64)
    first = np.full(ntypes, -1, dtype=np.int64)
    first[ids[::-1]] = positions[::-1]  # repeated indices: the last assignment (the first object) wins
    return counts, totals, first


def _free_blocks_numpy(addresses, type_ids, sizes, mask, free_id, min_size):
    sel = np.arange(len(type_ids), dtype=np.int64) if mask.size == 0 else np.nonzero(mask)[0]
    if len(sel) < 2:
        return np.empty(0, dtype=np.int64)
    t = type_ids[sel]
    cand = (t[:-1] == free_id) & (sizes[sel[:-1]] >= min_size) & (t[1:] != free_id)
    prev, nxt = sel[:-1][cand], sel[1:][cand]
    ends = addresses[prev] + ((sizes[prev].astype(np.uint64) + np.uint64(7)) & np.uint64(0xFFFFFFFFFFFFFFF8))
    return prev[ends == addresses[nxt]]


NUMPY_FORMS = {"type_stats": _type_stats_numpy, "free_blocks": _free_blocks_numpy}
