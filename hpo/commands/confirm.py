"""``hpo confirm STUDY``: retrain the winners with fresh seeds through the workers, then print
the verdict and add it to the study's report."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any

from hpo.commands.json_out import json_text
from hpo.commands.launch import LocalWorkers, check_workers_finished, follow, start_workers
from hpo.commands.status import table
from hpo.report.render import report_path, write_report
from hpo.service.confirm import Confirmed, Verdict, create_companion, verdict
from hpo.service.ladder import Ladder, copy_floor_text, ladder_rows, ladder_verdict
from hpo.service.storage import open_storage
from hpo.service.study import FLOOR_ATTR, load, require_spec
from hpo.service.urls import redact, resolve_url


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


def configuration_json(c: Confirmed) -> dict[str, Any]:
    return {
        "trial": c.trial, "baseline": c.baseline, "study_value": c.study_value, "values": c.values,
        "mean": c.mean if c.values else None, "spread": c.spread if len(c.values) > 1 else None,
    }  # fmt: skip


def verdict_json(v: Verdict, floor: dict[str, float] | None) -> dict[str, Any]:
    """``hpo confirm --json``: what ``verdict_text`` prints, as data."""
    return {
        "budget_ratio": v.budget_ratio, "seeds": v.seeds, "finished": v.finished, "expected": v.expected,
        "configurations": [configuration_json(c) for c in v.configs], "rank_correlation": v.rank_correlation,
        "verdict": v.text, "floor": floor,
    }  # fmt: skip


def ladder_json(ladder: Ladder) -> dict[str, Any]:
    """``hpo confirm --budgets ... --json``: what ``ladder_text`` prints, as data."""
    rungs = [
        {"multiple": r.multiple, "kimg": r.kimg, "state": r.state, "rank_correlation": r.rank_correlation,
         "verdict": r.text, "configurations": [configuration_json(c) for c in r.configs]}
        for r in ladder.rungs
    ]  # fmt: skip
    return {
        "finished": ladder.finished, "expected": ladder.expected, "rungs": rungs, "verdict": ladder.summary,
        "stops": {n: {"kind": s.kind, "since_kimg": s.since_kimg, "text": s.text} for n, s in ladder.stops.items()},
        "forecasts": {n: {"target_kimg": f.target_kimg, "value": f.value, "low": f.low, "high": f.high, "text": f.text}
                      for n, f in ladder.forecasts.items()},
        "floor": ladder.floor,
    }  # fmt: skip


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
    local: LocalWorkers,
    detach: bool,
    artifacts: Path,
    budgets: list[int] | None = None,
    as_json: bool = False,
) -> None:
    """Queue the confirmation trials, run them on local workers, print the verdict: as text, or
    with ``as_json`` as one JSON object on stdout (everything else then goes to stderr)."""
    url = resolve_url(storage)
    store = open_storage(url, must_exist=True)
    source = load(store, study_name, redact(url))
    plan = local.plan(url)
    companion = create_companion(source, store, top=top, seeds=seeds, kimg=kimg, budgets=budgets)
    spec = require_spec(companion)
    metric = spec.score.metric_name
    with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
        rungs = f", scored at {', '.join(f'{b}×' for b in budgets)} the budget" if budgets else ""
        print(f"confirmation study {companion.study_name!r}: {spec.study.n_trials} trials at {spec.train.kimg:g} kimg"
              f"{rungs}")  # fmt: skip
        procs = start_workers(url, companion.study_name, plan, threads=local.threads, artifacts=artifacts,
                              detach=detach)  # fmt: skip
        if detach:
            print(f"{len(plan)} worker(s) started; `hpo confirm {study_name}` again shows the verdict", file=sys.stderr)
            return
        follow(companion, spec.study, metric, procs)
        for w in procs:
            w.proc.wait()
        check_workers_finished(companion, spec.study, procs)
    if budgets is not None:
        ladder = ladder_verdict(source, companion)
        text, data = ladder_text(ladder, metric), ladder_json(ladder)
    else:
        floor = companion.user_attrs.get(FLOOR_ATTR) or source.user_attrs.get(FLOOR_ATTR)
        result = verdict(source, companion)
        text, data = verdict_text(result, metric, floor), verdict_json(result, floor)
    report = write_report(source, store, report_path(source.study_name), artifact_dir=artifacts)
    if as_json:
        print(json_text({"study": study_name, "companion": companion.study_name, "metric": metric, **data,
                         "report": str(report)}))  # fmt: skip
        return
    print(text)
    print(f"report: {report}")
