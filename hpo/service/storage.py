"""The storage a study lives in: engine options, and a storage that rides out database outages
(URLs and redaction: :mod:`hpo.service.urls`; reading errors: :mod:`hpo.service.db_errors`).

No URL → an embedded SQLite file in the working directory (WAL journal, generous busy timeout) so
several local worker processes share it without "database is locked". PostgreSQL is the deployment.

A database restart must not cost healthy trials anything. :class:`ResilientStorage` therefore
* retries idempotent reads and writes (reports, attributes, heartbeats) through a connection outage
  with backoff, for up to ``outage_seconds``;
* keeps heartbeats alive: a failed heartbeat is retried and logged, never ends the heartbeat thread
  (Optuna's thread dies on the first exception);
* after each heartbeat, checks that its trial is still RUNNING; if another worker failed it as stale,
  :meth:`is_lost` says so, and the trial stops training at its next step; before each checkpoint
  save :meth:`still_owned` asks the database at once, so a worker whose trial was failed between
  two heartbeats never writes the checkpoint its retry resumes from;
* does not judge staleness right after an outage: while the server has been up for less than the
  grace period (or this process saw the database unreachable that recently), heartbeats that
  lapsed during the outage are not held against their trials.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
import warnings
from collections.abc import Callable, Container
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Concatenate, ParamSpec, TypeVar

import optuna
from optuna.distributions import BaseDistribution
from optuna.storages import RDBStorage
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState
from sqlalchemy import event, text
from sqlalchemy.exc import SQLAlchemyError

from hpo.errors import HpoError
from hpo.service.db_errors import (
    describe_error,
    is_concurrent_creation,
    is_connection_error,
    is_server_restarting,
    with_backoff,
)
from hpo.service.optuna_internals import RUNNING_WITHOUT_HEARTBEAT
from hpo.service.trials import RetryStaleTrial
from hpo.service.urls import STORAGE_ENV, is_sqlite, redact, redact_text, sqlite_path
from hpo.spec.rules import HEARTBEAT_INTERVAL, grace_seconds

if TYPE_CHECKING:  # private Optuna names, for the annotations of the storage methods only
    from hpo.service.optuna_internals import FrozenStudy, JSONSerializable

log = logging.getLogger("hpo.storage")

# Per engine: 2 pooled + 2 overflow connections (overflow covers the heartbeat thread and the start
# lock). A worker has two engines; measured, it holds at most 4 connections at once (docs/operations.md).
POOL = {"pool_size": 2, "max_overflow": 2, "pool_pre_ping": True, "pool_recycle": 300}
HEARTBEAT_WARN_EVERY = 60.0  # seconds: a failing heartbeat is said at first, then once a minute
T = TypeVar("T")
P = ParamSpec("P")


@dataclass(frozen=True)
class Heartbeat:
    interval: int = HEARTBEAT_INTERVAL  # seconds between heartbeats of a running trial
    grace_period: int | None = None  # seconds of silence before a trial is stale (default: grace_seconds)
    max_retries: int = 2  # re-runs of a stale trial

    @property
    def grace_seconds(self) -> int:
        return grace_seconds(self.interval, self.grace_period)


def engine_kwargs(url: str) -> dict[str, Any]:
    """SQLite: a long busy timeout. PostgreSQL: the pool, and each connection named after its
    process (``hpo-PID`` in ``pg_stat_activity``), so an operator sees which worker holds what."""
    if is_sqlite(url):
        return {"connect_args": {"timeout": 120}}
    return {**POOL, "connect_args": {"application_name": f"hpo-{os.getpid()}"}}


def prepare_sqlite(url: str) -> None:
    """WAL lets readers and one writer work at once; it is a property of the file, set once."""
    path = sqlite_path(url)
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path, timeout=120) as conn:
        conn.execute("PRAGMA journal_mode=WAL")


class ResilientStorage(RDBStorage):
    """An RDBStorage that survives database outages shorter than ``outage_seconds`` (see above)."""

    _last_lost: ClassVar[float] = -float("inf")  # per process (a worker holds two storages)

    def __init__(self, url: str, *, outage_seconds: float = 120.0, **kwargs: Any) -> None:
        super().__init__(url, **kwargs)
        self.outage_seconds = outage_seconds
        self._lost: set[int] = set()
        self._last_outage = 0.0  # monotonic time this process last saw the database unreachable
        self._lock = threading.Lock()
        self._retrying_here = threading.local()
        self._beat_failing: dict[int, tuple[float, float]] = {}  # trial id: (failing since, last said)
        self._unbeaten: dict[int, dict[int, float]] = {}  # study id → {RUNNING trial id, no beat yet: first seen}
        event.listen(self.engine, "invalidate", self._on_connection_lost)

    def __getstate__(self) -> dict[Any, Any]:
        """Picklable like RDBStorage (which drops its engine): the lock and the thread-local are this
        process's and are made anew on the other side, with the listener on the new engine."""
        state = super().__getstate__()
        del state["_lock"], state["_retrying_here"]
        return state

    def __setstate__(self, state: dict[Any, Any]) -> None:
        super().__setstate__(state)
        self._lock = threading.Lock()
        self._retrying_here = threading.local()
        event.listen(self.engine, "invalidate", self._on_connection_lost)

    def _on_connection_lost(self, _dbapi_conn: Any, _record: Any, err: BaseException | None) -> None:
        """A pooled connection died (server restarted or stopped): an outage, even one so short
        that the pre-ping reconnects before any call fails. Said once per outage."""
        if err is None:  # invalidated on purpose, not lost
            return
        now = self._last_outage = time.monotonic()
        last, ResilientStorage._last_lost = ResilientStorage._last_lost, now
        if now - last > POOL["pool_recycle"]:  # older connections are recycled unpinged: same outage
            log.warning("database connection lost (%s); reconnecting", describe_error(err))

    def retrying(self, call: Callable[[], T], what: str) -> T:
        if getattr(self._retrying_here, "active", False):  # a retried call inside another: the outer one retries
            return call()
        self._retrying_here.active = True
        try:
            return self._retry(call, what)
        finally:
            self._retrying_here.active = False

    def _retry(self, call: Callable[[], T], what: str) -> T:
        warned = [False]

        def unreachable(err: Exception) -> None:
            self._last_outage = time.monotonic()
            if not warned[0]:
                log.warning("database unreachable during %s; retrying for up to %.0f s", what, self.outage_seconds)
                warned[0] = True

        return with_backoff(call, seconds=self.outage_seconds, retry_on=is_connection_error, on_retry=unreachable)

    def record_heartbeat(self, trial_id: int) -> None:
        """Never raises: a heartbeat lost to an outage is retried; the thread lives on."""
        interval = float(self.heartbeat_interval or HEARTBEAT_INTERVAL)

        def beat() -> None:
            super(ResilientStorage, self).record_heartbeat(trial_id)
            self._check_still_running(trial_id)

        try:
            with_backoff(beat, seconds=interval, on_retry=lambda err: self._saw_outage())
        except Exception as err:  # the heartbeat thread must survive anything
            self._saw_outage()
            self._beat_failed(trial_id, err, interval)
            return
        self._beat_recovered(trial_id)

    def _saw_outage(self) -> None:
        self._last_outage = time.monotonic()

    def _beat_failed(self, trial_id: int, err: BaseException, interval: float) -> None:
        """Said at the first failure, then once a minute: an outage is one story, not a line a beat."""
        now = time.monotonic()
        since, said = self._beat_failing.get(trial_id, (now, -float("inf")))
        if now - said >= HEARTBEAT_WARN_EVERY:
            failing = f"failing for {now - since:.0f} s" if now > since else "failed"
            log.warning(
                "heartbeat of trial id %d %s (%s); next try in %.0f s", trial_id, failing, describe_error(err), interval
            )
            said = now
        self._beat_failing[trial_id] = (since, said)

    def _beat_recovered(self, trial_id: int) -> None:
        failing = self._beat_failing.pop(trial_id, None)
        if failing is not None:
            log.info("heartbeat of trial id %d is back after %.0f s", trial_id, time.monotonic() - failing[0])

    def _check_still_running(self, trial_id: int) -> None:
        state = super().get_trial(trial_id).state
        if state != TrialState.RUNNING:  # someone else finished it (failed it as stale): stop running it
            with self._lock:
                if trial_id not in self._lost:
                    log.warning("trial id %d is %s while this worker runs it; stopping it", trial_id, state.name)
                self._lost.add(trial_id)

    def still_owned(self, trial_id: int) -> bool:
        """Asks the database now (the heartbeat asks only once an interval): False once the trial
        was finished by someone else. An unreachable database does not take the trial away."""
        if trial_id in self._lost:
            return False
        try:
            self._check_still_running(trial_id)
        except Exception as err:  # an outage: keep going, the heartbeat will tell
            log.debug("could not check trial id %d (%s)", trial_id, describe_error(err))
        return trial_id not in self._lost

    def set_trial_state_values(self, trial_id: int, state: TrialState, values: Any = None) -> bool:
        """Finishing a trial is retried through an outage; if an attempt committed before its
        connection died, the retry finds the trial already in ``state`` and that is success."""
        if not state.is_finished():
            return super().set_trial_state_values(trial_id, state, values)
        attempts = [0]

        def finish() -> bool:
            attempts[0] += 1
            try:
                return RDBStorage.set_trial_state_values(self, trial_id, state, values)
            except optuna.exceptions.UpdateFinishedTrialError:
                if attempts[0] > 1 and RDBStorage.get_trial(self, trial_id).state == state:
                    return True
                raise

        return self.retrying(finish, "finishing a trial")

    def is_lost(self, trial_id: int) -> bool:
        """True once a heartbeat found this worker's trial failed by someone else (stale)."""
        return trial_id in self._lost

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        grace = grace_seconds(self.heartbeat_interval or HEARTBEAT_INTERVAL, self.grace_period)

        def stale() -> list[int]:
            if time.monotonic() - self._last_outage < grace or self._server_uptime() < grace:
                return []  # heartbeats that lapsed during an outage are not held against their trials
            return RDBStorage._get_stale_trial_ids(self, study_id) + self._never_beaten(study_id, grace)

        return self.retrying(stale, "checking for stale trials")

    def _never_beaten(self, study_id: int, grace: float) -> list[int]:
        """RUNNING trials that this process has seen without a heartbeat for longer than ``grace``:
        their worker died between creating the trial and its first beat (Optuna's check skips them).
        Timed by this process's own clock from when it first saw each, not by the trial's start
        time, which its worker wrote in its own host's local time."""
        with self.engine.connect() as conn:
            ids = set(conn.execute(text(RUNNING_WITHOUT_HEARTBEAT), {"study_id": study_id}).scalars())
        now = time.monotonic()
        with self._lock:
            before = self._unbeaten.get(study_id, {})
            seen = self._unbeaten[study_id] = {i: before.get(i, now) for i in ids}
        return sorted(i for i, first in seen.items() if now - first > grace)

    def _server_uptime(self) -> float:
        if self.engine.dialect.name != "postgresql":
            return float("inf")
        with self.engine.connect() as conn:
            seconds = conn.execute(text("SELECT EXTRACT(EPOCH FROM now() - pg_postmaster_start_time())")).scalar()
        return float(seconds or 0.0)

    def _set_trial_param(
        self,
        trial_id: int,
        param_name: str,
        param_value_internal: float,
        distribution: BaseDistribution,
        previous_distribution: BaseDistribution | None,
    ) -> None:
        """A suggestion (``set_trial_param``, and Optuna's cached storage calls this private one
        directly) is written once per name: retried through an outage, and if an attempt committed
        before its connection died, the retry finds the same value stored and that is success. A
        suggest during a restart failed its trial as an error."""
        attempts = [0]

        def write() -> None:
            attempts[0] += 1
            try:
                RDBStorage._set_trial_param(
                    self, trial_id, param_name, param_value_internal, distribution, previous_distribution
                )
            except optuna.exceptions.StorageInternalError:
                stored = RDBStorage.get_trial(self, trial_id).params if attempts[0] > 1 else {}
                if param_name in stored and stored[param_name] == distribution.to_external_repr(param_value_internal):
                    return
                raise

        self.retrying(write, "set_trial_param")

    # Retried through an outage: every read, and the writes that set a value (not the ones that append);
    # the two private reads: see hpo.service.optuna_internals. Finishing a trial, heartbeats, params:
    # above. Creating studies and trials, setting study system attributes, deleting: not retried.

    def _retried(self, method: Callable[Concatenate[RDBStorage, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
        """RDBStorage's ``method`` on this storage, retried through an outage (:meth:`retrying`)."""
        return self.retrying(lambda: method(self, *args, **kwargs), method.__name__)

    def _get_trials(
        self,
        study_id: int,
        states: Container[TrialState] | None,
        included_trial_ids: set[int],
        trial_id_greater_than: int,
    ) -> list[FrozenTrial]:
        return self._retried(RDBStorage._get_trials, study_id, states, included_trial_ids, trial_id_greater_than)

    def _get_best_trial_id(self, study_id: int, direction: StudyDirection) -> int:
        return self._retried(RDBStorage._get_best_trial_id, study_id, direction)

    def set_study_user_attr(self, study_id: int, key: str, value: Any) -> None:
        self._retried(RDBStorage.set_study_user_attr, study_id, key, value)

    def get_study_id_from_name(self, study_name: str) -> int:
        return self._retried(RDBStorage.get_study_id_from_name, study_name)

    def get_study_name_from_id(self, study_id: int) -> str:
        return self._retried(RDBStorage.get_study_name_from_id, study_id)

    def get_study_directions(self, study_id: int) -> list[StudyDirection]:
        return self._retried(RDBStorage.get_study_directions, study_id)

    def get_study_user_attrs(self, study_id: int) -> dict[str, Any]:
        return self._retried(RDBStorage.get_study_user_attrs, study_id)

    def get_study_system_attrs(self, study_id: int) -> dict[str, Any]:
        return self._retried(RDBStorage.get_study_system_attrs, study_id)

    def get_all_studies(self) -> list[FrozenStudy]:
        return self._retried(RDBStorage.get_all_studies)

    def get_trial_id_from_study_id_trial_number(self, study_id: int, trial_number: int) -> int:
        return self._retried(RDBStorage.get_trial_id_from_study_id_trial_number, study_id, trial_number)

    def get_trial_number_from_id(self, trial_id: int) -> int:
        return self._retried(RDBStorage.get_trial_number_from_id, trial_id)

    def set_trial_intermediate_value(self, trial_id: int, step: int, intermediate_value: float) -> None:
        self._retried(RDBStorage.set_trial_intermediate_value, trial_id, step, intermediate_value)

    def set_trial_user_attr(self, trial_id: int, key: str, value: Any) -> None:
        self._retried(RDBStorage.set_trial_user_attr, trial_id, key, value)

    def set_trial_system_attr(self, trial_id: int, key: str, value: JSONSerializable) -> None:
        self._retried(RDBStorage.set_trial_system_attr, trial_id, key, value)

    def get_trial(self, trial_id: int) -> FrozenTrial:
        return self._retried(RDBStorage.get_trial, trial_id)

    def get_all_trials(
        self, study_id: int, deepcopy: bool = True, states: Container[TrialState] | None = None
    ) -> list[FrozenTrial]:
        return self._retried(RDBStorage.get_all_trials, study_id, deepcopy, states)

    def get_n_trials(self, study_id: int, state: tuple[TrialState, ...] | TrialState | None = None) -> int:
        return self._retried(RDBStorage.get_n_trials, study_id, state)

    def get_best_trial(self, study_id: int) -> FrozenTrial:
        return self._retried(RDBStorage.get_best_trial, study_id)

    def get_trial_params(self, trial_id: int) -> dict[str, Any]:
        return self._retried(RDBStorage.get_trial_params, trial_id)

    def get_trial_user_attrs(self, trial_id: int) -> dict[str, Any]:
        return self._retried(RDBStorage.get_trial_user_attrs, trial_id)

    def get_trial_system_attrs(self, trial_id: int) -> dict[str, Any]:
        return self._retried(RDBStorage.get_trial_system_attrs, trial_id)


class OpeningRetries:
    """What :func:`open_storage` says while it waits: a restarting server once, as a warning (a worker
    started during a database restart waits for it instead of exiting); a schema being created by
    another process at debug level."""

    def __init__(self, url: str, seconds: float) -> None:
        self.url, self.seconds, self.warned = url, seconds, False

    def __call__(self, err: Exception) -> None:
        if not is_server_restarting(err):
            log.debug("another process is creating the schema: %s", describe_error(err))
        elif not self.warned:
            self.warned = True
            said = redact_text(describe_error(err), self.url)
            log.warning("database restarting (%s); retrying for up to %.0f s", said, self.seconds)


def open_storage(
    url: str,
    heartbeat: Heartbeat | None = None,
    *,
    must_exist: bool = False,
    outage_seconds: float | None = None,
    wait_for_restart: bool = False,
) -> ResilientStorage:
    """A storage with pooled, pre-pinged connections; with ``heartbeat``, stale trials are failed
    and retried (only inside ``study.optimize``). ``must_exist`` (read-only commands): a missing
    SQLite file is an error, not a new empty database. ``wait_for_restart`` (workers, which a
    supervisor starts unattended): a server that is restarting is waited for, as an outage is once
    open; a command a person typed says at once what the server said."""
    path = sqlite_path(url)
    if must_exist and path is not None and not path.exists():
        raise HpoError(
            f"no database at {path} (in {Path.cwd()}); run hpo launch here first, or pass --storage / set {STORAGE_ENV}"
        )
    outage = outage_seconds if outage_seconds is not None else float(heartbeat.grace_seconds if heartbeat else 120)
    try:
        if path is not None:
            prepare_sqlite(url)
        with warnings.catch_warnings():  # heartbeats are "experimental" in Optuna; the noise helps no one
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            beat: dict[str, Any] = {}
            if heartbeat is not None:
                beat = {
                    "heartbeat_interval": heartbeat.interval,
                    "grace_period": heartbeat.grace_period,
                    "heartbeat_stale_trial_callback": RetryStaleTrial(max_retry=heartbeat.max_retries),
                }
            waits = max(10.0, outage) if wait_for_restart else 10.0
            return with_backoff(  # another process may be creating the same new schema, or the server restarting
                lambda: ResilientStorage(url, engine_kwargs=engine_kwargs(url), outage_seconds=outage, **beat),
                seconds=waits,
                retry_on=lambda err: is_concurrent_creation(err) or (wait_for_restart and is_server_restarting(err)),
                on_retry=OpeningRetries(url, waits),
            )
    except (SQLAlchemyError, sqlite3.Error, optuna.exceptions.StorageInternalError) as err:
        raise HpoError(f"cannot open storage {redact(url)}: {redact_text(describe_error(err), url)}") from None
