"""One configuration trained and swept outside a study (``hpo train``, and ``hpo run``'s final run): the
score, copy share and gap measured at every evaluation point, every sampling combination scored on the
final weights, the stop verdict, the sample grid and the best combination's weights written."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpo.analysis.noise import pair_sd
from hpo.analysis.progress import Floor, copy_floor_of, eval_point_text, fidelity_text
from hpo.analysis.stopping import points_from_curve, stop_verdict
from hpo.analysis.sweep import ema_sentence, sweep_table
from hpo.doctor.schedule_checks import EPOCHS_BEFORE_MEMORISING, supported_kimg
from hpo.errors import HpoError
from hpo.files import JsonObject
from hpo.outputs import writing
from hpo.records import CurveEntry, TrainRecord, Watched, curve_points, stored_entry
from hpo.run.ends import Ends
from hpo.scoring.pipeline import Scored, train_and_score, weights_at
from hpo.scoring.progress import ProgressProbe, record_point
from hpo.scoring.score import Scorer, make_scorer
from hpo.spec.config import TrainConfig
from hpo.spec.sampling import SamplingConfig, SamplingSweep
from hpo.spec.spec import Spec
from hpo.tracking.base import RunInfo, Runs
from hpo.tracking.runs import open_runs
from hpo.training.data import ImageData
from hpo.training.generate import final_grid
from hpo.training.model import DiffusionModel
from hpo.training.runtime import resolve_device
from hpo.training.trainer import EvalPoint, TrainingAborted, TrainResult, train

log = logging.getLogger("hpo")


@dataclass
class WatchedPoints:
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
        def measure() -> Watched:
            weights = weights_at(model, self.snapshots, self.watch, step=point.step)
            return self.probe.measure(weights, self.watch, class_frequencies=self.probe.data.class_frequencies())

        point = record_point(self.curve, point, measure)
        entry = stored_entry(self.curve, point.index) or CurveEntry(point.kimg)
        log.info(
            "eval %d/%d at %.1f kimg: val_rel %.4f, %s (%s)",
            point.index, self.num_evals, point.kimg, entry.val_rel if entry.val_rel is not None else float("nan"),
            eval_point_text(entry, self.metric), self.watch.label,
        )  # fmt: skip
        self.runs.on_eval(point, None)


def train_scored(
    spec: Spec,
    cfg: TrainConfig,
    data: ImageData,
    *,
    combos: list[SamplingConfig],
    params: Mapping[str, Any],
    out: Path,
    watch: SamplingConfig,
    ends: Ends,
    continue_from: Path | None = None,
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
    progress = WatchedPoints(probe, runs, watch, snapshots, metric, cfg.num_evals)
    end_early = ends.rule(progress.curve, copy_floor_of(probe.floor), cooled=cfg.lr_schedule == "wsd")
    lineage = Lineage(continue_from, ends.cool_when()) if cfg.lr_schedule == "wsd" else Lineage()
    scored = _train(
        cfg, data, spec.sampling, scorer=scorer, combos=combos, progress=progress, out=out, end_early=end_early,
        lineage=lineage,
    )  # fmt: skip
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


CHECKPOINT = "checkpoint.pt"  # in the run's folder: the same command resumes from it


@dataclass(frozen=True)
class Lineage:
    """wsd only: the stable-phase state this run continues (a trial's), and when its cooldown starts."""

    continue_from: Path | None = None
    cool_when: Callable[[int, int], bool] | None = None


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
    progress: WatchedPoints,
    out: Path,
    end_early: Callable[[], bool] | None,
    lineage: Lineage,
) -> Scored:
    """Train (measuring ``progress`` at every evaluation point) and score every combination; a run
    that diverges closes its trackers and stops with advice."""
    try:
        training = functools.partial(
            train, cfg, data, on_eval=progress, on_sync=progress.runs.on_sync, checkpoint=out / CHECKPOINT,
            snapshot_dir=progress.snapshots, end_early=end_early, continue_from=lineage.continue_from,
            cool_when=lineage.cool_when,
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


def _score_noise(scored: Scored, progress: WatchedPoints) -> float:
    """The score's standard deviation from one pair: the last evaluation point's score and the final
    weights scored again at the watched combination with other seeds."""
    last = weights_at(scored.result.model, progress.snapshots, progress.watch)
    frequencies = progress.probe.data.class_frequencies()
    again = progress.probe.measure(last, progress.watch, class_frequencies=frequencies, seed=1).score
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
