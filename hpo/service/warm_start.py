"""``hpo launch SPEC --warm-start OTHER``: a new study that starts from another's evidence.

The other study's finished trials whose parameters the new search space can hold are copied in as
prior observations (``record.CARRIED_ATTR`` names where each came from): the sampler models them and
the pruner compares against their curves, but they count toward nothing of the new study
(``trials.own_trials``). Its best configurations are enqueued, so the new study measures them again
under its own settings before the sampler proposes. What could not be carried is named in one line.

A trial is carried when every searched parameter of the new spec is among its parameters and inside
the new range (Optuna's own containment check): it becomes an observation of the parameters still
searched. A parameter the new spec no longer searches is dropped; where the trial drew it at another
value than the new spec fixes (to 3 significant digits: ``hpo narrow`` writes fixed floats to 4), the
line counts it, since that observation is then only as good as the parameter was unimportant (what
``hpo narrow`` fixes, it fixes because fANOVA found it did not matter). Values are copied only when
both studies score the same way (same score section); curves only when both evaluate
at the same points.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import FrozenTrial, TrialState, create_trial

from hpo.analysis.ranking import best_first
from hpo.errors import ConfigError, HpoError
from hpo.records import CARRIED_ATTR, WARM_START_ATTR, named
from hpo.service.space import distributions
from hpo.service.study import enqueue_baseline
from hpo.service.trials import own_trials
from hpo.spec.params import Params
from hpo.spec.sampling import SAMPLING_FIELDS
from hpo.spec.spec import Spec, changed_keys

TOP = 3  # configurations of the other study enqueued first: from its best third, at most a third of n_trials
RELATIVE_TOLERANCE = 1e-3


@dataclass
class Carried:
    source: str
    observations: int = 0  # trials copied in as prior observations
    enqueued: list[Params] = field(default_factory=list)  # configurations queued to run first
    skipped: Counter[str] = field(default_factory=Counter)  # why a finished trial was not carried: count
    moved: Counter[str] = field(default_factory=Counter)  # a now-fixed parameter: carried trials drawn elsewhere
    differs: list[str] = field(default_factory=list)  # settings (not searched) the source trained with otherwise
    measured_baselines: int = 0  # the spec's baselines not queued: the source measured them at the same settings

    def line(self) -> str:
        head = (
            f"warm start from {self.source!r}: {self.observations} finished trial(s) carried as prior "
            f"observations (they count toward nothing here), {len(self.enqueued)} best configuration(s) "
            f"queued to run first"
        )
        if self.moved:
            moved = ", ".join(f"{n} drew {name}" for name, n in self.moved.most_common())
            head += f" ({moved} at another value than this spec fixes: carried for the parameters still searched)"
        if self.measured_baselines:
            head += f"; {self.measured_baselines} baseline(s) not queued: the source measured them at these settings"
        if self.differs:
            head += f"; the source trained with other {', '.join(self.differs)}: its values were measured there"
        if not self.skipped:
            return head
        why = "; ".join(f"{n} {reason}" for reason, n in self.skipped.most_common())
        return f"{head}; not carried: {why}"


def check_scored_alike(source: Spec, target: Spec) -> None:
    """Prior values must be on the new study's scale: one line naming the difference otherwise (both
    minimise: study.direction allows nothing else)."""
    if source.to_dict()["score"] != target.to_dict()["score"]:
        raise HpoError(
            f"--warm-start: the other study scores with {source.score.metric_name} "
            f"({source.score.num_samples} samples) and this spec differs in its score: section; its values are "
            "not comparable — use the same score: section, or launch without --warm-start"
        )


def fixed_value(spec: Spec, name: str) -> tuple[bool, Any]:
    """(known, value): what ``spec`` trains or samples ``name`` at when it does not search it."""
    if name.startswith("network."):
        kwargs = spec.train.network.kwargs
        key = name.split(".", 1)[1]
        return key in kwargs, kwargs.get(key)
    if name in SAMPLING_FIELDS:
        return True, getattr(spec.sampling, name)
    return hasattr(spec.train, name), getattr(spec.train, name, None)


def same_value(drawn: Any, fixed: Any) -> bool:
    if isinstance(fixed, list | tuple):  # a swept sampling setting: the drawn value must be among them
        return any(same_value(drawn, f) for f in fixed)
    both_numbers = isinstance(drawn, int | float) and isinstance(fixed, int | float)
    if both_numbers and not isinstance(drawn, bool):
        return math.isclose(float(drawn), float(fixed), rel_tol=RELATIVE_TOLERANCE)
    return bool(drawn == fixed)


def why_not(t: FrozenTrial, spec: Spec) -> str | None:
    """Why trial ``t`` cannot be an observation of ``spec``'s objective; None when it can."""
    if t.state == TrialState.FAIL or (t.state == TrialState.COMPLETE and t.value is None):
        return "failed (no value to carry)"
    for name, param in spec.search.items():
        if name not in t.params:
            return f"lacked the parameter {name}"
        try:
            param.check_contains(t.params[name], name)
        except ConfigError:
            return f"had {name} outside the new range"
    return None


