"""The packages of ``app`` form layers: no two packages import each other, even through
others or inside a function (issue 14: queries and releases did, and keys and the ledger).

A package's router (``endpoints.py``) is its own node on top: it may call any service
(the keys router asks the ledger what a key spent), and nothing imports a router but
``app/main.py``."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

APP = Path(__file__).resolve().parents[2] / "app"
#: Modules that wire the packages together (app/main.py and the like are top-level
#: modules, not package nodes; the registry of every table is ``migrations/models.py``).
WIRING: set[Path] = set()


def _node(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "app" or len(parts) < 2 or not (APP / parts[1]).is_dir():
        return None
    return f"{parts[1]}.endpoints" if parts[2:3] == ["endpoints"] else parts[1]


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def package_graph() -> dict[str, set[str]]:
    """Each package of ``app`` (and each router) → the packages of ``app`` it imports."""
    graph: dict[str, set[str]] = {}
    for path in APP.rglob("*.py"):
        if len(path.relative_to(APP).parts) < 2 or path in WIRING:
            continue  # they import every package on purpose
        here = _node("app." + ".".join(path.relative_to(APP).with_suffix("").parts))
        assert here is not None
        targets = {_node(m) for m in _imports(path)}
        graph.setdefault(here, set()).update(t for t in targets if t and t != here)
    return graph


def test_packages_import_each_other_one_way_only() -> None:
    graph = package_graph()
    assert {"queries", "releases", "answers", "keys", "ledger", "keys.endpoints"} <= set(graph)
    try:
        order = list(TopologicalSorter(graph).static_order())
    except CycleError as exc:
        raise AssertionError(f"import cycle between app packages: {exc.args[1]}") from None
    assert order.index("answers") < order.index("releases") < order.index("queries")
    assert order.index("keys") < order.index("ledger")


def test_no_package_imports_a_router() -> None:
    graph = package_graph()
    assert not [(a, b) for a, targets in graph.items() for b in targets if b.endswith("endpoints")]


def test_the_numeric_core_imports_no_other_package() -> None:
    assert package_graph()["core"] == set()
