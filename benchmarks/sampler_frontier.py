"""Do DPM-Solver++(2M) or Heun reach at 10 and 20 network evaluations what DDIM needs more for, on good models?

Per model of :mod:`benchmarks.good_models` (the regime where sampling settings matter: best guidance
inside the grid), every combination below draws TOTAL samples from one noise and label set, and is
scored by FID∞ (Chong & Forsyth 2020, as ``benchmarks/sweep_truth.py``'s truth: FID at 8 counts
evenly spaced in 1/n from TOTAL/4 to TOTAL, a line in 1/n, its intercept):

- at each budget (10 and 20 NFE) and each sampler (DDIM, DPM-Solver++(2M), Heun), guidance 1 and
  guidance 2 and 3, each at the most steps the budget affords (a guided step costs two evaluations,
  a Heun step two but its last one: ``SamplingConfig.evaluations``);
- DDIM's unconstrained best over the quickstart's grid (guidance 1/2/3 × 10/20/30 steps, up to 60 NFE);
- guidance in a limited interval (Kynkäänniemi et al. 2024): DDIM at 30 steps and guidance 2, 3 and
  4, guided only where σ/α lies in each of ``INTERVALS`` (the conditional model alone elsewhere, one
  pass), against the same guidances applied everywhere; its network evaluations counted exactly on
  the model's own schedule (:func:`hpo.training.generate.network_evaluations`).

Per model: each sampler's best at each budget; the noise is the sd of a difference between two
combinations' FID∞, from the two disjoint halves of the samples (``truth_sd``), the median pair's
(:attr:`ModelResult.noise`: Heun on EDM's σ spacing at 3 steps gives FID∞ over 2 000, and such a
combination inflates the root mean square over pairs 4-20× on shapes). Per dataset: mean ±
sd over models, the paired difference to DDIM at each budget and in how many models each wins by
more than 2 noise sd. A sampler ships as a default only where it wins by more than the noise; an
interval is swept in the GPU spec only where it does.

    OMP_NUM_THREADS=1 python -m benchmarks.sampler_frontier --measure --datasets digits,photos &   # per core
    python -m benchmarks.sampler_frontier --tables          # from benchmarks/results/sampler_frontier/*.json
    python -m benchmarks.sampler_frontier --quick           # a smoke run: 1 digits model, 2 kimg, 256 samples
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.claims import unclaimed
from benchmarks.common import RESULTS, write_result
from benchmarks.good_models import CACHE, DATASETS, MODELS, ModelKey, keys, load_model, model_spec, train_model
from benchmarks.sweep_truth import TOTAL as TRUTH_TOTAL
from benchmarks.sweep_truth import extrapolated, shared_labels
from benchmarks.sweep_truth import features_path as truth_path
from hpo.analysis.noise import pair_sd
from hpo.diffusion.sampler import EVERYWHERE
from hpo.scoring.distance import Reference
from hpo.spec.samplers import SamplerName, Spacing
from hpo.spec.sampling import SamplingConfig

TOTAL = 2048
BUDGETS = (10, 20)
SAMPLERS: tuple[SamplerName, ...] = ("ddim", "dpmpp_2m", "heun")
KARRAS: tuple[SamplerName, ...] = ("dpmpp_2m", "heun")  # also on EDM's σ spacing (spacing: karras)
SOLVERS = (*SAMPLERS, *(f"{k}+karras" for k in KARRAS))  # a sampler on trailing timesteps, or +karras
CHALLENGERS = SOLVERS[1:]  # each compared with DDIM
GUIDANCE = (1.0, 2.0, 3.0)
DDIM_GRID = tuple((w, s) for w in GUIDANCE for s in (10, 20, 30))  # the quickstart's grid
# Kynkäänniemi et al. 2024's best intervals (σ_lo, σ_hi]: EDM2-S on ImageNet-512 (0.28, 2.9], SD-XL (0.28, 5.42]
INTERVALS: tuple[tuple[float, float], ...] = ((0.28, 2.9), (0.28, 5.42))
INTERVAL_GUIDANCE = (2.0, 3.0, 4.0)
INTERVAL_STEPS = 30
RECORDS = RESULTS / "sampler_frontier"


@dataclass(frozen=True)
class Combo:
    sampler: SamplerName
    guidance: float
    steps: int
    interval: tuple[float, float] = EVERYWHERE  # guided where σ/α lies in (lo, hi]
    spacing: Spacing = "trailing"

    @property
    def label(self) -> str:
        where = "" if self.interval == EVERYWHERE else f"/{self.interval[0]:g}-{self.interval[1]:g}"
        spaced = "" if self.spacing == "trailing" else f"/{self.spacing}"
        return f"{self.sampler}/{self.guidance:g}/{self.steps}{where}{spaced}"

    @property
    def solver(self) -> str:
        """The sampler and its spacing, as SOLVERS names them."""
        return self.sampler if self.spacing == "trailing" else f"{self.sampler}+{self.spacing}"

    @property
    def sampling(self) -> SamplingConfig:
        low, high = self.interval
        return SamplingConfig(
            guidance_scale=self.guidance, steps=self.steps, sampler=self.sampler,
            guidance_sigma_min=low, guidance_sigma_max=None if math.isinf(high) else high, spacing=self.spacing,
        )  # fmt: skip

    @property
    def nfe(self) -> int:
        return self.sampling.evaluations(conditional=True)


def within(sampler: SamplerName, guidance: float, budget: int, spacing: Spacing = "trailing") -> Combo:
    """The most steps of ``sampler`` at ``guidance`` that ``budget`` evaluations afford."""
    steps = max(n for n in range(1, budget + 1) if Combo(sampler, guidance, n).nfe <= budget)
    return Combo(sampler, guidance, steps, spacing=spacing)


def interval_combos(interval: tuple[float, float]) -> list[Combo]:
    """DDIM at INTERVAL_STEPS and each of INTERVAL_GUIDANCE, guided within ``interval``."""
    return [Combo("ddim", w, INTERVAL_STEPS, interval) for w in INTERVAL_GUIDANCE]


def combos() -> list[Combo]:
    """Each sampler at each budget and guidance, the rest of DDIM's grid, the guidance intervals (and
    the same guidances everywhere), then DPM-Solver++ and Heun at each budget on EDM's σ spacing; each
    once (the order they are sampled in: a combination added later is sampled alone)."""
    at_budget = [within(k, w, b) for k in SAMPLERS for b in BUDGETS for w in GUIDANCE]
    grid = [Combo("ddim", w, s) for w, s in DDIM_GRID]
    intervals = [c for i in (EVERYWHERE, *INTERVALS) for c in interval_combos(i)]
    karras = [within(k, w, b, "karras") for k in KARRAS for b in BUDGETS for w in GUIDANCE]
    return list(dict.fromkeys(at_budget + grid + intervals + karras))


def features_path(key: ModelKey, total: int, cache: Path) -> Path:
    return cache / f"{key.name}-samplers{total}.npz"


def save_features(feats: dict[str, np.ndarray], path: Path) -> None:
    tmp = path.with_suffix(".tmp.npz")
    arrays: dict[str, Any] = {k: v.astype(np.float32) for k, v in feats.items()}
    np.savez(tmp, **arrays)
    tmp.replace(path)


def truth_features(key: ModelKey, cache: Path) -> dict[str, np.ndarray]:
    """The combinations :mod:`benchmarks.sweep_truth` already sampled for ``key``, under this script's
    labels (the reverse of :func:`benchmarks.sweep_truth.frontier_features`)."""
    path = truth_path(key, cache)
    if not path.exists():
        return {}
    ours = {c.label for c in combos()}
    wanted = {truth: label for label, truth in shared_labels(key.dataset).items() if label in ours}
    with np.load(path) as blob:
        return {wanted[k]: blob[k] for k in blob.files if k in wanted}


def sample_model(
    key: ModelKey, *, total: int, cache: Path, device: str, kimg: float | None = None
) -> tuple[dict[str, np.ndarray], dict[str, int]] | None:
    """Train (or load) ``key``; each combination's features of ``total`` samples, cached (only what
    the cache lacks is sampled), and its network evaluations per sample on the model's schedule; None
    for a run that diverged."""
    import torch

    from hpo.scoring.score import make_scorer, sample_features, score_labels
    from hpo.spec.spec import spec_from_dict
    from hpo.training.generate import network_evaluations

    started = time.perf_counter()
    train_model(key, cache, device, kimg)
    model, _, data = load_model(key, cache, device)
    if model is None:
        return None
    spec = spec_from_dict(model_spec(key.dataset, num_samples=total, cache=cache, device=device))
    scorer = make_scorer(spec.score, data, device=torch.device(device), cache_dir=cache / "scoring")
    path = features_path(key, total, cache)
    out: dict[str, np.ndarray] = {"reference": scorer.reference.features}
    if path.exists():
        with np.load(path) as blob:
            out.update({k: blob[k] for k in blob.files})
    labels = score_labels(scorer, model, data.class_frequencies(), seed=0)
    stored = len(out)  # what the cache file holds now, with the reference; truth's reuse is added below
    if total == TRUTH_TOTAL:
        out.update({k: v for k, v in truth_features(key, cache).items() if k not in out})
    for c in combos():
        if c.label not in out:
            out[c.label] = sample_features(scorer, model, c.sampling, labels, start=0, n=total, seed=0).feats
            save_features(out, path)  # each combination kept as it is sampled: a stopped run resumes
    if len(out) > stored:  # reused features not yet written (a file already whole is not rewritten)
        save_features(out, path)
    print(f"  {key.name}: sampled {len(combos())} combinations in {time.perf_counter() - started:.0f} s", flush=True)
    nfe = {c.label: network_evaluations(c.sampling, model.schedule, conditional=True) for c in combos()}
    return out, nfe


@dataclass(frozen=True)
class ModelResult:
    model: str
    best: dict[str, dict[str, float]]  # sampler → budget ("10", "20") → the best FID∞ within it
    ddim_best: float  # DDIM's unconstrained best over the quickstart's grid
    noise_sd: float  # sd of a difference between two combinations' FID∞
    truth: dict[str, float]  # combination → FID∞
    # the same sd from the median pair (median |d| / 0.6745): one broken combination cannot inflate it
    noise_sd_robust: float | None = None
    nfe: dict[str, int] = field(default_factory=dict)  # combination → network evaluations per sample
    # interval ("everywhere" or "lo-hi") → the best FID∞ over INTERVAL_GUIDANCE at INTERVAL_STEPS
    interval_best: dict[str, float] = field(default_factory=dict)

    @property
    def noise(self) -> float:
        """The sd that wins and losses are measured against: the median pair's where recorded."""
        return self.noise_sd if self.noise_sd_robust is None else self.noise_sd_robust


