"""The GC heap: segments and regions, the object walk and its index, objects and their values."""
