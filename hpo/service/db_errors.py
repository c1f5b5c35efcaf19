"""What went wrong with the database, read from an exception and the chain of its causes: an
unreachable server (retry it) or anything else (raise it), in one line for a person."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import optuna
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError, ProgrammingError, SQLAlchemyError

from hpo.errors import causes, is_disk_full

T = TypeVar("T")


def is_connection_error(err: BaseException | None) -> bool:
    """The database could not be reached (restart, network), as opposed to a bad request or a full
    disk (SQLite's "database or disk is full" is an OperationalError too, and waiting does not mend it)."""
    return not is_disk_full(err) and any(
        isinstance(e, OperationalError) or (isinstance(e, DBAPIError) and e.connection_invalidated) for e in causes(err)
    )


def is_concurrent_creation(err: BaseException | None) -> bool:
    """Two processes creating Optuna's tables in one new PostgreSQL database at once (a worker, the
    dashboard and ``hpo launch`` started together): the slower one's CREATE TABLE meets the other's."""
    return any(
        isinstance(e, (IntegrityError, ProgrammingError))
        and ("pg_type_typname_nsp_index" in str(e) or "already exists" in str(e))
        for e in causes(err)
    )


# What a server says while it restarts or just dropped a connection (directly or through PgBouncer),
# unlike a wrong address, database or password, which waiting does not mend.
RESTARTING = (
    "server closed the connection unexpectedly",
    "the database system is starting up",
    "the database system is shutting down",
    "the database system is in recovery mode",
    "terminating connection due to administrator command",
    "server login has been failing",  # PgBouncer, while its server is away
)


def is_server_restarting(err: BaseException | None) -> bool:
    """The server is there but restarting, or dropped the connection: worth waiting for."""
    return is_connection_error(err) and any(m in str(e) for e in causes(err) for m in RESTARTING)


def is_storage_error(err: BaseException | None) -> bool:
    """True when the database failed, also when Optuna's bookkeeping tripped over it (its
    ``_run_trial`` then raises UnboundLocalError from the failed tell)."""
    return any(isinstance(e, (SQLAlchemyError, optuna.exceptions.StorageInternalError)) for e in causes(err))


def describe_error(err: BaseException) -> str:
    """One line that says what the database said (not Optuna's wrapper, not a traceback)."""
    while isinstance(err, optuna.exceptions.StorageInternalError) and err.__cause__ is not None:
        err = err.__cause__  # Optuna's wrapper guesses "invalid data"; the cause says what happened
    message = str(getattr(err, "orig", None) or err).strip()
    if message in ("", "()"):  # the pool's pre-ping failure carries no message
        return "the server closed it"
    return message.splitlines()[0][:200] if message else type(err).__name__


def with_backoff(
    call: Callable[[], T],
    *,
    seconds: float,
    retry_on: Callable[[Exception], bool] = lambda err: True,
    on_retry: Callable[[Exception], None] = lambda err: None,
) -> T:
    """``call()``, retried after 0.5, 1, 2, 4, 5, 5 … s while ``retry_on`` accepts the error and
    ``seconds`` have not passed; the last error is raised."""
    delay, deadline = 0.5, time.monotonic() + seconds
    while True:
        try:
            return call()
        except Exception as err:
            if not retry_on(err) or time.monotonic() + delay > deadline:
                raise
            on_retry(err)
            time.sleep(delay)
            delay = min(delay * 2, 5.0)
