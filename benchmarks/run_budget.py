"""Does `hpo run` pay? The same budget spent three ways on one folder, every final model scored alike.

Arms (each gets the whole budget, wall-clock, on one torch thread; run two side by side so they share
the machine alike):

- ``hand``: the seed person's settings (Adam lr 4e-4, batch 32, T = 500, linear) on `hpo init`'s
  network, trained for what the budget buys (`hpo train`, its kimg calibrated by a 2-kimg run first, its
  evaluation points paid for as `hpo run` pays its final run's);
- ``default``: the quickstart study's winner (lr 5.2e-3, batch 32, T = 1000, linear), no search;
- ``run``: `hpo run FOLDER --budget B --workers 1 --threads 1` at the default split (recorded under
  its name, e.g. ``run-50/10``: 50 % of the budget to the search, 10 % to the decision);
  ``run-25/10``-style arms at another split; ``run-wsd`` (``run-50/10-wsd``) with ``--lr-schedule wsd``.

Each arm's model is scored the same way: classifier-FID of 2 048 samples at the arm's own best sampling
combination, drawn twice with disjoint noise (seeds 0 and 1). ``--seed`` is the training seed (and the
study sampler's for ``run``). An arm's value is its mean over training seeds; the sd of a difference
between two arms is √(s_a²/n_a + s_b²/n_b), s the sd between an arm's seeds (models trained apart are
independent, so nothing pairs them): seed-to-seed spread, the sampling noise included.

Usage: python -m benchmarks.run_budget --dataset digits --budget 10m --arms hand,run,run-20/10 [--seed 0]
       python -m benchmarks.run_budget --table     (every record, as markdown)
Records: benchmarks/results/run_budget/DATASET-ARM-BUDGET-sSEED.json; work in ~/.cache/hpo-bench/run_budget."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from benchmarks.common import write_result
from hpo.analysis.noise import pair_sd
from hpo.analysis.tables import duration
from hpo.files import JsonObject
from hpo.planning.spec_yaml import QUICKSTART_LR, QUICKSTART_SCHEDULE, QUICKSTART_T
from hpo.records import TrialRecord
from hpo.run.budget import parse_budget
from hpo.run.ledger import Ledger
from hpo.run.sizing import speed_of
from hpo.run.split import Split, final_kimg

RESULTS = Path(__file__).parent / "results" / "run_budget"
WORK = Path.home() / ".cache" / "hpo-bench" / "run_budget"
SCORE_SAMPLES = 2048
ARMS = {
    "hand": {"lr": 4e-4, "batch_size": 32, "timesteps": 500, "schedule": "linear"},
    "default": {"lr": QUICKSTART_LR, "batch_size": 32, "timesteps": QUICKSTART_T, "schedule": QUICKSTART_SCHEDULE},
}
CALIBRATION_KIMG = 2.0
ARM_EVALS = 8  # evaluation points of the hand and default arms' run
STARTUP_S = 20.0  # `hpo train`'s imports, data and scorer set-up, counted against the budget


def hpo(*args: str, log: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    with log.open("a") as out:
        done = subprocess.run([sys.executable, "-m", "hpo", *args], env=env, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise SystemExit(f"hpo {' '.join(args)} failed ({done.returncode}); see {log}")


def folder_of(dataset: str) -> Path:
    folder = WORK / "folders" / dataset
    if not folder.exists():
        subprocess.run([sys.executable, "-m", "benchmarks.folders", dataset, str(folder)], check=True)
    return folder


def train_arm(arm: str, folder: Path, budget_s: float, work: Path, seed: int) -> Path:
    """`hpo init`'s spec with the arm's settings, trained for the budget; its export folder."""
    log, spec = work / "log.txt", work / "spec.yaml"
    hpo("init", str(folder), "-o", str(spec), "--image-size", "16", "--force", log=log)
    sets = [f"--set={k}={v}" for k, v in ARMS[arm].items()] + [f"--set=seed={seed}", "--threads=1"]
    started = time.monotonic()
    hpo("train", str(spec), *sets, f"--set=kimg={CALIBRATION_KIMG}", "--set=num_evals=1", "-o", str(work / "calib"),
        log=log)  # fmt: skip
    calib = json.loads((work / "calib" / "summary.json").read_text())
    speed = speed_of(TrialRecord(calib))
    left = budget_s - (time.monotonic() - started) - calib["score_seconds"] - STARTUP_S
    kimg = final_kimg(seconds=left, speed=speed, points=ARM_EVALS, trial_kimg=CALIBRATION_KIMG)  # as `hpo run` sizes
    hpo("train", str(spec), *sets, f"--set=kimg={kimg}", f"--set=num_evals={ARM_EVALS}", "-o", str(work / "final"),
        log=log)  # fmt: skip
    return export_train(work / "final", spec, ARMS[arm] | {"kimg": kimg, "num_evals": ARM_EVALS}, work / "model")


def export_train(run: Path, spec_path: Path, params: dict[str, Any], out: Path) -> Path:
    """An `hpo train` folder as an export (weights, spec, sampling), as `hpo run` exports its final run."""
    from hpo.records.export import Provenance
    from hpo.run.scored_run import BEST_WEIGHTS
    from hpo.service.export import Winner, write_export
    from hpo.spec.loading import load_spec
    from hpo.spec.sampling import SamplingConfig
    from hpo.training.checkpoint import load_checkpoint
    from hpo.training.data import load_data
    from hpo.training.model import net_info

    summary = json.loads((run / "summary.json").read_text())
    sampling = SamplingConfig.from_dict(summary["sampling"])
    spec = load_spec(spec_path, [f"train.{k}={v}" for k, v in params.items()])
    provenance = Provenance(study="benchmarks.run_budget", trial=-1, value=summary["value"],
                            metric_name=summary["metric_name"])  # fmt: skip
    winner = Winner(spec, sampling, net_info(spec.train, load_data(spec.data)), provenance)
    write_export(out, winner, load_checkpoint(run / BEST_WEIGHTS), written_by="benchmarks.run_budget")
    return out


def run_arm(arm: str, folder: Path, budget_s: float, work: Path, seed: int) -> Path:
    """``run-SEARCH/DECIDE`` (cosine, the default), or ``run-SEARCH/DECIDE-wsd`` (`--lr-schedule wsd`:
    the final run continues the winner's stable-phase state)."""
    split, _, schedule = arm.removeprefix("run-").partition("-")
    hpo("run", str(folder), "--budget", duration(budget_s), "-o", str(work / "run"), "--image-size", "16",
        "--threads", "1", "--workers", "1", "--seed", str(seed), "--split", split,
        "--lr-schedule", schedule or "cosine", log=work / "log.txt")  # fmt: skip
    return work / "run" / "model"


def score_export(model: Path, seeds: tuple[int, ...] = (0, 1)) -> list[float]:
    """Classifier-FID of :data:`SCORE_SAMPLES` samples at the export's own sampling, once per seed."""
    import dataclasses

    import torch

    from hpo.scoring.score import make_scorer, score
    from hpo.service.export import read_export, rebuild
    from hpo.training.data import load_data

    torch.set_num_threads(1)  # as the arms trained: two scorings side by side, one core each
    winner, state = read_export(model)
    data = load_data(winner.spec.data)
    config = dataclasses.replace(winner.spec.score, num_samples=SCORE_SAMPLES)
    scorer = make_scorer(config, data, device=torch.device("cpu"), cache_dir=winner.spec.data.cache_path / "scoring")
    net = rebuild(winner, state)
    frequencies = data.class_frequencies()
    return [score(scorer, net, winner.sampling, class_frequencies=frequencies, seed=s).fid for s in seeds]


@dataclass(frozen=True)
class BudgetRecord:
    """One arm's run at one budget and seed: what it spent, its export's score on two sample draws, and
    (`hpo run`) each phase's planned and spent seconds and state, and what it decided."""

    dataset: str
    arm: str
    budget_s: float
    seed: int
    spent_s: float
    fid: list[float]  # one per sample draw
    mean: float
    sd: float
    samples: int
    sampling: JsonObject
    ledger: JsonObject | None = None  # phase → [planned_s, spent_s, state]
    decisions: JsonObject | None = None

    def as_dict(self) -> JsonObject:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    @classmethod
    def read(cls, path: Path) -> BudgetRecord:
        """A record ``write_result`` wrote (its measures under "result"), or one written before it was used."""
        raw = json.loads(path.read_text())
        measured = raw["result"] if "benchmark" in raw else raw
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in measured.items() if k in names})


