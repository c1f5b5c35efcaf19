"""A trial's stored attributes, typed (``TrialRecord``), a companion trial's (``companion_attrs``), and
a trial read under its parameters' current names (``named``, ``named_study``)."""

from __future__ import annotations

import copy
import warnings
from functools import cached_property

import optuna
from optuna.trial import FrozenTrial, TrialState

from hpo.errors import HpoError
from hpo.files import JsonObject
from hpo.records.combo import ComboScore
from hpo.records.curve import CurveEntry, CurvePoint, curve_points
from hpo.records.hardware import HardwareSummary
from hpo.records.keys import (
    BASELINE_ATTR,
    BASELINE_NAME_ATTR,
    BRANCH_ATTR,
    BUDGET_KIMG_ATTR,
    CARRIED_ATTR,
    CHECKPOINT_ATTR,
    CONTINUES_ATTR,
    CURVE_ATTR,
    CURVE_NOISE_ATTR,
    EMA_SNAPSHOTS_ATTR,
    ENDING_ATTRS,
    FAIL_REASON_ATTR,
    FID_REPEAT_ATTR,
    FIDELITY_KEYS,
    FLOOR_ATTR,
    GRIDS_ATTR,
    HARDWARE_ATTR,
    HOST_FAULTS_ATTR,
    LINEAGE_ATTR,
    NOISE_ATTR,
    RAN_ON_ATTR,
    SAMPLES_ATTR,
    SOURCE_TRIAL_ATTR,
    STATISTIC_ATTR,
    STOP_ATTR,
    STOPPED_AT_ATTR,
    SWEEP_ATTR,
    VALUE_ATTR,
    WATCH_SAMPLING_ATTR,
)
from hpo.records.payload import Stored, as_mapping, as_number
from hpo.records.payloads import EmaSnapshots, FloorRecord, StopVerdict, ValueStatistic
from hpo.records.placement import Placement
from hpo.spec.params import Params
from hpo.spec.sampling import RENAMED, SamplingConfig, current_names


