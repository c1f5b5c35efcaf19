"""What a trial and a study store, in one place: every attribute key the service writes, and the typed
views every reader goes through (``TrialRecord``, ``StudyRecord``). No other module names a key as a
string or reads ``user_attrs`` (tests/test_record.py greps the package for it), so adding a field or
renaming one touches this file and its writer only."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import optuna
from optuna.trial import FrozenTrial, TrialState

from hpo.errors import HpoError
from hpo.spec.sampling import RENAMED, SamplingConfig, current_names

# ---- a trial's attributes ----
BASELINE_ATTR = "baseline"  # enqueued from the spec's `baselines`
CARRIED_ATTR = "carried_from"  # "STUDY#N": a prior observation copied by `hpo launch --warm-start`, never trained here
WARM_START_ATTR = "warm_start"  # "STUDY#N": a configuration queued from another study's best, trained here
SOURCE_TRIAL_ATTR = "confirm_of"  # in a companion (confirmation, ladder, widths): the source trial's number
WATCH_SAMPLING_ATTR = "watch_sampling"  # in a ladder: the sampling every evaluation point is scored at
RAN_ON_ATTR = "ran_on"  # Placement.as_dict()
BUDGET_KIMG_ATTR = "budget_kimg"
CURVE_ATTR = "curve"  # {evaluation index: {metric: value}}
GRIDS_ATTR = "grids"  # {evaluation index: artifact of the sample strip}
SWEEP_ATTR = "sweep"  # [ComboScore.to_dict()], stored as each lands so that a retry rescores nothing
SAMPLES_ATTR = "samples"  # artifact: the best sampling's grid
CHECKPOINT_ATTR = "ema_checkpoint"  # artifact: the EMA weights
FID_REPEAT_ATTR = "fid_repeat"  # the best combination scored again on an independent sample set
NOISE_ATTR = "fid_noise"  # a trial: that pair's sd estimate; a study: {"sd", "pairs"} pooled
EMA_SNAPSHOTS_ATTR = "ema_snapshots"
HARDWARE_ATTR = "hardware"
METRIC_NAME_ATTR = "metric_name"  # the score's name (FID, classifier-FID)
STATISTIC_ATTR = "statistic"  # what the value is: analysis.sweep.value_statistic (count, features, bias, pick)
VALUE_ATTR = "value"  # `hpo train`'s score (a trial's is its Optuna value)
STOP_ATTR = "stop"  # `hpo train`'s stop verdict: StopVerdict.as_dict(): {kind, text, since_kimg, per_doubling}
TENSORBOARD_ATTR = "tensorboard"  # `hpo train`'s TensorBoard folder
FAIL_REASON_ATTR, ERROR_ATTR = "fail_reason", "error"
STOPPED_AT_ATTR, OOM_BATCH_ATTR = "stopped_at_kimg", "oom_batch_size"
ENDING_ATTRS = (
    FAIL_REASON_ATTR,
    ERROR_ATTR,
    STOPPED_AT_ATTR,
    OOM_BATCH_ATTR,
)  # how an attempt ended: a retry drops them
FIDELITY_KEYS = ("precision", "recall", "class_accuracy")  # a score's second signal (also the floor's keys)

# The metric reported at each evaluation point (what pruners compare), a key of every curve entry:
# benchmarks/pruning_signal.py measures how well each candidate ranks trials by their final score, and
# docs/benchmarks.md explains the choice.
PRUNING_METRIC = "val_rel"

# ---- a study's attributes ----
SPEC_ATTR, HASH_ATTR, VERSION_ATTR = "hpo_spec", "hpo_spec_hash", "hpo_version"
DATA_ATTR = "data"  # the data's image counts, classes and size (ImageData.summary): the report's header
FLOOR_ATTR = "floor"  # real held-out images scored like samples (score, copy share): measured once per study
REAL_GRID_ATTR = "real_grid"  # artifact: real validation images beside the samples
REPORTED_ATTR = "hpo_report_written"
RUN_ATTR = "hpo_run"  # `hpo run`'s ledger (hpo.run.ledger.Ledger.to_dict) on its search study
# A companion's source study, and the source's pointer to its confirmation. The stored keys keep their
# first names ("confirm_of" for the source trial above, "hpo_confirm_of" here) so that studies already in
# a database still read; the Python names say which is which.
SOURCE_STUDY_ATTR, CONFIRMED_BY = "hpo_confirm_of", "hpo_confirmed_by"
LADDER, LADDER_BY = "hpo_ladder", "hpo_ladder_by"  # a budget ladder's rungs; the source study's pointer to it
WIDTHS, WIDTHS_BY = "hpo_widths", "hpo_widths_by"  # a width ladder's plan; the source study's pointer to it


@dataclass(frozen=True)
class RunRecord:
    """What a trained and scored run stores, under one set of keys: a trial's attributes and
    ``hpo train``'s summary.json (each adds what only it knows)."""

    val_loss: float
    validation: dict[str, float]  # the pruning metric under its own name
    sampling: dict[str, Any]
    kid: float | None
    class_accuracy: float | None
    precision: float | None
    recall: float | None
    num_samples: int
    combinations: int
    train_seconds: float
    eval_seconds: float  # of train_seconds: the evaluation points this process ran
    eval_points: int
    score_seconds: float
    images_per_second: float
    peak_memory_mb: float
    num_parameters: int
    hardware: dict[str, Any] | None
    ema_snapshots: dict[str, Any] | None
    statistic: dict[str, Any]  # what the value is (analysis.sweep.value_statistic)

    def as_attrs(self) -> dict[str, Any]:
        attrs = {
            "val_loss": self.val_loss, **self.validation, "sampling": self.sampling, "kid": self.kid,
            "class_accuracy": self.class_accuracy, "precision": self.precision, "recall": self.recall,
            "num_samples": self.num_samples, "combinations": self.combinations, "train_seconds": self.train_seconds,
            "eval_seconds": self.eval_seconds, "eval_points": self.eval_points, "score_seconds": self.score_seconds,
            "images_per_second": self.images_per_second, "peak_memory_mb": self.peak_memory_mb,
            "num_parameters": self.num_parameters,
            STATISTIC_ATTR: self.statistic,
        }  # fmt: skip
        if self.hardware is not None:
            attrs[HARDWARE_ATTR] = self.hardware
        if self.ema_snapshots is not None:
            attrs[EMA_SNAPSHOTS_ATTR] = self.ema_snapshots
        return attrs


