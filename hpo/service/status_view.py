"""What ``hpo status`` shows of a study and ``hpo launch`` / ``hpo run`` print while they follow one:
the progress line, the best score with its noise, one row per attempt and the table of them, the notes
under a study. Read side only, torch-free; the commands render it."""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import optuna
from optuna.trial import FrozenTrial, TrialState

from hpo.analysis.noise import noise_of
from hpo.analysis.progress import copy_floor_of, fidelity_pair, fidelity_text, floor_reading
from hpo.analysis.stopping import points_from_curve, stop_verdict
from hpo.analysis.tables import cell_text, table
from hpo.files import JsonObject
from hpo.records import PRUNING_METRIC, HardwareSummary, Placement, StopVerdict, StudyRecord, TrialRecord, params_of
from hpo.service.frontiers import frontier_of, guided_twice, study_frontiers
from hpo.service.study import Progress
from hpo.service.trials import best_own, carried_text, fail_reason, leak_text, own_trials, retried_numbers
from hpo.spec.params import Params
from hpo.spec.sampling import SamplingConfig


def best_text(study: optuna.Study, p: Progress) -> str:
    """The best score with the study's pooled noise (±, from second independent sample sets) when measured."""
    if p.best is None:
        return "-"
    noise = noise_of(own_trials(study))
    return f"{p.best:.4g} ± {noise.sd:.2g}" if noise.sd is not None else f"{p.best:.4g}"


def progress_line(p: Progress, metric: str = "FID", best: str | None = None) -> str:
    best = best if best is not None else (f"{p.best:.4g}" if p.best is not None else "-")
    retried = f", {p.retried} retried" if p.retried else ""
    rung = f" ({p.undecided} of them paused at the rung)" if p.undecided else ""
    rung += f", {p.continued} continued from the rung" if p.continued else ""
    return (
        f"{p.finished}/{p.n_trials} finished: {p.complete} complete, {p.pruned} pruned{rung}, {p.failed} failed"
        f"{retried}, {p.running} running | best {metric} {best}"
    )


@dataclass(frozen=True, kw_only=True)
class TrialRow:
    """One attempt as ``hpo status`` shows it: the table's row and ``--json``'s object both read it."""

    number: int
    state: str  # COMPLETE, PRUNED, FAIL, RUNNING, WAITING
    retried_as: int | None  # the attempt that retried this failed one
    value: float | None  # the score: complete trials only
    val_last: float | None  # the validation metric at the last evaluation point reached
    gap_last: float | None  # the generalisation gap there
    params: Params
    sampling: SamplingConfig | None  # the best combination of the sweep (guidance, steps, ...)
    fidelity: tuple[float, float] | None  # (precision, recall)
    stop: StopVerdict | None  # where evaluation points were scored (budget ladders)
    hardware: HardwareSummary | None
    ran_on: Placement | None
    reason: str | None  # why a pruned or failed trial did not complete

    @classmethod
    def of(cls, t: FrozenTrial, retried: dict[int, int], noise: float | None, copy_floor: float | None) -> TrialRow:
        record = TrialRecord.current(t)
        last = record.last_entry
        return cls(
            number=t.number, state=t.state.name, retried_as=retried.get(t.number),
            value=t.value if t.state == TrialState.COMPLETE else None,
            val_last=last.val_rel if last else None, gap_last=last.gap if last else None,
            params=params_of(t), sampling=record.sampling, fidelity=fidelity_pair(record.fidelity),
            stop=_stop(record, noise, copy_floor), hardware=record.hardware,
            ran_on=record.ran_on, reason=fail_reason(t),
        )  # fmt: skip

    @property
    def state_cell(self) -> str:
        return self.state if self.retried_as is None else f"{self.state} → #{self.retried_as}"

    @property
    def stop_cell(self) -> str | None:
        """A word and since when."""
        if self.stop is None:
            return None
        return (
            self.stop.kind
            if self.stop.since_kimg is None
            else f"{self.stop.kind} since {self.stop.since_kimg:.3g} kimg"
        )

    def as_json(self) -> JsonObject:
        stop = self.stop
        return {
            "number": self.number, "state": self.state, "retried_as": self.retried_as, "value": self.value,
            f"{PRUNING_METRIC}_at_last": self.val_last, "gap_at_last": self.gap_last, "params": self.params,
            "best_sampling": self.sampling.as_dict() if self.sampling is not None else None,
            "precision": self.fidelity[0] if self.fidelity else None,
            "recall": self.fidelity[1] if self.fidelity else None,
            "stop": stop.as_dict() if stop else None,
            "hardware": self.hardware.as_dict() if self.hardware is not None else None,
            "ran_on": self.ran_on.as_dict() if self.ran_on is not None else None,
            "reason": self.reason,
        }  # fmt: skip


def _stop(record: TrialRecord, noise: float | None, copy_floor: float | None) -> StopVerdict | None:
    """The stop verdict of a trial whose evaluation points were scored (budget ladders)."""
    points = points_from_curve(record.points)
    return stop_verdict(points, noise=noise, copy_floor=copy_floor) if points else None


