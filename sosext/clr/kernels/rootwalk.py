"""gcroot in SOS's order: ClrMD's ``GCRoot`` search (what dotnet-dump's gcroot runs), over
a core's mapping, so that every chain is the one SOS prints.

**The search.** Roots are taken in SOS's order; each is searched depth-first for the
target, and what one root's search learnt serves the next:

- ``found`` (a hash: object → the next object of its chain, ``END`` for the target) holds
  every object of a chain printed so far; meeting one ends a search at once, and the
  chain goes on as that object's did.
- ``seen`` (a bit per 8 heap bytes; a hash, ``xkeys``, for values outside the heap) marks
  an object the moment it is met as a reference, before it is walked; a reference already seen is not followed again, by this root or a
  later one. When a search ends at the target, the objects it met but did not walk are
  taken out of ``seen`` again (ClrMD 4's ``DrainUnwalkedFromSeen``).

A walked object's references (its dependent handles' secondaries first, then its GCDesc
slots) are each checked against ``found``, then ``seen``; the new ones are pending on the
walk's stack. ClrMD keeps them in 32-byte lists (a byte of cursor, the object and its
parent, then references, each stored in 5, 6 or 8 bytes by its size) and takes the last
list first, each list in order: ``chunk_order`` lays a walk's pending references out in
that order, so that the search follows them exactly as ClrMD does. The target's own
references are not walked. One deliberate difference: ClrMD never walks an object whose type
has no GC references, so a dependent handle whose primary is such an object (a
``DependentHandle`` or ``ConditionalWeakTable`` keyed by a string) is not followed and SOS
finds no root for its secondary, which the primary keeps alive; here it is followed.

**State** lives in arrays and ``st`` (root cursor, depth, pending top, found count, objects
walked, unknown header, needed size, values outside the heap, objects per call, found root,
references taken off the stack so far when recording), so a call that returns early
(``UNKNOWN``: a MethodTable to learn; ``GROW``, ``XGROW``; ``PENDING``; ``PAUSE``; ``FOUND``;
``RECORD``; ``FORK``) resumes where it stopped. The same search, run with no target and recording,
is the root forest (``roots/forest.py``), which answers later gcroots. Until it meets its
target a search is that forest's prefix, so a first gcroot may record too: ``FORK`` hands
Python the state the forest goes on from, before anything depends on the target.
Frame ``f`` is the object ``f_obj[f]`` being walked, its pending references
``pend[f_cur[f]:f_end[f]]``; frame ``f``'s region starts where frame ``f - 1``'s ends, and
frame ``f``'s object is a reference frame ``f - 1`` took.
"""
from __future__ import annotations

import numpy as np

from . import hints, reach, refs
from .hints import prefetch, touch
from .reach import NOT_OBJECT, UNKNOWN_TYPE
from .registry import kernel

DONE = 0
UNKNOWN = 1  # a header word not in the MethodTable table: st[5] holds it
GROW = 2  # ``found`` may not hold what the next step adds: rehash into one that holds st[6] half full
PENDING = 3  # ``pend`` needs st[6] entries
PAUSE = 4  # st[8] more objects were walked: Python reports progress (and Ctrl-C), then resumes
FOUND = 5  # root st[9] reaches the target: its chain is in ``found``
XGROW = 6  # ``xkeys`` (values met outside the heap) must hold st[6] at most half full
RECORD = 7  # ``pop_addr``/``pop_parent`` are full: Python grows them, then resumes
FORK = 8  # recording with a target, the search is about to take the target: the forest's state

END = np.int64(1)  # the target's entry in ``found``: its chain ends there

_LOW3 = np.uint64(0xFFFFFFFFFFFFFFF8)
_MASK2 = np.uint64(0xFFFFFFFFFFFFFFFC)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_ONE = np.uint64(1)
_LIST_BYTES = 32  # ClrMD's ReferenceList: ArrayPool<byte>.Rent(32)
AHEAD = 8  # pending references ahead whose headers are asked for (kernels/hints.py)

JIT_FORMS = {"prefetch": hints.jit_prefetch, "touch": hints.jit_touch}


