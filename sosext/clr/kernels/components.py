"""The reference graph's strongly connected components, and which roots reach an object.

On a leak's heap one component can be most of the heap (an LRU list whose nodes, entries
and items point back at each other). A gcroot from the reversed graph must then visit the
whole component before it knows that a root outside it does not reach the object. With the
components, a breadth-first search over the *condensation* (each component one node; the
giant one is a single step) says which components reach the object's, so which roots do,
and the object-level search (``ancestors_until``) stops once it has reached all of those
roots: what it fixed by then is what the whole search would have fixed, so the chains
are the same.

``components`` is Pearce's space-efficient form of Tarjan's algorithm ("A space-efficient
algorithm for finding strongly connected components", 2016), iterative: one number per
object (its depth-first index while open, its component once closed: the component ids
count down from n - 1 while the indices count up, so the two never meet), a stack of the
open objects that are not their component's root, and a frame per depth (object, edge
cursor, whether it is still a root).
"""
from __future__ import annotations

import numpy as np

from .registry import kernel


@kernel("i8", "i8[]r", "u4[]r", "i4[]", "i4[]", "i4[]", "i8[]", "b1[]")
def components(offsets: np.ndarray, targets: np.ndarray, rindex: np.ndarray, stack: np.ndarray,
               call_node: np.ndarray, call_edge: np.ndarray, call_root: np.ndarray) -> int:
    """Each object's component into ``rindex`` (zeroed, n): 0 for the first component to
    close, and so on (a component closes after every component it reaches). Returns the
    number of components. ``stack``, ``call_*``: n each (only what is used is touched)."""
    n = offsets.size - 1
    index = 1
    c = n - 1
    sp = 0
    for s in range(n):
        if rindex[s] != 0:
            continue
        call_node[0] = s
        call_edge[0] = offsets[s]
        call_root[0] = True
        rindex[s] = index
        index += 1
        depth = 1
        while depth > 0:
            f = depth - 1
            v = call_node[f]
            e = call_edge[f]
            if e < offsets[v + 1]:
                w = np.int64(targets[e])
                call_edge[f] = e + 1
                if rindex[w] == 0:
                    call_node[depth] = w
                    call_edge[depth] = offsets[w]
                    call_root[depth] = True
                    rindex[w] = index
                    index += 1
                    depth += 1
                elif rindex[w] < rindex[v]:
                    rindex[v] = rindex[w]
                    call_root[f] = False
                continue
            if call_root[f]:  # v closes its component: v and the open objects above it on the stack
                index -= 1
                while sp > 0 and rindex[v] <= rindex[stack[sp - 1]]:
                    rindex[stack[sp - 1]] = c
                    sp -= 1
                    index -= 1
                rindex[v] = c
                c -= 1
            else:
                stack[sp] = v
                sp += 1
            depth -= 1
            if depth > 0:
                p = call_node[depth - 1]
                if rindex[v] < rindex[p]:
                    rindex[p] = rindex[v]
                    call_root[depth - 1] = False
    for v in range(n):
        rindex[v] = n - 1 - rindex[v]
    return n - 1 - c


@kernel("i8", "i8[]r", "u4[]r", "i4[]r", "i8[]", "i4[]")
def condense(offsets: np.ndarray, targets: np.ndarray, comp: np.ndarray, croff: np.ndarray,
             csrc: np.ndarray) -> int:
    """The reversed condensation: for every reference between two components, the row of
    the referenced one holds the referencing one. ``croff`` (zeroed, components + 1); with
    an empty ``csrc`` only counts (returns the rows' total), else fills it (a counting sort
    that uses ``croff`` as its cursors, as ``refs.reverse``)."""
    n = offsets.size - 1
    k = croff.size - 1
    if csrc.size == 0:
        total = 0
        for u in range(n):
            cu = comp[u]
            for e in range(offsets[u], offsets[u + 1]):
                cv = comp[targets[e]]
                if cv != cu:
                    croff[cv + 1] += 1
                    total += 1
        return total
    for i in range(k):
        croff[i + 1] += croff[i]
    for u in range(n):
        cu = comp[u]
        for e in range(offsets[u], offsets[u + 1]):
            cv = comp[targets[e]]
            if cv != cu:
                csrc[croff[cv]] = cu
                croff[cv] += 1
    for i in range(k, 0, -1):
        croff[i] = croff[i - 1]
    croff[0] = 0
    return csrc.size


