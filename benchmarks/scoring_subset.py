"""Can a search trial's value come from a few sampling combinations instead of the whole sweep? Issue 71.

During ``hpo run``'s search every trial scores each combination of the spec's grid (guidance ×
sampler steps) and takes the best as its value. A subset of the grid is safe for the search if it
ranks the models of one dataset as their whole-grid best does. This reads stored records only (no
model is trained or sampled) that hold, per trained model, every combination's FID∞ of 2 048 samples
(classifier features; Chong & Forsyth's extrapolation, as ``benchmarks/sweep_truth.py``'s truth):

- ``sweep``: ``benchmarks/results/sweep_truth.json``, 46 models of 5 datasets, DDIM on guidance
  0.5/1/2/3/4 (1/2/3 × 10/20/30 steps, 0.5 and 4 at 30; shapes' further guidance 6/8/12 is left
  out, since only 7 of its 12 models have it, so that one dataset's models share one grid);
- ``quickstart``: the same on the quickstart's grid alone, guidance 1/2/3 × 10/20/30 steps;
- ``dpm``: ``benchmarks/results/sampler_frontier/*.json``, 18 models of 3 datasets, DPM-Solver++(2M)
  on EDM's σ spacing (the digits spec's sampler) at 1/10, 1/20, 2/5, 2/10, 3/5, 3/10 (guidance/steps).

Per dataset and candidate subset (each single combination; the middle guidance at the most steps;
one guidance per steps count; the k = 1, 2, 3 combinations of best mean rank), where a subset is
chosen from data, it is chosen without the model it is judged on (leave one model out, ``lomo``) or
without its dataset (leave one dataset out, ``lodo``: what a new dataset faces). Figures, over the
models of one dataset (ranking across datasets means nothing):

- ρ: Spearman between ranking the models by their best within the subset and by their whole-grid best;
- regret: the whole-grid best of the model the subset ranks first minus the best model's (and in %
  of it); a tie where within the records' tolerance, max(2 × ``truth_sd``, 2 % of the best value)
  (``truth_sd``: sd of a difference of two FID∞ on the same samples); also in units of a search
  trial's own noise (``sd``: one FID of 256 samples over fresh noise, halved for 1 024 samples);
- cost: the share of the sweep's network evaluations kept, steps × (2 where guidance ≠ 1: the
  unconditional pass, skipped at guidance 1 by ``hpo.diffusion.sampler``) per combination.

    .venv/bin/python -m benchmarks.scoring_subset
"""

from __future__ import annotations

import json
import statistics
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from scipy.stats import spearmanr

from benchmarks.common import RESULTS, ROOT, write_result

FLOOR = 0.02  # sweep_truth's least tolerance: 2 % of the best value
TRIAL_SAMPLES = 1024  # a search trial's samples per combination (digits.yaml score.num_samples)
SD_SAMPLES = 256  # the count the records' ``sd`` is measured at
QUICKSTART = (1.0, 2.0, 3.0)  # the quickstart's guidance scales
PASS = 0.9  # ρ a subset needs on every dataset


@dataclass(frozen=True)
class Model:
    name: str
    truth: dict[str, float]  # "guidance/steps" → FID∞
    tol: float  # a regret within it is a tie
    trial_sd: float | None  # sd of one search trial's value (FID of 1 024), where recorded

    @property
    def best(self) -> float:
        return min(self.truth.values())


Rule = Callable[[Sequence[Model]], tuple[str, ...]]  # models the subset may be chosen on → subset


def guidance(label: str) -> float:
    return float(label.split("/")[0])


def steps(label: str) -> int:
    return int(label.split("/")[1])


def cost(label: str) -> int:
    """Network evaluations per sample: one per step, two under guidance (w ≠ 1)."""
    return steps(label) * (1 if guidance(label) == 1.0 else 2)


def common_grid(models: Sequence[Model]) -> list[Model]:
    """Each model restricted to the combinations every model of the list has."""
    shared = set.intersection(*(set(m.truth) for m in models))
    return [Model(m.name, {k: m.truth[k] for k in sorted(shared)}, m.tol, m.trial_sd) for m in models]


def load_sweep(path: Path = RESULTS / "sweep_truth.json") -> dict[str, list[Model]]:
    datasets = json.loads(path.read_text())["result"]["datasets"]
    out = {}
    for name, body in datasets.items():
        models = [
            Model(m["model"], m["truth"], max(2 * m["truth_sd"], FLOOR * min(m["truth"].values())),
                  m["sd"] * (SD_SAMPLES / TRIAL_SAMPLES) ** 0.5)
            for m in body["models"]
        ]  # fmt: skip
        out[name] = common_grid(models)
    return out


