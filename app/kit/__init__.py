"""A shared kit every package may use: typed API errors, path ids, strict JSON numbers,
the GC pause."""
