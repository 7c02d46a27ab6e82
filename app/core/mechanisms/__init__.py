"""The mechanisms: each one's sensitivity, bias bound and interval (docs/math.md §2–§5,
§11), their registry and `auto`."""
