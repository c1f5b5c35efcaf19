"""Studies built trial by trial with a known structure, for the report and ladder tests."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.storages import RDBStorage
from optuna.trial import TrialState

from hpo.companions import kind_for
from hpo.companions.base import Request
from hpo.files import JsonObject
from hpo.records import ComboScore
from hpo.service.storage import open_storage
from hpo.service.study import create_or_resume
from hpo.spec.loading import load_spec
from hpo.spec.sampling import SamplingConfig
from tests.service_helpers import write_spec

DISTS = {
    "lr": FloatDistribution(1e-4, 1e-2, log=True),
    "batch_size": CategoricalDistribution([16, 32]),
    "schedule": CategoricalDistribution(["linear", "cosine"]),
    "guidance_scale": FloatDistribution(1.0, 3.0),
}


def new_study(tmp_path: Path, name: str) -> optuna.Study:
    spec = load_spec(write_spec(tmp_path, f"{name}.yaml", study={"name": name, "n_trials": 40}))
    study, _ = create_or_resume(spec, open_storage(f"sqlite:///{tmp_path / 'hpo.db'}"))
    return study


def add(
    study: optuna.Study,
    params: dict[str, Any],
    *,
    value: float | None,
    curve: list[float],
    state: TrialState = TrialState.COMPLETE,
    **attrs: Any,
) -> None:
    points = {str(k + 1): {"kimg": 0.4 * (k + 1), "val_rel": v, "val_loss": v} for k, v in enumerate(curve)}
    study.add_trial(
        optuna.create_trial(
            state=state,
            params=params,
            distributions={k: DISTS[k] for k in params},
            value=value if state == TrialState.COMPLETE else None,
            intermediate_values={int(k): p["val_rel"] for k, p in points.items()},
            user_attrs={"curve": points, "budget_kimg": 1.6, **attrs},
        )
    )


def structured_study(tmp_path: Path) -> optuna.Study:
    """30 complete trials whose score and validation curve depend on lr alone (plus small noise)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    study = new_study(tmp_path, "structured")
    rng = np.random.default_rng(0)
    for _ in range(30):
        p = random_params(rng)
        quality = (math.log10(p["lr"]) + 3) ** 2
        add(study, p, value=5 + 4 * quality + rng.normal(0, 0.1), curve=[1 - 0.1 * k + 0.2 * quality for k in range(4)])
    return study


def random_params(rng: np.random.Generator) -> dict[str, Any]:
    return {
        "lr": float(10 ** rng.uniform(-4, -2)),
        "batch_size": int(rng.choice([16, 32])),
        "schedule": str(rng.choice(["linear", "cosine"])),
        "guidance_scale": float(rng.uniform(1, 3)),
    }


def planted_sweep(grid: dict[tuple[int, float], float]) -> list[JsonObject]:
    """A trial's stored sampling sweep with these scores per (DDIM steps, guidance)."""
    return [
        ComboScore(SamplingConfig(guidance_scale=w, steps=n), "full", 256, v, 0.0, None, 1.0).to_dict()
        for (n, w), v in grid.items()
    ]


def create_companion(
    source: optuna.Study,
    storage: RDBStorage,
    *,
    top: int,
    seeds: int,
    kimg: float | None,
    budgets: list[int] | None = None,
) -> optuna.Study:
    """A confirmation (or, with ``budgets``, a budget ladder) of ``source``, created through the registry
    as ``hpo confirm`` creates it."""
    request = Request(top=top, seeds=seeds, kimg=kimg, budgets=budgets)
    return kind_for(request).create(source, storage, request)
