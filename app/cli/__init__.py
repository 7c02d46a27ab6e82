"""The `dpgate` command: serving, the demo, keys, budgets, ingestion and publishing."""
