from __future__ import annotations

import signal
import socket
from pathlib import Path

import optuna
import pytest
import torch

from hpo.commands.worker import Slot, worker_slots
from hpo.errors import HpoError
from hpo.records import Placement, TrialRecord
from hpo.service.local import local_gpus, parse_gpus, worker_argv
from hpo.service.placement import host_gpu_id, placement_here
from hpo.service.storage import open_storage
from hpo.service.urls import resolve_url
from hpo.service.worker import WorkerOptions
from hpo.training.runtime import threads_per_worker


def test_gpu_children_get_their_own_index_and_never_the_storage_url() -> None:
    opts = WorkerOptions(
        url="postgresql://hpo:secret@db/hpo",
        study="s",
        exit_when_idle=True,
        artifact_dir=Path("/a"),
        cache_dir=Path("/c"),
        worker_index=2,
    )
    cmd = worker_argv(opts, gpus="0")
    assert cmd[3:8] == ["worker", "--gpus", "0", "--worker-index", "2"]
    assert {"--study", "s", "--exit-when-idle", "--cache-dir", "/c"} <= set(cmd)
    assert not any("secret" in part for part in cmd)


def test_unknown_gpu_is_a_one_line_error() -> None:
    with pytest.raises(HpoError, match="no GPU 7 on this machine"):
        parse_gpus("7")
    with pytest.raises(HpoError, match="expected 'all', 'cpu' or comma-separated indices"):
        parse_gpus("first")


def test_local_workers_run_on_the_cpu_when_there_is_no_gpu() -> None:
    import torch

    if torch.cuda.device_count():
        assert local_gpus(3) == [str(i % torch.cuda.device_count()) for i in range(3)]
    else:
        assert local_gpus(2) == ["cpu", "cpu"]
    assert parse_gpus("cpu") == []


def worker_pid(log: str) -> int:
    line = next(x for x in log.splitlines() if "worker started: " in x)
    return int(line.split(", pid ")[1].split(",")[0])


def test_a_process_names_the_host_gpu_it_was_given() -> None:
    assert host_gpu_id(0, "2,3") == "2" and host_gpu_id(1, "2,3") == "3"
    assert host_gpu_id(1, None) == "1" and host_gpu_id(0, "GPU-8f1c") == "GPU-8f1c"
    cpu = placement_here(torch.device("cpu"), 3)
    assert cpu.cell() == f"{socket.gethostname()}/w3 cpu" and cpu.gpu is None
    assert Placement.from_dict(cpu.as_dict()) == cpu and Placement.read(None) is None