def interval_name(interval: tuple[float, float]) -> str:
    return "everywhere" if interval == EVERYWHERE else f"{interval[0]:g}-{interval[1]:g}"


def judge(name: str, feats: dict[str, np.ndarray], nfe: dict[str, int]) -> ModelResult:
    reference = Reference.of(feats["reference"].astype(np.float64))
    stat = extrapolated(0.25, points=8, draws=3)
    samples = {c.label: feats[c.label].astype(np.float64) for c in combos()}
    truth = {k: stat(f, reference) for k, f in samples.items()}
    best: dict[str, dict[str, float]] = {
        k: {str(b): min(truth[c.label] for c in combos() if c.solver == k and c.nfe <= b) for b in BUDGETS}
        for k in SOLVERS
    }
    ddim_best = min(truth[Combo("ddim", w, s).label] for w, s in DDIM_GRID)
    interval_best = {
        interval_name(i): min(truth[c.label] for c in interval_combos(i)) for i in (EVERYWHERE, *INTERVALS)
    }
    pooled, robust = noise_sd(samples, reference)
    return ModelResult(name, best, ddim_best, pooled, truth, robust, nfe, interval_best)


def noise_sd(samples: dict[str, np.ndarray], reference: Reference) -> tuple[float, float]:
    """sd of a difference between two combinations' FID∞: from the two disjoint halves' differences
    (each at half the count, so scaled by 1/√2 to the whole); pooled over pairs of combinations (the
    root mean square), and robustly (the median pair's, over 0.6745: a half-normal's median)."""
    stat = extrapolated(0.25, points=8, draws=3)
    half = next(iter(samples.values())).shape[0] // 2
    a = {k: stat(f[:half], reference) for k, f in samples.items()}
    b = {k: stat(f[half:], reference) for k, f in samples.items()}
    labels = sorted(a)
    deltas = [pair_sd(a[x] - a[y], b[x] - b[y]) for i, x in enumerate(labels) for y in labels[i + 1 :]]
    pooled = math.sqrt(statistics.fmean(d * d for d in deltas)) / math.sqrt(2)
    return pooled, statistics.median(deltas) / 0.6745 / math.sqrt(2)


