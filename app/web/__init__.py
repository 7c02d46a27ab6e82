"""Pages served to a browser: the API docs and the release map (all assets local)."""
