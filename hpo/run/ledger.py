"""The budgeted run's ledger: the budget, each phase's planned and spent seconds and state, and what
the phases decided (trial budget, winner, final budget, the model's folder and score). It is the run's
state: written whole after every change to ``RUN_FILE`` in the run's folder (beside the model) and to
the search study's ``RUN_ATTR`` at each phase boundary, so ``hpo status`` shows it and a re-run
continues from the first phase that is not done. Plain data, torch-free."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field
from pathlib import Path
from typing import Any, Literal

from hpo.analysis.tables import duration
from hpo.errors import HpoError
from hpo.files import JsonObject, atomic_write
from hpo.records.payload import field_types, fits

log = logging.getLogger(__name__)
RUN_FILE = "run.json"
PHASES = ("plan", "preflight", "search", "decide", "final", "sweep", "export")
PhaseState = Literal["pending", "running", "done", "skipped"]


@dataclass
class Phase:
    name: str
    planned_s: float = 0.0
    spent_s: float = 0.0
    state: PhaseState = "pending"
    note: str = ""  # what it did, or why it was skipped
    running_since: float | None = None  # epoch seconds the current stretch began (None: not running now)

    def spent_now(self, now: float | None = None) -> float:
        """Spent, with the stretch now running counted up to ``now``."""
        if self.running_since is None:
            return self.spent_s
        return self.spent_s + max(0.0, (now or time.time()) - self.running_since)


@dataclass
class Decisions:
    """What the phases decided, as they decide it."""

    trial_kimg: float | None = None
    n_trials: int | None = None
    confirm_top: int | None = None  # configurations the decide phase retrains (0: skipped)
    confirm_seeds: int | None = None
    winner: int | None = None  # the search study's trial the final run trains
    winner_why: str = ""
    final_kimg: float | None = None  # the final run's planned budget
    final_num_evals: int | None = None
    continued_kimg: float | None = None  # the winner's stable-phase kimg the final run continued (None: from scratch)
    cooldown_kimg: float | None = None  # where the final run's cooldown started (wsd)
    trained_kimg: float | None = None  # what the final run trained: final_kimg, or less where it was cut
    ended_by: str = ""  # what cut it ("the deadline", "the stop verdict (copying since 12 kimg)"); "" when not
    value: float | None = None  # the final model's score at its best sampling
    floor: float | None = None  # real held-out images on the same score
    metric: str = ""
    stop: str = ""  # the final run's stop verdict
    bigger: str = ""  # what twice the final run's training would buy, forecast from its curve
    model: str = ""  # the exported model's folder

    def trained(self) -> str:
        """What the final model saw, in words (:func:`trained_words`); a ledger written before
        ``trained_kimg`` was kept says only the plan."""
        planned = self.final_kimg or 0.0
        if self.trained_kimg is None:
            return f"at {planned:g} kimg planned"
        return trained_words(self.trained_kimg, planned, self.ended_by)

    def score_words(self) -> str:
        """``classifier-FID 35.45 at 4.9 of 9.738 planned kimg, ended by the deadline``."""
        return f"{self.metric} {self.value if self.value is not None else math.nan:.4g} {self.trained()}"


def trained_words(trained: float, planned: float, ended_by: str) -> str:
    """``at 9.738 kimg`` when a run trained its plan, else ``at 4.9 of 9.738 planned kimg, ended by the
    deadline``: every statement of a model's score says what the model saw."""
    if trained >= planned * 0.999:
        return f"at {planned:g} kimg"
    return f"at {trained:g} of {planned:g} planned kimg, ended by {ended_by or 'the deadline'}"


