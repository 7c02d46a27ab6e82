"""A statistic query's string is read once (``app.queries.endpoints._read_query``): its 400s
are those of a declared float ``Query``, given before the grid is looked up, after the key,
and charge nothing."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.helpers import auth
from tests.integration.grid_fixtures import CELL_A, load, make_dataset

GRID_A = {f"a{i}": [float(i % 9 + 1)] * (1 + i % 3) for i in range(12)}
NOT_A_NUMBER = "Input should be a valid number, unable to parse string as a number"


def _message(resp) -> str:
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["code"] == "invalid_request"
    return resp.json()["error"]["message"]


@pytest.mark.parametrize("statistic", ["mean", "variance", "user_mean"])
def test_epsilon_is_read_as_a_declared_float(pg_client: TestClient, statistic: str) -> None:
    ds = make_dataset(pg_client)
    grid = load(pg_client, ds, {CELL_A: GRID_A})[CELL_A]
    for where in (grid, "nosuchgrid"):  # refused before the grid is looked up
        path = f"/grids/{where}/{statistic}"
        assert _message(pg_client.get(path)) == "query.epsilon: Field required"
        for sent in ("abc", "", "0x10", "0,5", "\uff11", "true"):
            message = _message(pg_client.get(path, params={"epsilon": sent}))
            assert message == f'query.epsilon: {NOT_A_NUMBER} (sent "{sent}")'.replace(
                "\uff11", "\\uff11"
            )
        repeated = pg_client.get(f"{path}?epsilon=0.5&epsilon=0.5")
        assert _message(repeated) == "parameter given more than once: epsilon"
    path = f"/grids/{grid}/{statistic}"
    assert "finite number > 0" in _message(pg_client.get(path, params={"epsilon": "nan"}))
    assert pg_client.get(path, params={"epsilon": "abc"}, headers=auth("nope")).status_code == 401
    assert pg_client.get(f"/datasets/{ds}/budget").json()["max_spent"] == 0
    answer = pg_client.get(path, params={"epsilon": " 0.5 ", "mechanism": "auto"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["epsilon"] == 0.5 and answer.json()["requested_mechanism"] == "auto"
    assert pg_client.get(path, params={"epsilon": "0.5"}).json()["cached"] is True