def record_path(key: ModelKey, folder: Path = RECORDS) -> Path:
    return folder / f"{key.name}.json"


def measure(
    datasets: tuple[str, ...],
    models: int,
    *,
    total: int,
    cache: Path,
    device: str,
    folder: Path,
    kimg: float | None,
    first: int = 0,
) -> None:
    import torch

    torch.set_num_threads(1)
    cache.mkdir(parents=True, exist_ok=True)
    folder.mkdir(parents=True, exist_ok=True)
    todo = [k for k in keys(datasets, models) if k.index >= first]
    claim = lambda k: cache / f"{k.name}.samplers.claim"  # noqa: E731
    for key in unclaimed(todo, done=lambda k: complete(record_path(k, folder)), claim_path=claim):
        sampled = sample_model(key, total=total, cache=cache, device=device, kimg=kimg)
        if sampled is not None:
            record_path(key, folder).write_text(json.dumps(asdict(judge(key.name, *sampled)), indent=1))


def complete(record: Path) -> bool:
    """A record judged on every combination (one from before a combination was added is re-judged:
    only the combinations its cached features lack are sampled)."""
    return record.exists() and set(json.loads(record.read_text())["truth"]) >= {c.label for c in combos()}


def summary(results: Sequence[ModelResult]) -> dict[str, Any]:
    """Per budget and solver: mean ± sd of the best over models; each challenger − DDIM paired, and
    each sampler on EDM's σ spacing − the same sampler on trailing, with the models where either side
    wins by > 2 noise sd."""
    out: dict[str, Any] = {"models": len(results), "noise_sd": [round(r.noise_sd, 3) for r in results]}
    if all(r.noise_sd_robust is not None for r in results):
        out["noise_sd_robust"] = [round(r.noise_sd_robust or 0.0, 3) for r in results]
    for b in map(str, BUDGETS):
        for k in SOLVERS:
            out[f"{k}@{b}"] = mean_sd([r.best[k][b] for r in results])
        for k in CHALLENGERS:
            out.update(paired(results, k, "ddim", b))
        for k in KARRAS:
            out.update(paired(results, f"{k}+karras", k, b))
    out["ddim unconstrained"] = mean_sd([r.ddim_best for r in results])
    for k in SOLVERS[1:]:  # within 20 evaluations against DDIM's best within 60
        out.update(paired(results, k, "ddim", str(BUDGETS[-1]), unconstrained=True))
    if all(r.interval_best for r in results):
        out["intervals"] = interval_summary(results)
    return out


