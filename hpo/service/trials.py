"""What happened to a trial, said the same way everywhere (status, report, logs): its failure
reason and what that reason means, its retries, and the retry callback that queues them."""

from __future__ import annotations

import copy
import warnings
from collections import Counter
from collections.abc import Sequence

import optuna
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.trial import FrozenTrial, TrialState

from hpo.analysis.hardware import rss_leak
from hpo.analysis.ranking import best_first
from hpo.records import ERROR_ATTR, FAIL_REASON_ATTR, STOPPED_AT_ATTR, TrialRecord
from hpo.service.optuna_internals import frozen
from hpo.spec.params import Params

DISK_FULL = "disk_full"  # a write found no space: a fault of the host, the trial went back to the queue unspent
PAUSED = "paused_at_rung"  # pruner: rung: stopped at the rung, its checkpoint kept for a continuation
REASONS = {
    "pruned_by_median": "validation metric above the median of earlier trials at the same evaluation point",
    "pruned_by_percentile": "validation metric outside the best pruner.percentile % of earlier trials at that point",
    "pruned_by_hyperband": "stopped by Hyperband: not among the best of its bracket at a halving point",
    "pruned_by_successive_halving": "stopped by successive halving: not among the best at a halving point",
    PAUSED: "paused at the rung (pruner: rung), its checkpoint kept; once every trial had reached it, the best "
    "there were continued as new trials (PRUNED → #N), the others stopped there",
    "nan_loss": "the loss, gradient norm or validation metric became NaN or infinite; lower lr or keep grad_clip",
    "diverged": "the loss rose far above its running median; lower lr or add warm-up",
    DISK_FULL: "a write (checkpoint, snapshot, grid, database) found its disk full; the trial went back to the queue "
    "without spending a retry, and its worker stopped with a line naming the disk",
    "oom": "out of GPU memory at this batch size; the worker carried on",
    "worker_lost": "its worker stopped sending heartbeats (killed, preempted, host lost); a retry resumed it",
    "worker_stopped": "its worker was stopped (SIGTERM, docker compose stop); a retry resumed it",
    "invalid_config": "the drawn parameters break a rule (e.g. sampler steps above T); see the error attribute",
    "invalid_schedule": "the drawn schedule and T never reach pure noise (samples would stay grey); refused before "
    "training, at no cost",
    "network_protocol": "the network factory breaks the protocol; see the error attribute",
    "fid_not_finite": "the samples could not be scored (FID not finite)",
    "error": "an unexpected error; see the trial's error attribute and the worker log",
}


def is_carried(t: FrozenTrial) -> bool:
    return TrialRecord.of(t).carried_from is not None


def own_trials(study: optuna.Study, states: Sequence[TrialState] | None = None) -> list[FrozenTrial]:
    """The trials this study ran: warm-start observations only inform its sampler and pruner, they
    count toward nothing (n_trials, best, noise, report, narrow, confirm)."""
    return [t for t in study.get_trials(deepcopy=False, states=states) if not is_carried(t)]


def carried_text(study: optuna.Study) -> str | None:
    """One line on a warm start: which study the prior observations came from, how many."""
    carried = (TrialRecord.of(t).carried_from for t in study.get_trials(deepcopy=False))
    sources = Counter(source.rsplit("#", 1)[0] for source in carried if source is not None)
    if not sources:
        return None
    names = ", ".join(f"{n} trial(s) of {name!r}" for name, n in sources.items())
    return f"warm-started: {names} informed the sampler and pruner; they count toward nothing here"


def best_own(study: optuna.Study) -> FrozenTrial | None:
    """The study's own best trial (warm-start trials carried in count toward nothing); also for a
    study another tool created with direction maximize."""
    ranked = best_first(own_trials(study), maximize=study.direction == optuna.study.StudyDirection.MAXIMIZE)
    return ranked[0] if ranked else None


def mark_ended(
    trial: optuna.Trial, reason: str, *, detail: str | None = None, stopped_at_kimg: float | None = None
) -> None:
    """The one writer of how a trial ended (``fail_reason``, ``error``, ``stopped_at_kimg``): the
    objective for what training and scoring decide, the worker for stops and unexpected errors."""
    if reason not in REASONS and not reason.startswith("pruned_by_"):
        raise ValueError(f"unknown fail reason {reason!r}; add it to REASONS")
    trial.set_user_attr(FAIL_REASON_ATTR, reason)
    if detail is not None:
        trial.set_user_attr(ERROR_ATTR, detail[:500])
    if stopped_at_kimg is not None:
        trial.set_user_attr(STOPPED_AT_ATTR, stopped_at_kimg)


