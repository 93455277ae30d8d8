"""GC roots and what they keep alive: handles, stacks, statics, root paths, the reference graph,
liveness, dominators and retention."""
