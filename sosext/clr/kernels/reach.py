"""gcroot without the reference graph: which objects reach one target, found forward from
the roots directly over the target's memory (a core's mapping).

**Memory.** ``mem`` is the core file as 64-bit words; heap segment ``s`` covers addresses
[seg_lo[s], seg_hi[s]) and its address ``a`` is word ``seg_word[s] + (a - seg_lo[s]) / 8``.
An address is an object when it lies in a segment outside the allocation contexts
(``gap_lo/gap_hi``; segment ``s`` has those from ``seg_gap[s]`` to ``seg_gap[s + 1]``), its
header word is a MethodTable of the open-addressing table the heap walk uses
(``heapwalk.walk``), and the object ends inside its segment. A header the
table does not know stops the search (``UNKNOWN``) so that Python can ask the DAC once.

**The search** is Tarjan's strongly connected components, iterative: a frame per object on
the depth-first path, the Tarjan stack of objects whose component is still open, and a
small hash (address → Tarjan stack position) for those of them whose position was needed;
everything else needs two bits per 8 heap bytes: ``visited``, and ``reach``, set while an
object's component is open and kept once it closes if it reaches the target. An object reaches the target when
one of its successors does; a whole component reaches it when one member does, which is
known when the component closes. Objects without references close at once and never
enter a frame. The target's own references are followed too, so that ``visited`` ends up
holding every object the roots reach (a later gcroot of any other object can be answered
"none" from it at once).
GCDesc arrays are those of ``refs.scan`` (``refscan.TypeLayouts``).
"""
from __future__ import annotations

import numpy as np

from . import hints, refs
from .hints import prefetch
from .registry import kernel

DONE = 0
UNKNOWN = 1  # a header word not in the MethodTable table: st[5] holds it
GROW = 2  # the hash of open objects is half full: rehash into one twice as large
EDGES = 3  # ``edges`` needs st[6] entries: only a GCDesc claiming slots past objects does that
PAUSE = 4  # st[8] more objects were visited: Python reports progress (and Ctrl-C), then resumes

NOT_OBJECT = -1
UNKNOWN_TYPE = -2

_LOW3 = np.uint64(0xFFFFFFFFFFFFFFF8)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_ONE = np.uint64(1)
AHEAD = 8

JIT_FORMS = {"prefetch": hints.jit_prefetch}


@kernel("i8", "u8[]r", "u8")
def lower_bound(items: np.ndarray, v: np.uint64) -> int:
    """The first position of sorted ``items`` whose item is not below ``v``."""
    lo = 0
    hi = items.size
    while lo < hi:
        mid = (lo + hi) >> 1
        if items[mid] < v:
            lo = mid + 1
        else:
            hi = mid
    return lo


@kernel("i8", "u8", "u8[]r", "u8[]r")
def segment_of(v: np.uint64, seg_lo: np.ndarray, seg_hi: np.ndarray) -> int:
    """The segment holding address ``v``, or -1."""
    s = lower_bound(seg_lo, v + np.uint64(1)) - 1  # the last segment starting at or below v
    if s < 0 or v >= seg_hi[s]:
        return -1
    return s


@kernel("i8", "u8", "u8[]r", "u8[]r", "i4[]r", "u8", "u8")
def segment_in(v: np.uint64, seg_lo: np.ndarray, seg_hi: np.ndarray, buckets: np.ndarray, base: np.uint64,
               shift: np.uint64) -> int:
    """``segment_of`` through ``buckets`` (``segment_buckets``): one load and a step or two where
    the binary search guessed half its branches wrong (references land anywhere in the heap)."""
    if v < base:
        return -1
    b = np.int64((v - base) >> shift)
    if b >= buckets.size:
        return -1
    s = np.int64(buckets[b])
    n = seg_lo.size
    while s + 1 < n and seg_lo[s + 1] <= v:
        s += 1
    if s < 0 or v >= seg_hi[s]:
        return -1
    return s


BUCKETS_MOST = 1 << 18  # int32 each: the table stays within a core's L2 cache
BUCKET_SHIFT_LEAST = 20  # 1 MiB: a region is at least this large, a segment far larger


