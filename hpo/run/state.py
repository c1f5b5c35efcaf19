"""A run in progress: its options, folder, storage and ledger, the ticker that banks spent time, the
ledger read back for a re-run, and the search study the phases share."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import optuna

from hpo.analysis.tables import duration
from hpo.errors import DiskFull, HpoError, disk_full_at, is_disk_full
from hpo.records import RUN_ATTR
from hpo.run.ledger import Ledger, load_ledger, save_ledger
from hpo.run.options import RunOptions
from hpo.service.storage import open_storage
from hpo.service.study import create_or_resume
from hpo.spec.loading import load_spec
from hpo.spec.spec import Spec

ReportWriter = Callable[[optuna.Study, Any, Path, Path], object]  # (study, storage, page, artifacts): the report


SPEC_FILE = "spec.yaml"
FINAL, MODEL, REPORT = "final", "model", "report.html"
TICK_SECONDS = 5.0  # the ledger banks spent time this often: a kill loses at most this much of the count


def new_ledger(opts: RunOptions, budget_s: float) -> Ledger:
    return Ledger(folder=str(opts.images.resolve()), budget_s=budget_s, study="", image_size=opts.image_size)


def run_spec(run: Run) -> Spec:
    return load_spec(run.out / SPEC_FILE)


def search_study(run: Run) -> tuple[optuna.Study, Any]:
    store = open_storage(run.url)
    study, _ = create_or_resume(run_spec(run), store, name=run.ledger.study)
    return study, store


def publish(run: Run, study: optuna.Study) -> None:
    """The ledger on the search study, for ``hpo status``."""
    with run.lock:
        study.set_user_attr(RUN_ATTR, run.ledger.to_dict())


@dataclass
class Run:
    """A run in progress: its options, folder, storage, the ledger that the ticker saves, and the report
    writer the command hands it (the report is a layer above)."""

    opts: RunOptions
    out: Path
    url: str
    ledger: Ledger
    lock: threading.Lock
    write_report: ReportWriter
    unsaved: DiskFull | None = None  # the ledger's last write found the disk full: the file holds an older one
    saved_at: float = field(default_factory=time.monotonic)  # when the ledger file was last written

    @property
    def artifacts(self) -> Path:
        return self.out / "artifacts"

    def save(self) -> None:
        with self.lock:
            self._write()

    def start(self, name: str) -> None:
        """Mark phase ``name`` running, on disk at once: ``hpo status`` and a watcher see it even when the
        phase ends before the next tick."""
        with self.lock:
            self.ledger.start(name)
            self._write()

    def tick(self) -> None:
        with self.lock:
            self.ledger.tick()
            self._write()

    def _write(self) -> None:
        """The ledger to its file, atomically; on a full disk the file keeps the last ledger written (the
        ticker lives on, the count goes on in memory) and ``unsaved`` says why."""
        try:
            save_ledger(self.ledger, self.out)
        except Exception as err:
            if not is_disk_full(err):
                raise
            self.unsaved = disk_full_at(err, [self.out])
        else:
            self.unsaved, self.saved_at = None, time.monotonic()


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
