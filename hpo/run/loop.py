"""``hpo run``'s loop: check the input, plan a new run (or read back the one in its folder), then run
every phase not done with the ledger ticking and saved, so re-running the same command continues where
a run stopped; Ctrl-C or SIGTERM stops it with the ledger saved."""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from hpo.analysis.tables import duration
from hpo.doctor.survey import require_folder
from hpo.errors import HostFault, disk_full_at, is_disk_full
from hpo.outputs import make_folder, output_folder, write_output
from hpo.run.budget import parse_budget
from hpo.run.ledger import PHASES, save_ledger
from hpo.run.options import RunOptions, run_folder, storage_url
from hpo.run.phases.export import closing_lines, export
from hpo.run.phases.final import final, sweep
from hpo.run.phases.plan import plan_only, plan_run
from hpo.run.phases.search import decide, preflight, search
from hpo.run.state import SPEC_FILE, ReportWriter, Run, resumed_ledger, stopped_by_sigterm, ticking

PHASE_FUNCTIONS: dict[str, Callable[[Run], None]] = {
    "preflight": preflight, "search": search, "decide": decide, "final": final, "sweep": sweep,
    "export": export,
}  # fmt: skip


def stopped_on_full_disk(run: Run, err: Exception, budget_s: float) -> HostFault:
    """The one line a full disk ends a run with: where, what was spent (the time until the fault is
    counted), and whether the ledger on disk is this moment's or the last one written."""
    fault = err if isinstance(err, HostFault) else disk_full_at(err, [run.out, Path(tempfile.gettempdir())])
    phase = run.ledger.current()
    run.ledger.stop_running()
    run.save()
    kept = (
        f"the ledger on disk is the one written {duration(time.monotonic() - run.saved_at)} earlier"
        if run.unsaved is not None
        else "the ledger saved"
    )
    where = phase.name if phase is not None else "last"
    return HostFault(f"{fault}; stopped in the {where} phase, {duration(run.ledger.spent())} of {duration(budget_s)} "
                     f"spent, {kept}")  # fmt: skip


def run_budgeted(opts: RunOptions, write_report: ReportWriter) -> None:
    """Check the input, then run (or continue) every phase not done; Ctrl-C or SIGTERM stops it with
    the ledger saved, and the same command continues it. ``write_report`` writes the search study's
    report in the export phase."""
    budget_s = parse_budget(opts.budget)
    require_folder(opts.images)
    out = run_folder(opts)
    if opts.plan_only:
        for line in plan_only(opts, budget_s, out):
            print(line)
        return
    output_folder(out, holds="the run: its ledger, spec, database, final run and model")
    ledger = resumed_ledger(opts, out, budget_s)
    if ledger is not None and ledger.current() is None:
        print(f"the run in {out} is finished; its model is {ledger.decisions.model}")
        print("\n".join(ledger.lines()))
        return
    if ledger is None:  # the plan phase, in memory: a refusal (folder, budget) leaves nothing behind
        planned = plan_run(opts, budget_s)
        ledger = planned.ledger
        make_folder(out)
        write_output(out / SPEC_FILE, planned.spec_text)
        save_ledger(ledger, out)
        print("\n".join(planned.lines))
    else:
        print(f"continuing the run in {out}: {duration(ledger.spent())} of {duration(budget_s)} spent")
    run = Run(opts, out, storage_url(opts, out), ledger, threading.Lock(), write_report)
    with ticking(run), stopped_by_sigterm():
        try:
            for name in PHASES:
                if run.ledger.phase(name).state in ("pending", "running"):
                    print(f"[{name}] {name} ({PHASES.index(name) + 1}/{len(PHASES)}): {run.ledger.spent_line()}")
                    PHASE_FUNCTIONS[name](run)
                    run.save()
        except KeyboardInterrupt:
            run.ledger.stop_running()
            run.save()
            print(
                f"\nstopped; {duration(run.ledger.spent())} of {duration(budget_s)} spent. Re-run the same command "
                "to continue",
                file=sys.stderr,
            )
            raise SystemExit(130) from None
        except Exception as err:
            if not is_disk_full(err):
                raise
            raise stopped_on_full_disk(run, err, budget_s) from None
    for line in closing_lines(run):
        print(line)