class TrialRecord(Stored):
    """A trial's stored attributes, typed: absent or malformed fields read as None (or empty)."""

    @classmethod
    def current(cls, t: FrozenTrial) -> TrialRecord:
        """This attempt's attributes: a waiting retry shows none of its predecessor's."""
        return cls({} if t.state == TrialState.WAITING else t.user_attrs)

    def number(self, key: str) -> float:
        """A numeric field of the run record (``RunRecord``'s keys, e.g. train_seconds); 0 when absent."""
        return as_number(self.attrs.get(key)) or 0.0

    @property
    def train_seconds(self) -> float:
        """``RunRecord.train_seconds``: training, its evaluation points included; 0 when absent."""
        return self.number("train_seconds")

    @property
    def eval_seconds(self) -> float:
        """``RunRecord.eval_seconds``: of ``train_seconds``, the evaluation points'; 0 when absent."""
        return self.number("eval_seconds")

    @property
    def eval_points(self) -> int:
        return int(self.number("eval_points"))

    @property
    def score_seconds(self) -> float:
        """``RunRecord.score_seconds``: the sampling sweep's; 0 when absent."""
        return self.number("score_seconds")

    @property
    def images_per_second(self) -> float:
        return self.number("images_per_second")

    @property
    def combinations(self) -> int:
        """``RunRecord.combinations``: the sampling combinations the sweep scored; 0 when absent."""
        return int(self.number("combinations"))

    @property
    def run_value(self) -> float:
        """``TrainRecord.value``: the score of a run outside a study (summary.json); 0 when absent."""
        return self.number(VALUE_ATTR)

    @property
    def baseline(self) -> bool:
        return bool(self.attrs.get(BASELINE_ATTR))

    @property
    def baseline_name(self) -> str | None:
        """A baseline's name (the spec's `name`, else "baseline N"); None for other trials and for a
        baseline enqueued before names were stored."""
        raw = self.attrs.get(BASELINE_NAME_ATTR)
        return str(raw) if self.baseline and raw is not None else None

    @property
    def baseline_label(self) -> str:
        """What a report calls this trial's start: its name ("known start", "baseline 2"), else "baseline"
        (a baseline enqueued before names were stored); "" for a trial that is no baseline."""
        return "" if not self.baseline else self.baseline_name or "baseline"

    @property
    def carried_from(self) -> str | None:
        raw = self.attrs.get(CARRIED_ATTR)
        return None if raw is None else str(raw)

    @property
    def continues(self) -> int | None:
        """pruner: rung: the paused trial this one continues from its checkpoint; None otherwise."""
        raw = self.attrs.get(CONTINUES_ATTR)
        return int(raw) if isinstance(raw, int) else None

    @property
    def host_faults(self) -> int:
        """Attempts before this one that a full disk ended (they went back to the queue unspent)."""
        raw = self.attrs.get(HOST_FAULTS_ATTR)
        return int(raw) if isinstance(raw, int) else 0

    @property
    def source_trial(self) -> int | None:
        raw = self.attrs.get(SOURCE_TRIAL_ATTR)
        return int(raw) if isinstance(raw, int) else None

    @property
    def sampling_dict(self) -> JsonObject | None:
        """The best combination as stored (a former setting name, e.g. ``ddim_steps``, as it was)."""
        return as_mapping(self.attrs.get("sampling"))

    @property
    def sampling(self) -> SamplingConfig | None:
        """The sweep's best guidance / DDIM-step combination."""
        raw = self.sampling_dict
        return SamplingConfig.from_dict(raw) if raw else None

    @property
    def statistic(self) -> ValueStatistic | None:
        """What the value is (count, features, bias correction, how it was picked); None for trials
        stored before it was kept."""
        return ValueStatistic.read(self.attrs.get(STATISTIC_ATTR))

    @property
    def watch_sampling(self) -> SamplingConfig | None:
        raw = as_mapping(self.attrs.get(WATCH_SAMPLING_ATTR))
        return SamplingConfig.from_dict(raw) if raw else None

    @property
    def curve(self) -> dict[str, dict[str, float]]:
        return {
            str(k): dict(v) for k, v in (as_mapping(self.attrs.get(CURVE_ATTR)) or {}).items() if isinstance(v, dict)
        }

    @cached_property
    def points(self) -> list[CurvePoint]:
        """The curve's evaluation points, in order (parsed once per record: ``point`` and ``last_entry``
        reads them again)."""
        return curve_points(self.curve)

    def point(self, index: int) -> CurvePoint | None:
        """Evaluation point ``index`` (1-based), if the trial reached it."""
        return next((p for p in self.points if p.index == index), None)

    @property
    def last_entry(self) -> CurveEntry | None:
        """What the trial's last evaluation point stored, if it reached one."""
        points = self.points
        return points[-1].entry if points else None

    @property
    def grids(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in (as_mapping(self.attrs.get(GRIDS_ATTR)) or {}).items()}

    @cached_property
    def sweep(self) -> list[ComboScore]:
        """Every score the sweep stored, in the order they landed (an entry it cannot read is left out);
        parsed once per record."""
        out = []
        for raw in self.attrs.get(SWEEP_ATTR) or []:
            try:
                out.append(ComboScore.from_dict(raw))
            except (HpoError, KeyError, TypeError, ValueError, AttributeError):
                continue
        return out

    def combination_seconds(self, sampling: SamplingConfig | None) -> float:
        """Seconds the sweep spent scoring ``sampling`` (its screen and its completion: the full count);
        0 when it was not scored."""
        return sum(s.seconds for s in self.sweep if s.sampling == sampling)

    @property
    def budget_kimg(self) -> float | None:
        return as_number(self.attrs.get(BUDGET_KIMG_ATTR))

    @property
    def stopped_at_kimg(self) -> float | None:
        return as_number(self.attrs.get(STOPPED_AT_ATTR))

    @property
    def fail_reason(self) -> str | None:
        raw = self.attrs.get(FAIL_REASON_ATTR)
        return str(raw) if raw else None

    @property
    def samples(self) -> str | None:
        raw = self.attrs.get(SAMPLES_ATTR)
        return str(raw) if raw else None

    @property
    def lineage(self) -> tuple[float | None, float | None]:
        """wsd: (the kimg a run continued a shorter run's state from, where its cooldown started)."""
        raw = as_mapping(self.attrs.get(LINEAGE_ATTR)) or {}
        return as_number(raw.get("continued_from_kimg")), as_number(raw.get("cooldown_kimg"))

    @property
    def branch(self) -> tuple[str, float] | None:
        """(the stable-phase state's path under the artifact store, its kimg): what a longer run of
        this configuration continues (``lr_schedule: wsd``); None for another schedule."""
        raw = self.attrs.get(BRANCH_ATTR)
        if not isinstance(raw, dict) or not isinstance(raw.get("path"), str):
            return None
        kimg = as_number(raw.get("kimg"))
        return (raw["path"], kimg) if kimg is not None else None

    @property
    def checkpoint(self) -> str | None:
        raw = self.attrs.get(CHECKPOINT_ATTR)
        return str(raw) if raw else None

    @property
    def num_parameters(self) -> int:
        raw = as_number(self.attrs.get("num_parameters"))
        return int(raw) if raw is not None else 0

    @property
    def kid(self) -> float | None:
        return as_number(self.attrs.get("kid"))

    @property
    def noise(self) -> float | None:
        """This trial's estimate of its value's standard deviation: its best combination scored again on an
        independent sample set (the pair ``analysis.noise`` pools over a study)."""
        return as_number(self.attrs.get(NOISE_ATTR))

    @property
    def curve_noise(self) -> float | None:
        """``hpo train``'s estimate of one evaluation point's standard deviation (``CURVE_NOISE_ATTR``); a
        summary.json written before it had its own key kept it under ``NOISE_ATTR``."""
        return as_number(self.attrs.get(CURVE_NOISE_ATTR, self.attrs.get(NOISE_ATTR)))

    @property
    def repeated(self) -> bool:
        return FID_REPEAT_ATTR in self.attrs

    @property
    def ema_snapshots(self) -> EmaSnapshots | None:
        return EmaSnapshots.read(self.attrs.get(EMA_SNAPSHOTS_ATTR))

    @property
    def hardware(self) -> HardwareSummary | None:
        return HardwareSummary.read(self.attrs.get(HARDWARE_ATTR))

    @property
    def ran_on(self) -> Placement | None:
        """Where the trial ran (host, worker, pid, device), as its worker recorded it."""
        return Placement.read(self.attrs.get(RAN_ON_ATTR))

    @property
    def floor(self) -> FloorRecord | None:
        """The real-image floor ``hpo train``'s summary.json carries (a trial's is its study's)."""
        return FloorRecord.read(self.attrs.get(FLOOR_ATTR))

    @property
    def stop(self) -> StopVerdict | None:
        """``hpo train``'s stop verdict, in its summary.json."""
        return StopVerdict.read(self.attrs.get(STOP_ATTR))

    @property
    def fidelity(self) -> dict[str, float]:
        """Precision, recall and class accuracy, where stored (``analysis.progress.fidelity_text`` reads them)."""
        return {k: v for k in FIDELITY_KEYS if (v := as_number(self.attrs.get(k))) is not None}

    def without_ending(self, *, host_fault: bool = False) -> JsonObject:
        """The attributes a retry inherits: all but how this attempt ended; ``host_fault``: a full disk
        ended it, counted in ``host_faults`` (such attempts spend no retry)."""
        kept = {k: v for k, v in self.attrs.items() if k not in ENDING_ATTRS}
        if host_fault:
            kept[HOST_FAULTS_ATTR] = self.host_faults + 1
        return kept


