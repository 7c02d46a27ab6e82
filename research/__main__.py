"""``python -m research <name> --out DIR``: the same as ``dpgate experiments``."""

from __future__ import annotations

from research.runner import main

raise SystemExit(main())
