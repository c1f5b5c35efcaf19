"""Studies: create or resume from a spec, the spec stored inside, sampler and pruner from it,
and the count that ends a study at exactly ``n_trials`` however many workers run."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import optuna
from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial, TrialState

from hpo import __version__
from hpo.errors import HpoError
from hpo.space import grid
from hpo.spec import Spec, changed_keys, comparable, spec_from_dict

log = logging.getLogger("hpo.study")

SPEC_ATTR, HASH_ATTR = "hpo_spec", "hpo_spec_hash"


def make_sampler(spec: Spec, worker_index: int = 0) -> optuna.samplers.BaseSampler:
    """Each worker offsets the seed: processes with one seeded sampler would propose identical trials."""
    s = spec.sampler
    seed = None if s.seed is None else s.seed + worker_index
    if s.name == "tpe":
        return optuna.samplers.TPESampler(
            seed=seed, n_startup_trials=s.n_startup_trials, multivariate=True, constant_liar=True
        )
    if s.name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if s.name == "grid":
        return optuna.samplers.GridSampler(grid(spec.search), seed=seed)
    raise ValueError(f"unknown sampler {s.name!r}; expected one of tpe, random, grid")


def make_pruner(spec: Spec) -> optuna.pruners.BasePruner:
    p = spec.pruner
    if p.name == "none":
        return optuna.pruners.NopPruner()
    # Steps are evaluation indices 1..K; Optuna's earliest prune is at step == n_warmup_steps.
    return optuna.pruners.MedianPruner(
        n_startup_trials=p.startup_trials, n_warmup_steps=p.warmup_evals + 1, interval_steps=1
    )


def stored_spec(study: optuna.Study) -> Spec | None:
    raw = study.user_attrs.get(SPEC_ATTR)
    return spec_from_dict(json.loads(raw), file=f"study {study.study_name}") if raw else None


def create_or_resume(spec: Spec, storage: RDBStorage, *, name: str | None = None) -> tuple[optuna.Study, bool]:
    """Create the study (spec stored inside, baselines enqueued) or resume the same spec.
    A different spec under an existing name is refused, naming the changed keys."""
    name = name or spec.study.name
    try:
        existing = optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        existing = None
    if existing is not None:
        old = json.loads(existing.user_attrs.get(SPEC_ATTR, "{}"))
        if existing.user_attrs.get(HASH_ATTR) != spec.fingerprint():
            diff = changed_keys(comparable(old), comparable(spec.to_dict())) if old else ["(no spec stored)"]
            raise HpoError(
                f"study {name!r} exists with a different spec (changed: {', '.join(diff)}); launch with "
                f"--new-name NAME to start a new study, or restore the old values to resume it"
            )
        existing.set_user_attr(SPEC_ATTR, json.dumps(spec.to_dict()))  # n_trials may have grown
        return existing, False
    study = optuna.create_study(
        study_name=name,
        storage=storage,
        direction=spec.study.direction,
        sampler=make_sampler(spec),
        pruner=make_pruner(spec),
    )
    spec_dict = spec.to_dict()
    spec_dict["study"]["name"] = name
    study.set_user_attr(SPEC_ATTR, json.dumps(spec_dict))
    study.set_user_attr(HASH_ATTR, spec.fingerprint())
    study.set_user_attr("hpo_version", __version__)
    for params in spec.baselines:
        study.enqueue_trial(dict(params), user_attrs={"baseline": True})
    return study, True


def is_retry(trial: FrozenTrial) -> bool:
    return "failed_trial" in trial.system_attrs


@dataclass(frozen=True)
class Progress:
    complete: int
    pruned: int
    failed: int  # failures that were not retried
    running: int
    waiting: int
    slots: int  # trials counted against n_trials: every trial that is not a retry of another
    n_trials: int
    best: float | None

    @property
    def finished(self) -> int:
        return self.complete + self.pruned + self.failed

    @property
    def done(self) -> bool:
        return self.finished >= self.n_trials and self.running == 0 and self.waiting == 0


def progress(study: optuna.Study, n_trials: int, trials: Sequence[FrozenTrial] | None = None) -> Progress:
    trials = trials if trials is not None else study.get_trials(deepcopy=False)
    retried = {t.system_attrs["failed_trial"] for t in trials if is_retry(t)}
    retried |= {n for t in trials for n in t.system_attrs.get("retry_history", [])}
    states = [t.state for t in trials]
    failed = sum(1 for t in trials if t.state == TrialState.FAIL and t.number not in retried)
    complete = [t.value for t in trials if t.state == TrialState.COMPLETE and t.value is not None]
    return Progress(
        complete=len(complete),
        pruned=states.count(TrialState.PRUNED),
        failed=failed,
        running=states.count(TrialState.RUNNING),
        waiting=states.count(TrialState.WAITING),
        slots=sum(1 for t in trials if not is_retry(t)),
        n_trials=n_trials,
        best=min(complete) if complete else None,
    )
