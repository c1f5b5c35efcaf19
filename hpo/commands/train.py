"""``hpo train``: one run by hand: train, sweep the sampling combinations, print the table, write a
sample grid, a checkpoint and a TensorBoard log. ``--from STUDY:TRIAL`` reproduces a trial."""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from hpo.doctor.schedule_checks import EPOCHS_BEFORE_MEMORISING, supported_kimg
from hpo.errors import ConfigError, HpoError
from hpo.scoring.noise import pair_sd
from hpo.scoring.pipeline import train_and_score, weights_at
from hpo.scoring.progress import ProgressProbe, copy_floor_of, fidelity_text, progress_line
from hpo.scoring.score import make_scorer, preflight
from hpo.scoring.stopping import points_from_curve, stop_verdict
from hpo.scoring.sweep import ema_sentence, sweep_table
from hpo.service.storage import open_storage
from hpo.service.study import load, require_spec
from hpo.service.trials import best_own
from hpo.service.urls import redact, resolve_url
from hpo.spec.config import POSTHOC_PROFILES
from hpo.spec.loading import apply_overrides, load_spec, parse_overrides
from hpo.spec.sampling import SAMPLING_FIELDS, SamplingConfig
from hpo.spec.spec import Spec, spec_from_dict
from hpo.tracking.base import RunInfo
from hpo.tracking.runs import open_runs
from hpo.training.data import load_data
from hpo.training.generate import sample_images, save_grid
from hpo.training.model import DiffusionModel
from hpo.training.runtime import resolve_device
from hpo.training.trainer import EvalPoint, TrainingAborted, train

log = logging.getLogger("hpo")


def from_trial(
    source: str, storage: str | None, overrides: list[str]
) -> tuple[Spec, dict[str, Any], dict[str, Any] | None]:
    """``STUDY:TRIAL`` → the study's stored spec (with ``--set`` applied), that trial's parameters and
    its best sampling combination (None when it has no score)."""
    study, trial = find_trial(source, storage, what=f"--from {source!r}", need_trial=True)
    name = study.study_name
    stored = require_spec(study)
    try:
        spec = spec_from_dict(apply_overrides(stored.to_dict(), overrides), file=f"study {name}")
    except ConfigError as err:
        raise err.in_file(f"study {name}") from None
    return spec, dict(trial.params), trial.user_attrs.get("sampling")


def find_trial(
    source: str, storage: str | None, *, what: str, need_trial: bool = False
) -> tuple[optuna.Study, FrozenTrial]:
    """``STUDY:TRIAL``, or ``STUDY`` alone (its best complete trial) unless ``need_trial``, → (the study,
    the trial); ``what`` starts each error message (the flag or command and the source)."""
    name, sep, number = source.rpartition(":")
    if not sep:
        name, number = source, ""
    if not name or (sep and not number.isdigit()) or (need_trial and not sep):
        form = "STUDY:TRIAL" if need_trial else "STUDY[:TRIAL]"
        raise HpoError(f"{what}: expected {form}, e.g. digits-quickstart:7")
    url = resolve_url(storage)
    study = load(open_storage(url, must_exist=True), name, redact(url))
    if not sep:
        best = best_own(study)
        if best is None:
            raise HpoError(f"{what}: study {name!r} has no complete trial yet; `hpo status {name}` shows its trials")
        return study, best
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    if int(number) not in trials:
        raise HpoError(f"{what}: study {name!r} has no trial {number} (0..{max(trials, default=-1)})")
    return study, trials[int(number)]


def split_overrides(overrides: list[str]) -> tuple[list[str], dict[str, Any]]:
    """``--set`` items for the spec, and sampling settings fixed for this run (``--set
    guidance_scale=2`` or ``sampling.guidance_scale=2``), which replace their sweep axis."""
    for_spec, fixed = [], {}
    for item in overrides:
        key = item.partition("=")[0].rpartition(".")[2]
        if key in SAMPLING_FIELDS:
            fixed.update(next(iter(parse_overrides([item]).values())))
        else:
            for_spec.append(item)
    return for_spec, fixed


def run_train(
    spec_path: Path | None, overrides: list[str], out: Path, *, source: str | None = None, storage: str | None = None
) -> None:
    overrides, fixed_sampling = split_overrides(overrides)
    known_best: dict[str, Any] | None = None
    if source is not None:
        spec, params, known_best = from_trial(source, storage, overrides)
    elif spec_path is not None:
        spec = load_spec(spec_path, overrides)
        params = dict(spec.baselines[0]) if spec.baselines else {}
    else:
        raise HpoError("hpo train needs a SPEC file or --from STUDY:TRIAL")
    params.update(parse_overrides(overrides).get("train", {}))
    train_params, sampling_params = spec.split_params(params)
    try:
        cfg = spec.train_config(train_params)
        combos = spec.sampling_combinations(cfg, {**sampling_params, **fixed_sampling})
        watch = spec.sampling.preview({**sampling_params, **fixed_sampling})
    except ConfigError as err:
        raise err.in_file(spec.file) from None
    if any(c.ema_sigma_rel is not None for c in combos) and not cfg.ema_profiles:
        cfg = cfg.replace(ema_profiles=POSTHOC_PROFILES)  # --set ema_sigma_rel=… on a spec that does not sweep it
    preflight(spec.score)
    data = load_data(spec.data)
    log.info(
        "data: %d training / %d validation images, %d classes, %d px",
        data.train_images.shape[0], data.val_images.shape[0], data.num_classes, data.image_size,
    )  # fmt: skip
    if known_best is not None and not fixed_sampling:
        watch = SamplingConfig.from_dict(known_best)
    summary = _train_and_score(spec, cfg, combos, data, params, out, watch)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary))


