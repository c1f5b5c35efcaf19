"""Does a trial's sampling sweep report what its weights reach? Judged against an unbiased count,
on good models.

For every model of :mod:`benchmarks.good_models` (3 datasets, the quickstart's network trained for
32 kimg, shapes 128), each of the 11 combinations of ``COMBOS`` (the quickstart's guidance 1/2/3 ×
DDIM 10/20/30, and guidance 0.5 and 4 at 30 steps; shapes also 6, 8 and 12, ``FURTHER``; one noise and
label set for all) draws ``TOTAL`` = 2 048 samples whose classifier features are cached.

Truth, per combination: FID∞ (Chong & Forsyth, CVPR 2020): FID at counts evenly spaced in 1/n from
512 to 2 048 (each the mean over random subsets), a line in 1/n, its intercept. Each sweep rule is
then replayed on the same samples — a screen on the first 64, finalists completed to 256, and so on,
exactly as :func:`hpo.scoring.sweep.run_sweep` draws them — and judged by

- right: the rule's pick within 2 sd of truth's best, sd the noise of a *difference* between two
  combinations scored on the same samples (truth from the two disjoint halves, :func:`truth_sd`),
  floored at 2 % of the best value (:func:`tolerance`). The noise that decides which of two
  combinations is better is that of their difference; one value's spread over fresh sample noise
  (1.5–3 on photos at 256 samples) is 5–20× larger and once passed picks 24 % worse than the best;
- regret: truth(pick) − truth(best), in % of truth(best);
- ρ: Spearman between the rule's ranking of the combinations and truth's;
- across models: Spearman between the trial values the rule reports and the models' truth (the best
  truth of each).

    .venv/bin/python -m benchmarks.sweep_truth              # train + sample what is missing, then the tables
    .venv/bin/python -m benchmarks.sweep_truth --measure    # only train and sample (start one per free core)
    benchmarks/sweep_truth_parallel.sh 14 270 --device cuda --models 10   # on a GPU, 14 processes
    .venv/bin/python -m benchmarks.sweep_truth --measure --resample --models 8  # good models judged elsewhere
    .venv/bin/python -m benchmarks.sweep_truth --truth-agreement --models 12  # truth against itself, across models

Weights and features are cached under /tmp/hpo-bench-cache/good-models (resumable, shareable by
processes); each model's judged record (truth, noise, every rule's pick and value) is kept in
``benchmarks/results/sweep_truth/MODEL.json``, so the tables survive the cache and a record is only
re-judged (from cached features) when a rule it lacks is asked for.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import spearmanr

from benchmarks.claims import unclaimed
from benchmarks.common import RESULTS, write_result
from benchmarks.good_models import CACHE, DATASETS, MODELS, ModelKey, keys, load_model, model_spec, train_model
from hpo.analysis.frontier import Screened, finalists
from hpo.analysis.noise import halves_difference_sd
from hpo.scoring.distance import Reference, frechet, frechet_pca, kid
from hpo.spec.counts import pca_dims

TOTAL = 2048
GUIDANCE = (1.0, 2.0, 3.0)
STEPS = (10, 20, 30)
# The quickstart's grid and an edge on each side at 30 steps: a model whose best is guidance 3 is
# inside the grid only if guidance 4 is worse, one whose best is 1 only if 0.5 (towards the
# unconditional model) is (steps: more is better, the last is the edge a good model sits at).
COMBOS = ((0.5, 30), *((w, s) for w in GUIDANCE for s in STEPS), (4.0, 30))
# Where a dataset's models are still best at guidance 4 (five of six shapes models at 128 kimg, on the
# H200), its grid reaches further at 30 steps, so that a good model's best lies inside it (with 6 and 8
# alone, one of the first two shapes models measured on CPU was best at 8).
FURTHER = {"shapes": (6.0, 8.0, 12.0)}


def combos(dataset: str) -> tuple[tuple[float, int], ...]:
    """``dataset``'s grid: COMBOS and its further guidance edges."""
    return (*COMBOS, *((w, 30) for w in FURTHER.get(dataset, ())))


RECORDS = RESULTS / "sweep_truth"


def combo_label(w: float, steps: int) -> str:
    return f"{w:g}/{steps}"


