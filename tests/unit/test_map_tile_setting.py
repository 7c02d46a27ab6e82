"""``DPGATE_MAP_TILE_URL``: off by default; only a plain http(s) tile template is taken."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.config import Settings
from app.web.endpoints import content_security_policy


def test_off_by_default_and_the_policy_stays_same_origin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("DPGATE_MAP_TILE_URL", raising=False)
    assert Settings(_env_file=None).map_tile_url is None  # type: ignore[call-arg]
    assert "http" not in content_security_policy()


@pytest.mark.parametrize(
    "url",
    [
        "https://tiles.example.org/{z}/{x}/{y}.png",
        "http://10.0.0.5:8080/osm/{z}/{x}/{y}.png?style=light&key=abc",
    ],
)
def test_a_tile_template_is_accepted(url: str) -> None:
    assert Settings(map_tile_url=url).map_tile_url == url


@pytest.mark.parametrize(
    "url",
    [
        "https://tiles.example.org/tile.png",  # no {z}/{x}/{y}
        "ftp://tiles.example.org/{z}/{x}/{y}.png",
        "javascript:alert(1)//{z}/{x}/{y}",
        "//tiles.example.org/{z}/{x}/{y}.png",
        "https://tiles.example.org;script-src *//{z}/{x}/{y}",  # would widen the policy
        "https://tiles.example.org/{z}/{x}/{y}.png' onerror='x",
        "https://tiles.example.org/{z}/{x}/{y} .png",
    ],
)
def test_anything_else_is_refused(url: str) -> None:
    with pytest.raises(ValidationError, match="map_tile_url"):
        Settings(map_tile_url=url)
