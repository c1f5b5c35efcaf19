"""Optuna's storage conformance suite (``StorageTestCase``) against ``open_storage`` on the throwaway
PostgreSQL server, plain and with a heartbeat: a fresh database per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from optuna.testing.pytest_storages import StorageTestCase

from hpo.service.storage import ResilientStorage, open_storage
from hpo.service.urls import resolve_url
from tests.service.test_storage_conformance import HEARTBEATS


@pytest.fixture(params=sorted(HEARTBEATS))
def storage(request: pytest.FixtureRequest, pg_url: str) -> Iterator[ResilientStorage]:
    opened = open_storage(resolve_url(pg_url), HEARTBEATS[request.param])
    yield opened
    opened.engine.dispose()


class TestPostgresStorage(StorageTestCase):
    """Every one of Optuna's storage tests, against ``open_storage`` on PostgreSQL."""
