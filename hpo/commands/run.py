"""``hpo run FOLDER --budget 8h``: from a folder of images to an exported model, spending a wall-clock
budget. Each phase is an existing command's part (:mod:`hpo.commands.run_phases`); this module checks
the input, keeps the ledger (:mod:`hpo.run.ledger`) ticking and saved, and runs the phases that are not
done, so re-running the same command continues where a run stopped."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from hpo.analysis.tables import duration
from hpo.doctor.survey import require_folder
from hpo.errors import HpoError
from hpo.outputs import make_folder, output_folder, write_output
from hpo.run.budget import parse_budget
from hpo.run.ledger import PHASES, Ledger, load_ledger, save_ledger
from hpo.run.split import Split
from hpo.service.urls import resolve_url

TICK_SECONDS = 5.0  # the ledger banks spent time this often: a kill loses at most this much of the count


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    images: Path
    budget: str  # as typed: 8h, 90m, 1h30m
    out: Path | None  # default runs/FOLDER
    image_size: int | None
    storage: str | None  # default SQLite in the run's folder
    workers: int | None  # local search workers (default: per_gpu on each GPU, else 1)
    threads: int | None
    gpus: str = "all"
    plan_only: bool = False
    doctor: bool = True  # False: --skip-doctor, the preflight is skipped
    per_gpu: int = 1  # search workers sharing each GPU, when workers is not given
    seed: int = 0  # the study sampler's and the trainer's seed
    split: Split = field(default_factory=Split)  # shares of search and decision; a new run's plan only


@dataclass
class Run:
    """A run in progress: its options, folder, storage, and the ledger that the ticker saves."""

    opts: RunOptions
    out: Path
    url: str
    ledger: Ledger
    lock: threading.Lock

    @property
    def artifacts(self) -> Path:
        return self.out / "artifacts"

    def save(self) -> None:
        with self.lock:
            save_ledger(self.ledger, self.out)

    def start(self, name: str) -> None:
        """Mark phase ``name`` running, on disk at once: ``hpo status`` and a watcher see it even when the
        phase ends before the next tick."""
        with self.lock:
            self.ledger.start(name)
            save_ledger(self.ledger, self.out)

    def tick(self) -> None:
        with self.lock:
            self.ledger.tick()
            save_ledger(self.ledger, self.out)


def run_folder(opts: RunOptions) -> Path:
    return opts.out or Path("runs") / (opts.images.resolve().name or "images")


def storage_url(opts: RunOptions, out: Path) -> str:
    """``--storage``, else SQLite in the run's folder (never $HPO_STORAGE: a run owns its study)."""
    return resolve_url(opts.storage or f"sqlite:///{out / 'hpo.db'}")


def resumed_ledger(opts: RunOptions, out: Path, budget_s: float) -> Ledger | None:
    """The run already in ``out``, checked against this command: the same folder and budget."""
    ledger = load_ledger(out)
    if ledger is None:
        return None
    folder = str(opts.images.resolve())
    if ledger.folder != folder:
        raise HpoError(f"-o {out} holds the run of another folder ({ledger.folder}); name another -o for {opts.images}")
    if abs(ledger.budget_s - budget_s) > 0.5:
        spent, phase = ledger.spent(), ledger.current()
        change = budget_s - ledger.budget_s
        raise HpoError(
            f"-o {out} holds a run started with --budget {duration(ledger.budget_s)} that has spent "
            f"{duration(spent)}{f' (now in {phase.name})' if phase else ' and is finished'}; --budget "
            f"{duration(budget_s)} would {'give' if change > 0 else 'take'} {duration(abs(change))} "
            f"{'to' if change > 0 else 'from'} the phases not done, which is not supported: re-run with --budget "
            f"{duration(ledger.budget_s)} to continue, or name another -o for a new run"
        )
    return ledger.resumed()


def run_budgeted(opts: RunOptions) -> None:
    """Check the input, then run (or continue) every phase not done; Ctrl-C or SIGTERM stops it with
    the ledger saved, and the same command continues it."""
    from hpo.commands import run_phases

    budget_s = parse_budget(opts.budget)
    require_folder(opts.images)
    out = run_folder(opts)
    if opts.plan_only:
        for line in run_phases.plan_only(opts, budget_s, out):
            print(line)
        return
    output_folder(out, holds="the run: its ledger, spec, database, final run and model")
    ledger = resumed_ledger(opts, out, budget_s)
    if ledger is not None and ledger.current() is None:
        print(f"the run in {out} is finished; its model is {ledger.decisions.model}")
        print("\n".join(ledger.lines()))
        return
    if ledger is None:  # the plan phase, in memory: a refusal (folder, budget) leaves nothing behind
        ledger, spec_text, lines = run_phases.plan_run(opts, budget_s)
        make_folder(out)
        write_output(out / run_phases.SPEC_FILE, spec_text)
        save_ledger(ledger, out)
        print("\n".join(lines))
    else:
        print(f"continuing the run in {out}: {duration(ledger.spent())} of {duration(budget_s)} spent")
    run = Run(opts, out, storage_url(opts, out), ledger, threading.Lock())
    with ticking(run), stopped_by_sigterm():
        try:
            for name in PHASES:
                if run.ledger.phase(name).state in ("pending", "running"):
                    print(f"[{name}] {name} ({PHASES.index(name) + 1}/{len(PHASES)}): {run.ledger.spent_line()}")
                    run_phases.PHASE_FUNCTIONS[name](run)
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
    for line in run_phases.closing_lines(run):
        print(line)


@contextmanager
def ticking(run: Run) -> Iterator[None]:
    """Bank the running phase's time every :data:`TICK_SECONDS` in a background thread."""
    done = threading.Event()

    def loop() -> None:
        while not done.wait(TICK_SECONDS):
            run.tick()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@contextmanager
def stopped_by_sigterm() -> Iterator[None]:
    """SIGTERM (a scheduler's stop) stops the run as Ctrl-C does."""
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
