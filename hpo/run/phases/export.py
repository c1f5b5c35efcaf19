"""The export phase: ``hpo export``'s three files from the final run (:mod:`hpo.service.export`), its sample
grid and the ledger beside them, the search study's report; and the lines a finished run closes with."""

from __future__ import annotations

import json
import shutil

from hpo.errors import HpoError
from hpo.outputs import write_output
from hpo.records.export import Provenance
from hpo.run.phases.final import summary_of
from hpo.run.scored_run import BEST_WEIGHTS
from hpo.run.sizing import final_train
from hpo.run.state import FINAL, MODEL, REPORT, Run, publish, search_study
from hpo.service.export import Winner, fixed_spec, network_info, write_export
from hpo.service.study import require_spec
from hpo.spec.spec import spec_from_dict
from hpo.training.checkpoint import load_checkpoint


def export(run: Run) -> None:
    """``hpo export``'s three files from the final run, its sample grid, the ledger beside them, and the
    search study's report."""
    study, store = search_study(run)
    ledger, decisions = run.ledger, run.ledger.decisions
    run.start("export")
    summary, trial = summary_of(run), study.trials[decisions.winner or 0]
    sampling = summary.sampling
    if sampling is None:
        raise HpoError(f"{run.out / FINAL / 'summary.json'} names no best sampling; remove {run.out / FINAL} and "
                       "re-run to train the final model again")  # fmt: skip
    params = {**trial.params, **final_train(decisions).params()}
    spec = spec_from_dict(fixed_spec(require_spec(study), params, sampling), file=f"study {study.study_name}")
    provenance = Provenance(study=study.study_name, trial=trial.number, value=decisions.value,
                            metric_name=decisions.metric, run=str(run.out))  # fmt: skip
    winner = Winner(spec, sampling, network_info(study, spec), provenance)
    model = run.out / MODEL
    write_export(model, winner, load_checkpoint(run.out / FINAL / BEST_WEIGHTS),
                 written_by=f"`hpo run {run.opts.images}`: trial #{trial.number} trained {decisions.trained()}, "
                            f"its best sampling combination ({sampling.words})")  # fmt: skip
    shutil.copyfile(run.out / FINAL / "samples.png", model / "samples.png")
    decisions.model = str(model)
    ledger.finish("export", note=f"{model}, and the report {run.out / REPORT}")
    write_output(model / "ledger.json", json.dumps(ledger.to_dict(), indent=2) + "\n")
    publish(run, study)
    run.write_report(study, store, run.out / REPORT, run.artifacts)  # after the ledger is complete


def closing_lines(run: Run) -> list[str]:
    d = run.ledger.decisions
    return [
        f"model: {d.model} ({d.score_words()}; real held-out images {d.floor:.4g}, the floor)",
        f"winner: {d.winner_why}",
        f"stop verdict: {d.stop}",
        f"a bigger budget: {d.bigger}",
        "ledger:",
        *run.ledger.lines(),
        f"report: {run.out / REPORT}",
        f"sample it with `hpo sample {d.model}`",
    ]