@dataclass
class Ledger:
    folder: str  # the images, resolved
    budget_s: float
    study: str
    image_size: int | None = None  # None: a ledger written before it was kept
    phases: list[Phase] = field(default_factory=lambda: [Phase(name) for name in PHASES])
    decisions: Decisions = field(default_factory=Decisions)

    def phase(self, name: str) -> Phase:
        found = [p for p in self.phases if p.name == name]
        if not found:
            raise KeyError(f"unknown phase {name!r}; expected one of {', '.join(PHASES)}")
        return found[0]

    def spent(self, now: float | None = None) -> float:
        return sum(p.spent_now(now) for p in self.phases)

    def left(self, now: float | None = None) -> float:
        return self.budget_s - self.spent(now)

    def current(self) -> Phase | None:
        """The first phase not done or skipped (None when the run is over)."""
        return next((p for p in self.phases if p.state in ("pending", "running")), None)

    def planned_after(self, name: str) -> float:
        """Seconds planned for the phases after ``name`` that are not done: what ``name`` must leave."""
        later = self.phases[PHASES.index(name) + 1 :]
        return sum(p.planned_s for p in later if p.state in ("pending", "running"))

    def start(self, name: str) -> Phase:
        phase = self.phase(name)
        phase.state, phase.running_since = "running", time.time()
        return phase

    def tick(self, now: float | None = None) -> None:
        """Bank the running stretch of every running phase (a kill loses only what came after)."""
        now = now or time.time()
        for p in self.phases:
            if p.running_since is not None:
                p.spent_s, p.running_since = p.spent_now(now), now

    def finish(self, name: str, note: str = "", state: PhaseState = "done") -> None:
        self.tick()
        phase = self.phase(name)
        phase.state, phase.running_since = state, None
        if note:
            phase.note = note

    def resumed(self) -> Ledger:
        """Loaded to be continued: a phase still marked running was killed after its last tick, which
        banked what it spent; the time since is not the run's (a re-run starts the phase again)."""
        for p in self.phases:
            p.running_since = None
        return self

    def stop_running(self) -> None:
        """Interrupted: bank the time, and leave the phase to be continued."""
        self.tick()
        for p in self.phases:
            p.running_since = None

    def to_dict(self) -> JsonObject:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: object) -> Ledger:
        """The ledger ``to_dict`` stored; an HpoError in one line where it is malformed (a field missing
        or of another type) or newer (a field or phase this release does not know)."""
        top = dict(_fields_of(cls, raw, "the ledger", nested=("phases", "decisions")))
        phases: dict[str, Phase] = {}
        stored = top.pop("phases", [])
        if not isinstance(stored, list):
            raise HpoError(f"the ledger's phases are {type(stored).__name__}, not a list")
        for entry in stored:
            phase = Phase(**_fields_of(Phase, entry, "a phase of the ledger"))
            if phase.name not in PHASES:
                raise HpoError(f"the ledger has an unknown phase {phase.name!r}: a newer hpo wrote it")
            phases[phase.name] = phase
        decisions = Decisions(**_fields_of(Decisions, top.pop("decisions", {}), "the ledger's decisions"))
        return cls(**top, phases=[phases.get(name, Phase(name)) for name in PHASES], decisions=decisions)

    @classmethod
    def read(cls, raw: object) -> Ledger | None:
        """``raw`` as a ledger; None where it is absent, or malformed or newer (then logged in one line:
        ``from_dict`` says why)."""
        if raw is None:
            return None
        try:
            return cls.from_dict(raw)
        except HpoError as err:
            log.warning("hpo run's ledger is left out: %s", err)
            return None

    def spent_line(self, now: float | None = None) -> str:
        """``4m10s of 20m00s spent, ~15m50s left``: the run ends at its budget."""
        spent = self.spent(now)
        return (
            f"{duration(spent)} of {duration(self.budget_s)} spent, ~{duration(max(0.0, self.budget_s - spent))} left"
        )

    def status_line(self, now: float | None = None) -> str:
        """Where the run is: its phase (running, or stopped until the command is run again) and its time."""
        phase = self.current()
        if phase is None:
            spent = duration(self.spent(now))
            return f"hpo run: finished, {spent} of {duration(self.budget_s)} spent; model {self.decisions.model}"
        where = f"{phase.name} ({PHASES.index(phase.name) + 1}/{len(PHASES)})"
        state = "running" if phase.running_since is not None else "stopped (re-run the same `hpo run` to continue)"
        return f"hpo run: {where} {state}, {self.spent_line(now)}"

    def lines(self, now: float | None = None) -> list[str]:
        """One line per phase: state, spent of planned, note; then the total against the budget."""
        out = []
        for p in self.phases:
            planned = f" of {duration(p.planned_s)}" if p.planned_s else ""
            note = f"  {p.note}" if p.note else ""
            out.append(f"  {p.name:<9} {p.state:<8} {duration(p.spent_now(now))}{planned}{note}")
        spent = self.spent(now)
        out.append(f"  total     {duration(spent)} of {duration(self.budget_s)} ({spent / self.budget_s:.0%})")
        return out


def _fields_of(cls: type, raw: object, what: str, nested: tuple[str, ...] = ()) -> Mapping[str, Any]:
    """``raw``'s fields for ``cls`` (a dataclass), each checked against its annotation (``nested``: left
    to the caller); an HpoError in one line names what does not fit."""
    if not isinstance(raw, Mapping):
        raise HpoError(f"{what} is {type(raw).__name__}, not a mapping")
    known = {f.name: f for f in dataclasses.fields(cls)}
    newer = sorted(str(k) for k in raw if k not in known)
    if newer:
        raise HpoError(f"{what} has {', '.join(newer)}, which this release does not know: a newer hpo wrote it")
    required = [n for n, f in known.items() if f.default is MISSING and f.default_factory is MISSING]
    if missing := [n for n in required if n not in raw]:
        raise HpoError(f"{what} lacks {', '.join(missing)}")
    hints = field_types(cls)
    for name, value in raw.items():
        if name not in nested and not fits(value, hints.get(name)):
            raise HpoError(f"{what} has {name} = {value!r}, not of the field's type")
    return raw


def save_ledger(ledger: Ledger, folder: Path) -> Path:
    text = json.dumps(ledger.to_dict(), indent=2) + "\n"
    return atomic_write(folder / RUN_FILE, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def load_ledger(folder: Path) -> Ledger | None:
    """The run in ``folder``, or None when it holds none; a damaged or newer file is a one-line error (a
    run cannot continue from it)."""
    path = folder / RUN_FILE
    if not path.is_file():
        return None
    try:
        return Ledger.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, HpoError) as err:
        why = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise HpoError(f"{path}: not a readable run ledger ({why}); move it away to start a new run there") from None