@kernel("i8", "u8")
def stored_bytes(p: np.uint64) -> int:
    """How many bytes ClrMD's ReferenceList stores a pointer in (0: not stored)."""
    p = p & _MASK2
    if p == 0:
        return 0
    if p < np.uint64(1 << 40):
        return 5
    if p < np.uint64(1 << 48):
        return 6
    return 8


@kernel("i8", "u8", "u8[]r", "i8[]r")
def found_get(v: np.uint64, fkeys: np.ndarray, fvals: np.ndarray) -> int:
    """The next object of ``v``'s chain (``END`` for the target), or 0 when ``v`` is on no chain."""
    mask = fkeys.size - 1
    i = np.int64((v * _GOLDEN) >> np.uint64(32)) & mask
    while True:
        k = fkeys[i]
        if k == v:
            return fvals[i]
        if k == 0:
            return 0
        i = (i + 1) & mask


@kernel("void", "u8", "i8", "u8[]", "i8[]")
def found_add(v: np.uint64, nxt: int, fkeys: np.ndarray, fvals: np.ndarray) -> None:
    """``v``'s next object, unless it has one already (ClrMD's AddLink keeps the first)."""
    mask = fkeys.size - 1
    i = np.int64((v * _GOLDEN) >> np.uint64(32)) & mask
    while fkeys[i] != 0:
        if fkeys[i] == v:
            return
        i = (i + 1) & mask
    fkeys[i] = v
    fvals[i] = nxt


@kernel("void", "u8[]r", "i8[]r", "u8[]", "i8[]")
def found_rehash(old_keys: np.ndarray, old_vals: np.ndarray, fkeys: np.ndarray, fvals: np.ndarray) -> None:
    for i in range(old_keys.size):
        if old_keys[i] != 0:
            found_add(old_keys[i], old_vals[i], fkeys, fvals)


@kernel("i8", "u8", "u8[]r", "i8[]r", "u8[]")
def found_chain(start: np.uint64, fkeys: np.ndarray, fvals: np.ndarray, out: np.ndarray) -> int:
    """The chain from ``start`` to the target into ``out``; its length (-1: ``out`` too small)."""
    n = 0
    v = start
    while True:
        if n >= out.size:
            return -1
        out[n] = v
        n += 1
        nxt = found_get(v, fkeys, fvals)
        if nxt == END or nxt == 0:
            return n
        v = np.uint64(nxt)


@kernel("void", "u8[]", "i8", "i8", "i8")
def chunk_order(pend: np.ndarray, a: int, b: int, capacity: int) -> None:
    """Reorder ``pend[a:b]`` (references in the order met) as ClrMD takes them: cut into
    lists of ``capacity`` bytes, the last list first, each list in order. Reverse the
    whole, then each list back (list k of the order met is at [b - end_k, b - start_k))."""
    i, j = a, b - 1
    while i < j:
        pend[i], pend[j] = pend[j], pend[i]
        i += 1
        j -= 1
    n = b - a
    start = 0
    used = 0
    size = 0
    for k in range(n + 1):
        if k < n:
            size = stored_bytes(pend[b - 1 - k])
            if used + size <= capacity:
                used += size
                continue
        # list [start, k) of the order met closes: put it back in order
        i, j = b - k, b - 1 - start
        while i < j:
            pend[i], pend[j] = pend[j], pend[i]
            i += 1
            j -= 1
        start = k
        used = size if k < n else 0


@kernel("i8", "u8", "u8[]r", "u8[]r", "i8[]r", "u8[]", "u8[]", "i8[]")
def unsee_object(v: np.uint64, seg_lo: np.ndarray, seg_hi: np.ndarray, seg_block: np.ndarray, seen: np.ndarray,
                 xkeys: np.ndarray, xvals: np.ndarray) -> int:
    """Take ``v`` out of ``seen`` (or, for a value outside the heap, out of ``xkeys``: then 1),
    as ClrMD's drain does: its reference lists keep a value without its low two bits and it
    takes that out of its seen set, so a value outside the heap whose low bits are set (seen
    whole) stays seen for the roots after."""
    v = v & _MASK2
    s = reach.segment_of(v, seg_lo, seg_hi)
    if s >= 0 and not v & np.uint64(7):
        b = np.int64((v - seg_lo[s]) >> np.uint64(3))
        seen[seg_block[s] + (b >> 6)] &= ~(_ONE << np.uint64(b & 63))
        return 0
    if reach.open_find(v, xkeys, xvals) < 0:
        return 0
    reach.open_delete(v, xkeys, xvals)
    return 1