def quickstart(family: dict[str, list[Model]]) -> dict[str, list[Model]]:
    """``family`` on the quickstart's grid alone: guidance 1/2/3 (the records' 0.5 and 4 are its edges)."""
    return {
        d: [Model(m.name, {k: v for k, v in m.truth.items() if guidance(k) in QUICKSTART}, m.tol, m.trial_sd)
            for m in ms]
        for d, ms in family.items()
    }  # fmt: skip


def load_dpm(folder: Path = RESULTS / "sampler_frontier") -> dict[str, list[Model]]:
    out: dict[str, list[Model]] = {}
    for path in sorted(folder.glob("*.json")):
        body = json.loads(path.read_text())
        truth = {k.split("/", 1)[1].removesuffix("/karras"): v for k, v in body["truth"].items()
                 if k.startswith("dpmpp_2m/") and k.endswith("/karras")}  # fmt: skip
        model = Model(body["model"], truth, max(2 * body["noise_sd_robust"], FLOOR * min(truth.values())), None)
        out.setdefault(body["model"].rsplit("-", 1)[0], []).append(model)
    return {name: common_grid(models) for name, models in out.items()}


def mean_ranks(models: Sequence[Model]) -> dict[str, float]:
    """Each combination's rank within a model (1 the best), averaged over ``models``."""
    ranks: dict[str, list[int]] = {}
    for m in models:
        for i, k in enumerate(sorted(m.truth, key=m.truth.__getitem__)):
            ranks.setdefault(k, []).append(i + 1)
    return {k: statistics.fmean(r) for k, r in ranks.items()}


def top_k(k: int) -> Rule:
    def rule(models: Sequence[Model]) -> tuple[str, ...]:
        ranks = mean_ranks(models)
        return tuple(sorted(sorted(ranks, key=lambda c: (ranks[c], c))[:k], key=lambda c: (steps(c), guidance(c))))

    return rule


def per_steps(models: Sequence[Model]) -> tuple[str, ...]:
    """One guidance per steps count: at each, the combination of best mean rank."""
    ranks = mean_ranks(models)
    return tuple(min((c for c in ranks if steps(c) == s), key=lambda c: (ranks[c], c))
                 for s in sorted({steps(c) for c in ranks}))  # fmt: skip


def fixed(*labels: str) -> Rule:
    return lambda _models: labels


