"""Studies: create or resume from a spec, the spec stored inside, sampler and pruner from it,
the count that ends a study at exactly ``n_trials`` however many workers run, and the trial that
``STUDY[:TRIAL]`` names (``find_trial``)."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import optuna
from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial, TrialState

from hpo import __version__
from hpo.errors import ConfigError, HpoError
from hpo.records import BASELINE_ATTR, BASELINE_NAME_ATTR, HASH_ATTR, SPEC_ATTR, VERSION_ATTR, StudyRecord
from hpo.service.pruning import make_pruner
from hpo.service.space import grid
from hpo.service.storage import ResilientStorage, open_storage
from hpo.service.trials import (
    DISK_FULL,
    PAUSED,
    best_own,
    continued_numbers,
    fail_reason,
    failed_attempts,
    is_carried,
    is_paused,
    is_retry,
    retry_history,
)
from hpo.service.urls import redact, resolve_url
from hpo.spec.spec import Spec, changed_keys, comparable, parse_stored

log = logging.getLogger("hpo.study")


# From benchmarks/sampler_efficiency.py (docs/benchmarks.md "Samplers"): digits and shapes, 20 seeds of 30 trials.
# Without pruning, GP with 10 random trials first reached random search's best-of-30 in a median 11
# and 12 trials. With the median pruner GP learns from complete trials only: with 10 start-up trials
# it never left its random start, with 4 it proposed the same pruned configuration again (15.8
# distinct of 30) and did worse than random; TPE, which models pruned trials by their curves, did best.
AUTO_GP_UP_TO = 100  # trials: sample efficiency measured at 30; GP's proposal cost measured 0.08 s at 100
GP_STARTUP = (4, 10)  # GP's random start: a third of n_trials, within these bounds (4 stalled it on shapes)
TPE_STARTUP = 4  # reached random's best-of-30 in a median 13.5 trials on both datasets, with and without pruning


def sampler_name(spec: Spec) -> str:
    """What ``sampler: auto`` means for this study: the rule docs/benchmarks.md's "Samplers" tables support."""
    name = spec.sampler.name
    if name != "auto":
        return name
    return "gp" if not spec.pruner.prunes and spec.study.n_trials <= AUTO_GP_UP_TO else "tpe"


def startup_trials(spec: Spec) -> int:
    """Random trials before the model proposes: the spec's count, else the measured default."""
    if spec.sampler.n_startup_trials is not None:
        return spec.sampler.n_startup_trials
    if sampler_name(spec) != "gp":
        return TPE_STARTUP
    low, high = GP_STARTUP
    return min(max(spec.study.n_trials // 3, low), high)


def sampler_warning(spec: Spec) -> str | None:
    """GP beside a pruner: measured to repeat pruned configurations (docs/benchmarks.md "Samplers")."""
    if sampler_name(spec) == "gp" and spec.pruner.prunes:
        return (
            f"sampler: gp learns from complete trials only; with pruner: {spec.pruner.name} it may stay random or "
            'propose a pruned configuration again (measured: docs/benchmarks.md "Samplers"); use sampler: auto '
            "(tpe here) or pruner: none"
        )
    return None


def make_sampler(spec: Spec, worker_index: int = 0) -> optuna.samplers.BaseSampler:
    """Each worker offsets the seed: processes with one seeded sampler would propose identical trials."""
    s, name = spec.sampler, sampler_name(spec)
    seed = None if s.seed is None else s.seed + worker_index
    startup = startup_trials(spec)
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, multivariate=True, constant_liar=True)
    if name == "gp":  # small budgets; conditions on running trials (docs/benchmarks.md: parallel workers)
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=startup)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "grid":
        return optuna.samplers.GridSampler(grid(spec.search), seed=seed)
    raise ValueError(f"unknown sampler {name!r}; expected one of auto, tpe, gp, random, grid")