def segment_buckets(seg_lo: np.ndarray, seg_hi: np.ndarray) -> tuple[np.ndarray, np.uint64, np.uint64]:
    """``segment_in``'s table over sorted segments: bucket ``b`` covers ``base + (b << shift)``
    onwards and holds the last segment starting at or below that (-1: none)."""
    if seg_lo.size == 0:
        return np.zeros(0, np.int32), np.uint64(0), np.uint64(BUCKET_SHIFT_LEAST)
    base, span = int(seg_lo[0]), int(seg_hi.max()) - int(seg_lo[0])
    shift = BUCKET_SHIFT_LEAST
    while (span >> shift) + 1 > BUCKETS_MOST:
        shift += 1
    starts = np.uint64(base) + (np.arange((span >> shift) + 1, dtype=np.uint64) << np.uint64(shift))
    buckets = (np.searchsorted(seg_lo, starts, side="right") - 1).astype(np.int32)
    return buckets, np.uint64(base), np.uint64(shift)


@kernel("i8", "u8", "i8", "u8[]r", "u8[]r", "i8[]r", "i8[]r", "u8[]r", "u8[]r", "u8[]r", "i4[]r", "i8[]r", "i8[]r")
def object_type(v: np.uint64, s: int, mem: np.ndarray, seg_hi: np.ndarray, seg_word: np.ndarray,
                seg_gap: np.ndarray, gap_lo: np.ndarray, gap_hi: np.ndarray, keys: np.ndarray, values: np.ndarray,
                base_sizes: np.ndarray, component_sizes: np.ndarray) -> int:
    """Type id of the object at ``v`` in segment ``s``; NOT_OBJECT or UNKNOWN_TYPE."""
    if v & np.uint64(7):
        return NOT_OBJECT
    for g in range(seg_gap[s], seg_gap[s + 1]):  # the segment's allocation contexts: few or none
        if gap_lo[g] <= v < gap_hi[g]:
            return NOT_OBJECT
    at = word_at(v, s, seg_hi, seg_word)
    if at < 0 or at + 1 >= mem.size:
        return NOT_OBJECT
    w = mem[at] & _LOW3
    if w == 0:
        return NOT_OBJECT
    mask = keys.size - 1
    slot = np.int64((w * _GOLDEN) >> np.uint64(40)) & mask
    while True:
        k = keys[slot]
        if k == w or k == 0:
            break
        slot = (slot + 1) & mask
    if keys[slot] == 0:
        return UNKNOWN_TYPE
    t = values[slot]
    if t < 0:
        return NOT_OBJECT
    size = np.uint64(base_sizes[t])
    comp = component_sizes[t]
    if comp != 0:
        size += np.uint64(comp) * (mem[at + 1] & np.uint64(0xFFFFFFFF))
    if v + size > seg_hi[s] or v + size < v:
        return NOT_OBJECT
    return t


@kernel("i8", "u8", "i8", "u8[]r", "i8[]r")
def word_at(v: np.uint64, s: int, seg_hi: np.ndarray, seg_word: np.ndarray) -> int:
    """Word index in ``mem`` of address ``v`` of segment ``s`` (seg_word is per segment the
    word of its end, so that no segment start is needed here)."""
    return seg_word[s] - np.int64((seg_hi[s] - v) >> np.uint64(3))


@kernel("i8", "u8", "u8[]r", "i8[]r")
def open_find(v: np.uint64, hkeys: np.ndarray, hvals: np.ndarray) -> int:
    """Tarjan stack position of open object ``v``, or -1 (linear probing, 0 = empty)."""
    mask = hkeys.size - 1
    i = np.int64((v * _GOLDEN) >> np.uint64(32)) & mask
    while True:
        k = hkeys[i]
        if k == v:
            return hvals[i]
        if k == 0:
            return -1
        i = (i + 1) & mask


@kernel("void", "u8", "i8", "u8[]", "i8[]")
def open_insert(v: np.uint64, pos: int, hkeys: np.ndarray, hvals: np.ndarray) -> None:
    mask = hkeys.size - 1
    i = np.int64((v * _GOLDEN) >> np.uint64(32)) & mask
    while hkeys[i] != 0:
        i = (i + 1) & mask
    hkeys[i] = v
    hvals[i] = pos


