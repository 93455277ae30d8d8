"""Pure parsers of the runtime's encodings, below both readers: ECMA-335 metadata and
portable PDBs, and the GC info the JIT writes. They read bytes and import only errors."""