def pruned_reason(spec: Spec) -> str:
    """What a trial the pruner stops ends with: pruner: rung pauses it (``service/rung.py``)."""
    return PAUSED if spec.pruner.pauses else f"pruned_by_{spec.pruner.name}"


def stored_spec(study: optuna.Study) -> Spec | None:
    """The spec ``hpo launch`` stored in the study; None for studies other tools created."""
    raw = StudyRecord.of(study).text(SPEC_ATTR)
    return parse_stored(raw, study_name=study.study_name) if raw else None


def require_spec(study: optuna.Study) -> Spec:
    spec = stored_spec(study)
    if spec is None:
        raise HpoError(f"study {study.study_name!r} was not created by hpo launch (no spec stored in it)")
    return spec


def metric_of(study: optuna.Study) -> str:
    """What this study's score is called (FID or classifier-FID)."""
    spec = stored_spec(study)
    return spec.score.metric_name if spec is not None else "FID"


def n_trials_of(study: optuna.Study) -> int:
    spec = stored_spec(study)
    return spec.study.n_trials if spec is not None else len(study.get_trials(deepcopy=False))


MAX_STORED_NAME = 512  # Optuna's study-name column


def load(storage: RDBStorage, name: str, where: str) -> optuna.Study:
    """The study ``name`` (any name a user types: NUL bytes and overlong names are just not there)."""
    missing = HpoError(f"no study named {name[:200]!r} in {where}; `hpo status` lists them")
    if "\x00" in name or len(name) > MAX_STORED_NAME:
        raise missing
    try:
        return optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        raise missing from None


def find_trial(
    source: str, storage: str | None, *, what: str, need_trial: bool = False
) -> tuple[optuna.Study, FrozenTrial]:
    """``STUDY:TRIAL``, or ``STUDY`` alone (its best complete trial) unless ``need_trial``, → (the study,
    the trial); ``what`` starts each error message (the flag or command and the source)."""
    name, sep, number = source.rpartition(":")
    if not sep:
        name, number = source, ""
    if not name or (sep and not number.isdigit()) or (need_trial and not sep):
        form = "STUDY:TRIAL" if need_trial else "STUDY[:TRIAL]"
        raise HpoError(f"{what}: expected {form}, e.g. digits-quickstart:7")
    url = resolve_url(storage)
    study = load(open_storage(url, must_exist=True), name, redact(url))
    if not sep:
        best = best_own(study)
        if best is None:
            raise HpoError(f"{what}: study {name!r} has no complete trial yet; `hpo status {name}` shows its trials")
        return study, best
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    if int(number) not in trials:
        raise HpoError(f"{what}: study {name!r} has no trial {number} (0..{max(trials, default=-1)})")
    return study, trials[int(number)]


def _differences(existing: optuna.Study, spec: Spec) -> list[str]:
    raw = StudyRecord.of(existing).text(SPEC_ATTR)
    if not raw:
        return ["(no spec stored)"]
    try:
        old = stored_spec(existing)
    except ConfigError:
        return ["(the stored spec is from an incompatible version)"]
    if old is not None and old.fingerprint() == spec.fingerprint():
        return []
    return changed_keys(comparable(json.loads(raw)), comparable(spec.to_dict())) or ["(format)"]


def existing_study(spec: Spec, storage: RDBStorage, name: str) -> optuna.Study | None:
    """The study to resume under ``name``, None when there is none; a different spec is refused,
    naming the changed keys. ``name`` applies to the spec compared (``--name`` is stored as the spec's
    study name), so the command that started a study resumes it."""
    spec = named(spec, name)
    try:
        existing = optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        return None
    diff = _differences(existing, spec)
    if diff:
        raise HpoError(
            f"study {name!r} exists with a different spec (changed: {', '.join(diff)}); launch with "
            f"--name NAME to start a new study, or restore the old values to resume it"
        )
    return existing


def named(spec: Spec, name: str) -> Spec:
    """``spec`` under the study name ``name`` (``hpo launch --name``)."""
    return (
        spec if spec.study.name == name else dataclasses.replace(spec, study=dataclasses.replace(spec.study, name=name))
    )