@kernel("void", "u8", "u8[]", "i8[]")
def open_delete(v: np.uint64, hkeys: np.ndarray, hvals: np.ndarray) -> None:
    """Remove ``v`` by backward shift, so that probing never needs tombstones."""
    mask = hkeys.size - 1
    i = np.int64((v * _GOLDEN) >> np.uint64(32)) & mask
    while hkeys[i] != v:
        if hkeys[i] == 0:
            return
        i = (i + 1) & mask
    j = i
    while True:
        j = (j + 1) & mask
        k = hkeys[j]
        if k == 0:
            break
        home = np.int64((k * _GOLDEN) >> np.uint64(32)) & mask
        # k may move to the hole at i when its home is not cyclically within (i, j]
        if (i <= j and (home <= i or home > j)) or (i > j and home <= i and home > j):
            hkeys[i] = k
            hvals[i] = hvals[j]
            i = j
    hkeys[i] = 0


@kernel("void", "u8[]r", "i8", "u8[]", "i8[]")
def rehash(tstack: np.ndarray, top: int, hkeys: np.ndarray, hvals: np.ndarray) -> None:
    """Fill an empty hash with the open objects ``tstack[:top]`` (value: their position)."""
    for p in range(top):
        open_insert(tstack[p], p, hkeys, hvals)


@kernel("i8", "u8[]r", "u8[]r", "u8[]r", "i8[]r", "i8[]r", "i8[]r", "u8[]r", "u8[]r", "u8[]r", "i4[]r",
        "i8[]r", "i8[]r", "i1[]r", "i8[]r", "i8[]r", "i8[]r", "i8[]r", "i8[]r", "i8[]r", "i8[]r", "i8[]r", "i8[]r",
        "u8[]r", "u8[]r", "u8[]r", "u8",
        "u8[]", "u8[]", "u8[]", "i8[]", "i8[]", "i8[]", "i8[]", "i8[]", "u8[]", "u8[]", "u8[]", "i8[]", "i8[]")