def _train_and_score(
    spec: Spec, cfg: Any, combos: list[Any], data: Any, params: Mapping[str, Any], out: Path, watch: SamplingConfig
) -> dict[str, Any]:
    """The shared train-and-score path, with the score, copy share and generalisation gap measured at
    every evaluation point (at ``watch``, one sampling combination); then say when to stop."""
    runs = open_runs(spec.tracking, RunInfo("hpo-train", 0, params), tensorboard_dir=out / "tensorboard", local_dir=out)
    device = resolve_device(cfg.device)
    scorer = make_scorer(spec.score, data, device=device, cache_dir=spec.data.cache_path / "scoring")
    probe = ProgressProbe(scorer, data)
    metric = spec.score.metric_name
    floor = probe.floor
    log.info(
        "real held-out images: %s %.4g ± %.2g (%d images), copies %s: the floor",
        metric, floor.score, floor.score_sd, floor.num_images, floor.copy_pixels.text,
    )  # fmt: skip
    curve: dict[str, dict[str, float]] = {}
    snapshots = out / "ema" if cfg.ema_profiles else None

    def show(point: EvalPoint, model: DiffusionModel) -> None:
        weights = weights_at(model, snapshots, watch, step=point.step)
        extras = probe.measure(weights, watch, class_frequencies=data.class_frequencies())
        point = dataclasses.replace(point, metrics={**point.metrics, **extras})
        curve[str(point.index)] = {"kimg": point.kimg, **point.metrics}
        log.info(
            "eval %d/%d at %.1f kimg: val_rel %.4f, %s (%s)",
            point.index, cfg.num_evals, point.kimg, point.metrics["val_rel"], progress_line(point.metrics, metric),
            watch.label,
        )  # fmt: skip
        runs.on_eval(point, None)

    try:
        training = functools.partial(
            train, cfg, data, on_eval=show, on_sync=runs.on_sync, checkpoint=out / "checkpoint.pt",
            snapshot_dir=snapshots,
        )  # fmt: skip
        scored = train_and_score(training, data, scorer, combos, spec.sampling)
    except TrainingAborted as err:
        runs.close()
        raise HpoError(f"training stopped: {err}; try a lower lr or stronger grad_clip") from None
    result, sweep = scored.result, scored.sweep
    print(sweep_table(sweep, metric))
    if (second := fidelity_text(sweep.best.to_dict(), floor.as_dict())) is not None:
        print(f"best combination: {second}")
    if (line := ema_sentence(sweep.scores)) is not None:
        print(f"{line} (EMA rebuilt from {len(scored.ema.snapshots) if scored.ema else 0} snapshots in {snapshots})")
    last = weights_at(result.model, snapshots, watch)
    again = probe.measure(last, watch, class_frequencies=data.class_frequencies(), seed=1)["score"]
    noise = pair_sd(again, curve[str(cfg.num_evals)]["score"])
    verdict = stop_verdict(points_from_curve(curve), noise=noise, copy_floor=copy_floor_of(floor))
    print(f"stop verdict: {verdict.text}")
    if result.hardware is not None:
        print(f"hardware: {result.hardware.line()}")
    images = int(data.train_images.shape[0])
    print(
        f"the doctor's rule of thumb expects copying after about {supported_kimg(images):g} kimg "
        f"({images} training images × {EPOCHS_BEFORE_MEMORISING} epochs); this run trained {cfg.kimg:g} kimg"
    )
    best = sweep.best
    grid = save_grid(
        sample_images(scored.model(best.sampling), best.sampling, n=64, seed=cfg.seed), out / "samples.png", nrow=8
    )
    extras = {"precision": best.precision, "recall": best.recall, "floor": floor.score}
    runs.on_result(
        {"fid": best.fid, "kid": best.kid, **{k: v for k, v in extras.items() if v is not None}}, {}, result.steps
    )
    runs.close()
    return {
        **scored.record(combos),
        metric: best.fid,
        "sweep": [s.to_dict() for s in sweep.scores],
        "curve": curve,
        "watched_sampling": watch.as_dict(),
        "score_noise_sd": noise,
        "floor": floor.as_dict(),
        "stop": {"kind": verdict.kind, "text": verdict.text, "since_kimg": verdict.since_kimg},
        "samples": str(grid),
        "tensorboard": str(out / "tensorboard"),
    }