def companion_attrs(source: FrozenTrial, *, watch: bool) -> JsonObject:
    """A companion trial's attributes: which source trial it re-runs, whether that was a baseline and
    (a confirmation or ladder, ``watch``) the sampling the source found best."""
    record = TrialRecord.of(source)
    attrs: JsonObject = {SOURCE_TRIAL_ATTR: source.number, BASELINE_ATTR: record.baseline}
    if record.baseline_name is not None:
        attrs[BASELINE_NAME_ATTR] = record.baseline_name
    if watch:
        attrs[WATCH_SAMPLING_ATTR] = record.sampling_dict
    return attrs


def params_of(t: FrozenTrial) -> Params:
    """The trial's parameters under their current names: a parameter stored under a setting's former name
    (``ddim_steps``) reads under its name. The one reader of a stored trial's parameter names
    (``tests/records/test_record.py`` fails when a module outside the records and the spec maps them itself)."""
    return current_names(t.params)


def named(t: FrozenTrial) -> FrozenTrial:
    """``t`` with its parameters and their distributions under their current names (:func:`params_of`),
    for code that passes the trial on (importances, narrow, warm start)."""
    if not set(t.params) & set(RENAMED):
        return t
    renamed = copy.copy(t)
    renamed.params, renamed.distributions = params_of(t), current_names(t.distributions)
    return renamed


def named_study(study: optuna.Study) -> optuna.Study:
    """``study`` itself, or, where a trial stored a parameter under a former name, an in-memory copy
    whose trials use the current names (for Optuna's own plots, which read parameters by name)."""
    trials = study.get_trials(deepcopy=False)
    if not any(set(t.params) & set(RENAMED) for t in trials):
        return study
    copied = optuna.create_study(storage=optuna.storages.InMemoryStorage(), directions=study.directions)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        copied.add_trials([named(t) for t in trials])
    return copied
