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

import optuna
import torch

from benchmarks.common import DIGITS, best_value, draw_configurations, quiet, run_study, spec_with, write_result
from hpo.records import TrialRecord
from hpo.scoring.score import make_scorer
from hpo.spec.spec import spec_from_dict
from hpo.training.data import load_data

N_TRIALS = 8


def warm_caches(cache: Path) -> None:
    spec = spec_from_dict({**DIGITS, "data": {**DIGITS["data"], "cache_dir": str(cache)}})
    data = load_data(spec.data)
    make_scorer(spec.score, data, device=torch.device("cpu"), cache_dir=cache / "scoring")


def study_row(label: str, study: optuna.Study, wall: float) -> dict[str, Any]:
    """One study's row: wall, training and scoring seconds, combinations scored per model, best FID."""
    trials = study.get_trials(deepcopy=False)
    return {
        "study": label,
        "wall_s": wall,
        "train_s": sum(TrialRecord.of(t).train_seconds for t in trials),
        "score_s": sum(TrialRecord.of(t).score_seconds for t in trials),
        "combos_per_model": sum(TrialRecord.of(t).combinations for t in trials) / len(trials),
        "best_fid": best_value(study),
    }


def print_table(rows: list[dict[str, Any]]) -> None:
    print(f"{N_TRIALS} trials each, digits 16 px, {torch.get_num_threads()} threads, no pruning")
    print(f"{'study':>20} {'wall s':>8} {'train s':>8} {'score s':>8} {'combos/model':>12} {'best FID':>9}")
    for r in rows:
        print(
            f"{r['study']:>20} {r['wall_s']:8.1f} {r['train_s']:8.1f} {r['score_s']:8.1f} "
            f"{r['combos_per_model']:12.1f} {r['best_fid']:9.4g}"
        )


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
            "steps": {"type": "categorical", "choices": [10, 20, 30]},
        },
        **common,
    )
    configs = draw_configurations(N_TRIALS)
    rng = random.Random(1)
    drawn = [{**c, "guidance_scale": rng.choice([1.0, 2.0, 3.0]), "steps": rng.choice([10, 20, 30])} for c in configs]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        warm_caches(Path(tmp) / "cache")  # the data and the feature classifier, once, outside both timings
        for label, raw, enqueue in (("searched as params", as_params, drawn), ("swept (3x3)", sweep, configs)):
            rows.append(study_row(label, *run_study(raw, Path(tmp) / label.split()[0], enqueue=enqueue)))
    print_table(rows)
    searched, swept = rows
    ratio = swept["wall_s"] / searched["wall_s"]
    combos = swept["combos_per_model"]
    print(f"cost ratio swept / searched: {ratio:.2f}x (target <= 1.5x), {combos:.0f}x the combinations per model")
    write_result("sweep_cost", {
        "trials": N_TRIALS, "dataset": DIGITS["data"]["source"], "image_size": DIGITS["data"]["image_size"],
        "threads": torch.get_num_threads(), "pruner": common["pruner"]["name"], "studies": rows,
        "cost_ratio": ratio, "combinations_factor": combos,
    })  # fmt: skip


if __name__ == "__main__":
    main()