def search(mem: np.ndarray, seg_lo: np.ndarray, seg_hi: np.ndarray, seg_word: np.ndarray,
           seg_block: np.ndarray, seg_gap: np.ndarray, gap_lo: np.ndarray, gap_hi: np.ndarray,
           keys: np.ndarray, values: np.ndarray,
           base_sizes: np.ndarray, component_sizes: np.ndarray, gc_kind: np.ndarray,
           series_first: np.ndarray, series_count: np.ndarray, series_offset: np.ndarray,
           series_size: np.ndarray, repeat_start: np.ndarray, repeat_first: np.ndarray,
           repeat_items: np.ndarray, repeat_count: np.ndarray, repeat_skip: np.ndarray,
           roots: np.ndarray, dep_primary: np.ndarray, dep_secondary: np.ndarray, target: np.uint64,
           visited: np.ndarray, reach: np.ndarray, f_node: np.ndarray, f_index: np.ndarray, f_low: np.ndarray,
           f_reach: np.ndarray, f_base: np.ndarray, f_cur: np.ndarray, edges: np.ndarray, tstack: np.ndarray,
           hkeys: np.ndarray, hvals: np.ndarray, st: np.ndarray) -> int:
    """Depth-first from each of ``roots`` (object addresses); sets ``visited`` for every
    object met; ``reach`` is set for those whose component is open and, once it closes,
    stays set for those that reach ``target``. Dependent handles are edges (``dep_primary`` sorted,
    ``dep_secondary`` beside it). All state lives in the arrays and ``st`` (root cursor,
    depth, edge top, Tarjan top, objects visited, unknown header, edges needed, hashed
    frames, objects per call), so a call that returns early resumes where it stopped.

    The hash learns an open object's Tarjan position only when needed: when its frame closes
    with its component still open, or when an edge meets an object on the depth-first path
    (then every frame above ``hashed`` is entered at once). An acyclic heap never needs it. ``edges`` holds every
    frame's pending successors: it needs a word per heap word plus the dependent handles."""
    rc = st[0]
    depth = st[1]
    etop = st[2]
    ttop = st[3]
    nvisited = st[4]
    hashed = st[7]  # frames [0, hashed) are in the hash
    ndep = dep_primary.size
    last = 0
    pause_at = nvisited + st[8]
    if seg_lo.size == 0:
        return DONE
    while True:
        if nvisited >= pause_at:
            st[0], st[1], st[2], st[3], st[4], st[7] = rc, depth, etop, ttop, nvisited, hashed
            return PAUSE
        f = depth - 1
        if depth == 0:
            if rc >= roots.size:
                break
            v = roots[rc]
        elif f_cur[f] < etop:
            v = edges[f_cur[f]]
            k = f_cur[f] + AHEAD
            if k < etop:
                u = edges[k]
                if seg_lo[last] <= u < seg_hi[last]:
                    prefetch(mem, word_at(u, last, seg_hi, seg_word))
        else:  # the frame's successors are done: close it
            r = f_reach[f]
            if f_low[f] == f_index[f]:  # a component's root: the component closes
                for p in range(f_index[f], ttop):
                    w = tstack[p]
                    if p > f_index[f] or f < hashed:  # the others' frames closed into the hash
                        open_delete(w, hkeys, hvals)
                    s = last if seg_lo[last] <= w < seg_hi[last] else segment_of(w, seg_lo, seg_hi)
                    b = np.int64((w - seg_lo[s]) >> np.uint64(3))
                    if not r:  # open until now, and it does not reach the target
                        reach[seg_block[s] + (b >> 6)] &= ~(_ONE << np.uint64(b & 63))
                ttop = f_index[f]
            else:  # stays open: its position goes to the hash
                if f >= hashed:
                    open_insert(f_node[f], f_index[f], hkeys, hvals)
                if f_low[f] < f_low[f - 1]:
                    f_low[f - 1] = f_low[f]
            if hashed > f:
                hashed = f
            etop = f_base[f]
            depth -= 1
            if depth > 0 and r:
                f_reach[depth - 1] = 1
            continue
        if v & np.uint64(7):
            s = -1
        elif seg_lo[last] <= v < seg_hi[last]:  # depth-first order stays in a segment for long
            s = last
        else:
            s = segment_of(v, seg_lo, seg_hi)
            if s >= 0:
                last = s
        if s < 0:
            if depth == 0:
                rc += 1
            else:
                f_cur[f] += 1
            continue
        b = np.int64((v - seg_lo[s]) >> np.uint64(3))
        blk = seg_block[s] + (b >> 6)
        bit = _ONE << np.uint64(b & 63)
        if visited[blk] & bit:
            if depth == 0:
                rc += 1
                continue
            f_cur[f] += 1
            if reach[blk] & bit:  # open, or closed and reaching the target
                pos = open_find(v, hkeys, hvals)
                if pos < 0 and hashed < depth:  # perhaps on the depth-first path: hash those frames
                    for k in range(hashed, depth):
                        open_insert(f_node[k], f_index[k], hkeys, hvals)
                    hashed = depth
                    pos = open_find(v, hkeys, hvals)
                if pos < 0:
                    f_reach[f] = 1
                elif pos < f_low[f]:
                    f_low[f] = pos
            continue
        t = object_type(v, s, mem, seg_hi, seg_word, seg_gap, gap_lo, gap_hi, keys, values, base_sizes,
                        component_sizes)
        if t == UNKNOWN_TYPE:
            st[5] = np.int64(mem[word_at(v, s, seg_hi, seg_word)] & _LOW3)
            st[0], st[1], st[2], st[3], st[4], st[7] = rc, depth, etop, ttop, nvisited, hashed
            return UNKNOWN
        if t == NOT_OBJECT:
            if depth == 0:
                rc += 1
            else:
                f_cur[f] += 1
            continue
        # A dependent handle's primary has its secondaries as successors too.
        d0 = 0
        d1 = 0
        if ndep:
            d0 = lower_bound(dep_primary, v)
            d1 = d0
            while d1 < ndep and dep_primary[d1] == v:
                d1 += 1
        leaf = gc_kind[t] == 0 and d1 == d0
        if not leaf:
            if 2 * (ttop + 1) > hkeys.size:
                st[0], st[1], st[2], st[3], st[4], st[7] = rc, depth, etop, ttop, nvisited, hashed
                return GROW
            at = word_at(v, s, seg_hi, seg_word)
            size = np.int64(base_sizes[t])
            if component_sizes[t] != 0:
                size += component_sizes[t] * np.int64(mem[at + 1] & np.uint64(0xFFFFFFFF))
            need = etop + (d1 - d0) + (seg_word[s] - at) + 1  # no object has more slots than words left
            if need > edges.size:
                need = etop + (d1 - d0) + refs.slot_bound(at, seg_word[s], size, t, gc_kind, series_first,
                                                          series_count, series_offset, series_size)
            if need > edges.size:
                st[0], st[1], st[2], st[3], st[4], st[7] = rc, depth, etop, ttop, nvisited, hashed
                st[6] = need
                return EDGES
        if depth == 0:
            rc += 1
        else:
            f_cur[f] += 1
        visited[blk] |= bit
        nvisited += 1
        if leaf:  # a component of its own, closed at once
            if v == target:
                reach[blk] |= bit
                if depth > 0:
                    f_reach[f] = 1
            continue
        f_node[depth] = v
        f_index[depth] = ttop
        f_low[depth] = ttop
        f_reach[depth] = 1 if v == target else 0
        f_base[depth] = etop
        f_cur[depth] = etop
        tstack[ttop] = v
        reach[blk] |= bit  # open
        ttop += 1
        limit = seg_word[s]
        etop = refs.object_refs(mem, at, limit, size, t, gc_kind, series_first, series_count, series_offset,
                           series_size, repeat_start, repeat_first, repeat_items, repeat_count, repeat_skip,
                           edges, etop)
        for d in range(d0, d1):
            edges[etop] = dep_secondary[d]
            etop += 1
        depth += 1
    st[0], st[1], st[2], st[3], st[4], st[7] = rc, depth, etop, ttop, nvisited, hashed
    return DONE


