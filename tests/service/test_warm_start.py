"""``hpo launch --warm-start``: another study's finished trials become prior observations of a new
one (counted toward nothing there), its best configuration runs first, and what could not be carried
is named. In-process on planted studies, and through the real CLI."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from hpo.errors import HpoError
from hpo.records import CARRIED_ATTR
from hpo.service.space import distributions, suggest
from hpo.service.storage import open_storage
from hpo.service.study import create_or_resume, make_sampler, progress
from hpo.service.trials import best_own, own_trials
from hpo.service.warm_start import warm_start
from hpo.spec.loading import load_spec
from hpo.spec.params import Params
from hpo.spec.spec import Spec
from tests.service_helpers import write_spec
from tests.study_builders import add

SEARCH = {
    "lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True},
    "batch_size": {"type": "categorical", "choices": [16, 32]},
    "schedule": {"type": "categorical", "choices": ["linear", "cosine"]},
    "guidance_scale": {"type": "float", "low": 1.0, "high": 3.0},
}
# the next study: lr narrowed to 3e-4..3e-3, batch size fixed at 32, the rest searched as before
NEXT_SEARCH = {**SEARCH, "lr": {"type": "float", "low": 3e-4, "high": 3e-3, "log": True}}
NEXT_SEARCH.pop("batch_size")


def planted_source(tmp_path: Path) -> optuna.Study:
    """Six finished trials and one failure: 3 fit the next space, 1 has lr outside it, 2 drew batch 16."""
    spec = load_spec(write_spec(tmp_path, "source.yaml", study={"name": "source", "n_trials": 10}, search=SEARCH))
    study, _ = create_or_resume(spec, open_storage(f"sqlite:///{tmp_path / 'hpo.db'}"))
    fits = [(1e-3, 4.0), (5e-4, 6.0), (2e-3, 9.0)]
    for lr, value in fits:
        add(study, {"lr": lr, "batch_size": 32, "schedule": "cosine", "guidance_scale": 2.0}, value=value, curve=[3, 2])
    add(study, {"lr": 9e-3, "batch_size": 32, "schedule": "linear", "guidance_scale": 2.0}, value=1.0, curve=[3, 1])
    for lr in (1e-3, 2e-3):
        add(study, {"lr": lr, "batch_size": 16, "schedule": "linear", "guidance_scale": 1.5}, value=3.0, curve=[3, 1])
    add(study, {"lr": 1e-3, "batch_size": 32, "schedule": "linear", "guidance_scale": 2.0}, value=None, curve=[3],
        state=TrialState.FAIL)  # fmt: skip
    return study


def next_study(tmp_path: Path, **changes: object) -> tuple[optuna.Study, Spec]:
    raw = {"study": {"name": "next", "n_trials": 6}, "search": NEXT_SEARCH, "train": {"batch_size": 32}, **changes}
    spec = load_spec(write_spec(tmp_path, "next.yaml", **raw))
    study, _ = create_or_resume(spec, open_storage(f"sqlite:///{tmp_path / 'hpo.db'}"), baselines=False)  # as launch
    return study, spec


def test_compatible_trials_are_carried_as_observations_that_count_toward_nothing(tmp_path: Path) -> None:
    source = planted_source(tmp_path)
    target, spec = next_study(tmp_path)
    carried = warm_start(target, spec, source, load_spec(tmp_path / "source.yaml"))
    assert carried.observations == 5
    assert dict(carried.skipped) == {"had lr outside the new range": 1, "failed (no value to carry)": 1}
    assert dict(carried.moved) == {"batch_size": 2}  # carried for lr, schedule and guidance; named
    line = carried.line()
    assert "5 finished trial(s) carried" in line and "(2 drew batch_size at another value than this spec" in line
    assert "not carried: 1 had lr outside the new range; 1 failed (no value to carry)" in line
    trials = target.get_trials()
    observed = [t for t in trials if CARRIED_ATTR in t.user_attrs]
    assert sorted(t.value for t in observed) == [3.0, 3.0, 4.0, 6.0, 9.0]  # type: ignore[type-var]
    assert all(set(t.params) == set(NEXT_SEARCH) for t in observed)  # described in the new space
    assert {t.user_attrs[CARRIED_ATTR] for t in observed} == {f"source#{n}" for n in (0, 1, 2, 4, 5)}
    assert all(list(t.intermediate_values) == [1, 2] for t in observed)  # same evaluation points: curves too
    # the best two carried configurations, in the new space, are queued to run first (n_trials 6 → at most 2)
    queued = [t for t in trials if t.state == TrialState.WAITING]
    expected = [{"lr": lr, "schedule": "linear", "guidance_scale": 1.5} for lr in (1e-3, 2e-3)]
    assert [t.system_attrs["fixed_params"] for t in queued] == expected
    assert queued[0].user_attrs["warm_start"] == "source#4"
    # carried trials count toward nothing: no slot, no best, not in the study's own trials
    p = progress(target, 6)
    assert (p.complete, p.slots, p.best) == (0, 2, None)
    assert best_own(target) is None and len(own_trials(target)) == 2


@pytest.mark.parametrize("sampler", ["tpe", "gp"])
def test_the_sampler_models_the_carried_trials(tmp_path: Path, sampler: str) -> None:
    """With 3 start-up trials, the 5 carried take the sampler past its random start: the same seeded
    sampler proposes differently with them than without them, from the very first trial."""
    source = planted_source(tmp_path)
    target, spec = next_study(tmp_path, sampler={"name": sampler, "seed": 0, "n_startup_trials": 3})
    warm_start(target, spec, source, load_spec(tmp_path / "source.yaml"))
    carried = [t for t in target.get_trials() if CARRIED_ATTR in t.user_attrs]

    def first_proposal(prior: list[optuna.trial.FrozenTrial]) -> Params:
        study = optuna.create_study(sampler=make_sampler(spec))
        for t in prior:
            study.add_trial(t)
        trial = study.ask()
        params = suggest(trial, spec.search)
        assert trial.distributions == distributions(spec.search)
        return params

    assert first_proposal(carried) != first_proposal([])


def test_a_study_scored_differently_is_refused_in_one_line(tmp_path: Path) -> None:
    source = planted_source(tmp_path)
    target, spec = next_study(tmp_path, score={"num_samples": 32})
    with pytest.raises(HpoError, match="differs in its score: section; its values are not comparable"):
        warm_start(target, spec, source, load_spec(tmp_path / "source.yaml"))
    assert target.get_trials() == []


def test_baselines_the_source_measured_are_not_run_again_unless_the_settings_changed(tmp_path: Path) -> None:
    source = planted_source(tmp_path)
    source_spec = load_spec(tmp_path / "source.yaml")
    measured = {"lr": 1e-3, "schedule": "cosine", "guidance_scale": 2.0}  # trial 0, at batch 32
    new = {"lr": 5e-4, "schedule": "linear", "guidance_scale": 2.0}
    elsewhere = {"lr": 1e-3, "schedule": "linear", "guidance_scale": 1.5}  # trial 4, but at batch 16: not this run
    target, spec = next_study(tmp_path, baselines=[measured, new, elsewhere])
    out = warm_start(target, spec, source, source_spec)
    queued = [t for t in target.get_trials() if t.state == TrialState.WAITING]
    assert out.measured_baselines == 1 and out.differs == []
    assert [t.system_attrs["fixed_params"] for t in queued[:2]] == [new, elsewhere]
    assert all(t.user_attrs["baseline"] is True for t in queued[:2])
    assert "1 baseline(s) not queued: the source measured them at these settings" in out.line()
    # a longer budget: the source's values were measured elsewhere, and every baseline runs
    longer = {"study": {"name": "longer", "n_trials": 6}, "search": NEXT_SEARCH,
              "train": {"batch_size": 32, "kimg": 1.6}, "baselines": [measured, new]}  # fmt: skip
    spec = load_spec(write_spec(tmp_path, "longer.yaml", **longer))
    target, _ = create_or_resume(spec, open_storage(f"sqlite:///{tmp_path / 'hpo.db'}"), baselines=False)
    out = warm_start(target, spec, source, source_spec)
    assert out.differs == ["train.kimg"] and out.measured_baselines == 0
    assert "the source trained with other train.kimg: its values were measured there" in out.line()
    baselines = [t for t in target.get_trials() if t.user_attrs.get("baseline")]
    assert [t.system_attrs["fixed_params"] for t in baselines] == [measured, new]
