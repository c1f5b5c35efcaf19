"""A tabular benchmark of the digits search space, measured for real once and then queried for free.

Every categorical combination of the quickstart's search space (batch size × T × schedule: 36) is
trained at ``LR_EXPONENTS`` learning rates on 8 px images with a small UNet for ``kimg`` thousand
images, with the pruning metric (``val_rel``) measured at ``POINTS`` evenly spaced points on the way,
then scored: classifier-FID of 128 DDIM samples. A study replays a ``View`` of those points: the 4
even ones a spec's default ``num_evals: 4`` reports (4/16, 8/16, 12/16, 16/16), the doubling ones of
``eval_spacing: doubling`` (1/16, 1/8, 1/4, 1/2, 1), or any other subset a spec can ask for. A
query at any learning rate interpolates the score linearly in log10(lr) between the two measured
neighbours of the same combination, so samplers see a continuous space (the HPOBench / NAS-Bench
approach: many sampler seeds at no training cost).
The seed-to-seed spread (training and sampling seed) of the best cells is measured too, so every
difference between samplers or pruners can be read against it.

Built by ``sampler_efficiency.py``, ``pruning_replay.py`` or ``parallel_search.py`` on first use (two processes, one
core each) and cached as JSON beside the other benchmark caches; an interrupted build resumes.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import multiprocessing
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from hpo.spec.rules import EvalSpacing, eval_fractions

LR_EXPONENTS = (-4.0, -3.5, -3.0, -2.5, -2.0, -1.5)  # the quickstart's lr range, 1e-4 .. 3e-2, every half decade
BATCH_SIZES = (32, 64, 128)
TIMESTEPS = (100, 250, 500, 1000)
Schedule = Literal["linear", "cosine", "sigmoid"]
SCHEDULES: tuple[Schedule, ...] = ("linear", "cosine", "sigmoid")
POINTS = 16  # measured points of the pruning metric: at 1/16, 2/16, ..., 16/16 of the budget
NUM_EVALS = 4  # the default view: a spec's num_evals: 4, even spacing
REPLICATE_SEEDS = (1, 2)
REPLICATED_CELLS = 4  # the best cells, retrained with each replicate seed
DIVERGED = math.inf

Cell = tuple[float, int, int, Schedule]  # lr exponent, batch size, T, schedule


def cell_key(cell: Cell) -> str:
    return f"{cell[0]:+.1f}/{cell[1]}/{cell[2]}/{cell[3]}"


def all_cells() -> list[Cell]:
    return list(itertools.product(LR_EXPONENTS, BATCH_SIZES, TIMESTEPS, SCHEDULES))


@dataclass(frozen=True)
class Measured:
    score: float  # classifier-FID at the end; inf when training diverged
    curve: tuple[float, ...]  # the pruning metric at points 1..POINTS (shorter if it diverged there)

    def seen(self, view: View) -> Measured:
        """The run as a study with ``view``'s evaluation points sees it (a diverged run: the points
        it reached)."""
        return Measured(self.score, tuple(self.curve[i - 1] for i in view.indices if i <= len(self.curve)))

    def share_trained(self, points_seen: int, view: View) -> float:
        """The share of the budget a run trained when it stopped after ``points_seen`` of ``view``'s
        points: pruned there, complete, or diverged (it stops at the step its loss blew up, here
        taken as the measured point after its last finite one)."""
        if len(self.curve) < POINTS and points_seen >= len(self.seen(view).curve):
            return min(1.0, (len(self.curve) + 1) / POINTS)
        return view.indices[points_seen - 1] / POINTS if points_seen else 0.0


@dataclass(frozen=True)
class View:
    """A spec's evaluation points as a subset of the table's measured ones."""

    num_evals: int
    spacing: EvalSpacing = "even"

    @property
    def fractions(self) -> tuple[float, ...]:
        """The spec's evaluation points as shares of the budget."""
        return eval_fractions(self.num_evals, self.spacing)

    @property
    def indices(self) -> tuple[int, ...]:
        """1-based measured points (k/POINTS) at the spec's fractions of the budget."""
        fractions = self.fractions
        if any(abs(f * POINTS - round(f * POINTS)) > 1e-9 for f in fractions):
            raise ValueError(f"{self.label}: its points are not among the table's {POINTS}")
        return tuple(round(f * POINTS) for f in fractions)

    @property
    def label(self) -> str:
        return f"{self.num_evals} {self.spacing}"