@kernel("u8[]", "u8[]r", "u8[]r", "i8[]r")
def bitmap_addresses(bitmap: np.ndarray, seg_lo: np.ndarray, seg_block: np.ndarray) -> np.ndarray:
    """The addresses whose bits are set, ascending (segments in address order)."""
    n = 0
    for b in range(bitmap.size):
        if bitmap[b]:
            n += refs.popcount(bitmap[b])
    out = np.empty(n, dtype=np.uint64)
    k = 0
    for s in range(seg_lo.size):
        for b in range(seg_block[s], seg_block[s + 1]):
            x = bitmap[b]
            base = seg_lo[s] + np.uint64(8 * 64 * (b - seg_block[s]))
            while x:
                low = x & (~x + _ONE)
                out[k] = base + np.uint64(8) * np.uint64(refs.popcount(low - _ONE))
                k += 1
                x ^= low
    return out


@kernel("i8", "u8[]r", "u8[]r", "u8[]r", "i8[]r", "i8[]r",
        "i8[]r", "i8[]r", "i1[]r", "i8[]r", "i8[]r", "i8[]r", "i8[]r", "i8[]r", "i8[]r", "i8[]r", "i8[]r", "i8[]r",
        "u8[]r", "u8[]r", "i8[]r", "u8[]", "i8[]", "u4[]")
def member_rows(mem: np.ndarray, seg_lo: np.ndarray, seg_hi: np.ndarray, seg_word: np.ndarray,
                type_of: np.ndarray, base_sizes: np.ndarray, component_sizes: np.ndarray, gc_kind: np.ndarray,
                series_first: np.ndarray, series_count: np.ndarray, series_offset: np.ndarray,
                series_size: np.ndarray, repeat_start: np.ndarray, repeat_first: np.ndarray,
                repeat_items: np.ndarray, repeat_count: np.ndarray, repeat_skip: np.ndarray,
                members: np.ndarray, hkeys: np.ndarray, hvals: np.ndarray, scratch: np.ndarray,
                offsets: np.ndarray, targets: np.ndarray) -> int:
    """The references among ``members`` (sorted addresses, type ids in ``type_of``; the hash
    ``hkeys/hvals`` maps each to its position, ``rehash``) as compressed rows over member
    positions, in ``refs.scan``'s slot order, into ``offsets`` and ``targets`` (room for
    every reference slot of the members: a word of the heap each). With an empty
    ``targets`` only counts; returns the number of edges, or -1 when ``targets`` was too
    small."""
    e = 0
    fill = targets.size > 0
    for i in range(members.size):
        v = members[i]
        t = type_of[i]
        if gc_kind[t] != 0:
            s = segment_of(v, seg_lo, seg_hi)
            at = word_at(v, s, seg_hi, seg_word)
            size = np.int64(base_sizes[t])
            if component_sizes[t] != 0:
                size += component_sizes[t] * np.int64(mem[at + 1] & np.uint64(0xFFFFFFFF))
            n = refs.object_refs(mem, at, seg_word[s], size, t, gc_kind, series_first, series_count, series_offset,
                            series_size, repeat_start, repeat_first, repeat_items, repeat_count, repeat_skip,
                            scratch, 0)
            for j in range(n):
                lo = open_find(scratch[j], hkeys, hvals)
                if lo >= 0:
                    if fill:
                        if e >= targets.size:
                            return -1  # a GCDesc claiming slots past its object: count first
                        targets[e] = lo
                    e += 1
        if fill:
            offsets[i + 1] = e
    return e


