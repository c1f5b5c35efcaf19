"""A crowd of workers on one study (``make test-crowd``): 24 ``hpo worker`` processes of one thread each
run a 100-trial study of the smallest real trials on PostgreSQL through PgBouncer in transaction
mode, with fewer server connections (20) than the workers hold clients. With chaos, a loop SIGKILLs
a random worker 12 times, paced by the trials ended (not by the clock: a fast machine drained the
queue after 9 kills of one every 5 s), and a supervisor restarts it (as Slurm's requeue or a Kubernetes
Job would), and PostgreSQL is restarted once; calm, nothing is killed. Both must end the same way:
exactly ``n_trials`` finished, every trial started once (a killed one's work goes on only in a
recorded retry), every failed trial retried, nothing RUNNING or WAITING, no traceback in any log.
The figures docs/scale.md quotes are printed: trials per minute, database time and statements per
trial (pg_stat_statements), peak server and client connections, the start lock's wait, RSS per
worker."""

from __future__ import annotations

import os
import random
import re
import signal
import statistics
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
import psycopg2
import pytest
from optuna.trial import TrialState

from hpo.service.trials import fail_reason
from tests.pg import PASSWORD, PgServer, start_server, stop_server
from tests.pgbouncer import Bouncer, start_bouncer, stop_bouncer
from tests.service_helpers import hpo, start_worker, write_spec

pytestmark = pytest.mark.crowd

WORKERS = int(os.environ.get("HPO_CROWD_WORKERS", "24"))
TRIALS = 100
POOL = 20  # server connections PgBouncer may open: fewer than the workers
KILLS = 12  # SIGKILLs of the chaos loop, spread over the first 85 % of the trials to end
TIMEOUT = 900.0


@pytest.fixture(scope="module")
def server() -> Iterator[PgServer]:
    pg = start_server("-c shared_preload_libraries=pg_stat_statements")
    try:
        yield pg
    finally:
        stop_server(pg)


@pytest.fixture(scope="module")
def bouncer(server: PgServer) -> Iterator[Bouncer]:
    b = start_bouncer(server, pool=POOL)
    try:
        yield b
    finally:
        stop_bouncer(b)


def spec_for(folder: Path, name: str) -> Path:
    """The smallest real trial: 6 training steps at 8 px, one evaluation, 32 samples scored; retries
    enough that a trial killed again and again is still retried; a grace period that 24 processes on
    2 cores never miss a heartbeat by."""
    return write_spec(
        folder,
        study={"name": name, "n_trials": TRIALS, "heartbeat_interval": 2, "grace_period": 15, "max_retries": 20},
        train={"kimg": 0.1, "num_evals": 1, "batch_size": 16},
        score={"num_samples": 32, "batch_size": 32},
        search={"lr": {"type": "float", "low": 1e-4, "high": 3e-3, "log": True}},
        sampling={"guidance_scale": 1.0, "steps": 2},
    )


@dataclass
class Crowd:
    """The workers, their logs, and what the chaos loop did to them."""

    url: str
    folder: Path
    procs: dict[int, subprocess.Popen[str]] = field(default_factory=dict)  # slot → its live process
    logs: list[Path] = field(default_factory=list)
    kills: int = 0
    restarts: int = 0
    rss_mb: dict[int, float] = field(default_factory=dict)  # pid → peak RSS seen
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self, slot: int) -> None:
        log = self.folder / f"worker-{slot}-{len(self.logs)}.log"
        self.logs.append(log)
        proc = start_worker(self.url, self.folder, "--worker-index", str(slot), "--poll", "1")
        # the helper pipes both streams; a crowd would fill the pipes: drain them into the log file
        threading.Thread(target=drain, args=(proc, log), daemon=True).start()
        self.procs[slot] = proc

    def kill_one(self, rng: random.Random) -> None:
        with self.lock:
            live = [s for s, p in self.procs.items() if p.poll() is None]
            if live:
                self.procs[rng.choice(live)].send_signal(signal.SIGKILL)
                self.kills += 1

    def restart_killed(self, done: bool) -> None:
        with self.lock:
            for slot, proc in list(self.procs.items()):
                if proc.poll() == -signal.SIGKILL and not done:
                    self.start(slot)
                    self.restarts += 1

    def sample_rss(self) -> None:
        for proc in list(self.procs.values()):
            try:
                status = Path(f"/proc/{proc.pid}/status").read_text()
            except OSError:
                continue
            kb = int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) if "VmRSS" in status else 0  # type: ignore[union-attr]
            self.rss_mb[proc.pid] = max(self.rss_mb.get(proc.pid, 0.0), kb / 1024)

    def alive(self) -> bool:
        return any(p.poll() is None for p in self.procs.values())


