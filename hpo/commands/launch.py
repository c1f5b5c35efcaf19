"""``hpo launch``: create or resume the study, start local workers, follow progress, report."""

from __future__ import annotations

import sys
from pathlib import Path

import optuna
from optuna.storages import RDBStorage

from hpo.doctor.preflight import preflight_doctor
from hpo.errors import HpoError, writable_folder
from hpo.report.render import report_path, write_report
from hpo.scoring.score import preflight
from hpo.service.local import (
    LocalWorkers,
    check_some_complete,
    check_workers_finished,
    follow,
    start_workers,
    stop_workers,
)
from hpo.service.status_view import terminal_width, trials_table
from hpo.service.storage import open_storage
from hpo.service.study import create_or_resume, existing_study, load, require_spec, sampler_warning
from hpo.service.urls import redact, resolve_url, sqlite_path
from hpo.service.warm_start import check_scored_alike, warm_start
from hpo.spec.loading import load_spec
from hpo.spec.rules import check_study_name
from hpo.spec.spec import Spec, sample_count_problems
from hpo.tracking.external import check_trackers


def scoring_preflight(spec: Spec, *, local_workers: int) -> None:
    """Scoring must be possible where trials are scored. With local workers that is here: missing
    Inception weights refuse the launch. With none (remote GPU workers) it is only a warning: each
    worker checks its own copy before any training."""
    try:
        preflight(spec.score)
    except HpoError as err:
        if local_workers > 0:
            raise
        print(f"warning: {err} — no local worker scores here; each worker checks its own copy first", file=sys.stderr)


def prior_study(store: RDBStorage | None, url: str, name: str, spec: Spec) -> tuple[optuna.Study, Spec]:
    """The study to warm-start from, checked before anything is created."""
    if store is None:
        raise HpoError(f"--warm-start: no study named {name[:200]!r} in {redact(url)} (no database there yet)")
    source = load(store, name, redact(url))
    source_spec = require_spec(source)
    check_scored_alike(source_spec, spec)
    return source, source_spec


def run_launch(
    spec_path: Path,
    *,
    storage: str | None,
    local: LocalWorkers,
    detach: bool,
    name: str | None,
    artifacts: Path,
    doctor: bool = True,
    warm_from: str | None = None,
) -> None:
    spec = load_spec(spec_path)
    if name is not None:
        check_study_name(name, key="--name")
    url = resolve_url(storage)
    plan = local.plan(url)
    scoring_preflight(spec, local_workers=len(plan))
    if (warning := sampler_warning(spec)) is not None:
        print(f"warning: {warning}", file=sys.stderr)
    check_trackers(spec.tracking)
    path = sqlite_path(url)
    fresh = path is not None and not path.exists()  # no database yet: nothing to resume, nothing to create early
    store = None if fresh else open_storage(url)
    resuming = store is not None and existing_study(spec, store, name or spec.study.name) is not None
    source = prior_study(store, url, warm_from, spec) if warm_from is not None and not resuming else None
    if warm_from is not None and resuming:
        print(f"--warm-start ignored: study {name or spec.study.name!r} exists and is resumed (trials are "
              "carried once, when a study is created)", file=sys.stderr)  # fmt: skip
    if not detach:  # checked before the study is created, not after its last trial
        writable_folder(report_path(name or spec.study.name).parent, "the report")
    if doctor and not resuming:  # a study being resumed passed the doctor when it was created
        preflight_doctor(spec, artifacts, len(plan))
    database = store or open_storage(url)
    study, created = create_or_resume(spec, database, name=name, baselines=source is None)
    name = study.study_name
    print(f"{'created' if created else 'resuming'} study {name!r} in {redact(url)}")
    for problem in sample_count_problems(spec):  # after any refusal, which stays one line
        print(f"warning: {problem.key}: {problem.message}", file=sys.stderr)
    if created and source is not None:
        print(warm_start(study, spec, *source).line())
    procs = start_workers(url, name, plan, threads=local.threads, artifacts=artifacts, detach=detach)
    if detach:
        print(f"{len(plan)} worker(s) started in the background; follow with `hpo status {name}`")
        return
    try:
        follow(study, spec.study, spec.score.metric_name, procs)
    except KeyboardInterrupt:
        stop_workers(procs)  # SIGTERM: running trials are queued for retry
        print(f"\nstopped; relaunch `hpo launch {spec_path}` to resume", file=sys.stderr)
        raise SystemExit(130) from None
    for w in procs:
        w.proc.wait()
    check_workers_finished(study, spec.study, procs)
    print(trials_table(study, spec.score.metric_name, terminal_width()))
    print(f"report: {write_report(study, database, report_path(name), artifact_dir=artifacts)}")
    check_some_complete(study, spec.study)