def features_path(key: ModelKey, cache: Path = CACHE) -> Path:
    return cache / f"{key.name}-truth{TOTAL}.npz"


def measure_model(key: ModelKey, cache: Path = CACHE, device: str = "cpu") -> None:
    """Train (or load) ``key`` and cache each combination's features of TOTAL samples (only the
    combinations the cache lacks are sampled: a grid that grew costs its new combinations alone)."""
    import torch

    from hpo.scoring.score import make_scorer, sample_features, score_labels
    from hpo.spec.sampling import SamplingConfig
    from hpo.spec.spec import spec_from_dict

    started = time.perf_counter()
    train_model(key, cache, device)
    trained = time.perf_counter()
    model, _, data = load_model(key, cache, device)
    spec = spec_from_dict(model_spec(key.dataset, num_samples=TOTAL, cache=cache, device=device))
    scorer = make_scorer(spec.score, data, device=torch.device(device), cache_dir=cache / "scoring")
    out: dict[str, Any] = {"reference": scorer.reference.features}
    if features_path(key, cache).exists():
        with np.load(features_path(key, cache)) as blob:
            out.update({k: blob[k] for k in blob.files})
    out.update({k: v for k, v in frontier_features(key, cache).items() if k not in out})
    if model is None:
        out["diverged"] = True
    else:
        labels = score_labels(scorer, model, data.class_frequencies(), seed=0)
        for w, s in combos(key.dataset):
            if combo_label(w, s) not in out:
                combo = SamplingConfig(guidance_scale=w, steps=s, eta=0.0)
                feats = sample_features(scorer, model, combo, labels, start=0, n=TOTAL, seed=0).feats
                out[combo_label(w, s)] = feats.astype(np.float32)
    tmp = features_path(key, cache).with_suffix(".tmp.npz")
    np.savez(tmp, **out)
    tmp.replace(features_path(key, cache))
    sampled = time.perf_counter() - trained
    print(f"  {key.name}: trained in {trained - started:.0f} s, sampled in {sampled:.0f} s", flush=True)


def shared_labels(dataset: str) -> dict[str, str]:
    """The combinations this grid shares with :mod:`benchmarks.sampler_frontier` (DDIM guided
    everywhere; both draw the same labels, seed and count, so sample i is the same image in both:
    checked equal to the bit on shapes-6): the frontier's label → this script's."""
    return {f"ddim/{w:g}/{s}": combo_label(w, s) for w, s in combos(dataset)}


def frontier_features(key: ModelKey, cache: Path) -> dict[str, np.ndarray]:
    """The grid's combinations that :mod:`benchmarks.sampler_frontier` already sampled for ``key``,
    under this script's labels."""
    from benchmarks.sampler_frontier import features_path as frontier_path

    path = frontier_path(key, TOTAL, cache)
    if not path.exists():
        return {}
    wanted = shared_labels(key.dataset)
    with np.load(path) as blob:
        return {wanted[k]: blob[k] for k in blob.files if k in wanted}


def record_path(key: ModelKey) -> Path:
    return RECORDS / f"{key.name}.json"


def measured(key: ModelKey, cache: Path = CACHE) -> bool:
    """Judged already (a record: a rule added since is judged on the models whose features are
    cached, see :func:`load_measured`), or every combination of the grid is cached (or the run
    diverged)."""
    return record_path(key).exists() or features_cached(key, cache)


def features_cached(key: ModelKey, cache: Path = CACHE) -> bool:
    if not features_path(key, cache).exists():
        return False
    with np.load(features_path(key, cache)) as blob:
        return "diverged" in blob.files or all(combo_label(w, s) in blob.files for w, s in combos(key.dataset))


def measure(
    datasets: tuple[str, ...],
    models: int,
    cache: Path = CACHE,
    device: str = "cpu",
    *,
    resample: bool = False,
    only: Sequence[str] | None = None,
) -> None:
    """Train and sample what is missing. ``resample``: also the good models that were judged where
    their features were not kept (a GPU session sends back only records), so that a rule added since
    can be judged on them; their weights are trained again where they are not cached either."""
    import torch

    torch.set_num_threads(1)
    cache.mkdir(parents=True, exist_ok=True)
    todo = keys(datasets, models)
    if only is not None:
        todo = sorted((k for k in todo if k.name in only), key=lambda k: list(only).index(k.name))
    if resample:
        todo = [k for k in todo if (r := read_record(k)) is None or r.inside]
    done = (lambda k: features_cached(k, cache)) if resample else (lambda k: measured(k, cache))
    for key in unclaimed(todo, done=done, claim_path=lambda k: cache / f"{k.name}.claim"):
        measure_model(key, cache, device)
        model = load_features(key, cache)
        if model is not None:
            write_record(measure_truth(model))


