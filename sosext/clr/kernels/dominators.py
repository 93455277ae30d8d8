"""Dominators of the object graph: who would free what.

Object d dominates object v when every path from the roots to v passes through d; the
immediate dominator is the closest such d, and an object's retained size is its own size
plus that of everything it dominates. A virtual root (postorder number ``count``) has an
edge to every root object; a dependent handle is an edge primary -> secondary.

**Why Cooper–Harvey–Kennedy rather than Lengauer–Tarjan.** Lengauer–Tarjan needs about
seven heap-sized arrays (semi, vertex, parent, ancestor, label, bucket, idom) plus the
predecessor lists; the budget is 16 bytes per object. The iterative algorithm of Cooper,
Harvey and Kennedy needs three 32-bit arrays (postorder number per object, object per
postorder number, dominator per postorder number) and converges in two or three passes
on heap graphs, which are nearly trees. It is run *forwards*: each object, in reverse
postorder, intersects its successors' dominators with itself, so the reversed graph
(8 bytes per object plus 4 per reference) is never needed either. Every step keeps each
approximation a superset of the true dominators and the fixpoint is the greatest one, so
the visiting order only changes the speed.

Peak scratch: 16 bytes per object (DFS: postorder, order, cursor, stack; iteration:
postorder, order, dominators; the cursor array becomes ``idom``). Kept: ``idom`` (4) and
``retained`` (8).
"""
from __future__ import annotations

import numpy as np

from .registry import kernel

UNVISITED = -1
ON_STACK = -2


@kernel("i8", "i8[]r", "i8", "i8")
def first_dependent(dep_primary: np.ndarray, u: int, ndep: int) -> int:
    """Position of the first dependent-handle edge whose primary is ``u`` (bisection)."""
    lo = 0
    hi = ndep
    while lo < hi:
        mid = (lo + hi) >> 1
        if dep_primary[mid] < u:
            lo = mid + 1
        else:
            hi = mid
    return lo


@kernel("i8", "i8[]r", "u4[]r", "i8[]r", "i8[]r", "i8[]r", "i4[]", "i4[]", "i4[]", "i4[]")
def dfs_postorder(offsets: np.ndarray, targets: np.ndarray, roots: np.ndarray, dep_primary: np.ndarray,
                  dep_secondary: np.ndarray, post: np.ndarray, order: np.ndarray, cursor: np.ndarray,
                  stack: np.ndarray) -> int:
    """Depth-first from the roots: ``post[v]`` = v's postorder number (``post`` filled
    with -1 by the caller; stays -1 where unreachable) and ``order[k]`` = the object
    numbered k. ``cursor`` (the next edge of each object on the stack, edges after its
    references being its dependent-handle edges) and ``stack`` are scratch of n items.
    Returns how many objects were reached."""
    count = 0
    ndep = dep_primary.size
    for r in roots:
        if r < 0 or post[r] != UNVISITED:
            continue
        post[r] = ON_STACK
        cursor[r] = 0
        stack[0] = r
        top = 1
        while top > 0:
            u = stack[top - 1]
            c = np.int64(cursor[u])
            lo = offsets[u]
            deg = offsets[u + 1] - lo
            nxt = -1
            while c < deg:
                v = targets[lo + c]
                c += 1
                if post[v] == UNVISITED:
                    nxt = np.int64(v)
                    break
            if nxt < 0 and ndep > 0:
                k = first_dependent(dep_primary, u, ndep) + (c - deg)
                while k < ndep and dep_primary[k] == u:
                    v2 = dep_secondary[k]
                    k += 1
                    c += 1
                    if post[v2] == UNVISITED:
                        nxt = v2
                        break
            cursor[u] = c
            if nxt >= 0:
                post[nxt] = ON_STACK
                cursor[nxt] = 0
                stack[top] = nxt
                top += 1
            else:
                top -= 1
                post[u] = count
                order[count] = u
                count += 1
    return count


@kernel("i8", "i4[]r", "i8", "i8")
def intersect(dom: np.ndarray, a: int, b: int) -> int:
    """The nearest common ancestor of postorder numbers ``a`` and ``b`` in the current
    approximation: dominators always have higher numbers than what they dominate."""
    while a != b:
        while a < b:
            a = dom[a]
        while b < a:
            b = dom[b]
    return a


@kernel("i8", "i8[]r", "u4[]r", "i8[]r", "i8[]r", "i8[]r", "i4[]r", "i4[]r", "i8", "i4[]")
def iterate(offsets: np.ndarray, targets: np.ndarray, roots: np.ndarray, dep_primary: np.ndarray,
            dep_secondary: np.ndarray, post: np.ndarray, order: np.ndarray, count: int, dom: np.ndarray) -> int:
    """Immediate dominators by postorder number into ``dom`` (count + 1 items; the virtual
    root is ``count`` and dominates itself). Returns the number of passes."""
    for k in range(count):
        dom[k] = -1
    dom[count] = count
    for r in roots:  # the virtual root's edges: its children have no other dominator
        if r >= 0 and post[r] >= 0:
            dom[post[r]] = count
    ndep = dep_primary.size
    passes = 0
    changed = True
    while changed:
        changed = False
        passes += 1
        for i in range(count - 1, -1, -1):  # reverse postorder
            u = order[i]
            e0 = offsets[u]
            e1 = offsets[u + 1]
            k = first_dependent(dep_primary, u, ndep) if ndep > 0 else 0
            e = e0
            while True:
                if e < e1:
                    b = np.int64(post[targets[e]])
                    e += 1
                elif k < ndep and dep_primary[k] == u:
                    b = np.int64(post[dep_secondary[k]])
                    k += 1
                else:
                    break
                cur = np.int64(dom[b])
                if cur == i or cur == count:
                    continue
                new = np.int64(i) if cur < 0 else intersect(dom, np.int64(i), cur)
                if new != cur:
                    dom[b] = new
                    changed = True
    return passes


