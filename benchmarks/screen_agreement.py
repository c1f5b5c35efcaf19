"""Does the sweep's screen pick the combination the full count would? Trained models, every sampling
combination scored at the screen count, at the full count and at twice the full count.

For each dataset (digits; coloured shapes; patches of two real photographs, scikit-learn's sample
images), ``--models`` configurations drawn from the quickstart's search space, with the learning rate
where its winners lie (3e-4 .. 3e-3: models good enough that guidance and steps trade fidelity
against diversity, which is where a screen can go wrong), are trained on its data, sampling and
budget settings (16 px, 16 kimg) with a narrower network (base_channels 16; on one thread a
quickstart-sized model took 650 s to train and sample here). Each model's 9 combinations (guidance 1/2/3 ×
DDIM 10/20/30, one noise and label set shared by all) draw 2 × full samples whose classifier
features are cached. Then, per
screening statistic (each on the first ``--screen`` samples, as the sweep computes it):

- Spearman ρ between its ranking of the 9 and the full count's (FID on the first ``full`` samples:
  what a trial's value is);
- how often its pick is the full count's best, and how often within the re-scoring noise of it:
  regret < 2 sd, sd that of a full-count difference between two combinations of the model, from two
  disjoint full-count sample sets (:func:`difference_sd`);
- the regret: full-count FID of the pick − the best full-count FID, in units of that sd.

A last row checks the full count against the truth (FID on all 2 × full samples). The goal: the
screen's pick within the noise of the best in ≥ 90 % of models on every dataset. "FID, PCA 16" is
the shipped default (``sampling.screen_by: pca``: a quarter of the screen count).

    .venv/bin/python -m benchmarks.screen_agreement [--datasets digits,shapes,photos] [--models 8]
    .venv/bin/python -m benchmarks.screen_agreement --datasets digits --width 32 --models 4  # the quickstart's net

Features are cached under /tmp/hpo-bench-cache/screen (resumable); with them cached, the tables take
seconds. ``--json FILE`` writes the tables too.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import spearmanr

from benchmarks.common import photo_folder, write_result
from hpo.analysis.noise import pair_sd
from hpo.files import JsonObject
from hpo.scoring.distance import Reference, frechet, frechet_pca, kid

CACHE = Path("/tmp/hpo-bench-cache/screen")
GUIDANCE = (1.0, 2.0, 3.0)
STEPS = (10, 20, 30)
SEEDS = {"digits": 1, "shapes": 2, "photos": 3}  # each dataset's draws of configurations
LR_EXPONENTS = (-3.5, -2.5)
Statistic = Callable[[np.ndarray, Reference], float]


def pca_frechet(k: int) -> Statistic:
    """FID in the reference's top-k principal components (well-posed once n > k)."""
    return lambda feats, ref: frechet_pca(feats, ref, k)


STATISTICS: dict[str, Statistic] = {
    "FID (today)": lambda f, r: frechet(f, r).value,
    "KID": kid,
    "FID, PCA 16 (default)": pca_frechet(16),
    "FID, PCA 8": pca_frechet(8),
}


# ---------------------------------------------------------------- measuring (cached per model)


def data_section(dataset: str, root: Path) -> JsonObject:
    if dataset == "photos":
        return {"source": "folder", "path": str(photo_folder(root))}
    return {"source": dataset}


def model_path(cache: Path, dataset: str, index: int, width: int) -> Path:
    """Where one model's features are cached (the width in the name: populations are not mixed)."""
    return cache / f"{dataset}-c{width}-16kimg-{index}.npz"


