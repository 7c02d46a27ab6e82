"""The release path cannot reach numpy's or the ``random`` module's (non-cryptographic)
generators: statically (no such call in app code, no import path from the service to
a seeded generator) and at run time (every release runs with them poisoned)."""

from __future__ import annotations

import ast
import functools
import math
import random
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.core import MEAN_MECHANISMS, VARIANCE_MECHANISMS
from research.noise import SeededNoise
from tests.security.support import ADMIN, World

APP = Path(__file__).resolve().parents[2] / "app"

# Data generators for demos and experiments: they take a seeded numpy Generator on
# purpose and must never be reachable from the service (checked below).
SEEDED_ON_PURPOSE = ("app.synth", "app.cli.demo")  # app.cli.demo covers app.cli.demo_city


# ----------------------------------------------------------- static import check


def _modules() -> dict[str, Path]:
    out = {}
    for path in APP.rglob("*.py"):
        parts = path.relative_to(APP.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


@functools.cache  # parsed once per process: three tests read the same files
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def _randomness_uses(tree: ast.AST) -> list[str]:
    """Imports of ``random`` / ``numpy.random`` and ``np.random`` / ``.rvs`` uses."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "random" or alias.name.startswith("numpy.random"):
                    found.append(f"{node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if mod == "random" or mod.startswith("numpy.random"):
                found.append(f"{node.lineno}: from {mod} import ...")
            if mod in ("numpy", "scipy") and any(a.name == "random" for a in node.names):
                found.append(f"{node.lineno}: from {mod} import random")
        elif isinstance(node, ast.Attribute):
            if (
                node.attr == "random"
                and isinstance(node.value, ast.Name)
                and node.value.id in ("np", "numpy")
            ):
                found.append(f"{node.lineno}: {node.value.id}.random")
            if node.attr in ("rvs", "random_state"):
                found.append(f"{node.lineno}: .{node.attr}")
    return found


def _imports(tree: ast.AST, modules: dict[str, Path]) -> set[str]:
    """App modules imported anywhere in ``tree`` (function-level imports included)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name.startswith("app"):
                out.add(name)
    return out


def test_no_numpy_or_random_randomness_in_app_code() -> None:
    modules = _modules()
    assert "app.core.noise.laplace" in modules and "app.main" in modules
    offenders = {}
    for name, path in sorted(modules.items()):
        if name.startswith(SEEDED_ON_PURPOSE):
            continue
        uses = _randomness_uses(_tree(path))
        if uses:
            offenders[name] = uses
    assert not offenders, offenders
    # the detector does detect (control): the experiments' seeded source is flagged
    assert _randomness_uses(ast.parse("import numpy as np\nnp.random.default_rng(1)"))
    assert _randomness_uses(ast.parse("from random import random"))


def _non_opendp_randomness(tree: ast.AST) -> list[str]:
    """Uses of ``secrets`` / ``random`` imports and of ``urandom``, ``randbits`` or the old
    ``exponential_choice`` draw."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name in ("secrets", "random")]
        elif isinstance(node, ast.ImportFrom) and node.module in ("secrets", "random"):
            found.append(f"from {node.module}")
        elif isinstance(node, ast.Attribute) and node.attr in (
            "urandom", "randbits", "exponential_choice",
        ):  # fmt: skip
            found.append(node.attr)
    return found


def test_release_randomness_is_opendp_only() -> None:
    """The mechanisms' randomness is OpenDP's: no module of ``app.core`` draws from
    ``secrets``, ``os.urandom`` or ``random`` (the inverse-CDF draw from ``secrets``
    uniforms is gone), and a noise source offers Laplace and noisy_max only."""
    from app.core.noise import laplace as noise

    modules = _modules()
    core_modules = [name for name in modules if name.startswith("app.core")]
    assert "app.core.noise.laplace" in core_modules
    assert "app.core.mechanisms.interval" in core_modules
    for name in core_modules:
        assert not _non_opendp_randomness(_tree(modules[name])), name
    for gone in ("uniform", "exponential_choice", "choose_index"):
        assert not hasattr(noise.OpenDPNoise, gone) and not hasattr(noise, gone)
        assert not hasattr(noise.NoiseSource, gone) and not hasattr(SeededNoise, gone)
    # the detector does detect (controls)
    assert _non_opendp_randomness(ast.parse("import secrets\nx = secrets.randbits(53)"))
    assert _non_opendp_randomness(ast.parse("import os\nos.urandom(8)"))
    assert _non_opendp_randomness(ast.parse("src.exponential_choice([0.0])"))


def test_the_service_cannot_reach_seeded_generators() -> None:
    """No module reachable from the ASGI app (through any import, even inside a
    function) is a seeded generator or uses one."""
    modules = _modules()
    trees = {name: _tree(path) for name, path in modules.items()}
    reach, todo = set(), ["app.main", "app.cli.main"]
    while todo:
        name = todo.pop()
        if name in reach:
            continue
        reach.add(name)
        todo.extend(_imports(trees[name], modules) - reach)
    assert {"app.core.noise.laplace", "app.queries.service", "app.releases.service"} <= reach
    service = reach - {"app.cli.main"} - {m for m in reach if m.startswith(SEEDED_ON_PURPOSE)}
    for name in service:
        assert not _randomness_uses(trees[name]), name
    # app.cli.main reaches the demo and the experiments (their own commands), app.main must not
    reach_main, todo = set(), ["app.main"]
    while todo:
        name = todo.pop()
        if name not in reach_main:
            reach_main.add(name)
            todo.extend(_imports(trees[name], modules) - reach_main)
    assert not [m for m in reach_main if m.startswith(SEEDED_ON_PURPOSE)], reach_main


# ------------------------------------------------------------------ runtime check


def _poison(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Replace every public callable of ``numpy.random`` and every module-level generator
    function of ``random`` with one that fails the test."""
    patched = []

    def make(name: str):
        def refuse(*args: object, **kwargs: object) -> None:
            raise AssertionError(f"the release path called {name}")

        return refuse

    for name in dir(np.random):
        if not name.startswith("_") and callable(getattr(np.random, name)):
            monkeypatch.setattr(np.random, name, make(f"numpy.random.{name}"))
            patched.append(f"numpy.random.{name}")
    for name in (
        "random", "uniform", "randint", "randrange", "choice", "choices", "shuffle", "sample",
        "gauss", "normalvariate", "expovariate", "betavariate", "getrandbits", "seed",
        "triangular", "lognormvariate", "vonmisesvariate", "gammavariate", "paretovariate",
        "weibullvariate", "binomialvariate",
    ):  # fmt: skip
        if hasattr(random, name):
            monkeypatch.setattr(random, name, make(f"random.{name}"))
            patched.append(f"random.{name}")
    monkeypatch.setattr(random.Random, "random", make("random.Random.random"))
    return patched


def test_every_release_runs_without_numpy_or_random(
    client: TestClient, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    patched = _poison(monkeypatch)
    assert {"numpy.random.default_rng", "numpy.random.Generator", "random.random"} <= set(patched)
    with pytest.raises(AssertionError):
        np.random.default_rng(0)
    with pytest.raises(AssertionError):
        random.random()
    grid = world.grid_ids[0]
    for mech in sorted(MEAN_MECHANISMS):
        resp = client.get(f"/grids/{grid}/mean", params={"epsilon": 0.2, "mechanism": mech})
        assert resp.status_code == 200, (mech, resp.text)
        assert math.isfinite(resp.json()["estimate"])
    for mech in sorted(VARIANCE_MECHANISMS):
        resp = client.get(f"/grids/{grid}/variance", params={"epsilon": 0.2, "mechanism": mech})
        assert resp.status_code == 200, (mech, resp.text)
    for clip_user in (False, True):
        resp = client.post(
            f"/datasets/{world.dataset_id}/releases",
            json={"slot_start": world.slot_start, "epsilon": 0.1, "clip_user": clip_user},
            headers=ADMIN,
        )
        assert resp.status_code == 200, resp.text
        assert all(math.isfinite(g["mean"]["estimate"]) for g in resp.json()["grids"])
    preview = client.post(
        "/plans/preview",
        json={"value_bound": 10, "epsilon": 1, "occupancy": [["g", "u", 3], ["g", "v", 1]]},
    )
    assert preview.status_code == 200, preview.text