def ended_line(t: FrozenTrial) -> str:
    """The worker's one log line for a trial it finished: state, value or reason, duration."""
    reason = fail_reason(t)
    if t.state == TrialState.COMPLETE and t.value is not None:
        what = f"complete, value {t.value:.4g}"
    else:
        what = f"{t.state.name.lower()}, {reason or 'no reason recorded'}"
    took = f" after {t.duration.total_seconds():.0f} s" if t.duration is not None else ""
    return f"trial {t.number} ended: {what}{took}"


def started_line(trial: optuna.Trial, params: Params) -> str:
    """The worker's one log line for a trial it starts: number, retry of which, parameters."""
    retry = retry_of(frozen(trial))
    of = f" (retry of trial {retry})" if retry is not None else ""
    shown = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items())
    return f"trial {trial.number} started{of}: {shown}"


def explain(reason: str) -> str:
    return REASONS.get(reason, "see the worker log")


# with pruned_by_*: written just before TrialPruned
PRUNED_ENDINGS = ("nan_loss", "diverged", "invalid_schedule", PAUSED)


def ends_pruned(reason: str) -> bool:
    return reason.startswith("pruned_by_") or reason in PRUNED_ENDINGS


def fail_reason(t: FrozenTrial) -> str | None:
    """Why a finished trial did not complete; None for complete, running and waiting trials. A failed
    trial whose stored reason is one a pruned trial ends with lost its worker between the decision
    and telling Optuna (killed in that instant, then failed by the heartbeat check): ``worker_lost``."""
    if t.state not in (TrialState.FAIL, TrialState.PRUNED):
        return None
    reason = TrialRecord.of(t).fail_reason
    if reason and not (t.state == TrialState.FAIL and ends_pruned(reason)):
        return reason
    return "worker_lost" if t.state == TrialState.FAIL else "pruned_by_median"


def retry_of(t: FrozenTrial) -> int | None:
    """The number of the first attempt this trial retries (Optuna's record); None for a first attempt."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return RetryHeartbeatStaleTrialCallback.retried_trial_number(t)


def retry_history(t: FrozenTrial) -> list[int]:
    """The numbers of the attempts before this one, oldest first (Optuna's record)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return [int(n) for n in RetryHeartbeatStaleTrialCallback.retry_history(t)]


def is_retry(t: FrozenTrial) -> bool:
    return retry_of(t) is not None


def root_number(t: FrozenTrial) -> int:
    """The number of the first attempt: a trial and its retries share checkpoints and logs."""
    root = retry_of(t)
    return int(root) if root is not None else t.number


def failed_attempts(t: FrozenTrial) -> int:
    """The attempts before this one that failed: its retry history, less the paused attempt a
    continuation (pruner: rung) resumes, which did not fail, and the attempts a full disk ended (the
    host's fault, not the trial's)."""
    record = TrialRecord.of(t)
    return len(retry_history(t)) - (1 if record.continues is not None else 0) - record.host_faults


def is_paused(t: FrozenTrial) -> bool:
    """Stopped at the rung (pruner: rung), continued or not."""
    return t.state == TrialState.PRUNED and fail_reason(t) == PAUSED


def continued_numbers(trials: Sequence[FrozenTrial]) -> set[int]:
    """The paused trials a continuation resumes (its retries included)."""
    return {n for t in trials if (n := TrialRecord.of(t).continues) is not None}


def retried_numbers(trials: Sequence[FrozenTrial]) -> dict[int, int]:
    """{number of a failed attempt: number of the attempt that retried it}."""
    return {history[-1]: t.number for t in trials if (history := retry_history(t))}


class RetryStaleTrial(RetryHeartbeatStaleTrialCallback):
    """Optuna's retry of a stale (or stopped) trial, without the attributes of how it ended; an attempt
    a full disk ended is counted in ``host_faults`` and spends no retry."""

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        record = TrialRecord.of(trial)
        clean = copy.deepcopy(trial)
        clean.user_attrs = record.without_ending(host_fault=record.fail_reason == DISK_FULL)
        faults = TrialRecord.of(clean).host_faults
        limit = self._max_retry
        if limit is not None:
            limit += faults  # a full disk is the host's fault: it spends no retry
        if limit is not None and record.continues is not None:
            limit += 1  # the paused attempt in a continuation's history did not fail: it spends no retry
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            RetryHeartbeatStaleTrialCallback(max_retry=limit)(study, clean)


def leak_text(trials: Sequence[FrozenTrial]) -> str | None:
    """A worker process whose memory kept growing after warm-up and its largest batch (``rss_leak``)."""
    ordered = sorted(trials, key=lambda t: t.number)
    readings = [(t, h) for t in ordered if (h := TrialRecord.of(t).hardware) is not None]
    return rss_leak([(h.pid, h.rss_start_mb, int(t.params.get("batch_size", 0))) for t, h in readings])