def measure_model(job: tuple[str, int, str, int, int]) -> tuple[str, int, float]:
    """Train model ``index`` of ``dataset`` and cache its 9 combinations' features (one thread)."""
    import torch
    import yaml

    from benchmarks.common import ROOT, draw_configurations
    from hpo.scoring.score import make_scorer, sample_features, score_labels
    from hpo.spec.sampling import SamplingConfig
    from hpo.spec.spec import spec_from_dict
    from hpo.training.data import load_data
    from hpo.training.trainer import TrainingAborted, train

    dataset, index, cache, total, width = job
    torch.set_num_threads(1)
    started = time.perf_counter()
    raw = yaml.safe_load((ROOT / "search_spaces" / "digits.yaml").read_text())
    raw["data"] = {**raw["data"], **data_section(dataset, Path(cache)), "cache_dir": cache}
    raw["score"] = {**raw["score"], "num_samples": total}
    raw["train"] = {**raw["train"], "base_channels": width}  # the quickstart's train section otherwise
    spec = spec_from_dict(raw)
    data = load_data(spec.data)
    scorer = make_scorer(spec.score, data, device=torch.device("cpu"), cache_dir=Path(cache) / "scoring")
    params = draw_configurations(index + 1, seed=SEEDS[dataset], lr_exponents=LR_EXPONENTS)[index]
    out = model_path(Path(cache), dataset, index, width)
    try:
        model = train(spec.train_config(params), data).model
    except TrainingAborted:
        np.savez(out, diverged=True, reference=scorer.reference.features)
        return dataset, index, time.perf_counter() - started
    labels = score_labels(scorer, model, data.class_frequencies(), seed=0)
    feats: dict[str, Any] = {}
    for w in GUIDANCE:
        for s in STEPS:
            combo = SamplingConfig(guidance_scale=w, steps=s, eta=0.0)
            feats[f"{w:g}/{s}"] = sample_features(scorer, model, combo, labels, start=0, n=total, seed=0).feats
    np.savez(out, reference=scorer.reference.features, params=json.dumps(params), **feats)
    return dataset, index, time.perf_counter() - started


def measure(datasets: Sequence[str], models: int, total: int, width: int, processes: int) -> None:
    CACHE.mkdir(parents=True, exist_ok=True)
    jobs = [
        (d, i, str(CACHE), total, width)
        for d in datasets
        for i in range(models)
        if not model_path(CACHE, d, i, width).exists()
    ]
    if not jobs:
        return
    for d in datasets:
        data_section(d, CACHE)  # the photo folder once, before the processes read it
    print(f"training and sampling {len(jobs)} models ({processes} processes, 1 thread each) ...", flush=True)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(processes) as pool:
        for done, (d, i, seconds) in enumerate(pool.imap_unordered(measure_model, jobs), 1):
            print(f"  {d} model {i}: {seconds:.0f} s ({done}/{len(jobs)})", flush=True)


# ---------------------------------------------------------------- the tables


@dataclass(frozen=True)
class Model:
    dataset: str
    index: int
    feats: dict[str, np.ndarray]  # combination label → (2·full, d) features
    reference: Reference


def load_models(dataset: str, models: int, width: int) -> list[Model]:
    out = []
    for i in range(models):
        with np.load(model_path(CACHE, dataset, i, width)) as blob:
            if "diverged" in blob.files:
                continue
            feats = {k: blob[k] for k in blob.files if "/" in k}
            out.append(Model(dataset, i, feats, Reference.of(blob["reference"])))
    return out


@dataclass(frozen=True)
class Agreement:
    rho: float
    best: bool  # the pick is the full count's best
    tied: bool  # the pick is within the tie margin of it
    regret_sd: float  # (full score of the pick − best full score) / sd


def agreement(ranked: dict[str, float], full: dict[str, float], sd: float, top: int = 1) -> Agreement:
    """How ``ranked`` (lower is better) agrees with ``full``; the pick is the best full score among
    its ``top`` best (the sweep completes ``rescore_top`` finalists)."""
    labels = sorted(full)
    rho = float(spearmanr([ranked[k] for k in labels], [full[k] for k in labels]).statistic)
    finalists = sorted(ranked, key=ranked.__getitem__)[:top]
    pick = min(finalists, key=full.__getitem__)
    best = min(full.values())
    regret = full[pick] - best
    return Agreement(rho, full[pick] == best, regret < 2 * sd, regret / sd if sd > 0 else 0.0)


def difference_sd(first: dict[str, float], second: dict[str, float]) -> float:
    """The standard deviation of the full-count difference between two combinations of one model:
    each pair of combinations differs by Δ on the first sample set and Δ' on the second (disjoint);
    |Δ − Δ'| / √2 estimates it, pooled (root mean square) over all pairs. Every combination shares
    its noise and labels, so this is far smaller than the sd of one score, and it is the noise that
    decides whether two combinations are told apart."""
    keys = sorted(first)
    deltas = [pair_sd(first[a] - first[b], second[a] - second[b]) for i, a in enumerate(keys) for b in keys[i + 1 :]]
    return math.sqrt(statistics.fmean(d * d for d in deltas))


def model_rows(model: Model, screen: int, full: int, top: int) -> dict[str, Agreement]:
    ref = model.reference
    first = {k: frechet(f[:full], ref).value for k, f in model.feats.items()}
    second = {k: frechet(f[full : 2 * full], ref).value for k, f in model.feats.items()}
    truth = {k: frechet(f, ref).value for k, f in model.feats.items()}
    sd = difference_sd(first, second)
    rows = {
        name: agreement({k: stat(f[:screen], ref) for k, f in model.feats.items()}, first, sd, top)
        for name, stat in STATISTICS.items()
    }
    rows[f"full count ({full}) vs truth ({2 * full})"] = agreement(first, truth, sd)
    return rows