def enqueue_baseline(study: optuna.Study, params: dict[str, object], *, name: str) -> None:
    """Queue one of the spec's baselines; ``name`` (``Spec.baseline_name``) is kept beside its parameters."""
    study.enqueue_trial(dict(params), user_attrs={BASELINE_ATTR: True, BASELINE_NAME_ATTR: name})


def refuse_regrowth_after_rung(existing: optuna.Study, spec: Spec) -> None:
    """pruner: rung decides once, for the n_trials it was given: a new count would rank again among
    paused trials whose checkpoints that decision removed."""
    old = stored_spec(existing)
    if old is None or not spec.pruner.pauses or old.study.n_trials == spec.study.n_trials:
        return
    if continued_numbers(existing.get_trials(deepcopy=False)):
        raise HpoError(
            f"study {existing.study_name!r} has taken its rung decision at n_trials={old.study.n_trials} (the trials "
            f"not continued were stopped and their checkpoints removed), so n_trials cannot change now; launch with "
            f"--name NAME to start a new study, or keep n_trials: {old.study.n_trials}"
        )


def create_or_resume(
    spec: Spec, storage: RDBStorage, *, name: str | None = None, baselines: bool = True
) -> tuple[optuna.Study, bool]:
    """Create the study (spec stored inside, baselines enqueued unless ``baselines`` is False: a warm
    start enqueues them itself) or resume the same spec."""
    name = name or spec.study.name
    existing = existing_study(spec, storage, name)
    spec = named(spec, name)
    spec_dict = spec.to_dict()
    if existing is not None:
        refuse_regrowth_after_rung(existing, spec)
        existing.set_user_attr(SPEC_ATTR, json.dumps(spec_dict))  # n_trials may have grown
        return existing, False
    study = optuna.create_study(
        study_name=name,
        storage=storage,
        direction=spec.study.direction,
        sampler=make_sampler(spec),
        pruner=make_pruner(spec),
    )
    study.set_user_attr(SPEC_ATTR, json.dumps(spec_dict))
    study.set_user_attr(HASH_ATTR, spec.fingerprint())
    study.set_user_attr(VERSION_ATTR, __version__)
    for i, params in enumerate(spec.baselines if baselines else ()):
        enqueue_baseline(study, dict(params), name=spec.baseline_name(i))
    return study, True


@dataclass(frozen=True)
class Progress:
    complete: int
    pruned: int  # of which paused at the rung and not continued (pruner: rung)
    failed: int  # failures that were not retried
    retried: int  # failed attempts whose retry is queued, running or done
    retrying: int  # of ``failed``: stopped or lost moments ago, their retry perhaps not yet queued
    running: int
    waiting: int
    slots: int  # trials counted against n_trials: every trial that is not a retry of another
    n_trials: int
    best: float | None
    continued: int = 0  # pruner: rung: paused trials a continuation resumed (counted by it, not here)
    undecided: int = 0  # pruner: rung: paused trials before the rung's decision (the study is not done)

    @property
    def finished(self) -> int:
        return self.complete + self.pruned + self.failed

    @property
    def done(self) -> bool:
        idle = self.running == 0 and self.waiting == 0 and self.retrying == 0 and self.undecided == 0
        return self.finished >= self.n_trials and idle


# Failing a stale or stopped trial and queueing its retry are two writes (Optuna's fail_stale_trials, or
# the stopped worker's own callback): in between, a reader sees a failure with no retry. Such a failure
# counts as pending for this long, so no reader calls the study done in that gap. Workers write both
# under the start lock, and a worker that finds a failure with no retry under that lock queues it
# (:func:`orphaned_failures`: its writer died or met an outage between the two writes); a study
# nobody works on any more still ends, this much later.
RETRY_GRACE = timedelta(seconds=60)
RETRIED_REASONS = ("worker_lost", "worker_stopped", DISK_FULL)


