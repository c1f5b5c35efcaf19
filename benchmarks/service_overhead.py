"""Storage overhead per trial (ask + reports + tell) on PostgreSQL: hpo's worker loop (start lock,
exact trial count, one trial per optimize call) against plain Optuna doing the same trials.

Training is replaced by sleeps; workers are threads, each with its own storage and connection pool,
as separate processes would have. 1, 8, 24 and 32 concurrent workers; studies already holding 100
and 1 000 finished trials. Starts its own throwaway PostgreSQL server (as in the tests); with
``--pgbouncer``, both arms reach it through a PgBouncer of its own in transaction mode with 20 server
connections (what docs/scale.md recommends past ~45 workers).

    .venv/bin/python -m benchmarks.service_overhead [--quick] [--pgbouncer]

Targets: ours <= 1.1x plain Optuna, and < 2 % of a 60-second trial at 32 workers.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import optuna

from benchmarks.common import write_result
from hpo.service.context import StudyContext
from hpo.service.pruning import make_pruner
from hpo.service.storage import Heartbeat, ResilientStorage, open_storage
from hpo.service.study import create_or_resume, make_sampler
from hpo.service.urls import resolve_url
from hpo.service.worker import Worker, WorkerOptions
from hpo.spec.loading import load_spec
from tests.pg import PgServer, start_server, stop_server
from tests.pgbouncer import Bouncer, start_bouncer, stop_bouncer
from tests.service_helpers import write_spec

REPORTS, SLEEP = 4, 0.05  # per trial: 4 intermediate reports, 50 ms of "training" before each
Runner = Callable[[str, Path, str, int, int], float]  # (url, spec, study, workers, trials per worker) -> wall s


def fake_training(trial: optuna.Trial) -> float:
    x = trial.suggest_float("lr", 1e-4, 1e-2, log=True)
    for step in range(1, REPORTS + 1):
        time.sleep(SLEEP)
        trial.report(x * step, step=step)
        if trial.should_prune():
            raise optuna.TrialPruned
    return x


def prefill(url: str, name: str, n: int) -> None:
    study = optuna.load_study(study_name=name, storage=open_storage(url))
    dist: dict[str, optuna.distributions.BaseDistribution] = {
        "lr": optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True)
    }
    for i in range(n):
        lr = 1e-4 * (1 + i % 97)
        study.add_trial(
            optuna.create_trial(
                params={"lr": lr},
                distributions=dist,
                value=lr,
                intermediate_values={s: lr * s for s in range(1, REPORTS + 1)},
            )
        )


def run_threads(n_workers: int, body: object) -> float:
    threads = [threading.Thread(target=body, args=(i,)) for i in range(n_workers)]  # type: ignore[arg-type]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start


def ours(url: str, spec_path: Path, name: str, n_workers: int, per_worker: int) -> float:
    spec = load_spec(spec_path)

    def objective(trial: optuna.Trial, ctx: StudyContext, on_start: object) -> float:
        on_start()  # type: ignore[operator]
        return fake_training(trial)

    def body(i: int) -> None:
        worker = Worker(
            WorkerOptions(url=url, study=name, max_trials=per_worker, poll_seconds=0.05, worker_index=i),
            objective=objective,
        )
        study, storage = _study(url, spec, name, i)
        ctx = StudyContext(name, spec, None, worker.device, Path("unused"), Path("unused"), storage)  # type: ignore[arg-type]
        worker.contexts[name] = (ctx, study, storage)
        worker.serve()

    return run_threads(n_workers, body)


def _study(url: str, spec: object, name: str, i: int) -> tuple[optuna.Study, ResilientStorage]:
    storage = open_storage(url, Heartbeat(60, None, 2))
    study = optuna.load_study(study_name=name, storage=storage, sampler=make_sampler(spec, i), pruner=make_pruner(spec))  # type: ignore[arg-type]
    return study, storage


def plain(url: str, spec_path: Path, name: str, n_workers: int, per_worker: int) -> float:
    spec = load_spec(spec_path)

    def body(i: int) -> None:
        study, _ = _study(url, spec, name, i)
        study.optimize(fake_training, n_trials=per_worker)

    return run_threads(n_workers, body)


RUNNERS: tuple[tuple[str, Runner], ...] = (("plain", plain), ("hpo", ours))


def trials_per_worker(n_workers: int) -> int:
    return max(2, 64 // n_workers)


@dataclass(frozen=True)
class Database:
    server: PgServer
    bouncer: Bouncer | None  # the way in, when given

    def create(self, name: str) -> str:
        direct = self.server.create_database(name)
        return resolve_url(self.bouncer.url(name) if self.bouncer is not None else direct)


def overhead(db: Database, folder: Path, label: str, runner: Runner, n_workers: int, finished: int) -> float:
    """Seconds per trial that ``runner``'s workers spend outside the sleeps, on a fresh database whose
    study already holds ``finished`` trials."""
    per_worker = trials_per_worker(n_workers)
    name = f"{label}-{n_workers}-{finished}"
    url = db.create(name.replace("-", "_"))
    spec_path = write_spec(
        folder,
        f"{name}.yaml",
        study={"name": name, "n_trials": finished + n_workers * per_worker},
        search={"lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True}},
        sampler={"name": "tpe", "seed": 0, "n_startup_trials": 10},
    )
    create_or_resume(load_spec(spec_path), open_storage(url))
    prefill(url, name, finished)
    wall = runner(url, spec_path, name, n_workers, per_worker)
    trials = n_workers * per_worker
    # wall × workers is the workers' total time; subtract the sleeps they all did
    return (wall * n_workers - trials * REPORTS * SLEEP) / trials


def measure_row(db: Database, folder: Path, n_workers: int, finished: int) -> dict[str, float]:
    """One configuration, plain Optuna then hpo: its printed row, and the row's figures by name."""
    plain_s, hpo_s = (overhead(db, folder, label, runner, n_workers, finished) for label, runner in RUNNERS)
    row = {
        "workers": n_workers, "finished": finished, "trials_per_worker": trials_per_worker(n_workers),
        "plain_ms_per_trial": plain_s * 1000, "hpo_ms_per_trial": hpo_s * 1000, "ratio": hpo_s / plain_s,
        "percent_of_60s": hpo_s / 60 * 100,
    }  # fmt: skip
    print(
        f"{n_workers:7d} {finished:8d} {row['plain_ms_per_trial']:15.1f} {row['hpo_ms_per_trial']:13.1f} "
        f"{row['ratio']:6.2f} {row['percent_of_60s']:8.2f}%"
    )
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer configurations")
    parser.add_argument(
        "--pgbouncer", action="store_true", help="through PgBouncer (transaction mode, 20 server connections)"
    )
    args = parser.parse_args()
    logging.disable(logging.INFO)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    configs = (
        [(1, 100), (8, 100), (24, 100)]
        if args.quick
        else [(1, 100), (8, 100), (24, 100), (32, 100), (8, 1000), (32, 1000)]
    )
    server = start_server()
    bouncer = start_bouncer(server, pool=20) if args.pgbouncer else None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            print(
                f"{'workers':>7} {'finished':>8} {'plain ms/trial':>15} {'hpo ms/trial':>13} {'ratio':>6} "
                f"{'% of 60 s':>9}"
            )
            db = Database(server, bouncer)
            rows = [measure_row(db, Path(tmp), n_workers, finished) for n_workers, finished in configs]
    finally:
        if bouncer is not None:
            stop_bouncer(bouncer)
        stop_server(server)
    name = "service_overhead_pgbouncer" if args.pgbouncer else "service_overhead"
    write_result(name, {
        "mode": "quick" if args.quick else "full", "reports_per_trial": REPORTS, "sleep_s_per_report": SLEEP,
        "pgbouncer": args.pgbouncer, "rows": rows,
    })  # fmt: skip


if __name__ == "__main__":
    main()