def drain(proc: subprocess.Popen[str], log: Path) -> None:
    with log.open("a") as out:
        assert proc.stderr is not None and proc.stdout is not None
        for line in proc.stderr:
            out.write(line)
        out.write(proc.stdout.read())


@dataclass
class Peaks:
    server: int = 0  # server connections to the study's database (pg_stat_activity)
    clients: int = 0  # client connections PgBouncer holds for it (SHOW POOLS: active + waiting)
    client_wait_s: int = 0  # the longest a client waited for a server connection (maxwait)


def watch(server: PgServer, bouncer: Bouncer, database: str, peaks: Peaks, crowd: Crowd, stop: threading.Event) -> None:
    """Every 0.5 s: connections on both sides of PgBouncer, and each worker's RSS (reconnecting
    through the database restart)."""
    direct = f"postgresql://hpo:{PASSWORD}@127.0.0.1:{server.port}/postgres"
    admin = f"postgresql://hpo:{PASSWORD}@127.0.0.1:{bouncer.port}/pgbouncer"
    while not stop.wait(0.5):
        crowd.sample_rss()
        try:
            with psycopg2.connect(direct, connect_timeout=3) as conn, conn.cursor() as cur:
                cur.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (database,))
                peaks.server = max(peaks.server, int(cur.fetchone()[0]))
            conn.close()
            conn = psycopg2.connect(admin, connect_timeout=3)
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute("SHOW POOLS")
                names = [d[0] for d in cur.description]
                for row in cur.fetchall():
                    pool = dict(zip(names, row, strict=True))
                    if pool["database"] == database:
                        peaks.clients = max(peaks.clients, int(pool["cl_active"]) + int(pool["cl_waiting"]))
                        peaks.client_wait_s = max(peaks.client_wait_s, int(pool["maxwait"]))
            conn.close()
        except psycopg2.Error:
            continue  # the server is restarting


def statements(server: PgServer, database: str) -> dict[str, Any]:
    """pg_stat_statements for ``database``: statements and execution time in all, and the start
    lock's row."""
    direct = f"postgresql://hpo:{PASSWORD}@127.0.0.1:{server.port}/{database}"
    with psycopg2.connect(direct) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT sum(calls), sum(total_exec_time) FROM pg_stat_statements "
            "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = %s)",
            (database,),
        )
        calls, total_ms = cur.fetchone()
        cur.execute(
            "SELECT calls, mean_exec_time, max_exec_time FROM pg_stat_statements "
            "WHERE query LIKE 'SELECT pg_try_advisory_lock%%' "
            "AND dbid = (SELECT oid FROM pg_database WHERE datname = %s)",
            (database,),
        )
        lock = cur.fetchone()
    conn.close()
    return {"calls": int(calls or 0), "seconds": float(total_ms or 0) / 1000, "lock": lock}


