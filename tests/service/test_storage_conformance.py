"""The storage hpo opens passes Optuna's own storage conformance suite (``StorageTestCase``, shipped
in the wheel): on an SQLite file, plain and with a heartbeat (PostgreSQL: the integration tier). And
it pickles into a working storage, as multiprocessing, joblib or Dask would ship it."""

from __future__ import annotations

import multiprocessing
import pickle
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
from optuna.testing.pytest_storages import StorageTestCase

from hpo.service.storage import Heartbeat, ResilientStorage, open_storage

HEARTBEATS = {"plain": None, "heartbeat": Heartbeat(interval=1, grace_period=2, max_retries=1)}


@pytest.fixture(params=sorted(HEARTBEATS))
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ResilientStorage]:
    opened = open_storage(f"sqlite:///{tmp_path / 'conformance.db'}", HEARTBEATS[request.param])
    yield opened
    opened.engine.dispose()


class TestSqliteStorage(StorageTestCase):
    """Every one of Optuna's storage tests, against ``open_storage`` on an SQLite file."""


def count_trials(storage: ResilientStorage, name: str) -> int:
    """In a spawned process: the unpickled storage reads the study and writes a trial."""
    study = optuna.load_study(study_name=name, storage=storage)
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)
    return len(study.trials)


def test_a_pickled_storage_keeps_its_settings_and_works_in_a_spawned_process(tmp_path: Path) -> None:
    storage = open_storage(f"sqlite:///{tmp_path / 'p.db'}", HEARTBEATS["heartbeat"], outage_seconds=7.0)
    study = optuna.create_study(study_name="shipped", storage=storage)
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    copy = pickle.loads(pickle.dumps(storage))
    assert isinstance(copy, ResilientStorage) and copy.outage_seconds == 7.0
    assert copy.heartbeat_interval == 1 and copy.retrying(lambda: 3, "a call") == 3
    assert len(optuna.load_study(study_name="shipped", storage=copy).trials) == 2
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        assert pool.apply(count_trials, (storage, "shipped")) == 3
