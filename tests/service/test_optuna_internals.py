"""The private Optuna names hpo relies on (hpo.service.optuna_internals) still exist and still mean
what hpo takes them to mean. A failure here after an Optuna upgrade names the one to re-check."""

from __future__ import annotations

import time
from pathlib import Path

import optuna
import pytest
from optuna.storages import RDBStorage
from optuna.study import StudyDirection

from hpo.service import optuna_internals
from hpo.service.optuna_internals import PRIVATE_STORAGE_METHODS, check, stale_trial_ids, trial_id


def test_every_private_storage_method_exists_in_this_optuna() -> None:
    missing = check()
    assert missing == [], (
        f"Optuna {optuna.__version__} lacks {missing} (read in {optuna_internals.CHECKED_AGAINST}); "
        f"re-check {optuna_internals.__file__}"
    )


def test_the_private_storage_methods_read_what_the_public_ones_do(tmp_path: Path) -> None:
    storage = RDBStorage(f"sqlite:///{tmp_path / 'o.db'}", heartbeat_interval=60)
    study = optuna.create_study(storage=storage, study_name="internals")
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=3)
    study_id = storage.get_study_id_from_name("internals")
    private = {"_get_stale_trial_ids", "_set_trial_param", "_get_trials", "_get_best_trial_id"}
    assert set(PRIVATE_STORAGE_METHODS) == private
    trials = storage._get_trials(study_id, None, set(), -1)
    assert [t.number for t in trials] == [0, 1, 2]
    assert storage._get_best_trial_id(study_id, StudyDirection.MINIMIZE) == storage.get_best_trial(study_id)._trial_id
    assert storage._get_stale_trial_ids(study_id) == []  # all finished: nothing is stale


def test_a_running_trials_id_is_the_one_the_storage_knows_it_by(tmp_path: Path) -> None:
    storage = RDBStorage(f"sqlite:///{tmp_path / 'o.db'}")
    study = optuna.create_study(storage=storage, study_name="ids")
    seen: list[int] = []

    def objective(trial: optuna.Trial) -> float:
        seen.append(trial_id(trial))
        return 0.0

    study.optimize(objective, n_trials=2)
    study_id = storage.get_study_id_from_name("ids")
    assert seen == [storage.get_trial_id_from_study_id_trial_number(study_id, n) for n in (0, 1)]


@pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed to be used with Study.optimize")  # ask() here
def test_a_studys_stale_trials_are_read_through_the_storage_its_study_wraps(tmp_path: Path) -> None:
    """The reaper asks before it takes the start lock (``study._storage``, ``study._study_id``)."""
    storage = RDBStorage(f"sqlite:///{tmp_path / 'o.db'}", heartbeat_interval=1, grace_period=1)
    study = optuna.create_study(storage=storage, study_name="stale")
    trial = study.ask()
    storage.record_heartbeat(trial_id(trial))
    assert stale_trial_ids(study) == []
    time.sleep(2.2)
    assert stale_trial_ids(study) == [trial_id(trial)]