@kernel("i8[]", "u8[]r", "u8[]r", "u8[]r", "u8[]r", "i8[]r", "i8[]r", "u8[]r", "u8[]r", "u8[]r", "i4[]r",
        "i8[]r", "i8[]r")
def member_types(members: np.ndarray, mem: np.ndarray, seg_lo: np.ndarray, seg_hi: np.ndarray,
                 seg_word: np.ndarray, seg_gap: np.ndarray, gap_lo: np.ndarray, gap_hi: np.ndarray,
                 keys: np.ndarray, values: np.ndarray, base_sizes: np.ndarray,
                 component_sizes: np.ndarray) -> np.ndarray:
    """Type id of each member (objects the search met, so their headers are in the table)."""
    out = np.empty(members.size, dtype=np.int64)
    for i in range(members.size):
        v = members[i]
        out[i] = object_type(v, segment_of(v, seg_lo, seg_hi), mem, seg_hi, seg_word, seg_gap, gap_lo, gap_hi,
                             keys, values, base_sizes, component_sizes)
    return out


FOUND = 5  # first_paths met the target: the path is f_node[:st[1]], then the target


@kernel("i8", "u8[]r", "u8[]r", "u8[]r", "i8[]r", "i8[]r", "i8[]r", "u8[]r", "u8[]r", "u8[]r", "i4[]r",
        "i8[]r", "i8[]r", "i1[]r", "i8[]r", "i8[]r", "i8[]r", "i8[]r", "i8[]r", "i8[]r", "i8[]r", "i8[]r", "i8[]r",
        "u8[]r", "u8[]r", "u8[]r", "u8",
        "u8[]", "u8[]", "i8[]", "i8[]", "u8[]", "i8[]")
