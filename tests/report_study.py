"""A real small study for report tests: complete, pruned and failed trials from a real worker."""

from __future__ import annotations

from pathlib import Path

import optuna
from optuna.distributions import BaseDistribution, FloatDistribution

from hpo.service.storage import open_storage
from hpo.service.study import create_or_resume
from hpo.service.worker import Worker, WorkerOptions
from hpo.spec.loading import load_spec
from tests.service_helpers import write_spec

GOOD = {"batch_size": 16, "timesteps": 50, "schedule": "linear", "guidance_scale": 1.0, "steps": 4}


def build_study(folder: Path, name: str = "report-study") -> tuple[optuna.Study, Path]:
    """6 trials from a real worker (one with an absurd learning rate, pruned), plus three failures
    recorded the way workers record them (out-of-memory twice at a high lr, and a worker lost)."""
    url = f"sqlite:///{folder / 'hpo.db'}"
    spec_path = write_spec(
        folder,
        study={"name": name, "n_trials": 6},
        train={"kimg": 1.2, "num_evals": 3, "grad_clip": 0.0},
        search={
            "lr": {"type": "float", "low": 1e-4, "high": 10.0, "log": True},
            "guidance_scale": {"type": "float", "low": 1.0, "high": 3.0},
            "steps": {"type": "int", "low": 2, "high": 6, "step": 2},
        },
        baselines=[
            {"lr": 1e-3, "guidance_scale": 1.0, "steps": 4},
            {"lr": 2e-3, "guidance_scale": 2.0, "steps": 6},
            {"lr": 1.5e-3, "guidance_scale": 1.5, "steps": 2},
            {"lr": 8.0, "guidance_scale": 1.0, "steps": 4},
        ],
        pruner={"name": "median", "startup_trials": 3, "warmup_evals": 0},
    )
    study, _ = create_or_resume(load_spec(spec_path), open_storage(url))
    artifacts = folder / "artifacts"
    Worker(WorkerOptions(url=url, study=name, exit_when_idle=True, artifact_dir=artifacts, poll_seconds=0.2)).serve()
    dist: dict[str, BaseDistribution] = {"lr": FloatDistribution(1e-4, 10.0, log=True)}
    for lr, reason in ((6.0, "oom"), (7.0, "oom"), (7.5, None)):
        attrs = {"fail_reason": reason} if reason else {}
        study.add_trial(
            optuna.create_trial(
                state=optuna.trial.TrialState.FAIL, params={"lr": lr}, distributions=dist, user_attrs=attrs
            )
        )
    return study, artifacts
