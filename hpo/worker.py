"""``hpo worker``: pull trials from one study or from every unfinished study in the storage.

Each trial runs inside ``study.optimize`` (heartbeats and stale-trial retries only work there),
one trial per call, behind the start lock that keeps the study at exactly ``n_trials``.
SIGTERM: the running trial is failed and queued for retry (it resumes from its checkpoint), and
the process exits cleanly.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType

import optuna
from optuna.storages import RDBStorage
from sqlalchemy.exc import SQLAlchemyError

from hpo.data import load_data
from hpo.errors import HpoError
from hpo.objective import StudyContext, TrialFailed, run_objective
from hpo.runtime import resolve_device
from hpo.scoring.score import preflight
from hpo.spec import Spec
from hpo.startlock import StartLock
from hpo.storage import Heartbeat, open_storage, redact, retry_callback
from hpo.study import SPEC_ATTR, make_pruner, make_sampler, progress, stored_spec

log = logging.getLogger("hpo.worker")
REPORTED_ATTR = "hpo_report_written"


class WorkerStopping(KeyboardInterrupt):
    """Raised in the main thread by SIGTERM; Optuna fails the running trial, we queue its retry."""


@dataclass(frozen=True)
class WorkerOptions:
    url: str
    study: str | None = None  # None: every unfinished study in the storage
    max_trials: int | None = None  # exit after running this many trials
    exit_when_idle: bool = False  # exit when no study has work left (else wait for new studies)
    artifact_dir: Path = Path(".hpo/artifacts")
    cache_dir: Path | None = None  # overrides each spec's data.cache_dir
    worker_index: int = 0  # offsets the sampler seed
    poll_seconds: float = 5.0
    device: str = "auto"
    threads: int | None = None  # torch CPU threads (local workers share the cores)
    report_dir: Path | None = Path("reports")  # the worker that finishes a study writes its report here


Objective = Callable[[optuna.Trial, StudyContext, Callable[[], None]], float]


class Worker:
    def __init__(self, opts: WorkerOptions, objective: Objective = run_objective) -> None:
        self.opts = opts
        self.objective = objective
        self.device = resolve_device(opts.device)
        self.contexts: dict[str, tuple[StudyContext, optuna.Study, RDBStorage]] = {}
        self.trials_run = 0
        self.stopping = False
        self.stop_acknowledged = False
        self.in_trial = False
        self.catalog = open_storage(opts.url)

    def handle_sigterm(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = True
        self.interrupt_trial(signum, frame)

    def interrupt_trial(self, signum: int, frame: FrameType | None) -> None:
        """Raise WorkerStopping in the running trial. An exception raised from a signal handler can
        land where Python swallows it (a weakref callback, a __del__), so re-arm a timer (SIGALRM)
        that raises again until the trial has acknowledged it."""
        if self.in_trial and not self.stop_acknowledged:
            signal.setitimer(signal.ITIMER_REAL, 0.5)
            raise WorkerStopping

    def acknowledge_stop(self) -> None:
        self.stop_acknowledged = True
        signal.setitimer(signal.ITIMER_REAL, 0)

    def study_names(self) -> list[str]:
        if self.opts.study is not None:
            return [self.opts.study]
        summaries = optuna.get_all_study_summaries(self.catalog, include_best_trial=False)
        return sorted(s.study_name for s in summaries if SPEC_ATTR in s.user_attrs)

    def context(self, name: str) -> tuple[StudyContext, optuna.Study, RDBStorage]:
        if name not in self.contexts:
            try:
                spec = stored_spec(optuna.load_study(study_name=name, storage=self.catalog))
            except KeyError:
                raise HpoError(
                    f"no study named {name!r} in {redact(self.opts.url)}; create it with hpo launch"
                ) from None
            if spec is None:
                raise HpoError(f"study {name!r} was not created by hpo launch (no spec stored in it)")
            self.contexts[name] = self._build(name, spec)
        return self.contexts[name]

    def _build(self, name: str, spec: Spec) -> tuple[StudyContext, optuna.Study, RDBStorage]:
        preflight(spec.score)
        data_cfg = spec.data
        if self.opts.cache_dir is not None:
            data_cfg = replace(data_cfg, cache_dir=str(self.opts.cache_dir))
        storage = open_storage(
            self.opts.url, Heartbeat(spec.study.heartbeat_interval, spec.study.grace_period, spec.study.max_retries)
        )
        study = optuna.load_study(
            study_name=name,
            storage=storage,
            sampler=make_sampler(spec, self.opts.worker_index),
            pruner=make_pruner(spec),
        )
        ctx = StudyContext(
            name, spec, load_data(data_cfg), self.device, self.opts.artifact_dir, Path(data_cfg.cache_dir)
        )
        return ctx, study, storage

    def step(self, name: str) -> str:
        """Run at most one trial of ``name``: 'ran', 'busy' (others still running) or 'done'."""
        ctx, study, storage = self.context(name)
        n_trials = ctx.spec.study.n_trials
        lock = StartLock(self.opts.url, storage, name)
        lock.acquire()
        try:
            p = progress(study, n_trials)
            if p.waiting == 0 and p.slots >= n_trials and p.running > 0:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                    optuna.storages.fail_stale_trials(study)
                p = progress(study, n_trials)
            if p.waiting == 0 and p.slots >= n_trials:
                return "done" if p.done else "busy"
            self._optimize_one(study, ctx, lock, storage)
        finally:
            lock.release()
        if self.opts.report_dir is None:
            return "ran"
        with lock:
            if progress(study, n_trials).done and not study.user_attrs.get(REPORTED_ATTR):
                study.set_user_attr(REPORTED_ATTR, True)
                self.write_report(study)
        return "ran"

    def write_report(self, study: optuna.Study) -> None:
        """The worker that finishes a study's last trial writes its report."""
        from hpo.commands.report import default_report_path
        from hpo.report import write_report

        try:
            path = write_report(
                study,
                (self.opts.report_dir or Path("reports")) / default_report_path(study.study_name).name,
                artifact_dir=self.opts.artifact_dir,
            )
            log.info("study %s is done; report: %s", study.study_name, path)
        except Exception:  # a report must never take a worker down
            log.exception("could not write the report of %s", study.study_name)

    def _optimize_one(self, study: optuna.Study, ctx: StudyContext, lock: StartLock, storage: RDBStorage) -> None:
        number: list[int] = []

        def objective(trial: optuna.Trial) -> float:
            number.append(trial.number)
            try:
                return self.objective(trial, ctx, lock.release)
            except WorkerStopping:
                self.acknowledge_stop()
                trial.set_user_attr("fail_reason", "worker_stopped")
                raise
            except (TrialFailed, optuna.TrialPruned):
                raise
            except Exception as err:
                log.exception("trial %d failed", trial.number)
                trial.set_user_attr("fail_reason", "error")
                trial.set_user_attr("error", f"{type(err).__name__}: {err}"[:500])
                raise

        self.in_trial = True
        try:
            # gc after a trial frees GPU memory held in cycles; on the CPU it only costs time
            study.optimize(objective, n_trials=1, catch=(Exception,), gc_after_trial=self.device.type == "cuda")
        except WorkerStopping:
            self.acknowledge_stop()
            self.in_trial = False
            callback = retry_callback(storage)
            if number and callback is not None:
                callback(study, study._storage.get_trial(_trial_id(study, number[0])))
            log.info("stopped by SIGTERM: trial %s queued for retry", number[0] if number else "-")
            return
        except Exception as err:
            if not (number and failed_elsewhere(study, number[0])):
                raise
            # Our heartbeats lapsed (e.g. the database restarted) and another worker failed the
            # trial as stale and queued its retry; that retry resumes from the checkpoint.
            log.warning("trial %d was failed as stale while it ran (%s); its retry takes over", number[0], err)
            return
        finally:
            self.in_trial = False
        self.trials_run += 1

    def serve(self) -> int:
        """Loop until done (``exit_when_idle``), ``max_trials`` reached, or SIGTERM."""
        main_thread = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGTERM, self.handle_sigterm) if main_thread else None
        previous_alarm = signal.signal(signal.SIGALRM, self.interrupt_trial) if main_thread else None
        try:
            while not self.stopping:
                if self.opts.max_trials is not None and self.trials_run >= self.opts.max_trials:
                    break
                outcomes: dict[str, str] = {}
                try:
                    for name in self.study_names():
                        outcomes[name] = self.step(name)
                        if outcomes[name] == "ran" or self.stopping:
                            break
                except Exception as err:
                    if not is_storage_error(err):
                        raise
                    # The database went away (restart, network): the running trial, if any, goes
                    # stale and is retried from its checkpoint; this worker waits and carries on.
                    log.warning(
                        "storage unavailable (%s); retrying in %.0fs", type(err).__name__, self.opts.poll_seconds
                    )
                    time.sleep(self.opts.poll_seconds)
                    continue
                if "ran" in outcomes.values():
                    continue
                if self.opts.exit_when_idle and all(o == "done" for o in outcomes.values()):
                    break
                time.sleep(self.opts.poll_seconds)
        finally:
            if main_thread:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGTERM, previous)
                signal.signal(signal.SIGALRM, previous_alarm)
        return self.trials_run


def is_storage_error(err: BaseException | None) -> bool:
    """True when the database failed, also when Optuna's bookkeeping tripped over it (its
    ``_run_trial`` then raises UnboundLocalError from the failed tell)."""
    seen = 0
    while err is not None and seen < 10:
        if isinstance(err, (SQLAlchemyError, optuna.exceptions.StorageInternalError)):
            return True
        err, seen = err.__cause__ or err.__context__, seen + 1
    return False


def failed_elsewhere(study: optuna.Study, number: int) -> bool:
    try:
        return study._storage.get_trial(_trial_id(study, number)).state == optuna.trial.TrialState.FAIL
    except Exception:  # the database may still be away
        return True


def _trial_id(study: optuna.Study, number: int) -> int:
    return study._storage.get_trial_id_from_study_id_trial_number(study._study_id, number)


def run_worker(opts: WorkerOptions) -> int:
    if opts.threads:
        import torch

        torch.set_num_threads(opts.threads)
    log.info("worker %d (pid %d) on %s, storage %s", opts.worker_index, os.getpid(), opts.device, redact(opts.url))
    return Worker(opts).serve()
