"""One trial of a planned spec timed on this machine: what ``hpo init`` predicts a study's time from
and what ``hpo run`` sizes its search with. Two training steps at the smallest batch size (the
quickest to time; per image a larger batch usually costs no more, so it errs long) and two sampling
passes at the score's batch (the sweep's network evaluations at that speed), on random images of the
folder's shape (the folder itself is not read)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hpo.doctor.model_checks import TrialCost, stand_in_data, trial_cost, trial_seconds
from hpo.doctor.run import base_config, batch_size_configs
from hpo.planning.plan import Plan
from hpo.spec.config import TrainConfig
from hpo.spec.spec import Spec
from hpo.training.runtime import resolve_device


@dataclass(frozen=True)
class TimedTrial:
    """A trial timed here: the smallest batch size's training config, the largest batch size searched,
    the device, and what a complete trial costs."""

    smallest: TrainConfig
    largest_batch: int
    device: torch.device
    cost: TrialCost


def time_trial(spec: Spec, plan: Plan) -> TimedTrial:
    """A complete trial of ``spec`` (planned as ``plan``) timed on this machine."""
    cfg = base_config(spec)
    device = resolve_device(cfg.device)
    configs = batch_size_configs(spec, cfg.replace(device=str(device)))
    smallest = configs[0]
    data = stand_in_data(smallest.batch_size, plan.image_size, max(plan.survey.num_classes, 1))
    train = trial_seconds(smallest, data, device)
    cost = trial_cost(spec.sampling, spec.score, smallest, data, device, train_seconds=train)
    return TimedTrial(smallest, max(c.batch_size for c in configs), device, cost)
