"""``hpo status``: studies, or one study's trials, as plain-text tables."""

from __future__ import annotations

import json
from collections.abc import Sequence

import optuna
from optuna.trial import FrozenTrial

from hpo.errors import HpoError
from hpo.storage import open_storage, redact
from hpo.study import SPEC_ATTR, Progress, progress


def table(rows: Sequence[Sequence[object]], header: Sequence[str]) -> str:
    cells = [[str(c) for c in header]] + [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "-" if value is None else str(value)


def n_trials_of(study: optuna.Study) -> int:
    return int(json.loads(study.user_attrs.get(SPEC_ATTR, "{}")).get("study", {}).get("n_trials", 0))


def metric_of(study: optuna.Study) -> str:
    features = json.loads(study.user_attrs.get(SPEC_ATTR, "{}")).get("score", {}).get("features", "inception")
    return "classifier-FID" if features == "classifier" else "FID"


def progress_line(p: Progress, metric: str = "FID") -> str:
    best = f"{p.best:.4g}" if p.best is not None else "-"
    return (
        f"{p.finished}/{p.n_trials} finished: {p.complete} complete, {p.pruned} pruned, {p.failed} failed, "
        f"{p.running} running | best {metric} {best}"
    )


def fail_reason(t: FrozenTrial) -> str | None:
    reason = t.user_attrs.get("fail_reason")
    if reason:
        return str(reason)
    if t.state == optuna.trial.TrialState.FAIL:
        return "worker_lost"
    return None


def trials_table(study: optuna.Study) -> str:
    trials = study.get_trials(deepcopy=False)
    names = sorted({k for t in trials for k in t.params})
    rows = [[t.number, t.state.name, t.value, *(t.params.get(n) for n in names), fail_reason(t)] for t in trials]
    return table(rows, ["#", "state", "value", *names, "reason"])


def status_text(url: str, study_name: str | None) -> str:
    storage = open_storage(url)
    if study_name is None:
        summaries = optuna.get_all_study_summaries(storage, include_best_trial=False)
        if not summaries:
            return f"no studies in {redact(url)}"
        rows = []
        for s in summaries:
            study = optuna.load_study(study_name=s.study_name, storage=storage)
            rows.append([s.study_name, progress_line(progress(study, n_trials_of(study)), metric_of(study))])
        return table(rows, ["study", "progress"])
    try:
        study = optuna.load_study(study_name=study_name, storage=storage)
    except KeyError:
        raise HpoError(f"no study named {study_name!r} in {redact(url)}; `hpo status` lists them") from None
    return progress_line(progress(study, n_trials_of(study)), metric_of(study)) + "\n\n" + trials_table(study)
