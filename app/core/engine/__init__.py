"""Planning and releasing statistics of one grid or many (docs/math.md §9.4.7, §9.4.9)."""