@kernel("void", "i4[]r", "i4[]r", "i4[]r", "i8", "i4[]")
def rows_of(post: np.ndarray, order: np.ndarray, dom: np.ndarray, count: int, idom: np.ndarray) -> None:
    """Postorder numbers back to rows: ``idom[v]`` = the row of v's immediate dominator,
    -1 for the virtual root, -2 where unreachable."""
    for v in range(post.size):
        p = post[v]
        if p < 0:
            idom[v] = -2
        else:
            d = dom[p]
            idom[v] = -1 if d == count else order[d]


@kernel("void", "i4[]r", "i4[]r", "i8", "u4[]r", "u8[]")
def accumulate(order: np.ndarray, idom: np.ndarray, count: int, sizes: np.ndarray, retained: np.ndarray) -> None:
    """Retained sizes into ``retained`` (zeroed): in postorder every object comes before its
    dominator, so one pass adds each finished subtree into its parent."""
    for k in range(count):
        v = order[k]
        total = retained[v] + np.uint64(sizes[v])
        retained[v] = total
        d = idom[v]
        if d >= 0:
            retained[d] += total


@kernel("void", "u4[]r", "i4[]r", "u8[]r", "u4[]r", "b1[]r", "u8[]")
def retained_by_type(type_ids: np.ndarray, idom: np.ndarray, retained: np.ndarray, sizes: np.ndarray,
                     keep: np.ndarray, out: np.ndarray) -> None:
    """Per type id (``out``: 3 items per type, zeroed), over reachable objects that ``keep``
    selects (an empty ``keep``: all): their count, their shallow bytes, and the retained bytes
    of those whose immediate dominator is of another type (or the virtual root), so that
    nothing is counted twice."""
    everything = keep.size == 0
    for v in range(type_ids.size):
        d = idom[v]
        if d == -2 or not (everything or keep[v]):
            continue
        t = type_ids[v]
        out[3 * t] += np.uint64(1)
        out[3 * t + 1] += np.uint64(sizes[v])
        if d < 0 or type_ids[d] != t:
            out[3 * t + 2] += retained[v]


@kernel("void", "i4[]r", "u4[]r", "b1[]r", "i8[]r", "i4[]", "i4[]", "i4[]", "i4[]")
def holders(idom: np.ndarray, type_ids: np.ndarray, skip: np.ndarray, rows: np.ndarray, memo: np.ndarray,
            memo_via: np.ndarray, out: np.ndarray, out_via: np.ndarray) -> None:
    """``out[k]``: the holder of object ``rows[k]`` — the first object above it on its
    dominator chain whose type ``skip`` (per type id) does not pass over; the top of the
    chain if every object above is skipped (the object itself when it is the top); -2 for
    an unreachable object. ``out_via[k]``: the object just below the holder on that chain
    (-1 when the object is its own holder), e.g. which slot of a statics array leads to it.
    ``memo``/``memo_via`` (n items, filled with -3 by the caller) remember each passed
    object's answer, so shared chain parts are climbed once."""
    for k in range(rows.size):
        v = rows[k]
        u = idom[v]
        if u == -2:
            out[k] = -2
            out_via[k] = -1
            continue
        if u < 0:
            out[k] = v
            out_via[k] = -1
            continue
        prev = v  # climb: the first non-skipped object, a remembered answer, or the top
        a = u
        while True:
            if memo[a] != -3:
                holder = memo[a]
                via = memo_via[a]
                break
            if not skip[type_ids[a]]:
                holder = a
                via = prev
                break
            d = idom[a]
            if d < 0:
                holder = a
                via = prev
                break
            prev = a
            a = d
        w = u  # second climb: remember the answer along the path
        while w != holder and memo[w] == -3:
            memo[w] = holder
            memo_via[w] = via
            d = idom[w]
            if d < 0:
                break
            w = d
        out[k] = holder
        out_via[k] = via


@kernel("b1", "i4[]r", "u8[]r", "u4[]r")
def check_tree(idom: np.ndarray, retained: np.ndarray, sizes: np.ndarray) -> bool:
    """A dominator tree read back from disk is one: every dominator is in range, reachable,
    not the object itself and retains more than it (which also rules out cycles); an
    unreachable object retains nothing, a reachable one at least its own size."""
    n = idom.size
    for v in range(n):
        d = idom[v]
        if d == -2:
            if retained[v] != 0:
                return False
            continue
        if d < -1 or d >= n or d == v or retained[v] < np.uint64(sizes[v]):
            return False
        if d >= 0 and (idom[d] == -2 or retained[d] <= retained[v]):
            return False
    return True


def _retained_by_type_numpy(type_ids: np.ndarray, idom: np.ndarray, retained: np.ndarray, sizes: np.ndarray,
                            keep: np.ndarray, out: np.ndarray) -> None:
    ntypes = out.size // 3
    reach = idom != -2
    if keep.size:
        reach &= keep
    t = type_ids[reach].astype(np.int64)
    d = idom[reach].astype(np.int64)
    top = d < 0
    top[~top] = type_ids[d[~top]] != t[~top]
    out[0::3] += np.bincount(t, minlength=ntypes).astype(np.uint64)
    out[1::3] += np.bincount(t, weights=sizes[reach].astype(np.float64), minlength=ntypes).astype(np.uint64)
    held = retained[reach][top]
    held_t = t[top]
    for tid in np.unique(held_t).tolist():  # exact u64 sums (float weights would round)
        out[3 * tid + 2] += held[held_t == tid].sum(dtype=np.uint64)


NUMPY_FORMS = {"retained_by_type": _retained_by_type_numpy}