@dataclass(frozen=True)
class Table:
    dataset: str
    kimg: float
    cells: dict[str, Measured]
    replicates: dict[str, list[float]]  # cell key -> scores with seeds 0, 1, 2
    seconds: float  # training and scoring time the table cost

    @property
    def seed_sd(self) -> float:
        """Pooled seed-to-seed standard deviation of the score over the replicated cells."""
        groups = [v for v in self.replicates.values() if all(math.isfinite(x) for x in v)]
        return math.sqrt(statistics.mean(statistics.variance(v) for v in groups)) if groups else math.nan

    def _neighbours(self, lr: float, rest: tuple[int, int, Schedule]) -> tuple[Measured, Measured, float]:
        """The measured cells either side of ``lr`` (log10) and the weight of the upper one."""
        x = min(max(math.log10(lr), LR_EXPONENTS[0]), LR_EXPONENTS[-1])
        hi = next(i for i, e in enumerate(LR_EXPONENTS) if e >= x - 1e-12)
        lo = max(hi - 1, 0)
        a = self.cells[cell_key((LR_EXPONENTS[lo], *rest))]
        b = self.cells[cell_key((LR_EXPONENTS[hi], *rest))]
        w = 0.0 if lo == hi else (x - LR_EXPONENTS[lo]) / (LR_EXPONENTS[hi] - LR_EXPONENTS[lo])
        return a, b, w

    def score(self, lr: float, batch_size: int, timesteps: int, schedule: Schedule) -> float:
        """The score at any lr inside the range: linear in log10(lr) between the measured neighbours;
        inf if either neighbour diverged (a run between a diverging and a training lr is not trusted)."""
        a, b, w = self._neighbours(lr, (batch_size, timesteps, schedule))
        if w == 0.0:
            return a.score
        return a.score + w * (b.score - a.score) if math.isfinite(a.score) and math.isfinite(b.score) else DIVERGED

    def curve(self, lr: float, batch_size: int, timesteps: int, schedule: Schedule) -> tuple[float, ...]:
        """The pruning metric's curve, interpolated the same way; as far as both neighbours reached."""
        a, b, w = self._neighbours(lr, (batch_size, timesteps, schedule))
        return tuple(x + w * (y - x) for x, y in zip(a.curve, b.curve, strict=False))

    def at(self, params: dict[str, Any]) -> Measured:
        """The (interpolated) run of a trial's parameters."""
        key = (params["lr"], params["batch_size"], params["timesteps"], params["schedule"])
        return Measured(self.score(*key), self.curve(*key))

    def best(self) -> float:
        return min(m.score for m in self.cells.values())

    def quantile(self, q: float) -> float:
        return float(np.quantile([m.score for m in self.cells.values() if math.isfinite(m.score)], q))


def replay_trial(study: Any, trial: Any, m: Measured, num_evals: int = NUM_EVALS) -> tuple[float, int]:
    """Report ``m``'s curve (``num_evals`` points when complete) point by point to the study's
    pruner, as a worker does, then tell its score: (the score, or inf when pruned or diverged;
    evaluation points trained). A shorter curve is a run that diverged there: the objective prunes it."""
    from optuna.trial import TrialState

    for k, point in enumerate(m.curve, 1):
        trial.report(point, step=k)
        if trial.should_prune():
            study.tell(trial, state=TrialState.PRUNED)
            return math.inf, k
    if math.isfinite(m.score) and len(m.curve) == num_evals:
        study.tell(trial, m.score)
        return m.score, len(m.curve)
    study.tell(trial, state=TrialState.PRUNED)
    return math.inf, len(m.curve)


def replay_rung(spec: Any, trials: list[Measured], name: str) -> list[tuple[int, float]]:
    """pruner: rung (``spec``'s) through the service's own pause and decision (``service/rung.py``):
    each of ``trials`` (already seen at the spec's points) reported up to the rung, where it pauses;
    the decision; each continuation reports its whole curve (the points before the rung replayed from
    its checkpoint, at no cost) and its score. Per trial, in order: (evaluation points trained, the
    score or inf when stopped)."""
    import optuna
    from optuna.trial import TrialState

    from hpo.records import BASELINE_ATTR, TrialRecord
    from hpo.service.pruning import make_pruner
    from hpo.service.rung import decide
    from hpo.service.trials import PAUSED, mark_ended

    study = optuna.create_study(study_name=name, pruner=make_pruner(spec))
    out: list[tuple[int, float]] = []
    for i, m in enumerate(trials):
        trial = study.ask()
        if i == 0:
            trial.set_user_attr(BASELINE_ATTR, True)
        k = 0
        for k, point in enumerate(m.curve, 1):
            trial.report(point, step=k)
            if trial.should_prune():
                mark_ended(trial, PAUSED)
                break
        study.tell(trial, state=TrialState.PRUNED)  # paused, or diverged before the rung
        out.append((k, math.inf))
    decide(study, spec, study.get_trials(deepcopy=False))
    for waiting in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        i = TrialRecord.of(waiting).continues or 0
        value, points = replay_trial(study, study.ask(), trials[i], spec.train.num_evals)
        out[i] = (points, value)
    return out


