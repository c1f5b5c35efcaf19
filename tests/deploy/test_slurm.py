"""``hpo slurm``: the job script and its secrets here; a real one-node Slurm cluster (``make
test-slurm``, root) runs a study on PostgreSQL through a job array, with one task preempted and
requeued mid-trial and then cancelled mid-trial."""

from __future__ import annotations

import os
import stat
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
from optuna.trial import FrozenTrial, TrialState

from hpo.commands.slurm import SlurmJob, job_script, write_job
from hpo.records import TrialRecord
from hpo.service.storage import open_storage
from hpo.service.study import progress
from hpo.service.trials import retried_numbers, root_number
from hpo.service.urls import resolve_url
from tests.pg import PASSWORD
from tests.service_helpers import hpo, write_spec
from tests.slurm_cluster import SlurmCluster, missing_tools, start_cluster, stop_cluster

URL = f"postgresql://hpo:{PASSWORD}@db.example:5432/hpo"


def test_the_job_script_runs_one_worker_per_task_with_unique_indices_and_no_secret(tmp_path: Path) -> None:
    job = SlurmJob(
        study="bikes", tasks=8, gpus_per_task=2, per_gpu=3, cpus_per_task=12, partition="gpu", time="04:00:00",
        sbatch_args=("--account=lab",), folder=tmp_path / "slurm",
    )  # fmt: skip
    script = job_script(job)
    for directive in ("--array=0-7", "--requeue", "--gres=gpu:2", "--partition=gpu", "--time=04:00:00"):
        assert f"#SBATCH {directive}\n" in script
    assert "#SBATCH --account=lab\n" in script and "#SBATCH --cpus-per-task=12\n" in script
    assert f"--output={tmp_path}/slurm/logs/%A_%a.log" in script
    worker = next(line for line in script.splitlines() if line.startswith("exec "))
    assert "--study bikes --exit-when-idle --gpus all --per-gpu 3 --threads 2" in worker
    assert worker.endswith('--worker-index "$SLURM_ARRAY_TASK_ID"')  # its 6 processes: 6·i … 6·i+5
    assert "postgresql" not in script


def test_the_storage_url_lives_in_a_file_only_its_owner_reads(tmp_path: Path) -> None:
    job = SlurmJob(study="bikes", tasks=2, folder=tmp_path / "slurm")
    (tmp_path / "slurm").mkdir()
    job.env_path.write_text("old")
    job.env_path.chmod(0o644)
    write_job(job, URL)
    assert stat.S_IMODE(job.env_path.stat().st_mode) == 0o600
    assert job.env_path.read_text().startswith(f"HPO_STORAGE={URL}\n")
    assert os.access(job.script_path, os.X_OK) and PASSWORD not in job.script_path.read_text()


def test_a_cpu_job_splits_its_cpus_between_its_processes(tmp_path: Path) -> None:
    job = SlurmJob(study="s", tasks=1, gpus_per_task=0, per_gpu=2, cpus_per_task=5, folder=tmp_path)
    script = job_script(job)
    assert "--gres" not in script and "--gpus cpu --per-gpu 2 --threads 2" in script