@kernel("void", "u8[]r", "i8[]")
def bit_prefix(bits: np.ndarray, prefix: np.ndarray) -> None:
    """``prefix[i]``: the set bits of ``bits[:i]`` (``prefix`` has one entry more)."""
    n = 0
    for i in range(bits.size):
        prefix[i] = n
        n += refs.popcount(bits[i])
    prefix[bits.size] = n


@kernel("i8", "u8[]r", "i8[]r", "i8", "i8")
def bit_position(bits: np.ndarray, prefix: np.ndarray, blk: int, b: int) -> int:
    """The position, among the set bits in address order, of bit ``b`` (0..63) of word ``blk``."""
    return prefix[blk] + refs.popcount(bits[blk] & ((_ONE << np.uint64(b)) - _ONE))


@kernel("i8", "u8[]r", "u8[]r", "i8", "u8[]")
def chain_back(pops: np.ndarray, parents: np.ndarray, r: int, out: np.ndarray) -> int:
    """From a forest's recording in search order: the parents of pop ``r`` (its object first,
    up to the root's object, whose parent entry has the low bit) into ``out``; their count
    (-1: ``out`` too small or a parent not found before)."""
    n = 0
    out[n] = pops[r]
    n += 1
    want = parents[r]
    i = r - 1
    while True:
        if n >= out.size:
            return -1
        if want & _ONE:
            out[n] = want & ~_ONE
            return n + 1
        while i >= 0 and pops[i] != want:
            i -= 1
        if i < 0:
            return -1
        out[n] = want
        n += 1
        want = parents[i]
        i -= 1


@kernel("i8", "u8[]r", "i8", "u8[]r", "u8[]r", "i8[]r", "u8[]", "u8[]")
def seen_from_pops(pops: np.ndarray, cut: int, seg_lo: np.ndarray, seg_hi: np.ndarray, seg_block: np.ndarray,
                   seen: np.ndarray, outside: np.ndarray) -> int:
    """The seen bits of what a forest's recording popped before ``cut``; the values outside
    the heap among them into ``outside`` (their count; -1: ``outside`` too small)."""
    n = 0
    last = 0
    for i in range(cut):
        a = pops[i]
        if seg_lo[last] <= a < seg_hi[last]:
            s = last
        else:
            s = reach.segment_of(a, seg_lo, seg_hi)
        if s < 0 or a & np.uint64(7):
            if n >= outside.size:
                return -1
            outside[n] = a
            n += 1
            continue
        last = s
        b = np.int64((a - seg_lo[s]) >> np.uint64(3))
        seen[seg_block[s] + (b >> 6)] |= _ONE << np.uint64(b & 63)
    return n


_RING = 64  # positions computed ahead of their writes (a power of two above 2 * RANK_AHEAD)
RANK_AHEAD = 16


@kernel("i8", "u8[]r", "u8[]r", "i8", "i8", "u8[]r", "u8[]r", "i8[]r", "u8[]r", "i8[]r", "u4[]", "u8[]", "u1[]",
        "i4[]r", "u8", "u8")
