"""``hpo status``: studies, or one study's trials, as plain-text tables, with ``--json`` and ``--watch``.
The rows and lines are the read model's (:mod:`hpo.service.status_view`), which ``hpo launch`` prints
while it follows a study too; states and reasons are the same words as in the report."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

import optuna
from optuna.storages import RDBStorage

from hpo.analysis.noise import noise_of
from hpo.analysis.tables import table
from hpo.errors import HpoError
from hpo.files import JsonObject
from hpo.records import StudyRecord
from hpo.run.ledger import Ledger
from hpo.service.status_view import best_text, frontiers_json, progress_line, study_notes, trial_rows, trials_table
from hpo.service.storage import open_storage
from hpo.service.study import load, metric_of, n_trials_of, progress
from hpo.service.trials import own_trials
from hpo.service.urls import redact


@functools.lru_cache(maxsize=1)
def storage_of(url: str) -> RDBStorage:
    """One storage for the URL being shown: ``--watch`` re-reads it at every refresh instead of
    opening (and collecting) an engine each time."""
    return open_storage(url, must_exist=True)


def shown_studies(url: str, study_name: str | None) -> list[optuna.Study]:
    """The study named, or every study in the storage."""
    storage = storage_of(url)
    if study_name is not None:
        return [load(storage, study_name, redact(url))]
    summaries = optuna.get_all_study_summaries(storage, include_best_trial=False)
    return [optuna.load_study(study_name=s.study_name, storage=storage) for s in summaries]


def run_lines(study: optuna.Study) -> list[str]:
    """The budgeted run (``hpo run``) whose search this study is: where it is and its ledger."""
    raw = StudyRecord.of(study).run
    if raw is None:
        return []
    try:
        ledger = Ledger.from_dict(raw)
    except HpoError as err:
        return [f"hpo run: its ledger on this study cannot be read ({err})", ""]
    return [ledger.status_line(), *ledger.lines(), ""]


def study_text(study: optuna.Study, width: int | None = None) -> str:
    p, metric = progress(study, n_trials_of(study)), metric_of(study)
    head = progress_line(p, metric, best_text(study, p)) + "".join(f"\n{line}" for line in study_notes(study, p))
    return "".join(f"{line}\n" for line in run_lines(study)) + head + "\n\n" + trials_table(study, metric, width)


def status_text(url: str, study_name: str | None, width: int | None = None) -> str:
    """Every study's progress, or one study's progress and trials table (``width``: see ``trials_table``)."""
    studies = shown_studies(url, study_name)
    if study_name is not None:
        return study_text(studies[0], width)
    if not studies:
        return f"no studies in {redact(url)}"
    rows = []
    for study in studies:
        p = progress(study, n_trials_of(study))
        rows.append([study.study_name, progress_line(p, metric_of(study), best_text(study, p))])
    return table(rows, ["study", "progress"])


def study_json(study: optuna.Study) -> JsonObject:
    p, noise = progress(study, n_trials_of(study)), noise_of(own_trials(study))
    floor = StudyRecord.of(study).floor
    return {
        "name": study.study_name, "metric": metric_of(study), "n_trials": p.n_trials, "finished": p.finished,
        "complete": p.complete, "pruned": p.pruned, "failed": p.failed, "retried": p.retried, "continued": p.continued,
        "running": p.running, "waiting": p.waiting, "done": p.done, "best": p.best, "best_noise_sd": noise.sd,
        "floor": floor.as_dict() if floor is not None else None, "notes": study_notes(study, p),
        "frontiers": frontiers_json(study),
        "run": StudyRecord.of(study).run,
    }  # fmt: skip


def status_json(url: str, study_name: str | None) -> JsonObject:
    """``hpo status --json``: every study's summary, or one study's and one object per trial."""
    studies = shown_studies(url, study_name)
    if study_name is None:
        return {"studies": [study_json(s) for s in studies]}
    return {"study": study_json(studies[0]), "trials": [r.as_json() for r in trial_rows(studies[0])]}


def all_finished(url: str, study_name: str | None) -> bool:
    """Whether the study (or every study) is finished: ``hpo status --watch`` stops then."""
    return all(progress(s, n_trials_of(s)).done for s in shown_studies(url, study_name))


def watch_status(show: Callable[[], str], finished: Callable[[], bool], *, every: float, clear: bool) -> None:
    """Print ``show()`` every ``every`` seconds (over the last one when ``clear``: a terminal) until
    ``finished()``; Ctrl-C ends it quietly."""
    try:
        while True:
            text, done = show(), finished()
            print(("\033[H\033[2J" if clear else "") + text, flush=True)
            if done:
                return
            time.sleep(every)
    except KeyboardInterrupt:
        return