def first_paths(mem: np.ndarray, seg_lo: np.ndarray, seg_hi: np.ndarray, seg_word: np.ndarray,
                seg_block: np.ndarray, seg_gap: np.ndarray, gap_lo: np.ndarray, gap_hi: np.ndarray,
                keys: np.ndarray, values: np.ndarray,
                base_sizes: np.ndarray, component_sizes: np.ndarray, gc_kind: np.ndarray,
                series_first: np.ndarray, series_count: np.ndarray, series_offset: np.ndarray,
                series_size: np.ndarray, repeat_start: np.ndarray, repeat_first: np.ndarray,
                repeat_items: np.ndarray, repeat_count: np.ndarray, repeat_skip: np.ndarray,
                roots: np.ndarray, dep_primary: np.ndarray, dep_secondary: np.ndarray, target: np.uint64,
                visited: np.ndarray, current: np.ndarray, f_base: np.ndarray,
                f_cur: np.ndarray, edges: np.ndarray, st: np.ndarray) -> int:
    """Depth-first from each of ``roots`` in their order, stopping at ``target``: FOUND
    leaves the path on the frames and the root's position in ``st[10]``: the root's
    object, then for each frame f the edge it took, ``edges[f_cur[f] - 1]`` (the last is
    the target). A frame keeps no node of its own: its object is that edge of the frame
    below. Call again to go on with the next root.

    Unlike ``search`` this needs no Tarjan bookkeeping: an object a finished root's search
    visited without meeting the target cannot reach it, so ``visited`` is shared by the
    roots after it. A search that stopped at the target leaves objects visited that may
    reach it (through the path's objects): with ``st[9]`` set, the objects of the root
    being searched are also set in ``current``, and a root's visits are taken out of
    ``visited`` when it finds the target, so that the next root may go through them.
    ``current`` is cleared between roots over the blocks it dirtied (``st[7]``..``st[11]``).

    ``st``: root cursor, depth, edge top, -, objects visited, unknown header, edges needed,
    dirty block low, objects per call, track roots, found root, dirty block high."""
    rc = st[0]
    depth = st[1]
    etop = st[2]
    nvisited = st[4]
    track = st[9] != 0
    dlo = st[7]
    dhi = st[11]
    ndep = dep_primary.size
    last = 0
    pause_at = nvisited + st[8]
    if seg_lo.size == 0:
        return DONE
    while True:
        if nvisited >= pause_at:
            st[0], st[1], st[2], st[4], st[7], st[11] = rc, depth, etop, nvisited, dlo, dhi
            return PAUSE
        f = depth - 1
        if depth == 0:
            if track and dlo <= dhi:  # the last root's search is over: forget which were its
                for b in range(dlo, dhi + 1):
                    current[b] = 0
                dlo = visited.size
                dhi = -1
            if rc >= roots.size:
                break
            v = roots[rc]
        elif f_cur[f] < etop:
            v = edges[f_cur[f]]
            k = f_cur[f] + AHEAD
            if k < etop:
                u = edges[k]
                if seg_lo[last] <= u < seg_hi[last]:
                    prefetch(mem, word_at(u, last, seg_hi, seg_word))
        else:  # the frame's successors are done: it cannot reach the target
            etop = f_base[f]
            depth -= 1
            continue
        if v == target:
            if depth == 0:
                rc += 1
            else:
                f_cur[f] += 1
            st[10] = rc - 1 if depth == 0 else st[10]
            if track:  # what this root visited may reach the target through the path
                for b in range(dlo, dhi + 1):
                    visited[b] &= ~current[b]
                    current[b] = 0
                dlo = visited.size
                dhi = -1
            st[0], st[1], st[2], st[4], st[7], st[11] = rc, depth, etop, nvisited, dlo, dhi
            return FOUND
        if v & np.uint64(7):
            s = -1
        elif seg_lo[last] <= v < seg_hi[last]:
            s = last
        else:
            s = segment_of(v, seg_lo, seg_hi)
            if s >= 0:
                last = s
        if s < 0:
            if depth == 0:
                rc += 1
            else:
                f_cur[f] += 1
            continue
        b = np.int64((v - seg_lo[s]) >> np.uint64(3))
        blk = seg_block[s] + (b >> 6)
        bit = _ONE << np.uint64(b & 63)
        if visited[blk] & bit:
            if depth == 0:
                rc += 1
            else:
                f_cur[f] += 1
            continue
        t = object_type(v, s, mem, seg_hi, seg_word, seg_gap, gap_lo, gap_hi, keys, values, base_sizes,
                        component_sizes)
        if t == UNKNOWN_TYPE:
            st[5] = np.int64(mem[word_at(v, s, seg_hi, seg_word)] & _LOW3)
            st[0], st[1], st[2], st[4], st[7], st[11] = rc, depth, etop, nvisited, dlo, dhi
            return UNKNOWN
        if t == NOT_OBJECT:
            if depth == 0:
                rc += 1
            else:
                f_cur[f] += 1
            continue
        d0 = 0
        d1 = 0
        if ndep:
            d0 = lower_bound(dep_primary, v)
            d1 = d0
            while d1 < ndep and dep_primary[d1] == v:
                d1 += 1
        leaf = gc_kind[t] == 0 and d1 == d0
        at = word_at(v, s, seg_hi, seg_word)
        size = np.int64(base_sizes[t])
        if not leaf:
            if component_sizes[t] != 0:
                size += component_sizes[t] * np.int64(mem[at + 1] & np.uint64(0xFFFFFFFF))
            need = etop + (d1 - d0) + (seg_word[s] - at) + 1
            if need > edges.size:
                need = etop + (d1 - d0) + refs.slot_bound(at, seg_word[s], size, t, gc_kind, series_first,
                                                          series_count, series_offset, series_size)
            if need > edges.size:
                st[0], st[1], st[2], st[4], st[7], st[11] = rc, depth, etop, nvisited, dlo, dhi
                st[6] = need
                return EDGES
        if depth == 0:
            rc += 1
            st[10] = rc - 1
        else:
            f_cur[f] += 1
        visited[blk] |= bit
        nvisited += 1
        if track:
            current[blk] |= bit
            if blk < dlo:
                dlo = blk
            if blk > dhi:
                dhi = blk
        if leaf:
            continue
        f_base[depth] = etop
        f_cur[depth] = etop
        etop = refs.object_refs(mem, at, seg_word[s], size, t, gc_kind, series_first, series_count, series_offset,
                                series_size, repeat_start, repeat_first, repeat_items, repeat_count, repeat_skip,
                                edges, etop)
        for d in range(d0, d1):
            edges[etop] = dep_secondary[d]
            etop += 1
        depth += 1
    st[0], st[1], st[2], st[4], st[7], st[11] = rc, depth, etop, nvisited, dlo, dhi
    return DONE