def last_entry(curve: dict[str, dict[str, float]]) -> dict[str, float] | None:
    """The last evaluation point's entry of a curve (keyed by the point's 1-based index as text)."""
    return curve[max(curve, key=int)] if curve else None


@dataclass(frozen=True, kw_only=True)
class TrainRecord:
    """``hpo train``'s summary.json: the run's record under the keys a trial stores the same things
    under (its sweep, curve, watched combination, noise, floor and sample grid), plus what only a
    run outside a study has (its value, stop verdict and TensorBoard folder)."""

    run: RunRecord
    metric_name: str
    value: float
    sweep: list[dict[str, Any]]
    curve: dict[str, dict[str, float]]
    watch_sampling: dict[str, Any]  # the combination every evaluation point was scored at
    noise_sd: float  # one pair's estimate: the last point's score against the final weights rescored
    floor: dict[str, Any]
    stop: dict[str, Any]
    samples: str  # the grid's path (a trial stores an artifact id)
    tensorboard: str

    def as_attrs(self) -> dict[str, Any]:
        return {
            **self.run.as_attrs(), METRIC_NAME_ATTR: self.metric_name, VALUE_ATTR: self.value,
            SWEEP_ATTR: self.sweep, CURVE_ATTR: self.curve, WATCH_SAMPLING_ATTR: self.watch_sampling,
            NOISE_ATTR: self.noise_sd, FLOOR_ATTR: self.floor, STOP_ATTR: self.stop, SAMPLES_ATTR: self.samples,
            TENSORBOARD_ATTR: self.tensorboard,
        }  # fmt: skip


class HasAttrs(Protocol):
    @property
    def user_attrs(self) -> dict[str, Any]: ...


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _dict(value: object) -> dict[str, Any] | None:
    return dict(value) if isinstance(value, dict) else None


