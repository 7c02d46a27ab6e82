"""Time rules: slots, budget windows and profiles (docs/math.md §6.5, §10.4)."""
