"""Fixtures of the integration tests."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.integration.grid_fixtures import load_two_grids


@pytest.fixture
def grids(client: TestClient) -> tuple[int, str, str]:
    """:func:`tests.integration.grid_fixtures.load_two_grids` on the test's app."""
    return load_two_grids(client)


@pytest.fixture
def own_grids(shared_client: TestClient) -> tuple[int, str, str]:
    """``grids`` in a dataset of the test's own on the module's ``shared_client``, for tests
    that read and charge that dataset alone (its ids are fresh, so nothing is cached yet)."""
    return load_two_grids(shared_client)
