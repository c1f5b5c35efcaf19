"""``hpo confirm STUDY``: retrain the winners with fresh seeds through the workers, then print
the verdict and add it to the study's report."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any

from hpo.analysis.record import StudyRecord
from hpo.commands.json_out import json_text
from hpo.commands.launch import LocalWorkers, check_workers_finished, follow, start_workers
from hpo.commands.status import table
from hpo.report.render import report_path, write_report
from hpo.service.confirm import Confirmed, Verdict, create_companion, verdict
from hpo.service.ladder import Ladder, copy_floor_text, ladder_rows, ladder_verdict
from hpo.service.storage import open_storage
from hpo.service.study import load, require_spec
from hpo.service.urls import redact, resolve_url
from hpo.service.width_ladder import ConfigTransfer, WidthLadder, create_width_companion, width_verdict


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


def optima_rows(c: ConfigTransfer) -> list[list[object]]:
    """Per width: the lr optimum, the best grid lr, the tied interval, its score (mean ± sd over seeds)
    and how far the fitted rule lr ∝ width^α misses it (the table ``hpo confirm --widths`` prints)."""
    if c.result is None:
        return []
    rows: list[list[object]] = []
    for o, residual in zip(c.result.optima, c.result.residuals, strict=True):
        edge = f" ({o.edge} edge)" if o.edge else ""
        score = f"{o.best.mean:.4g} ± {o.best.spread:.2g}"
        rows.append([o.width, f"{o.lr:.3g}{edge}", f"{o.low:.3g}..{o.high:.3g}", score, f"×{residual:.2g}"])
    return rows


def widths_text(ladder: WidthLadder, metric: str) -> str:
    header = ["width", "optimum lr", "tied lrs", f"{metric} at best", "off the fit"]
    lines = [f"parameterisation: {ladder.parameterization}; {ladder.finished} of {ladder.expected} runs finished"]
    for c in ladder.transfers:
        label = f"#{c.trial}" + (" (baseline)" if c.baseline else "")
        lines += ["", f"{label} (study {metric} {c.study_value:.4g}): {c.text}"]
        if c.result is not None:
            lines += [table(optima_rows(c), header), f"lr ∝ width^{c.result.alpha:+.2f}"]
    lines += [""] + [r.text for r in ladder.rungs] + [ladder.summary]
    return "\n".join(lines)


def widths_json(ladder: WidthLadder) -> dict[str, Any]:
    """``hpo confirm --widths ... --json``: what ``widths_text`` prints, as data."""
    configs = [
        {"trial": c.trial, "baseline": c.baseline, "study_value": c.study_value, "verdict": c.text,
         "state": c.result.state if c.result else "pending", "alpha": c.result.alpha if c.result else None,
         "regret": c.result.regret if c.result else None,
         "optima": [{"width": o.width, "lr": o.lr, "grid_lr": o.grid_lr, "low": o.low, "high": o.high, "edge": o.edge}
                    for o in (c.result.optima if c.result else ())]}
        for c in ladder.transfers
    ]  # fmt: skip
    rungs = [{"factor": r.factor, "state": r.state, "verdict": r.text} for r in ladder.rungs]
    return {
        "parameterization": ladder.parameterization, "finished": ladder.finished, "expected": ladder.expected,
        "configurations": configs, "rungs": rungs, "verdict": ladder.summary,
    }  # fmt: skip


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
    widths: list[float] | None = None,
    lrs: int = 5,
    as_json: bool = False,
) -> None:
    """Queue the confirmation trials, run them on local workers, print the verdict: as text, or
    with ``as_json`` as one JSON object on stdout (everything else then goes to stderr)."""
    url = resolve_url(storage)
    store = open_storage(url, must_exist=True)
    source = load(store, study_name, redact(url))
    plan = local.plan(url)
    if widths is not None:
        companion = create_width_companion(source, store, top=top, seeds=seeds, factors=widths, lrs=lrs)
    else:
        companion = create_companion(source, store, top=top, seeds=seeds, kimg=kimg, budgets=budgets)
    spec = require_spec(companion)
    metric = spec.score.metric_name
    with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
        rungs = f", scored at {', '.join(f'{b}×' for b in budgets)} the budget" if budgets else ""
        if widths:
            rungs = f", at {', '.join(f'{w:g}×' for w in widths)} the width, {lrs} learning rates each"
        print(f"confirmation study {companion.study_name!r}: {spec.study.n_trials} trials at {spec.train.kimg:g} kimg"
              f"{rungs}")  # fmt: skip
        procs = start_workers(url, companion.study_name, plan, threads=local.threads, artifacts=artifacts,
                              detach=detach)  # fmt: skip
        if detach:
            again = f"hpo confirm {study_name}" + (
                f" --widths {','.join(f'{w:g}' for w in widths)}" if widths
                else f" --budgets {','.join(map(str, budgets))}" if budgets else ""
            )  # fmt: skip
            print(f"{len(plan)} worker(s) started; `{again}` again shows the verdict", file=sys.stderr)
            return
        follow(companion, spec.study, metric, procs)
        for w in procs:
            w.proc.wait()
        check_workers_finished(companion, spec.study, procs)
    if widths is not None:
        width_ladder = width_verdict(source, companion)
        text, data = widths_text(width_ladder, metric), widths_json(width_ladder)
    elif budgets is not None:
        ladder = ladder_verdict(source, companion)
        text, data = ladder_text(ladder, metric), ladder_json(ladder)
    else:
        floor = StudyRecord.of(companion).floor or StudyRecord.of(source).floor
        result = verdict(source, companion)
        text, data = verdict_text(result, metric, floor), verdict_json(result, floor)
    report = write_report(source, store, report_path(source.study_name), artifact_dir=artifacts)
    if as_json:
        print(json_text({"study": study_name, "companion": companion.study_name, "metric": metric, **data,
                         "report": str(report)}))  # fmt: skip
        return
    print(text)
    print(f"report: {report}")
