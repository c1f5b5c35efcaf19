"""``hpo worker``: pull trials from one study or from every unfinished study in the storage.

Each trial runs inside ``study.optimize`` (heartbeats and stale-trial retries only work there),
one trial per call, behind the start lock that keeps the study at exactly ``n_trials``. A reaper
thread fails stale trials every heartbeat interval, so a dead worker's trial is retried within
the grace period plus one interval even when no other worker asks for a new trial.
SIGTERM: the running trial is failed and queued for retry (it resumes from its checkpoint), and
the process exits cleanly. A full disk (:func:`hpo.errors.is_disk_full`, wherever a write met it) is
the host's fault, not the trial's: the trial goes back to the queue without spending a retry, and this
worker stops with one line naming the disk (``Worker.fault``) instead of burning the next trial on it.
The stop is raised only inside the objective, never in Optuna's own
bookkeeping around it (``ask``, ``tell``): raised there it left the trial half-told and the
worker ended in a traceback (``UnboundLocalError`` in ``_run_trial``). The caller learns that a
study finished through ``on_study_done``.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import signal
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType

import optuna

from hpo.errors import DiskFull, disk_full_at, is_disk_full
from hpo.records import RAN_ON_ATTR, REPORTED_ATTR, SPEC_ATTR, StudyRecord
from hpo.scoring.score import preflight
from hpo.service.context import StudyContext
from hpo.service.db_errors import is_storage_error
from hpo.service.names import DEFAULT_ARTIFACTS
from hpo.service.objective import TrialFailed, TrialFiles, TrialLost, run_objective
from hpo.service.optuna_internals import stale_trial_ids, trial_id
from hpo.service.placement import placement_here
from hpo.service.pruning import make_pruner
from hpo.service.rung import decide, not_continued
from hpo.service.startlock import StartLock
from hpo.service.storage import Heartbeat, ResilientStorage, open_storage
from hpo.service.study import load, make_sampler, progress, requeue_orphans, require_spec
from hpo.service.trials import DISK_FULL, ended_line, mark_ended, root_number
from hpo.service.urls import redact, sqlite_path
from hpo.spec.spec import Spec
from hpo.tracking.external import check_trackers
from hpo.training.data import load_data
from hpo.training.runtime import resolve_device

log = logging.getLogger("hpo.worker")


class WorkerStopping(KeyboardInterrupt):
    """Raised in the main thread by SIGTERM; Optuna fails the running trial, we queue its retry."""


@dataclass(frozen=True)
class WorkerOptions:
    url: str
    study: str | None = None  # None: every unfinished study in the storage
    max_trials: int | None = None  # exit after running this many trials
    exit_when_idle: bool = False  # exit when no study has work left (else wait for new studies)
    artifact_dir: Path = DEFAULT_ARTIFACTS
    cache_dir: Path | None = None  # overrides each spec's data.cache_dir
    worker_index: int = 0  # offsets the sampler seed
    poll_seconds: float = 5.0
    device: str = "auto"
    threads: int | None = None  # torch CPU threads (local workers share the cores)
    sharing: int = 1  # worker processes on this worker's device (hpo worker --per-gpu)


Objective = Callable[[optuna.Trial, StudyContext, Callable[[], None]], float]


class Outcome(enum.Enum):
    """What one look at a study did."""

    RAN = "ran"  # ran one trial
    BUSY = "busy"  # nothing to start, but other workers' trials still run
    DONE = "done"  # the study is finished


OnStudyDone = Callable[[optuna.Study, optuna.storages.BaseStorage], None]  # (the study, its storage)


class Worker:
    def __init__(
        self, opts: WorkerOptions, objective: Objective = run_objective, on_study_done: OnStudyDone | None = None
    ) -> None:
        self.opts = opts
        self.objective = objective
        self.on_study_done = on_study_done
        self.device = resolve_device(opts.device)
        self.placement = placement_here(self.device, opts.worker_index)
        self.contexts: dict[str, tuple[StudyContext, optuna.Study, ResilientStorage]] = {}
        self.trials_run = 0
        self.lock_waits: list[float] = []  # seconds each start-lock acquire waited
        self.stopping = False
        self.stop_acknowledged = False
        self.fault: DiskFull | None = None  # the full disk that stopped this worker
        self.catalog = open_storage(opts.url, wait_for_restart=True)
        self.reaper = Reaper(self)

    def handle_sigterm(self, signum: int, frame: FrameType | None) -> None:
        """A second SIGTERM adds nothing (under Slurm a child of ``--per-gpu`` gets one from Slurm and
        one from its parent): raising again could land in the first one's handling."""
        if self.stopping:
            return
        self.stopping = True
        self.interrupt_trial(signum, frame)

    def interrupt_trial(self, signum: int, frame: FrameType | None) -> None:
        """Raise WorkerStopping where the objective runs (it is on the stack), nowhere else: a stop
        that lands before the objective is raised by the objective itself when it starts, and one
        that lands after it returned ends the worker once Optuna has told the trial. An exception
        raised from a signal handler can land where Python swallows it (a weakref callback, a
        __del__), so re-arm a timer (SIGALRM) that raises again until the trial has acknowledged it."""
        if not self.stop_acknowledged and in_objective(frame):
            signal.setitimer(signal.ITIMER_REAL, 0.5)
            raise WorkerStopping

    def acknowledge_stop(self) -> None:
        self.stop_acknowledged = True
        signal.setitimer(signal.ITIMER_REAL, 0)

    def study_names(self) -> list[str]:
        if self.opts.study is not None:
            return [self.opts.study]
        summaries = optuna.get_all_study_summaries(self.catalog, include_best_trial=False)
        return sorted(s.study_name for s in summaries if StudyRecord.of(s).has(SPEC_ATTR))

    def context(self, name: str) -> tuple[StudyContext, optuna.Study, ResilientStorage]:
        if name not in self.contexts:
            spec = require_spec(load(self.catalog, name, redact(self.opts.url)))
            self.contexts[name] = self._build(name, spec)
        return self.contexts[name]

    def _build(self, name: str, spec: Spec) -> tuple[StudyContext, optuna.Study, ResilientStorage]:
        preflight(spec.score)
        check_trackers(spec.tracking)
        data_cfg = spec.data
        if self.opts.cache_dir is not None:
            data_cfg = replace(data_cfg, cache_dir=str(self.opts.cache_dir))
        s = spec.study
        beat = Heartbeat(s.heartbeat_interval, s.grace_period, s.max_retries)
        storage = open_storage(self.opts.url, beat, outage_seconds=600, wait_for_restart=True)
        study = optuna.load_study(
            study_name=name,
            storage=storage,
            sampler=make_sampler(spec, self.opts.worker_index),
            pruner=make_pruner(spec),
        )
        ctx = StudyContext(
            name, spec, load_data(data_cfg), self.device, self.opts.artifact_dir, data_cfg.cache_path, storage,
            sharing=self.opts.sharing,
        )  # fmt: skip
        return ctx, study, storage

    def step(self, name: str) -> Outcome:
        """Run at most one trial of ``name``."""
        ctx, study, storage = self.context(name)
        n_trials, retries = ctx.spec.study.n_trials, ctx.spec.study.max_retries
        lock = StartLock(self.opts.url, storage, name)
        with lock:
            self.lock_waits.append(lock.waited)
            trials = study.get_trials(deepcopy=False)
            if requeue_orphans(study, storage, retries, trials):
                trials = study.get_trials(deepcopy=False)
            if decide(study, ctx.spec, trials):
                trials = study.get_trials(deepcopy=False)
            drop_checkpoints(ctx, not_continued(ctx.spec, trials))  # on every host with its own artifact folder
            p = progress(study, n_trials, trials, max_retries=retries)
            if p.waiting == 0 and p.slots >= n_trials:
                return Outcome.DONE if p.done else Outcome.BUSY
            self._optimize_one(study, ctx, lock, storage)
        if self.on_study_done is not None:
            with lock:
                if progress(study, n_trials, max_retries=retries).done and not StudyRecord.of(study).has(REPORTED_ATTR):
                    study.set_user_attr(REPORTED_ATTR, True)
                    self._study_done(study, storage)
        return Outcome.RAN

    def _study_done(self, study: optuna.Study, storage: ResilientStorage) -> None:
        assert self.on_study_done is not None
        try:
            self.on_study_done(study, storage)
        except Exception:  # what the caller does with a finished study must never take a worker down
            log.exception("the callback for finished study %s failed", study.study_name)

    def _run_trial(self, trial: optuna.Trial, ctx: StudyContext, lock: StartLock, storage: ResilientStorage) -> float:
        """The objective Optuna calls; ``interrupt_trial`` raises a stop only while this is on the stack
        (from its first instruction: a stop raised before its ``try`` reads as ``worker_lost``, retried
        the same way)."""
        try:
            if self.stopping:  # SIGTERM came between the start lock and here: Optuna had asked already
                raise WorkerStopping
            trial.set_user_attr(RAN_ON_ATTR, self.placement.as_dict())
            return self.objective(trial, ctx, lock.release)
        except WorkerStopping:
            self.acknowledge_stop()
            mark_ended(trial, "worker_stopped")
            raise
        except (TrialFailed, TrialLost, optuna.TrialPruned):
            raise
        except optuna.exceptions.UpdateFinishedTrialError:
            # a report or attribute found the trial failed as stale before the heartbeat did
            if storage.still_owned(trial_id(trial)):
                raise
            raise TrialLost(f"trial {trial.number} was failed as stale while it ran") from None
        except Exception as err:
            if is_disk_full(err):
                raise self._disk_full(trial, ctx, err) from None
            log.exception("trial %d failed", trial.number)
            mark_ended(trial, "error", detail=f"{type(err).__name__}: {err}")
            raise

    def _disk_full(self, trial: optuna.Trial, ctx: StudyContext, err: Exception) -> DiskFull:
        """Record the full disk as the trial's ending (unless the database is that disk) and as this
        worker's fault; Optuna fails the trial with it, and ``_optimize_one`` queues its retry."""
        self.fault = disk_full_at(err, ctx.write_places())
        with contextlib.suppress(Exception):  # the database may be on the full disk
            mark_ended(trial, DISK_FULL, detail=str(self.fault))
        return self.fault

    def _requeue_after_fault(
        self, study: optuna.Study, ctx: StudyContext, lock: StartLock, storage: ResilientStorage, number: int
    ) -> None:
        """The trial a full disk ended goes back to the queue (its retry spends none of the study's
        retries); when the database itself is full it cannot, and the heartbeat check retries it later."""
        lock.release()
        try:
            with lock:
                requeue_orphans(study, storage, ctx.spec.study.max_retries, own=(number,))
            log.warning("trial %d went back to the queue: %s", number, self.fault)
        except Exception as err:
            log.warning("trial %d could not be queued again now (%s); it is retried once its heartbeat lapses",
                        number, type(err).__name__)  # fmt: skip

    def _optimize_one(self, study: optuna.Study, ctx: StudyContext, lock: StartLock, storage: ResilientStorage) -> None:
        if self.stopping:
            return
        ids: list[int] = []
        number: list[int] = []

        def objective(trial: optuna.Trial) -> float:
            number.append(trial.number)  # here no stop is raised (not inside _run_trial)
            ids.append(trial_id(trial))
            return self._run_trial(trial, ctx, lock, storage)

        try:
            # gc after a trial frees GPU memory held in cycles; on the CPU it only costs time
            study.optimize(objective, n_trials=1, catch=(Exception,), gc_after_trial=self.device.type == "cuda")
        except WorkerStopping:
            self.acknowledge_stop()
            if number:  # Optuna failed it; its retry is queued under the start lock, as every retry is
                lock.release()  # still held if SIGTERM came before the objective let it go
                with lock:
                    requeue_orphans(study, storage, ctx.spec.study.max_retries, own=(number[0],))
                log.info("%s; stopped by SIGTERM, queued for retry", ended_line(storage.get_trial(ids[0])))
            else:
                log.info("stopped by SIGTERM before a trial started")
            return
        except Exception as err:
            if not (ids and failed_elsewhere(storage, ids[0])):
                raise
            log.warning("trial %d was failed as stale while it ran (%s); its retry takes over", number[0], err)
            return
        if self.fault is not None:
            if number:
                self._requeue_after_fault(study, ctx, lock, storage, number[0])
            return
        if ids and storage.is_lost(ids[0]):
            log.warning(
                "trial %d was failed as stale while it ran; stopped training it, its retry takes over", number[0]
            )
            return
        if ids:
            log.info(ended_line(storage.get_trial(ids[0])))
        self.trials_run += 1

    def serve(self) -> int:
        """Loop until done (``exit_when_idle``), ``max_trials`` reached, or SIGTERM."""
        main_thread = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGTERM, self.handle_sigterm) if main_thread else None
        previous_alarm = signal.signal(signal.SIGALRM, self.interrupt_trial) if main_thread else None
        self.reaper.start()
        try:
            while not self.stopping and self.fault is None:
                if self.opts.max_trials is not None and self.trials_run >= self.opts.max_trials:
                    break
                outcomes = self._round()
                if outcomes is None or Outcome.RAN in outcomes.values():
                    continue
                if self.opts.exit_when_idle and all(o == Outcome.DONE for o in outcomes.values()):
                    break
                time.sleep(self.opts.poll_seconds)
            if self.stopping and not self.stop_acknowledged:
                log.info("stopped by SIGTERM between trials")
            log.info("worker exiting: %s", exit_text(self.trials_run, self.lock_waits))
        finally:
            self.reaper.stop()
            if main_thread:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGTERM, previous)
                signal.signal(signal.SIGALRM, previous_alarm)
        return self.trials_run

    def _round(self) -> dict[str, Outcome] | None:
        """One look at every study (stopping after the first that ran a trial); None on an outage."""
        outcomes: dict[str, Outcome] = {}
        try:
            for name in self.study_names():
                outcomes[name] = self.step(name)
                if outcomes[name] == Outcome.RAN or self.stopping:
                    break
        except Exception as err:
            if is_disk_full(err):  # the database, a cache or a first write of the study's files
                self.fault = disk_full_at(err, self.write_places())
                return None
            if not is_storage_error(err):
                raise
            log.warning("storage unavailable (%s); retrying in %.0fs", type(err).__name__, self.opts.poll_seconds)
            time.sleep(self.opts.poll_seconds)
            return None
        return outcomes

    def write_places(self) -> list[Path]:
        """Where this worker writes before any study's context exists (:meth:`StudyContext.write_places`)."""
        database = sqlite_path(self.opts.url)
        places = [self.opts.artifact_dir, Path(tempfile.gettempdir())]
        return [*places, database.parent] if database is not None else places


