"""``hpo train``: one run by hand: train, sweep the sampling combinations, print the table, write a
sample grid, a checkpoint and a TensorBoard log. ``--from STUDY:TRIAL`` reproduces a trial."""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpo.analysis.noise import pair_sd
from hpo.analysis.progress import Floor, copy_floor_of, eval_point_text, fidelity_text
from hpo.analysis.stopping import points_from_curve, stop_verdict
from hpo.analysis.sweep import ema_sentence, sweep_table
from hpo.doctor.schedule_checks import EPOCHS_BEFORE_MEMORISING, supported_kimg
from hpo.errors import ConfigError, HpoError
from hpo.files import JsonObject
from hpo.outputs import output_folder, write_output, writing
from hpo.records import TrainRecord, TrialRecord, curve_points, params_of
from hpo.scoring.pipeline import Scored, train_and_score, weights_at
from hpo.scoring.progress import ProgressProbe, record_point
from hpo.scoring.score import Scorer, make_scorer, preflight
from hpo.service.study import find_trial, require_spec
from hpo.spec.config import POSTHOC_PROFILES, TrainConfig
from hpo.spec.loading import apply_overrides, load_spec, parse_overrides
from hpo.spec.params import Params
from hpo.spec.sampling import SAMPLING_FIELDS, SamplingConfig, SamplingSweep
from hpo.spec.spec import SAMPLING_TYPES, Spec, spec_from_dict
from hpo.spec.typed import coerce
from hpo.tracking.base import RunInfo, Runs
from hpo.tracking.runs import open_runs
from hpo.training.data import ImageData, load_data
from hpo.training.generate import final_grid
from hpo.training.model import DiffusionModel
from hpo.training.runtime import resolve_device
from hpo.training.trainer import EvalPoint, TrainingAborted, TrainResult, train

log = logging.getLogger("hpo")


def from_trial(source: str, storage: str | None, overrides: list[str]) -> tuple[Spec, Params, SamplingConfig | None]:
    """``STUDY:TRIAL`` → the study's stored spec (with ``--set`` applied), that trial's parameters and
    its best sampling combination (None when it has no score)."""
    study, trial = find_trial(source, storage, what=f"--from {source!r}", need_trial=True)
    name = study.study_name
    stored = require_spec(study)
    try:
        spec = spec_from_dict(apply_overrides(stored.to_dict(), overrides), file=f"study {name}")
    except ConfigError as err:
        raise err.in_file(f"study {name}") from None
    return spec, params_of(trial), TrialRecord.of(trial).sampling


def split_overrides(overrides: list[str]) -> tuple[list[str], Params]:
    """``--set`` items for the spec, and sampling settings fixed for this run (``--set
    guidance_scale=2`` or ``sampling.guidance_scale=2``), which replace their sweep axis."""
    for_spec: list[str] = []
    fixed: Params = {}
    for item in overrides:
        key = item.partition("=")[0].rpartition(".")[2]
        if key in SAMPLING_FIELDS:
            value = next(iter(next(iter(parse_overrides([item]).values())).values()))
            fixed[key] = coerce(value, SAMPLING_TYPES[key], f"--set {key}")
        else:
            for_spec.append(item)
    return for_spec, fixed


def run_train(
    spec_path: Path | None,
    overrides: list[str],
    out: Path,
    *,
    source: str | None = None,
    storage: str | None = None,
    deadline: float | None = None,
    stop_when_copying: bool = False,
) -> None:
    """Train and score one configuration into the run folder ``out`` (checked before anything is loaded);
    with ``deadline`` (``time.time()``), training ends at the last evaluation point before it that
    leaves room for one more interval as long as the last one; with ``stop_when_copying``, at the first
    point whose curve the stop verdict reads as copying training images."""
    output_folder(out, holds="the run's grids, checkpoint and logs")
    overrides, fixed_sampling = split_overrides(overrides)
    spec, params, known_best = _spec_and_params(spec_path, overrides, source=source, storage=storage)
    cfg, combos, watch = _configs(spec, params, fixed_sampling)
    preflight(spec.score)
    data = load_data(spec.data)
    log.info(
        "data: %d training / %d validation images, %d classes, %d px",
        data.train_images.shape[0], data.val_images.shape[0], data.num_classes, data.image_size,
    )  # fmt: skip
    if known_best is not None and not fixed_sampling:
        watch = known_best
    ends = Ends(Deadline(deadline) if deadline is not None else None, stop_when_copying)
    summary = _train_and_score(spec, cfg, data, combos=combos, params=params, out=out, watch=watch, ends=ends)
    write_output(out / "summary.json", json.dumps(summary, indent=2))
    print(json.dumps(summary))


