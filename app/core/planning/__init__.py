"""Plans across grids from public occupancy: Clip-User, the pseudo-user step, the
adaptive partition (docs/math.md §6)."""
