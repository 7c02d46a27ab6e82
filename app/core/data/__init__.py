"""What the engine reads and returns: one grid's records, public counts, many grids
joined, occupancy, results."""