def paired(
    results: Sequence[ModelResult], challenger: str, baseline: str, budget: str, *, unconstrained: bool = False
) -> dict[str, Any]:
    """``challenger`` − ``baseline`` at ``budget`` over models (mean ± sd), and in how many models
    each wins by more than 2 noise sd; ``unconstrained``: against DDIM's best over its whole grid."""
    base = (lambda r: r.ddim_best) if unconstrained else (lambda r: r.best[baseline][budget])
    diffs = [r.best[challenger][budget] - base(r) for r in results]
    pairs = list(zip(diffs, results, strict=True))
    baseline = "ddim unconstrained" if unconstrained else baseline
    return {
        f"{challenger}-{baseline}@{budget}": mean_sd(diffs),
        f"{challenger} wins over {baseline}@{budget}": sum(d < -2 * r.noise for d, r in pairs),
        f"{baseline} beats {challenger}@{budget}": sum(d > 2 * r.noise for d, r in pairs),
    }


def interval_summary(results: Sequence[ModelResult]) -> dict[str, Any]:
    """Per interval (and everywhere): mean ± sd over models of the best over INTERVAL_GUIDANCE, the
    network evaluations per sample it costs (mean over models), and each interval − everywhere
    paired, with the models where either wins by > 2 noise sd."""
    out: dict[str, Any] = {}
    for i in (EVERYWHERE, *INTERVALS):
        name, combo = interval_name(i), interval_combos(i)[0]
        row: dict[str, Any] = {
            "best": mean_sd([r.interval_best[name] for r in results]),
            "nfe": statistics.fmean(r.nfe[combo.label] for r in results),
        }
        if i != EVERYWHERE:
            diffs = [r.interval_best[name] - r.interval_best["everywhere"] for r in results]
            row["minus everywhere"] = mean_sd(diffs)
            row["wins"] = sum(d < -2 * r.noise for d, r in zip(diffs, results, strict=True))
            row["losses"] = sum(d > 2 * r.noise for d, r in zip(diffs, results, strict=True))
        out[name] = row
    return out