def moved_parameters(t: FrozenTrial, spec: Spec) -> list[str]:
    """The parameters ``t`` drew that ``spec`` no longer searches and fixes at another value."""
    out = []
    for name, value in t.params.items():
        if name not in spec.search:
            known, fixed = fixed_value(spec, name)
            if not known or not same_value(value, fixed):
                out.append(name)
    return out


def observation(t: FrozenTrial, source: str, dists: Mapping[str, BaseDistribution], same_points: bool) -> FrozenTrial:
    return create_trial(
        state=t.state,
        value=t.value if t.state == TrialState.COMPLETE else None,
        params={name: t.params[name] for name in dists},
        distributions=dict(dists),
        intermediate_values=dict(t.intermediate_values) if same_points else None,
        user_attrs={CARRIED_ATTR: f"{source}#{t.number}"},
    )


def settings_differ(source: Spec, target: Spec) -> list[str]:
    """Data and training settings, other than searched parameters, that differ between the specs."""
    searched = {f"train.{name}" for name in (*source.search, *target.search)}
    old, new = source.to_dict(), target.to_dict()
    keys = changed_keys({k: old[k] for k in ("data", "train")}, {k: new[k] for k in ("data", "train")})
    return [k for k in keys if k not in searched and not k.startswith("data.cache_dir")]


def measured(params: Mapping[str, Any], carried: list[FrozenTrial], spec: Spec) -> bool:
    """Whether a complete carried trial ran exactly ``params`` under ``spec``: every searched
    parameter given and equal, and nothing it drew that the spec now fixes elsewhere."""
    if set(params) != set(spec.search):
        return False
    exact = (t for t in carried if t.state == TrialState.COMPLETE and not moved_parameters(t, spec))
    return any(all(same_value(t.params[k], v) for k, v in params.items()) for t in exact)


def warm_start(target: optuna.Study, spec: Spec, source: optuna.Study, source_spec: Spec) -> Carried:
    """Carry ``source``'s finished trials into the new study ``target``, then enqueue the spec's
    baselines (those the source did not measure at the same settings) and the source's best
    configurations; what was carried, queued and skipped (and why)."""
    check_scored_alike(source_spec, spec)
    dists = distributions(spec.search)
    same_points = source_spec.train.eval_fractions() == spec.train.eval_fractions()
    out = Carried(source.study_name, differs=settings_differ(source_spec, spec))
    carried: list[FrozenTrial] = []
    for stored in own_trials(source, (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)):
        t = named(stored)  # a parameter stored under a former name (ddim_steps) as its name
        reason = why_not(t, spec)
        if reason is None:
            try:
                target.add_trial(observation(t, source.study_name, dists, same_points))
            except ValueError:  # Optuna's containment check: e.g. a float off the new step grid
                reason = "had a value off the new grid"
        if reason is not None:
            out.skipped[reason] += 1
            continue
        carried.append(t)
        out.moved.update(moved_parameters(t, spec))
    out.observations = len(carried)
    ranked = best_first(carried)  # a spec's studies are minimised (study.direction)
    queued = [dict(b) for b in spec.baselines]
    for i, params in enumerate(queued):
        if not out.differs and measured(params, carried, spec):
            out.measured_baselines += 1
        else:
            enqueue_baseline(target, params, name=spec.baseline_name(i))
    for t in ranked[: math.ceil(len(ranked) / 3)]:  # never re-run a configuration that scored in the worse part
        if len(out.enqueued) >= min(TOP, max(1, spec.study.n_trials // 3)):
            break
        params = {name: t.params[name] for name in dists}
        if params in queued:
            continue
        target.enqueue_trial(params, user_attrs={WARM_START_ATTR: f"{source.study_name}#{t.number}"})
        queued.append(params)
        out.enqueued.append(params)
    return out
