"""A stored release's CSV and GeoJSON are rendered once and kept (app/releases/exports_store.py):
every later read sends the kept bytes, as zstd frames to a client that takes them."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import text

from app import __version__
from app.releases.formats import ReleaseFormat, release_csv, release_geojson
from app.releases.packing import pack, unpack
from tests.integration.test_public_releases import publish, released

KEPT = ("csv", "geojson")
PLAIN = {"Accept-Encoding": "identity"}


def _kept(client: TestClient, release_id: str) -> dict[str, tuple[str, bytes]]:
    with client.app.state.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT e.format, e.renderer, e.body FROM release_exports e"
                " JOIN slot_releases r ON r.id = e.release_id WHERE r.public_id = :p"
            ),
            {"p": release_id},
        ).all()
    return {fmt: (renderer, bytes(body)) for fmt, renderer, body in rows}


def _set_kept(client: TestClient, release_id: str, fmt: str, **values: object) -> None:
    sets = ", ".join(f"{k} = :{k}" for k in values)
    with client.app.state.engine.begin() as conn:
        conn.execute(
            text(
                f"UPDATE release_exports SET {sets} WHERE format = :f AND release_id ="
                " (SELECT id FROM slot_releases WHERE public_id = :p)"
            ),
            {**values, "f": fmt, "p": release_id},
        )


def test_the_first_read_renders_and_keeps_each_export(client: TestClient) -> None:
    _, rid = released(client)
    assert _kept(client, rid) == {}
    release = client.get(f"/releases/{rid}").json()
    unit = "km/h"
    rendered = {"csv": release_csv(release, unit).encode()}
    first = client.get(f"/releases/{rid}", params={"format": "csv"}, headers=PLAIN)
    assert first.status_code == 200 and first.content == rendered["csv"]
    kept = _kept(client, rid)
    assert set(kept) == {"csv"} and kept["csv"][0] == __version__
    assert unpack(kept["csv"][1]) == rendered["csv"]
    geo = client.get(f"/releases/{rid}", params={"format": "geojson"}, headers=PLAIN)
    assert geo.json() == release_geojson(release, unit)
    assert set(_kept(client, rid)) == set(KEPT)


def test_later_reads_send_the_kept_bytes(client: TestClient) -> None:
    _, rid = released(client)
    for fmt in KEPT:
        client.get(f"/releases/{rid}", params={"format": fmt})
        marker = f"kept {fmt}".encode()
        _set_kept(client, rid, fmt, body=pack(marker))  # proof that it is not rendered again
        plain = client.get(f"/releases/{rid}", params={"format": fmt}, headers=PLAIN)
        assert plain.content == marker and "content-encoding" not in plain.headers
        packed = client.get(
            f"/releases/{rid}", params={"format": fmt}, headers={"Accept-Encoding": "zstd"}
        )
        assert packed.headers["content-encoding"] == "zstd" and packed.content == marker
        assert packed.headers["etag"] != plain.headers["etag"]
        assert packed.headers["content-type"] == plain.headers["content-type"]
    csv = client.get(f"/releases/{rid}", params={"format": "csv"}, headers=PLAIN)
    assert csv.headers["content-disposition"] == f'inline; filename="release-{rid}.csv"'


def test_an_export_another_version_rendered_is_rendered_again(client: TestClient) -> None:
    _, rid = released(client)
    right = client.get(f"/releases/{rid}", params={"format": "csv"}, headers=PLAIN).content
    _set_kept(client, rid, "csv", body=pack(b"stale"), renderer="0.0.0-old")
    again = client.get(f"/releases/{rid}", params={"format": "csv"}, headers=PLAIN)
    assert again.content == right
    assert _kept(client, rid)["csv"] == (__version__, pack(right))


def test_publishing_renders_the_exports_before_the_first_reader(client: TestClient) -> None:
    _, rid = released(client)
    publish(client, rid, public=False)
    assert _kept(client, rid) == {}
    publish(client, rid)  # its background task has run when the client returns
    kept = _kept(client, rid)
    assert set(kept) == {f.value for f in (ReleaseFormat.csv, ReleaseFormat.geojson)}
    anonymous = TestClient(client.app)
    for fmt in KEPT:
        resp = anonymous.get(f"/releases/{rid}", params={"format": fmt}, headers=PLAIN)
        assert resp.status_code == 200 and resp.content == unpack(kept[fmt][1])
        assert resp.headers["cache-control"] == "public, no-cache"


def test_kept_exports_go_with_their_release(client: TestClient) -> None:
    _, rid = released(client)
    publish(client, rid)
    assert len(_kept(client, rid)) == 2
    with client.app.state.engine.begin() as conn:
        conn.execute(text("DELETE FROM slot_releases WHERE public_id = :p"), {"p": rid})
        assert conn.execute(text("SELECT count(*) FROM release_exports")).scalar() == 0