def _spec_and_params(
    spec_path: Path | None, overrides: list[str], *, source: str | None, storage: str | None
) -> tuple[Spec, JsonObject, SamplingConfig | None]:
    """The spec, the run's parameters (the trial's or the spec's first baseline, then ``--set
    train.…``) and the trial's best sampling combination (None without ``--from`` or a score)."""
    known_best: SamplingConfig | None = None
    params: JsonObject  # the trial's or baseline's Params, then --set train values (any JSON value: a list too)
    if source is not None:
        spec, trial_params, known_best = from_trial(source, storage, overrides)
        params = dict(trial_params)
    elif spec_path is not None:
        spec = load_spec(spec_path, overrides)
        params = dict(spec.baselines[0]) if spec.baselines else {}
    else:
        raise HpoError("hpo train needs a SPEC file or --from STUDY:TRIAL")
    params.update(parse_overrides(overrides).get("train", {}))
    return spec, params, known_best


def _configs(
    spec: Spec, params: Mapping[str, Any], fixed_sampling: Mapping[str, Any]
) -> tuple[TrainConfig, list[SamplingConfig], SamplingConfig]:
    """(the training config, the sampling combinations to sweep, the one watched at every evaluation)."""
    train_params, sampling_params = spec.split_params(params)
    try:
        cfg = spec.train_config(train_params)
        combos = spec.sampling_combinations(cfg, {**sampling_params, **fixed_sampling})
        watch = spec.sampling.preview({**sampling_params, **fixed_sampling})
    except ConfigError as err:
        raise err.in_file(spec.file) from None
    if any(c.ema_sigma_rel is not None for c in combos) and not cfg.ema_profiles:
        cfg = cfg.replace(ema_profiles=POSTHOC_PROFILES)  # --set ema_sigma_rel=… on a spec that does not sweep it
    return cfg, combos, watch


@dataclass
class Deadline:
    """True at an evaluation point when one more interval as long as the last one would pass ``at``."""

    at: float  # time.time() by which training must have ended
    last: float = field(default_factory=time.time)

    def __call__(self) -> bool:
        now = time.time()
        interval, self.last = now - self.last, now
        return now + interval > self.at


@dataclass(frozen=True)
class Ends:
    """What may end a run before its budget: a deadline, and the stop verdict reading copying."""

    deadline: Deadline | None = None
    when_copying: bool = False

    def rule(self, curve: dict[str, dict[str, float]], copy_floor: float | None) -> Callable[[], bool] | None:
        """The trainer's ``end_early`` over the run's ``curve`` as it grows."""
        if self.deadline is None and not self.when_copying:
            return None
        deadline = self.deadline

        def end() -> bool:
            passed = deadline is not None and deadline()  # asked at every point: it times the intervals
            return passed or (self.when_copying and copying(curve, copy_floor))

        return end


def copying(curve: dict[str, dict[str, float]], copy_floor: float | None) -> bool:
    """Whether the stop verdict reads ``curve`` so far as copying training images (more training only
    copies more); the noise is left to the verdict's estimate, as no re-measure exists mid-run."""
    return stop_verdict(points_from_curve(curve_points(curve)), noise=None, copy_floor=copy_floor).kind == "copying"


@dataclass
class _Progress:
    """At each evaluation point: the watched combination's score, copy share and gap, added to the
    point's metrics, logged, kept in ``curve`` (keyed by the point's index) and sent to the trackers."""

    probe: ProgressProbe
    runs: Runs
    watch: SamplingConfig
    snapshots: Path | None  # the post-hoc EMA snapshots, when the run keeps them
    metric: str
    num_evals: int
    curve: dict[str, dict[str, float]] = field(default_factory=dict)

    def __call__(self, point: EvalPoint, model: DiffusionModel) -> None:
        def measure() -> dict[str, float]:
            weights = weights_at(model, self.snapshots, self.watch, step=point.step)
            return self.probe.measure(weights, self.watch, class_frequencies=self.probe.data.class_frequencies())

        point = record_point(self.curve, point, measure)
        log.info(
            "eval %d/%d at %.1f kimg: val_rel %.4f, %s (%s)",
            point.index, self.num_evals, point.kimg, point.metrics["val_rel"],
            eval_point_text(point.metrics, self.metric), self.watch.label,
        )  # fmt: skip
        self.runs.on_eval(point, None)


