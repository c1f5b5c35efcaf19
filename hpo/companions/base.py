"""What every companion study is: a second study derived from a first (its top configurations,
retrained), served by the same workers, read back into a verdict. One protocol, one request, and
the reading and creation steps they share."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import optuna
from optuna.storages import BaseStorage, RDBStorage
from optuna.trial import FrozenTrial, TrialState

from hpo.analysis.confirmation import Confirmed
from hpo.analysis.ranking import best_first
from hpo.companions.blocks import Block
from hpo.errors import HpoError
from hpo.files import JsonObject
from hpo.records import SOURCE_STUDY_ATTR, StudyRecord, TrialRecord
from hpo.service.study import create_or_resume, require_spec
from hpo.service.trials import own_trials
from hpo.spec.loading import section
from hpo.spec.params import Params, ParamValue
from hpo.spec.spec import spec_from_dict

SEED_BASE = 1000  # confirmation seeds 1001, 1002, ...: never the study's own seed


@dataclass(frozen=True)
class Request:
    """What ``hpo confirm`` asks for (the flags, parsed and checked)."""

    top: int = 3
    seeds: int = 3
    kimg: float | None = None
    budgets: list[int] | None = None  # a budget ladder: multiples of the study's budget
    widths: list[float] | None = None  # a width ladder: multiples of the base channels
    lrs: int = 5  # a width ladder's learning rates per width

    @property
    def kind(self) -> str:
        """The companion these flags ask for, by its ``Kind.name``: a budget ladder with budgets, a width
        ladder with widths, else fresh seeds (the one place a new kind's flag is read)."""
        if self.budgets is not None:
            return "ladder"
        return "widths" if self.widths is not None else "confirm"


class Reading(Protocol):
    """A companion read back: the verdict presented once, as blocks (the report's section, and as text
    what ``hpo confirm`` prints: :func:`~hpo.companions.blocks.blocks_text`), and its data as JSON
    (``hpo confirm --json``)."""

    def json(self) -> JsonObject: ...

    def blocks(self) -> list[Block]: ...


class Kind(Protocol):
    """One kind of companion study."""

    @property
    def name(self) -> str:
        """The suffix of the companion's study name."""
        ...

    @property
    def pointer(self) -> str:
        """The source study's attribute naming its companion of this kind."""
        ...

    @property
    def heading(self) -> str:
        """The report section's title."""
        ...

    def create(self, source: optuna.Study, storage: RDBStorage, request: Request) -> optuna.Study:
        """The companion with every trial enqueued, or the existing one; the source points to it."""
        ...

    def plan_text(self, request: Request) -> str:
        """What the trials do beyond the budget, for the line ``hpo confirm`` prints first."""
        ...

    def flags(self, request: Request) -> str:
        """The flags that name this companion again (``hpo confirm STUDY`` + these)."""
        ...

    def read(self, source: optuna.Study, companion: optuna.Study, metric: str) -> Reading: ...

    def absent(self, study_name: str) -> list[Block]:
        """The report's section before the companion exists: what is not known and how to ask."""
        ...


def companion_name(study_name: str, kind: str) -> str:
    return f"{study_name[:92]}-{kind}"


def seed_choices(seeds: int) -> list[int]:
    return [SEED_BASE + i for i in range(1, seeds + 1)]


def pick_configurations(study: optuna.Study, top: int) -> list[FrozenTrial]:
    """The ``top`` best complete trials with distinct parameters, then the best complete baseline
    (if it is not among them)."""
    complete = best_first(own_trials(study))
    chosen: list[FrozenTrial] = []
    for t in complete:
        if len(chosen) < top and all(t.params != c.params for c in chosen):
            chosen.append(t)
    baseline = next((t for t in complete if TrialRecord.of(t).baseline), None)
    if baseline is not None and all(baseline.params != c.params for c in chosen):
        chosen.append(baseline)
    if not chosen:
        raise HpoError(f"study {study.study_name!r} has no complete trial to confirm yet")
    return chosen


def companion_raw(
    study: optuna.Study, name: str, *, n_trials: int, train: JsonObject, search: Mapping[str, Sequence[ParamValue]]
) -> JsonObject:
    """The study's spec as a companion's: its own name and trial count, ``train`` settings replaced,
    the parameters in ``search`` (and kimg) taken out of the search space and offered as exactly those
    choices, no pruning, no baselines: every trial is enqueued by the companion's creator."""
    raw = require_spec(study).to_dict()
    raw["study"] = {**section(raw, "study"), "name": name, "n_trials": n_trials}
    raw["train"] = {**section(raw, "train"), **train}
    kept: JsonObject = {k: v for k, v in section(raw, "search").items() if k != "kimg" and k not in search}
    raw["search"] = {**kept, **{k: {"type": "categorical", "choices": list(v)} for k, v in search.items()}}
    raw.update(pruner={"name": "none"}, sampler={"name": "random", "seed": 0}, baselines=[])
    return raw


Enqueued = tuple[Params, JsonObject]  # one enqueued trial: its parameters and its user attributes


def create_companion(
    study: optuna.Study,
    storage: RDBStorage,
    *,
    name: str,
    what: str,
    n_trials: int,
    train: JsonObject,
    search: Mapping[str, Sequence[ParamValue]],
    attrs: JsonObject,
    runs: Iterable[Enqueued],
    pointer: str,
) -> optuna.Study:
    """The one way a companion is made: the source's spec as the companion's (:func:`companion_raw`),
    created with ``attrs`` and every run in ``runs`` enqueued, or the existing one resumed (``runs``
    is then never read); the source's ``pointer`` attribute names it. ``what`` names it in errors."""
    raw = companion_raw(study, name, n_trials=n_trials, train=train, search=search)
    companion, created = create_or_resume(spec_from_dict(raw, file=f"{what} of {study.study_name}"), storage)
    if created:
        companion.set_user_attr(SOURCE_STUDY_ATTR, study.study_name)
        for key, value in attrs.items():
            companion.set_user_attr(key, value)
        for params, user_attrs in runs:
            companion.enqueue_trial(params, user_attrs=user_attrs)
    study.set_user_attr(pointer, name)
    return companion


def final_value(t: FrozenTrial) -> float | None:
    return float(t.value) if t.state == TrialState.COMPLETE and t.value is not None else None


def head_row(t: FrozenTrial, values: list[float] | None = None) -> Confirmed:
    """A source trial as a configuration row: its number, study value and baseline flag."""
    return Confirmed(t.number, float(t.value or math.nan), TrialRecord.of(t).baseline, values or [])


def confirmed_results(
    source: optuna.Study, companion: optuna.Study, value_of: Callable[[FrozenTrial], float | None] = final_value
) -> list[Confirmed]:
    """Each configuration's values over its seeds, in the study's order; ``value_of`` reads one
    companion trial (its final value by default, the score at one budget for a ladder)."""
    by_source = {t.number: t for t in source.get_trials(deepcopy=False)}
    values: dict[int, list[float]] = {}
    for t in companion.get_trials(deepcopy=False):
        number = TrialRecord.of(t).source_trial
        if number is None:
            continue
        values.setdefault(number, [])
        value = value_of(t)
        if value is not None and math.isfinite(value):
            values[number].append(value)
    out = [head_row(by_source[n], v) for n, v in values.items() if n in by_source]
    return sorted(out, key=lambda c: c.study_value)


def finished_count(companion: optuna.Study) -> int:
    return sum(1 for t in companion.get_trials(deepcopy=False) if t.state.is_finished())


def find_companion(study: optuna.Study, storage: BaseStorage, pointer: str) -> optuna.Study | str | None:
    """The companion that ``pointer`` (a study attribute) names; None when there is none yet, its
    name when the pointer outlived its study."""
    name = StudyRecord.of(study).text(pointer)
    if name is None:
        return None
    try:
        return optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        return name
