"""API keys: roles, hashed storage, per-key epsilon quota."""