def forest_ranks(pop_addr: np.ndarray, pop_parent: np.ndarray, first: int, npops: int, seg_lo: np.ndarray,
                 seg_hi: np.ndarray, seg_block: np.ndarray, fbits: np.ndarray, fprefix: np.ndarray, frank: np.ndarray,
                 fparent: np.ndarray, outside: np.ndarray, buckets: np.ndarray, bucket_base: np.uint64,
                 bucket_shift: np.uint64) -> int:
    """Each popped heap object's pop rank and parent at its position in address order
    (``frank``, ``fparent``), for pops ``first`` to ``npops``; ``outside[i]`` = 1 for a value
    popped outside the heap. The count of those. Every object is popped once, so calls for
    disjoint ranges may run at once. Every access is at random, so it is a pipeline: item
    i + 2 * RANK_AHEAD asks for its bitmap word and prefix, item i + RANK_AHEAD computes its
    position and asks for the lines it will write, item i writes them."""
    ring = np.empty(_RING, np.int64)  # position of item j at j % _RING; -1: outside the heap
    n_out = 0
    for i in range(first - 2 * RANK_AHEAD, npops):
        j = i + 2 * RANK_AHEAD
        if j < npops:
            a = pop_addr[j]
            s = reach.segment_in(a, seg_lo, seg_hi, buckets, bucket_base, bucket_shift)
            if s >= 0:
                blk = seg_block[s] + (np.int64((a - seg_lo[s]) >> np.uint64(3)) >> 6)
                prefetch(fbits, blk)
                prefetch(fprefix, blk)
        j = i + RANK_AHEAD
        if first <= j < npops:
            a = pop_addr[j]
            s = reach.segment_in(a, seg_lo, seg_hi, buckets, bucket_base, bucket_shift)
            pos = -1
            if s >= 0 and not a & np.uint64(7):
                b = np.int64((a - seg_lo[s]) >> np.uint64(3))
                pos = bit_position(fbits, fprefix, seg_block[s] + (b >> 6), b & 63)
                prefetch(frank, pos)
                prefetch(fparent, pos)
            ring[j & (_RING - 1)] = pos
        if i < first:
            continue
        pos = ring[i & (_RING - 1)]
        if pos < 0:
            outside[i] = 1
            n_out += 1
            continue
        frank[pos] = np.uint32(i)
        fparent[pos] = pop_parent[i]
    return n_out


PAGE_ITEMS = 512  # 8-byte items in a 4 KiB page


@kernel("i8", "u8[]", "i8", "i8")
def touch_pages(a: np.ndarray, start: int, stop: int) -> int:
    """Every 512th item of ``a[start:stop]`` (a page's first, ``a`` being page-aligned, as
    ``memory.reserve``'s arrays are) written once with its own value (``hints.touch``), so that
    its page is mapped and first written by the calling thread, ahead of a search that records
    into ``a`` on another (``roots/rootwalk.py``, MapsAhead). The number of pages touched."""
    n = 0
    i = start + (-start) % PAGE_ITEMS
    while i < stop and i < a.size:
        touch(a, i)
        n += 1
        i += PAGE_ITEMS
    return n


@kernel("i8", "u8[]r", "u8[]r", "u8[]r", "i8[]r", "i8[]r", "i8[]r", "u8[]r", "u8[]r", "u8[]r", "i4[]r",
        "i8[]r", "i8[]r", "i1[]r", "i8[]r", "i8[]r", "i8[]r", "i8[]r", "i8[]r", "i8[]r", "i8[]r", "i8[]r", "i8[]r",
        "u8[]r", "u8[]r", "u8[]r", "u8",
        "u8[]", "u8[]", "i8[]", "u8[]", "i8[]", "u8[]", "i8[]", "i8[]", "u8[]", "i8[]",
        "u8[]r", "i8[]r", "u4[]r", "i8", "u8[]", "u8[]", "i8[]", "i4[]r", "u8", "u8")
