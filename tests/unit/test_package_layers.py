"""The packages of ``app`` form layers: no two import each other, even through others or
inside a function, and no module imports itself back through others.

A node is a package of ``app`` (each subpackage of ``app.core`` is one of its own), a
loose module of ``app`` (``app/main.py``, ``app/config.py``), or a package's router
(``endpoints.py``), which is its own node on top: it may call any service (the keys
router asks the ledger what a key spent), and nothing imports a router but
``app/main.py``."""

from __future__ import annotations

import ast
import functools
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

APP = Path(__file__).resolve().parents[2] / "app"


def _node(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "app" or len(parts) < 2:
        return None
    if not (APP / parts[1]).is_dir():
        return parts[1] if (APP / f"{parts[1]}.py").is_file() else None
    if parts[1] == "core" and len(parts) > 2 and (APP / "core" / parts[2]).is_dir():
        return f"core.{parts[2]}"
    return f"{parts[1]}.endpoints" if parts[2:3] == ["endpoints"] else parts[1]


def _module(path: Path) -> str:
    name = "app." + ".".join(path.relative_to(APP).with_suffix("").parts)
    return name.removesuffix(".__init__")


@functools.cache  # parsed once per process: the four tests read the same files
def _imports(path: Path) -> frozenset[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return frozenset(found)


def package_graph() -> dict[str, set[str]]:
    """Each node of ``app`` → the nodes of ``app`` it imports."""
    graph: dict[str, set[str]] = {}
    for path in APP.rglob("*.py"):
        here = _node(_module(path))
        if here is None:  # app/__init__.py
            continue
        targets = {_node(m) for m in _imports(path)}
        graph.setdefault(here, set()).update(t for t in targets if t and t != here)
    return graph


def module_graph() -> dict[str, set[str]]:
    """Each module of ``app`` → the modules of ``app`` it imports (a package's
    ``__init__`` re-exporting its own modules is not a circle)."""
    paths = {_module(p): p for p in APP.rglob("*.py")}

    def resolve(name: str) -> str | None:
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        targets = {resolve(name) for name in _imports(path)}
        graph[module] = {t for t in targets if t and t != module and not t.startswith(module + ".")}
    return graph


def test_packages_import_each_other_one_way_only() -> None:
    graph = package_graph()
    assert {"queries", "releases", "answers", "keys", "ledger", "keys.endpoints"} <= set(graph)
    assert {"main", "config", "http", "kit", "cli", "time"} <= set(graph)
    try:
        order = list(TopologicalSorter(graph).static_order())
    except CycleError as exc:
        raise AssertionError(f"import cycle between app packages: {exc.args[1]}") from None
    assert order.index("answers") < order.index("releases") < order.index("queries")
    assert order.index("keys") < order.index("ledger")
    assert order.index("kit") < order.index("datasets") < order.index("http")


def test_no_module_imports_itself_back() -> None:
    try:
        TopologicalSorter(module_graph()).prepare()
    except CycleError as exc:
        raise AssertionError(f"import circle between app modules: {exc.args[1]}") from None


def test_no_package_imports_a_router() -> None:
    graph = package_graph()
    importers = {a for a, targets in graph.items() for b in targets if b.endswith("endpoints")}
    assert importers <= {"main"}


def test_the_numeric_core_imports_no_other_package_and_has_layers_of_its_own() -> None:
    graph = package_graph()
    core = [node for node in graph if node.split(".")[0] == "core"]
    for node in core:
        assert {t.split(".")[0] for t in graph[node]} <= {"core"}, node
    layers = ["core.data", "core.noise", "core.mechanisms", "core.planning", "core.engine"]
    for lower, node in enumerate(layers):
        above = set(layers[lower + 1 :]) | {"core"}
        assert not graph.get(node, set()) & above, f"{node} imports a layer above it"
