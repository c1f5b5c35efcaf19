"""``hpo confirm STUDY``: retrain the winners with fresh seeds through the workers, then print
the verdict and add it to the study's report."""

from __future__ import annotations

import sys
from pathlib import Path

from hpo.commands.launch import check_workers_finished, follow, start_workers
from hpo.commands.status import table
from hpo.report.render import report_path, write_report
from hpo.service.confirm import Verdict, create_companion, verdict
from hpo.service.ladder import Ladder, copy_floor_text, ladder_rows, ladder_verdict
from hpo.service.storage import open_storage
from hpo.service.study import FLOOR_ATTR, load, require_spec
from hpo.service.urls import is_sqlite, redact, resolve_url


def verdict_text(v: Verdict, metric: str, floor: dict[str, float] | None = None) -> str:
    """The configurations' study and confirmed scores, the rank correlation, the verdict, and where
    real held-out images land on the same score (the floor)."""
    rows = [
        [
            f"#{c.trial}" + (" (baseline)" if c.baseline else ""),
            c.study_value,
            c.mean if c.values else None,
            c.spread if len(c.values) > 1 else None,
            len(c.values),
        ]
        for c in v.configs
    ]
    header = ["configuration", f"study {metric}", f"confirmed {metric}", "spread (sd)", "seeds"]
    rho = (
        f"{v.rank_correlation:.2f} over {sum(1 for c in v.configs if c.values)} configurations"
        if v.rank_correlation is not None
        else "n/a (fewer than 3 configurations scored)"
    )
    scale = f"\nreal held-out images: {metric} {floor['score']:.4g} (the floor)" if floor else ""
    return f"{table(rows, header)}\n\nrank correlation, study vs confirmed order: {rho}\n{v.text}{scale}"


def ladder_text(ladder: Ladder, metric: str) -> str:
    """Configurations × rungs (mean ± sd over seeds), the rank correlation and verdict per rung, the
    ladder's one sentence, and each configuration's stop verdict and forecast."""
    header = ["configuration", f"study {metric}", *(f"{r.multiple}× ({r.kimg:g} kimg)" for r in ladder.rungs)]
    rows = [[label, value, *cells] for label, value, cells in ladder_rows(ladder)]
    lines = [table(rows, header), ""]
    for r in ladder.rungs:
        rho = f"{r.rank_correlation:+.2f}" if r.rank_correlation is not None else "n/a (< 3 configurations)"
        lines.append(f"{r.multiple:>3}×: rank correlation with the study's order {rho}; {r.text}")
    lines.append(ladder.summary)
    if ladder.floor:
        lines.append(
            f"real held-out images: {metric} {ladder.floor['score']:.4g} "
            f"at {ladder.floor.get('num_images', 0):g} images, "
            f"copy share up to {copy_floor_text(ladder.floor)} (the floor)"
        )
    for number, stop in ladder.stops.items():
        lines.append(f"#{number}: {stop.text}")
        if number in ladder.forecasts:
            lines.append(f"#{number}: {ladder.forecasts[number].text}")
    return "\n".join(lines)


def run_confirm(
    study_name: str,
    *,
    storage: str | None,
    top: int,
    seeds: int,
    kimg: float | None,
    workers: int | None,
    detach: bool,
    artifacts: Path,
    budgets: list[int] | None = None,
) -> None:
    url = resolve_url(storage)
    store = open_storage(url, must_exist=True)
    source = load(store, study_name, redact(url))
    companion = create_companion(source, store, top=top, seeds=seeds, kimg=kimg, budgets=budgets)
    spec = require_spec(companion)
    rungs = f", scored at {', '.join(f'{b}×' for b in budgets)} the budget" if budgets else ""
    print(
        f"confirmation study {companion.study_name!r}: {spec.study.n_trials} trials at {spec.train.kimg:g} kimg{rungs}"
    )
    n_workers = workers if workers is not None else (1 if is_sqlite(url) else 0)
    procs = start_workers(url, companion.study_name, n_workers, artifacts=artifacts, detach=detach)
    if detach:
        print(f"{n_workers} worker(s) started; `hpo confirm {study_name}` again shows the verdict", file=sys.stderr)
        return
    follow(companion, spec.study.n_trials, spec.score.metric_name, procs)
    for w in procs:
        w.proc.wait()
    check_workers_finished(companion, spec.study.n_trials, procs)
    if budgets is not None:
        print(ladder_text(ladder_verdict(source, companion), spec.score.metric_name))
    else:
        floor = companion.user_attrs.get(FLOOR_ATTR) or source.user_attrs.get(FLOOR_ATTR)
        print(verdict_text(verdict(source, companion), spec.score.metric_name, floor))
    print(f"report: {write_report(source, store, report_path(source.study_name), artifact_dir=artifacts)}")
