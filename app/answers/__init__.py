"""One DP statistic's answer, shared by single-grid queries and slot releases: the
epsilon it charges, its mechanism's options, its body and schema (with real examples)."""