def test_gp_runs_a_study_and_auto_continues_it_warm_started_through_worker_processes(tmp_path: Path) -> None:
    """sampler: gp (Optuna's GPSampler) proposes every trial after its start-up draws, in a real
    worker process; then a study with sampler: auto and a narrowed lr range is launched with
    --warm-start from it: the gp trials inside the new range are carried, the one outside is named,
    the best carried configuration runs first, and the new study ends at its own n_trials."""
    import optuna
    from optuna.trial import TrialState

    from hpo.records import CARRIED_ATTR
    from hpo.service.storage import open_storage
    from tests.service_helpers import hpo, start_worker, write_spec

    search = {"lr": {"type": "float", "low": 1e-4, "high": 3e-3, "log": True},
              "batch_size": {"type": "categorical", "choices": [16, 32]}}  # fmt: skip
    spec = write_spec(
        tmp_path, study={"name": "gp", "n_trials": 4}, sampler={"name": "gp", "seed": 0, "n_startup_trials": 2},
        pruner={"name": "none"}, search=search,
    )  # fmt: skip
    url = f"sqlite:///{tmp_path / 'hpo.db'}"

    logs: list[str] = []

    def serve() -> None:
        worker = start_worker(url, tmp_path)
        _, err = worker.communicate(timeout=400)
        logs.append(err)
        assert worker.returncode == 0 and "Traceback" not in err, err[-3000:]
        assert "LinAlgWarning" not in err and "singular" not in err, err[-3000:]  # 64 samples in 133 dimensions

    done = hpo("launch", str(spec), "--workers", "0", "--detach", "--skip-doctor", url=url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    serve()
    trials = optuna.load_study(study_name="gp", storage=open_storage(url)).get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 4
    assert len({t.params["lr"] for t in trials}) == 4
    for t in trials:  # the worker says where each trial ran, and logs its start and its end
        assert t.user_attrs["ran_on"] == {"host": socket.gethostname(), "worker": 0, "pid": worker_pid(logs[0]),
                                          "device": "cpu", "gpu": None, "gpu_name": None}  # fmt: skip
        assert f"trial {t.number} started: batch_size={t.params['batch_size']}, lr={t.params['lr']:.4g}" in logs[0]
        assert f"trial {t.number} ended: complete, value {t.value:.4g} after " in logs[0]
    # the next study's lr range holds the 3 lowest gp draws, not the highest
    lrs = sorted(t.params["lr"] for t in trials)
    narrowed = {**search, "lr": {"type": "float", "low": lrs[0], "high": (lrs[2] + lrs[3]) / 2, "log": True}}
    spec = write_spec(
        tmp_path, "auto.yaml", study={"name": "auto", "n_trials": 3}, sampler={"name": "auto", "seed": 0},
        pruner={"name": "none"}, search=narrowed,
    )  # fmt: skip
    done = hpo("launch", str(spec), "--warm-start", "gp", "--workers", "0", "--detach", "--skip-doctor",
               url=url, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "3 finished trial(s) carried" in done.stdout and "1 had lr outside the new range" in done.stdout
    serve()
    study = optuna.load_study(study_name="auto", storage=open_storage(url))
    own = [t for t in study.get_trials() if CARRIED_ATTR not in t.user_attrs]
    assert [t.state for t in own] == [TrialState.COMPLETE] * 3  # n_trials of its own; the carried 3 do not count
    best_inside = min((t for t in trials if t.params["lr"] <= lrs[2]), key=lambda t: float(t.value or 0))
    assert own[0].params == best_inside.params and own[0].user_attrs["warm_start"] == f"gp#{best_inside.number}"
    status = hpo("status", "auto", url=url, cwd=tmp_path)
    assert "3/3" in status.stdout, status.stdout


def test_per_gpu_places_k_processes_on_each_gpu_with_their_own_indices_and_split_threads() -> None:
    slots = worker_slots([2, 5], 2, index=1, threads=None)  # the second task or pod of an array
    assert [(s.gpu, s.worker_index) for s in slots] == [(2, 4), (2, 5), (5, 6), (5, 7)]
    assert {s.threads for s in slots} == {None}  # GPU processes keep torch's default
    cpu = worker_slots([], 3, index=0, threads=None)
    assert [s.gpu for s in cpu] == [None] * 3 and {s.threads for s in cpu} == {threads_per_worker(3)}
    assert worker_slots([], 1, index=5, threads=None) == [Slot(None, 5, None)]
    with pytest.raises(HpoError, match="--per-gpu 0: expected at least 1"):
        worker_slots([0], 0, index=0, threads=None)


def test_a_gpu_child_sees_only_its_gpu_and_is_told_it_shares_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import hpo.commands.worker as worker_module

    started: list[tuple[list[str], dict[str, str]]] = []

    class FakeChild:
        def __init__(self, argv: list[str], env: dict[str, str]) -> None:
            started.append((argv, env))

        def wait(self) -> int:
            return 0

    monkeypatch.setattr(worker_module, "parse_gpus", lambda gpus: [0, 1])
    monkeypatch.setattr(worker_module.subprocess, "Popen", FakeChild)
    before = signal.getsignal(signal.SIGTERM)
    worker_module.run_workers(WorkerOptions(url="postgresql://hpo:secret@db/hpo"), "all", None, per_gpu=2)
    assert signal.getsignal(signal.SIGTERM) is before  # the parent's forwarding ends with its children
    assert [env["CUDA_VISIBLE_DEVICES"] for _, env in started] == ["0", "0", "1", "1"]
    for i, (argv, _) in enumerate(started):
        assert argv[argv.index("--gpus") + 1] == "0" and argv[argv.index("--worker-index") + 1] == str(i)
        assert argv[argv.index("--sharing") + 1] == "2" and not any("secret" in a for a in argv)


def test_an_oom_with_shared_gpus_names_per_gpu_and_the_doctor() -> None:
    from hpo.service.objective import oom_detail

    assert oom_detail(64, 1) == "CUDA out of memory at batch_size=64"
    assert "with 3 worker processes on this GPU (--per-gpu 3)" in oom_detail(64, 3)
    assert "hpo doctor SPEC --per-gpu 3" in oom_detail(64, 3)


def test_per_gpu_on_the_cpu_runs_two_worker_processes_that_share_one_study(pg_url: str, tmp_path: Path) -> None:
    from tests.service_helpers import hpo, write_spec

    spec = write_spec(tmp_path, study={"name": "pergpu", "n_trials": 4})
    launched = hpo("launch", str(spec), "--workers", "0", "--detach", "--skip-doctor", url=pg_url, cwd=tmp_path)
    assert launched.returncode == 0, launched.stderr
    args = ["worker", "--study", "pergpu", "--exit-when-idle", "--poll", "0.5", "--gpus", "cpu", "--per-gpu", "2"]
    done = hpo(*args, "--artifacts", str(tmp_path / "artifacts"), url=pg_url, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    threads = threads_per_worker(2)
    assert f"started 2 worker processes: w0 cpu, {threads} threads, w1 cpu, {threads} threads" in done.stderr
    study = optuna.load_study(study_name="pergpu", storage=open_storage(resolve_url(pg_url)))
    placements = [TrialRecord.of(t).ran_on for t in study.get_trials()]
    assert len(placements) == 4 and all(p is not None for p in placements)
    assert {p.worker for p in placements if p} == {0, 1} and len({p.pid for p in placements if p}) == 2


def test_the_rung_decides_once_across_worker_processes_and_the_continuations_resume(
    pg_url: str, tmp_path: Path
) -> None:
    """pruner: rung on PostgreSQL, two `hpo worker` processes: six trials pause at the rung, the
    decision is taken once (under the start lock) by whichever process finds all six there, and the
    best two resume from their checkpoints in the shared artifact folder, whoever runs them."""
    from tests.service_helpers import hpo, write_spec

    pruner = {"name": "rung", "min_resource": 1, "keep": 2}
    spec = write_spec(tmp_path, study={"name": "rungpg", "n_trials": 6, "max_retries": 2}, pruner=pruner)
    launched = hpo("launch", str(spec), "--workers", "0", "--detach", "--skip-doctor", url=pg_url, cwd=tmp_path)
    assert launched.returncode == 0, launched.stderr
    args = ["worker", "--study", "rungpg", "--exit-when-idle", "--poll", "0.5", "--gpus", "cpu", "--per-gpu", "2"]
    artifacts = tmp_path / "artifacts"
    done = hpo(*args, "--artifacts", str(artifacts), url=pg_url, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr.count("rung at evaluation point 1 reached by all 6 trials: continuing") == 1
    assert done.stderr.count("resumed from") == 2
    study = optuna.load_study(study_name="rungpg", storage=open_storage(resolve_url(pg_url)))
    trials = study.get_trials()
    paused = [t for t in trials if TrialRecord.of(t).continues is None]
    best = sorted(paused, key=lambda t: (t.intermediate_values[1], t.number))[:2]
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(paused) == 6 and all(t.state == optuna.trial.TrialState.PRUNED for t in paused)
    assert sorted(TrialRecord.of(t).continues or -1 for t in complete) == sorted(t.number for t in best)
    assert len({p.pid for t in trials if (p := TrialRecord.of(t).ran_on)}) == 2  # both processes trained
    assert not list((artifacts / "checkpoints").rglob("*.pt"))
