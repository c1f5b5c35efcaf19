"""Every private Optuna name hpo relies on, in one place, with why it is needed. Checked against
the Optuna version below; ``tests/service/test_optuna_internals.py`` fails loudly when an upgrade removes or
reshapes one, instead of a worker failing mid-study."""

from __future__ import annotations

from typing import TYPE_CHECKING

import optuna
from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial

if TYPE_CHECKING:  # annotations only (ResilientStorage's written-out methods): never imported at run time
    from optuna._typing import JSONSerializable as JSONSerializable
    from optuna.study._frozen import FrozenStudy as FrozenStudy

CHECKED_AGAINST = "5.0.0"  # the Optuna whose source these names were read in: re-read them on another

# RDBStorage methods that ResilientStorage overrides or wraps:
# - _get_stale_trial_ids: which trials' heartbeats lapsed; overridden so that heartbeats lost to a
#   database outage are not held against their trials.
# - _get_trials, _get_best_trial_id: how Optuna's _CachedStorage (around every Study's storage)
#   reads trials; retried through an outage, or a pruning check during a restart fails its trial.
# The RDB schema's two tables a trial's liveness lives in: a RUNNING trial whose worker died between
# creating it and its first heartbeat has no row in trial_heartbeats, and Optuna's stale check skips it
# (it looks only at trials that have beaten), so it would stay RUNNING forever and hold a slot.
RUNNING_WITHOUT_HEARTBEAT = """
SELECT t.trial_id FROM trials t LEFT JOIN trial_heartbeats h ON h.trial_id = t.trial_id
WHERE t.study_id = :study_id AND t.state = 'RUNNING' AND h.trial_id IS NULL
"""
PRIVATE_READS = ("_get_trials", "_get_best_trial_id")  # retried through an outage like the public reads
# - _set_trial_param: how Optuna's _CachedStorage writes a suggestion (set_trial_param is not called);
#   retried through an outage, or a suggest during a restart fails its trial.
PRIVATE_STORAGE_METHODS = ("_get_stale_trial_ids", "_set_trial_param", *PRIVATE_READS)


def trial_id(trial: optuna.Trial | FrozenTrial) -> int:
    """The storage's id of a trial (``_trial_id``, running or frozen): heartbeats, the stale check and
    the checkpoint's owner are keyed by it, and Optuna's public API does not offer it."""
    return int(trial._trial_id)


def stale_trial_ids(study: optuna.Study) -> list[int]:
    """The trials ``fail_stale_trials`` would fail now (the storage's ``_get_stale_trial_ids`` of the
    study's ``_study_id``): the reaper takes the start lock only when there are some."""
    return list(study._storage._get_stale_trial_ids(study._study_id))  # type: ignore[attr-defined]


def frozen(trial: optuna.Trial) -> FrozenTrial:
    """A running trial as stored (its system attributes too: which attempt it retries)."""
    return trial.storage.get_trial(trial_id(trial))


def check() -> list[str]:
    """The private names above that this Optuna lacks (empty when all are there)."""
    return [f"RDBStorage.{name}" for name in PRIVATE_STORAGE_METHODS if not callable(getattr(RDBStorage, name, None))]
