"""What sampling sweeps cost: a study that scores every trained model at 3 guidance × 3 DDIM-step
combinations (screened on 64 samples, the best re-scored on 256), against the same study that
searches guidance and DDIM steps as trial parameters (one combination per training run). Both train
the same 8 configurations (enqueued), on the digits quickstart settings, without pruning.

    .venv/bin/python -m benchmarks.sweep_cost

Target: the sweep study costs at most 1.5× the other while covering 9× the combinations per model.
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import DIGITS, best_value, draw_configurations, quiet, run_study, spec_with
from hpo.scoring.score import make_scorer
from hpo.spec.spec import spec_from_dict
from hpo.training.data import load_data

N_TRIALS = 8


def warm_caches(cache: Path) -> None:
    spec = spec_from_dict({**DIGITS, "data": {**DIGITS["data"], "cache_dir": str(cache)}})
    data = load_data(spec.data)
    make_scorer(spec.score, data, device=torch.device("cpu"), cache_dir=cache / "scoring")


def main() -> None:
    quiet()
    torch.set_num_threads(2)
    study = {**DIGITS["study"], "n_trials": N_TRIALS}
    common: dict[str, Any] = {"pruner": {"name": "none"}, "sampler": {"name": "random", "seed": 0}, "baselines": []}
    sweep = spec_with(DIGITS, study={**study, "name": "sweep"}, **common)
    as_params = spec_with(
        DIGITS,
        study={**study, "name": "params"},
        sampling={},
        search={
            **DIGITS["search"],
            "guidance_scale": {"type": "categorical", "choices": [1.0, 2.0, 3.0]},
            "ddim_steps": {"type": "categorical", "choices": [10, 20, 30]},
        },
        **common,
    )
    configs = draw_configurations(N_TRIALS)
    rng = random.Random(1)
    drawn = [
        {**c, "guidance_scale": rng.choice([1.0, 2.0, 3.0]), "ddim_steps": rng.choice([10, 20, 30])} for c in configs
    ]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        warm_caches(Path(tmp) / "cache")  # the data and the feature classifier, once, outside both timings
        for label, raw, enqueue in (("searched as params", as_params, drawn), ("swept (3x3)", sweep, configs)):
            study_obj, wall = run_study(raw, Path(tmp) / label.split()[0], enqueue=enqueue)
            trials = study_obj.get_trials(deepcopy=False)
            train = sum(float(t.user_attrs.get("train_seconds", 0)) for t in trials)
            score = sum(float(t.user_attrs.get("score_seconds", 0)) for t in trials)
            combos = sum(int(t.user_attrs.get("combinations", 0)) for t in trials) / len(trials)
            rows.append((label, wall, train, score, combos, best_value(study_obj)))
    print(f"{N_TRIALS} trials each, digits 16 px, {torch.get_num_threads()} threads, no pruning")
    print(f"{'study':>20} {'wall s':>8} {'train s':>8} {'score s':>8} {'combos/model':>12} {'best FID':>9}")
    for label, wall, train, score, combos, best in rows:
        print(f"{label:>20} {wall:8.1f} {train:8.1f} {score:8.1f} {combos:12.1f} {best:9.4g}")
    (_, wall_a, *_), (_, wall_b, _, _, combos_b, _) = rows
    ratio = wall_b / wall_a
    print(f"cost ratio swept / searched: {ratio:.2f}x (target <= 1.5x), {combos_b:.0f}x the combinations per model")


if __name__ == "__main__":
    main()
