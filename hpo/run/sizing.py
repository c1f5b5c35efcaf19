"""The budget arithmetic that joins the planner and the measured trials to the split (:mod:`.split`):
the plan sized to the budget, each phase's planned seconds, a configuration's measured speed and the
final run's budget and settings, and what the final run trained in words."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import optuna

from hpo.errors import HpoError
from hpo.planning.plan import Plan
from hpo.planning.spec_yaml import ema_halflife_kimg, warmup_kimg
from hpo.records import TrialRecord
from hpo.run.ledger import Decisions, Ledger
from hpo.run.split import SearchBudget, Speed

PREFLIGHT_SECONDS = 60.0  # planned for `hpo doctor --fast` (measured ~20-40 s on 2 CPU cores at 16-32 px)


def sized_plan(plan: Plan, search: SearchBudget) -> Plan:
    """``plan`` with the trial budget and count the budget buys, and the final run's forecast as target."""
    per_second = search.trial.kimg / search.trial.train_s
    target = round(max(search.trial.kimg, search.shares.final_s * per_second), 1)
    budget = dataclasses.replace(plan.budget, kimg=search.trial.kimg, target_kimg=target)
    return dataclasses.replace(plan, n_trials=search.n_trials, budget=budget)


def plan_planned(ledger: Ledger, plan_s: float, search: SearchBudget) -> None:
    planned = {
        "plan": plan_s, "preflight": PREFLIGHT_SECONDS, "search": search.shares.search_s,
        "decide": search.shares.decide_s, "final": search.shares.final_s, "sweep": search.shares.sweep_s,
        "export": search.shares.export_s,
    }  # fmt: skip
    for name, seconds in planned.items():
        ledger.phase(name).planned_s = round(seconds, 1)


def complete_seconds(ranked: list[optuna.trial.FrozenTrial]) -> float:
    """What a retrained configuration costs on this machine: training and sweep as measured in the search,
    the most of the best 3 (the ones the decision retrains; their batch sizes set their speed)."""
    return max(TrialRecord.of(t).train_seconds + TrialRecord.of(t).score_seconds for t in ranked[:3])


def speed_of(record: TrialRecord) -> Speed:
    """How fast a trial's or an ``hpo train`` run's configuration trained (its ``RunRecord`` keys)."""
    return Speed.measured(
        seconds=record.train_seconds, images_per_second=record.images_per_second,
        eval_seconds=record.eval_seconds, eval_points=record.eval_points,
    )  # fmt: skip


def final_speed(trial: TrialRecord) -> Speed:
    """The speed of a final run of ``trial``'s configuration: its training rate, and points that cost
    the trial's own plus scoring its best combination at the full count, which a final run does at
    each point (the watched score and the copy check) and a trial does not. On shapes at 16 px a
    trial's point took 2.3 s and the final run's 9.3 s; sized by the trial's, the final run was cut by
    its deadline at 78 % of its kimg, before its learning rate had decayed."""
    speed = speed_of(trial)
    return Speed(speed.kimg_per_second, speed.point_seconds + trial.combination_seconds(trial.sampling))


@dataclass(frozen=True)
class FinalTrain:
    """The final run's training settings: its budget as planned, checkpoints at even intervals, and the
    warm-up and EMA half-life the planner gives a run of that budget (the trial's, 1/20 of a trial's
    kimg, would average a tenfold longer run over too little)."""

    kimg: float
    num_evals: int
    continued: bool = False  # continues a trial's lineage: its warm-up is the trial's, already trained

    def params(self) -> dict[str, float | str]:
        """As the trial's parameters are given: fixed in the exported spec, ``--set`` for the run."""
        warmup = {} if self.continued else {"warmup_kimg": warmup_kimg(self.kimg)}
        return {
            "kimg": self.kimg, "num_evals": self.num_evals, "eval_spacing": "even", **warmup,
            "ema_halflife_kimg": ema_halflife_kimg(self.kimg),
        }  # fmt: skip

    def overrides(self) -> list[str]:
        return [f"train.{k}={v}" for k, v in self.params().items()]


def final_train(decisions: Decisions) -> FinalTrain:
    """The final run's settings from the budget its final phase planned (and the ledger keeps)."""
    kimg, num_evals = decisions.final_kimg, decisions.final_num_evals
    if kimg is None or num_evals is None:
        raise HpoError("the ledger holds no final run's budget yet; its final phase plans one when it starts")
    return FinalTrain(kimg, num_evals, continued=decisions.continued_kimg is not None)


def what_trained(summary: TrialRecord, planned_kimg: float) -> tuple[float, str]:
    """The kimg a final run trained (its last evaluation point: a deadline or the stop verdict ends a run
    at one, with that point's weights) and what ended it before ``planned_kimg`` ("" when nothing did)."""
    last = summary.last_entry
    reached = (last.kimg if last else 0.0) or planned_kimg
    if reached >= planned_kimg * 0.999:
        return reached, ""
    stop = summary.stop
    if stop is not None and stop.kind == "copying":
        return reached, f"the stop verdict (copying since {stop.since_kimg or 0.0:.3g} kimg)"
    cooled = summary.lineage[1]
    if cooled is not None and reached > cooled:  # wsd: cooled from there, never cut at full learning rate
        return reached, f"the deadline (its cooldown from {cooled:g} kimg)"
    return reached, "the deadline"
