"""Clip-User plan previews on a public occupancy (004 Alg. 1); charge nothing."""
