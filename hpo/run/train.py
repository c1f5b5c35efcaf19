"""``hpo train``'s run: a spec file, or a study's trial (``--from STUDY:TRIAL``), with ``--set`` overrides,
trained and scored into a folder whose ``summary.json`` holds the run's record (:mod:`.scored_run`)."""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hpo.errors import ConfigError, HpoError, disk_full_at, is_disk_full, require_space
from hpo.files import JsonObject
from hpo.outputs import output_folder, write_output
from hpo.records import TrialRecord, params_of
from hpo.run.ends import Deadline, Ends
from hpo.run.scored_run import train_scored
from hpo.scoring.score import preflight
from hpo.service.study import find_trial, require_spec
from hpo.spec.config import POSTHOC_PROFILES, TrainConfig
from hpo.spec.loading import apply_overrides, load_spec, parse_overrides
from hpo.spec.params import Params
from hpo.spec.sampling import SAMPLING_FIELDS, SamplingConfig
from hpo.spec.spec import SAMPLING_TYPES, Spec, spec_from_dict
from hpo.spec.typed import coerce
from hpo.training.checkpoint import trial_disk_bytes
from hpo.training.data import load_data

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


def train_run(
    spec_path: Path | None,
    overrides: list[str],
    out: Path,
    *,
    source: str | None = None,
    storage: str | None = None,
    deadline: float | None = None,
    stop_when_copying: bool = False,
    continue_from: Path | None = None,
) -> JsonObject:
    """Train and score one configuration into the run folder ``out`` (checked before anything is loaded);
    with ``deadline`` (``time.time()``), training ends at the last evaluation point before it that
    leaves room for one more interval as long as the last one; with ``stop_when_copying``, at the first
    point whose curve the stop verdict reads as copying training images. ``continue_from`` (``lr_schedule:
    wsd``): a trial's stable-phase state this run continues instead of starting from scratch; with a
    deadline, its cooldown starts early enough to end by it."""
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
    need, what = trial_disk_bytes(cfg, data), "this run's checkpoints"
    require_space(out, need, what)
    try:
        summary = train_scored(
            spec, cfg, data, combos=combos, params=params, out=out, watch=watch, ends=ends, continue_from=continue_from
        )
        write_output(out / "summary.json", json.dumps(summary, indent=2))
    except Exception as err:  # the checkpoint is written atomically: the same command resumes from it
        if is_disk_full(err):
            raise disk_full_at(err, [out, Path(tempfile.gettempdir())], need=need, what=what) from err
        raise
    return summary


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