def middle(grid: Sequence[str]) -> str:
    """The middle guidance (the lower median) at the most steps it is recorded at."""
    scales = sorted({guidance(c) for c in grid})
    w = scales[(len(scales) - 1) // 2]
    return max((c for c in grid if guidance(c) == w), key=steps)


@dataclass(frozen=True)
class Outcome:
    models: int
    rho: float
    regret: float
    regret_pct: float
    tie: bool
    regret_trial_sd: float | None  # regret in units of the best model's trial sd
    cost: float  # share of the sweep's evaluations kept (mean over the held-out models)
    subsets: dict[str, int]  # the subsets chosen, "a+b" → how many models were judged on it


def judge(models: Sequence[Model], subsets: Sequence[tuple[str, ...]]) -> Outcome:
    """``subsets[i]``: the subset model i is scored on."""
    values = [min(m.truth[c] for c in s) for m, s in zip(models, subsets, strict=True)]
    bests = [m.best for m in models]
    first = min(range(len(models)), key=values.__getitem__)
    top = min(range(len(models)), key=bests.__getitem__)
    regret = bests[first] - bests[top]
    trial_sd = models[top].trial_sd
    grid = sum(cost(c) for c in models[0].truth)
    chosen: dict[str, int] = {}
    for s in subsets:
        chosen["+".join(s)] = chosen.get("+".join(s), 0) + 1
    return Outcome(
        len(models), float(spearmanr(values, bests).statistic), regret, 100 * regret / bests[top],
        regret <= models[top].tol, None if trial_sd is None else regret / trial_sd,
        statistics.fmean(sum(cost(c) for c in s) / grid for s in subsets), chosen,
    )  # fmt: skip


def lomo(models: Sequence[Model], rule: Rule) -> Outcome:
    return judge(models, [rule([o for o in models if o is not m]) for m in models])


def lodo(family: dict[str, list[Model]], dataset: str, rule: Rule) -> Outcome:
    others = [m for name, ms in family.items() if name != dataset for m in ms]
    subset = rule(common_grid(others))
    return judge(family[dataset], [subset] * len(family[dataset]))


def rules(family: dict[str, list[Model]]) -> dict[str, tuple[Rule, bool]]:
    """Name → (rule, whether it is chosen from data)."""
    shared = set.intersection(*(set(ms[0].truth) for ms in family.values()))
    grid = sorted(shared, key=lambda c: (steps(c), guidance(c)))
    out: dict[str, tuple[Rule, bool]] = {c: (fixed(c), False) for c in grid}
    out[f"middle guidance, most steps ({middle(grid)})"] = (fixed(middle(grid)), False)
    out["one guidance per steps count"] = (per_steps, True)
    out |= {f"best {k} by mean rank": (top_k(k), True) for k in (1, 2, 3)}
    return out


def evaluate(family: dict[str, list[Model]]) -> dict[str, dict[str, Outcome]]:
    """Rule (with " (lodo)" for the leave-one-dataset-out choice) → dataset → outcome."""
    out: dict[str, dict[str, Outcome]] = {}
    for name, (rule, fitted) in rules(family).items():
        out[name] = {d: lomo(ms, rule) for d, ms in family.items()}
        if fitted and len(family) > 1:
            out[name + " (lodo)"] = {d: lodo(family, d, rule) for d in family}
    return out


def pooled(outcomes: dict[str, Outcome]) -> dict[str, float | int]:
    """Over datasets, each ranked within itself."""
    os = list(outcomes.values())
    return {
        "models": sum(o.models for o in os),
        "datasets": len(os),
        "rho_min": min(o.rho for o in os),
        "rho_mean": sum(o.rho * o.models for o in os) / sum(o.models for o in os),
        "ties": sum(o.tie for o in os),
        "regret_pct_max": max(o.regret_pct for o in os),
        "cost": sum(o.cost * o.models for o in os) / sum(o.models for o in os),
        "passes": int(all(o.rho >= PASS and o.tie for o in os)),
    }


def cell(o: Outcome) -> str:
    return f"{o.rho:5.2f} {o.regret_pct:5.1f}%{' ' if o.tie else '✗'}"


def table(title: str, family: dict[str, list[Model]], results: dict[str, dict[str, Outcome]]) -> None:
    heads = [f"{d} ({len(ms)})" for d, ms in family.items()]
    print(f"\n{title}: ρ and regret per dataset (✗: regret beyond the tolerance); pooled over datasets")
    print(f"{'subset':<40} {'cost':>5} " + " ".join(f"{h:>14}" for h in heads) + "  min ρ  ties  max regret")
    for name, per in results.items():
        p = pooled(per)
        print(f"{name:<40} {p['cost']:5.0%} " + " ".join(f"{cell(per[d]):>14}" for d in family)
              + f"  {p['rho_min']:5.2f}  {p['ties']}/{p['datasets']}  {p['regret_pct_max']:6.1f}%"
              + ("  ← passes" if p["passes"] else ""))  # fmt: skip


def as_record(family: dict[str, list[Model]], results: dict[str, dict[str, Outcome]]) -> dict[str, object]:
    return {
        "grid": {d: sorted(ms[0].truth) for d, ms in family.items()},
        "models": {d: [m.name for m in ms] for d, ms in family.items()},
        "tolerance": {m.name: m.tol for ms in family.values() for m in ms},
        "subsets": {
            name: {"pooled": pooled(per), "datasets": {d: vars(o) for d, o in per.items()}}
            for name, per in results.items()
        },
    }


def records_commit(*paths: Path) -> dict[str, str]:
    """The commit that last wrote each record (the records do not name the commit they ran on)."""
    out = {}
    for p in paths:
        git = ["git", "log", "-1", "--format=%h %ad", "--date=short", "--", str(p.relative_to(ROOT))]
        out[str(p.relative_to(ROOT))] = subprocess.run(git, cwd=ROOT, capture_output=True, text=True).stdout.strip()
    return out


def main() -> None:
    sweep = load_sweep()
    families = {"sweep": sweep, "quickstart": quickstart(sweep), "dpm": load_dpm()}
    titles = {"sweep": "DDIM, guidance 0.5-4 × 10/20/30 steps (sweep_truth.json)",
              "quickstart": "DDIM, the quickstart's grid alone: guidance 1/2/3 × 10/20/30 (sweep_truth.json)",
              "dpm": "DPM-Solver++(2M) on EDM's spacing, 6 combinations (sampler_frontier/)"}  # fmt: skip
    results = {name: evaluate(family) for name, family in families.items()}
    for name, family in families.items():
        table(titles[name], family, results[name])
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    write_result(
        "scoring_subset",
        {
            "head": head.stdout.strip(),
            "records": records_commit(RESULTS / "sweep_truth.json", RESULTS / "sampler_frontier"),
            "pass": {"rho": PASS, "regret": "within max(2 truth_sd, 2 % of the best) on every dataset"},
            **{name: as_record(family, results[name]) for name, family in families.items()},
        },
    )


if __name__ == "__main__":
    main()