@kernel("i8", "i8[]r", "i4[]r", "i8[]r", "i8[]r", "i8", "i4[]", "i4", "i4[]")
def component_ancestors(croff: np.ndarray, csrc: np.ndarray, dep_secondary: np.ndarray, dep_primary: np.ndarray,
                        start: int, cstamp: np.ndarray, epoch: int, cqueue: np.ndarray) -> int:
    """Every component that reaches component ``start`` gets ``cstamp == epoch`` (dependent
    handles as edges between the components of primary and secondary: ``dep_secondary``
    sorted, ``dep_primary`` beside it). Returns how many."""
    head = 0
    tail = 1
    cqueue[0] = start
    cstamp[start] = epoch
    ndep = dep_secondary.size
    while head < tail:
        c = cqueue[head]
        head += 1
        for e in range(croff[c], croff[c + 1]):
            p = csrc[e]
            if cstamp[p] != epoch:
                cstamp[p] = epoch
                cqueue[tail] = p
                tail += 1
        if ndep:
            lo = 0
            hi = ndep
            while lo < hi:
                mid = (lo + hi) >> 1
                if dep_secondary[mid] < c:
                    lo = mid + 1
                else:
                    hi = mid
            while lo < ndep and dep_secondary[lo] == c:
                p = dep_primary[lo]
                lo += 1
                if cstamp[p] != epoch:
                    cstamp[p] = epoch
                    cqueue[tail] = p
                    tail += 1
    return tail


@kernel("i8", "i8[]r", "u4[]r", "i8[]r", "i8[]r", "i8", "i4[]", "i4[]", "i8", "i4[]", "b1[]", "i8[]r")
def ancestors_until(roff: np.ndarray, sources: np.ndarray, dep_secondary: np.ndarray, dep_primary: np.ndarray,
                    target: int, next_step: np.ndarray, stamp: np.ndarray, epoch: int,
                    queue: np.ndarray, via_dependent: np.ndarray, wanted: np.ndarray) -> int:
    """``refs.ancestors``, stopping as soon as every object of ``wanted`` (sorted, distinct,
    each known to reach the target) has been reached. Returns the objects reached."""
    remaining = wanted.size
    head = 0
    tail = 0
    stamp[target] = epoch
    next_step[target] = -1
    via_dependent[target] = False
    queue[tail] = target
    tail += 1
    if is_wanted(wanted, target):
        remaining -= 1
    ndep = dep_secondary.size
    while head < tail and remaining > 0:
        node = queue[head]
        head += 1
        for e in range(roff[node], roff[node + 1]):
            par = sources[e]
            if stamp[par] != epoch:
                stamp[par] = epoch
                next_step[par] = node
                via_dependent[par] = False
                queue[tail] = par
                tail += 1
                if is_wanted(wanted, par):
                    remaining -= 1
        if ndep:
            lo = 0
            hi = ndep
            while lo < hi:
                mid = (lo + hi) >> 1
                if dep_secondary[mid] < node:
                    lo = mid + 1
                else:
                    hi = mid
            while lo < ndep and dep_secondary[lo] == node:
                par = dep_primary[lo]
                lo += 1
                if stamp[par] != epoch:
                    stamp[par] = epoch
                    next_step[par] = node
                    via_dependent[par] = True
                    queue[tail] = par
                    tail += 1
                    if is_wanted(wanted, par):
                        remaining -= 1
    return tail


@kernel("b1", "i8[]r", "i8")
def is_wanted(wanted: np.ndarray, v: int) -> bool:
    lo = 0
    hi = wanted.size
    while lo < hi:
        mid = (lo + hi) >> 1
        if wanted[mid] < v:
            lo = mid + 1
        else:
            hi = mid
    return lo < wanted.size and wanted[lo] == v
