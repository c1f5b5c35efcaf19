"""The only caller of ``trial.suggest_*``: a spec's search space → one trial's parameters, and the
same space as Optuna distributions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution

from hpo.spec.params import CategoricalParam, FloatParam, IntParam, Param, Params


def suggest(trial: optuna.Trial, search: Mapping[str, Param]) -> Params:
    params: Params = {}
    for name, p in search.items():
        if isinstance(p, FloatParam):
            params[name] = trial.suggest_float(name, p.low, p.high, log=p.log, step=p.step)
        elif isinstance(p, IntParam):
            params[name] = trial.suggest_int(name, p.low, p.high, step=p.step, log=p.log)
        elif isinstance(p, CategoricalParam):
            params[name] = trial.suggest_categorical(name, list(p.choices))
        else:  # pragma: no cover - the Param union is closed
            raise TypeError(f"unknown parameter type {type(p).__name__}")
    return params


def distributions(search: Mapping[str, Param]) -> dict[str, BaseDistribution]:
    """The distributions ``suggest`` draws from: what a copied trial must be described with."""
    out: dict[str, BaseDistribution] = {}
    for name, p in search.items():
        if isinstance(p, FloatParam):
            out[name] = FloatDistribution(p.low, p.high, log=p.log, step=p.step)
        elif isinstance(p, IntParam):
            out[name] = IntDistribution(p.low, p.high, log=p.log, step=p.step)
        else:
            out[name] = CategoricalDistribution(list(p.choices))
    return out


def grid(search: Mapping[str, Param]) -> dict[str, list[Any]]:
    """The search space as GridSampler expects it."""
    return {name: p.grid_values(f"search.{name}") for name, p in search.items()}