def kills_due(ended: int) -> int:
    """SIGKILLs the chaos loop owes once ``ended`` trials have ended: the k-th at 85 % * k / KILLS of
    them (8, 15, 22, ... 85 of 100), so every kill lands while trials run, on any machine's speed."""
    return min(KILLS, ended * KILLS // (TRIALS * 85 // 100))


def lock_waits(logs: str) -> list[tuple[float, float, float]]:
    """(p50, p99, max) of the start lock's wait from each worker's exit line."""
    pattern = r"waited p50 ([\d.]+) s, p99 ([\d.]+) s, max ([\d.]+) s"
    return [(float(a), float(b), float(c)) for a, b, c in re.findall(pattern, logs)]


@pytest.mark.parametrize("chaos", [True, False], ids=["chaos", "calm"])
def test_a_crowd_of_workers_through_pgbouncer_finishes_exactly_n_trials_each_started_once(
    server: PgServer, bouncer: Bouncer, tmp_path: Path, chaos: bool
) -> None:
    database = f"crowd_{'chaos' if chaos else 'calm'}"
    server.create_database(database)
    server.psql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements", db=database)
    url = bouncer.url(database)
    spec = spec_for(tmp_path, "crowd")
    launched = hpo("launch", str(spec), "--workers", "0", "--detach", "--skip-doctor", url=url, cwd=tmp_path)
    assert launched.returncode == 0, launched.stderr
    server.psql("SELECT pg_stat_statements_reset()", db=database)

    from hpo.service.storage import open_storage
    from hpo.service.urls import resolve_url

    study = optuna.load_study(study_name="crowd", storage=open_storage(resolve_url(url)))
    crowd, peaks, stop = Crowd(url, tmp_path), Peaks(), threading.Event()
    watcher = threading.Thread(target=watch, args=(server, bouncer, database, peaks, crowd, stop), daemon=True)
    watcher.start()
    rng = random.Random(0)
    started = time.monotonic()
    for slot in range(WORKERS):
        crowd.start(slot)
    restarted_db = not chaos
    try:
        while crowd.alive():
            assert time.monotonic() - started < TIMEOUT, "the crowd did not drain the queue in time"
            ended = sum(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in study.get_trials())
            done = ended >= TRIALS
            if chaos and not done and crowd.kills < kills_due(ended):
                crowd.kill_one(rng)
            if not restarted_db and ended >= TRIALS // 3:
                server.pg_ctl("restart", "-m", "fast")
                restarted_db = True
            crowd.restart_killed(done)
            time.sleep(0.5)
    finally:
        stop.set()
        for proc in crowd.procs.values():
            if proc.poll() is None:
                proc.kill()
    wall = time.monotonic() - started
    watcher.join(timeout=10)
    time.sleep(0.5)  # the drain threads write their last lines
    logs = "\n".join(p.read_text(errors="replace") for p in crowd.logs)

    trials = study.get_trials()
    by_state = {s.name: sum(t.state == s for t in trials) for s in TrialState}
    finished = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    failed = [t for t in trials if t.state == TrialState.FAIL]
    retried = {n for t in trials for n in t.system_attrs.get("retry_history", [])}  # every attempt a retry follows
    starts = re.findall(r"trial (\d+) started", logs)
    twice = sorted({n for n in starts if starts.count(n) > 1}, key=int)
    tail = logs[-6000:]
    assert len(finished) == TRIALS, f"{by_state}\n{tail}"
    assert by_state["RUNNING"] == 0 and by_state["WAITING"] == 0, f"{by_state}\n{tail}"
    assert not twice, f"trials started more than once outside a retry: {twice}\n{tail}"
    assert all(t.number in retried for t in failed), f"failed trials without a retry: {by_state}"
    reasons = {fail_reason(t) for t in failed}
    assert reasons <= {"worker_lost"}, reasons  # killed: its heartbeat stopped, no error of its own
    assert "Traceback" not in logs, logs[logs.index("Traceback") - 2000 :][:6000]
    assert PASSWORD not in logs
    if chaos:
        assert crowd.kills == KILLS and failed, (crowd.kills, by_state)  # the chaos reached running trials
    else:
        assert crowd.kills == 0 and not failed, by_state

    db = statements(server, database)
    waits = lock_waits(logs)
    rss = sorted(crowd.rss_mb.values())
    lock_calls, lock_mean, lock_max = db["lock"] or (0, 0.0, 0.0)
    p50 = statistics.median(w[0] for w in waits) if waits else 0.0
    p99 = max((w[1] for w in waits), default=0.0)
    print(
        f"\ncrowd ({'chaos' if chaos else 'calm'}): {WORKERS} workers, {TRIALS} trials finished in {wall:.0f} s "
        f"= {TRIALS / wall * 60:.1f} trials/min; {len(failed)} failed and retried, {crowd.kills} SIGKILLs, "
        f"{crowd.restarts} restarts, PostgreSQL restarted {'once' if chaos else 'never'}\n"
        f"  database: {db['calls'] / TRIALS:.0f} statements and {db['seconds'] / TRIALS * 1000:.0f} ms of execution "
        f"per finished trial ({db['calls']} statements, {db['seconds']:.1f} s in all)\n"
        f"  connections: peak {peaks.server} on the server (pool {POOL}), peak {peaks.clients} clients at PgBouncer, "
        f"longest client wait {peaks.client_wait_s} s\n"
        f"  start lock: {lock_calls} tries (pg_try_advisory_lock), mean {lock_mean:.1f} ms, max {lock_max:.0f} ms; "
        f"{len(waits)} workers' exit lines: median p50 {p50:.3f} s, largest p99 {p99:.3f} s\n"
        f"  RSS per worker: median {statistics.median(rss) if rss else 0:.0f} MB, max {max(rss, default=0):.0f} MB"
    )