def test_the_embedded_database_and_a_missing_study_are_one_line_errors(tmp_path: Path, pg_url: str) -> None:
    result = hpo("slurm", "bikes", "--array", "2", cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.startswith("error: hpo slurm needs a database every node")
    assert "Traceback" not in result.stderr
    result = hpo("slurm", "nosuch", "--array", "2", url=pg_url, cwd=tmp_path)
    assert result.returncode == 2 and "no study named 'nosuch'" in result.stderr
    assert not (tmp_path / ".hpo").exists()  # nothing written for a study that is not there


def test_dry_run_writes_the_script_and_names_how_to_submit_it(tmp_path: Path, pg_url: str) -> None:
    spec = write_spec(tmp_path, study={"name": "dry", "n_trials": 3})
    assert (
        hpo("launch", str(spec), "--workers", "0", "--detach", "--skip-doctor", url=pg_url, cwd=tmp_path).returncode
        == 0
    )
    result = hpo("slurm", "dry", "--array", "5", "--dry-run", "--gpus-per-task", "0", url=pg_url, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "#SBATCH --array=0-4" in result.stdout and "sbatch .hpo/slurm/dry/job.sbatch" in result.stdout
    assert "note: 5 worker processes for 3 trial(s) left to start" in result.stderr
    assert "--array 3 would not" in result.stderr
    assert PASSWORD not in result.stdout + result.stderr
    assert (tmp_path / ".hpo/slurm/dry/storage.env").exists()


def queue(spec: Path, url: str, folder: Path) -> int:
    """Create the study with no local worker: the job array's tasks run its trials."""
    return hpo("launch", str(spec), "--workers", "0", "--detach", "--skip-doctor", url=url, cwd=folder).returncode


def test_a_finished_study_and_a_machine_without_sbatch_are_one_line_errors(
    tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = write_spec(tmp_path, study={"name": "ended", "n_trials": 2})
    assert queue(spec, pg_url, tmp_path) == 0
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))  # no sbatch on it
    result = hpo("slurm", "ended", "--array", "1", url=pg_url, cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.startswith("error: sbatch not found: run hpo slurm on a Slurm")
    assert "Traceback" not in result.stderr
    study = optuna.load_study(study_name="ended", storage=open_storage(resolve_url(pg_url)))
    for value in (1.0, 2.0):
        study.add_trial(optuna.trial.create_trial(value=value))
    result = hpo("slurm", "ended", "--array", "1", url=pg_url, cwd=tmp_path)
    assert result.returncode == 2 and "study 'ended' is finished (2 of 2 trials)" in result.stderr
    assert len(study.get_trials()) == 2  # nothing stored was touched


@pytest.fixture(scope="module")
def cluster() -> Iterator[SlurmCluster]:
    missing = missing_tools()
    if missing or os.geteuid() != 0:
        why = f"Slurm is not installed ({', '.join(missing)})" if missing else "a test cluster needs root"
        if os.environ.get("CI"):
            pytest.fail(f"{why}: make test-slurm installs it")
        pytest.skip(why)
    found = start_cluster()
    yield found
    stop_cluster(found)


def wait_for(what: str, condition, folder: Path, timeout: float = 240) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(folder.glob("*.log")))
            raise AssertionError(f"timed out waiting for {what}; the tasks' logs:\n{logs}")
        time.sleep(0.3)


def training_on(study: optuna.Study, worker: int, checkpoints: Path) -> FrozenTrial | None:
    """The trial worker ``worker`` is training, once it has reported a point and saved a checkpoint."""
    for t in study.get_trials(deepcopy=False):
        placement = TrialRecord.of(t).ran_on
        mine = t.state == TrialState.RUNNING and placement is not None and placement.worker == worker
        if mine and t.intermediate_values and (checkpoints / f"trial-{root_number(t)}.pt").exists():
            return t
    return None


def wait_for_training(what: str, study: optuna.Study, worker: int, checkpoints: Path, logs: Path) -> FrozenTrial:
    """The trial ``training_on`` found when the wait ended: asking again a moment later could find it
    pruned or finished, so the wait keeps what it saw."""
    seen: list[FrozenTrial] = []

    def found() -> bool:
        trial = training_on(study, worker, checkpoints)
        seen.extend([trial] if trial is not None else [])
        return trial is not None

    wait_for(what, found, logs)
    return seen[-1]


def stopped(study: optuna.Study, number: int) -> bool:
    trial = study.get_trials(deepcopy=False)[number]
    return trial.state == TrialState.FAIL and trial.user_attrs.get("fail_reason") == "worker_stopped"


def restarted(cluster: SlurmCluster, task: str) -> bool:
    """Slurm holds a requeued task back for about two minutes: once it is pending, let it start now."""
    state = cluster.tasks(task.split("_")[0]).get(task)
    if state == "PENDING":
        cluster.run("scontrol", "update", f"JobId={task}", "StartTime=now", check=False)
    return state == "RUNNING"


@pytest.mark.slurm
def test_a_job_array_finishes_the_study_through_a_requeue_and_a_cancel(
    cluster: SlurmCluster, pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    n_trials = 8
    spec = write_spec(tmp_path, study={"name": "slurm", "n_trials": n_trials}, train={"kimg": 4, "num_evals": 8})
    assert (
        hpo("launch", str(spec), "--workers", "0", "--detach", "--skip-doctor", url=pg_url, cwd=tmp_path).returncode
        == 0
    )
    study = optuna.load_study(study_name="slurm", storage=open_storage(resolve_url(pg_url)))
    started = time.monotonic()
    result = hpo(
        "slurm", "slurm", "--array", "2", "--gpus-per-task", "0", "--cpus-per-task", "1",
        "--artifacts", str(tmp_path / "artifacts"), "--reports", str(tmp_path / "reports"), url=pg_url, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    job = result.stdout.split()[2].rstrip(":")
    assert result.stdout.startswith(f"submitted job {job}: 2 task(s)"), result.stdout
    checkpoints = tmp_path / "artifacts" / "checkpoints" / "slurm"
    logs = tmp_path / ".hpo/slurm/slurm/logs"

    preempted = wait_for_training("task 1 to train", study, 1, checkpoints, logs)
    cluster.run("scontrol", "requeue", f"{job}_1")  # what preemption with PreemptMode=REQUEUE does
    signalled = time.monotonic()
    wait_for("the preempted trial to be stopped", lambda: stopped(study, preempted.number), logs, timeout=60)
    to_stop = [time.monotonic() - signalled]
    wait_for("task 1 to run again", lambda: restarted(cluster, f"{job}_1"), logs, timeout=90)
    cancelled = wait_for_training("task 1 to train again", study, 1, checkpoints, logs)
    cluster.run("scancel", f"{job}_1")
    signalled = time.monotonic()
    wait_for("the cancelled trial to be stopped", lambda: stopped(study, cancelled.number), logs, timeout=60)
    to_stop.append(time.monotonic() - signalled)
    wait_for("the job array to end", lambda: not cluster.tasks(job), logs, timeout=600)
    elapsed = time.monotonic() - started

    trials = study.get_trials()
    p = progress(study, n_trials, trials)
    assert p.done and p.slots == n_trials and p.failed == 0, p
    retries = retried_numbers(trials)  # the cancelled trial may itself be the preempted one's retry
    for number in (preempted.number, cancelled.number):
        retry = trials[retries[number]]
        assert retry.params == trials[number].params
    final = trials[retries[cancelled.number]]
    assert final.state in (TrialState.COMPLETE, TrialState.PRUNED), final
    if retries[preempted.number] != cancelled.number:
        assert trials[retries[preempted.number]].state in (TrialState.COMPLETE, TrialState.PRUNED)
    texts = {path.name: path.read_text() for path in logs.glob("*.log")}
    assert set(texts) == {f"{job}_0.log", f"{job}_1.log"}
    assert "restart 1" in texts[f"{job}_1.log"]  # the requeued task came back and appended to its log
    assert sum(text.count("resumed from") for text in texts.values()) >= 2
    assert not any(PASSWORD in text for text in texts.values())
    assert PASSWORD not in cluster.run("scontrol", "show", "job", job, check=False)
    lines = [line for text in texts.values() for line in text.splitlines() if "resumed from" in line]
    resumed = ", ".join(line.split("resumed from ")[1].split("/")[-1] for line in lines)  # trial-N.pt at step S
    stops = ", ".join(f"{t:.1f} s" for t in to_stop)
    print(f"\nslurm: {n_trials} trials through 2 tasks, one requeued and one cancelled mid-trial: {elapsed:.0f} s")
    print(f"slurm: from the signal to the trial stopped: {stops}; resumed from {resumed}")
