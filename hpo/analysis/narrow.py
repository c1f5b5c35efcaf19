"""The next study's spec from this one's evidence (``hpo narrow``): the parameters that mattered are
narrowed around the best trials, the ones that did not are fixed at the best trial's value, and every
change carries its evidence as a comment in the written YAML.

"Mattered" is read from fANOVA over the complete trials, bootstrapped (:mod:`hpo.analysis.importance`):
a parameter whose 80 % interval stays below ``MATTERS`` is fixed; any other is narrowed to the range
the best trials span (a log range widened by ×1.5 each side, a linear one by a tenth of its old width,
never past the old bounds), a categorical to the choices the best trials used.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml
from optuna.trial import FrozenTrial

from hpo.analysis.importance import Importances, common_eval_point, importances, score_target, validation_target
from hpo.analysis.ranking import best_first
from hpo.errors import HpoError
from hpo.files import JsonObject
from hpo.records import PRUNING_METRIC, named
from hpo.spec.loading import set_fixed
from hpo.spec.sampling import SAMPLING_FIELDS
from hpo.spec.spec import Spec

MATTERS = 0.15  # an upper 80 % bound of fANOVA importance below this: the parameter did not matter
TOP_SHARE, MIN_TOP = 0.2, 3  # the best trials the narrowed ranges are read from


@dataclass(frozen=True)
class Change:
    name: str
    action: str  # narrowed | fixed | kept
    evidence: str
    search: JsonObject | None = None  # the new search entry (narrowed, kept)
    value: Any = None  # the fixed value


def narrow(spec: Spec, trials: Sequence[FrozenTrial], metric: str) -> list[Change]:
    """The changes, read from the score's importances; with fewer than 3 complete trials (most pruned),
    from the validation metric at the latest evaluation point every finished trial reached, which the
    pruned trials measured too. Each change's evidence names which."""
    trials = [named(t) for t in trials]  # a parameter stored under a former name (ddim_steps) as its name
    done = best_first(trials)
    imp, ranked, on_validation = importances(trials, score_target, label=metric), done, False
    if not imp.fanova:
        imp, ranked = validation_evidence(trials, imp)
        on_validation = True
    top = ranked[: max(MIN_TOP, math.ceil(TOP_SHARE * len(ranked)))]
    best = done[0]
    spec_search = spec.to_dict()["search"]
    changes = []
    for name, body in spec_search.items():
        if name not in best.params:
            changes.append(Change(name, "kept", "no complete trial drew it", search=body))
            continue
        if on_validation and name in SAMPLING_FIELDS:
            why = f"{imp.target} does not depend on sampling settings, and too few trials are complete to rank them"
            changes.append(Change(name, "kept", why, search=body))
            continue
        evidence = _importance_text(imp, name)
        _, high = imp.intervals.get(name, (0.0, imp.fanova.get(name, 0.0)))
        if name not in imp.fanova or high < MATTERS:
            verdict = "did not matter" if name in imp.fanova else _unranked(done, name)
            changes.append(Change(name, "fixed", f"{evidence}: {verdict}; fixed at the best trial's value",
                                  value=readable(best.params[name])))  # fmt: skip
            continue
        values = [t.params[name] for t in top if name in t.params]
        changes.append(_narrowed(name, body, values, evidence, best.params[name], len(top)))
    return changes


def validation_evidence(trials: Sequence[FrozenTrial], score: Importances) -> tuple[Importances, list[FrozenTrial]]:
    """Importances of the validation metric at the common evaluation point, and the finished trials
    ranked by it (best first); a one-line error when even that cannot rank anything."""
    index = common_eval_point(trials)
    finished = [t for t in trials if t.state.is_finished()]
    if index is not None:
        target = validation_target(index)
        label = f"the validation metric ({PRUNING_METRIC}) at evaluation point {index}"
        imp = importances(finished, target, label=label, exclude=SAMPLING_FIELDS)
        if imp.fanova:
            ranked = sorted((t for t in finished if target(t) is not None), key=lambda t: target(t) or 0.0)
            return imp, ranked
    raise HpoError(
        f"hpo narrow needs importances: {score.note} Nor can the validation metric rank them yet: fewer than 3 "
        "finished trials reached a common evaluation point; run more trials (`hpo launch SPEC` again resumes "
        "the study; raise study.n_trials in the spec first if it is done)"
    )


