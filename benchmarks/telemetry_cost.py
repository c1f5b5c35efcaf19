"""What writing TensorBoard telemetry costs a trial: the time spent inside the tracker's callbacks
(per-step loss, lr and gradient norm at every host sync; validation metrics and a sample grid at
each evaluation point; the final numbers and hparams), against the trial's training time. Timing
the callbacks themselves is robust to the noise of a shared machine; the peer is the same training
run without telemetry.

    .venv/bin/python -m benchmarks.telemetry_cost

Target: under 2 % of a trial.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.common import write_result
from hpo.files import JsonObject
from hpo.spec.loading import load_spec
from hpo.spec.spec import Spec, TrackingSettings
from hpo.tracking.base import RunInfo
from hpo.tracking.runs import open_runs
from hpo.training.data import load_data
from hpo.training.trainer import train

SPEC = Path(__file__).parent.parent / "search_spaces" / "digits.yaml"


def timed(fn: Callable[..., None], spent: list[float]) -> Callable[..., None]:
    def call(*args: Any) -> None:
        start = time.perf_counter()
        fn(*args)
        spent.append(time.perf_counter() - start)

    return call


def measure(spec: Spec) -> JsonObject:
    """Train the spec's first baseline without telemetry, then with TensorBoard; the figures, by name."""
    cfg = spec.train_config(dict(spec.baselines[0]))
    with tempfile.TemporaryDirectory() as tmp:
        data = load_data(spec.data)
        started = time.perf_counter()
        train(cfg, data)
        plain = time.perf_counter() - started
        runs = open_runs(
            TrackingSettings(tensorboard=True), RunInfo("bench", 0, spec.baselines[0]), tensorboard_dir=Path(tmp),
            local_dir=Path(tmp),
        )  # fmt: skip
        spent: list[float] = []
        grid = np.zeros((8 * 18, 8 * 18, 3), dtype=np.uint8)  # a 64-image grid of 16-px samples, as a trial logs
        started = time.perf_counter()
        result = train(
            cfg, data, on_sync=timed(runs.on_sync, spent), on_eval=lambda p, _m: timed(runs.on_eval, spent)(p, grid)
        )
        timed(runs.on_result, spent)({"fid": 1.0, "kid": 0.1}, {"samples/final": grid}, result.steps)
        timed(runs.close, spent)()
        tracked = time.perf_counter() - started
        size = sum(f.stat().st_size for f in Path(tmp).rglob("*") if f.is_file())
    telemetry = sum(spent)
    return {
        "baseline": dict(spec.baselines[0]), "steps": cfg.total_steps, "threads": torch.get_num_threads(),
        "plain_s": plain, "tracked_s": tracked, "telemetry_s": telemetry, "calls": len(spent),
        "written_kib": size / 1024, "telemetry_fraction": telemetry / tracked,
    }  # fmt: skip


def show(r: JsonObject) -> None:
    print(f"digits quickstart baseline: {r['steps']} steps, {r['threads']} threads")
    print(f"training without telemetry: {r['plain_s']:.1f} s; with TensorBoard: {r['tracked_s']:.1f} s")
    print(
        f"time inside the telemetry callbacks: {r['telemetry_s']:.3f} s over {r['calls']} calls, "
        f"{r['written_kib']:.0f} KiB written"
    )
    print(f"telemetry / training: {r['telemetry_fraction']:.2%} (target < 2 %)")


def main() -> None:
    torch.set_num_threads(2)
    result = measure(load_spec(SPEC))
    show(result)
    write_result("telemetry_cost", result)


if __name__ == "__main__":
    main()