def retried_numbers(trials: Sequence[FrozenTrial]) -> set[int]:
    """The numbers of trials whose retry exists: a retry carries its first attempt in its history."""
    return {n for t in trials for n in retry_history(t)}


def lacks_retry(t: FrozenTrial, retried: set[int], max_retries: int | None) -> bool:
    """A lost or stopped trial with retries left and none queued. ``max_retries`` None: not known to
    the caller, so the trial may have one left. A full disk's ending needs none left: it spends none."""
    retries_left = max_retries is None or fail_reason(t) == DISK_FULL or failed_attempts(t) < max_retries
    return t.state == TrialState.FAIL and t.number not in retried and fail_reason(t) in RETRIED_REASONS and retries_left


def awaiting_retry(t: FrozenTrial, retried: set[int], now: datetime, max_retries: int | None) -> bool:
    recent = t.datetime_complete is not None and now - t.datetime_complete < RETRY_GRACE
    return recent and lacks_retry(t, retried, max_retries)


def orphaned_failures(trials: Sequence[FrozenTrial], max_retries: int) -> list[FrozenTrial]:
    """Lost or stopped trials whose retry was never queued. Read under the start lock, which every
    worker holds while it fails a trial and queues its retry, these are failures whose writer died
    (SIGKILL) or lost the database between the two writes: the crowd's chaos test met one."""
    trials = [t for t in trials if not is_carried(t)]
    retried = retried_numbers(trials)
    return [t for t in trials if lacks_retry(t, retried, max_retries)]


def requeue_orphans(
    study: optuna.Study,
    storage: ResilientStorage,
    max_retries: int,
    trials: Sequence[FrozenTrial] | None = None,
    own: tuple[int, ...] = (),
) -> bool:
    """Queue the retry of each lost or stopped trial that has none. Called with the start lock held:
    every worker fails a trial and queues its retry under it, so a failure seen here without one is
    an orphan (its writer was killed or lost the database between the two writes), never a retry
    about to be queued, and no two workers queue the same one. ``trials``: the study's, read under
    the lock (read here when not given); ``own``: the trials the caller itself just stopped
    (expected, so not warned about). True when a retry was queued."""
    callback = storage.get_heartbeat_stale_trial_callback()
    if callback is None:
        return False
    orphans = orphaned_failures(study.get_trials(deepcopy=False) if trials is None else trials, max_retries)
    for t in orphans:
        if t.number not in own:
            log.warning(
                "lost trial %d has no retry queued (its worker or the database went away between failing it and "
                "queueing the retry); queueing it now",
                t.number,
            )
        callback(study, t)
    return bool(orphans)


def progress(
    study: optuna.Study,
    n_trials: int,
    trials: Sequence[FrozenTrial] | None = None,
    *,
    max_retries: int | None = None,
    now: datetime | None = None,
) -> Progress:
    now = now or datetime.now()  # Optuna stamps trials with the writer's local time
    trials = [t for t in (trials if trials is not None else study.get_trials(deepcopy=False)) if not is_carried(t)]
    retried = retried_numbers(trials)
    states = [t.state for t in trials]
    failed = [t for t in trials if t.state == TrialState.FAIL]
    complete = [t.value for t in trials if t.state == TrialState.COMPLETE and t.value is not None]
    paused = [t.number for t in trials if is_paused(t)]
    continued = continued_numbers(trials)
    return Progress(
        complete=len(complete),
        pruned=states.count(TrialState.PRUNED) - len(continued),
        failed=sum(1 for t in failed if t.number not in retried),
        retried=sum(1 for t in failed if t.number in retried),
        retrying=sum(1 for t in failed if awaiting_retry(t, retried, now, max_retries)),
        running=states.count(TrialState.RUNNING),
        waiting=states.count(TrialState.WAITING),
        slots=sum(1 for t in trials if not is_retry(t)),
        n_trials=n_trials,
        best=min(complete) if complete else None,
        continued=len(continued),
        undecided=0 if continued else len(paused),
    )
