"""Fixtures of the security tests."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.security.support import World, populate

pytest.register_assert_rewrite("tests.security.fuzz_harness")  # imported by its test alone


@pytest.fixture
def world(client: TestClient) -> World:
    """The populated world of :func:`tests.security.support.populate` on the test's app."""
    return populate(client)


@pytest.fixture(scope="module")
def shared_world(shared_client: TestClient) -> World:
    """:func:`world` on the module's ``shared_client``, for its refusal tests."""
    return populate(shared_client)
