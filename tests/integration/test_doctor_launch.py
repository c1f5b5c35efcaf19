"""A broken corner of the search space: the doctor warns and names it, and a launched study's trial
that draws it ends before training while the others train."""

from __future__ import annotations

from pathlib import Path

from tests.cli import run_cli
from tests.service_helpers import write_spec


def test_a_broken_corner_of_the_search_space_is_a_warning_naming_it_and_its_trials_end_before_training(
    tmp_path: Path,
) -> None:
    """T=100 with literal linear betas 1e-4..0.02 ends at ᾱ 0.36: a broken corner. The doctor warns and
    names it; the study runs, and the trial that draws it is refused at once while the others train."""
    from tests.service_helpers import hpo

    spec = write_spec(
        tmp_path,
        study={"name": "corners", "n_trials": 2},
        search={
            "lr": {"type": "float", "low": 1e-4, "high": 1e-3, "log": True},
            "timesteps": {"type": "categorical", "choices": [100, 1000]},
            "beta_scaling": {"type": "categorical", "choices": ["scaled", "none"]},
        },
        baselines=[
            {"lr": 5e-4, "timesteps": 100, "beta_scaling": "scaled"},
            {"lr": 5e-4, "timesteps": 100, "beta_scaling": "none"},
        ],
    )
    code, out, _ = run_cli(["doctor", str(spec), "--fast", "-o", str(tmp_path / "doc"), "--threads", "1"])
    assert code == 0, out
    assert "[WARN] schedule: search-space corners: 1 of 4 corners of the searched schedule settings never reach" in out
    assert "linear literal betas 0.0001→0.02 T=100 (ᾱ_T 0.364)" in out and "invalid_schedule" in out
    url = f"sqlite:///{tmp_path / 'hpo.db'}"
    launched = hpo("launch", str(spec), "--artifacts", str(tmp_path / "a"), url=url, cwd=tmp_path)
    assert launched.returncode == 0, launched.stderr[-2000:]
    import optuna

    trials = {t.number: t for t in optuna.load_study(study_name="corners", storage=url).get_trials()}
    assert trials[0].state.name == "COMPLETE"
    refused = trials[1]
    assert refused.state.name == "PRUNED" and refused.user_attrs["fail_reason"] == "invalid_schedule"
    assert "linear literal betas 0.0001→0.02 T=100" in refused.user_attrs["error"] and "curve" not in refused.user_attrs
    assert (refused.datetime_complete - refused.datetime_start).total_seconds() < 2  # type: ignore[operator]