def trial_rows(study: optuna.Study) -> list[TrialRow]:
    trials = own_trials(study)
    retried = retried_numbers(trials)
    noise = noise_of(trials).sd
    copy_floor = copy_floor_of(StudyRecord.of(study).floor)
    return [TrialRow.of(t, retried, noise, copy_floor) for t in trials]


@dataclass(frozen=True)
class Column:
    header: str
    cell: Callable[[TrialRow], object]
    drop: int  # when the terminal is too narrow, columns go in this order (1 first); 0: never


def _param_column(name: str) -> Column:
    return Column(name, lambda r: r.params.get(name), 8)  # the right-most parameter goes first


def trial_columns(metric: str, names: Sequence[str]) -> list[Column]:
    """The table's columns, in order; ``hpo status --help`` explains each (a test holds it to that)."""
    return [
        Column("#", lambda r: r.number, 0),
        Column("state", lambda r: r.state_cell, 0),
        Column(metric, lambda r: r.value, 0),
        Column(f"{PRUNING_METRIC}@last", lambda r: r.val_last, 9),
        Column("gap@last", lambda r: r.gap_last, 5),
        *(_param_column(n) for n in names),
        Column("best sampling", lambda r: r.sampling.label if r.sampling is not None else None, 6),
        Column("prec/recall", lambda r: f"{r.fidelity[0]:.2f}/{r.fidelity[1]:.2f}" if r.fidelity else None, 3),
        Column("stop", lambda r: r.stop_cell, 4),
        Column("hardware", lambda r: r.hardware.cell() if r.hardware is not None else None, 2),
        Column("ran on", lambda r: r.ran_on.cell() if r.ran_on is not None else None, 1),
        Column("reason", lambda r: r.reason, 7),
    ]


def fitted(columns: list[Column], rows: Sequence[TrialRow], width: int | None) -> tuple[list[Column], list[Column]]:
    """(the columns kept, the columns left out) so that the table is at most ``width`` characters
    wide (None: keep every column), leaving out the lowest ``drop`` first, right-most first on ties."""
    sizes = {id(c): max([len(c.header), *(len(cell_text(c.cell(r))) for r in rows)]) for c in columns}
    kept = list(columns)
    order = sorted((c for c in columns if c.drop), key=lambda c: (c.drop, -columns.index(c)))
    while width is not None and order and sum(sizes[id(c)] for c in kept) + 2 * (len(kept) - 1) > width:
        kept.remove(order.pop(0))
    return kept, [c for c in columns if c not in kept]


def trials_table(study: optuna.Study, metric: str, width: int | None = None) -> str:
    """One row per attempt: the score only for complete trials, the validation metric and the
    generalisation gap at the last evaluation point for every trial that reached one (pruned trials
    stop there), and the stop verdict where evaluation points were scored. With ``width``, the
    columns that fit it, and a line naming the ones left out."""
    rows = trial_rows(study)
    columns = trial_columns(metric, sorted({k for r in rows for k in r.params}))
    kept, left_out = fitted(columns, rows, width)
    text = table([[c.cell(r) for c in kept] for r in rows], [c.header for c in kept])
    if not left_out:
        return text
    note = f"{len(left_out)} more column(s) with `hpo status {study.study_name} --wide`: " + ", ".join(
        c.header for c in left_out
    )
    return text + "\n" + "\n".join(textwrap.wrap(note, width or len(note)))


def study_notes(study: optuna.Study, p: Progress) -> list[str]:
    """The lines under a study's progress: where real images land, the best trial's second signal, a
    memory leak, trials carried from another study."""
    stored_floor = StudyRecord.of(study).floor
    floor = floor_reading(p.best, noise_of(own_trials(study)), stored_floor)
    best = best_own(study)
    second = fidelity_text(TrialRecord.of(best).fidelity, stored_floor) if best is not None else None
    cost = frontier_line(study, best) if best is not None else None
    lines = (
        floor,
        f"best trial: {second}" if second else None,
        cost,
        leak_text(own_trials(study)),
        carried_text(study),
    )
    return [line for line in lines if line]


def frontier_line(study: optuna.Study, best: optuna.trial.FrozenTrial) -> str | None:
    """The best trial's quality against sampling cost, when it swept more than one cost."""
    frontier = frontier_of(best, guided_twice(study))
    if frontier is None or len(frontier.points) < 2:
        return None
    points = ", ".join(f"{p.nfe} NFE {p.value:.4g}" for p in frontier.points)
    return f"best trial's cost frontier: {points} ({frontier.statistic}; `hpo export --max-nfe N` takes a budget)"


def frontiers_json(study: optuna.Study) -> JsonObject:
    """Every complete trial's frontier: trial → its points (cost, value, combination)."""
    return {
        str(n): {"statistic": f.statistic,
                 "points": [{"nfe": p.nfe, "value": p.value, "sampling": p.sampling.as_dict()} for p in f.points]}
        for n, f in study_frontiers(study).items()
    }  # fmt: skip


def terminal_width() -> int:
    """$COLUMNS, else the terminal's width, else 100 (output to a file or a pipe)."""
    return shutil.get_terminal_size((100, 24)).columns
