"""Run the checklist on a spec's data, model and schedule."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from hpo.doctor import data_checks, model_checks, schedule_checks
from hpo.doctor.checklist import Checklist
from hpo.doctor.coord_check import coord_check
from hpo.doctor.result import Check
from hpo.errors import MB, ConfigError, free_bytes
from hpo.spec.config import TrainConfig
from hpo.spec.counts import feature_dim, screen_words
from hpo.spec.params import Params, candidates, param_bounds
from hpo.spec.sampling import SCREEN_PAYS
from hpo.spec.spec import Spec, sample_count_problems, sampling_values
from hpo.training.checkpoint import trial_disk_bytes
from hpo.training.data import ImageData, load_data
from hpo.training.model import count_parameters
from hpo.training.refusal import schedule_label, schedule_refusal
from hpo.training.runtime import default_memory_limit, resolve_device
from hpo.training.trainer import Trainer, make_schedule


def base_params(spec: Spec) -> Params:
    """The first baseline, else nothing: the configuration a person would try first."""
    return dict(spec.baselines[0]) if spec.baselines else {}


def base_config(spec: Spec) -> TrainConfig:
    return spec.train_config(spec.split_params(base_params(spec))[0])


def batch_size_configs(spec: Spec, cfg: TrainConfig) -> list[TrainConfig]:
    p = spec.search.get("batch_size")
    sizes: list[Any] = list(getattr(p, "choices", [])) or sorted(set(param_bounds(p, cfg.batch_size)))
    return [cfg.replace(batch_size=int(b)) for b in sorted(sizes)]


SCHEDULE_KEYS = ("schedule", "timesteps", "beta_scaling", "beta_start", "beta_end", "zero_terminal_snr")


def schedule_configs(spec: Spec, cfg: TrainConfig) -> list[TrainConfig]:
    """The baseline's schedule first, then every corner of the searched schedule settings (each
    choice, both ends of each range) that is a valid configuration."""
    axes = [
        [(key, v) for v in candidates(spec.search[key])] if key in spec.search else [(key, getattr(cfg, key))]
        for key in SCHEDULE_KEYS
    ]
    out = [cfg]
    for corner in itertools.product(*axes):
        try:
            c = cfg.replace(**dict(corner))
        except ConfigError:  # e.g. beta_start above beta_end, or zero terminal SNR with eps: not a trial either
            continue
        if c not in out:
            out.append(c)
    return out


def schedule_and_budget(spec: Spec, cfg: TrainConfig, data: ImageData, trainer: Trainer) -> list[Check]:
    checks = []
    configs = schedule_configs(spec, cfg)
    refused = [c for c in configs[1:] if schedule_refusal(c) is not None]
    for i, c in enumerate(configs):
        label = schedule_label(c) + (" (baseline)" if i == 0 else "")
        found = [
            schedule_checks.terminal_snr(make_schedule(c), label),
            schedule_checks.wasted_levels(make_schedule(c), label),
        ]
        checks += found if i == 0 else [f for f in found if f.status != "pass" and c not in refused]
    if refused:
        checks.append(schedule_checks.refused_corners(refused, len(configs)))
    checks.append(steps_check(spec, cfg.timesteps))
    checks.append(schedule_checks.receptive_field(trainer.model, trainer.info, trainer.device))
    _, max_kimg = param_bounds(spec.search.get("kimg"), cfg.kimg)
    checks.append(
        schedule_checks.data_budget(data, count_parameters(trainer.model), float(max_kimg), trainer.info.conditional)
    )
    return checks


def steps_check(spec: Spec, timesteps: int) -> Check:
    """The step counts and samplers a study may score, searched or swept, against the run's T."""
    steps = [int(s) for s in sampling_values(spec, "steps")]
    return schedule_checks.sampler_steps(steps, timesteps, tuple(sampling_values(spec, "sampler")))