def mean_sd(values: Sequence[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(values), "sd": statistics.stdev(values) if len(values) > 1 else 0.0}


def mean_sd_text(s: dict[str, Any]) -> Callable[[str], str]:
    return lambda key: f"{s[key]['mean']:.3g} ± {s[key]['sd']:.2g}"


NAMES = {"ddim": "DDIM", "dpmpp_2m": "DPM-Solver++(2M)", "heun": "Heun"}
NAMES.update({f"{k}+karras": f"{NAMES[k]}, EDM σ" for k in KARRAS})


def markdown(by_dataset: dict[str, dict[str, Any]]) -> str:
    """Per dataset and budget: each sampler's best on trailing timesteps (mean ± sd over models), then
    per challenger its paired difference to DDIM and the models where it / DDIM wins by more than 2
    noise sd; then each sampler on EDM's σ spacing against itself on trailing."""
    samplers = ("ddim", *(k for k in CHALLENGERS if k in SAMPLERS))
    heads = [NAMES[k] for k in samplers] + [f"{NAMES[k]} − DDIM (wins / losses)" for k in samplers[1:]]
    lines = table_head(heads)
    for d, s in by_dataset.items():
        ms = mean_sd_text(s)
        for b in BUDGETS:
            best = [ms(f"{k}@{b}") for k in samplers]
            versus = [versus_text(s, k, "ddim", b) for k in samplers[1:]]
            lines.append(f"| {d} ({s['models']}) | ≤ {b} NFE | " + " | ".join(best + versus) + " |")
        blank = " |" * (len(heads) - 1)
        lines.append(f"| {d} ({s['models']}) | DDIM's best ≤ 60 NFE | {ms('ddim unconstrained')} |{blank}")
    spaced = [f"{NAMES[k]}: trailing / EDM σ, EDM σ − trailing (wins / losses)" for k in KARRAS]
    lines += ["", *table_head(spaced)]
    for d, s in by_dataset.items():
        ms = mean_sd_text(s)
        for b in BUDGETS:
            cells = [
                f"{ms(f'{k}@{b}')} / {ms(f'{k}+karras@{b}')}, {versus_text(s, f'{k}+karras', k, b)}" for k in KARRAS
            ]
            lines.append(f"| {d} ({s['models']}) | ≤ {b} NFE | " + " | ".join(cells) + " |")
    budget = BUDGETS[-1]
    heads = [f"{NAMES[k]} − DDIM's best (wins / losses)" for k in SOLVERS[1:]]
    lines += ["", *table_head(heads)]
    for d, s in by_dataset.items():
        cells = [versus_text(s, k, "ddim unconstrained", budget) for k in SOLVERS[1:]]
        lines.append(f"| {d} ({s['models']}) | ≤ {budget} NFE vs ≤ 60 | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def table_head(heads: Sequence[str]) -> list[str]:
    return ["| dataset (models) | budget | " + " | ".join(heads) + " |", "| --- " * (2 + len(heads)) + "|"]


def versus_text(s: dict[str, Any], challenger: str, baseline: str, budget: int) -> str:
    diff = s[f"{challenger}-{baseline}@{budget}"]
    wins, losses = s[f"{challenger} wins over {baseline}@{budget}"], s[f"{baseline} beats {challenger}@{budget}"]
    return f"{diff['mean']:.3g} ± {diff['sd']:.2g} ({wins} / {losses})"


def interval_markdown(by_dataset: dict[str, dict[str, Any]]) -> str:
    """Per dataset and interval: the best over guidance 2/3/4 at 30 DDIM steps (mean ± sd over models),
    its network evaluations per sample, and its paired difference to guidance everywhere."""
    head = ["dataset (models)", "guided where σ/α in", "best FID∞", "NFE per sample", "− everywhere (wins / losses)"]
    lines = ["| " + " | ".join(head) + " |", "| --- " * len(head) + "|"]
    for d, s in by_dataset.items():
        for name, row in s.get("intervals", {}).items():
            best = f"{row['best']['mean']:.3g} ± {row['best']['sd']:.2g}"
            versus = "" if name == "everywhere" else (
                f"{row['minus everywhere']['mean']:.3g} ± {row['minus everywhere']['sd']:.2g} "
                f"({row['wins']} / {row['losses']})"
            )  # fmt: skip
            where = "(0, ∞)" if name == "everywhere" else f"({name.replace('-', ', ')}]"
            lines.append(f"| {d} ({s['models']}) | {where} | {best} | {row['nfe']:.3g} | {versus} |")
    return "\n".join(lines)


def tables(datasets: tuple[str, ...], models: int, folder: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for d in datasets:
        found = [record_path(k, folder) for k in keys((d,), models) if record_path(k, folder).exists()]
        results = [ModelResult(**json.loads(p.read_text())) for p in found]
        if results:
            out[d] = summary(results)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--models", type=int, default=MODELS)
    parser.add_argument(
        "--first", type=int, default=0, help="measure models FIRST..MODELS-1 (shapes' good ones are 6-11: sweep_truth)"
    )
    parser.add_argument("--measure", action="store_true", help="only train and sample what is missing")
    parser.add_argument("--tables", action="store_true", help="only the tables, from the records")
    parser.add_argument("--device", default="cpu", help="where models train and sample: cpu, cuda, cuda:N")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 digits model, 2 kimg, 256 samples")
    args = parser.parse_args()
    datasets, models, total, cache, folder = tuple(args.datasets.split(",")), args.models, TOTAL, CACHE, RECORDS
    kimg = None
    if args.quick:  # the script's path end to end on a weak model; its figures mean nothing
        datasets, models, total, kimg = ("digits",), 1, 256, 2.0
        cache, folder = Path("/tmp/hpo-bench-cache/sampler-frontier-quick"), Path("/tmp/hpo-bench-cache/sampler-quick")
    if not args.tables:
        where = {"cache": cache, "device": args.device, "folder": folder}
        measure(datasets, models, total=total, kimg=kimg, first=args.first, **where)
    if args.measure:
        return
    by_dataset = tables(datasets, models, folder)
    print(markdown(by_dataset), interval_markdown(by_dataset), sep="\n\n")
    if not args.quick:
        write_result("sampler_frontier", {"datasets": by_dataset, "total_samples": total})


if __name__ == "__main__":
    main()