def _train_and_score(
    spec: Spec,
    cfg: TrainConfig,
    data: ImageData,
    *,
    combos: list[SamplingConfig],
    params: Mapping[str, Any],
    out: Path,
    watch: SamplingConfig,
    ends: Ends,
) -> JsonObject:
    """The shared train-and-score path, with the score, copy share and generalisation gap measured at
    every evaluation point (at ``watch``, one sampling combination); then say when to stop."""
    runs = open_runs(spec.tracking, RunInfo("hpo-train", 0, params), tensorboard_dir=out / "tensorboard", local_dir=out)
    scorer = make_scorer(
        spec.score, data, device=resolve_device(cfg.device), cache_dir=spec.data.cache_path / "scoring"
    )
    probe = ProgressProbe(scorer, data)
    metric = spec.score.metric_name
    _log_floor(probe.floor, metric)
    snapshots = out / "ema" if cfg.ema_profiles else None
    progress = _Progress(probe, runs, watch, snapshots, metric, cfg.num_evals)
    end_early = ends.rule(progress.curve, copy_floor_of(probe.floor))
    scored = _train(
        cfg, data, spec.sampling, scorer=scorer, combos=combos, progress=progress, out=out, end_early=end_early
    )
    _print_sweep(scored, metric, probe.floor, snapshots)
    noise = _score_noise(scored, progress)
    verdict = stop_verdict(
        points_from_curve(curve_points(progress.curve)), noise=noise, copy_floor=copy_floor_of(probe.floor)
    )
    print(f"stop verdict: {verdict.text}")
    _print_run_notes(scored.result, data)
    grid = _save_samples(scored, spec.score.grid_size, data.class_names, out)
    _save_weights(scored, out / BEST_WEIGHTS)
    runs.on_result(scored.tracker_metrics(probe.floor.score), {}, scored.result.steps)
    runs.close()
    return TrainRecord(
        run=scored.record(combos), metric_name=metric, value=scored.best.score,
        sweep=scored.sweep.scores, curve=progress.curve, watch_sampling=watch,
        curve_noise=noise, floor=probe.floor.record(), stop=verdict, samples=str(grid),
        tensorboard=str(out / "tensorboard"),
    ).as_attrs()  # fmt: skip


def _log_floor(floor: Floor, metric: str) -> None:
    log.info(
        "real held-out images: %s %.4g ± %.2g (%d images), copies %s: the floor",
        metric, floor.score, floor.score_sd, floor.num_images, floor.copy_pixels.text,
    )  # fmt: skip


def _train(
    cfg: TrainConfig,
    data: ImageData,
    sweep: SamplingSweep,
    *,
    scorer: Scorer,
    combos: list[SamplingConfig],
    progress: _Progress,
    out: Path,
    end_early: Callable[[], bool] | None,
) -> Scored:
    """Train (measuring ``progress`` at every evaluation point) and score every combination; a run
    that diverges closes its trackers and stops with advice."""
    try:
        training = functools.partial(
            train, cfg, data, on_eval=progress, on_sync=progress.runs.on_sync, checkpoint=out / "checkpoint.pt",
            snapshot_dir=progress.snapshots, end_early=end_early,
        )  # fmt: skip
        return train_and_score(training, data, scorer, combos, sweep)
    except TrainingAborted as err:
        progress.runs.close()
        raise HpoError(f"training stopped: {err}; try a lower lr or stronger grad_clip") from None


def _print_sweep(scored: Scored, metric: str, floor: Floor, snapshots: Path | None) -> None:
    """The sweep table, the best combination's precision, recall and class accuracy beside the real
    images', and which EMA length is best (when it was swept)."""
    print(sweep_table(scored.sweep, metric))
    if (second := fidelity_text(scored.best.to_dict(), floor.record())) is not None:
        print(f"best combination: {second}")
    if (line := ema_sentence(scored.sweep.scores)) is not None:
        print(f"{line} (EMA rebuilt from {len(scored.ema.snapshots) if scored.ema else 0} snapshots in {snapshots})")


def _score_noise(scored: Scored, progress: _Progress) -> float:
    """The score's standard deviation from one pair: the last evaluation point's score and the final
    weights scored again at the watched combination with other seeds."""
    last = weights_at(scored.result.model, progress.snapshots, progress.watch)
    frequencies = progress.probe.data.class_frequencies()
    again = progress.probe.measure(last, progress.watch, class_frequencies=frequencies, seed=1)["score"]
    points = curve_points(progress.curve)
    reached = points[-1].score if points else None
    return pair_sd(again, reached if reached is not None else float("nan"))


def _print_run_notes(result: TrainResult, data: ImageData) -> None:
    """The hardware line and the doctor's rule of thumb for when this dataset starts being copied."""
    if result.hardware is not None:
        print(f"hardware: {result.hardware.line()}")
    images = int(data.train_images.shape[0])
    print(
        f"the doctor's rule of thumb expects copying after about {supported_kimg(images):g} kimg "
        f"({images} training images × {EPOCHS_BEFORE_MEMORISING} epochs); this run trained "
        f"{result.images_seen / 1000:g} kimg"
    )


BEST_WEIGHTS = "ema.pt"  # the best combination's EMA weights (its EMA length rebuilt when it names one)


def _save_weights(scored: Scored, path: Path) -> Path:
    """The weights the best combination samples from, as a trial's EMA artifact is: the network's state_dict."""
    import torch

    with writing(path) as tmp:
        torch.save(scored.model(scored.best.sampling).net.state_dict(), tmp)
    return path


def _save_samples(scored: Scored, n: int, class_names: tuple[str, ...], out: Path) -> Path:
    """The final grid at the best combination, as a trial draws it (``score.grid_size`` samples, rows
    by class, sample seed 1), as ``out/samples.png``."""
    best = scored.best.sampling
    with writing(out / "samples.png") as tmp:
        final_grid(scored.model(best), best, n, tmp, seed=1, class_names=class_names)
    return out / "samples.png"
