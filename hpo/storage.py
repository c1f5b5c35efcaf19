"""Where studies live: URL resolution, engine options, heartbeat settings, password redaction.

No URL → an embedded SQLite file in the working directory (WAL journal, generous busy timeout) so
several local worker processes share it without "database is locked". PostgreSQL is the deployment.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from hpo.errors import HpoError

STORAGE_ENV = "HPO_STORAGE"
DEFAULT_DB = "hpo.db"
# Per process: 2 pooled + 2 overflow connections. 32 workers × 2 + the dashboard stays well under
# PostgreSQL's default max_connections=100; overflow covers the heartbeat thread and the start lock.
POOL = {"pool_size": 2, "max_overflow": 2, "pool_pre_ping": True, "pool_recycle": 300}


@dataclass(frozen=True)
class Heartbeat:
    interval: int = 30  # seconds between heartbeats of a running trial
    grace_period: int | None = None  # seconds of silence before a trial is stale (2× interval)
    max_retries: int = 2  # re-runs of a stale trial


def resolve_url(url: str | None = None) -> str:
    """``--storage``, else $HPO_STORAGE, else the embedded database ./hpo.db."""
    chosen = url or os.environ.get(STORAGE_ENV) or f"sqlite:///{DEFAULT_DB}"
    try:
        parsed = make_url(chosen)
    except ArgumentError:
        raise HpoError(
            f"cannot parse storage URL {redact(chosen)!r}; expected postgresql://USER:PASSWORD@HOST:5432/DB "
            "or sqlite:///FILE"
        ) from None
    if parsed.drivername in ("postgresql", "postgres"):  # SQLAlchemy 2.1 would pick psycopg 3
        parsed = parsed.set(drivername="postgresql+psycopg2")
        return parsed.render_as_string(hide_password=False)
    if parsed.get_backend_name() not in ("postgresql", "sqlite", "mysql"):
        raise HpoError(f"unsupported storage {redact(chosen)!r}; use postgresql://... or sqlite:///FILE")
    return chosen


def redact(url: str) -> str:
    """The URL with its password replaced by ***; never log or print a URL without this."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparseable URL>"


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def sqlite_path(url: str) -> Path | None:
    parsed = make_url(url)
    return Path(parsed.database) if parsed.get_backend_name() == "sqlite" and parsed.database else None


def engine_kwargs(url: str) -> dict[str, Any]:
    if is_sqlite(url):
        return {"connect_args": {"timeout": 120}}
    return dict(POOL)


def prepare_sqlite(url: str) -> None:
    """WAL lets readers and one writer work at once; it is a property of the file, set once."""
    path = sqlite_path(url)
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path, timeout=120) as conn:
        conn.execute("PRAGMA journal_mode=WAL")


def open_storage(url: str, heartbeat: Heartbeat | None = None) -> RDBStorage:
    """An RDBStorage with pooled, pre-pinged connections; with ``heartbeat``, stale trials are
    failed and retried (only inside ``study.optimize``)."""
    beat: dict[str, Any] = {}
    if heartbeat is not None:
        beat = {
            "heartbeat_interval": heartbeat.interval,
            "grace_period": heartbeat.grace_period,
            "heartbeat_stale_trial_callback": RetryHeartbeatStaleTrialCallback(max_retry=heartbeat.max_retries),
        }
    try:
        if is_sqlite(url):
            prepare_sqlite(url)
        return RDBStorage(url, engine_kwargs=engine_kwargs(url), **beat)
    except (SQLAlchemyError, sqlite3.Error, optuna.exceptions.StorageInternalError) as err:
        reason = str(getattr(err, "orig", None) or err).strip().splitlines()[0]
        raise HpoError(f"cannot open storage {redact(url)}: {redact_text(reason, url)}") from None


def redact_text(text: str, url: str) -> str:
    password = make_url(url).password
    return text.replace(str(password), "***") if password else text


def retry_callback(storage: RDBStorage) -> RetryHeartbeatStaleTrialCallback | None:
    callback = storage.get_heartbeat_stale_trial_callback()
    return callback if isinstance(callback, RetryHeartbeatStaleTrialCallback) else None