def _measure(job: tuple[str, float, Cell, int, str]) -> tuple[str, int, Measured, float]:
    """One training run and its score, in a worker process with one thread."""
    import torch

    from hpo.records import PRUNING_METRIC
    from hpo.scoring.progress import ProgressProbe
    from hpo.scoring.score import make_scorer
    from hpo.spec.config import DataConfig, ScoreConfig, TrainConfig
    from hpo.spec.sampling import SamplingConfig
    from hpo.training.data import load_data
    from hpo.training.trainer import EvalPoint, TrainingAborted, train

    dataset, kimg, cell, seed, cache = job
    torch.set_num_threads(1)
    started = time.perf_counter()
    data = load_data(DataConfig(source=dataset, image_size=8, cache_dir=cache))
    scorer = make_scorer(
        ScoreConfig(features="classifier", num_samples=128, batch_size=128), data,
        device=torch.device("cpu"), cache_dir=Path(cache) / "scoring",
    )  # fmt: skip
    probe = ProgressProbe(scorer, data)
    exp, batch, timesteps, schedule = cell
    cfg = TrainConfig(
        base_channels=16, channel_mult=(1, 2), num_res_blocks=1, dropout=0.0, device="cpu", val_images=64,
        lr=10**exp, batch_size=batch, timesteps=timesteps, schedule=schedule, kimg=kimg, num_evals=POINTS,
        warmup_kimg=0.25, lr_schedule="cosine", conditional=True, p_uncond=0.1, seed=seed,
    )  # fmt: skip
    curve: list[float] = []

    def on_eval(point: EvalPoint, ema: Any) -> None:
        curve.append(point.metrics[PRUNING_METRIC])

    score = DIVERGED
    with contextlib.suppress(TrainingAborted):
        model = train(cfg, data, on_eval=on_eval).model
        value = probe.measure(
            model,
            SamplingConfig(guidance_scale=2.0, steps=10, eta=0.0),
            class_frequencies=data.class_frequencies(),
            seed=seed,
        ).score
        score = value if math.isfinite(value) else DIVERGED
    return cell_key(cell), seed, Measured(score, tuple(curve)), time.perf_counter() - started


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {"cells": {}, "seeded": {}, "seconds": 0.0}


def _save(path: Path, raw: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(raw))
    os.replace(tmp, path)


def _run(jobs: list[tuple[str, float, Cell, int, str]], processes: int) -> Any:
    """Measure ``jobs`` in ``processes`` one-thread processes (none started when the cache has all)."""
    if not jobs:
        return
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(processes) as pool:
        yield from pool.imap_unordered(_measure, jobs)


def build(dataset: str, kimg: float, cache: Path, *, processes: int = 2) -> Table:
    """The table of ``dataset`` at ``kimg``, measured where the cache lacks it."""
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"table-{dataset}-{kimg:g}kimg-{POINTS}points.json"
    raw = _load(path)
    todo = [(dataset, kimg, c, 0, str(cache)) for c in all_cells() if cell_key(c) not in raw["cells"]]
    if todo:
        print(f"measuring {len(todo)} of {len(all_cells())} {dataset} cells ({processes} processes) ...", flush=True)
    for done, (key, _, m, seconds) in enumerate(_run(todo, processes), 1):
        raw["cells"][key] = {"score": m.score, "curve": list(m.curve)}
        raw["seconds"] += seconds
        if done % 12 == 0 or done == len(todo):
            _save(path, raw)
            print(f"  {dataset}: {done}/{len(todo)} cells", flush=True)
    ranked = sorted(raw["cells"], key=lambda k: raw["cells"][k]["score"])[:REPLICATED_CELLS]
    cells = {k: c for c in all_cells() if (k := cell_key(c)) in ranked}
    seeded: dict[str, dict[str, float]] = raw.setdefault("seeded", {})  # cell key -> seed -> score
    todo = [(dataset, kimg, cells[k], s, str(cache)) for k in ranked for s in REPLICATE_SEEDS
            if str(s) not in seeded.get(k, {})]  # fmt: skip
    for key, seed, m, seconds in _run(todo, processes):
        seeded.setdefault(key, {})[str(seed)] = m.score
        raw["seconds"] += seconds
    raw["replicates"] = {k: [raw["cells"][k]["score"], *(seeded[k][str(s)] for s in REPLICATE_SEEDS)] for k in ranked}
    _save(path, raw)
    cells_m = {k: Measured(float(v["score"]), tuple(v["curve"])) for k, v in raw["cells"].items()}
    return Table(dataset, kimg, cells_m, raw["replicates"], raw["seconds"])


def add_table_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every benchmark that queries the tables takes: which tables, and where they are cached."""
    parser.add_argument("--kimg", type=float, default=4.0)
    parser.add_argument("--datasets", default="digits,shapes")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/hpo-bench-cache"))


def tables_of(args: argparse.Namespace) -> list[Table]:
    """The tables ``add_table_arguments``' options name, measured where the cache lacks them."""
    return [build(name, args.kimg, args.cache) for name in args.datasets.split(",")]