# ---------------------------------------------------------------- statistics and truth

Statistic = Callable[[np.ndarray, Reference], float]


def fid(feats: np.ndarray, ref: Reference) -> float:
    return frechet(feats, ref).value


def pca(feats: np.ndarray, ref: Reference) -> float:
    return frechet_pca(feats, ref, pca_dims(feats.shape[0], ref.dim))


def extrapolated(smallest: float, points: int = 6, draws: int = 4) -> Statistic:
    """FID∞ from the n samples given: FID at ``points`` counts evenly spaced in 1/n from
    ``smallest``·n to n (the mean over ``draws`` random subsets each), a least-squares line in 1/n,
    its intercept (Chong & Forsyth 2020)."""

    def statistic(feats: np.ndarray, ref: Reference) -> float:
        n = feats.shape[0]
        rng = np.random.default_rng(0)
        inverse = np.linspace(1 / (smallest * n), 1 / n, points)
        counts = sorted({round(1 / x) for x in inverse})
        means = []
        for m in counts:
            reps = 1 if m >= n else draws
            means.append(statistics.fmean(fid(feats[rng.choice(n, m, replace=False)], ref) for _ in range(reps)))
        _slope, intercept = np.polyfit([1 / m for m in counts], means, 1)
        return float(intercept)

    return statistic


