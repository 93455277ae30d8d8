"""The object walk over one contiguous range of heap memory.

Objects in a segment lie back to back: each begins with its MethodTable pointer, and its
size follows from the MethodTable's base and component sizes (plus the element count at
offset 8 for arrays and strings). The hot loop below therefore touches one word per
object (two for arrays), looks the word up in a dict of sizes, and records only the
object's word index; MethodTables and sizes are recovered afterwards in bulk with numpy.
"""
from __future__ import annotations

from array import array
from dataclasses import dataclass
from typing import Callable

import numpy as np

# resolve(raw MethodTable word) -> (base size, component size) in bytes, or None if invalid
Resolver = Callable[[int], "tuple[int, int] | None"]


@dataclass(slots=True)
class WalkError:
    address: int
    method_table: int
    reason: str
    resumed_at: int = 0  # where the walk found objects again after it (0: at the next segment)


class SizeTable:
    """Per-MethodTable sizes in the two shapes the hot loop wants.

    ``fixed`` maps a raw header word to the object size in words; ``varying`` maps it to
    (base size, component size) in bytes. Keys are raw words so that a mark bit, if a dump
    caught one, is resolved once (as its own key) rather than masked on every object.
    """

    __slots__ = ("fixed", "varying", "resolve")

    def __init__(self, resolve: Resolver) -> None:
        self.fixed: dict[int, int] = {}
        self.varying: dict[int, tuple[int, int]] = {}
        self.resolve = resolve

    def learn(self, word: int) -> bool:
        info = self.resolve(word & ~7)
        if info is None:
            return False
        base, comp = info
        if comp:
            self.varying[word] = (base + 7, comp)  # +7 folds the alignment round-up in
        else:
            self.fixed[word] = (base + 7) >> 3
        return True


_RUN_TRIGGER = 16  # consecutive same-type objects before trying the block skip
_RUN_BLOCK = 512


def _run_length(wn: np.ndarray, i: int, s: int, w: int, stop: int) -> int:
    """How many objects of size ``s`` words with header ``w`` follow at word ``i`` (before ``stop``).

    Exact: if the object at i has MethodTable w and size s, the next object starts at i+s, so
    equal header words at every s-th word are consecutive objects of that type.
    """
    total = 0
    wv = np.uint64(w)
    while True:
        limit = min(i + _RUN_BLOCK * s, stop)
        if limit <= i:
            return total
        eq = wn[i:limit:s] == wv
        if eq.all():
            k = len(eq)
        else:
            k = int(eq.argmin())
        total += k
        i += k * s
        if k < _RUN_BLOCK:
            return total


def walk_words(words: memoryview, first: int, stop: int, sizes: SizeTable,
               out: array) -> tuple[int, int | None]:
    """Walk objects from word ``first`` while their start is below ``stop``.

    Appends each object's word index to ``out``. Returns (the word index where the walk
    ended, or the index of an invalid object header or None if the walk was clean).
    """
    fixed_get = sizes.fixed.get
    varying_get = sizes.varying.get
    append = out.append
    n = len(words)
    i = first
    prev = -1
    run = 0
    wn = None
    while i < stop:
        w = words[i]
        s = fixed_get(w)
        if s is not None:
            append(i)
            i += s
            if w != prev:
                prev, run = w, 0
                continue
            run += 1
            if run >= _RUN_TRIGGER:
                # A long run of one fixed-size type (objects allocated in a loop): find how far
                # it goes with one numpy comparison per block instead of a dict lookup per object.
                if wn is None:
                    wn = np.frombuffer(words, dtype=np.uint64)
                k = _run_length(wn, i, s, w, stop)
                if k:
                    out.frombytes(np.arange(i, i + k * s, s, dtype=np.int64).tobytes())
                    i += k * s
                run = 0
            continue
        v = varying_get(w)
        if v is not None:
            if i + 1 >= n:
                return i, i
            append(i)
            i += (v[0] + v[1] * (words[i + 1] & 0xFFFFFFFF)) >> 3
            continue
        if not sizes.learn(w):
            return i, i
    return i, None


def object_facts(buf: memoryview | bytes, base: int, idx: array, end_index: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Addresses, MethodTables, heap footprints and length words of the objects at ``idx``.

    ``end_index`` is where the last object ends; objects are contiguous, so each footprint
    is the distance to the next object's start. The length word (the u32 after the
    MethodTable) is only meaningful for arrays and strings.
    """
    if not idx:
        empty = np.empty(0, dtype=np.uint64)
        return empty, empty, empty, empty
    words = np.frombuffer(buf, dtype=np.uint64, count=len(buf) // 8)
    ix = np.frombuffer(idx, dtype=np.int64)
    mts = words[ix] & np.uint64(~7 & 0xFFFFFFFFFFFFFFFF)
    bounds = np.empty(len(ix) + 1, dtype=np.int64)
    bounds[:-1] = ix
    bounds[-1] = end_index
    sizes = (np.diff(bounds) * 8).astype(np.uint64)
    addresses = ix.astype(np.uint64) * np.uint64(8) + np.uint64(base)
    after = np.minimum(ix + 1, len(words) - 1)
    lengths = (words[after] & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    return addresses, mts, sizes, lengths