def root_walk(mem: np.ndarray, seg_lo: np.ndarray, seg_hi: np.ndarray, seg_word: np.ndarray,
              seg_block: np.ndarray, seg_gap: np.ndarray, gap_lo: np.ndarray, gap_hi: np.ndarray,
              keys: np.ndarray, values: np.ndarray,
              base_sizes: np.ndarray, component_sizes: np.ndarray, gc_kind: np.ndarray,
              series_first: np.ndarray, series_count: np.ndarray, series_offset: np.ndarray,
              series_size: np.ndarray, repeat_start: np.ndarray, repeat_first: np.ndarray,
              repeat_items: np.ndarray, repeat_count: np.ndarray, repeat_skip: np.ndarray,
              roots: np.ndarray, dep_primary: np.ndarray, dep_secondary: np.ndarray, target: np.uint64,
              seen: np.ndarray, xkeys: np.ndarray, xvals: np.ndarray, fkeys: np.ndarray, fvals: np.ndarray,
              f_obj: np.ndarray, f_cur: np.ndarray, f_end: np.ndarray, pend: np.ndarray, st: np.ndarray,
              fbits: np.ndarray, fprefix: np.ndarray, frank: np.ndarray, fcut: int,
              pop_addr: np.ndarray, pop_parent: np.ndarray, root_pops: np.ndarray,
              buckets: np.ndarray, bucket_base: np.uint64, bucket_shift: np.uint64) -> int:
    """The search of the module's docstring from root ``st[0]`` on; FOUND after each root
    that reaches ``target`` (its position in ``st[9]``), DONE after the last root.

    The forest (``roots/forest.py``): with ``pop_addr`` not empty, every reference taken off
    the stack is recorded, in that order (``st[10]`` so far), with the object that met it
    (low bit set: a root's object) in ``pop_parent``; ``root_pops[k]`` is that count when
    root k's search starts. Recording with a target, FORK when the target is next (nothing
    changed yet: the forest goes on from this state; this search resumes without recording). With ``fcut`` > 0, an object a forest took off the stack before
    rank ``fcut`` (``fbits``/``fprefix``/``frank``) counts as seen."""
    rc = st[0]
    depth = st[1]
    ptop = st[2]
    nfound = st[3]
    nwalked = st[4]
    nx = st[7]
    pause_at = nwalked + st[8]
    ndep = dep_primary.size
    last = 0
    record = pop_addr.size > 0
    npop = st[10]
    while True:
        if nwalked >= pause_at:
            st[0], st[1], st[2], st[3], st[4], st[7], st[10] = rc, depth, ptop, nfound, nwalked, nx, npop
            return PAUSE
        if record and npop >= pop_addr.size:
            st[0], st[1], st[2], st[3], st[4], st[7], st[10] = rc, depth, ptop, nfound, nwalked, nx, npop
            return RECORD
        f = depth - 1
        if depth == 0:
            if rc >= roots.size:
                break
            if record:
                root_pops[rc] = npop
            v = roots[rc]
            nxt = found_get(v, fkeys, fvals) if v != 0 else 0
            if nxt != 0 or (v == target and v != 0):
                if record:  # nothing found while recording: the forest would walk v
                    st[0], st[1], st[2], st[3], st[4], st[7], st[10] = rc, depth, ptop, nfound, nwalked, nx, npop
                    return FORK
                if nxt == 0:
                    if 2 * (nfound + 1) > fkeys.size:
                        st[0], st[1], st[2], st[3], st[4], st[7], st[10] = rc, depth, ptop, nfound, nwalked, nx, npop
                        st[6] = 2 * (nfound + 1)
                        return GROW
                    found_add(v, END, fkeys, fvals)
                    nfound += 1
                st[9] = rc
                rc += 1
                st[0], st[1], st[2], st[3], st[4], st[7], st[10] = rc, depth, ptop, nfound, nwalked, nx, npop
                return FOUND
        elif f_cur[f] == f_end[f]:  # every reference of the frame is done: it is a dead end
            ptop = f_end[f - 1] if f > 0 else 0
            depth -= 1
            if depth == 0:
                rc += 1
            continue
        else:
            v = pend[f_cur[f]]
            k = f_cur[f] + AHEAD  # the header of a reference walked soon: the search waits on headers
            if k < f_end[f]:
                u = pend[k]
                if seg_lo[last] <= u < seg_hi[last]:
                    prefetch(mem, reach.word_at(u, last, seg_hi, seg_word))
            if v == target:
                if record:
                    st[0], st[1], st[2], st[3], st[4], st[7], st[10] = rc, depth, ptop, nfound, nwalked, nx, npop
                    return FORK
                if 2 * (nfound + depth + 1) > fkeys.size:
                    st[0], st[1], st[2], st[3], st[4], st[7], st[10] = rc, depth, ptop, nfound, nwalked, nx, npop
                    st[6] = 2 * (nfound + depth + 1)
                    return GROW
                f_cur[f] += 1
                found_add(v, END, fkeys, fvals)
                nfound += 1
                nxt = np.int64(v)
                for k in range(f, -1, -1):  # the frames are the chain (ClrMD's CleanupAndGetResult)
                    found_add(f_obj[k], nxt, fkeys, fvals)
                    nfound += 1
                    nxt = np.int64(f_obj[k])
                for k in range(depth):  # met, never walked: free for later roots
                    for q in range(f_cur[k], f_end[k]):
                        nx -= unsee_object(pend[q], seg_lo, seg_hi, seg_block, seen, xkeys, xvals)
                st[9] = rc
                rc += 1
                depth = 0
                ptop = 0
                st[0], st[1], st[2], st[3], st[4], st[7], st[10] = rc, depth, ptop, nfound, nwalked, nx, npop
                return FOUND
        # walk v: its type first (nothing changes before it is known)
        if v & np.uint64(7) or v == 0:
            s = -1
        elif seg_lo[last] <= v < seg_hi[last]:
            s = last
        else:
            s = reach.segment_in(v, seg_lo, seg_hi, buckets, bucket_base, bucket_shift)
            if s >= 0:
                last = s
        t = NOT_OBJECT
        if s >= 0:
            t = reach.object_type(v, s, mem, seg_hi, seg_word, seg_gap, gap_lo, gap_hi, keys, values, base_sizes,
                            component_sizes)
            if t == UNKNOWN_TYPE:
                st[5] = np.int64(mem[reach.word_at(v, s, seg_hi, seg_word)] & _LOW3)
                st[0], st[1], st[2], st[3], st[4], st[7], st[10] = rc, depth, ptop, nfound, nwalked, nx, npop
                return UNKNOWN
        d0 = 0
        d1 = 0
        if ndep and t >= 0:
            d0 = reach.lower_bound(dep_primary, v)
            d1 = d0
            while d1 < ndep and dep_primary[d1] == v:
                d1 += 1
        if t < 0 or (gc_kind[t] == 0 and d1 == d0):  # not an object, or one that holds nothing: a dead end
            if depth == 0:
                rc += 1
            else:
                f_cur[f] += 1
                if record:
                    pop_addr[npop] = v
                    pop_parent[npop] = f_obj[f] | (_ONE if f == 0 else np.uint64(0))
                    npop += 1
            continue
        at = reach.word_at(v, s, seg_hi, seg_word)
        size = np.int64(base_sizes[t])
        if component_sizes[t] != 0:
            size += component_sizes[t] * np.int64(mem[at + 1] & np.uint64(0xFFFFFFFF))
        need = ptop + (d1 - d0) + refs.slot_bound(at, seg_word[s], size, t, gc_kind, series_first, series_count,
                                                  series_offset, series_size) + 1
        if need > pend.size:
            st[0], st[1], st[2], st[3], st[4], st[7], st[10] = rc, depth, ptop, nfound, nwalked, nx, npop
            st[6] = need
            return PENDING
        if depth > 0:
            f_cur[f] += 1
        nwalked += 1
        # its references: dependent handles' secondaries, then the GCDesc's slots
        a = ptop
        for d in range(d0, d1):
            pend[ptop] = dep_secondary[d]
            ptop += 1
        ptop = refs.object_refs(mem, at, seg_word[s], size, t, gc_kind, series_first, series_count, series_offset,
                                series_size, repeat_start, repeat_first, repeat_items, repeat_count, repeat_skip,
                                pend, ptop)
        outside = 0
        for q in range(a, ptop):  # values outside the heap are counted; the others' seen bits asked for
            r = pend[q]
            if r == 0:
                continue
            u = last if seg_lo[last] <= r < seg_hi[last] else \
                reach.segment_in(r, seg_lo, seg_hi, buckets, bucket_base, bucket_shift)
            if u < 0 or r & np.uint64(7):
                outside += 1
            else:
                prefetch(seen, seg_block[u] + (np.int64((r - seg_lo[u]) >> np.uint64(3)) >> 6))
        if outside and 2 * (nx + outside + 1) > xkeys.size:  # nothing changed yet: grow, then walk again
            ptop = a
            if depth > 0:
                f_cur[f] -= 1
            nwalked -= 1
            st[0], st[1], st[2], st[3], st[4], st[7], st[10] = rc, depth, ptop, nfound, nwalked, nx, npop
            st[6] = nx + outside + 1
            return XGROW
        if record and depth > 0:
            pop_addr[npop] = v
            pop_parent[npop] = f_obj[f] | (_ONE if f == 0 else np.uint64(0))
            npop += 1
        w = a
        hit = np.int64(0)
        for q in range(a, ptop):
            r = pend[q]
            if r == 0:
                continue
            nxt = found_get(r, fkeys, fvals) if nfound else 0  # nothing found yet: no probe
            if nxt != 0:
                hit = np.int64(r)
                break
            u = last if seg_lo[last] <= r < seg_hi[last] else \
                reach.segment_in(r, seg_lo, seg_hi, buckets, bucket_base, bucket_shift)
            if u < 0 or r & np.uint64(7):  # not in the heap: pending all the same (a dead end when walked)
                if reach.open_find(r, xkeys, xvals) >= 0:
                    continue
                reach.open_insert(r, 0, xkeys, xvals)
                nx += 1
                pend[w] = r
                w += 1
                continue
            b = np.int64((r - seg_lo[u]) >> np.uint64(3))
            blk = seg_block[u] + (b >> 6)
            bit = _ONE << np.uint64(b & 63)
            if seen[blk] & bit:
                continue
            if fcut > 0 and fbits[blk] & bit and \
                    np.int64(frank[bit_position(fbits, fprefix, blk, np.int64(b & 63))]) < fcut:
                continue  # a forest's search took it before the first chain: seen
            seen[blk] |= bit
            if w - a < AHEAD:  # among the first walked after this object (the walk waits on headers)
                prefetch(mem, reach.word_at(r, u, seg_hi, seg_word))
            pend[w] = r
            w += 1
        if hit != 0:
            # v holds an object of a chain: v's chain goes on as that one's
            for q in range(a, w):
                nx -= unsee_object(pend[q], seg_lo, seg_hi, seg_block, seen, xkeys, xvals)
            if 2 * (nfound + depth + 2) > fkeys.size:
                # ``found`` sized by what it holds, not by the depth (a deep search would
                # probe a table far larger than the caches for every reference): grow it
                # now, then walk v again (what it met is unseen again, as before the walk)
                ptop = a
                if depth > 0:
                    f_cur[f] -= 1
                    if record:
                        npop -= 1
                nwalked -= 1
                st[0], st[1], st[2], st[3], st[4], st[7], st[10] = rc, depth, ptop, nfound, nwalked, nx, npop
                st[6] = 2 * (nfound + depth + 2)
                return GROW
            found_add(v, hit, fkeys, fvals)
            nfound += 1
            nxt = np.int64(v)
            for k in range(f, -1, -1):
                found_add(f_obj[k], nxt, fkeys, fvals)
                nfound += 1
                nxt = np.int64(f_obj[k])
            for k in range(depth):
                for q in range(f_cur[k], f_end[k]):
                    nx -= unsee_object(pend[q], seg_lo, seg_hi, seg_block, seen, xkeys, xvals)
            st[9] = rc
            rc += 1
            depth = 0
            ptop = 0
            st[0], st[1], st[2], st[3], st[4], st[7], st[10] = rc, depth, ptop, nfound, nwalked, nx, npop
            return FOUND
        ptop = w
        if w == a:  # nothing new to follow
            if depth == 0:
                rc += 1
            continue
        parent = f_obj[f] if depth > 0 else np.uint64(0)
        capacity = _LIST_BYTES - 1 - stored_bytes(v) - stored_bytes(parent)
        if 8 * (w - a) > capacity:  # else one list: the order met (most objects)
            chunk_order(pend, a, w, capacity)
        f_obj[depth] = v
        f_cur[depth] = a
        f_end[depth] = w
        depth += 1
    st[0], st[1], st[2], st[3], st[4], st[7], st[10] = rc, depth, ptop, nfound, nwalked, nx, npop
    return DONE