def sample_counts(spec: Spec, channels: int) -> Check:
    """Whether FID and the screen are well-posed in the feature space (:mod:`hpo.spec.counts`)."""
    problems = sample_count_problems(spec, channels)
    if problems:
        worst = next((p for p in problems if p.fatal), problems[0])
        return Check(
            "scoring: sample counts", "fail" if worst.fatal else "warn", f"{worst.key}: {worst.message}",
            f"raise {worst.key}",
        )  # fmt: skip
    d, sweep = feature_dim(spec.score.features, channels), spec.sampling
    counts = f"FID on {spec.score.num_samples} samples in {d} dimensions"
    if not sweep.screen_samples:
        return Check("scoring: sample counts", "pass", f"no screen, {counts}")
    by = screen_words(sweep.screen_by, sweep.screen_samples)
    saving = sweep.screen_saving(spec.score.num_samples, conditional=spec.train.conditional)
    if saving < SCREEN_PAYS:
        return Check(
            "scoring: sample counts", "warn",
            f"the screen ({sweep.screen_samples} by {by}) saves {max(saving, 0):.0%} of the sweep's network "
            "evaluations in the worst case (its finalists may be every combination) and can only lose the best one",
            "set sampling.screen_samples: 0 to score every combination in full",
        )  # fmt: skip
    saves = f"saving at least {saving:.0%} of the sweep's network evaluations"
    return Check("scoring: sample counts", "pass", f"screen {sweep.screen_samples} by {by} ({saves}), {counts}")


def disk_space(cfg: TrainConfig, data: ImageData, artifacts: Path, workers: int) -> Check:
    """Whether the artifact store has room for the checkpoints of ``workers`` trials at once (a full disk
    sends each trial back to the queue and stops its worker: better said before the study starts)."""
    need = trial_disk_bytes(cfg, data) * workers
    free = free_bytes(artifacts)
    if free is None:
        return Check("disk: free space", "skip", f"{artifacts} is on no existing filesystem")
    have = f"{free / MB:,.0f} MB free at {artifacts}, {workers} trial(s) at once need about {need / MB:,.0f} MB"
    if free < need:
        return Check("disk: free space", "fail", have, "free space there, or give --artifacts a larger disk")
    return Check("disk: free space", "pass", have)


def run_doctor(
    spec: Spec,
    *,
    fast: bool,
    out_dir: Path,
    artifacts: Path | None = None,
    memory_limit_gb: float | None = None,
    workers: int = 1,
    per_gpu: int = 1,
    checklist: Checklist | None = None,
) -> list[Check]:
    """Every check in order; ``checklist`` hands each on as it finishes (and says what is running).
    ``artifacts``: where the trials' checkpoints go, checked for room (not checked when None)."""
    out = checklist if checklist is not None else Checklist()
    with out.running("loading the data"):
        data = load_data(spec.data)
    cfg = base_config(spec)
    device = resolve_device(cfg.device)
    cfg = cfg.replace(device=str(device))
    out.add(data_checks.counts(data), data_checks.unreadable(data), sample_counts(spec, data.channels))
    if artifacts is not None:
        out.add(disk_space(cfg, data, artifacts, workers * per_gpu))
    if not fast:
        out.add(data_checks.source_files(spec.data))
        with out.running("data: duplicates"):
            out.add(*data_checks.duplicates_and_constants(data))
    trainer = Trainer(cfg, data, device)
    out.add(data_checks.value_range(trainer.batch()[0], out_dir / "doctor-batch.png"))
    with out.running("model: overfit one batch"):
        check, overfitted = model_checks.overfit(cfg, data, steps=80 if fast else 300)
    out.add(check)
    with out.running("model: gradients"):
        out.add(model_checks.gradient_flow(cfg, data, device))
    if cfg.parameterization == "mup":
        with out.running("model: coord check"):
            out.add(coord_check(cfg, data, device))
    out.add(*model_checks.conditioning(overfitted.model, overfitted.info, data))
    with out.running("schedule and budget"):
        out.add(*schedule_and_budget(spec, cfg, data, trainer))
    if fast:
        return out.checks
    with out.running("model: mixed precision"):
        out.add(model_checks.mixed_precision(cfg, data, device))
    limit = int(memory_limit_gb * 2**30) if memory_limit_gb else default_memory_limit(device)
    with out.running("memory and speed"):
        out.add(
            *model_checks.memory_and_speed(
                batch_size_configs(spec, cfg), data, device, limit_bytes=limit, n_trials=spec.study.n_trials,
                workers=workers, sampling=spec.sampling, score=spec.score, per_gpu=per_gpu,
            )
        )  # fmt: skip
    _, top_lr = param_bounds(spec.search.get("lr"), cfg.lr)
    with out.running("lr: top of the range"):
        out.add(model_checks.lr_probe(cfg.replace(lr=float(top_lr)), data, device))
    return out.checks
