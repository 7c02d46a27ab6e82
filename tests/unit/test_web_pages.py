"""The pages' HTML and packaging, without a browser (tests/browser renders them)."""

from __future__ import annotations

import base64
import hashlib
import re
import tomllib
from fnmatch import fnmatch
from pathlib import Path

from fastapi.testclient import TestClient

from app.web.endpoints import STATIC_DIR

ROOT = Path(__file__).resolve().parents[2]
ASSET_URL = re.compile(r"""(?:src|href)=["']([^"']+)["']""")


def test_every_static_file_ships_in_the_package() -> None:
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["app"]
    files = [p.relative_to(ROOT / "app").as_posix() for p in STATIC_DIR.rglob("*") if p.is_file()]
    assert "static/map/map.js" in files
    missing = [f for f in files if not any(fnmatch(f, pat) for pat in patterns)]
    assert not missing, f"add these to [tool.setuptools.package-data] app: {missing}"


def test_docs_load_only_local_assets_and_allow_only_their_own_script(
    client: TestClient,
) -> None:
    resp = client.get("/docs")
    assert resp.status_code == 200
    urls = ASSET_URL.findall(resp.text)
    assert urls and all(u.startswith("/") and not u.startswith("//") for u in urls), urls
    for url in urls:
        assert client.get(url).status_code == 200, url
    (inline,) = re.findall(r"<script>(.*?)</script>", resp.text, re.S)
    digest = base64.b64encode(hashlib.sha256(inline.encode()).digest()).decode()
    csp = resp.headers["content-security-policy"]
    assert f"'sha256-{digest}'" in csp and "http" not in csp
    assert client.get("/redoc").status_code == 404  # no packaged ReDoc: not served


def test_map_page_loads_only_local_assets(client: TestClient) -> None:
    resp = client.get("/map")
    urls = ASSET_URL.findall(resp.text)
    # the catalogue (/) is the one link out, besides its own assets
    assert set(urls) == {"/", "/static/favicon.svg", "/static/map/map.css", "/static/map/map.js"}
    for url in urls:
        assert client.get(url).status_code == 200, url
    # A page like /docs: described in the API description, not an operation.
    spec = client.get("/openapi.json").json()
    assert "/map" not in spec["paths"] and "`/map#release=" in spec["info"]["description"]


def test_static_files_do_not_escape_their_folder(client: TestClient) -> None:
    for path in ("/static/../main.py", "/static/%2e%2e/main.py", "/static/swagger-ui/../../cli.py"):
        resp = client.get(path)
        assert resp.status_code == 404 and resp.json()["error"]["code"] == "not_found", path