def _unranked(done: Sequence[FrozenTrial], name: str) -> str:
    """Why fANOVA could not rank ``name``: said as what the complete trials show, not as "did not matter"."""
    drawn = {repr(t.params[name]) for t in done if name in t.params}
    if len(drawn) == 1:
        return f"every complete trial drew {drawn.pop()}, so its effect is unmeasured"
    return "its effect is unmeasured"


def readable(value: Any) -> Any:
    """A fixed float to 4 significant digits (what a person would write); anything else as it is."""
    return float(f"{value:.4g}") if isinstance(value, float) else value


def _importance_text(imp: Importances, name: str) -> str:
    if name not in imp.fanova:
        return f"fANOVA could not rank it for {imp.target} ({imp.n_trials} trials)"
    lo, hi = imp.intervals.get(name, (imp.fanova[name], imp.fanova[name]))
    middle = imp.medians.get(name, imp.fanova[name])
    return f"fANOVA for {imp.target}: {middle:.2f} (80% {lo:.2f}–{hi:.2f}, {imp.n_trials} trials)"


def _narrowed(name: str, body: Mapping[str, Any], values: list[Any], evidence: str, best: Any, count: int) -> Change:
    """``values``: the parameter in the best ``count`` trials."""
    body = {key: v for key, v in body.items() if v is not None}
    if body["type"] == "categorical":
        used = [c for c in body["choices"] if c in values]
        if len(used) < 2:
            return Change(name, "fixed", f"{evidence}: mattered, and the best {count} trials all chose {best!r}",
                          value=best)  # fmt: skip
        return Change(name, "narrowed", f"{evidence}: mattered; the best {count} trials chose {used} of "
                      f"{body['choices']}", search={**body, "choices": used})  # fmt: skip
    low, high = float(min(values)), float(max(values))
    old_low, old_high = float(body["low"]), float(body["high"])
    if body.get("log"):
        low, high = max(old_low, low / 1.5), min(old_high, high * 1.5)
    else:
        pad = (old_high - old_low) / 10
        low, high = max(old_low, low - pad), min(old_high, high + pad)
    if body["type"] == "int":
        low, high = math.floor(low), math.ceil(high)
        step = int(body.get("step") or 1)
        low = int(old_low + step * math.floor((low - old_low) / step))
        high = int(old_low + step * math.ceil((high - old_low) / step))
    else:
        low, high = float(f"{low:.3g}"), float(f"{high:.3g}")
    if low >= high:
        return Change(name, "fixed", f"{evidence}: mattered, and the best {count} trials agree on {best!r}", value=best)
    return Change(
        name,
        "narrowed",
        f"{evidence}: mattered; the best {count} trials span {min(values):.3g}–{max(values):.3g} (was "
        f"{old_low:g}–{old_high:g})",
        search={**body, "low": low, "high": high},
    )


def next_spec_yaml(spec: Spec, changes: Sequence[Change], best: FrozenTrial, *, name: str, source: str) -> str:
    """The next study's spec: the same settings, the fixed parameters set where they belong, the
    narrowed search with one comment per change, and the best trial as the baseline."""
    raw = spec.to_dict()
    raw["study"] = {**raw["study"], "name": name}
    search = {c.name: c.search for c in changes if c.search is not None}
    for c in (c for c in changes if c.action == "fixed"):
        set_fixed(raw, c.name, c.value)
    raw.pop("search")
    raw["baselines"] = [{k: v for k, v in best.params.items() if k in search}] if search else []
    head = [f"# Written by `hpo narrow {source}` (its best: trial #{best.number}); each change says why.", ""]
    head += [f"# {c.name}: fixed at {c.value!r} — {c.evidence}" for c in changes if c.action == "fixed"]
    body = yaml.safe_dump({k: v for k, v in raw.items() if k != "baselines"}, sort_keys=False)
    lines = ["search:"] + [
        f"  {c.name}: {yaml.safe_dump(c.search, default_flow_style=True, width=10_000, sort_keys=False).strip()}"
        f"  # {c.evidence}"
        for c in changes
        if c.search is not None
    ]
    baselines = yaml.safe_dump({"baselines": raw["baselines"]}, default_flow_style=None, sort_keys=False)
    tail = [f"# the baseline is trial #{best.number} of {source}, the best so far", baselines]
    return "\n".join([*head, "", body, *(lines if search else ["search: {}"]), "", *tail])
