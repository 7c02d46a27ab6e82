"""Single-grid DP mean and variance queries, their cache and their quotes."""
