"""How much the validation metric moves when a level is measured at a nearby noise level instead:
small T maps each log-SNR level to the nearest of its few timesteps (up to 0.48 nats off at T=100).
A model trained at T=1000 (dense timesteps) is evaluated at each level λ and at λ ± 0.48; the
relative change of the raw v-space error is set against the change of its ratio to the Wiener
reference (the ``val_rel`` levels). Peer: the raw error, today's per-level number.

    .venv/bin/python -m benchmarks.level_offset
"""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np
import torch

from benchmarks.common import write_result
from hpo.diffusion.parameterization import model_time, to_x0_eps
from hpo.spec.config import DataConfig
from hpo.training.data import load_data, to_model_range
from hpo.training.trainer import TrainResult, train
from hpo.training.validation import ValidationProbe, make_probe, reference_v_error
from tests.conftest import tiny_config

OFFSET = 0.48
TRAIN: dict[str, Any] = {
    "base_channels": 32, "kimg": 8, "batch_size": 32, "lr": 2e-3, "timesteps": 1000, "schedule": "cosine",
    "num_evals": 1,
}  # fmt: skip
PROBE: dict[str, Any] = {"num_images": 128, "num_levels": 7}
DATA: dict[str, Any] = {"source": "digits", "image_size": 16, "val_fraction": 0.15}
THREADS = 2


@torch.no_grad()
def errors_at(result: TrainResult, probe: ValidationProbe, t_index: int) -> tuple[float, float]:
    """(raw v-space MSE, its ratio to the reference) of the probe at one timestep."""
    model = result.model
    x0 = to_model_range(probe.images)
    eps = probe.noise(0, x0.device)
    t = torch.full((x0.shape[0],), t_index, dtype=torch.long)
    alpha, sigma = model.schedule.alpha_sigma(t)
    x_t = alpha * x0 + sigma * eps
    out = model.net.eval()(x_t, model_time(t, model.schedule.T), probe.labels).float()
    x0_hat, eps_hat = to_x0_eps(model.prediction, out, x_t, alpha, sigma)
    raw = float(((alpha * eps_hat - sigma * x0_hat) - (alpha * eps - sigma * x0)).pow(2).mean())
    ref = float(reference_v_error(probe, x0, x_t, alpha, sigma).mean())
    return raw, raw / ref


def level_row(result: TrainResult, probe: ValidationProbe, level: float) -> dict[str, float]:
    """How much the raw error and its ratio to the reference move (largest of λ ± OFFSET, a fraction of
    the value at λ) at one level."""
    lam = result.model.schedule.log_snr
    at = {d: errors_at(result, probe, int(np.abs(lam - (level + d)).argmin())) for d in (-OFFSET, 0.0, OFFSET)}
    raw = max(abs(at[d][0] - at[0.0][0]) for d in (-OFFSET, OFFSET)) / at[0.0][0]
    rel = max(abs(at[d][1] - at[0.0][1]) for d in (-OFFSET, OFFSET)) / at[0.0][1]
    return {"level": level, "raw_error_moves": raw, "ratio_moves": rel}


def main() -> None:
    torch.set_num_threads(THREADS)
    data = load_data(DataConfig(**DATA))
    result = train(tiny_config(**TRAIN), data)
    probe = make_probe(data, **PROBE)
    rows = [level_row(result, probe, level) for level in probe.log_snrs]
    print(
        f"{DATA['source']} {DATA['image_size']} px, a model trained {TRAIN['kimg']} kimg at T={TRAIN['timesteps']} "
        f"({TRAIN['schedule']}); each level measured at λ and λ ± {OFFSET}"
    )
    print(f"{'level':>6} {'raw error moves':>16} {'ratio moves':>12}")
    for row in rows:
        print(f"{row['level']:+6.1f} {row['raw_error_moves']:16.1%} {row['ratio_moves']:12.1%}")
    raw_mean = statistics.fmean(r["raw_error_moves"] for r in rows)
    rel_mean = statistics.fmean(r["ratio_moves"] for r in rows)
    print(f"mean over levels: raw {raw_mean:.1%}, ratio {rel_mean:.1%} ({raw_mean / rel_mean:.1f}x less movement)")
    write_result("level_offset", {
        "data": DATA, "threads": THREADS, "offset": OFFSET, "train": TRAIN, "probe": PROBE, "rows": rows,
        "mean_raw_error_moves": raw_mean, "mean_ratio_moves": rel_mean, "raw_over_ratio": raw_mean / rel_mean,
    })  # fmt: skip


if __name__ == "__main__":
    main()
