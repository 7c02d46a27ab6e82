"""Docker and compose files are checked by reading them (no Docker engine here)."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_compose_file_wires_postgres_and_api() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert set(services) == {"db", "api"}
    db, api = services["db"], services["api"]
    assert db["image"].startswith("postgres:16")
    assert "pg_isready" in " ".join(db["healthcheck"]["test"])
    volume = db["volumes"][0].split(":")[0]
    assert volume in compose["volumes"], "Postgres data must live in a named volume"
    assert api["depends_on"]["db"]["condition"] == "service_healthy"
    url = api["environment"]["DPGATE_DATABASE_URL"]
    assert url.startswith("postgresql+psycopg://") and "@db:5432/" in url
    env = db["environment"]
    assert f"{env['POSTGRES_USER']}:{env['POSTGRES_PASSWORD']}@db:5432/{env['POSTGRES_DB']}" in url
    assert api["build"]["dockerfile"] == "docker/Dockerfile"


def test_dockerfile_is_slim_non_root_and_installs_package() -> None:
    text = (ROOT / "docker" / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.\d+-slim", text, re.M)
    assert re.search(r"^USER (?!root)\S+", text, re.M)
    assert re.search(r"^RUN pip install [^\n]*--no-deps[^\n]* \.", text, re.M)
    assert "dpgate" in text.split("CMD", 1)[1]


def test_image_dependencies_are_pinned() -> None:
    """The image installs exactly docker/constraints.txt: every runtime dependency (and
    the build tools) pinned with ``==``, so two builds install the same thing."""
    text = (ROOT / "docker" / "Dockerfile").read_text()
    assert "pip install --requirement constraints.txt" in text
    lines = (ROOT / "docker" / "constraints.txt").read_text().splitlines()
    pins = {}
    for line in lines:
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"not pinned: {line}"
            pins[name.lower().replace("_", "-")] = version
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for dep in meta["dependencies"]:
        name = re.split(r"[\[>=<]", dep, maxsplit=1)[0].lower()
        assert name in pins, f"{name} is not pinned in docker/constraints.txt"
    assert {"setuptools", "wheel", "psycopg-binary", "psycopg-pool"} <= set(pins)


def test_compose_requires_the_secrets_and_the_image_leaves_out_local_files() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    env = compose["services"]["api"]["environment"]
    for name in ("DPGATE_ADMIN_KEY", "DPGATE_SECRET_KEY"):
        assert env[name].startswith(f"${{{name}:?"), f"{name} must be required, not defaulted"
        assert "change-me" not in env[name]
    ignored = (ROOT / ".dockerignore").read_text().splitlines()
    for pattern in (".git", ".venv", ".env", "*.db", "*-secret.key", "tests"):
        assert pattern in ignored, pattern


def test_pyproject_pins_lower_bounds_and_script() -> None:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = {re.split(r"[\[>=<]", d, maxsplit=1)[0].lower(): d for d in meta["dependencies"]}
    for name in (
        "fastapi",
        "uvicorn",
        "pydantic",
        "pydantic-settings",
        "sqlalchemy",
        "alembic",
        "psycopg",
        "numpy",
        "scipy",
        "h3",
        "opendp",
    ):
        assert ">=" in deps[name], name
    assert deps["sqlalchemy"].startswith("sqlalchemy>=2")
    assert deps["h3"].startswith("h3>=4")
    assert meta["scripts"]["dpgate"] == "app.cli.main:run"


def test_the_analysis_extra_can_plot() -> None:
    """``release.to_geodataframe().plot()`` draws with matplotlib: the extra brings it."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    names = {re.split(r"[\[>=<]", dep, maxsplit=1)[0] for dep in extras["analysis"]}
    assert {"pandas", "geopandas", "matplotlib"} <= names


def test_the_client_is_imported_beside_a_folder_named_dpgate(tmp_path: Path) -> None:
    """A script next to a clone of this repository named ``dpgate`` imports the client,
    not the folder (a namespace package without ``Client``)."""
    clone = tmp_path / "dpgate"
    clone.mkdir()
    (clone / "pyproject.toml").write_text("[project]\nname = 'dpgate'\n")
    (tmp_path / "script.py").write_text("import dpgate\nprint(dpgate.Client.__module__)\n")
    done = subprocess.run(
        [sys.executable, "script.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == "dpgate.client", done.stderr