_S = TypeVar("_S", bound="_Stored")


@dataclass(frozen=True)
class _Stored:
    attrs: Mapping[str, Any]

    @classmethod
    def of(cls: type[_S], owner: HasAttrs) -> _S:
        """The attributes of a trial or study (frozen or live)."""
        return cls(owner.user_attrs)


class TrialRecord(_Stored):
    """A trial's stored attributes, typed: absent or malformed fields read as None (or empty)."""

    @classmethod
    def current(cls, t: FrozenTrial) -> TrialRecord:
        """This attempt's attributes: a waiting retry shows none of its predecessor's."""
        return cls({} if t.state == TrialState.WAITING else t.user_attrs)

    def number(self, key: str) -> float:
        """A numeric field of the run record (``RunRecord``'s keys, e.g. train_seconds); 0 when absent."""
        return _number(self.attrs.get(key)) or 0.0

    @property
    def baseline(self) -> bool:
        return bool(self.attrs.get(BASELINE_ATTR))

    @property
    def carried_from(self) -> str | None:
        raw = self.attrs.get(CARRIED_ATTR)
        return None if raw is None else str(raw)

    @property
    def source_trial(self) -> int | None:
        raw = self.attrs.get(SOURCE_TRIAL_ATTR)
        return int(raw) if isinstance(raw, int) else None

    @property
    def sampling_dict(self) -> dict[str, Any] | None:
        return _dict(self.attrs.get("sampling"))

    @property
    def sampling(self) -> SamplingConfig | None:
        """The sweep's best guidance / DDIM-step combination."""
        raw = self.sampling_dict
        return SamplingConfig.from_dict(raw) if raw else None

    @property
    def statistic(self) -> dict[str, Any] | None:
        """What the value is (count, features, bias correction, how it was picked); None for trials
        stored before it was kept."""
        return _dict(self.attrs.get(STATISTIC_ATTR))

    @property
    def watch_sampling(self) -> SamplingConfig | None:
        raw = _dict(self.attrs.get(WATCH_SAMPLING_ATTR))
        return SamplingConfig.from_dict(raw) if raw else None

    @property
    def curve(self) -> dict[str, dict[str, float]]:
        return {str(k): dict(v) for k, v in (_dict(self.attrs.get(CURVE_ATTR)) or {}).items() if isinstance(v, dict)}

    def last_point(self, key: str) -> float | None:
        """``key`` at the trial's last evaluation point, if it reached one."""
        last = last_entry(self.curve)
        return _number(last.get(key)) if last is not None else None

    @property
    def grids(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in (_dict(self.attrs.get(GRIDS_ATTR)) or {}).items()}

    @property
    def sweep(self) -> list[dict[str, Any]]:
        return [dict(d) for d in self.attrs.get(SWEEP_ATTR) or [] if isinstance(d, dict)]

    def combination_seconds(self, sampling: SamplingConfig | None) -> float:
        """Seconds the sweep spent scoring ``sampling`` (its screen and its completion: the full count);
        0 when it was not scored."""
        rows = [d for d in self.sweep if SamplingConfig.from_dict(d) == sampling]
        return sum(_number(d.get("seconds")) or 0.0 for d in rows)

    @property
    def budget_kimg(self) -> float | None:
        return _number(self.attrs.get(BUDGET_KIMG_ATTR))

    @property
    def stopped_at_kimg(self) -> float | None:
        return _number(self.attrs.get(STOPPED_AT_ATTR))

    @property
    def fail_reason(self) -> str | None:
        raw = self.attrs.get(FAIL_REASON_ATTR)
        return str(raw) if raw else None

    @property
    def samples(self) -> str | None:
        raw = self.attrs.get(SAMPLES_ATTR)
        return str(raw) if raw else None

    @property
    def checkpoint(self) -> str | None:
        raw = self.attrs.get(CHECKPOINT_ATTR)
        return str(raw) if raw else None

    @property
    def num_parameters(self) -> int:
        raw = _number(self.attrs.get("num_parameters"))
        return int(raw) if raw is not None else 0

    @property
    def kid(self) -> float | None:
        return _number(self.attrs.get("kid"))

    @property
    def noise(self) -> float | None:
        """This trial's estimate of a score's standard deviation (its repeated pair)."""
        return _number(self.attrs.get(NOISE_ATTR))

    @property
    def repeated(self) -> bool:
        return FID_REPEAT_ATTR in self.attrs

    @property
    def ema_snapshots(self) -> dict[str, Any] | None:
        return _dict(self.attrs.get(EMA_SNAPSHOTS_ATTR))

    @property
    def hardware(self) -> dict[str, Any] | None:
        return _dict(self.attrs.get(HARDWARE_ATTR))

    @property
    def ran_on(self) -> dict[str, Any] | None:
        return _dict(self.attrs.get(RAN_ON_ATTR))

    @property
    def fidelity(self) -> dict[str, float]:
        """Precision, recall and class accuracy, where stored (``analysis.progress.fidelity_text`` reads them)."""
        return {k: v for k in FIDELITY_KEYS if (v := _number(self.attrs.get(k))) is not None}

    def without_ending(self) -> dict[str, Any]:
        """The attributes a retry inherits: all but how this attempt ended."""
        return {k: v for k, v in self.attrs.items() if k not in ENDING_ATTRS}


