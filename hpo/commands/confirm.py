"""``hpo confirm STUDY``: create a companion study (fresh seeds, a budget ladder or a width ladder:
:mod:`hpo.companions`), run it through local workers, then print its verdict and add it to the
study's report. The flags are parsed here; the kinds know the rest."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

from hpo.companions import kind_for
from hpo.companions.base import Request
from hpo.companions.blocks import blocks_text
from hpo.errors import HpoError
from hpo.files import json_text
from hpo.report.render import report_path, write_report
from hpo.service.local import LocalWorkers, check_workers_finished, follow, start_workers
from hpo.service.storage import open_storage
from hpo.service.study import load, require_spec
from hpo.service.urls import redact, resolve_url

MAX_MULTIPLE = 64
MAX_WIDTH_FACTOR = 16.0


def parse_budgets(text: str) -> list[int]:
    """``--budgets 1,4,16`` → [1, 4, 16]: whole multiples of the study's budget, increasing."""
    try:
        budgets = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        budgets = []
    if not budgets or budgets[0] < 1 or budgets[-1] > MAX_MULTIPLE:
        raise HpoError(
            f"--budgets {text!r}: expected whole multiples of the study's budget from 1 to {MAX_MULTIPLE}, e.g. 1,4,16"
        )
    return budgets


def parse_widths(text: str) -> list[float]:
    """``--widths 0.5,1,2`` → [0.5, 1.0, 2.0]: multiples of each configuration's base channels."""
    try:
        factors = sorted({float(part) for part in text.split(",") if part.strip()})
    except ValueError:
        factors = []
    if len(factors) < 2 or factors[0] <= 0 or factors[-1] > MAX_WIDTH_FACTOR:
        raise HpoError(
            f"--widths {text!r}: expected two or more multiples of the study's base channels in (0, "
            f"{MAX_WIDTH_FACTOR:g}], e.g. 0.5,1,2"
        )
    return factors


def request_of(
    *, top: int, seeds: int, kimg: float | None, budgets: str | None, widths: str | None, lrs: int
) -> Request:
    """The flags as one request; two kinds at once is refused in one line."""
    if budgets is not None and kimg is not None:
        raise HpoError("--budgets and --kimg: give one; --budgets 1,4,16 scores every budget of one long run")
    if widths is not None and (budgets is not None or kimg is not None):
        raise HpoError("--widths with --budgets or --kimg: give one; a width ladder trains at the study's budget")
    return Request(
        top=top, seeds=seeds, kimg=kimg, lrs=lrs,
        budgets=parse_budgets(budgets) if budgets is not None else None,
        widths=parse_widths(widths) if widths is not None else None,
    )  # fmt: skip


def run_confirm(
    study_name: str,
    request: Request,
    *,
    storage: str | None,
    local: LocalWorkers,
    detach: bool,
    artifacts: Path,
    as_json: bool = False,
) -> None:
    """Queue the companion's trials, run them on local workers, print the verdict: as text, or with
    ``as_json`` as one JSON object on stdout (everything else then goes to stderr)."""
    url = resolve_url(storage)
    store = open_storage(url, must_exist=True)
    source = load(store, study_name, redact(url))
    plan = local.plan(url)
    kind = kind_for(request)
    companion = kind.create(source, store, request)
    spec = require_spec(companion)
    metric = spec.score.metric_name
    with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
        print(f"confirmation study {companion.study_name!r}: {spec.study.n_trials} trials at {spec.train.kimg:g} kimg"
              f"{kind.plan_text(request)}")  # fmt: skip
        procs = start_workers(url, companion.study_name, plan, threads=local.threads, artifacts=artifacts,
                              detach=detach)  # fmt: skip
        if detach:
            again = f"hpo confirm {study_name}{kind.flags(request)}"
            print(f"{len(plan)} worker(s) started; `{again}` again shows the verdict", file=sys.stderr)
            return
        follow(companion, spec.study, metric, procs)
        for w in procs:
            w.proc.wait()
        check_workers_finished(companion, spec.study, procs)
    reading = kind.read(source, companion, metric)
    report = write_report(source, store, report_path(source.study_name), artifact_dir=artifacts)
    if as_json:
        print(json_text({"study": study_name, "companion": companion.study_name, "metric": metric,
                         **reading.json(), "report": str(report)}))  # fmt: skip
        return
    print(blocks_text(reading.blocks()))
    print(f"report: {report}")