def measure(dataset: str, arm: str, budget_s: float, seed: int) -> BudgetRecord:
    name = f"{dataset}-{arm.replace('/', '_')}-{int(budget_s)}-s{seed}"
    work = WORK / name
    if work.exists():
        raise SystemExit(f"{work} exists: remove it to measure this arm again")
    work.mkdir(parents=True)
    folder = folder_of(dataset)
    started = time.monotonic()
    is_run = arm.startswith("run")
    model = run_arm(arm, folder, budget_s, work, seed) if is_run else train_arm(arm, folder, budget_s, work, seed)
    spent = time.monotonic() - started
    values = score_export(model)
    sampling: JsonObject = json.loads((model / "sampling.json").read_text())["sampling"]
    record = BudgetRecord(
        dataset, arm, budget_s, seed, round(spent, 1), values, sum(values) / len(values), pair_sd(values[0], values[1]),
        SCORE_SAMPLES, sampling,
    )  # fmt: skip
    if is_run:
        ledger = Ledger.from_dict(json.loads((model / "ledger.json").read_text()))
        phases: JsonObject = {p.name: [round(p.planned_s), round(p.spent_s), p.state] for p in ledger.phases}
        record = dataclasses.replace(
            record, arm=run_label(arm, work / "run"), ledger=phases, decisions=dataclasses.asdict(ledger.decisions)
        )
    write_result(name, record.as_dict(), folder=RESULTS)  # with the command, date, machine and threads
    print(json.dumps({"dataset": dataset, "arm": record.arm, "spent_s": record.spent_s, "fid": values,
                      "sd": record.sd}), flush=True)  # fmt: skip
    return record


