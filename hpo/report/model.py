"""Everything the report page shows, as frozen, typed sections (:class:`ReportModel`): built in one
place by :func:`hpo.report.build.build`, laid out as HTML by :mod:`hpo.report.render` only, so what
the page says can be tested without HTML and how it looks can change without touching a statistic."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from hpo.companions.blocks import Block, Chart

# --- the pieces every section is made of -------------------------------------------------------


@dataclass(frozen=True)
class Image:
    """A PNG from the artifact store, read by the builder so render never opens the store."""

    alt: str
    png_base64: str | None  # None: not there, and ``missing`` says why
    missing: str = "no image"


@dataclass(frozen=True)
class TrialLine:
    """How the page names a trial: its number, parameters (sorted by name, values as stored) and the
    sampling setting its sweep chose, in words (None before a sweep)."""

    number: int
    params: tuple[tuple[str, object], ...]
    sampling: str | None


@dataclass(frozen=True)
class Fact:
    """One labelled line of the header (data, budget, score, trials, wall time)."""

    label: str
    text: str


# --- the sections, in page order -----------------------------------------------------------------


@dataclass(frozen=True)
class Best:
    """The best trial as the summary states it: its score, the score's noise and second signals."""

    trial: TrialLine
    value: float
    noise: str | None  # "± 0.3 (sd from 2 re-scored trials)"; None while the noise is not measured
    kid: float | None
    real_kid: float | None  # KID of real held-out images, the scale KID is read against
    fidelity: str | None  # precision / recall / class accuracy beside real images' values


@dataclass(frozen=True)
class SummarySection:
    name: str  # the study's
    metric: str  # FID or classifier-FID
    best: Best | None  # None before a trial completes
    against_baseline: str
    real_images: str  # where real held-out images land on this score; "" without a floor
    compute_seconds: float
    saved_seconds: float
    carried: str | None  # the warm start's source, when there was one


@dataclass(frozen=True)
class ImportanceReading:
    """One target's importances: the reading in words and its chart (None without fANOVA)."""

    reading: str
    plot: Chart | None


@dataclass(frozen=True)
class ImportanceSection:
    readings: tuple[ImportanceReading, ...]  # the score's, then the validation metric's
    narrow: str  # the next step: `hpo narrow` when it would succeed, else what it still needs


@dataclass(frozen=True)
class LearningSection:
    name: str  # the study's, for the `hpo doctor` hint
    curves: Chart
    levels: Chart


@dataclass(frozen=True)
class EmaReading:
    """The best trial's sweep over post-hoc EMA lengths: which length is best, and its grid."""

    sentence: str
    trial: int
    plot: Chart


@dataclass(frozen=True)
class SweepSection:
    answer: str  # which guidance and how many sampler steps, and how far the trials behind agree
    grid: Chart | None  # None: no trial swept more than one combination
    ema: EmaReading | None
    relative: Chart | None  # ranks across the top trials' sweeps, when more than one swept
    frontier: Chart | None = None  # the top trials' score against sampling cost, when they swept several costs


@dataclass(frozen=True)
class SearchSection:
    needed: int  # complete trials before the charts say anything
    complete: tuple[int, ...]  # the complete trials' numbers, best first
    plots: tuple[Chart, ...] | None  # None: fewer than ``needed`` complete trials


@dataclass(frozen=True)
class SampleCell:
    trial: TrialLine
    baseline: str  # the start's name (TrialRecord.baseline_label), "" for a trial that is no baseline
    value: float
    tied_with: int | None  # the best trial's number when this one is within the noise of it
    image: Image


@dataclass(frozen=True)
class Strip:
    """The best trial's samples at one evaluation point."""

    point: str
    kimg: float
    image: Image


@dataclass(frozen=True)
class SamplesSection:
    metric: str
    complete: int  # how many trials completed
    real: Image  # real validation images, for comparison
    cells: tuple[SampleCell, ...]  # the best trials and every complete baseline
    best: int | None  # the best trial, whose strips follow; None before a trial completes
    strips: tuple[Strip, ...]


@dataclass(frozen=True)
class Weights:
    """The best trial's checkpoint, found in the artifact store the report was made from."""

    path: Path
    num_parameters: int
    kimg: float


@dataclass(frozen=True)
class WinnerSection:
    """Where the best trial's weights are and the commands that retrain, confirm, export and sample it."""

    name: str  # the study's
    trial: TrialLine
    weights: Weights | None
    target_kimg: float
    retrain: str
    export: str
    sample: str


@dataclass(frozen=True)
class TrendLine:
    trial: int
    text: str  # the trial's own validation curve read for *when to stop?*


@dataclass(frozen=True)
class StopSection:
    verdict: str  # whether the best trials still improve at the study's budget; "" without one
    lines: tuple[TrendLine, ...]  # empty before a trial completes


@dataclass(frozen=True)
class CompanionSection:
    """A companion kind's section: its reading's blocks, what to run when there is none, or a line
    saying the companion the study points to is gone."""

    heading: str
    blocks: tuple[Block, ...]


@dataclass(frozen=True)
class FailureRow:
    reason: str
    numbers: tuple[int, ...]  # the trials that failed or were pruned for it
    shared: tuple[str, ...]  # parameter ranges they concentrate in
    meaning: str  # what the reason means


@dataclass(frozen=True)
class HardwareLine:
    trial: int
    where: str | None  # the cell the trial ran on
    reading: str  # memory, data wait, GPU use


@dataclass(frozen=True)
class HardwareSection:
    lines: tuple[HardwareLine, ...]  # every trial that recorded readings, by trial order
    leak: str | None  # a worker whose memory kept growing


@dataclass(frozen=True)
class ReportModel:
    """The whole page's content, section by section in page order."""

    name: str  # the study's
    generated: datetime.datetime
    facts: tuple[Fact, ...]
    run: CompanionSection | None  # the budgeted run (`hpo run`) whose search this study is: its ledger
    summary: SummarySection
    importance: ImportanceSection
    learning: LearningSection
    sweep: SweepSection
    search: SearchSection
    samples: SamplesSection
    winner: WinnerSection | None  # None before a trial completes
    stopping: StopSection
    companions: tuple[CompanionSection, ...]
    failures: tuple[FailureRow, ...]
    hardware: HardwareSection