def drop_checkpoints(ctx: StudyContext, trials: list[optuna.trial.FrozenTrial]) -> None:
    """The checkpoints and EMA snapshots of paused trials no continuation will resume, those this
    worker's artifact folder holds (each host removes its own; a worker killed before it did leaves
    them to the next step)."""
    for t in trials:
        root = root_number(t)
        TrialFiles(ctx.checkpoint_path(root), ctx.snapshot_dir(root), ctx.branch_path(root)).remove()


def in_objective(frame: FrameType | None) -> bool:
    """Whether ``frame`` runs inside ``Worker._run_trial`` (a frame of it, or one it called)."""
    while frame is not None:
        if frame.f_code is Worker._run_trial.__code__:
            return True
        frame = frame.f_back
    return False


class Reaper:
    """Fails stale trials of the studies this worker knows, every heartbeat interval, whether or
    not any worker asks for a new trial (Optuna looks only then)."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.halt = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="hpo-reaper", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.halt.set()

    def _loop(self) -> None:
        while not self.halt.wait(self._interval()):
            for name, (_, study, storage) in list(self.worker.contexts.items()):
                try:
                    self._fail_stale(name, study, storage)
                except Exception as err:  # an outage: the next round tries again
                    log.debug("stale-trial check of %s failed: %s", name, err)

    def _fail_stale(self, name: str, study: optuna.Study, storage: ResilientStorage) -> None:
        """Under the start lock, so that failing a trial and queueing its retry look like one step to
        every worker (:func:`hpo.service.study.requeue_orphans`); the lock is taken only when a trial is stale."""
        if not stale_trial_ids(study):
            return
        with StartLock(self.worker.opts.url, storage, name), warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.fail_stale_trials(study)

    def _interval(self) -> float:
        intervals = [ctx.spec.study.heartbeat_interval for ctx, _, _ in list(self.worker.contexts.values())]
        return float(min(intervals)) if intervals else 5.0


def exit_text(trials: int, lock_waits: list[float]) -> str:
    """The worker's last line: trials run and how long it waited for the start lock (contention
    between workers shows here first)."""
    if not lock_waits:
        return f"{trials} trials run"
    waits = sorted(lock_waits)
    p50, p99 = waits[len(waits) // 2], waits[min(len(waits) - 1, int(0.99 * len(waits)))]
    return (
        f"{trials} trials run; start lock taken {len(waits)} times, waited p50 {p50:.3f} s, "
        f"p99 {p99:.3f} s, max {waits[-1]:.3f} s"
    )


def failed_elsewhere(storage: ResilientStorage, trial_id: int) -> bool:
    try:
        return storage.get_trial(trial_id).state == optuna.trial.TrialState.FAIL
    except Exception:  # the database may still be away
        return True


def run_worker(opts: WorkerOptions, on_study_done: OnStudyDone | None = None) -> int:
    """Serve until done; a full disk ends it with :class:`DiskFull` (one line, exit 75) after the trial it
    met went back to the queue."""
    worker = Worker(opts, on_study_done=on_study_done)
    log.info("worker started: %s; storage %s", worker.placement.text(), redact(opts.url))
    trials = worker.serve()
    if worker.fault is not None:
        raise worker.fault
    return trials
