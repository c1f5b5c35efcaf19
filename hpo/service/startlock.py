"""A cross-process lock around "is there room for another trial? then ask for it".

Held from the count until the new trial exists (the objective releases it first thing), so N
workers never start more than ``n_trials``. PostgreSQL: a session advisory lock on its own
connection (released by the server if the worker dies), taken with ``pg_try_advisory_lock`` and
retried: a waiter holds no connection while it waits. Blocking in ``pg_advisory_lock`` instead pins
one server connection per waiter, and behind PgBouncer in transaction mode 20 waiters on a pool of
20 left the holder no connection to create its trial with (the crowd test deadlocked until
PgBouncer's query_wait_timeout). SQLite: a file lock beside the file (``filelock``, released by the
kernel if the worker dies).
"""

from __future__ import annotations

import contextlib
import hashlib
import random
import time
from typing import Any

from filelock import FileLock
from optuna.storages import RDBStorage
from sqlalchemy import text

from hpo.service.urls import sqlite_path

RETRY_FIRST, RETRY_MAX = 0.02, 0.5  # seconds between two tries of a taken lock: doubling, jittered


def lock_key(study_name: str) -> int:
    return int.from_bytes(hashlib.sha256(f"hpo:{study_name}".encode()).digest()[:8], "big", signed=True)


class StartLock:
    def __init__(self, url: str, storage: RDBStorage, study_name: str) -> None:
        self.key = lock_key(study_name)
        self.path = sqlite_path(url)
        self.storage = storage
        self._conn: Any = None
        self._file = FileLock(f"{self.path}.start.lock", thread_local=False) if self.path is not None else None
        self.waited = 0.0  # seconds the last acquire waited (for the worker's exit line)

    def acquire(self) -> None:
        started = time.monotonic()
        try:
            self._acquire()
        finally:
            self.waited = time.monotonic() - started

    def _acquire(self) -> None:
        if self._file is not None:
            self._file.acquire()
            return
        delay = RETRY_FIRST
        while True:
            conn = self.storage.engine.connect()
            if conn.execute(text("SELECT pg_try_advisory_lock(:key)"), {"key": self.key}).scalar():
                self._conn = conn  # its transaction stays open until release: PgBouncer keeps it on one server
                return
            conn.close()  # ends the transaction: the server connection goes back to the pool while we wait
            time.sleep(delay * random.uniform(0.5, 1.5))
            delay = min(2 * delay, RETRY_MAX)

    def release(self) -> None:
        if self._file is not None and self._file.is_locked:
            self._file.release(force=True)
        if self._conn is not None:
            conn, self._conn = self._conn, None
            with contextlib.suppress(Exception):  # a lost connection released the lock already
                conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": self.key})
            with contextlib.suppress(Exception):
                conn.close()

    def __enter__(self) -> StartLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