def companion_attrs(source: FrozenTrial, *, watch: bool) -> dict[str, Any]:
    """A companion trial's attributes: which source trial it re-runs, whether that was a baseline and
    (a confirmation or ladder, ``watch``) the sampling the source found best."""
    record = TrialRecord.of(source)
    attrs: dict[str, Any] = {SOURCE_TRIAL_ATTR: source.number, BASELINE_ATTR: record.baseline}
    if watch:
        attrs[WATCH_SAMPLING_ATTR] = record.sampling_dict
    return attrs


class StudyRecord(_Stored):
    """A study's stored attributes, typed."""

    def has(self, key: str) -> bool:
        return key in self.attrs

    def text(self, key: str) -> str | None:
        """A string-valued attribute (the spec, a companion's name, a pointer); None when absent."""
        raw = self.attrs.get(key)
        return str(raw) if raw else None

    def mapping(self, key: str) -> dict[str, Any] | None:
        """A dict-valued attribute (data, floor, ladder or width plan); None when absent."""
        return _dict(self.attrs.get(key))

    def plan(self, key: str) -> dict[str, Any]:
        """A companion's plan (``LADDER``, ``WIDTHS``), which its kind of companion always stores."""
        plan = self.mapping(key)
        if plan is None:
            raise HpoError(f"this study has no {key!r} attribute: it is not the companion that stores one")
        return plan

    @property
    def floor(self) -> dict[str, Any] | None:
        return self.mapping(FLOOR_ATTR)

    @property
    def data(self) -> dict[str, Any] | None:
        return self.mapping(DATA_ATTR)

    @property
    def real_grid(self) -> str | None:
        return self.text(REAL_GRID_ATTR)

    @property
    def run(self) -> dict[str, Any] | None:
        """The ledger of the budgeted run (``hpo run``) whose search this study is; None for other studies."""
        return self.mapping(RUN_ATTR)

    @property
    def noise_sd(self) -> float | None:
        """The pooled sd of a score over the study's repeated pairs, once one was measured."""
        return _number((self.mapping(NOISE_ATTR) or {}).get("sd"))


def named(t: FrozenTrial) -> FrozenTrial:
    """``t`` with a parameter stored under a setting's former name (``ddim_steps``) under its name."""
    if not set(t.params) & set(RENAMED):
        return t
    renamed = copy.copy(t)
    renamed.params, renamed.distributions = current_names(t.params), current_names(t.distributions)
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


COPY_SPACES = ("pixels", "features")  # where a copy share is measured: raw pixels, classifier features


def worst_copy(entry: Mapping[str, Any], part: str = "") -> float | None:
    """The worse (larger) of the pixel and feature copy shares in a stored curve entry or floor:
    ``part`` "" for the share, "_low" / "_high" for its interval's ends; None when neither was measured."""
    values = [float(entry[key]) for space in COPY_SPACES if (key := f"copy_{space}{part}") in entry]
    return max(values) if values else None
