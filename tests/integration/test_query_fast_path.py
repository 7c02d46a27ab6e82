"""A plainly written statistic query (``app.queries.route``) is answered without FastAPI's
parameter solving; it must answer exactly as the usual path does, which the same query
spelled otherwise (percent-encoded, so it takes the usual path) shows."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.queries import route
from app.queries.route import plain_query
from tests.helpers import auth, create_key
from tests.integration.grid_fixtures import analyst


@pytest.mark.parametrize(
    ("query", "parsed"),
    [
        (b"epsilon=0.5", (0.5, None)),
        (b"mechanism=clip&epsilon=1e-3", (0.001, "clip")),
        (b"epsilon=2E1&mechanism=auto", (20.0, "auto")),
        (b"epsilon=0.5&epsilon=0.5", None),  # repeated
        (b"epsilon=0.5&m=2", None),  # an option
        (b"epsilon=1_0", None),
        (b"epsilon=%30.5", None),  # percent-encoded
        (b"epsilon=nan", None),
        (b"epsilon=1e400", None),
        (b"epsilon=-1", None),
        (b"mechanism=clip", None),  # no epsilon
        (b"epsilon=0.5&mechanism=Clip", None),
        (b"epsilon=0.5&", None),
        (b"", None),
    ],
)
def test_only_plain_queries_take_the_fast_path(query: bytes, parsed: object) -> None:
    assert plain_query(query) == parsed


def _percent(text: str) -> str:
    """``text`` with every character percent-encoded: the same query, the usual path."""
    return "".join(f"%{b:02X}" for b in text.encode())


def test_both_paths_answer_alike(
    client: TestClient, grids, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, a, _ = grids
    taken: list[object] = []
    real = route.plain_query
    monkeypatch.setattr(route, "plain_query", lambda q: taken.append(real(q)) or real(q))
    hdr = analyst(client)
    for eps, mech in (("0.25", "clip"), ("0.5", "baseline")):
        fast = client.get(f"/grids/{a}/mean?epsilon={eps}&mechanism={mech}", headers=hdr)
        usual = client.get(f"/grids/{a}/mean?epsilon={_percent(eps)}&mechanism={mech}", headers=hdr)
        assert fast.status_code == usual.status_code == 200, (fast.text, usual.text)
        f, u = fast.json(), usual.json()
        assert (f["cached"], u["cached"]) == (False, True)  # the same query: stored, then served
        assert {k: v for k, v in f.items() if k != "cached"} == {
            k: v for k, v in u.items() if k != "cached"
        }
    assert [t is not None for t in taken] == [True, False, True, False]
    for query in ("epsilon=1000", "epsilon=0.5&mechanism=nope"):  # over the max; no such one
        name, _, value = query.partition("&")[0].partition("=")
        spelled = query.replace(f"{name}={value}", f"{name}={_percent(value)}", 1)
        fast = client.get(f"/grids/{a}/variance?{query}", headers=hdr)
        usual = client.get(f"/grids/{a}/variance?{spelled}", headers=hdr)
        assert fast.status_code == usual.status_code >= 400 and fast.json() == usual.json()
    fast = client.get("/grids/nope/user_mean?epsilon=0.5", headers=hdr)
    assert fast.status_code == 404
    for headers in (
        {"Authorization": ""},
        auth(create_key(client, "viewer")),
    ):  # 401, then 403: the key first
        fast = client.get(f"/grids/{a}/mean?epsilon=0.5", headers=headers)
        usual = client.get(f"/grids/{a}/mean?epsilon={_percent('0.5')}", headers=headers)
        assert fast.status_code == usual.status_code in (401, 403)
        assert fast.json() == usual.json()
