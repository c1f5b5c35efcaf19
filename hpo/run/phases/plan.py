"""The plan phase: ``hpo init``'s plan for the folder on this machine, a trial of it timed here
(:mod:`hpo.planning.timing`), the search sized to the budget (:mod:`hpo.run.split`); in memory, so a
refusal leaves nothing behind."""

from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hpo.analysis.tables import duration
from hpo.doctor.survey import survey_folder
from hpo.outputs import write_output
from hpo.planning.machine import default_name, this_machine
from hpo.planning.plan import Plan, choose_image_size, plan_spec
from hpo.planning.spec_yaml import plan_yaml
from hpo.planning.timing import time_trial
from hpo.run.ledger import Ledger
from hpo.run.options import RunOptions, command_line, worker_count
from hpo.run.sizing import PREFLIGHT_SECONDS, plan_planned, sized_plan
from hpo.run.split import Costs, SearchBudget, plan_search
from hpo.run.state import SPEC_FILE, new_ledger
from hpo.scoring.weights import weights_present
from hpo.spec.config import LrSchedule, TrainConfig
from hpo.spec.loading import load_spec
from hpo.spec.rules import check_study_name, min_eval_steps
from hpo.spec.spec import Spec


@dataclass(frozen=True)
class SizedPlan:
    """The plan sized to the budget: the planner's plan, the search the budget buys, the trial's measured
    costs, and the sized spec's text (loaded and validated, written nowhere yet)."""

    plan: Plan
    search: SearchBudget
    costs: Costs
    spec_text: str


@dataclass(frozen=True)
class PlannedRun:
    """The plan phase's result: the ledger with every phase planned, the spec's text, the lines saying what."""

    ledger: Ledger
    spec_text: str
    lines: list[str]


def first_plan(opts: RunOptions) -> Plan:
    """``hpo init``'s plan for the folder on this machine (its survey, network, batch sizes, scoring)."""
    survey = survey_folder(opts.images)
    name = default_name(opts.images, choose_image_size(survey, opts.image_size))
    check_study_name(name, key="the folder's name")
    machine = this_machine(None)
    return plan_spec(survey, machine, name=name, image_size=opts.image_size, weights_present=weights_present())


def measure(spec: Spec, plan: Plan) -> Costs:
    """A trial of ``spec`` timed here as ``hpo init`` times it (:mod:`hpo.planning.timing`): the split's costs."""
    timed = time_trial(spec, plan)
    smallest = timed.smallest
    min_kimg = min_eval_steps(smallest.num_evals, smallest.eval_spacing) * timed.largest_batch / 1000
    first = smallest.eval_fractions()[0]
    return Costs(smallest.kimg, timed.cost.train_seconds, timed.cost.sweep_seconds, first, min_kimg)


def make_plan(opts: RunOptions, budget_s: float, spent_s: float) -> SizedPlan:
    """Plan, time a trial of the planned spec, size the search to the budget; the sized spec's text
    (loaded and validated, written nowhere). Refused in one line when the budget is below the minimum."""
    plan = dataclasses.replace(first_plan(opts), seed=opts.seed, lr_schedule=opts.lr_schedule)
    data_path = str(opts.images.resolve())
    with tempfile.TemporaryDirectory() as tmp:
        path = write_output(Path(tmp) / SPEC_FILE, plan_yaml(plan, data_path))
        costs = measure(load_spec(path), plan)
        overhead = spent_s + PREFLIGHT_SECONDS
        search = plan_search(costs, opts.split, left_s=budget_s - overhead, budget_s=budget_s, overhead_s=overhead,
                             workers=worker_count(opts))  # fmt: skip
        plan = sized_plan(plan, search)
        text = plan_yaml(plan, data_path)
        load_spec(write_output(path, text))  # what will be written loads and validates
    return SizedPlan(plan, search, costs, text)


def plan_lines(sized: SizedPlan, ledger: Ledger) -> list[str]:
    plan, search, costs = sized.plan, sized.search, sized.costs
    trial = search.trial
    return [
        f"[plan] {plan.survey.words()}",
        f"  {plan.image_size} px, {plan.network.parameters / 1e6:.1f}M parameters, batch sizes "
        f"{', '.join(map(str, plan.search.batch_sizes))}, {plan.scoring.features} FID on {plan.scoring.num_samples} "
        "samples",
        f"  a trial: {trial.kimg:g} kimg ({costs.kimg:g} planned by hpo init), timed here at "
        f"{duration(trial.complete_s)} complete ({duration(trial.train_s)} training, {duration(trial.sweep_s)} "
        f"sampling sweep); {search.n_trials} trials at most",
        f"  the final run: ~{plan.budget.target_kimg:g} kimg in {duration(search.shares.final_s)}, re-planned from "
        "the winner's measured speed",
        f"  {schedule_words(plan.lr_schedule, trial.kimg, plan.budget.target_kimg)}",
        f"  {plan.data_words()}",
        *ledger.lines(),
    ]


def schedule_words(schedule: LrSchedule, trial_kimg: float, final_kimg: float) -> str:
    """When each run cools down, and what the final run continues (``--lr-schedule``)."""
    if schedule != "wsd":
        return (
            f"lr: warm-up, then {schedule} decay to the floor at each run's end; the final run trains the winner "
            "from scratch; comparisons are made at the trial budget"
        )
    share = TrainConfig.cooldown_share
    stable = round(trial_kimg * (1 - share), 3)
    return (
        f"lr: warm-up, flat, then a cooldown over the last {share:.0%}: a trial cools from {stable:g} kimg, and "
        f"the final run continues the winner's state at {stable:g} kimg and cools from "
        f"~{final_kimg * (1 - share):.3g} kimg, earlier if its deadline comes sooner (it is never cut at full lr); "
        "comparisons are made at the trial budget"
    )


def plan_run(opts: RunOptions, budget_s: float) -> PlannedRun:
    """The plan phase of a new run, in memory (a refusal leaves nothing behind): the ledger with every
    phase planned, the spec's text, and the lines that say what was planned."""
    ledger = new_ledger(opts, budget_s)
    ledger.start("plan")
    sized = make_plan(opts, budget_s, 0.0)
    search = sized.search
    ledger.tick()
    plan_planned(ledger, ledger.phase("plan").spent_s, search)
    ledger.study = sized.plan.name
    ledger.decisions.trial_kimg, ledger.decisions.n_trials = search.trial.kimg, search.n_trials
    ledger.finish("plan", note=f"{search.n_trials} trials of {search.trial.kimg:g} kimg")
    return PlannedRun(ledger, sized.spec_text, plan_lines(sized, ledger))


def plan_only(opts: RunOptions, budget_s: float, out: Path) -> list[str]:
    """What ``--plan-only`` prints: the plan and the ledger it would start with; nothing is written."""
    return [*plan_run(opts, budget_s).lines, f"run it: {command_line(opts, budget_s, out)}"]