def table(models: list[Model], screen: int, full: int, top: int) -> dict[str, dict[str, float]]:
    per_model = [model_rows(m, screen, full, top) for m in models]
    out = {}
    for name in per_model[0]:
        rows = [r[name] for r in per_model]
        out[name] = {
            "models": len(rows),
            "spearman": statistics.fmean(r.rho for r in rows),
            "best": sum(r.best for r in rows) / len(rows),
            "within_noise": sum(r.tied for r in rows) / len(rows),
            "regret_sd_mean": statistics.fmean(r.regret_sd for r in rows),
            "regret_sd_max": max(r.regret_sd for r in rows),
        }
    return out


def print_table(dataset: str, rows: dict[str, dict[str, float]], screen: int, full: int, top: int) -> None:
    n = int(next(iter(rows.values()))["models"])
    print(f"\n{dataset}: {n} trained models, screen {screen} samples, full {full}, rescore_top {top}")
    print(f"{'statistic':>34} {'Spearman':>8} {'pick=best':>9} {'in noise':>8} {'regret/sd':>9} {'max':>6}")
    for name, r in rows.items():
        print(
            f"{name:>34} {r['spearman']:8.2f} {r['best']:9.0%} {r['within_noise']:8.0%} "
            f"{r['regret_sd_mean']:9.2f} {r['regret_sd_max']:6.1f}"
        )


def across_models(models: list[Model], count: int = 128, combo: str = "2/10") -> JsonObject:
    """The tabular benchmark's statistic (``benchmarks/tabular.py``: classifier-FID of 128 samples at
    guidance 2, 10 DDIM steps, compared across trained models) against FID of all the samples:
    Spearman over the models, with and without the PCA projection."""
    truth = [frechet(m.feats[combo], m.reference).value for m in models]
    plain = [frechet(m.feats[combo][:count], m.reference).value for m in models]
    pca = [frechet_pca(m.feats[combo][:count], m.reference, count // 4) for m in models]
    return {
        "models": len(models),
        "samples": count,
        "combination": combo,
        "spearman_fid": float(spearmanr(plain, truth).statistic),
        "spearman_pca": float(spearmanr(pca, truth).statistic),
        "same_best_fid": float(np.argmin(plain) == np.argmin(truth)),
        "same_best_pca": float(np.argmin(pca) == np.argmin(truth)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default="digits,shapes,photos")
    parser.add_argument("--models", type=int, default=8)
    parser.add_argument("--width", type=int, default=16, help="base_channels (the quickstart's network: 32)")
    parser.add_argument("--screen", type=int, default=64)
    parser.add_argument("--full", type=int, default=256)
    parser.add_argument("--rescore-top", type=int, default=1)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    datasets = args.datasets.split(",")
    started = time.perf_counter()
    measure(datasets, args.models, 2 * args.full, args.width, args.processes)
    results = {}
    tables = []
    for d in datasets:
        name = f"{d}, base_channels {args.width}"
        models = load_models(d, args.models, args.width)
        rows = table(models, args.screen, args.full, args.rescore_top)
        print_table(name, rows, args.screen, args.full, args.rescore_top)
        across = across_models(models)
        results[name] = {**rows, "across models (tabular's 128 samples)": across}
        tables.append({"dataset": d, "rows": [{"statistic": k, **r} for k, r in rows.items()], "across_models": across})
        print(
            f"  across its {across['models']} models (guidance 2, 10 steps; the tabular benchmark's statistic): "
            f"Spearman vs FID of {2 * args.full}: FID of 128 {across['spearman_fid']:.2f}, PCA-32 of 128 "
            f"{across['spearman_pca']:.2f}; same best model: {across['same_best_fid']:.0f} / "
            f"{across['same_best_pca']:.0f}"
        )
    seconds = time.perf_counter() - started
    print(f"\n{seconds:.0f} s in all ({os.cpu_count()} cores)")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    write_result("screen_agreement", {
        "datasets": datasets, "models": args.models, "width": args.width, "screen": args.screen, "full": args.full,
        "rescore_top": args.rescore_top, "processes": args.processes, "tables": tables, "seconds": seconds,
    })  # fmt: skip


if __name__ == "__main__":
    main()