def arm_stats(records: list[BudgetRecord]) -> tuple[float, float, int]:
    """(mean over training seeds, sd between them, seeds); one seed: its two draws' sampling sd."""
    means = [r.mean for r in records]
    if len(means) == 1:
        return means[0], records[0].sd, 1
    mean = sum(means) / len(means)
    return mean, math.sqrt(sum((m - mean) ** 2 for m in means) / (len(means) - 1)), len(means)


def run_label(arm: str, run: Path) -> str:
    """``arm``, marked with what an earlier version of `hpo run` did differently: a search without the
    quickstart's winner as its second trial, a final run with the trial's EMA half-life; and ``#71``
    for records of the code since issue 71 (so that a table does not pool them with older ones)."""
    from hpo.planning.spec_yaml import ema_halflife_kimg

    searched = yaml.safe_load((run / "spec.yaml").read_text())
    trained = yaml.safe_load((run / "model" / "spec.yaml").read_text())["train"]
    marks = [] if len(searched.get("baselines") or []) >= 2 else ["no known start"]
    if trained["ema_halflife_kimg"] != ema_halflife_kimg(trained["kimg"]):
        marks.append("trial's EMA")
    decisions = json.loads((run / "run.json").read_text())["decisions"]
    if "continued_kimg" in decisions:  # measured on issue 71's code: named starts, the lineage, trained kimg
        marks.append("#71")
    return f"{arm} ({', '.join(marks)})" if marks else arm


def table() -> str:
    records = [BudgetRecord.read(p) for p in sorted(RESULTS.glob("*.json"))]
    groups: dict[tuple[str, float, str], list[BudgetRecord]] = {}
    for r in records:
        groups.setdefault((r.dataset, r.budget_s, r.arm), []).append(r)
    rows = ["| dataset | budget | arm | seeds | spent | classifier-FID per seed (2 048, mean of 2 draws) | mean "
            "| sd between seeds |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for (dataset, budget, arm), rs in sorted(groups.items()):
        mean, sd, n = arm_stats(rs)
        spent = sorted(r.spent_s / budget for r in rs)
        per_seed = ", ".join(f"{r.mean:.4g}" for r in rs)
        rows.append(f"| {dataset} | {duration(budget)} | {arm} | {n} | {spent[0]:.0%}–{spent[-1]:.0%} | {per_seed} "
                    f"| {mean:.4g} | {sd:.2g} |")  # fmt: skip
    rows.append("")
    for (dataset, budget, arm), rs in sorted(groups.items()):
        if not arm.startswith("run"):
            continue
        for peer in ARMS:
            if (theirs := groups.get((dataset, budget, peer))) is None:
                continue
            (m_a, s_a, n_a), (m_b, s_b, n_b) = arm_stats(rs), arm_stats(theirs)
            sd = math.sqrt(s_a**2 / n_a + s_b**2 / n_b)
            rows.append(f"- {dataset}, {duration(budget)}: {arm} − {peer} = {m_a - m_b:+.4g} (sd of the difference "
                        f"{sd:.2g}; {n_a} and {n_b} seeds); {peer} / {arm} = {m_b / m_a:.2f}×")  # fmt: skip
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", choices=("digits", "shapes", "photos", "stills"), default="digits")
    parser.add_argument("--budget", default="10m")
    parser.add_argument("--arms", default="hand,default,run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--table", action="store_true")
    args = parser.parse_args()
    if args.table:
        print(table())
        return
    for arm in args.arms.split(","):
        if arm in ("run", "run-wsd"):  # records name the split they ran
            arm = f"run-{Split().words()}{arm.removeprefix('run')}"
        if arm not in ARMS and not arm.startswith("run-"):
            raise SystemExit(f"unknown arm {arm!r}; expected hand, default, run, run-wsd or run-SEARCH/DECIDE[-wsd]")
        measure(args.dataset, arm, parse_budget(args.budget), args.seed)


if __name__ == "__main__":
    main()
