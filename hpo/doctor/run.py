"""Run the checklist on a spec's data and model."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from hpo.config import TrainConfig
from hpo.data import load_data
from hpo.doctor import data_checks, model_checks
from hpo.doctor.result import Check
from hpo.params import param_bounds
from hpo.runtime import resolve_device
from hpo.spec import Spec
from hpo.train import Trainer


def default_memory_limit(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 0.8)


def base_config(spec: Spec) -> TrainConfig:
    """The first baseline, else the fixed settings: the configuration a person would try first."""
    return spec.train_config(dict(spec.baselines[0]) if spec.baselines else {})


def batch_size_configs(spec: Spec, cfg: TrainConfig) -> list[TrainConfig]:
    p = spec.search.get("batch_size")
    sizes: list[Any] = list(getattr(p, "choices", [])) or sorted(set(param_bounds(p, cfg.batch_size)))
    return [cfg.replace(batch_size=int(b)) for b in sorted(sizes)]


def run_doctor(
    spec: Spec, *, fast: bool, out_dir: Path, memory_limit_gb: float | None = None, workers: int = 1
) -> list[Check]:
    data = load_data(spec.data)
    cfg = base_config(spec)
    device = resolve_device(cfg.device)
    cfg = cfg.replace(device=str(device))
    checks = [data_checks.counts(data)]
    if not fast:
        checks.append(data_checks.source_files(spec.data))
        checks += data_checks.duplicates_and_constants(data)
    batch, _ = Trainer(cfg, data, device).batch()
    checks.append(data_checks.value_range(batch, out_dir / "doctor-batch.png"))
    check, model = model_checks.overfit(cfg, data, steps=80 if fast else 300)
    checks += [check, model_checks.gradient_flow(cfg, data, device), *model_checks.conditioning(model, data)]
    if fast:
        return checks
    checks.append(model_checks.mixed_precision(cfg, data, device))
    limit = int(memory_limit_gb * 2**30) if memory_limit_gb else default_memory_limit(device)
    checks += model_checks.memory_and_speed(
        batch_size_configs(spec, cfg), data, device, limit_bytes=limit, n_trials=spec.study.n_trials, workers=workers
    )
    _, top_lr = param_bounds(spec.search.get("lr"), cfg.lr)
    checks.append(model_checks.lr_probe(cfg.replace(lr=float(top_lr)), data, device))
    return checks
