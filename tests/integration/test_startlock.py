"""The start lock: one "room for another trial? then ask for it" at a time, across threads, processes
and hosts (the trial bookkeeping it protects is tested in the default tier, tests/service/test_trial_bookkeeping.py)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import text

from hpo.service.startlock import StartLock
from hpo.service.storage import open_storage
from hpo.service.urls import resolve_url


def held_by_other(url: str, name: str, holder: StartLock, *, wait: float = 0.6) -> bool:
    """Whether a second lock on ``name`` (its own storage, as another worker) waits while ``holder``
    holds its lock, and gets it once ``holder`` releases."""
    other = StartLock(url, open_storage(url), name)
    got = threading.Event()

    def take() -> None:
        with other:
            got.set()

    thread = threading.Thread(target=take, daemon=True)
    thread.start()
    blocked = not got.wait(wait)
    holder.release()
    assert got.wait(10), "the second lock never got the lock after the first released it"
    thread.join(10)
    return blocked


def test_the_sqlite_start_lock_lets_one_worker_count_at_a_time(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hpo.db'}"
    lock = StartLock(url, open_storage(url), "s")
    lock.acquire()
    assert held_by_other(url, "s", lock)
    lock.release()  # a second release (the objective released it first thing) is harmless


@pytest.mark.parametrize("same_study", [True, False])
def test_the_postgres_start_lock_is_per_study(pg_url: str, same_study: bool) -> None:
    pg_url = resolve_url(pg_url)
    storage = open_storage(pg_url)
    lock = StartLock(pg_url, storage, "a")
    lock.acquire()
    assert held_by_other(pg_url, "a" if same_study else "b", lock) is same_study


def test_a_dead_workers_postgres_start_lock_is_released_by_the_server(pg_url: str) -> None:
    pg_url = resolve_url(pg_url)
    lock = StartLock(pg_url, open_storage(pg_url), "a")
    lock.acquire()
    pid = lock._conn.execute(text("SELECT pg_backend_pid()")).scalar()
    with open_storage(pg_url).engine.connect() as admin:  # the worker's connection dies with it
        admin.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    started = time.monotonic()
    with StartLock(pg_url, open_storage(pg_url), "a"):
        assert time.monotonic() - started < 5
    lock.release()  # releasing a lock whose connection died says nothing and raises nothing