def richardson(feats: np.ndarray, ref: Reference, draws: int = 8) -> float:
    """2·FID(n) − FID(n/2) (mean over random halves): the 1/n bias cancelled between two counts."""
    n = feats.shape[0]
    rng = np.random.default_rng(0)
    half = statistics.fmean(fid(feats[rng.choice(n, n // 2, replace=False)], ref) for _ in range(draws))
    return 2 * fid(feats, ref) - half


def bootstrap(feats: np.ndarray, ref: Reference, draws: int = 16) -> float:
    """FID with its finite-count bias removed by a parametric bootstrap: the bias of FID at n for a
    Gaussian with the samples' own mean and covariance (the plug-in value is that Gaussian's exact
    FID), subtracted: 2·FID(n) − mean FID(n Gaussian draws)."""
    n = feats.shape[0]
    rng = np.random.default_rng(0)
    mu = feats.mean(axis=0)
    centred = feats - mu
    simulated = [fid(mu + rng.standard_normal((n, n)) @ centred / math.sqrt(n - 1), ref) for _ in range(draws)]
    return 2 * fid(feats, ref) - statistics.fmean(simulated)


STATISTICS: dict[str, Statistic] = {
    "boot": bootstrap,
    "fid": fid,
    "pca": pca,
    "kid": kid,
    "fid_inf": extrapolated(0.5),
    "richardson": richardson,
}
TRUTH = extrapolated(0.25, points=8, draws=3)  # 512 .. 2 048 samples


# ---------------------------------------------------------------- the rules


@dataclass(frozen=True)
class Stage:
    statistic: str  # ranks the combinations still in
    count: int  # on the first `count` samples of each
    keep: int  # how many go on ...
    sweep: bool = False  # ... and, as the sweep does, each guidance scale's best and the frontier (finalists)


def guidance_of(label: str) -> float:
    return float(label.split("/")[0])


def nfe_of(label: str) -> int:
    """Network evaluations per sample: steps, twice under guidance."""
    w, steps = label.split("/")
    return int(steps) * (1 if float(w) == 1 else 2)


@dataclass(frozen=True)
class Rule:
    name: str
    stages: tuple[Stage, ...]  # the last keeps 1: the pick
    value: str  # the statistic the trial reports, on the pick's samples ...
    value_count: int  # ... the first this many

    def run(self, feats: dict[str, np.ndarray], ref: Reference) -> tuple[str, float]:
        """(the pick, the trial's value)."""
        alive = list(feats)
        for stage in self.stages:
            stat = STATISTICS[stage.statistic]
            values = {k: stat(feats[k][: stage.count], ref) for k in alive}
            if stage.sweep:
                alive = finalists([Screened(k, guidance_of(k), nfe_of(k), v) for k, v in values.items()], stage.keep)
            else:
                alive = sorted(alive, key=values.__getitem__)[: stage.keep]
        pick = alive[0]
        return pick, STATISTICS[self.value](feats[pick][: self.value_count], ref)

    def cost(self) -> float:
        """Sampling cost in network evaluations per trial (samples × steps × 2 under guidance), for
        the grid's combinations taken in the worst case (every finalist is the most expensive)."""
        nfe = sorted((nfe_of(combo_label(w, s)) for w, s in COMBOS), reverse=True)
        drawn, alive = [0] * len(nfe), len(nfe)
        for stage in self.stages:
            for i in range(alive):
                drawn[i] = max(drawn[i], stage.count)
            # the sweep's finalists at most: its best few, one per guidance scale, one per cheaper cost
            extra = len({w for w, _ in COMBOS}) + len(set(nfe)) - 1 if stage.sweep else 0
            alive = min(alive, stage.keep + extra)
        drawn[0] = max(drawn[0], self.value_count)
        return float(sum(d * c for d, c in zip(drawn, nfe, strict=True)))


def screen(by: str, top: int, full: int = 256, value: str = "fid", value_count: int | None = None) -> Rule:
    """Screen on 64 by ``by``, complete the best ``top`` to ``full`` and keep the best by ``value``;
    the trial reports ``value`` on the pick's first ``value_count`` samples (``full`` unless given:
    the pick alone is completed further)."""
    count = value_count or full
    name = f"{by} 64 → top {top} at {full}, value {value}" + (f" at {count}" if count != full else "")
    return Rule(name, (Stage(by, 64, top), Stage(value, full, 1)), value, count)


def every(by: str, count: int = 256) -> Rule:
    return Rule(f"every combination at {count} by {by}", (Stage(by, count, 1),), by, count)


def swept(by: str = "pca", screen_count: int = 64, top: int = 3, full: int = 512) -> Rule:
    """What :func:`hpo.scoring.sweep.run_sweep` does: a screen on ``screen_count``, then its best
    ``top``, each guidance scale's best and its frontier completed to ``full``, the best of those."""
    name = f"{by} {screen_count} → top {top}, each guidance's best, frontier at {full}"
    return Rule(name, (Stage(by, screen_count, top, sweep=True), Stage("fid", full, 1)), "fid", full)


RULES = [
    screen("pca", 1),  # what shipped
    screen("pca", 3),
    screen("kid", 1),
    screen("kid", 3),
    screen("kid", 3, value="fid_inf"),
    every("fid"),
    every("kid"),
    every("fid_inf"),
    every("richardson"),
    every("boot"),
    screen("boot", 3),
    screen("kid", 3, value="boot"),
    Rule(
        "kid 64 → 3 at 256 by fid_inf → value fid_inf at 1024",
        (Stage("kid", 64, 3), Stage("fid_inf", 256, 1)),
        "fid_inf",
        1024,
    ),
    every("fid_inf", 512),
    every("fid", 1024),
    # the pick alone completed to 512: its value's count bias halves (FID) or goes (FID∞)
    screen("pca", 3, value_count=512),
    screen("pca", 3, value="fid_inf", value_count=512),
    # the same count in the spec alone (score.num_samples 512): every finalist completed to it
    screen("pca", 2, full=512),
    screen("pca", 3, full=384),
    screen("pca", 3, full=512),  # what shipped before each guidance scale's best went on
    swept(),  # the screen's finalists with each guidance scale's best
    swept(screen_count=128),  # a larger first rung
    every("fid", 512),  # no screen, at 512
    every("fid", 768),
    # no screen: every combination at 512, its finalists (best 3, each guidance's best, frontier) to 1 024
    Rule(
        "fid 512 → top 3, each guidance's best, frontier at 1024",
        (Stage("fid", 512, 3, sweep=True), Stage("fid", 1024, 1)),
        "fid",
        1024,
    ),
]
SHIPPED = every("fid", 1024)  # hpo init's classifier specs and the shipped ones: no screen, 1 024 samples
COST_UNIT = every("fid", 512)  # the cost column's unit


# ---------------------------------------------------------------- the tables


@dataclass(frozen=True)
class Model:
    key: ModelKey
    feats: dict[str, np.ndarray]  # combination label → (TOTAL, d)
    reference: Reference


def load_features(key: ModelKey, cache: Path = CACHE) -> Model | None:
    """The cached features of a measured, converged model; None otherwise."""
    path = features_path(key, cache)
    if not path.exists():
        return None
    with np.load(path) as blob:
        if "diverged" in blob.files or not all(combo_label(w, s) in blob.files for w, s in combos(key.dataset)):
            return None
        feats = {k: blob[k].astype(np.float64) for k in blob.files if "/" in k}
        return Model(key, feats, Reference.of(blob["reference"]))


@dataclass(frozen=True)
class Judged:
    pick: str
    value: float
    rho: float | None  # None in records written before ρ was kept per model
    regret: float  # truth(pick) − truth(best)


def rescoring_sd(feats: np.ndarray, ref: Reference, count: int = 256) -> float:
    """sd of one trial value (FID of ``count`` samples) over disjoint blocks of fresh sample noise."""
    blocks = [fid(feats[i : i + count], ref) for i in range(0, feats.shape[0] - count + 1, count)]
    return statistics.stdev(blocks)


def truth_sd(model: Model) -> float:
    """sd of a truth difference between two combinations, from the two disjoint halves' FID∞ (each
    at half the count, so scaled by 1/√2 to the whole)."""
    half = TOTAL // 2
    stat = extrapolated(0.25, points=8, draws=3)
    a = {k: stat(f[:half], model.reference) for k, f in model.feats.items()}
    b = {k: stat(f[half:], model.reference) for k, f in model.feats.items()}
    return halves_difference_sd([(a[k], b[k]) for k in sorted(a)])


def judge(rule: Rule, model: Model, truth: dict[str, float]) -> Judged:
    pick, value = rule.run(model.feats, model.reference)
    ranked = {k: STATISTICS[rule.stages[-1].statistic](f[: rule.stages[-1].count], model.reference)
              for k, f in model.feats.items()}  # fmt: skip
    labels = sorted(truth)
    rho = float(spearmanr([ranked[k] for k in labels], [truth[k] for k in labels]).statistic)
    return Judged(pick, value, rho, truth[pick] - min(truth.values()))


@dataclass(frozen=True)
class Measured:
    """One model against its truth: what every rule is judged by."""

    name: str
    truth: dict[str, float]  # combination → FID∞
    fid_total: dict[str, float]  # combination → FID of all TOTAL samples
    sd: float  # one trial value's re-scoring sd (FID of 256, disjoint blocks of the best combination)
    truth_sd: float  # sd of a truth difference between two combinations
    judged: dict[str, Judged]  # rule name → its pick and value

    @property
    def best(self) -> str:
        return min(self.truth, key=self.truth.__getitem__)

    @property
    def inside(self) -> bool:
        """Truth's best guidance lies strictly inside the grid's guidance range: a good model."""
        scales = sorted({float(k.split("/")[0]) for k in self.truth})
        return scales[0] < float(self.best.split("/")[0]) < scales[-1]


def write_record(m: Measured) -> None:
    RECORDS.mkdir(parents=True, exist_ok=True)
    body = {"model": m.name, "truth": m.truth, "fid_total": m.fid_total, "sd": m.sd, "truth_sd": m.truth_sd,
            "picks": {n: vars(j) for n, j in m.judged.items()}}  # fmt: skip
    path = RECORDS / f"{m.name}.json"
    path.write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")


def read_record(key: ModelKey) -> Measured | None:
    path = record_path(key)
    if not path.exists():
        return None
    body = json.loads(path.read_text())
    judged = {n: Judged(j["pick"], j["value"], j.get("rho"), j["regret"]) for n, j in body["picks"].items()}
    return Measured(body["model"], body["truth"], body["fid_total"], body["sd"], body["truth_sd"], judged)


def load_measured(dataset: str, models: int, cache: Path = CACHE) -> list[Measured]:
    """Every judged model of ``dataset``: its record, re-judged from cached features when the record
    lacks a rule (and written back)."""
    out = []
    for key in keys((dataset,), models):
        record = read_record(key)
        if record is None or not set(record.judged) >= {r.name for r in RULES}:
            model = load_features(key, cache)
            if model is None:
                if record is not None:
                    out.append(record)
                continue
            record = measure_truth(model)
            write_record(record)
        out.append(record)
    return out


def measure_truth(m: Model) -> Measured:
    truth = {k: TRUTH(f, m.reference) for k, f in m.feats.items()}
    best = min(truth, key=truth.__getitem__)
    return Measured(
        m.key.name, truth, {k: fid(f, m.reference) for k, f in m.feats.items()},
        rescoring_sd(m.feats[best], m.reference), truth_sd(m), {r.name: judge(r, m, truth) for r in RULES},
    )  # fmt: skip


FLOOR = 0.02  # the criterion's least tolerance: 2 % of the best value


def tolerance(m: Measured) -> float:
    """How far above truth's best a pick may lie and still be right: 2 sd of a truth difference
    between two combinations on the same samples, at least 2 % of the best."""
    return max(2 * m.truth_sd, FLOOR * min(m.truth.values()))


def right(j: Judged, m: Measured) -> bool:
    return j.regret <= tolerance(m)


def regret_share(j: Judged, m: Measured) -> float:
    """Regret in % of truth's best value."""
    return 100 * j.regret / min(m.truth.values())


def summarise(measured: Sequence[Measured], *, across: bool = True) -> dict[str, dict[str, Any]]:
    """Per rule over ``measured``: the share of picks that are right (:func:`tolerance`), regret in % of
    the best (mean and worst), mean ρ, and Spearman between the values it reports and the models' truth."""
    out = {}
    for r in RULES:
        judged = [(m.judged[r.name], m) for m in measured if r.name in m.judged]
        if not judged:
            continue
        rhos = [j.rho for j, _ in judged if j.rho is not None]
        values, truths = [j.value for j, _ in judged], [min(m.truth.values()) for _, m in judged]
        out[r.name] = {
            "models": len(judged),
            "cost": r.cost() / COST_UNIT.cost(),
            "rho": statistics.fmean(rhos) if rhos else None,
            "rho_models": len(rhos),
            "right": statistics.fmean(right(j, m) for j, m in judged),
            "regret_pct_mean": statistics.fmean(regret_share(j, m) for j, m in judged),
            "regret_pct_max": max(regret_share(j, m) for j, m in judged),
            "misses": sorted(f"{m.name} ({regret_share(j, m):.0f} %)" for j, m in judged if not right(j, m)),
            "across_models": float(spearmanr(values, truths).statistic)
            if across and len(judged) > 2 else None,
            "separated_pairs": separated_pairs(judged) if across else None,
        }  # fmt: skip
    return out


def separated_pairs(judged: Sequence[tuple[Judged, Measured]]) -> tuple[int, int] | None:
    """Of the model pairs whose truths differ by more than the tie margin of two *independent* trial
    values (2·√2 · the larger sd of one value: different models share no samples), how many the
    reported values order as truth does: (ordered, pairs)."""
    pairs = ordered = 0
    for i, (a, ma) in enumerate(judged):
        for b, mb in judged[i + 1 :]:
            gap = min(ma.truth.values()) - min(mb.truth.values())
            if abs(gap) > 2 * math.sqrt(2) * max(ma.sd, mb.sd):
                pairs += 1
                ordered += (a.value - b.value) * gap > 0
    return (ordered, pairs) if pairs else None


def evaluate(measured: Sequence[Measured]) -> dict[str, Any]:
    good = [m for m in measured if m.inside]
    return {
        "models": [
            {"model": m.name, "best": m.best, "inside": m.inside, "sd": m.sd, "truth_sd": m.truth_sd,
             "truth": m.truth, "fid_total": m.fid_total,
             "picks": {n: vars(j) for n, j in m.judged.items()}}
            for m in measured
        ],
        "all": summarise(measured) if measured else {},
        "good": summarise(good) if good else {},
    }  # fmt: skip


def print_dataset(dataset: str, res: dict[str, Any]) -> None:
    models = res["models"]
    good = sum(m["inside"] for m in models)
    print(f"\n{dataset}: {len(models)} models, {good} good (truth's best guidance inside the grid)")
    for m in models:
        row = " ".join(f"{k} {v:.2f}" for k, v in sorted(m["truth"].items()))
        print(f"  {m['model']}{' (good)' if m['inside'] else ''}: best {m['best']}, sd of one value {m['sd']:.3f}, "
              f"of a truth difference {m['truth_sd']:.3f}; FID∞ {row}")  # fmt: skip
    for subset in ("good", "all"):
        if not res[subset]:
            continue
        print(f"  {subset} models:")
        print(f"{'rule':>62} {'cost':>5} {'models':>6} {'right':>6} {'regret %':>8} {'worst %':>7} {'rho':>5} "
              f"{'across':>6}  misses")  # fmt: skip
        for name, r in res[subset].items():
            across = "-" if r["across_models"] is None else f"{r['across_models']:.2f}"
            rho = "-" if r["rho"] is None else f"{r['rho']:.2f}"
            print(f"{name:>62} {r['cost']:5.2f} {r['models']:6d} {r['right']:6.0%} {r['regret_pct_mean']:8.1f} "
                  f"{r['regret_pct_max']:7.1f} {rho:>5} {across:>6}  {', '.join(r['misses'])}")  # fmt: skip


def truth_agreement(datasets: tuple[str, ...], models: int, cache: Path = CACHE) -> None:
    """How well truth itself ranks a dataset's good models: each model's best FID∞ from the first and
    from the second 1 024 of its 2 048 samples (independent noise), Spearman between the two halves
    across the models whose features are cached; the ceiling any rule's Spearman is measured under."""
    half = TOTAL // 2
    for d in datasets:
        rows = []
        for key in keys((d,), models):
            record, model = read_record(key), load_features(key, cache)
            if record is None or not record.inside or model is None:
                continue
            a = min(TRUTH(f[:half], model.reference) for f in model.feats.values())
            b = min(TRUTH(f[half:], model.reference) for f in model.feats.values())
            rows.append((key.name, record.truth[record.best], a, b))
        if len(rows) < 3:
            continue
        rho = spearmanr([r[2] for r in rows], [r[3] for r in rows]).statistic
        print(f"{d}: {len(rows)} good models, Spearman between the halves' truths {rho:.2f}")
        for name, full, x, y in sorted(rows, key=lambda r: r[1]):
            print(f"  {name:>10}  FID∞ of 2 048 {full:6.2f}   first 1 024 {x:6.2f}   second 1 024 {y:6.2f}")


HALVES = (
    "every combination at 1024 by fid",
    "every combination at 768 by fid",
    "every combination at 512 by fid",
    "pca 64 → top 3, each guidance's best, frontier at 512",
    "pca 64 → top 3 at 512, value fid",
)


def halves(datasets: tuple[str, ...], models: int, cache: Path = CACHE) -> None:
    """Rules of ``HALVES`` judged against a truth from samples they never saw: each runs on the first
    1 024 samples, truth is FID∞ of the second 1 024 (512 to 1 024 of them), its tolerance 2 sd of a
    difference at that count (√2 × the whole's), at least 2 % of the best. Truth from all 2 048 shares
    the rule's samples, which favours the rules that read more of them."""
    stat = extrapolated(0.5, points=6, draws=3)
    rules = [r for r in RULES if r.name in HALVES]
    print("model, truth's best (second half), tolerance | " + " | ".join(r.name for r in rules))
    for key in keys(datasets, models):
        m, record = load_features(key, cache), read_record(key)
        if m is None or record is None or not record.inside:
            continue
        first = {k: f[: TOTAL // 2] for k, f in m.feats.items()}
        truth = {k: stat(f[TOTAL // 2 :], m.reference) for k, f in m.feats.items()}
        best = min(truth, key=truth.__getitem__)
        tol = max(2 * math.sqrt(2) * record.truth_sd, FLOOR * truth[best])
        cells = []
        for r in rules:
            pick, _ = r.run(first, m.reference)
            regret = truth[pick] - truth[best]
            cells.append(f"{pick}{'' if regret <= tol else ' ✗'} {100 * regret / truth[best]:.1f} %")
        print(f"{key.name}, {best} ({truth[best]:.2f}), {tol:.2f} | " + " | ".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default=",".join((*DATASETS, "patches", "stills")))
    parser.add_argument("--models", type=int, default=MODELS)
    parser.add_argument("--measure", action="store_true", help="only train and sample what is missing")
    parser.add_argument("--tables", action="store_true", help="only the tables, from what is cached")
    parser.add_argument("--device", default="cpu", help="where models train and sample: cpu, cuda, cuda:N")
    parser.add_argument(
        "--resample", action="store_true", help="also sample the good models judged elsewhere (features not kept here)"
    )
    parser.add_argument(
        "--halves", action="store_true", help="only the rules against a truth from samples they never saw"
    )
    parser.add_argument("--only", help="measure these models alone, in this order (e.g. photos-7,photos-0)")
    parser.add_argument(
        "--truth-agreement", action="store_true", help="only truth's own agreement across models (two halves)"
    )
    args = parser.parse_args()
    datasets = tuple(args.datasets.split(","))
    if args.truth_agreement:
        truth_agreement(datasets, args.models)
        return
    if args.halves:
        halves(datasets, args.models)
        return
    if not args.tables:
        only = None if args.only is None else args.only.split(",")
        measure(datasets, args.models, device=args.device, resample=args.resample, only=only)
    if args.measure:
        return
    started = time.perf_counter()
    measured = {d: load_measured(d, args.models) for d in datasets}
    results = {d: evaluate(m) for d, m in measured.items()}
    for d, res in results.items():
        print_dataset(d, res)
    every = [m for ms in measured.values() for m in ms]
    good = [m for m in every if m.inside]
    # FIDs of different datasets live in different feature spaces: no Spearman across them
    pooled = {"good": summarise(good, across=False) if good else {}, "all": summarise(every, across=False)}
    print(markdown(results, pooled))
    print(model_table(every))
    write_result("sweep_truth", {"datasets": results, "pooled": pooled, "seconds": time.perf_counter() - started})


def markdown(results: dict[str, dict[str, Any]], pooled: dict[str, dict[str, Any]]) -> str:
    """docs/screening.md's table: per rule, its worst-case cost against every combination at 512, the good
    models pooled (right, regret in %: mean and worst) and each dataset's good models (models judged,
    right, worst regret, Spearman of the reported values against truth across them)."""
    counts = {d: sum(m["inside"] for m in r["models"]) for d, r in results.items()}
    head = ["rule", "cost", f"good models pooled ({sum(counts.values())}): right / regret % mean (worst)"]
    head += [
        f"{d} ({counts[d]} good of {len(r['models'])}): judged / right / worst % / ρ across" for d, r in results.items()
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for name, p in pooled["good"].items():
        fewer = f" ({p['models']} judged)" if p["models"] != sum(counts.values()) else ""
        row = [
            name,
            f"{p['cost']:.2f}×",
            f"{p['right']:.0%} / {p['regret_pct_mean']:.1f} ({p['regret_pct_max']:.1f}){fewer}",
        ]
        for r in results.values():
            g = r["good"].get(name)
            across = "-" if g is None or g["across_models"] is None else f"{g['across_models']:.2f}"
            row.append("-" if g is None else f"{g['models']} / {g['right']:.0%} / {g['regret_pct_max']:.1f} / {across}")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


PER_MODEL = (screen("pca", 3, full=512), swept(), every("fid", 512), SHIPPED)  # docs/screening.md's columns


def model_table(measured: Sequence[Measured]) -> str:
    """docs/screening.md's per-model table: truth's best, the criterion's tolerance, and what each rule
    of ``PER_MODEL`` picked (its regret in % of the best where it is not the best; ✗ where it is not
    right; — where the model's features were not kept to judge it)."""
    head = ["model", "truth's best (FID∞)", "sd of a truth difference", "tolerance", *(r.name for r in PER_MODEL)]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for m in measured:
        row = [m.name + (" (good)" if m.inside else ""), f"{m.best} ({m.truth[m.best]:.2f})", f"{m.truth_sd:.2f}",
               f"{tolerance(m):.2f}"]  # fmt: skip
        for r in PER_MODEL:
            j = m.judged.get(r.name)
            if j is None:
                row.append("—")
            elif j.pick == m.best:
                row.append(f"{j.pick} ({j.value:.2f})")
            else:
                mark = "" if right(j, m) else " ✗"
                row.append(f"{j.pick}, {regret_share(j, m):.1f} % worse{mark} ({j.value:.2f})")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
